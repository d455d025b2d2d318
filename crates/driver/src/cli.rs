//! The command line: what `ompcc` does with its arguments, and the exit status it ends with.

use crate::args::{self, Action};
use crate::bail;
use crate::diag;
use crate::driver;
use crate::error::{Error, Result};
use crate::inspect;
use crate::toolchain::Toolchain;
use std::io::Write;
use std::path::Path;

/// What `ompcc --help` prints.
pub const HELP: &str = "\
usage: ompcc -fopenmp [host options] [--target-offload=<triple> [options for that target]]... files... [-o out]
       ompcc --offload-list FILE...
       ompcc --offload-extract FILE -o DIR

Targets: --target-offload=T opens a group of options for T only, closed by the next
--target-offload= or by --host. Input files always belong to the whole build.
Also accepted: -fopenmp-targets=T1,T2 with -Xopenmp-target[=T] <arg>, --offload-arch=gfx90a,sm_80.
GPU targets (amdgcn-amd-amdhsa, nvptx64-nvidia-cuda) need -march=; their device runtime and
toolkit: --libomptarget-amdgpu-bc-path= --libomptarget-nvptx-bc-path= (OMPCC_GPU_DEVICERTL),
--cuda-path= (OMPCC_CUDA_PATH), --rocm-path= --rocm-device-lib-path=.
Driver options: -E -S -c -fsyntax-only -o -v -### --save-temps --clang=PATH --flang=PATH
--runtime-dir=DIR --driver-mode=gcc|g++|flang. Dependency files as clang: -M -MM -MD -MMD -MF -MT -MQ -MP.
Inputs: C, C++ and Fortran sources (Fortran modules are compiled before their users); .s .S .ll .bc
(compiled for the host, as clang does; device code they carry is kept); objects and archives.
Declare target analysis: --declare-target-report[=FILE] --declare-target-check --declare-target-filter
(docs/declare-target.md). GPU check: --gpu-check[=ARCH] (default sm_90; gfx90a… for AMD GPUs)
also compiles the device code for that GPU (no toolkit needed) and reports what would not link
or run there: functions its device libraries lack, host function pointers, recursion
(docs/gpu-portability.md). Fortran map sections that flang 19-22 would start at the wrong element
are corrected (flang 20-22) or refused (flang 19): --fortran-section-check=fix|warn|off.
Environment: OMPCC_CLANG, OMPCC_FLANG, OMPCC_RUNTIME_DIR.
See docs/ompcc.md.";

/// Writes to stdout; a reader that went away (`ompcc --offload-list app | head -1`) ends the
/// program quietly, as it ends `cat`, instead of a panic.
fn out(text: &str) -> Result<()> {
    let mut o = std::io::stdout().lock();
    match o.write_all(text.as_bytes()).and_then(|()| o.flush()) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => std::process::exit(0),
        Err(e) => Err(Error::new(format!("cannot write to standard output: {e}"))),
    }
}

/// Runs ompcc on `argv` (the program's name first): builds, lists or extracts. `Ok` carries the
/// exit status (1 when `--offload-list` could not read some file, after the others' lists).
pub fn run(argv: &[String]) -> Result<i32> {
    let prog = argv.first().map_or("ompcc", String::as_str);
    let args = args::parse(prog, argv.get(1..).unwrap_or(&[]))?;
    for w in &args.warnings {
        diag::warning(w);
    }
    match &args.action {
        Action::Help => out(&format!("{HELP}\n"))?,
        Action::Version => {
            out(&format!("ompcc {}\n", env!("CARGO_PKG_VERSION")))?;
            let tc = Toolchain::find(args.clang.as_deref(), args.flang.as_deref())?;
            let status = std::process::Command::new(&tc.clang.path).arg("--version").status();
            if !status.is_ok_and(|s| s.success()) {
                bail!("cannot run {} --version", tc.clang.path.display());
            }
        }
        Action::List(file) => {
            // Every file named: `--offload-list a b c`; each one's error after the others' lists.
            let mut failed = false;
            for f in std::iter::once(file).chain(args.inputs.iter().map(|i| &i.path)) {
                match inspect::list(f) {
                    Ok(text) => out(&text)?,
                    Err(e) => {
                        diag::error(&e);
                        failed = true;
                    }
                }
            }
            if failed {
                return Ok(1);
            }
        }
        Action::Extract(file) => {
            let dir = args.output.as_deref().unwrap_or(".");
            for f in inspect::extract(file, Path::new(dir))? {
                out(&format!("{f}\n"))?;
            }
        }
        Action::Build => driver::build(&args)?,
    }
    Ok(0)
}

/// The whole program: runs ompcc on `argv` and returns its exit status. An error is one line
/// on stderr and status 1; so is a stderr that could not be written ([`crate::diag`]).
pub fn main(argv: &[String]) -> i32 {
    let status = match run(argv) {
        Ok(status) => status,
        Err(e) => {
            diag::error(&e);
            1
        }
    };
    if diag::stderr_failed() {
        1
    } else {
        status
    }
}
