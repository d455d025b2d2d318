//! `ompcc --gpu-check[=ARCH]`: what in a program's device code would not link or run on a GPU,
//! found while the program is built for the CPU devices. See docs/check.md, "Will it run on a
//! GPU?" and docs/gpu-portability.md.
//!
//! Each source's device code is compiled for the GPU too, with ompcc's own GPU device compile
//! (the one a GPU build runs) stopped at LLVM IR, which needs no CUDA or ROCm toolkit. That IR
//! is what the GPU's device link would get: math calls already turned into libdevice/ocml
//! calls, C++ templates instantiated, constructors and Fortran runtime calls spelled out. The
//! declare-target analysis's AST and HLFIR readers see none of that, so the IR is read into
//! the same graph ([`ir`]) and the chains come from the same search ([`findings`]).
//!
//! The check only reports: the CPU build goes on as without it, and a source the GPU compile
//! cannot handle is one warning line.

pub mod findings;
pub mod frames;
pub mod ir;
mod stack;

use crate::bail;
use crate::declare_target::graph::Compiler;
use crate::error::Result;
use crate::exec::Cmd;
use crate::toolchain::Tool;
use omp_gpu_libs::Family;
use std::collections::HashSet;
use std::path::Path;
use std::process::Command;

/// The architecture `--gpu-check` checks for when none is given.
pub const DEFAULT_ARCH: &str = "sm_90";

/// The GPU `--gpu-check=ARCH` names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    pub arch: String,
    pub family: Family,
}

impl Target {
    /// `--gpu-check` (`None`: the default) or `--gpu-check=ARCH`.
    pub fn parse(arch: Option<&str>) -> Result<Target> {
        let arch = arch.unwrap_or(DEFAULT_ARCH);
        match Family::of_arch(arch) {
            Some(family) => Ok(Target { arch: arch.to_string(), family }),
            None => bail!(
                "unknown GPU architecture '{arch}' for --gpu-check (expected sm_… for NVIDIA GPUs, e.g. sm_90, or gfx… for AMD GPUs, e.g. gfx90a)"
            ),
        }
    }

    /// The target triple of the device compile.
    pub fn triple(&self) -> &'static str {
        self.family.triple()
    }
}

/// What the check got from one source.
#[derive(Debug, Clone)]
pub enum Source {
    /// Its device code for the GPU (boxed: it is large, and a source has one).
    Code(Box<ir::DeviceCode>),
    /// The compiler could not build it for the GPU: why (one line).
    Failed(String),
}

/// The options of the GPU device compile that stop it at IR with source lines; they replace
/// `-c`. No optimization: the IR stays as the front end wrote it (no outlined state machines
/// with calls through pointers, no inlining that would hide a call's place).
pub const IR_OPTIONS: [&str; 4] = ["-S", "-gline-tables-only", "-O0", "-w"];

/// Runs the first of `cmds` (device compiles for the check, each writing `ll`) that succeeds
/// and reads its IR, and sizes its frames for `target` ([`frames`]; `ptxas`: where CUDA's
/// assembler is, if anywhere); when no compile succeeds, the first one's error.
pub fn collect(
    cmds: &[Cmd],
    ll: &Path,
    file: &str,
    compiler: Compiler,
    clang: &Tool,
    target: &Target,
    ptxas: Option<&Path>,
) -> Source {
    let mut first_error = None;
    for cmd in cmds {
        match compile(cmd) {
            Ok(()) => {
                let text = match std::fs::read(ll) {
                    Ok(t) => String::from_utf8_lossy(&t).into_owned(),
                    Err(e) => return Source::Failed(format!("cannot read {}: {e}", ll.display())),
                };
                let mut code = ir::parse(file, compiler, &text);
                code.frames = frames::size(clang, target.family, &target.arch, ll, &text, ptxas);
                drop(text);
                name_cxx_functions(&mut code, clang);
                return Source::Code(Box::new(code));
            }
            Err(why) => {
                first_error.get_or_insert(why);
            }
        }
    }
    Source::Failed(first_error.unwrap_or_else(|| "no command".to_string()))
}

/// Runs one compile; its first error line when it fails.
fn compile(cmd: &Cmd) -> std::result::Result<(), String> {
    let out =
        Command::new(&cmd.prog).args(&cmd.args).output().map_err(|e| format!("cannot run '{}': {e}", cmd.prog))?;
    if out.status.success() {
        return Ok(());
    }
    let err = String::from_utf8_lossy(&out.stderr);
    let why = err
        .lines()
        .find(|l| l.contains("error"))
        .or_else(|| err.lines().find(|l| !l.trim().is_empty()))
        .unwrap_or("no message");
    Err(why.trim().to_string())
}

/// flang's GPU device compile keeps the PTX version its driver picks without CUDA (4.2), which
/// no NVIDIA architecture of the last years accepts; 8.0 (LLVM 17 and later) covers sm_50 to
/// sm_90a, and the back end takes the highest version it is given.
pub fn flang_ptx_options(target: &Target) -> Vec<String> {
    if target.family != Family::Nvptx {
        return Vec::new();
    }
    ["-Xflang", "-target-feature", "-Xflang", "+ptx80"].map(String::from).to_vec()
}

/// C++ names as users write them (`std::string::size`), by `llvm-cxxfilt` (one run for all of
/// a source's names); left mangled when there is none.
fn name_cxx_functions(code: &mut ir::DeviceCode, clang: &Tool) {
    let mangled: Vec<usize> =
        (0..code.unit.funcs.len()).filter(|&i| code.unit.funcs[i].sym.starts_with("_Z")).collect();
    if mangled.is_empty() {
        return;
    }
    let input: String = mangled.iter().map(|&i| format!("{}\n", code.unit.funcs[i].sym)).collect();
    let Some(names) = cxxfilt(clang, &input) else { return };
    if names.len() != mangled.len() {
        return;
    }
    for (&i, n) in mangled.iter().zip(names) {
        code.unit.funcs[i].name = short_cxx_name(&n);
    }
}

fn cxxfilt(clang: &Tool, input: &str) -> Option<Vec<String>> {
    use std::io::Write;
    let real = std::fs::canonicalize(&clang.path).unwrap_or_else(|_| clang.path.clone());
    let beside = real.parent().map(|d| d.join("llvm-cxxfilt")).filter(|p| p.is_file());
    let prog = beside.map_or_else(|| format!("llvm-cxxfilt-{}", clang.major), |p| p.to_string_lossy().into_owned());
    let mut child = Command::new(prog)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .ok()?;
    let mut stdin = child.stdin.take()?;
    let data = input.to_string();
    // Written from another thread: a large input would otherwise fill both pipes.
    let writer = std::thread::spawn(move || stdin.write_all(data.as_bytes()));
    let out = child.wait_with_output().ok()?;
    writer.join().ok()?.ok()?;
    out.status.success().then(|| String::from_utf8_lossy(&out.stdout).lines().map(str::to_string).collect())
}

pub use omp_gpu_libs::short_cxx_name;

/// The check of the whole command: prints one `ompcc: warning:` line per finding, one per
/// source the GPU compile refused, and a count. `elsewhere`: symbols objects on the command
/// line define; `cuda`: the CUDA toolkit `--cuda-path`/`OMPCC_CUDA_PATH` named, if any.
pub fn report(
    target: &Target,
    sources: Vec<(String, Source)>,
    elsewhere: &HashSet<String>,
    cuda: Option<&std::path::Path>,
    runner: crate::exec::Runner,
) {
    let mut code = Vec::with_capacity(sources.len());
    let mut no_ptxas = false;
    for (name, s) in sources {
        match s {
            Source::Code(c) => {
                match &c.frames {
                    frames::Frames::NoPtxas => no_ptxas = true,
                    frames::Frames::Failed(why) => crate::diag::warning(format!(
                        "--gpu-check: the stack frames of {name} were not sized for {} ({}): {why}",
                        target.family.name(),
                        target.arch
                    )),
                    frames::Frames::Sized(_) | frames::Frames::NotAsked => {}
                }
                code.push(*c);
            }
            Source::Failed(why) => crate::diag::warning(format!(
                "--gpu-check: {name} could not be compiled for {} ({}), so it is not checked: {why}",
                target.family.name(),
                target.arch
            )),
        }
    }
    if no_ptxas {
        let (family, arch) = (target.family.name(), &target.arch);
        crate::diag::warning(match cuda {
            Some(dir) => format!(
                "--gpu-check: stack frames are not sized for {family} ({arch}): that needs ptxas, CUDA's assembler, and the CUDA toolkit named by --cuda-path or OMPCC_CUDA_PATH has none ({} is not a file)",
                dir.join("bin/ptxas").display()
            ),
            None => format!(
                "--gpu-check: stack frames are not sized for {family} ({arch}): that needs ptxas, CUDA's assembler, which is not on PATH, in /usr/local/cuda or /usr/lib/cuda; point at a CUDA toolkit with --cuda-path=DIR or OMPCC_CUDA_PATH=DIR (scripts/setup-cuda.sh of a source checkout installs ptxas into .deps/ without CUDA)"
            ),
        });
    }
    let functions: usize = code.iter().map(|c| c.unit.funcs.len()).sum();
    let units = code.len();
    let t = std::time::Instant::now();
    let found = findings::check(code, elsewhere, target.family, &target.arch);
    runner.note(&format!(
        "--gpu-check: {functions} functions in {units} source(s), {:.3} ms (graph + search)",
        t.elapsed().as_secs_f64() * 1e3
    ));
    for n in &found.notes {
        runner.note(n);
    }
    for l in &found.lines {
        crate::diag::warning(l);
    }
    if found.total > found.lines.len() {
        crate::diag::warning(format!("--gpu-check: {} more not shown", found.total - found.lines.len()));
    }
    if found.total > 0 {
        crate::diag::warning(format!(
            "--gpu-check found {} problem{} for {} ({}); the build for the CPU devices is not affected (see docs/gpu-portability.md)",
            found.total,
            if found.total == 1 { "" } else { "s" },
            target.family.name(),
            target.arch
        ));
    }
}

/// The symbols that ELF objects among `paths` define (archives and shared libraries are not
/// looked into).
pub fn defined_in_objects<'a>(paths: impl Iterator<Item = &'a str>) -> HashSet<String> {
    use object::{Object, ObjectSymbol};
    let mut out = HashSet::new();
    for p in paths {
        let Ok(data) = std::fs::read(p) else { continue };
        let Ok(file) = object::File::parse(&*data) else { continue };
        out.extend(file.symbols().filter(|s| s.is_definition()).filter_map(|s| s.name().ok().map(str::to_string)));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_architecture_is_checked() {
        assert_eq!(Target::parse(None).unwrap(), Target { arch: "sm_90".into(), family: Family::Nvptx });
        assert_eq!(Target::parse(Some("gfx90a")).unwrap().triple(), "amdgcn-amd-amdhsa");
        let e = Target::parse(Some("hopper")).unwrap_err().to_string();
        assert_eq!(
            e,
            "unknown GPU architecture 'hopper' for --gpu-check (expected sm_… for NVIDIA GPUs, e.g. sm_90, or gfx… for AMD GPUs, e.g. gfx90a)"
        );
    }

    #[test]
    fn cxx_names_are_short() {
        assert_eq!(
            short_cxx_name(
                "std::__cxx11::basic_string<char, std::char_traits<char>, std::allocator<char> >::size() const"
            ),
            "std::string::size"
        );
        assert_eq!(short_cxx_name("work(int)"), "work");
        assert_eq!(short_cxx_name("S::operator()(int)"), "S::operator()");
        assert_eq!(short_cxx_name("std::basic_ostream<char, std::char_traits<char> >& std::operator<< <std::char_traits<char> >(std::basic_ostream<char, std::char_traits<char> >&, char const*)"), "std::ostream& std::operator<< <std::char_traits<char> >");
        assert_eq!(short_cxx_name("plain"), "plain");
    }

    #[test]
    fn a_failed_compile_is_one_line_and_no_panic() {
        let tool = Tool { path: "/nonexistent/clang".into(), major: 19 };
        let cmd = Cmd::new("/nonexistent/clang", "x");
        let target = Target::parse(None).unwrap();
        match collect(&[cmd], Path::new("/nonexistent/x.ll"), "x.c", Compiler::Clang, &tool, &target, None) {
            Source::Failed(why) => assert!(why.starts_with("cannot run '/nonexistent/clang'"), "{why}"),
            Source::Code(_) => panic!("no compiler ran"),
        }
    }
}
