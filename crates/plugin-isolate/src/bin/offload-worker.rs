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

/// glibc's `pthread_create`'s type.
type PthreadCreate = unsafe extern "C" fn(
    *mut libc::pthread_t,
    *const libc::pthread_attr_t,
    extern "C" fn(*mut libc::c_void) -> *mut libc::c_void,
    *mut libc::c_void,
) -> libc::c_int;

/// Every thread of the worker starts here, libomp's included (this executable exports the
/// symbol: build.rs): before its own start routine, it records its stack and gets an
/// alternate signal stack, so that a kernel's stack overflow on any of its threads is told
/// apart from other faults and said (omp_plugin_isolate::signals). Only this program
/// defines it; the program's own process keeps glibc's.
///
/// # Safety
/// As glibc's `pthread_create`: `thread` writable, `attr` null or initialized, `start` a
/// thread start routine that may be given `arg`.
#[no_mangle]
pub unsafe extern "C" fn pthread_create(
    thread: *mut libc::pthread_t,
    attr: *const libc::pthread_attr_t,
    start: extern "C" fn(*mut libc::c_void) -> *mut libc::c_void,
    arg: *mut libc::c_void,
) -> libc::c_int {
    static REAL: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    // SAFETY: dlsym with RTLD_NEXT and a NUL-terminated name: the next definition after this
    // executable's, glibc's.
    let real = *REAL.get_or_init(|| unsafe { libc::dlsym(libc::RTLD_NEXT, c"pthread_create".as_ptr()) } as usize);
    if real == 0 {
        return libc::EAGAIN;
    }
    // SAFETY: `real` is glibc's pthread_create, of this type.
    let real = unsafe { std::mem::transmute::<usize, PthreadCreate>(real) };
    let boxed = Box::into_raw(Box::new((start, arg as usize)));
    // SAFETY: the caller's promise for `thread` and `attr`; `start_ready` takes the box,
    // which it alone frees (when the thread starts).
    let r = unsafe { real(thread, attr, start_ready, boxed.cast()) };
    if r != 0 {
        // SAFETY: no thread started: the box is still ours.
        drop(unsafe { Box::from_raw(boxed) });
    }
    r
}

type Start = (extern "C" fn(*mut libc::c_void) -> *mut libc::c_void, usize);

extern "C" fn start_ready(boxed: *mut libc::c_void) -> *mut libc::c_void {
    // SAFETY: `pthread_create` passed a box of a `Start`, given to this thread alone.
    let (start, arg) = *unsafe { Box::from_raw(boxed.cast::<Start>()) };
    omp_plugin_isolate::signals::kernel_thread_ready();
    start(arg as *mut libc::c_void)
}
