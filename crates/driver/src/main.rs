//! `ompcc`: the OpenMP offloading compiler driver (docs/ompcc.md). Everything is in the
//! library; `main` hands it the command line and exits with the status it returns.

#![forbid(unsafe_code)]

fn main() {
    let argv: Vec<String> = std::env::args_os().map(|a| a.to_string_lossy().into_owned()).collect();
    std::process::exit(ompcc::cli::main(&argv));
}
