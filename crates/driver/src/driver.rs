//! One build: check the request, compile every source (in parallel), then link.

use crate::args::Lang;
use crate::args::{Args, Mode};
use crate::bail;
use crate::error::{Error, Result};
use crate::exec::Runner;
use crate::link::link;
use crate::modules;
use crate::pipeline::{Compiled, Ctx, Emit};
use crate::temps::{stem, Temps};
use crate::toolchain::{check_triple, Toolchain};
use std::path::PathBuf;
use std::sync::{Condvar, Mutex};

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
        Mode::SyntaxOnly => Emit::SyntaxOnly,
        Mode::Assemble => Emit::Assembly,
        Mode::Compile => Emit::Object,
        Mode::Link => Emit::ForLink,
    };
    if !matches!(emit, Emit::ForLink | Emit::SyntaxOnly) && args.output.is_some() && sources.len() > 1 {
        bail!("cannot specify -o when generating multiple output files");
    }
    let out_for = |i: usize| -> Option<PathBuf> {
        match emit {
            Emit::ForLink | Emit::SyntaxOnly => None,
            Emit::Preprocessed => args.output.as_ref().map(PathBuf::from),
            Emit::Assembly => Some(
                args.output.as_ref().map_or_else(|| format!("{}.s", stem(&args.inputs[i].path)), Clone::clone).into(),
            ),
            Emit::Object => Some(
                args.output.as_ref().map_or_else(|| format!("{}.o", stem(&args.inputs[i].path)), Clone::clone).into(),
            ),
        }
    };

    let mut compiled = compile_all(&ctx, &sources, emit, &out_for)?;
    if let Some(target) = &args.gpu_check {
        let checked: Vec<(String, crate::gpu_check::Source)> =
            compiled.iter_mut().flatten().filter_map(|c| c.gpu.take()).collect();
        if !checked.is_empty() {
            let objects = args.inputs.iter().filter(|i| i.lang.is_none()).map(|i| i.path.as_str());
            let cuda = crate::gpu::path_opt(args, "--cuda-path", "OMPCC_CUDA_PATH");
            let elsewhere = crate::gpu_check::defined_in_objects(objects);
            crate::gpu_check::report(target, checked, &elsewhere, cuda.as_deref(), ctx.runner);
        }
    }
    if args.mode != Mode::Link {
        return Ok(());
    }
    let out = args.output.clone().unwrap_or_else(|| "a.out".to_string());
    link(&ctx, &compiled, &out)
}

/// Compiles the sources, up to as many at a time as there are CPUs, a Fortran source only after
/// the sources whose modules it uses ([`crate::modules`]); the first error wins.
fn compile_all(
    ctx: &Ctx,
    sources: &[usize],
    emit: Emit,
    out_for: &(dyn Fn(usize) -> Option<PathBuf> + Sync),
) -> Result<Vec<Option<Compiled>>> {
    let n = ctx.args.inputs.len();
    let results: Mutex<Vec<Option<Result<Compiled>>>> = Mutex::new((0..n).map(|_| None).collect());
    // Preprocessed output to stdout keeps the sources' order.
    let to_stdout = emit == Emit::Preprocessed && ctx.args.output.is_none();
    let jobs =
        if ctx.runner.dry_run || to_stdout { 1 } else { std::thread::available_parallelism().map_or(1, |p| p.get()) };
    let fortran: Vec<usize> =
        (0..sources.len()).filter(|&k| ctx.args.inputs[sources[k]].lang == Some(Lang::Fortran)).collect();
    let mut waits: Vec<Vec<usize>> = vec![Vec::new(); sources.len()];
    // Preprocessing needs no module files: `-E` keeps the command line's order.
    if fortran.len() > 1 && emit != Emit::Preprocessed {
        let scans: Vec<_> = fortran.iter().map(|&k| modules::scan_file(&ctx.args.inputs[sources[k]].path)).collect();
        for (f, deps) in modules::order(&scans).into_iter().enumerate() {
            waits[fortran[f]] = deps.into_iter().map(|d| fortran[d]).collect();
        }
    }
    let sched = Schedule::new(waits);
    let work = || {
        while let Some(k) = sched.next() {
            let i = sources[k];
            let r = ctx.compile(&ctx.args.inputs[i], emit, out_for(i).as_deref());
            let failed = r.is_err();
            if let Ok(mut res) = results.lock() {
                res[i] = Some(r);
            }
            sched.finish(k, failed);
        }
    };
    std::thread::scope(|s| {
        for _ in 1..jobs.min(sources.len()) {
            s.spawn(work);
        }
        work();
    });
    let results = results.into_inner().map_err(|_| Error::new("internal error: a compile job panicked"))?;
    if let Some((k, deps)) = sched.blocked() {
        // Cannot happen (modules::order breaks cycles), but never report success for a skipped source.
        bail!("internal error: {} waits for sources {deps:?} that never finished", args_path(ctx, sources[k]));
    }
    let mut out = Vec::with_capacity(n);
    for r in results {
        out.push(r.transpose()?);
    }
    Ok(out)
}

fn args_path(ctx: &Ctx, i: usize) -> String {
    ctx.args.inputs[i].path.clone()
}

/// Which source compiles next: the first, in command-line order, that has not started and whose
/// dependencies have all finished. After a failure nothing new starts.
struct Schedule {
    waits: Vec<Vec<usize>>,
    state: Mutex<State>,
    changed: Condvar,
}

struct State {
    started: Vec<bool>,
    done: Vec<bool>,
    failed: bool,
}

impl Schedule {
    fn new(waits: Vec<Vec<usize>>) -> Schedule {
        let n = waits.len();
        Schedule {
            waits,
            state: Mutex::new(State { started: vec![false; n], done: vec![false; n], failed: false }),
            changed: Condvar::new(),
        }
    }

    /// Blocks until a source can start; `None` when nothing is left to start.
    fn next(&self) -> Option<usize> {
        let mut st = self.state.lock().ok()?;
        loop {
            if st.failed {
                return None;
            }
            let ready = (0..self.waits.len()).find(|&k| !st.started[k] && self.waits[k].iter().all(|&d| st.done[d]));
            if let Some(k) = ready {
                st.started[k] = true;
                return Some(k);
            }
            // Nothing ready: wait while some running source may unblock one.
            let running = (0..self.waits.len()).any(|k| st.started[k] && !st.done[k]);
            if !running {
                return None;
            }
            st = self.changed.wait(st).ok()?;
        }
    }

    fn finish(&self, k: usize, failed: bool) {
        if let Ok(mut st) = self.state.lock() {
            st.done[k] = true;
            st.failed |= failed;
        }
        self.changed.notify_all();
    }

    /// A source that never started although no compile failed, with what it waited for.
    fn blocked(&self) -> Option<(usize, Vec<usize>)> {
        let st = self.state.lock().ok()?;
        if st.failed {
            return None;
        }
        (0..self.waits.len()).find(|&k| !st.started[k]).map(|k| (k, self.waits[k].clone()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schedule_runs_producers_first_and_independent_sources_together() {
        // 0 waits for 1, 1 waits for 2, 3 is independent.
        let s = Schedule::new(vec![vec![1], vec![2], vec![], vec![]]);
        assert_eq!(s.next(), Some(2));
        assert_eq!(s.next(), Some(3), "independent sources start while 2 runs");
        s.finish(3, false);
        s.finish(2, false);
        assert_eq!(s.next(), Some(1));
        s.finish(1, false);
        assert_eq!(s.next(), Some(0));
        s.finish(0, false);
        assert_eq!(s.next(), None);
        assert!(s.blocked().is_none());
        let s = Schedule::new(vec![vec![1], vec![]]);
        assert_eq!(s.next(), Some(1));
        s.finish(1, true);
        assert_eq!(s.next(), None, "nothing starts after a failure");
    }
}
