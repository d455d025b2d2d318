//! The documentation's examples as tests: finds the marked examples in a markdown page, masks
//! what varies from run to run, and compares a command's output with the page.
//!
//! Markup (HTML comments, invisible on the rendered page), each right before a fenced block:
//!
//! * `<!-- doctest -->`: the block is a session. A line starting with `$ ` is a command (a
//!   line ending in `\` continues it on the next line); the lines up to the next command are
//!   its expected output, stdout and stderr together, in order.
//! * `<!-- doctest file=NAME -->`: the block's text is written to `NAME` before the session
//!   that follows it runs.
//! * `<!-- doctest-setup` … `-->` (or `<!-- doctest-setup: COMMAND -->`): the comment's lines
//!   are shell commands run (output not compared; a failure is) before the session that
//!   follows it, in the same shell.
//!
//! Files and setup belong to the next session on the page. In expected output, `…` matches
//! any text within a line, and a line that is only `…` matches any number of lines (an
//! elision). Both sides are masked first (see [`mask`]): addresses, pids, kernel ids, the
//! driver's image sizes, loopback ports. A command the page shows no output for must succeed
//! (the runner, `tests/docs.rs`, checks its exit status).

use std::fmt;

/// One command of a session and the output the page shows for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Command {
    /// 1-based line of the page where the command starts.
    pub line: usize,
    /// The shell command, continuation lines joined as written (backslash-newline kept).
    pub text: String,
    /// The lines the page shows after it.
    pub expected: Vec<String>,
}

/// A file an example writes before its session runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct File {
    pub name: String,
    pub contents: String,
}

/// One session with what it needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Example {
    /// 1-based line of the session's opening fence.
    pub line: usize,
    pub files: Vec<File>,
    /// Shell lines run before the commands.
    pub setup: Vec<String>,
    pub commands: Vec<Command>,
}

/// A markup error: the page's line and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MarkupError {
    pub line: usize,
    pub message: String,
}

impl fmt::Display for MarkupError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "line {}: {}", self.line, self.message)
    }
}

/// What a directive asks of the block after it.
enum Directive {
    Session,
    File(String),
}

/// The examples of one page, in page order.
pub fn extract(page: &str) -> Result<Vec<Example>, MarkupError> {
    let lines: Vec<&str> = page.lines().collect();
    let mut examples = Vec::new();
    let mut files = Vec::new();
    let mut setup = Vec::new();
    let mut pending: Option<(usize, Directive)> = None;
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i].trim();
        let number = i + 1;
        if let Some(rest) = line.strip_prefix("<!-- doctest-setup") {
            let (body, end) = comment_body(&lines, i, rest)?;
            setup.extend(body.into_iter().filter(|l| !l.trim().is_empty()));
            i = end + 1;
            continue;
        }
        if let Some(rest) = line.strip_prefix("<!-- doctest") {
            let args = rest.strip_suffix("-->").ok_or_else(|| err(number, "a doctest directive is one line"))?.trim();
            let directive = match args.strip_prefix("file=") {
                None if args.is_empty() => Directive::Session,
                Some(name) if !name.is_empty() && !name.contains(char::is_whitespace) && !name.contains('/') => {
                    Directive::File(name.to_string())
                }
                _ => return Err(err(number, &format!("unknown doctest directive `{args}`"))),
            };
            if pending.is_some() {
                return Err(err(number, "two doctest directives before one block"));
            }
            pending = Some((number, directive));
            i += 1;
            continue;
        }
        if line.starts_with("```") {
            let (body, end) = fenced_body(&lines, i)?;
            match pending.take() {
                Some((_, Directive::File(name))) => {
                    let mut contents = body.join("\n");
                    contents.push('\n');
                    files.push(File { name, contents });
                }
                Some((_, Directive::Session)) => {
                    let commands = session(&body, number + 1)?;
                    examples.push(Example {
                        line: number,
                        files: std::mem::take(&mut files),
                        setup: std::mem::take(&mut setup),
                        commands,
                    });
                }
                None => {}
            }
            i = end + 1;
            continue;
        }
        if let Some((at, _)) = &pending {
            if !line.is_empty() {
                return Err(err(*at, "a doctest directive must be followed by a fenced block"));
            }
        }
        i += 1;
    }
    if let Some((at, _)) = pending {
        return Err(err(at, "a doctest directive must be followed by a fenced block"));
    }
    if !files.is_empty() || !setup.is_empty() {
        return Err(err(lines.len(), "doctest files or setup with no session after them"));
    }
    Ok(examples)
}

fn err(line: usize, message: &str) -> MarkupError {
    MarkupError { line, message: message.to_string() }
}

/// The lines of an HTML comment that starts at `start` (`rest`: what follows the directive on
/// that line) and the index of its last line.
fn comment_body(lines: &[&str], start: usize, rest: &str) -> Result<(Vec<String>, usize), MarkupError> {
    if let Some(inline) = rest.trim().strip_suffix("-->") {
        let inline = inline.trim();
        return Ok((vec![inline.strip_prefix(':').unwrap_or(inline).trim().to_string()], start));
    }
    let mut body = vec![rest.trim().to_string()];
    for (j, l) in lines.iter().enumerate().skip(start + 1) {
        if let Some(last) = l.trim_end().strip_suffix("-->") {
            body.push(last.to_string());
            return Ok((body, j));
        }
        body.push(l.to_string());
    }
    Err(err(start + 1, "doctest-setup comment never ends (`-->`)"))
}

/// The lines inside the fenced block that opens at `start` (without the fence's indentation,
/// as in a list item), and the index of its closing fence.
fn fenced_body<'a>(lines: &[&'a str], start: usize) -> Result<(Vec<&'a str>, usize), MarkupError> {
    let fence_len = lines[start].trim().chars().take_while(|&c| c == '`').count();
    let indent = lines[start].len() - lines[start].trim_start_matches(' ').len();
    for (j, l) in lines.iter().enumerate().skip(start + 1) {
        let t = l.trim();
        if t.chars().take_while(|&c| c == '`').count() >= fence_len && t.chars().all(|c| c == '`') {
            let body = lines[start + 1..j]
                .iter()
                .map(|b| {
                    let blanks = b.len() - b.trim_start_matches(' ').len();
                    &b[blanks.min(indent)..]
                })
                .collect();
            return Ok((body, j));
        }
    }
    Err(err(start + 1, "fenced block never closed"))
}

/// A session's commands; `first` is the page line of `body[0]`.
fn session(body: &[&str], first: usize) -> Result<Vec<Command>, MarkupError> {
    let mut commands: Vec<Command> = Vec::new();
    let mut continued = false;
    for (k, l) in body.iter().enumerate() {
        if continued {
            let cmd = commands.last_mut().expect("a continued command");
            cmd.text.push('\n');
            cmd.text.push_str(l);
            continued = l.ends_with('\\');
        } else if let Some(text) = l.strip_prefix("$ ") {
            commands.push(Command { line: first + k, text: text.to_string(), expected: Vec::new() });
            continued = text.ends_with('\\');
        } else if let Some(cmd) = commands.last_mut() {
            cmd.expected.push(l.to_string());
        } else {
            return Err(err(first + k, "a doctest session starts with a `$ ` command"));
        }
    }
    if commands.is_empty() {
        return Err(err(first.saturating_sub(1), "a doctest session without a `$ ` command"));
    }
    Ok(commands)
}

/// What varies from run to run, masked the same way on the page and in the output:
/// hex numbers (`0x7ffc…`: addresses, handles) become `0x…`; `pid 4242` becomes `pid …`; the
/// device and file ids in a kernel's name (`__omp_offloading_fe00_57e013_`) become
/// `__omp_offloading_…_`; `KernelId(3)` becomes `KernelId(…)`; an image's `size=15640` (the
/// driver's listing) becomes `size=…`; a loopback port (`127.0.0.1:50051`, a test server's
/// free port) becomes `127.0.0.1:…`. Trailing blanks go.
pub fn mask(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut rest = line.trim_end();
    while !rest.is_empty() {
        if let Some(after) = rest.strip_prefix("0x").filter(|a| a.starts_with(|c: char| c.is_ascii_hexdigit())) {
            out.push_str("0x…");
            rest = after.trim_start_matches(|c: char| c.is_ascii_hexdigit());
        } else if let Some(after) = rest.strip_prefix("pid ").filter(|a| a.starts_with(|c: char| c.is_ascii_digit())) {
            out.push_str("pid …");
            rest = after.trim_start_matches(|c: char| c.is_ascii_digit());
        } else if let Some(after) = rest.strip_prefix("size=").filter(|a| a.starts_with(|c: char| c.is_ascii_digit())) {
            out.push_str("size=…");
            rest = after.trim_start_matches(|c: char| c.is_ascii_digit());
        } else if let Some(after) =
            rest.strip_prefix("127.0.0.1:").filter(|a| a.starts_with(|c: char| c.is_ascii_digit()))
        {
            out.push_str("127.0.0.1:…");
            rest = after.trim_start_matches(|c: char| c.is_ascii_digit());
        } else if let Some(after) = rest.strip_prefix("KernelId(").and_then(|a| a.split_once(')')) {
            out.push_str("KernelId(…)");
            rest = after.1;
        } else if let Some(after) = rest.strip_prefix("__omp_offloading_").and_then(kernel_ids) {
            out.push_str("__omp_offloading_…_");
            rest = after;
        } else {
            let c = rest.chars().next().expect("non-empty");
            out.push(c);
            rest = &rest[c.len_utf8()..];
        }
    }
    out
}

/// After `__omp_offloading_`: skips `HEX_HEX_` (device id, file id) and returns the rest.
fn kernel_ids(s: &str) -> Option<&str> {
    let mut rest = s;
    for _ in 0..2 {
        let digits = rest.len() - rest.trim_start_matches(|c: char| c.is_ascii_hexdigit()).len();
        if digits == 0 {
            return None;
        }
        rest = rest[digits..].strip_prefix('_')?;
    }
    Some(rest)
}

/// Whether one masked output line matches one masked page line, where `…` on the page
/// matches any text.
pub fn line_matches(expected: &str, actual: &str) -> bool {
    let parts: Vec<&str> = expected.split('…').collect();
    if parts.len() == 1 {
        return expected == actual;
    }
    let (first, last) = (parts[0], parts[parts.len() - 1]);
    if !actual.starts_with(first) || actual.len() < first.len() + last.len() || !actual.ends_with(last) {
        return false;
    }
    // Each middle part at its leftmost place leaves the most room for the rest.
    let mut rest = &actual[first.len()..actual.len() - last.len()];
    for part in &parts[1..parts.len() - 1] {
        match rest.find(part) {
            Some(at) => rest = &rest[at + part.len()..],
            None => return false,
        }
    }
    true
}

/// Whether the output's lines match the page's, after masking both: a page line that is only
/// `…` matches any number of output lines.
pub fn output_matches(expected: &[String], actual: &[String]) -> bool {
    let expected: Vec<String> = expected.iter().map(|l| mask(l)).collect();
    let actual: Vec<String> = actual.iter().map(|l| mask(l)).collect();
    // matches[j]: whether the expected lines so far match actual[..j].
    let mut matches = vec![false; actual.len() + 1];
    matches[0] = true;
    for e in &expected {
        let mut next = vec![false; actual.len() + 1];
        if e.trim() == "…" {
            let mut reached = false;
            for j in 0..=actual.len() {
                reached |= matches[j];
                next[j] = reached;
            }
        } else {
            for j in 1..=actual.len() {
                next[j] = matches[j - 1] && line_matches(e, &actual[j - 1]);
            }
        }
        matches = next;
    }
    matches[actual.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(s: &[&str]) -> Vec<String> {
        s.iter().map(|l| l.to_string()).collect()
    }

    const PAGE: &str = r"# Title

<!-- doctest file=a.c -->
```c
int main(void) { return 0; }
```

<!-- doctest-setup
cc a.c -o a
-->
<!-- doctest -->
```console
$ ./a && echo ok
ok
$ ls \
    a.c
a.c
```

```sh
$ not a test
```
";

    #[test]
    fn extracts_files_setup_and_commands_with_their_lines() {
        let examples = extract(PAGE).unwrap();
        assert_eq!(examples.len(), 1, "the unmarked block is no example");
        let ex = &examples[0];
        assert_eq!(ex.line, 12);
        assert_eq!(ex.files, vec![File { name: "a.c".into(), contents: "int main(void) { return 0; }\n".into() }]);
        assert_eq!(ex.setup, strings(&["cc a.c -o a"]));
        assert_eq!(ex.commands.len(), 2);
        assert_eq!(ex.commands[0], Command { line: 13, text: "./a && echo ok".into(), expected: strings(&["ok"]) });
        assert_eq!(ex.commands[1].line, 15);
        assert_eq!(ex.commands[1].text, "ls \\\n    a.c");
        assert_eq!(ex.commands[1].expected, strings(&["a.c"]));
    }

    #[test]
    fn files_and_setup_go_to_the_next_session_only() {
        let page = "<!-- doctest-setup: true -->\n<!-- doctest -->\n```\n$ a\n```\n<!-- doctest -->\n```\n$ b\n```\n";
        let examples = extract(page).unwrap();
        assert_eq!(examples[0].setup, strings(&["true"]));
        assert!(examples[1].setup.is_empty());
    }

    #[test]
    fn a_block_in_a_list_item_loses_its_indentation_only() {
        let page = "- item:\n\n  <!-- doctest -->\n  ```console\n  $ prog\n    indented output\n  ```\n";
        let ex = &extract(page).unwrap()[0];
        assert_eq!(ex.commands[0].text, "prog");
        assert_eq!(ex.commands[0].expected, strings(&["  indented output"]));
    }

    #[test]
    fn bad_markup_is_an_error_with_its_line() {
        let cases = [
            ("<!-- doctest -->\ntext\n```\n$ a\n```\n", 1, "followed by a fenced block"),
            ("<!-- doctest -->\n```\noutput first\n```\n", 3, "starts with a `$ ` command"),
            ("<!-- doctest -->\n```\n```\n", 2, "without a `$ ` command"),
            ("<!-- doctest file=../x -->\n```\n```\n", 1, "unknown doctest directive"),
            ("<!-- doctest -->\n```\n$ a\n", 2, "never closed"),
            ("<!-- doctest file=a.c -->\n```\nx\n```\n", 4, "no session after them"),
            ("<!-- doctest-setup\nmake\n", 1, "never ends"),
        ];
        for (page, line, what) in cases {
            let e = extract(page).unwrap_err();
            assert_eq!(e.line, line, "{page:?}: {e}");
            assert!(e.message.contains(what), "{page:?}: {e}");
        }
    }

    #[test]
    fn masks_addresses_pids_kernel_ids() {
        assert_eq!(mask("at 0x7ffc78651750 and 0x0, 0x…"), "at 0x… and 0x…, 0x…");
        assert_eq!(mask("worker (pid 4242) ended"), "worker (pid …) ended");
        assert_eq!(
            mask("kernel __omp_offloading_fe00_57e013__Z3sumPdm_l5 at"),
            "kernel __omp_offloading_…__Z3sumPdm_l5 at"
        );
        assert_eq!(mask("launch(KernelId(94211), 1 arguments)  "), "launch(KernelId(…), 1 arguments)");
        assert_eq!(mask("image=elf size=16416 producer"), "image=elf size=… producer");
        assert_eq!(mask("at 127.0.0.1:34571 (protocol 2)"), "at 127.0.0.1:… (protocol 2)");
        // Not an address, not a pid, not a kernel id: left alone.
        assert_eq!(mask("0xg pid x __omp_offloading_x 10 bytes"), "0xg pid x __omp_offloading_x 10 bytes");
    }

    #[test]
    fn ellipsis_matches_within_a_line() {
        assert!(line_matches("a … b", "a 12 ms b"));
        assert!(line_matches("…", ""));
        assert!(line_matches("x…y…z", "xyz"));
        assert!(line_matches("(10 times, …)", "(10 times, 7812.5 KiB, 0.6 ms)"));
        assert!(!line_matches("a … b", "a 12 ms c"));
        assert!(!line_matches("ab…ba", "aba"), "the two ends must not overlap");
        assert!(!line_matches("exact", "exact "));
    }

    #[test]
    fn elision_line_matches_any_number_of_lines() {
        let expected = strings(&["first", "…", "last"]);
        assert!(output_matches(&expected, &strings(&["first", "last"])));
        assert!(output_matches(&expected, &strings(&["first", "a", "b", "last"])));
        assert!(!output_matches(&expected, &strings(&["first", "a", "b"])));
        assert!(output_matches(&strings(&["…"]), &[]));
        assert!(!output_matches(&[], &strings(&["unexpected"])));
    }

    #[test]
    fn masked_output_matches_the_page() {
        let page = strings(&[
            "omptarget error: Kernel __omp_offloading_10303_2a1c3b1_sum_l5 failed: worker (pid 4242) at 0x7ffc78651750",
        ]);
        let run =
            strings(&["omptarget error: Kernel __omp_offloading_fe00_abc_sum_l5 failed: worker (pid 77) at 0x1000"]);
        assert!(output_matches(&page, &run));
    }

    /// A deliberately wrong snippet: the page claims a line the program does not print (and
    /// leaves out one it does, without `…`). Each must fail.
    #[test]
    fn a_wrong_page_does_not_match() {
        let page = "<!-- doctest -->\n```\n$ prog\nomptarget --> device 0: initialized\nomptarget --> binary registered\n```\n";
        let expected = &extract(page).unwrap()[0].commands[0].expected;
        let printed = strings(&["omptarget --> device 0: initialized", "omptarget --> device 1: initialized"]);
        assert!(!output_matches(expected, &printed), "a line that no code prints");
        let printed = strings(&[
            "omptarget --> device 0: initialized",
            "omptarget --> device 1: initialized",
            "omptarget --> binary registered",
        ]);
        assert!(!output_matches(expected, &printed), "a line left out without `…`");
        let elided = strings(&["omptarget --> device 0: initialized", "…", "omptarget --> binary registered"]);
        assert!(output_matches(&elided, &printed), "the same, marked");
    }
}
