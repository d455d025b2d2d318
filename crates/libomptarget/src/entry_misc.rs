//! Registration, lifetime, INFO control, nowait queries, interop and other entry points.

use crate::abi::{self, BinDesc, Ident};
use crate::{guard, rt};
use std::ffi::{c_char, c_void};

#[no_mangle]
pub unsafe extern "C" fn __tgt_register_lib(desc: *const BinDesc) {
    guard("__tgt_register_lib", (), || {
        // SAFETY: called by the registration constructor with its descriptor.
        match unsafe { abi::descriptor(desc) } {
            // SAFETY: the descriptor's entries are the binary's own constants, mapped until
            // its `__tgt_unregister_lib` (the registration constructor's contract).
            Ok(d) => unsafe { rt().register_lib(d) },
            Err(e) => rt().register_failed(&e.to_string()),
        }
    })
}

#[no_mangle]
pub extern "C" fn __tgt_unregister_lib(desc: *const BinDesc) {
    guard("__tgt_unregister_lib", (), || rt().unregister_lib(desc as usize))
}

#[no_mangle]
pub extern "C" fn __tgt_init_all_rtls() {
    guard("__tgt_init_all_rtls", (), || {
        rt();
    })
}

#[no_mangle]
pub extern "C" fn __tgt_rtl_init() {
    guard("__tgt_rtl_init", (), || {
        rt();
    })
}

#[no_mangle]
pub extern "C" fn __tgt_rtl_deinit() {}

#[no_mangle]
pub extern "C" fn __tgt_register_requires(_flags: i64) {
    omp_runtime::info::message(format_args!(
        "The void __tgt_register_requires(int64_t) function has been removed. Old OpenMP requirements will not be handled"
    ));
}

#[no_mangle]
pub extern "C" fn __tgt_set_info_flag(flags: u32) {
    guard("__tgt_set_info_flag", (), || rt().set_info_flag(flags))
}

#[no_mangle]
pub extern "C" fn __tgt_print_device_info(device_id: i64) -> i32 {
    guard("__tgt_print_device_info", 0, || {
        let Some(dev) = i32::try_from(device_id).ok().and_then(|d| rt().device(d)) else {
            omp_runtime::info::error(format_args!("__tgt_print_device_info: no device {device_id}"));
            return 0;
        };
        let mut s = String::new();
        for (k, v) in dev.info() {
            s.push_str(&format!("    {k:<15}{v}\n"));
        }
        print!("{s}");
        1
    })
}

#[no_mangle]
pub extern "C" fn ompx_dump_mapping_tables() {
    guard("ompx_dump_mapping_tables", (), || rt().dump_all_tables_stdout())
}

/// Our devices complete work before returning, so a target task never leaves a handle
/// behind; libomp only calls this when one was left.
#[no_mangle]
pub unsafe extern "C" fn __tgt_target_nowait_query(handle: *mut *mut c_void) {
    // SAFETY: libomp passes the address of the task's handle slot.
    if handle.is_null() || unsafe { (*handle).is_null() } {
        omp_runtime::info::emit("omptarget fatal error 1: Receive an invalid async handle from the current OpenMP task. Is this a target nowait region?\n");
        std::process::abort();
    }
    // SAFETY: as above; no handle we hand out needs freeing.
    unsafe { *handle = std::ptr::null_mut() };
}

/// `__tgt_target_sync` (LLVM 22): nothing is ever pending on our devices.
#[no_mangle]
pub extern "C" fn __tgt_target_sync(_loc: *const Ident, _gtid: i32, _task: *mut c_void, _event: *mut c_void) {}

// Interop: the host device offers no foreign runtime objects, so every interop object is
// `omp_interop_none` (NULL) and property queries answer "empty".

const OMP_IRC_EMPTY: i32 = -1;

#[no_mangle]
pub unsafe extern "C" fn __tgt_interop_init(
    loc: *const Ident,
    gtid: i32,
    interop: *mut *mut c_void,
    _ty: i32,
    _dev: i32,
    ndeps: i32,
    deps: *mut c_void,
    _nowait: i32,
) {
    // SAFETY: the arguments are the compiler's, passed through.
    unsafe { crate::host::wait_deps(loc.cast(), gtid, ndeps, deps) };
    if !interop.is_null() {
        // SAFETY: the program passes the address of its interop variable.
        unsafe { *interop = std::ptr::null_mut() };
    }
}

#[no_mangle]
pub unsafe extern "C" fn __tgt_interop_use(
    loc: *const Ident,
    gtid: i32,
    _interop: *mut *mut c_void,
    _dev: i32,
    ndeps: i32,
    deps: *mut c_void,
    _nowait: i32,
) {
    // SAFETY: the arguments are the compiler's, passed through.
    unsafe { crate::host::wait_deps(loc.cast(), gtid, ndeps, deps) };
}

#[no_mangle]
pub unsafe extern "C" fn __tgt_interop_destroy(
    loc: *const Ident,
    gtid: i32,
    interop: *mut *mut c_void,
    _dev: i32,
    ndeps: i32,
    deps: *mut c_void,
    _nowait: i32,
) {
    // SAFETY: the arguments are the compiler's, passed through.
    unsafe { crate::host::wait_deps(loc.cast(), gtid, ndeps, deps) };
    if !interop.is_null() {
        // SAFETY: as for init.
        unsafe { *interop = std::ptr::null_mut() };
    }
}

#[no_mangle]
pub extern "C" fn __tgt_interop_get(
    _loc: *const Ident,
    _ty: i32,
    _dev: i64,
    _prefs: *mut c_void,
    _deps: *mut c_void,
) -> *mut c_void {
    std::ptr::null_mut()
}

#[no_mangle]
pub extern "C" fn __tgt_interop_use60(_loc: *const Ident, _interop: *mut c_void, _deps: *mut c_void) -> i32 {
    0
}

#[no_mangle]
pub extern "C" fn __tgt_interop_release(_loc: *const Ident, _interop: *mut c_void, _deps: *mut c_void) -> i32 {
    0
}

#[no_mangle]
pub extern "C" fn ompx_interop_add_completion_callback(
    _interop: *mut c_void,
    _cb: *mut c_void,
    _data: *mut c_void,
) -> i32 {
    OMP_IRC_EMPTY
}

unsafe fn interop_empty(ret: *mut i32) {
    if !ret.is_null() {
        // SAFETY: the program passes NULL or the address of an int.
        unsafe { *ret = OMP_IRC_EMPTY };
    }
}

#[no_mangle]
pub unsafe extern "C" fn omp_get_interop_int(_interop: *const c_void, _prop: i32, ret: *mut i32) -> isize {
    // SAFETY: see interop_empty.
    unsafe { interop_empty(ret) };
    0
}

#[no_mangle]
pub unsafe extern "C" fn omp_get_interop_ptr(_interop: *const c_void, _prop: i32, ret: *mut i32) -> *mut c_void {
    // SAFETY: see interop_empty.
    unsafe { interop_empty(ret) };
    std::ptr::null_mut()
}

#[no_mangle]
pub unsafe extern "C" fn omp_get_interop_str(_interop: *const c_void, _prop: i32, ret: *mut i32) -> *const c_char {
    // SAFETY: see interop_empty.
    unsafe { interop_empty(ret) };
    std::ptr::null()
}

#[no_mangle]
pub extern "C" fn omp_get_interop_name(_interop: *const c_void, _prop: i32) -> *const c_char {
    std::ptr::null()
}

#[no_mangle]
pub extern "C" fn omp_get_interop_type_desc(_interop: *const c_void, _prop: i32) -> *const c_char {
    std::ptr::null()
}

/// Plugins connect to OMPT through this in LLVM 19; we have no OMPT tool support yet.
#[no_mangle]
pub extern "C" fn ompt_libomptarget_connect(_result: *mut c_void) {}

// CUDA-on-LLVM-offload launch functions (LLVM 22): no CUDA device here; 1 = error.
#[no_mangle]
pub extern "C" fn __llvmPushCallConfiguration() -> u32 {
    1
}

#[no_mangle]
pub extern "C" fn __llvmPopCallConfiguration() -> u32 {
    1
}

#[no_mangle]
pub extern "C" fn llvmLaunchKernel() -> u32 {
    omp_runtime::info::error(format_args!("llvmLaunchKernel: CUDA kernels cannot run on this runtime's devices"));
    1
}
