//! flang 19–22 start some `map` sections of allocatable, pointer and assumed-shape arrays at the
//! wrong element (`map(from: c(2:3,i,j))` maps `c(2:3,i+…)`): the runtime then copies other
//! elements than the program names, and the kernel, which indexes the array through its
//! descriptor, writes past the device memory that was mapped. No runtime can see it (the entries
//! are self-consistent), so ompcc checks each Fortran source with target constructs before its
//! host front end runs: it reads flang's HLFIR ([`hlfir`]), compiles the host from corrected
//! HLFIR where it can (flang 20–22) and stops with an error where it cannot (flang 19).
//! See docs/ompcc.md, "Fortran array sections".

mod contiguous;
pub mod hlfir;

use crate::error::{Error, Result};
use crate::exec::{Cmd, Runner};
use crate::toolchain::Tool;
use hlfir::{Finding, Lowering, Problem};
use std::path::Path;
use std::process::{Command, Output, Stdio};

/// `--fortran-section-check=`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Mode {
    /// Correct what can be corrected; an error for the rest.
    #[default]
    Fix,
    /// Correct what can be corrected; a warning for the rest.
    Warn,
    /// No check (no extra front-end run).
    Off,
}

impl Mode {
    pub fn parse(v: &str) -> Option<Mode> {
        match v {
            "fix" => Some(Mode::Fix),
            "warn" => Some(Mode::Warn),
            "off" => Some(Mode::Off),
            _ => None,
        }
    }
}

/// HLFIR larger than this is not read (the check is skipped, with a note).
const MAX_HLFIR: u64 = 256 << 20;
/// Sources larger than this are checked without looking for directives first.
const MAX_PREFILTER: u64 = 64 << 20;

/// What the check needs of one host front end.
pub struct FrontEnd<'a> {
    pub runner: Runner,
    pub mode: Mode,
    pub tool: &'a Tool,
    /// The driver command that writes the host bitcode (`-emit-llvm -c … -o bc`).
    pub cmd: &'a Cmd,
    /// The source, as the user named it.
    pub src: &'a str,
    /// Scratch paths for the HLFIR and the corrected HLFIR.
    pub hlfir: &'a Path,
    pub corrected: &'a Path,
}

/// Checks the source of a Fortran host front end. Returns true when it wrote the host bitcode
/// itself, from corrected HLFIR (the caller then skips `cmd`); false when `cmd` is to run as is.
pub fn host_front_end(fe: &FrontEnd) -> Result<bool> {
    let Some(lowering) = Lowering::of_flang(fe.tool.major) else { return Ok(false) };
    // Standard input cannot be read twice.
    if fe.mode == Mode::Off || fe.runner.dry_run || fe.src == "-" || !may_map_sections(Path::new(fe.src)) {
        return Ok(false);
    }
    let Some(fc1) = fc1_line(fe.cmd) else { return Ok(false) };
    let (prog, args) = (&fc1[0], &fc1[1..]);

    // 1. HLFIR, with locations. A source with errors fails here: the front end reports them.
    let mut hl = Cmd::new(prog.clone(), format!("{}: map section check", fe.src));
    hl.args(with_output(args, "-emit-hlfir", fe.hlfir)).args(["-mmlir", "-mlir-print-debuginfo"]);
    let Some(out) = run_quiet(fe.runner, &hl) else { return Ok(false) };
    if !out.status.success() {
        return Ok(false);
    }
    let text = match std::fs::metadata(fe.hlfir) {
        Ok(m) if m.len() > MAX_HLFIR => {
            fe.runner.note(&format!("{}: HLFIR over {MAX_HLFIR} bytes: map sections not checked", fe.src));
            return Ok(false);
        }
        _ => std::fs::read_to_string(fe.hlfir)
            .map_err(|e| Error::new(format!("cannot read {}: {e}", fe.hlfir.display())))?,
    };
    let scan = hlfir::scan(&text, lowering);
    if scan.findings.is_empty() && scan.corrected.is_none() {
        return Ok(false);
    }

    let major = fe.tool.major;
    // A section that is probably not contiguous is a warning: its array may have a dimension
    // of extent 1 there.
    for f in scan.findings.iter().filter(|f| f.problem == Problem::ProbablyNotContiguous) {
        crate::diag::warning(explain(f, major, fe.src));
    }
    let unfixable: Vec<&Finding> =
        scan.findings.iter().filter(|f| !f.fixable && f.problem != Problem::ProbablyNotContiguous).collect();
    if !unfixable.is_empty() {
        return refuse(fe, &unfixable);
    }
    if scan.findings.iter().all(|f| f.problem == Problem::ProbablyNotContiguous) && scan.corrected.is_none() {
        return Ok(false);
    }
    let Some(corrected) = scan.corrected else { return Ok(false) };
    for f in &scan.findings {
        fe.runner.note(&format!("{}: corrected flang {major}'s start of section `{}`", at(f, fe.src), f.name));
    }
    std::fs::write(fe.corrected, corrected)
        .map_err(|e| Error::new(format!("cannot write {}: {e}", fe.corrected.display())))?;

    // 2. The host bitcode from the corrected HLFIR. The source's own diagnostics came with step 1.
    let mut bc = Cmd::new(prog.clone(), format!("{}: host compile (corrected map sections)", fe.src));
    bc.args(from_mlir(args, fe.corrected));
    let o = run_quiet(fe.runner, &bc);
    if let Some(o) = o.as_ref().filter(|o| o.status.success()) {
        crate::diag::write(&out.stderr);
        let seen = String::from_utf8_lossy(&out.stderr).into_owned();
        let new: String = String::from_utf8_lossy(&o.stderr)
            .lines()
            .filter(|l| !seen.contains(l))
            .map(|l| format!("{l}\n"))
            .collect();
        crate::diag::write(new.as_bytes());
        return Ok(true);
    }
    // flang cannot always read back the HLFIR it printed (assumed-shape arrays in a target
    // region, flang 22): the source must then say it in the form flang lowers right.
    let why = o.map_or_else(|| "cannot run".to_string(), |o| first_error(&o.stderr));
    fe.runner.note(&format!("{}: corrected HLFIR not compiled ({why})", fe.src));
    if scan.findings.is_empty() {
        // Only corrections that matter for arrays with other lower bounds: build as flang does.
        return Ok(false);
    }
    crate::diag::write(&out.stderr);
    refuse(fe, &scan.findings.iter().collect::<Vec<_>>())
}

/// The error for sections ompcc cannot correct (a warning under `--fortran-section-check=warn`,
/// and the build goes on as flang compiles it).
fn refuse(fe: &FrontEnd, findings: &[&Finding]) -> Result<bool> {
    let text: Vec<String> = findings.iter().map(|f| explain(f, fe.tool.major, fe.src)).collect();
    if fe.mode == Mode::Warn {
        for t in &text {
            crate::diag::warning(t);
        }
        return Ok(false);
    }
    Err(Error::new(text.join("\nompcc: error: ")))
}

/// The first line of a compiler's stderr that says "error".
fn first_error(stderr: &[u8]) -> String {
    let s = String::from_utf8_lossy(stderr);
    s.lines().find(|l| l.contains("error")).or_else(|| s.lines().next()).unwrap_or("").to_string()
}

/// The error (or warning) text for a section ompcc cannot correct.
fn explain(f: &Finding, major: u32, src: &str) -> String {
    if f.problem != Problem::WrongStart {
        let cover = f.rewrite.as_deref().map_or(String::new(), |r| format!(" (`{r}`)"));
        let unless = if f.problem == Problem::ProbablyNotContiguous {
            " (unless each dimension given one subscript holds one element)"
        } else {
            ""
        };
        let anyway =
            if f.problem == Problem::NotContiguous { "; --fortran-section-check=warn builds it anyway" } else { "" };
        return format!(
            "{}: `{}` is not contiguous in memory{unless}, as OpenMP requires of a mapped section: flang {major} maps as \
             many elements as it names, but in a row from its first one, so the device gets other elements than the \
             ones named. Map a contiguous section that covers it{cover}, or the whole array{anyway}",
            at(f, src),
            f.name,
        );
    }
    let how = if major <= 19 {
        format!("flang {major} takes a section's first element from its first subscript alone")
    } else {
        format!("flang {major} computes where this section starts from the section's own extents")
    };
    let kind = if f.map_type.is_empty() { "…" } else { &f.map_type };
    let whole = hlfir::split_section(&f.name).map_or(f.name.as_str(), |(base, _)| base);
    let fix = match &f.rewrite {
        Some(r) => format!("Write it `{r}` (the same elements, which flang lowers right), or map the whole array"),
        None if major <= 19 => format!(
            "Map the whole array instead (`map({kind}: {whole})`), or build with flang 22 (--flang=flang-new-22), \
             whose lowering ompcc corrects"
        ),
        None => format!("Map the whole array instead (`map({kind}: {whole})`)"),
    };
    format!(
        "{}: `{}` would map the wrong elements: {how}, so for an allocatable, pointer or assumed-shape array the device gets \
         other elements than the ones named and the kernel writes past the memory mapped for them. {}; \
         --fortran-section-check=warn builds it anyway",
        at(f, src),
        f.name,
        fix,
    )
}

/// `file:line:col` of a finding, with the file as the user named it when it is the source.
fn at(f: &Finding, src: &str) -> String {
    match &f.place {
        Some((file, line, col)) => {
            let same = Path::new(file).file_name() == Path::new(src).file_name();
            format!("{}:{line}:{col}", if same { src } else { file })
        }
        None => src.to_string(),
    }
}

/// False only when the source certainly names no `map` (no `$omp`, no `include`): the check
/// then costs nothing. Reads at most [`MAX_PREFILTER`] bytes.
fn may_map_sections(src: &Path) -> bool {
    match std::fs::metadata(src) {
        Ok(m) if m.len() <= MAX_PREFILTER => {}
        _ => return true,
    }
    let Ok(bytes) = std::fs::read(src) else { return true };
    let lower = bytes.to_ascii_lowercase();
    let has = |needle: &[u8]| lower.windows(needle.len()).any(|w| w == needle);
    has(b"$omp") || has(b"include")
}

/// The `flang -fc1` line the driver command runs (program first), from its `-###` output.
fn fc1_line(cmd: &Cmd) -> Option<Vec<String>> {
    let o = Command::new(&cmd.prog).args(&cmd.args).arg("-###").stdin(Stdio::null()).output().ok()?;
    let text = String::from_utf8_lossy(&o.stderr);
    let line = text.lines().find(|l| l.contains("\"-fc1\"") && l.contains("\"-emit-llvm-bc\""))?;
    let words = crate::declare_target::shell_words(line);
    (words.len() > 2).then_some(words)
}

/// `args` with the action replaced and `-o` pointing at `out`.
fn with_output(args: &[String], action: &str, out: &Path) -> Vec<String> {
    let mut v = Vec::with_capacity(args.len());
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "-emit-llvm-bc" => v.push(action.to_string()),
            "-o" => {
                it.next();
                v.extend(["-o".to_string(), out.to_string_lossy().into_owned()]);
            }
            _ => v.push(a.clone()),
        }
    }
    v
}

/// `args` (which end with `-x <lang> <source>`) reading `mlir` instead of the source.
fn from_mlir(args: &[String], mlir: &Path) -> Vec<String> {
    let mut v = args.to_vec();
    if let Some(x) = v.iter().rposition(|a| a == "-x") {
        v.truncate(x);
    } else {
        v.pop();
    }
    v.extend(["-x".to_string(), "mlir".to_string(), mlir.to_string_lossy().into_owned()]);
    v
}

/// Runs a command, printing it under `-v`, with its stderr captured.
fn run_quiet(runner: Runner, cmd: &Cmd) -> Option<Output> {
    if runner.verbose {
        crate::diag::line(&format!(" {}", cmd.shell_line()));
    }
    Command::new(&cmd.prog)
        .args(&cmd.args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(s: &str) -> Vec<String> {
        s.split_whitespace().map(String::from).collect()
    }

    #[test]
    fn front_end_commands() {
        let fc1 = words("-triple x86_64 -emit-llvm-bc -fopenmp -o /t/a.bc -x f95-cpp-input a.F90");
        assert_eq!(
            with_output(&fc1, "-emit-hlfir", Path::new("/t/a.mlir")).join(" "),
            "-triple x86_64 -emit-hlfir -fopenmp -o /t/a.mlir -x f95-cpp-input a.F90"
        );
        assert_eq!(
            from_mlir(&fc1, Path::new("/t/fixed.mlir")).join(" "),
            "-triple x86_64 -emit-llvm-bc -fopenmp -o /t/a.bc -x mlir /t/fixed.mlir"
        );
    }

    #[test]
    fn places_name_the_source_as_given() {
        let f = Finding {
            problem: Problem::WrongStart,
            place: Some(("/abs/dir/a.f90".into(), 9, 21)),
            name: "c(2:3,i,j)".into(),
            map_type: "from".into(),
            fixable: false,
            rewrite: None,
        };
        assert_eq!(at(&f, "dir/a.f90"), "dir/a.f90:9:21");
        assert_eq!(at(&f, "b.f90"), "/abs/dir/a.f90:9:21");
        let e = explain(&f, 19, "dir/a.f90");
        assert!(e.starts_with("dir/a.f90:9:21: `c(2:3,i,j)` would map the wrong elements: flang 19"), "{e}");
        assert!(e.contains("`map(from: c)`") && e.contains("--flang=flang-new-22"), "{e}");
        let f = Finding { rewrite: Some("c(2:3,i:i,j)".into()), ..f };
        let e = explain(&f, 22, "dir/a.f90");
        assert!(e.contains("flang 22 computes") && e.contains("Write it `c(2:3,i:i,j)`"), "{e}");
        let f =
            Finding { problem: Problem::NotContiguous, name: "b(2,1:3)".into(), rewrite: Some("b(:,1:3)".into()), ..f };
        let e = explain(&f, 22, "dir/a.f90");
        assert!(e.contains("`b(2,1:3)` is not contiguous in memory") && e.contains("covers it (`b(:,1:3)`)"), "{e}");
    }

    #[test]
    fn modes() {
        assert_eq!(Mode::parse("fix"), Some(Mode::Fix));
        assert_eq!(Mode::parse("warn"), Some(Mode::Warn));
        assert_eq!(Mode::parse("off"), Some(Mode::Off));
        assert_eq!(Mode::parse("on"), None);
    }
}
