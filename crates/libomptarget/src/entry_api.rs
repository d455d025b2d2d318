//! The OpenMP device API (`omp_*`) and LLVM's allocation extensions (`llvm_omp_*`).

use crate::abi::slice;
use crate::{guard, rt};
use omp_plugin::AllocKind;
use omp_runtime::api::{MemoryApiError, FAIL};
use std::ffi::{c_char, c_void, CStr, CString};
use std::sync::OnceLock;

#[no_mangle]
pub extern "C" fn omp_get_num_devices() -> i32 {
    guard("omp_get_num_devices", 0, || rt().num_devices())
}

#[no_mangle]
pub extern "C" fn omp_get_initial_device() -> i32 {
    guard("omp_get_initial_device", 0, || rt().initial_device())
}

/// Called on the host, so the answer is the initial device.
#[no_mangle]
pub extern "C" fn omp_get_device_num() -> i32 {
    guard("omp_get_device_num", 0, || rt().initial_device())
}

/// A memory API call's answer: its value, or its error reported and `fail` returned.
fn answer<T>(r: Result<T, MemoryApiError>, fail: T) -> T {
    r.unwrap_or_else(|e| {
        omp_runtime::error::report(&e);
        fail
    })
}

fn alloc(size: usize, dev: i32, kind: AllocKind, call: &'static str) -> *mut c_void {
    guard(call, 0, || answer(rt().target_alloc(size, dev, kind, call), 0)) as *mut c_void
}

fn free(ptr: *mut c_void, dev: i32, kind: AllocKind, call: &'static str) {
    guard(call, (), || answer(rt().target_free(ptr as usize, dev, kind, call), ()))
}

#[no_mangle]
pub extern "C" fn omp_target_alloc(size: usize, dev: i32) -> *mut c_void {
    alloc(size, dev, AllocKind::Default, "omp_target_alloc")
}

#[no_mangle]
pub extern "C" fn llvm_omp_target_alloc_device(size: usize, dev: i32) -> *mut c_void {
    alloc(size, dev, AllocKind::Device, "llvm_omp_target_alloc_device")
}

#[no_mangle]
pub extern "C" fn llvm_omp_target_alloc_host(size: usize, dev: i32) -> *mut c_void {
    alloc(size, dev, AllocKind::Host, "llvm_omp_target_alloc_host")
}

#[no_mangle]
pub extern "C" fn llvm_omp_target_alloc_shared(size: usize, dev: i32) -> *mut c_void {
    alloc(size, dev, AllocKind::Shared, "llvm_omp_target_alloc_shared")
}

#[no_mangle]
pub extern "C" fn omp_target_free(ptr: *mut c_void, dev: i32) {
    free(ptr, dev, AllocKind::Default, "omp_target_free")
}

#[no_mangle]
pub extern "C" fn llvm_omp_target_free_device(ptr: *mut c_void, dev: i32) {
    free(ptr, dev, AllocKind::Device, "llvm_omp_target_free_device")
}

#[no_mangle]
pub extern "C" fn llvm_omp_target_free_host(ptr: *mut c_void, dev: i32) {
    free(ptr, dev, AllocKind::Host, "llvm_omp_target_free_host")
}

#[no_mangle]
pub extern "C" fn llvm_omp_target_free_shared(ptr: *mut c_void, dev: i32) {
    free(ptr, dev, AllocKind::Shared, "llvm_omp_target_free_shared")
}

/// Host kernels have no team-shared scratch memory.
#[no_mangle]
pub extern "C" fn llvm_omp_target_dynamic_shared_alloc() -> *mut c_void {
    std::ptr::null_mut()
}

/// Host memory needs no pinning: the "locked" pointer is the pointer itself.
#[no_mangle]
pub extern "C" fn llvm_omp_target_lock_mem(ptr: *mut c_void, _size: usize, _dev: i32) -> *mut c_void {
    ptr
}

#[no_mangle]
pub extern "C" fn llvm_omp_target_unlock_mem(_ptr: *mut c_void, _dev: i32) {}

#[no_mangle]
pub extern "C" fn omp_target_is_present(ptr: *const c_void, dev: i32) -> i32 {
    guard("omp_target_is_present", 0, || answer(rt().is_present(ptr as usize, dev), 0))
}

#[no_mangle]
pub extern "C" fn omp_target_is_accessible(ptr: *const c_void, size: usize, dev: i32) -> i32 {
    guard("omp_target_is_accessible", 0, || answer(rt().is_accessible(ptr as usize, size, dev), 0))
}

#[no_mangle]
pub extern "C" fn omp_get_mapped_ptr(ptr: *const c_void, dev: i32) -> *mut c_void {
    guard("omp_get_mapped_ptr", 0, || answer(rt().mapped_ptr(ptr as usize, dev), 0)) as *mut c_void
}

#[no_mangle]
pub unsafe extern "C" fn omp_target_memcpy(
    dst: *mut c_void,
    src: *const c_void,
    len: usize,
    dst_off: usize,
    src_off: usize,
    dst_dev: i32,
    src_dev: i32,
) -> i32 {
    guard("omp_target_memcpy", -1, || {
        // SAFETY: `omp_target_memcpy`'s contract: a host side is program memory the caller
        // names for this copy.
        let copied = unsafe { rt().memcpy(dst as usize, src as usize, len, dst_off, src_off, dst_dev, src_dev) };
        answer(copied.map(|()| 0), FAIL)
    })
}

#[no_mangle]
pub unsafe extern "C" fn omp_target_memcpy_rect(
    dst: *mut c_void,
    src: *const c_void,
    elem: usize,
    dims: i32,
    volume: *const usize,
    dst_offsets: *const usize,
    src_offsets: *const usize,
    dst_dims: *const usize,
    src_dims: *const usize,
    dst_dev: i32,
    src_dev: i32,
) -> i32 {
    if dst.is_null() && src.is_null() {
        return i32::MAX;
    }
    if dims <= 0
        || volume.is_null()
        || dst_offsets.is_null()
        || src_offsets.is_null()
        || dst_dims.is_null()
        || src_dims.is_null()
    {
        omp_runtime::error::report(&MemoryApiError::RectArguments);
        return FAIL;
    }
    guard("omp_target_memcpy_rect", -1, || {
        // SAFETY: the five arrays hold `dims` elements each (OpenMP API contract; non-null checked).
        let (v, dof, sof, dd, sd) = unsafe {
            (
                slice(volume, dims),
                slice(dst_offsets, dims),
                slice(src_offsets, dims),
                slice(dst_dims, dims),
                slice(src_dims, dims),
            )
        };
        // SAFETY: `omp_target_memcpy_rect`'s contract: a host side is program memory holding
        // the sub-volume described.
        let copied =
            unsafe { rt().memcpy_rect(dst as usize, src as usize, elem, v, dof, sof, dd, sd, dst_dev, src_dev) };
        answer(copied.map(|()| 0), FAIL)
    })
}

/// Waits for the calling task's children before an "async" copy that depends on them; the
/// copy itself then runs at once. This over-synchronises but never reorders.
fn wait_for_deps(count: i32) {
    if count <= 0 {
        return;
    }
    type Gtid = unsafe extern "C" fn(*const c_void) -> i32;
    type Taskwait = unsafe extern "C" fn(*const c_void, i32) -> i32;
    static FNS: OnceLock<Option<(usize, usize)>> = OnceLock::new();
    let fns = FNS.get_or_init(|| {
        // SAFETY: dlsym with RTLD_DEFAULT and NUL-terminated names.
        let g = unsafe { libc::dlsym(libc::RTLD_DEFAULT, c"__kmpc_global_thread_num".as_ptr()) } as usize;
        // SAFETY: as above.
        let w = unsafe { libc::dlsym(libc::RTLD_DEFAULT, c"__kmpc_omp_taskwait".as_ptr()) } as usize;
        (g != 0 && w != 0).then_some((g, w))
    });
    if let Some((g, w)) = *fns {
        // SAFETY: libomp's `kmp_int32 __kmpc_global_thread_num(ident_t *)` and
        // `kmp_int32 __kmpc_omp_taskwait(ident_t *, kmp_int32)`; both accept a NULL ident.
        unsafe {
            let gtid = std::mem::transmute::<usize, Gtid>(g)(std::ptr::null());
            std::mem::transmute::<usize, Taskwait>(w)(std::ptr::null(), gtid);
        }
    }
}

#[no_mangle]
pub unsafe extern "C" fn omp_target_memcpy_async(
    dst: *mut c_void,
    src: *const c_void,
    len: usize,
    dst_off: usize,
    src_off: usize,
    dst_dev: i32,
    src_dev: i32,
    dep_count: i32,
    _deps: *mut c_void,
) -> i32 {
    wait_for_deps(dep_count);
    // SAFETY: same contract as the blocking form.
    unsafe { omp_target_memcpy(dst, src, len, dst_off, src_off, dst_dev, src_dev) }
}

#[no_mangle]
pub unsafe extern "C" fn omp_target_memcpy_rect_async(
    dst: *mut c_void,
    src: *const c_void,
    elem: usize,
    dims: i32,
    volume: *const usize,
    dst_offsets: *const usize,
    src_offsets: *const usize,
    dst_dims: *const usize,
    src_dims: *const usize,
    dst_dev: i32,
    src_dev: i32,
    dep_count: i32,
    _deps: *mut c_void,
) -> i32 {
    wait_for_deps(dep_count);
    // SAFETY: same contract as the blocking form.
    unsafe {
        omp_target_memcpy_rect(
            dst,
            src,
            elem,
            dims,
            volume,
            dst_offsets,
            src_offsets,
            dst_dims,
            src_dims,
            dst_dev,
            src_dev,
        )
    }
}

#[no_mangle]
pub unsafe extern "C" fn omp_target_memset(ptr: *mut c_void, byte: i32, len: usize, dev: i32) -> *mut c_void {
    guard("omp_target_memset", ptr as usize, || {
        // SAFETY: `omp_target_memset`'s contract: on the host, `ptr` names `len` writable
        // bytes of the program's.
        let filled = unsafe { rt().memset(ptr as usize, byte, len, dev) };
        answer(filled, ());
        ptr as usize
    }) as *mut c_void
}

#[no_mangle]
pub unsafe extern "C" fn omp_target_memset_async(
    ptr: *mut c_void,
    byte: i32,
    len: usize,
    dev: i32,
    dep_count: i32,
    _deps: *mut c_void,
) -> *mut c_void {
    wait_for_deps(dep_count);
    // SAFETY: same contract as the blocking form.
    unsafe { omp_target_memset(ptr, byte, len, dev) }
}

#[no_mangle]
pub extern "C" fn omp_target_associate_ptr(
    host: *const c_void,
    tgt: *const c_void,
    size: usize,
    offset: usize,
    dev: i32,
) -> i32 {
    guard("omp_target_associate_ptr", FAIL, || {
        answer(rt().associate_ptr(host as usize, tgt as usize, size, offset, dev).map(|()| 0), FAIL)
    })
}

#[no_mangle]
pub extern "C" fn omp_target_disassociate_ptr(host: *const c_void, dev: i32) -> i32 {
    guard("omp_target_disassociate_ptr", FAIL, || answer(rt().disassociate_ptr(host as usize, dev).map(|()| 0), FAIL))
}

/// Device UIDs as the runtime names them (`omp_runtime::compose`), the host's last.
fn uids() -> &'static Vec<CString> {
    static UIDS: OnceLock<Vec<CString>> = OnceLock::new();
    UIDS.get_or_init(|| {
        let devices = rt().devices();
        let names = devices.iter().map(|d| omp_runtime::compose::device_uid(d.id));
        names
            .chain([omp_runtime::compose::HOST_UID.to_string()])
            .map(|n| CString::new(n).expect("no NUL in a device UID"))
            .collect()
    })
}

#[no_mangle]
pub extern "C" fn omp_get_uid_from_device(dev: i32) -> *const c_char {
    guard("omp_get_uid_from_device", std::ptr::null(), || {
        let u = uids();
        let idx = if dev == rt().initial_device() || dev == -1 { u.len() - 1 } else { dev as usize };
        u.get(idx).filter(|_| dev >= -1).map_or(std::ptr::null(), |c| c.as_ptr())
    })
}

#[no_mangle]
pub unsafe extern "C" fn omp_get_device_from_uid(uid: *const c_char) -> i32 {
    if uid.is_null() {
        return -2;
    }
    // SAFETY: the program passes a NUL-terminated string.
    let s = unsafe { CStr::from_ptr(uid) };
    guard("omp_get_device_from_uid", -2, || {
        let u = uids();
        match u.iter().position(|c| c.as_c_str() == s) {
            Some(i) if i == u.len() - 1 => rt().initial_device(),
            Some(i) => i as i32,
            None => -2,
        }
    })
}
