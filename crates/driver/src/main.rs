//! ompcc: the OpenMP offloading compiler driver that builds fat binaries.
//!
//! `main` only wires: parse the command line, then build, list or extract.

mod args;
mod bundle;
mod classify;
mod declare_target;
mod depfile;
mod driver;
mod embed;
mod error;
mod exec;
mod fortran_sections;
mod gpu;
mod inspect;
mod link;
mod link_explain;
mod lto;
mod modules;
mod passthrough;
mod pipeline;
mod runtime;
mod temps;
mod toolchain;

use args::Action;
use std::io::Write;
use std::path::Path;

const HELP: &str = "\
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
(docs/declare-target.md). Fortran map sections that flang 19-22 would start at the wrong element
are corrected (flang 20-22) or refused (flang 19): --fortran-section-check=fix|warn|off.
Environment: OMPCC_CLANG, OMPCC_FLANG, OMPCC_RUNTIME_DIR.
See docs/ompcc.md.";

/// Writes to stdout; a reader that went away (`ompcc --offload-list app | head -1`) ends the
/// program quietly, as it ends `cat`, instead of a panic.
fn out(text: &str) -> error::Result<()> {
    let mut o = std::io::stdout().lock();
    match o.write_all(text.as_bytes()).and_then(|()| o.flush()) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => std::process::exit(0),
        Err(e) => Err(error::Error::new(format!("cannot write to standard output: {e}"))),
    }
}

fn run(argv: &[String]) -> error::Result<()> {
    let prog = argv.first().map_or("ompcc", String::as_str);
    let args = args::parse(prog, argv.get(1..).unwrap_or(&[]))?;
    for w in &args.warnings {
        eprintln!("ompcc: warning: {w}");
    }
    match &args.action {
        Action::Help => out(&format!("{HELP}\n"))?,
        Action::Version => {
            out(&format!("ompcc {}\n", env!("CARGO_PKG_VERSION")))?;
            let tc = toolchain::Toolchain::find(args.clang.as_deref(), args.flang.as_deref())?;
            let status = std::process::Command::new(&tc.clang.path).arg("--version").status();
            if !status.is_ok_and(|s| s.success()) {
                return Err(error::Error::new(format!("cannot run {} --version", tc.clang.path.display())));
            }
        }
        Action::List(file) => {
            // Every file named: `--offload-list a b c`; each one's error after the others' lists.
            let mut failed = None;
            for f in std::iter::once(file).chain(args.inputs.iter().map(|i| &i.path)) {
                match inspect::list(f) {
                    Ok(text) => out(&text)?,
                    Err(e) => {
                        eprintln!("ompcc: error: {e}");
                        failed = Some(e);
                    }
                }
            }
            if failed.is_some() {
                std::process::exit(1);
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
    Ok(())
}

fn main() {
    let argv: Vec<String> = std::env::args_os().map(|a| a.to_string_lossy().into_owned()).collect();
    if let Err(e) = run(&argv) {
        eprintln!("ompcc: error: {e}");
        std::process::exit(1);
    }
}
