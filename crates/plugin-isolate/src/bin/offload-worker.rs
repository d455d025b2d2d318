//! `offload-worker`: the process an isolated local device (LIBOMPTARGET_ISOLATE=1) runs its
//! kernels in. Started by the program's runtime, never by hand:
//! `offload-worker --worker <devices> <parent pid> [--arena <address> <size>] [--check [--gpu-limits]]`, requests on
//! stdin, replies (and what kernels print) on stdout, and the device memory arena's memfd
//! as descriptor 4.

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut args = args;
    let gpu_limits = args.last().is_some_and(|a| a == "--gpu-limits");
    if gpu_limits {
        args.pop();
    }
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
            // A kernel that fails leaves the image's globals in the arena, for its record.
            // SAFETY: as above.
            unsafe { omp_plugin_isolate::record_globals::save_on_faults_in(base, size) };
            if check {
                // Check mode (LIBOMPTARGET_CHECK): guard pages and access tracking.
                // SAFETY: the arena was just mapped at `base` by `map_in_worker`.
                if let Err(e) = unsafe { omp_plugin_isolate::track::start_in_worker(base, size) } {
                    eprintln!("offload-worker: cannot set up the mapping checker's page protections: {e}");
                    std::process::exit(1);
                }
                let around = if gpu_limits {
                    // LIBOMPTARGET_CHECK=gpu: each kernel's stack and malloc use, measured.
                    // SAFETY: as above.
                    unsafe { omp_plugin_isolate::gpu_limits::start_in_worker(base) };
                    measured_and_checked
                } else {
                    omp_plugin_isolate::track::around_launch
                };
                let status =
                    omp_worker::serve::main_around_launches(&omp_plugin_host::HostPlugin, devices, parent, around);
                omp_plugin_isolate::record_globals::ending_normally();
                std::process::exit(status);
            }
        }
    }
    let around = omp_plugin_isolate::signals::around_launch;
    let status = omp_worker::serve::main_around_launches(&omp_plugin_host::HostPlugin, devices, parent, around);
    omp_plugin_isolate::record_globals::ending_normally();
    std::process::exit(status);
}

/// A launch in check mode with its stack and malloc use measured (inside the checker's
/// work around it, which is not the kernel's).
fn measured_and_checked(run: &mut dyn FnMut()) {
    omp_plugin_isolate::track::around_launch(&mut || omp_plugin_isolate::gpu_limits::measure_launch(run));
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

// The worker's `malloc`, exported (build.rs), so that kernels' and libomp's calls come here:
// glibc's own (`__libc_*`), and under LIBOMPTARGET_CHECK=gpu the bytes a kernel's code
// holds counted (omp_plugin_isolate::gpu_limits). Each entry point passes its return address
// on (the code that called it: the kernel's, or the worker's or libomp's, which are not
// counted) and jumps to the function that does the work. Blocks from glibc's other
// allocation functions (memalign, posix_memalign, aligned_alloc) are glibc's too, and free
// here.
extern "C" {
    fn __libc_malloc(size: usize) -> *mut libc::c_void;
    fn __libc_calloc(n: usize, size: usize) -> *mut libc::c_void;
    fn __libc_realloc(block: *mut libc::c_void, size: usize) -> *mut libc::c_void;
    fn __libc_free(block: *mut libc::c_void);
}

/// C's `malloc`: [`malloc_from`] with the return address as its second argument.
///
/// # Safety
/// As C's `malloc`.
#[no_mangle]
#[unsafe(naked)]
pub unsafe extern "C" fn malloc(_size: usize) -> *mut libc::c_void {
    std::arch::naked_asm!("mov rsi, [rsp]", "jmp {}", sym malloc_from)
}

/// C's `calloc`: [`calloc_from`] with the return address as its third argument.
///
/// # Safety
/// As C's `calloc`.
#[no_mangle]
#[unsafe(naked)]
pub unsafe extern "C" fn calloc(_n: usize, _size: usize) -> *mut libc::c_void {
    std::arch::naked_asm!("mov rdx, [rsp]", "jmp {}", sym calloc_from)
}

/// C's `realloc`: [`realloc_from`] with the return address as its third argument.
///
/// # Safety
/// As C's `realloc`: `block` null or a live block of this process's malloc.
#[no_mangle]
#[unsafe(naked)]
pub unsafe extern "C" fn realloc(_block: *mut libc::c_void, _size: usize) -> *mut libc::c_void {
    std::arch::naked_asm!("mov rdx, [rsp]", "jmp {}", sym realloc_from)
}

/// C's `free`: [`free_from`] with the return address as its second argument.
///
/// # Safety
/// As C's `free`: `block` null or a live block of this process's malloc.
#[no_mangle]
#[unsafe(naked)]
pub unsafe extern "C" fn free(_block: *mut libc::c_void) {
    std::arch::naked_asm!("mov rsi, [rsp]", "jmp {}", sym free_from)
}

unsafe extern "C" fn malloc_from(size: usize, caller: usize) -> *mut libc::c_void {
    // SAFETY: glibc's malloc, with the caller's arguments.
    let block = unsafe { __libc_malloc(size) };
    omp_plugin_isolate::gpu_limits::allocated(block, caller);
    block
}

unsafe extern "C" fn calloc_from(n: usize, size: usize, caller: usize) -> *mut libc::c_void {
    // SAFETY: glibc's calloc, with the caller's arguments.
    let block = unsafe { __libc_calloc(n, size) };
    omp_plugin_isolate::gpu_limits::allocated(block, caller);
    block
}

unsafe extern "C" fn realloc_from(block: *mut libc::c_void, size: usize, caller: usize) -> *mut libc::c_void {
    // Counted as the old block freed and the new one allocated; the old block is measured
    // while it is still live (a failed realloc keeps it, and it is counted again).
    omp_plugin_isolate::gpu_limits::freeing(block, caller);
    // SAFETY: glibc's realloc, with the caller's arguments.
    let moved = unsafe { __libc_realloc(block, size) };
    let live = if moved.is_null() && size != 0 { block } else { moved };
    omp_plugin_isolate::gpu_limits::allocated(live, caller);
    moved
}

unsafe extern "C" fn free_from(block: *mut libc::c_void, caller: usize) {
    omp_plugin_isolate::gpu_limits::freeing(block, caller);
    // SAFETY: glibc's free, with the caller's block.
    unsafe { __libc_free(block) }
}

// The worker's OMPT tool (exported, build.rs: libomp looks `ompt_start_tool` up when it
// starts): under LIBOMPTARGET_CHECK=gpu it follows implicit tasks, the scopes in which a
// kernel's threads run its code, to measure their stack. Otherwise there is no tool.

/// `ompt_data_t`.
#[repr(C)]
pub struct OmptData(u64);

type OmptLookup = unsafe extern "C" fn(*const libc::c_char) -> usize;

/// `ompt_start_tool_result_t`.
#[repr(C)]
pub struct OmptStartToolResult {
    initialize: unsafe extern "C" fn(OmptLookup, i32, *mut OmptData) -> i32,
    finalize: unsafe extern "C" fn(*mut OmptData),
    tool_data: OmptData,
}

/// `ompt_callback_implicit_task` and `ompt_scope_begin`/`_end` (OpenMP 5.x, 4.4.4).
const OMPT_CALLBACK_IMPLICIT_TASK: u32 = 7;
const OMPT_SCOPE_BEGIN: u32 = 1;
const OMPT_SCOPE_END: u32 = 2;

/// # Safety
/// Called by libomp as an OpenMP tool's entry point.
#[no_mangle]
pub unsafe extern "C" fn ompt_start_tool(_omp_version: u32, _runtime: *const libc::c_char) -> *mut OmptStartToolResult {
    if !omp_plugin_isolate::gpu_limits::on() {
        return std::ptr::null_mut();
    }
    let result = OmptStartToolResult { initialize: ompt_initialize, finalize: ompt_finalize, tool_data: OmptData(0) };
    Box::into_raw(Box::new(result))
}

unsafe extern "C" fn ompt_initialize(lookup: OmptLookup, _device: i32, _data: *mut OmptData) -> i32 {
    type SetCallback = unsafe extern "C" fn(u32, usize) -> i32;
    // libomp's allocations (its threads, teams, first-use state) are not the kernel's.
    omp_plugin_isolate::gpu_limits::runtime_object_at(lookup as *const () as usize);
    // SAFETY: libomp's lookup, with a NUL-terminated name.
    let set = unsafe { lookup(c"ompt_set_callback".as_ptr()) };
    if set == 0 {
        return 0;
    }
    // SAFETY: `ompt_set_callback` has this type (OpenMP 5.x, 4.6.1.3); the callback has the
    // type of `ompt_callback_implicit_task_t`.
    unsafe {
        let set = std::mem::transmute::<usize, SetCallback>(set);
        set(OMPT_CALLBACK_IMPLICIT_TASK, on_implicit_task as *const () as usize);
    }
    1
}

unsafe extern "C" fn ompt_finalize(_data: *mut OmptData) {}

extern "C" fn on_implicit_task(
    endpoint: u32,
    _parallel: *mut OmptData,
    _task: *mut OmptData,
    _parallelism: u32,
    _index: u32,
    _flags: i32,
) {
    match endpoint {
        OMPT_SCOPE_BEGIN => omp_plugin_isolate::gpu_limits::scope_begins(),
        OMPT_SCOPE_END => omp_plugin_isolate::gpu_limits::scope_ends(),
        _ => {}
    }
}
