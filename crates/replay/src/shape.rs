//! `--teams N` / `--threads N`: the replayed kernel's launch shape. On a CPU device the kernel
//! sets its own shape: its code asks libomp for its `num_teams`/`thread_limit` clauses'
//! values (`__kmpc_push_num_teams`) and its `num_threads` clauses' (`__kmpc_push_num_threads`)
//! just before it forks; without a clause, libomp's defaults apply. So both are replaced
//! here: libomp's defaults are set (`omp_set_num_teams`, `omp_set_num_threads`,
//! `omp_set_teams_thread_limit`), and this executable exports its own
//! `__kmpc_push_num_teams`, `__kmpc_push_num_teams_51` and `__kmpc_push_num_threads`, which
//! the image binds to before libomp's (the executable comes first in the global scope; see
//! build.rs) and which pass the asked numbers on to libomp's in place of the clauses'.
//! libomp still bounds the teams by the threads it may start (`OMP_THREAD_LIMIT`, the
//! machine's cores), as in the program.

use std::ffi::{c_int, c_void, CStr};
use std::sync::atomic::{AtomicI32, AtomicPtr, Ordering};

/// The asked teams and threads (0: the kernel's own).
static TEAMS: AtomicI32 = AtomicI32::new(0);
static THREADS: AtomicI32 = AtomicI32::new(0);

/// Asks for `teams` teams and `threads` threads per team, clauses or not (call it once the
/// image is loaded, before the kernel runs).
pub fn set(teams: Option<u32>, threads: Option<u32>) {
    find_libomp();
    let as_int = |n: u32| n.min(i32::MAX as u32) as i32;
    let call = |name: &CStr, n: i32| {
        // SAFETY: dlsym in the global scope with a NUL-terminated name; NULL when absent.
        let f = unsafe { libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr()) };
        if !f.is_null() {
            // SAFETY: `omp_set_num_teams`, `omp_set_num_threads` and
            // `omp_set_teams_thread_limit` are `void(int)` (OpenMP API).
            let f = unsafe { std::mem::transmute::<*mut c_void, extern "C" fn(c_int)>(f) };
            f(n);
        }
    };
    if let Some(t) = teams.filter(|&t| t > 0).map(as_int) {
        TEAMS.store(t, Ordering::Relaxed);
        call(c"omp_set_num_teams", t);
    }
    if let Some(t) = threads.filter(|&t| t > 0).map(as_int) {
        THREADS.store(t, Ordering::Relaxed);
        call(c"omp_set_num_threads", t);
        call(c"omp_set_teams_thread_limit", t);
    }
}

/// `asked` when it was asked for, else the kernel's `own`.
fn or_asked(asked: &AtomicI32, own: c_int) -> c_int {
    match asked.load(Ordering::Relaxed) {
        0 => own,
        n => n,
    }
}

/// libomp's own `__kmpc_push_num_teams`, `_51` and `__kmpc_push_num_threads` (found by
/// `set`, in the library that defines `__kmpc_fork_teams`; null when not found).
static LIBOMP: [AtomicPtr<c_void>; 3] =
    [AtomicPtr::new(std::ptr::null_mut()), AtomicPtr::new(std::ptr::null_mut()), AtomicPtr::new(std::ptr::null_mut())];
const PUSH_TEAMS: usize = 0;
const PUSH_TEAMS_51: usize = 1;
const PUSH_THREADS: usize = 2;

/// Finds libomp's definitions of the functions this executable replaces: in the object that
/// defines `__kmpc_fork_teams` (not this executable's, which come first in the global scope).
fn find_libomp() {
    // SAFETY: dlsym in the global scope with a NUL-terminated name; NULL when absent.
    let fork = unsafe { libc::dlsym(libc::RTLD_DEFAULT, c"__kmpc_fork_teams".as_ptr()) };
    if fork.is_null() {
        return;
    }
    // SAFETY: a zeroed Dl_info is valid; dladdr fills it for an address in a loaded object.
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    // SAFETY: `fork` is a function of a loaded object; `info` is ours to fill.
    if unsafe { libc::dladdr(fork, &mut info) } == 0 || info.dli_fname.is_null() {
        return;
    }
    // SAFETY: dli_fname is the NUL-terminated path of a loaded object; RTLD_NOLOAD only
    // returns a handle to it (loaded already), never loads anything.
    let handle = unsafe { libc::dlopen(info.dli_fname, libc::RTLD_NOW | libc::RTLD_NOLOAD) };
    if handle.is_null() {
        return;
    }
    for (slot, name) in [
        (PUSH_TEAMS, c"__kmpc_push_num_teams"),
        (PUSH_TEAMS_51, c"__kmpc_push_num_teams_51"),
        (PUSH_THREADS, c"__kmpc_push_num_threads"),
    ] {
        // SAFETY: dlsym on a live handle (kept for the process's life) with a NUL-terminated name.
        LIBOMP[slot].store(unsafe { libc::dlsym(handle, name.as_ptr()) }, Ordering::Release);
    }
}

/// libomp's function in `slot`, or null.
fn libomp(slot: usize) -> *mut c_void {
    LIBOMP[slot].load(Ordering::Acquire)
}

/// libomp's `__kmpc_push_num_teams`, with the asked numbers in place of the clauses'.
///
/// # Safety
/// As libomp's: called by compiled OpenMP code with its own location and thread id.
#[no_mangle]
pub unsafe extern "C" fn __kmpc_push_num_teams(loc: *mut c_void, gtid: i32, num_teams: i32, num_threads: i32) {
    let f = libomp(PUSH_TEAMS);
    if !f.is_null() {
        // SAFETY: libomp's `void __kmpc_push_num_teams(ident_t *, kmp_int32, kmp_int32, kmp_int32)`.
        unsafe {
            let f = std::mem::transmute::<*mut c_void, unsafe extern "C" fn(*mut c_void, i32, i32, i32)>(f);
            f(loc, gtid, or_asked(&TEAMS, num_teams), or_asked(&THREADS, num_threads));
        }
    }
}

/// libomp's `__kmpc_push_num_teams_51` (a lower and an upper bound of teams), with the asked
/// numbers in place of the clauses'.
///
/// # Safety
/// As libomp's: called by compiled OpenMP code with its own location and thread id.
#[no_mangle]
pub unsafe extern "C" fn __kmpc_push_num_teams_51(
    loc: *mut c_void,
    gtid: i32,
    num_teams_lb: i32,
    num_teams_ub: i32,
    num_threads: i32,
) {
    let f = libomp(PUSH_TEAMS_51);
    if !f.is_null() {
        let (lb, ub) = match TEAMS.load(Ordering::Relaxed) {
            0 => (num_teams_lb, num_teams_ub),
            n => (n, n),
        };
        // SAFETY: libomp's `void __kmpc_push_num_teams_51(ident_t *, kmp_int32, kmp_int32,
        // kmp_int32, kmp_int32)`.
        unsafe {
            let f = std::mem::transmute::<*mut c_void, unsafe extern "C" fn(*mut c_void, i32, i32, i32, i32)>(f);
            f(loc, gtid, lb, ub, or_asked(&THREADS, num_threads));
        }
    }
}

/// libomp's `__kmpc_push_num_threads`, with the asked number in place of the clause's.
///
/// # Safety
/// As libomp's: called by compiled OpenMP code with its own location and thread id.
#[no_mangle]
pub unsafe extern "C" fn __kmpc_push_num_threads(loc: *mut c_void, gtid: i32, num_threads: i32) {
    let f = libomp(PUSH_THREADS);
    if !f.is_null() {
        // SAFETY: libomp's `void __kmpc_push_num_threads(ident_t *, kmp_int32, kmp_int32)`.
        unsafe {
            let f = std::mem::transmute::<*mut c_void, unsafe extern "C" fn(*mut c_void, i32, i32)>(f);
            f(loc, gtid, or_asked(&THREADS, num_threads));
        }
    }
}
