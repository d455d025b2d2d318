//! `offload-worker`: the process an isolated local device (LIBOMPTARGET_ISOLATE=1) runs its
//! kernels in. Started by the program's runtime, never by hand:
//! `offload-worker --worker <devices> <parent pid> [--arena <address> <size>] [--check]`, requests on
//! stdin, replies (and what kernels print) on stdout, and the device memory arena's memfd
//! as descriptor 4.

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut args = args;
    let check = args.last().is_some_and(|a| a == "--check");
    if check {
        args.pop();
    }
    let (devices, parent, arena) = match args.as_slice() {
        [flag, d, p, rest @ ..] if flag == "--worker" => match (d.parse::<usize>(), p.parse::<i32>(), rest) {
            (Ok(d), Ok(p), []) if (1..=omp_plugin_isolate::MAX_DEVICES).contains(&d) && p > 0 => (d, p, None),
            (Ok(d), Ok(p), [a, base, size])
                if a == "--arena" && (1..=omp_plugin_isolate::MAX_DEVICES).contains(&d) && p > 0 =>
            {
                match (base.parse::<usize>(), size.parse::<usize>()) {
                    (Ok(b), Ok(s)) => (d, p, Some((b, s))),
                    _ => usage(),
                }
            }
            _ => usage(),
        },
        _ => usage(),
    };
    // A kernel's own raise(SIGSEGV) ends the worker, as it ends the host device's process.
    if let Err(e) = omp_plugin_isolate::signals::end_on_sent_signals() {
        eprintln!("offload-worker: cannot install its signal handlers: {e}");
        std::process::exit(1);
    }
    // Device memory shared with the program. When it cannot be mapped, the program notices
    // (no acknowledgement) and allocates device memory here instead.
    if let Some((base, size)) = arena {
        if omp_plugin_isolate::arena::map_in_worker(base, size).is_ok() {
            // A kernel's stack overflow is said in the arena's header.
            // SAFETY: the arena was just mapped at `base`, for the worker's whole life.
            unsafe { omp_plugin_isolate::signals::record_overflows_in(base) };
            if check {
                // Check mode (LIBOMPTARGET_CHECK): guard pages and access tracking.
                // SAFETY: the arena was just mapped at `base` by `map_in_worker`.
                if let Err(e) = unsafe { omp_plugin_isolate::track::start_in_worker(base, size) } {
                    eprintln!("offload-worker: cannot set up the mapping checker's page protections: {e}");
                    std::process::exit(1);
                }
                let around = omp_plugin_isolate::track::around_launch;
                std::process::exit(omp_worker::serve::main_around_launches(
                    &omp_plugin_host::HostPlugin,
                    devices,
                    parent,
                    around,
                ));
            }
        }
    }
    let around = omp_plugin_isolate::signals::around_launch;
    std::process::exit(omp_worker::serve::main_around_launches(&omp_plugin_host::HostPlugin, devices, parent, around));
}

fn usage() -> ! {
    eprintln!(
        "offload-worker runs the kernels of an isolated device (LIBOMPTARGET_ISOLATE=1); \
         the OpenMP runtime starts it: offload-worker --worker <devices> <parent pid>"
    );
    std::process::exit(2);
}
