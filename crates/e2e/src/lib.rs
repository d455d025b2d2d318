//! Helpers shared by the end-to-end tests: find the toolchains that `scripts/setup.sh`
//! installed, compile programs with them, and run the results on a chosen runtime.
//!
//! The tests expect `make dist` to have run (`make e2e` and `make test` do it). Until it has,
//! they compile but are not tests (each is `#[cfg_attr(omp_e2e, test)]`; see build.rs), and the
//! build says so in one line; under CI they are always tests, and fail on what is missing.

mod ci;
pub mod doctest;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

pub use ci::in_ci;

/// Ends `test` early because a tool it needs is missing (`what`: which, and how to get it).
/// Under CI that is a failure: this panics. Elsewhere it prints one line saying what was not
/// tested; the caller returns right after.
pub fn skip_without(test: &str, what: &str) {
    assert!(!in_ci(), "{test}: {what} (under CI every test must run)");
    eprintln!("skipped {test}: {what}");
}

/// The repository root.
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().expect("repo root")
}

/// `dist/lib`, where `make dist` puts our libomptarget.
pub fn dist_lib() -> PathBuf {
    let p = repo_root().join("dist/lib");
    assert!(p.join("libomptarget.so.19.1").exists(), "dist/lib is missing: run `make dist` first");
    p
}

/// A per-test scratch directory under `target/e2e/<name>`, emptied first.
pub fn scratch(name: &str) -> PathBuf {
    let d = repo_root().join("target/e2e").join(name);
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// LLVM major versions we build and run with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Llvm {
    V19,
    V22,
}

pub const ALL: [Llvm; 2] = [Llvm::V19, Llvm::V22];

impl Llvm {
    pub fn major(self) -> u32 {
        match self {
            Llvm::V19 => 19,
            Llvm::V22 => 22,
        }
    }
    pub fn clang(self) -> String {
        format!("clang-{}", self.major())
    }
    pub fn clangxx(self) -> String {
        format!("clang++-{}", self.major())
    }
    pub fn flang(self) -> String {
        format!("flang-new-{}", self.major())
    }
    /// Directory of LLVM's own runtime libraries (libomptarget.so.NN.1).
    pub fn llvm_lib(self) -> PathBuf {
        PathBuf::from(format!("/usr/lib/llvm-{}/lib", self.major()))
    }
    /// Flags that make `-fopenmp -fopenmp-targets=…` link on this machine (see scripts/setup.sh).
    pub fn link_flags(self) -> Vec<String> {
        let deps = repo_root().join(".deps");
        match self {
            Llvm::V19 => {
                vec![format!("-I{}", deps.join("include19").display()), format!("-L{}", deps.join("lib19").display())]
            }
            Llvm::V22 => vec![format!("-L{}", deps.join("lib22").display())],
        }
    }
}

/// Which compiler driver a source file needs, from its extension.
fn driver_for(llvm: Llvm, src: &Path) -> String {
    match src.extension().and_then(|e| e.to_str()) {
        Some("f90" | "F90" | "f" | "F" | "f95" | "f03" | "f08") => llvm.flang(),
        Some("cpp" | "cc" | "cxx" | "C") => llvm.clangxx(),
        _ => llvm.clang(),
    }
}

/// Compiles `srcs` into `out` for host offloading with the given LLVM, plus `extra` flags.
/// Panics with the compiler's output if it fails.
pub fn compile(llvm: Llvm, srcs: &[&Path], out: &Path, extra: &[&str]) {
    let mut cmd = Command::new(driver_for(llvm, srcs[0]));
    // flang writes module files (`test_0.mod`) where it runs: run next to the output, never in
    // the crate or project directory.
    if let Some(dir) = out.parent().filter(|d| out.is_absolute() && d.is_dir()) {
        cmd.current_dir(dir);
    }
    cmd.args(["-fopenmp", "-fopenmp-targets=x86_64-pc-linux-gnu", "-g", "-O1"]);
    cmd.args(llvm.link_flags());
    cmd.args(extra);
    cmd.args(srcs);
    cmd.arg("-o").arg(out);
    let o = cmd.output().unwrap_or_else(|e| panic!("cannot run {:?}: {e}", cmd.get_program()));
    assert!(o.status.success(), "compile failed: {cmd:?}\n{}", String::from_utf8_lossy(&o.stderr));
}

/// Builds the Fortran program `src` into `out` through our `ompcc` with flang 22 (and the
/// bitcode device runtime), as users build Fortran. Panics with ompcc's output if it fails.
pub fn ompcc_fortran(src: &Path, out: &Path) {
    let llvm = Llvm::V22;
    let mut cmd = Command::new(repo_root().join("dist/bin/ompcc"));
    if let Some(dir) = out.parent() {
        cmd.current_dir(dir);
    }
    cmd.arg(format!("--clang={}", llvm.clang()))
        .arg(format!("--flang={}", llvm.flang()))
        .args(["-fopenmp", "-fopenmp-targets=x86_64-pc-linux-gnu", "-g", "-O1"])
        .args(llvm.link_flags())
        .arg(src)
        .arg("-o")
        .arg(out);
    must(&mut cmd, &format!("ompcc {}", src.display()));
}

/// A command that runs the test program `exe` with `TMPDIR` set to the program's own
/// directory (a test's temporary one): what the runtime writes there (the record of a launch
/// that failed) goes with it, instead of piling up in `/tmp`. A later `env("TMPDIR", …)`
/// replaces it.
pub fn program_command(exe: &Path) -> Command {
    let mut cmd = Command::new(exe);
    if let Some(dir) = exe.parent().filter(|d| d.is_dir()) {
        cmd.env("TMPDIR", dir);
    }
    cmd
}

/// Runs `exe` with `libdir` first on LD_LIBRARY_PATH and extra environment
/// ([`program_command`]).
pub fn run_with(exe: &Path, libdir: &Path, env: &[(&str, &str)]) -> Output {
    let mut cmd = program_command(exe);
    cmd.env("LD_LIBRARY_PATH", libdir);
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().expect("run test program")
}

/// Runs `exe` on our runtime and returns stdout, asserting success.
pub fn run_ours(exe: &Path, env: &[(&str, &str)]) -> String {
    let o = run_with(exe, &dist_lib(), env);
    let stdout = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(
        o.status.success(),
        "{} failed ({}):\nstdout:\n{stdout}\nstderr:\n{}",
        exe.display(),
        o.status,
        String::from_utf8_lossy(&o.stderr)
    );
    stdout
}

/// Runs `cmd` (a compiler or tool the test needs) and returns its output, panicking with
/// both streams when it cannot start or fails.
pub fn must(cmd: &mut Command, what: &str) -> Output {
    let o = cmd.output().unwrap_or_else(|e| panic!("cannot run {what}: {e}"));
    assert!(
        o.status.success(),
        "{what} failed ({}):\n{}\n{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    o
}

/// The source programs under `tests/programs`.
pub fn program(rel: &str) -> PathBuf {
    repo_root().join("tests/programs").join(rel)
}
