//! Kernel launch entry points: `__tgt_target_kernel` and the legacy `__tgt_target*` forms.

use crate::abi::{self, Ident, KernelArgs};
use crate::{guard, rt};
use omp_runtime::launch::OFFLOAD_FAIL;
use std::ffi::c_void;
use std::ptr::null_mut;

#[no_mangle]
#[link_section = ".text.hot.omp_launch"]
pub unsafe extern "C" fn __tgt_target_kernel(
    loc: *const Ident,
    device_id: i64,
    num_teams: i32,
    thread_limit: i32,
    host_ptr: *mut c_void,
    args: *mut KernelArgs,
) -> i32 {
    crate::record_caller!();
    guard("__tgt_target_kernel", OFFLOAD_FAIL, || {
        // SAFETY: clang passes its KernelArgsTy for this launch.
        let Some(kernel_args) = (unsafe { abi::kernel_args(args) }) else {
            return OFFLOAD_FAIL;
        };
        // SAFETY: checked just above; the arrays are the construct's, alive for the call.
        let mut launch = unsafe { abi::kernel_launch(kernel_args, num_teams, thread_limit) };
        // SAFETY: clang passes its constant `ident_t` or NULL.
        let loc = unsafe { abi::loc(loc) };
        rt().target_kernel(loc, device_id, host_ptr as usize, &mut launch)
    })
}

/// Deps are ignored: the host device completes everything synchronously.
#[no_mangle]
pub unsafe extern "C" fn __tgt_target_kernel_nowait(
    loc: *const Ident,
    device_id: i64,
    num_teams: i32,
    thread_limit: i32,
    host_ptr: *mut c_void,
    args: *mut KernelArgs,
    _dep_num: i32,
    _dep_list: *mut c_void,
    _noalias_dep_num: i32,
    _noalias_dep_list: *mut c_void,
) -> i32 {
    // SAFETY: same contract as the blocking form.
    unsafe { __tgt_target_kernel(loc, device_id, num_teams, thread_limit, host_ptr, args) }
}

/// Builds a version-1 KernelArgs for the pre-`__tgt_target_kernel` entry points.
#[allow(clippy::too_many_arguments)]
unsafe fn legacy(
    loc: *const Ident,
    device_id: i64,
    host_ptr: *mut c_void,
    n: i32,
    bases: *mut *mut c_void,
    begins: *mut *mut c_void,
    sizes: *mut i64,
    types: *mut i64,
    names: *mut *mut c_void,
    mappers: *mut *mut c_void,
    teams: i32,
    threads: i32,
) -> i32 {
    let mut ka = KernelArgs {
        version: 1,
        num_args: n.max(0) as u32,
        arg_base_ptrs: bases,
        arg_ptrs: begins,
        arg_sizes: sizes,
        arg_types: types,
        arg_names: names,
        arg_mappers: mappers,
        tripcount: 0,
        flags: 0,
        num_teams: [teams as u32, 0, 0],
        thread_limit: [threads as u32, 0, 0],
        dyn_cgroup_mem: 0,
    };
    // SAFETY: `ka` lives across the call and its arrays are the caller's.
    unsafe { __tgt_target_kernel(loc, device_id, teams, threads, host_ptr, &mut ka) }
}

macro_rules! legacy_target {
    ($name:ident, teams: $teams:tt, mapper: $mapper:tt, nowait: $nowait:tt) => {
        legacy_target!(@emit $name, $teams, $mapper, $nowait);
    };
    (@emit $name:ident, false, false, false) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name(d: i64, h: *mut c_void, n: i32, b: *mut *mut c_void, p: *mut *mut c_void, s: *mut i64, t: *mut i64) -> i32 {
            // SAFETY: legacy callers pass arrays of `n` entries.
            unsafe { legacy(std::ptr::null(), d, h, n, b, p, s, t, null_mut(), null_mut(), -1, -1) }
        }
    };
    (@emit $name:ident, false, false, true) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name(d: i64, h: *mut c_void, n: i32, b: *mut *mut c_void, p: *mut *mut c_void, s: *mut i64, t: *mut i64, _: i32, _: *mut c_void, _: i32, _: *mut c_void) -> i32 {
            // SAFETY: legacy callers pass arrays of `n` entries.
            unsafe { legacy(std::ptr::null(), d, h, n, b, p, s, t, null_mut(), null_mut(), -1, -1) }
        }
    };
    (@emit $name:ident, true, false, false) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name(d: i64, h: *mut c_void, n: i32, b: *mut *mut c_void, p: *mut *mut c_void, s: *mut i64, t: *mut i64, teams: i32, threads: i32) -> i32 {
            // SAFETY: legacy callers pass arrays of `n` entries.
            unsafe { legacy(std::ptr::null(), d, h, n, b, p, s, t, null_mut(), null_mut(), teams, threads) }
        }
    };
    (@emit $name:ident, true, false, true) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name(d: i64, h: *mut c_void, n: i32, b: *mut *mut c_void, p: *mut *mut c_void, s: *mut i64, t: *mut i64, teams: i32, threads: i32, _: i32, _: *mut c_void, _: i32, _: *mut c_void) -> i32 {
            // SAFETY: legacy callers pass arrays of `n` entries.
            unsafe { legacy(std::ptr::null(), d, h, n, b, p, s, t, null_mut(), null_mut(), teams, threads) }
        }
    };
    (@emit $name:ident, false, true, false) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name(l: *const Ident, d: i64, h: *mut c_void, n: i32, b: *mut *mut c_void, p: *mut *mut c_void, s: *mut i64, t: *mut i64, nm: *mut *mut c_void, m: *mut *mut c_void) -> i32 {
            // SAFETY: legacy callers pass arrays of `n` entries.
            unsafe { legacy(l, d, h, n, b, p, s, t, nm, m, -1, -1) }
        }
    };
    (@emit $name:ident, false, true, true) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name(l: *const Ident, d: i64, h: *mut c_void, n: i32, b: *mut *mut c_void, p: *mut *mut c_void, s: *mut i64, t: *mut i64, nm: *mut *mut c_void, m: *mut *mut c_void, _: i32, _: *mut c_void, _: i32, _: *mut c_void) -> i32 {
            // SAFETY: legacy callers pass arrays of `n` entries.
            unsafe { legacy(l, d, h, n, b, p, s, t, nm, m, -1, -1) }
        }
    };
    (@emit $name:ident, true, true, false) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name(l: *const Ident, d: i64, h: *mut c_void, n: i32, b: *mut *mut c_void, p: *mut *mut c_void, s: *mut i64, t: *mut i64, nm: *mut *mut c_void, m: *mut *mut c_void, teams: i32, threads: i32) -> i32 {
            // SAFETY: legacy callers pass arrays of `n` entries.
            unsafe { legacy(l, d, h, n, b, p, s, t, nm, m, teams, threads) }
        }
    };
    (@emit $name:ident, true, true, true) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name(l: *const Ident, d: i64, h: *mut c_void, n: i32, b: *mut *mut c_void, p: *mut *mut c_void, s: *mut i64, t: *mut i64, nm: *mut *mut c_void, m: *mut *mut c_void, teams: i32, threads: i32, _: i32, _: *mut c_void, _: i32, _: *mut c_void) -> i32 {
            // SAFETY: legacy callers pass arrays of `n` entries.
            unsafe { legacy(l, d, h, n, b, p, s, t, nm, m, teams, threads) }
        }
    };
}

legacy_target!(__tgt_target, teams: false, mapper: false, nowait: false);
legacy_target!(__tgt_target_nowait, teams: false, mapper: false, nowait: true);
legacy_target!(__tgt_target_teams, teams: true, mapper: false, nowait: false);
legacy_target!(__tgt_target_teams_nowait, teams: true, mapper: false, nowait: true);
legacy_target!(__tgt_target_mapper, teams: false, mapper: true, nowait: false);
legacy_target!(__tgt_target_nowait_mapper, teams: false, mapper: true, nowait: true);
legacy_target!(__tgt_target_teams_mapper, teams: true, mapper: true, nowait: false);
legacy_target!(__tgt_target_teams_nowait_mapper, teams: true, mapper: true, nowait: true);

/// Trip counts only feed GPU grid heuristics.
#[no_mangle]
pub extern "C" fn __kmpc_push_target_tripcount(_device_id: i64, _tripcount: u64) {}

#[no_mangle]
pub extern "C" fn __kmpc_push_target_tripcount_mapper(_loc: *const Ident, _device_id: i64, _tripcount: u64) {}

/// Record-replay needs a device virtual-address reservation the host device cannot give.
#[no_mangle]
pub extern "C" fn __tgt_activate_record_replay(
    _device_id: i64,
    _size: u64,
    _vaddr: *mut c_void,
    _record: bool,
    _save: bool,
    _req: *mut u64,
) -> i32 {
    omp_runtime::info::error(format_args!("kernel record-replay is not supported by this runtime's devices"));
    OFFLOAD_FAIL
}

#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub extern "C" fn __tgt_target_kernel_replay(
    _loc: *const Ident,
    _device_id: i64,
    _host_ptr: *mut c_void,
    _device_memory: *mut c_void,
    _device_memory_size: i64,
    _tgt_args: *mut *mut c_void,
    _tgt_offsets: *mut isize,
    _num_args: i32,
    _num_teams: i32,
    _thread_limit: i32,
    _tripcount: u64,
) -> i32 {
    omp_runtime::info::error(format_args!("kernel record-replay is not supported by this runtime's devices"));
    OFFLOAD_FAIL
}
