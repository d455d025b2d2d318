//! Parallel regions (`__kmpc_parallel_51`, flang 22's `__kmpc_parallel_60`), forwarded to libomp.
//!
//! Why libomp rather than our own threads: the same device code calls libomp's `__kmpc_barrier`,
//! `__kmpc_reduce`, `__kmpc_critical`, `__kmpc_single`, `omp_get_thread_num` directly, and those
//! only work inside a libomp team.

use core::ffi::c_void;

use crate::ffi::{self, Ident};
use crate::kernel::{self, KernelCtx};

/// The outlined region: `void fn(i32 *gtid, i32 *btid, void *arg0, ..., void *argN-1)`.
type Outlined = *mut c_void;

/// `proc_bind` value meaning "no clause" in libomp's `kmp_proc_bind_t` (flang passes -1).
const PROC_BIND_DEFAULT: i32 = 6;

/// Most shared-variable arguments one region may pass (flang always passes 1: a struct).
const MAX_ARGS: i64 = 16;

/// Calls `f(gtid, btid, args[0], ..., args[nargs-1])`.
///
/// # Safety
/// `f` is an outlined region taking `nargs` pointer arguments after the two ids, `args` points to
/// `nargs` pointers, and `0 <= nargs <= MAX_ARGS`.
unsafe fn invoke(f: Outlined, gtid: *mut i32, btid: *mut i32, args: *const *mut c_void, nargs: i64) {
    macro_rules! call {
        ($($i:literal)*) => {{
            // SAFETY: per this function's contract `f` has this signature. Passing the arguments
            // through one variadic-free pointer type per arity matches the SysV ABI of the callee.
            unsafe {
                let f: unsafe extern "C" fn(*mut i32, *mut i32 $(, call!(@ty $i))*) = core::mem::transmute(f);
                f(gtid, btid $(, *args.add($i))*)
            }
        }};
        (@ty $i:literal) => { *mut c_void };
    }
    match nargs {
        0 => call!(),
        1 => call!(0),
        2 => call!(0 1),
        3 => call!(0 1 2),
        4 => call!(0 1 2 3),
        5 => call!(0 1 2 3 4),
        6 => call!(0 1 2 3 4 5),
        7 => call!(0 1 2 3 4 5 6),
        8 => call!(0 1 2 3 4 5 6 7),
        9 => call!(0 1 2 3 4 5 6 7 8),
        10 => call!(0 1 2 3 4 5 6 7 8 9),
        11 => call!(0 1 2 3 4 5 6 7 8 9 10),
        12 => call!(0 1 2 3 4 5 6 7 8 9 10 11),
        13 => call!(0 1 2 3 4 5 6 7 8 9 10 11 12),
        14 => call!(0 1 2 3 4 5 6 7 8 9 10 11 12 13),
        15 => call!(0 1 2 3 4 5 6 7 8 9 10 11 12 13 14),
        16 => call!(0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15),
        _ => ffi::fatal("parallel region with an unsupported number of arguments"),
    }
}

/// The microtask libomp runs on every thread of the team: installs the encountering thread's
/// kernel context (so `omp_is_initial_device` and the team queries answer right on libomp's
/// worker threads), then runs the outlined region.
unsafe extern "C" fn trampoline(
    gtid: *mut i32,
    btid: *mut i32,
    f: Outlined,
    args: *const *mut c_void,
    nargs: i64,
    parent: *const KernelCtx,
) {
    // SAFETY: `parent` points to the encountering thread's context, alive until
    // `__kmpc_fork_call` returns, which is after every thread of the team finished this call.
    let mut ctx = unsafe { *parent };
    ctx.holds_teams_lock = false;
    let saved = kernel::replace(ctx);
    // SAFETY: `f`/`args`/`nargs` are what `parallel` validated and received from generated code.
    unsafe { invoke(f, gtid, btid, args, nargs) };
    kernel::replace(saved);
}

/// The number of threads to request from libomp, if any: the `num_threads` clause, capped by
/// the kernel's `thread_limit`; or the `thread_limit` alone when it is below libomp's default.
fn requested_threads(num_threads: i32, thread_limit: i32, default_threads: i32) -> Option<i32> {
    match (num_threads > 0, thread_limit > 0) {
        (true, true) => Some(num_threads.min(thread_limit)),
        (true, false) => Some(num_threads),
        (false, true) if thread_limit < default_threads => Some(thread_limit),
        _ => None,
    }
}

/// Shared body of `__kmpc_parallel_51/60` (whose C argument list it mirrors, hence the count).
///
/// # Safety
/// The arguments come from compiler-generated code: see `invoke`.
#[allow(clippy::too_many_arguments)]
unsafe fn parallel(
    loc: *mut Ident,
    gtid: i32,
    if_expr: i32,
    num_threads: i32,
    proc_bind: i32,
    f: Outlined,
    args: *const *mut c_void,
    nargs: i64,
) {
    if !(0..=MAX_ARGS).contains(&nargs) || f.is_null() {
        ffi::fatal("invalid parallel region (null function or argument count)");
    }
    let loc = ffi::loc_or_default(loc);
    if if_expr == 0 {
        let mut gtid_v = gtid;
        let mut zero = 0i32;
        // SAFETY: libomp serialized-region protocol on the calling thread; `invoke`'s contract
        // holds per this function's contract.
        unsafe {
            ffi::__kmpc_serialized_parallel(loc, gtid);
            invoke(f, &mut gtid_v, &mut zero, args, nargs);
            ffi::__kmpc_end_serialized_parallel(loc, gtid);
        }
        return;
    }
    let ctx = kernel::current();
    // SAFETY: plain libomp calls with the caller's location and global thread id; the pushes
    // apply to the fork that follows on this thread. The trampoline's variadic arguments match
    // its declared parameters (3 pointers, an i64, a pointer), and `ctx` outlives the fork.
    unsafe {
        if let Some(n) = requested_threads(num_threads, ctx.thread_limit, ffi::omp_get_max_threads()) {
            ffi::__kmpc_push_num_threads(loc, gtid, n);
        }
        if proc_bind >= 0 && proc_bind != PROC_BIND_DEFAULT {
            ffi::__kmpc_push_proc_bind(loc, gtid, proc_bind);
        }
        let micro: ffi::Microtask = core::mem::transmute(
            trampoline as unsafe extern "C" fn(*mut i32, *mut i32, Outlined, *const *mut c_void, i64, *const KernelCtx),
        );
        ffi::__kmpc_fork_call(loc, 4, micro, f, args, nargs, &ctx as *const KernelCtx);
    }
}

/// LLVM 19's parallel entry point. `wrapper_fn` (the GPU state machine's wrapper) is unused.
///
/// # Safety
/// Called by compiler-generated code with an outlined region `f` taking `nargs` pointers `args`.
#[no_mangle]
pub unsafe extern "C" fn __kmpc_parallel_51(
    loc: *mut Ident,
    gtid: i32,
    if_expr: i32,
    num_threads: i32,
    proc_bind: i32,
    f: Outlined,
    _wrapper_fn: *mut c_void,
    args: *const *mut c_void,
    nargs: i64,
) {
    // SAFETY: forwarded contract.
    unsafe { parallel(loc, gtid, if_expr, num_threads, proc_bind, f, args, nargs) }
}

/// LLVM 22's parallel entry point; `strict` (for `num_threads(strict: n)`) cannot be honoured
/// more strictly than libomp's own `num_threads`, so it is ignored.
///
/// # Safety
/// As for [`__kmpc_parallel_51`].
#[no_mangle]
pub unsafe extern "C" fn __kmpc_parallel_60(
    loc: *mut Ident,
    gtid: i32,
    if_expr: i32,
    num_threads: i32,
    proc_bind: i32,
    f: Outlined,
    _wrapper_fn: *mut c_void,
    args: *const *mut c_void,
    nargs: i64,
    _strict: i32,
) {
    // SAFETY: forwarded contract.
    unsafe { parallel(loc, gtid, if_expr, num_threads, proc_bind, f, args, nargs) }
}

#[cfg(test)]
mod tests {
    use super::requested_threads;

    #[test]
    fn num_threads_clause_wins_but_is_capped_by_thread_limit() {
        assert_eq!(requested_threads(4, 0, 2), Some(4));
        assert_eq!(requested_threads(4, 3, 2), Some(3));
        assert_eq!(requested_threads(2, 256, 16), Some(2));
    }

    #[test]
    fn thread_limit_only_matters_below_the_default() {
        assert_eq!(requested_threads(-1, 256, 16), None);
        assert_eq!(requested_threads(0, 2, 16), Some(2));
        assert_eq!(requested_threads(-1, 0, 16), None);
    }
}
