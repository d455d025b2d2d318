//! Data entry points: `__tgt_target_data_{begin,end,update}[_nowait]_mapper` and their
//! legacy forms, and the `declare mapper` callbacks.

use crate::abi::{self, Ident};
use crate::{guard, rt};
use omp_runtime::data::Directive;
use omp_runtime::MapperComponents;
use std::ffi::c_void;
use std::ptr::null_mut;

#[allow(clippy::too_many_arguments)]
unsafe fn data(
    which: Directive,
    nowait: bool,
    loc: *const Ident,
    device_id: i64,
    n: i32,
    bases: *mut *mut c_void,
    begins: *mut *mut c_void,
    sizes: *mut i64,
    types: *mut i64,
    names: *mut *mut c_void,
    mappers: *mut *mut c_void,
) {
    guard("__tgt_target_data", (), || {
        // SAFETY: clang passes arrays of `n` entries.
        let Some(mut args) = (unsafe { abi::map_args(n, bases, begins, sizes, types, names, mappers) }) else { return };
        rt().data_directive(abi::loc(loc), device_id, &mut args, which, nowait);
    })
}

macro_rules! data_entry {
    ($name:ident, $which:expr) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name(l: *const Ident, d: i64, n: i32, b: *mut *mut c_void, p: *mut *mut c_void, s: *mut i64, t: *mut i64, nm: *mut *mut c_void, m: *mut *mut c_void) {
            // SAFETY: clang passes arrays of `n` entries.
            unsafe { data($which, false, l, d, n, b, p, s, t, nm, m) }
        }
    };
    ($name:ident, $which:expr, nowait) => {
        /// Deps are ignored: libomp already resolved them before running this target task.
        #[no_mangle]
        pub unsafe extern "C" fn $name(
            l: *const Ident,
            d: i64,
            n: i32,
            b: *mut *mut c_void,
            p: *mut *mut c_void,
            s: *mut i64,
            t: *mut i64,
            nm: *mut *mut c_void,
            m: *mut *mut c_void,
            _: i32,
            _: *mut c_void,
            _: i32,
            _: *mut c_void,
        ) {
            // SAFETY: clang passes arrays of `n` entries.
            unsafe { data($which, true, l, d, n, b, p, s, t, nm, m) }
        }
    };
    ($name:ident, $which:expr, legacy) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name(d: i64, n: i32, b: *mut *mut c_void, p: *mut *mut c_void, s: *mut i64, t: *mut i64) {
            // SAFETY: legacy callers pass arrays of `n` entries.
            unsafe { data($which, false, std::ptr::null(), d, n, b, p, s, t, null_mut(), null_mut()) }
        }
    };
    ($name:ident, $which:expr, legacy_nowait) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name(d: i64, n: i32, b: *mut *mut c_void, p: *mut *mut c_void, s: *mut i64, t: *mut i64, _: i32, _: *mut c_void, _: i32, _: *mut c_void) {
            // SAFETY: legacy callers pass arrays of `n` entries.
            unsafe { data($which, true, std::ptr::null(), d, n, b, p, s, t, null_mut(), null_mut()) }
        }
    };
}

data_entry!(__tgt_target_data_begin_mapper, Directive::Begin);
data_entry!(__tgt_target_data_end_mapper, Directive::End);
data_entry!(__tgt_target_data_update_mapper, Directive::Update);
data_entry!(__tgt_target_data_begin_nowait_mapper, Directive::Begin, nowait);
data_entry!(__tgt_target_data_end_nowait_mapper, Directive::End, nowait);
data_entry!(__tgt_target_data_update_nowait_mapper, Directive::Update, nowait);
data_entry!(__tgt_target_data_begin, Directive::Begin, legacy);
data_entry!(__tgt_target_data_end, Directive::End, legacy);
data_entry!(__tgt_target_data_update, Directive::Update, legacy);
data_entry!(__tgt_target_data_begin_nowait, Directive::Begin, legacy_nowait);
data_entry!(__tgt_target_data_end_nowait, Directive::End, legacy_nowait);
data_entry!(__tgt_target_data_update_nowait, Directive::Update, legacy_nowait);

/// The number of components a mapper pushed so far.
#[no_mangle]
pub unsafe extern "C" fn __tgt_mapper_num_components(handle: *mut c_void) -> i64 {
    if handle.is_null() {
        return 0;
    }
    // SAFETY: the handle is the `MapperComponents` the runtime passed to the mapper function.
    unsafe { (*handle.cast::<MapperComponents>()).types.len() as i64 }
}

#[no_mangle]
pub unsafe extern "C" fn __tgt_push_mapper_component(handle: *mut c_void, base: *mut c_void, begin: *mut c_void, size: i64, ty: i64, name: *mut c_void) {
    if handle.is_null() {
        return;
    }
    // SAFETY: as above; the mapper runs on the thread that created the handle.
    let comps = unsafe { &mut *handle.cast::<MapperComponents>() };
    comps.push(base as usize, begin as usize, size, ty, name as usize);
}
