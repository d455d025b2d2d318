//! ompcc: the OpenMP offloading compiler driver that builds fat binaries, as a library whose
//! phases can be called (and tested) without the binary: [`args::parse`] reads a command
//! line into a plan ([`args::Args`]), [`driver::build`] carries it out (per-source
//! [`pipeline`], then [`link`]), [`inspect`] lists and extracts device images, and
//! [`cli::main`] is the whole program that `main.rs` runs.

#![forbid(unsafe_code)]

pub mod args;
pub mod bundle;
pub mod classify;
pub mod cli;
pub mod declare_target;
pub mod depfile;
pub mod diag;
pub mod driver;
pub mod embed;
pub mod error;
pub mod exec;
pub mod fortran_sections;
pub mod gpu;
pub mod gpu_check;
pub mod inspect;
pub mod link;
pub mod link_explain;
pub mod lto;
pub mod modules;
pub mod passthrough;
pub mod pipeline;
pub mod runtime;
pub mod temps;
pub mod toolchain;
