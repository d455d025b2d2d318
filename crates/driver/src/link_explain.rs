//! When a device link fails (typically on an undefined symbol: a function called from device
//! code that no file compiles for the device), the declare-target analysis runs then and there
//! and prints its explanation: both places, the chain from the target region, the directive to
//! add. Nothing of it runs when the link succeeds.

use crate::classify::{classify, Class};
use crate::declare_target::{self, graph::Unit};
use crate::error::Error;
use crate::pipeline::{Compiled, Ctx};

/// Runs the analysis over the sources of this build and the analysis facts kept in the input
/// objects (`files`: name and contents). Returns the analysis' error when it explains the
/// failure, else `failure` unchanged.
pub fn explain(ctx: &Ctx, compiled: &[Option<Compiled>], files: &[(String, Vec<u8>)], failure: Error) -> Error {
    let args = ctx.args;
    if args.declare_target.enabled() || ctx.runner.dry_run {
        return failure;
    }
    let opts: Vec<String> = args
        .host_opts()
        .filter(|o| !matches!(classify(o), Class::Link | Class::Deps))
        .flat_map(|o| o.iter().cloned())
        .collect();
    let mut units: Vec<Unit> = Vec::new();
    for (input, c) in args.inputs.iter().zip(compiled) {
        let (Some(lang), Some(_)) = (input.lang, c) else { continue };
        let tool = match lang {
            crate::args::Lang::Fortran => match ctx.tc.flang() {
                Ok(t) => t,
                Err(_) => continue,
            },
            _ => &ctx.tc.clang,
        };
        if let Ok(Some(u)) = declare_target::collect(tool, lang, &opts, input, false) {
            units.push(u);
        }
    }
    for (name, data) in files {
        if let Ok(mut u) = declare_target::facts::read_object(name, data) {
            units.append(&mut u);
        }
    }
    if units.is_empty() {
        return failure;
    }
    let analysis = declare_target::check_program(&units);
    let check = declare_target::Options { check: true, ..Default::default() };
    match declare_target::finish(&check, &analysis, &units, &[]) {
        Err(e) => Error::new(format!("{failure}; {e}")),
        Ok(()) => failure,
    }
}
