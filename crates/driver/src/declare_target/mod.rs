//! `declare target` analysis: what each front end says about a translation unit, merged per
//! program into a graph of functions, target regions and references; the marking phases on it;
//! errors for code the device build would miss; the `--declare-target-report`. See
//! docs/declare-target.md.
//!
//! It runs only when asked (`--declare-target-report`, `--declare-target-check`,
//! `--declare-target-filter`): it costs one extra front-end run per source.

pub mod clang_ast;
pub mod facts;
pub mod fortran;
pub mod graph;
pub mod marking;
pub mod report;

use crate::args::{Input, Lang};
use crate::error::{Error, Result};
use crate::exec::Cmd;
use crate::toolchain::Tool;
use graph::{Compiler, DeviceType, Unit};
use marking::Analysis;
use std::collections::HashMap;
use std::io::{BufReader, Write};
use std::process::{Command, Stdio};

/// What the user asked of the analysis.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Options {
    /// Print the report: to stdout (`Some("-")`) or to a file.
    pub report: Option<String>,
    /// Errors and warnings only.
    pub check: bool,
    /// Leave host-only functions out of the device images.
    pub filter: bool,
}

impl Options {
    /// True when the analysis runs at all.
    pub fn enabled(&self) -> bool {
        self.report.is_some() || self.check || self.filter
    }
}

/// Runs the front end of `input` for the analysis and reads its output into a [`Unit`].
/// `fe_opts` are the host front-end options (`-I -D -std= …`). Under `-###` only prints.
pub fn collect(tool: &Tool, lang: Lang, fe_opts: &[String], input: &Input, dry_run: bool) -> Result<Option<Unit>> {
    let prog = tool.path.to_string_lossy().into_owned();
    let name = input.path.as_str();
    let mut src = Vec::new();
    if let Some(x) = &input.x {
        src.push("-x".to_string());
        src.push(x.clone());
    }
    src.push(name.to_string());
    if lang == Lang::Fortran {
        let fc1 = flang_fc1(&prog, fe_opts, &src, dry_run)?;
        let mut c = Cmd::new(prog.clone(), format!("{name}: declare target analysis"));
        c.args(fc1);
        if dry_run {
            crate::diag::line(&format!(" {}", c.shell_line()));
            return Ok(None);
        }
        let out = output(&c)?;
        let text = String::from_utf8_lossy(&out);
        let mut unit = fortran::parse_hlfir(name, &text)?;
        let mut source = std::fs::read_to_string(name).map_err(|e| Error::new(format!("cannot read {name}: {e}")))?;
        if source.lines().any(|l| l.starts_with('#')) {
            // Directives under `#ifdef` count only as the preprocessor leaves them.
            let mut e = Cmd::new(prog.clone(), format!("{name}: preprocessing for the declare target analysis"));
            e.args(["-E", "-fopenmp"]).args(fe_opts.iter().cloned()).args(src.iter().cloned());
            source = String::from_utf8_lossy(&output(&e)?).into_owned();
        }
        let dirs = fortran::scan_directives(name, &source);
        fortran::apply_directives(&mut unit, &dirs);
        reconcile_with_flang(&mut unit);
        relativize(&mut unit);
        return Ok(Some(unit));
    }
    let mut c = Cmd::new(prog, format!("{name}: declare target analysis"));
    c.args(["-fopenmp", "-fsyntax-only", "-w", "-fno-color-diagnostics", "-Xclang", "-ast-dump"]);
    c.args(fe_opts.iter().cloned());
    c.args(src);
    if dry_run {
        crate::diag::line(&format!(" {}", c.shell_line()));
        return Ok(None);
    }
    let mut child = Command::new(&c.prog)
        .args(&c.args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| Error::new(format!("{}: cannot run '{}': {e}", c.what, c.prog)))?;
    let stdout = child.stdout.take().ok_or_else(|| Error::new("internal error: no pipe"))?;
    let stderr = child.stderr.take();
    // Read stderr on the side so a chatty front end cannot block on a full pipe.
    let err_reader = std::thread::spawn(move || {
        let mut s = String::new();
        if let Some(mut e) = stderr {
            let _ = std::io::Read::read_to_string(&mut e, &mut s);
        }
        s
    });
    let parsed = clang_ast::parse(name, lang == Lang::Cxx, BufReader::with_capacity(1 << 16, stdout));
    let status = child.wait().map_err(|e| Error::new(format!("{}: {e}", c.what)))?;
    let err_text = err_reader.join().unwrap_or_default();
    if !status.success() {
        return Err(Error::new(format!("{} failed: {}", c.what, first_line(&err_text))));
    }
    parsed.map(Some)
}

fn first_line(s: &str) -> &str {
    s.lines().find(|l| l.contains("error")).or_else(|| s.lines().next()).unwrap_or("")
}

/// Runs a command and returns its stdout (stderr kept for the error message).
fn output(c: &Cmd) -> Result<Vec<u8>> {
    let o = Command::new(&c.prog)
        .args(&c.args)
        .output()
        .map_err(|e| Error::new(format!("{}: cannot run '{}': {e}", c.what, c.prog)))?;
    if !o.status.success() {
        return Err(Error::new(format!("{} failed: {}", c.what, first_line(&String::from_utf8_lossy(&o.stderr)))));
    }
    Ok(o.stdout)
}

/// The `flang -fc1` arguments that print HLFIR with locations, taken from the driver's own
/// `-###` line for `-S` (so preprocessing, module paths and OpenMP version are as in the build).
fn flang_fc1(prog: &str, fe_opts: &[String], src: &[String], dry_run: bool) -> Result<Vec<String>> {
    let mut probe = Cmd::new(prog, "declare target analysis: flang -###");
    probe.args(["-###", "-fopenmp", "-S"]).args(fe_opts.iter().cloned()).args(src.iter().cloned());
    probe.args(["-o", "/dev/null"]);
    if dry_run {
        let mut a = vec!["-fc1".to_string(), "-fopenmp".to_string(), "-emit-hlfir".to_string()];
        a.extend(fe_opts.iter().cloned());
        a.extend(src.iter().cloned());
        return Ok(a);
    }
    let o = Command::new(&probe.prog)
        .args(&probe.args)
        .output()
        .map_err(|e| Error::new(format!("{}: cannot run '{prog}': {e}", probe.what)))?;
    let text = String::from_utf8_lossy(&o.stderr);
    let line = text
        .lines()
        .find(|l| l.contains("\"-fc1\""))
        .ok_or_else(|| Error::new(format!("{}: no -fc1 command in flang's -### output", probe.what)))?;
    let mut words = shell_words(line);
    if words.len() < 2 {
        return Err(Error::new(format!("{}: unreadable -### line", probe.what)));
    }
    words.remove(0); // the flang binary itself; we run the driver with -fc1 instead
    let mut out = Vec::with_capacity(words.len() + 3);
    let mut it = words.into_iter();
    while let Some(w) = it.next() {
        match w.as_str() {
            "-S" | "-emit-obj" | "-emit-llvm" => out.push("-emit-hlfir".to_string()),
            "-o" => {
                it.next();
                out.extend(["-o".to_string(), "-".to_string()]);
            }
            _ => out.push(w),
        }
    }
    out.extend(["-mmlir".to_string(), "-mlir-print-debuginfo".to_string()]);
    Ok(out)
}

/// Splits a `-###` line: `"a" "b c" "d\"e"`.
pub(crate) fn shell_words(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '"' {
            continue;
        }
        let mut w = String::new();
        while let Some(c) = chars.next() {
            match c {
                '\\' => {
                    if let Some(n) = chars.next() {
                        w.push(n);
                    }
                }
                '"' => break,
                _ => w.push(c),
            }
        }
        out.push(w);
    }
    out
}

/// flang printed the marks after its own marking pass. Where the analysis (explicit marks from
/// the source, flang's rules) finds a function unmarked that flang marked, the source scan
/// missed a directive: take flang's mark as explicit, at the function.
fn reconcile_with_flang(unit: &mut Unit) {
    let missed: Vec<(usize, DeviceType)> = {
        let local = graph::Graph::build(std::slice::from_ref(unit));
        let m = marking::mark(&local, marking::Policy::of(Compiler::Flang));
        let by_sym: HashMap<&str, usize> =
            unit.funcs.iter().enumerate().rev().map(|(i, f)| (f.sym.as_str(), i)).collect();
        unit.compiler_marks
            .iter()
            .filter_map(|(sym, dt)| {
                let i = *by_sym.get(sym.as_str())?;
                m.device_type(local.unit_nodes[0][i]).is_none().then_some((i, *dt))
            })
            .collect()
    };
    for (i, dt) in missed {
        let loc = unit.funcs[i].loc.clone();
        unit.funcs[i].marks.push(graph::Mark { dt, cap: graph::Capture::To, loc });
    }
}

/// flang prints absolute paths; show them as the user named the files (relative to here).
fn relativize(unit: &mut Unit) {
    let Ok(cwd) = std::env::current_dir() else { return };
    let prefix = format!("{}/", cwd.display());
    let fix = |l: &mut graph::Loc| {
        if let Some(r) = l.file.strip_prefix(&prefix) {
            l.file = r.to_string();
        }
    };
    for f in &mut unit.funcs {
        fix(&mut f.loc);
        f.marks.iter_mut().for_each(|m| fix(&mut m.loc));
        f.refs.iter_mut().for_each(|r| fix(&mut r.loc));
    }
    for r in &mut unit.regions {
        fix(&mut r.loc);
        r.refs.iter_mut().for_each(|x| fix(&mut x.loc));
    }
}

/// The llvm-objcopy that goes with `clang`: next to it (after links), else
/// `llvm-objcopy-<major>` or `llvm-objcopy` on the PATH.
pub fn objcopy(clang: &Tool) -> String {
    let real = std::fs::canonicalize(&clang.path).unwrap_or_else(|_| clang.path.clone());
    if let Some(p) = real.parent().map(|d| d.join("llvm-objcopy")).filter(|p| p.is_file()) {
        return p.to_string_lossy().into_owned();
    }
    let versioned = format!("llvm-objcopy-{}", clang.major);
    if crate::toolchain::which(&versioned).is_some() {
        versioned
    } else {
        "llvm-objcopy".to_string()
    }
}

/// Prints the report (when asked) and the problems; errors stop the build.
pub fn finish(opts: &Options, a: &Analysis<'_>, units: &[Unit], removed: &[(String, String)]) -> Result<()> {
    if let Some(dest) = &opts.report {
        let text = report::render(a, units, removed);
        if dest == "-" {
            let mut so = std::io::stdout().lock();
            let _ = so.write_all(text.as_bytes());
        } else {
            std::fs::write(dest, text).map_err(|e| Error::new(format!("cannot write {dest}: {e}")))?;
        }
    }
    for w in report::warnings(a) {
        crate::diag::warning(w);
    }
    let errors: Vec<String> =
        a.problems.iter().filter(|p| p.is_error()).map(|p| report::problem_text(a, units, p)).collect();
    for e in &errors {
        crate::diag::error(e);
    }
    if !errors.is_empty() {
        return Err(Error::new(format!(
            "declare target analysis found {} error{} (see docs/declare-target.md)",
            errors.len(),
            if errors.len() == 1 { "" } else { "s" }
        )));
    }
    Ok(())
}

/// The analysis of one unit at compile time (`-c`): declarations without definitions are
/// deferred to the link.
pub fn check_unit(opts: &Options, unit: &Unit) -> Result<()> {
    let units = std::slice::from_ref(unit);
    let a = marking::analyze(units, false);
    finish(opts, &a, units, &[])
}

/// The analysis of the whole program at link time.
pub fn check_program(units: &[Unit]) -> Analysis<'_> {
    marking::analyze(units, true)
}

/// `--declare-target-filter`: takes host-only functions out of the device objects. A function
/// can be removed when it sits in its own section (`.text.<name>`, from `-ffunction-sections`);
/// the device link (`--no-undefined`) then proves nothing on the device still needed it.
/// Returns `(symbol, what happened)` for the report.
pub fn filter_objects(
    a: &Analysis<'_>,
    objs: &[(String, std::path::PathBuf)],
    objcopy: &str,
) -> Result<Vec<(String, String)>> {
    use object::{Object, ObjectSection, ObjectSymbol};
    let host_only: std::collections::HashSet<&str> =
        a.host_only.iter().filter(|&&n| !a.graph.nodes[n].has_target).map(|&n| a.graph.nodes[n].sym).collect();
    let mut out = Vec::new();
    for (triple, path) in objs {
        let data = std::fs::read(path).map_err(|e| Error::new(format!("cannot read {}: {e}", path.display())))?;
        let file = object::File::parse(&*data)
            .map_err(|e| Error::new(format!("{}: not a valid object file: {e}", path.display())))?;
        let sections: std::collections::HashSet<String> =
            file.sections().filter_map(|s| s.name().ok().map(str::to_string)).collect();
        let mut args: Vec<String> = Vec::new();
        for sym in file.symbols().filter(|s| s.is_definition() && s.kind() == object::SymbolKind::Text) {
            let Ok(name) = sym.name() else { continue };
            if !host_only.contains(name) {
                continue;
            }
            let sec = format!(".text.{name}");
            if sections.contains(&sec) {
                args.extend([format!("--remove-section={sec}"), format!("--strip-symbol={name}")]);
                out.push((name.to_string(), format!("the {triple} device object (removed)")));
            } else {
                out.push((
                    name.to_string(),
                    format!(
                        "the {triple} device object (kept: not in its own section; build with -ffunction-sections)"
                    ),
                ));
            }
        }
        if !args.is_empty() {
            let mut c = Cmd::new(objcopy, format!("declare target filter of {}", path.display()));
            c.args(args).arg(path.to_string_lossy());
            output(&c)?;
        }
    }
    Ok(out)
}
