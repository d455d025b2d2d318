//! ompcc: the OpenMP offloading compiler driver that builds fat binaries.
//!
//! `main` only wires: parse the command line, then build, list or extract.

mod args;
mod bundle;
mod classify;
mod declare_target;
mod driver;
mod embed;
mod error;
mod exec;
mod gpu;
mod inspect;
mod link;
mod link_explain;
mod lto;
mod pipeline;
mod runtime;
mod temps;
mod toolchain;

use args::Action;
use std::path::Path;

const HELP: &str = "\
usage: ompcc -fopenmp [host options] [--target-offload=<triple> [options for that target]]... files... [-o out]
       ompcc --offload-list FILE
       ompcc --offload-extract FILE -o DIR

Targets: --target-offload=T opens a group of options for T only, closed by the next
--target-offload= or by --host. Input files always belong to the whole build.
Also accepted: -fopenmp-targets=T1,T2 with -Xopenmp-target[=T] <arg>, --offload-arch=gfx90a,sm_80.
GPU targets (amdgcn-amd-amdhsa, nvptx64-nvidia-cuda) need -march=; their device runtime and
toolkit: --libomptarget-amdgpu-bc-path= --libomptarget-nvptx-bc-path= (OMPCC_GPU_DEVICERTL),
--cuda-path= (OMPCC_CUDA_PATH), --rocm-path= --rocm-device-lib-path=.
Driver options: -E -S -c -o -v -### --save-temps --clang=PATH --flang=PATH --runtime-dir=DIR
--driver-mode=gcc|g++|flang.
Declare target analysis: --declare-target-report[=FILE] --declare-target-check --declare-target-filter
(docs/declare-target.md). Environment: OMPCC_CLANG, OMPCC_FLANG, OMPCC_RUNTIME_DIR.
See docs/ompcc.md.";

fn run(argv: &[String]) -> error::Result<()> {
    let prog = argv.first().map_or("ompcc", String::as_str);
    let args = args::parse(prog, argv.get(1..).unwrap_or(&[]))?;
    match &args.action {
        Action::Help => println!("{HELP}"),
        Action::Version => {
            println!("ompcc {}", env!("CARGO_PKG_VERSION"));
            let tc = toolchain::Toolchain::find(args.clang.as_deref(), args.flang.as_deref())?;
            let status = std::process::Command::new(&tc.clang.path).arg("--version").status();
            if !status.is_ok_and(|s| s.success()) {
                return Err(error::Error::new(format!("cannot run {} --version", tc.clang.path.display())));
            }
        }
        Action::List(file) => print!("{}", inspect::list(file)?),
        Action::Extract(file) => {
            let dir = args.output.as_deref().unwrap_or(".");
            for f in inspect::extract(file, Path::new(dir))? {
                println!("{f}");
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
