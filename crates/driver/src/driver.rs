//! One build: check the request, compile every source (in parallel), then link.

use crate::args::{Args, Mode};
use crate::bail;
use crate::error::{Error, Result};
use crate::exec::Runner;
use crate::link::link;
use crate::pipeline::{Compiled, Ctx, Emit};
use crate::temps::{stem, Temps};
use crate::toolchain::{check_triple, Toolchain};
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

/// Runs the build the arguments ask for.
pub fn build(args: &Args) -> Result<()> {
    if args.inputs.is_empty() {
        bail!("no input files");
    }
    for t in &args.targets {
        check_triple(&t.triple)?;
    }
    let tc = Toolchain::find(args.clang.as_deref(), args.flang.as_deref())?;
    let temps = Temps::new(args.save_temps, args.dry_run)?;
    let runner = Runner { dry_run: args.dry_run, verbose: args.verbose };
    let ctx = Ctx { args, tc: &tc, temps: &temps, runner };
    crate::gpu::preflight(args, &tc, |t| ctx.arch(t))?;
    let sources: Vec<usize> = (0..args.inputs.len()).filter(|&i| args.inputs[i].lang.is_some()).collect();

    let emit = match args.mode {
        Mode::Preprocess => Emit::Preprocessed,
        Mode::Assemble => Emit::Assembly,
        Mode::Compile => Emit::Object,
        Mode::Link => Emit::ForLink,
    };
    if emit != Emit::ForLink && args.output.is_some() && sources.len() > 1 {
        bail!("cannot specify -o when generating multiple output files");
    }
    let out_for = |i: usize| -> Option<PathBuf> {
        match emit {
            Emit::ForLink => None,
            Emit::Preprocessed => args.output.as_ref().map(PathBuf::from),
            Emit::Assembly => Some(
                args.output.as_ref().map_or_else(|| format!("{}.s", stem(&args.inputs[i].path)), Clone::clone).into(),
            ),
            Emit::Object => Some(
                args.output.as_ref().map_or_else(|| format!("{}.o", stem(&args.inputs[i].path)), Clone::clone).into(),
            ),
        }
    };

    let compiled = compile_all(&ctx, &sources, emit, &out_for)?;
    if args.mode != Mode::Link {
        return Ok(());
    }
    let out = args.output.clone().unwrap_or_else(|| "a.out".to_string());
    link(&ctx, &compiled, &out)
}

/// Compiles the sources, up to as many at a time as there are CPUs; the first error wins.
fn compile_all(
    ctx: &Ctx,
    sources: &[usize],
    emit: Emit,
    out_for: &(dyn Fn(usize) -> Option<PathBuf> + Sync),
) -> Result<Vec<Option<Compiled>>> {
    let n = ctx.args.inputs.len();
    let results: Mutex<Vec<Option<Result<Compiled>>>> = Mutex::new((0..n).map(|_| None).collect());
    let next = AtomicUsize::new(0);
    let jobs = if ctx.runner.dry_run { 1 } else { std::thread::available_parallelism().map_or(1, |p| p.get()) };
    let work = || loop {
        let k = next.fetch_add(1, Ordering::Relaxed);
        let Some(&i) = sources.get(k) else { break };
        let r = ctx.compile(&ctx.args.inputs[i], emit, out_for(i).as_deref());
        let failed = r.is_err();
        if let Ok(mut res) = results.lock() {
            res[i] = Some(r);
        }
        if failed {
            next.store(sources.len(), Ordering::Relaxed);
        }
    };
    std::thread::scope(|s| {
        for _ in 1..jobs.min(sources.len()) {
            s.spawn(work);
        }
        work();
    });
    let results = results.into_inner().map_err(|_| Error::new("internal error: a compile job panicked"))?;
    let mut out = Vec::with_capacity(n);
    for r in results {
        out.push(r.transpose()?);
    }
    Ok(out)
}
