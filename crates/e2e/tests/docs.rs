//! The examples of README.md and docs/*.md, run as written: every session marked
//! `<!-- doctest -->` (markup and masking: `omp_e2e::doctest`) runs in a fresh directory that
//! links `dist`, `.deps`, `tests` and `examples` of this checkout, with `dist/bin` first on
//! PATH, and each command's output must be what the page shows. A failure names the page, the
//! command's line, the expected and the actual output. `OMP_DOCTEST_PAGE=docs/check.md` runs
//! one page; `OMP_DOCTEST_JOBS=N` runs N sessions at once (default 2).

// Always compiled; run as tests once `make dist` has run, and always under CI (see build.rs).
#![cfg_attr(not(omp_e2e), allow(dead_code))]

use omp_e2e::doctest::{extract, output_matches, Example};
use omp_e2e::{dist_lib, repo_root, scratch, skip_without};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Instant;

/// What the documented commands call besides `dist/`.
const TOOLS: [&str; 7] =
    ["clang-19", "clang-22", "clang++-22", "flang-new-19", "flang-new-22", "llvm-objcopy-22", "mpirun"];

/// Separates the commands' outputs in a session's combined output.
const MARK: &str = "@@omprs-doctest-command@@";

/// Ends a command's output, followed by its exit status.
const STATUS: &str = "@@omprs-doctest-status ";

/// Seconds one session may take before it is stopped (and fails).
const SESSION_LIMIT_S: u32 = 120;

fn pages(root: &Path) -> Vec<PathBuf> {
    let mut pages = vec![root.join("README.md")];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root.join("docs"))
        .expect("docs/")
        .map(|e| e.expect("docs/ entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    docs.sort();
    pages.extend(docs);
    pages
}

fn on_path(tool: &str) -> bool {
    Command::new("sh")
        .arg("-c")
        .arg(format!("command -v {tool}"))
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// `s` as one single-quoted shell word.
fn quoted(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// The script of one session: setup (stops the session on failure), then each command between
/// a marker line and its exit status, all output on one stream in the order written.
fn script(ex: &Example) -> String {
    let mut s = String::from("exec 2>&1 </dev/null\ntrap 'kill $(jobs -p) 2>/dev/null; wait' EXIT\n");
    for line in &ex.setup {
        let _ = writeln!(s, "{{ {line}\n}} >.doctest-setup.log 2>&1 || {{ echo \"setup failed: \"{}; cat .doctest-setup.log; exit 97; }}", quoted(line));
    }
    for cmd in &ex.commands {
        let _ =
            writeln!(s, "echo {MARK}\n{}\n__doctest_status=$?; echo; echo \"{STATUS}$__doctest_status@@\"", cmd.text);
    }
    s
}

/// bash's own line about a command that died of a signal (`bash: line 3: 4242 Aborted …`): a
/// terminal shows it too, but it names the script's line and the pid, not the program's output.
fn shell_notice(line: &str) -> bool {
    line.starts_with("bash: ")
        && [" Aborted", " Killed", " Segmentation fault", " Terminated"].iter().any(|s| line.contains(s))
}

/// A command's output without the status line the script adds, and that status (`None`: the
/// command did not get that far).
fn split_status(output: &str) -> (&str, Option<i32>) {
    match output.rsplit_once(STATUS) {
        Some((text, status)) => {
            // The script's `echo` ends output that lacks a final newline; drop what it added.
            let text = text.strip_suffix('\n').unwrap_or(text);
            (text, status.trim().trim_end_matches("@@").parse().ok())
        }
        None => (output, None),
    }
}

/// Runs one session; returns the failures, described.
fn run(page: &str, ex: &Example, root: &Path, dir: &Path) -> Vec<String> {
    for link in ["dist", ".deps", "tests", "examples"] {
        std::os::unix::fs::symlink(root.join(link), dir.join(link)).expect("link into the session directory");
    }
    for f in &ex.files {
        std::fs::write(dir.join(&f.name), &f.contents).expect("write the example's file");
    }
    let path = format!("{}:{}", root.join("dist/bin").display(), std::env::var("PATH").unwrap_or_default());
    let mut cmd = Command::new("timeout");
    cmd.args(["-k", "5", &SESSION_LIMIT_S.to_string(), "bash", "-c", &script(ex)]).current_dir(dir).env("PATH", path);
    // The page's commands set what they need; nothing of the test's own environment leaks in.
    for (k, _) in std::env::vars() {
        if k.starts_with("LIBOMPTARGET_") || k.starts_with("OMP_") || k == "LD_LIBRARY_PATH" {
            cmd.env_remove(k);
        }
    }
    let out = cmd.output().expect("run bash");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let place = format!("{page}:{}", ex.line);
    if out.status.code() == Some(124) || out.status.code() == Some(137) {
        return vec![format!("{place}: the session ran past {SESSION_LIMIT_S} s; its output:\n{text}")];
    }
    let separator = format!("{MARK}\n");
    let mut outputs = text.split(&separator);
    let before = outputs.next().unwrap_or_default();
    if out.status.code() == Some(97) && outputs.clone().next().is_none() {
        return vec![format!("{place}: {before}")];
    }
    let outputs: Vec<&str> = outputs.collect();
    let mut failures = Vec::new();
    for (i, c) in ex.commands.iter().enumerate() {
        let (output, status) = outputs.get(i).map_or(("", None), |o| split_status(o));
        let actual: Vec<String> = output.lines().filter(|l| !shell_notice(l)).map(str::to_string).collect();
        // A command the page shows no output for must also succeed: a silent failure is one.
        let failed_silently = c.expected.is_empty() && status != Some(0);
        if outputs.len() <= i || failed_silently || !output_matches(&c.expected, &actual) {
            failures.push(format!(
                "{page}:{}: `{}`\n--- expected (the page)\n{}\n--- actual\n{}\n---",
                c.line,
                c.text,
                c.expected.join("\n"),
                match status {
                    None => "(the command did not finish)".to_string(),
                    Some(0) => actual.join("\n"),
                    Some(n) => format!("{}\n(exit status {n})", actual.join("\n")),
                }
            ));
        }
    }
    failures
}

/// One session to run: its page and where its directory goes.
struct Session {
    page: String,
    example: Example,
    dir: PathBuf,
}

/// How many sessions run at once: `OMP_DOCTEST_JOBS`, else 2 (each is mostly one compiler or
/// program at a time).
fn jobs() -> usize {
    std::env::var("OMP_DOCTEST_JOBS").ok().and_then(|j| j.parse().ok()).filter(|&j| j > 0).unwrap_or(2)
}

#[cfg_attr(omp_e2e, test)]
fn documented_examples_do_what_the_pages_show() {
    let root = repo_root();
    dist_lib();
    if let Some(missing) = TOOLS.iter().find(|t| !on_path(t)) {
        return skip_without(
            "documented_examples_do_what_the_pages_show",
            &format!("{missing} is not installed (run `make setup`)"),
        );
    }
    let only = std::env::var("OMP_DOCTEST_PAGE").ok().filter(|p| !p.is_empty());
    let base = scratch("docs");
    let mut sessions = Vec::new();
    for page in pages(&root) {
        let name = page.strip_prefix(&root).expect("page under the root").display().to_string();
        if only.as_ref().is_some_and(|o| *o != name) {
            continue;
        }
        let text = std::fs::read_to_string(&page).expect("read the page");
        for example in extract(&text).unwrap_or_else(|e| panic!("{name}: {e}")) {
            let dir = base.join(format!("{}-{}", name.replace('/', "_"), example.line));
            std::fs::create_dir_all(&dir).expect("session directory");
            sessions.push(Session { page: name.clone(), example, dir });
        }
    }
    let commands: usize = sessions.iter().map(|s| s.example.commands.len()).sum();
    assert!(only.is_some() || commands > 0, "no doctest markup found in README.md or docs/");
    let started = Instant::now();
    let next = AtomicUsize::new(0);
    let results: Vec<Mutex<Vec<String>>> = sessions.iter().map(|_| Mutex::new(Vec::new())).collect();
    std::thread::scope(|scope| {
        for _ in 0..jobs() {
            scope.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(s) = sessions.get(i) else { break };
                let t = Instant::now();
                *results[i].lock().expect("results") = run(&s.page, &s.example, &root, &s.dir);
                let n = s.example.commands.len();
                eprintln!("{}:{}: {n} command(s), {:.1} s", s.page, s.example.line, t.elapsed().as_secs_f64());
            });
        }
    });
    let failures: Vec<String> = results.into_iter().flat_map(|r| r.into_inner().expect("results")).collect();
    eprintln!(
        "{commands} documented commands in {} sessions, {:.0} s",
        sessions.len(),
        started.elapsed().as_secs_f64()
    );
    assert!(
        failures.is_empty(),
        "{} documented command(s) do not do what the page shows:\n\n{}",
        failures.len(),
        failures.join("\n\n")
    );
}
