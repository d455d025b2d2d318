//! Data entry points: `__tgt_target_data_{begin,end,update}[_nowait]_mapper` and their
//! legacy forms, and the `declare mapper` callbacks.

use crate::abi::{self, Ident};
use crate::{guard, rt};
use omp_runtime::data::Directive;
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
        let arrays = abi::MapArrays { n, bases, begins, sizes, types, names, mappers };
        // SAFETY: clang passes arrays of `n` entries.
        let Some(mut args) = (unsafe { abi::map_args(arrays) }) else { return };
        // SAFETY: clang passes its constant `ident_t` or NULL.
        let loc = unsafe { abi::loc(loc) };
        rt().data_directive(loc, device_id, &mut args, which, nowait);
    })
}

macro_rules! data_entry {
    ($name:ident, $which:expr) => {
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
        ) {
            crate::record_caller!();
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
        pub unsafe extern "C" fn $name(
            d: i64,
            n: i32,
            b: *mut *mut c_void,
            p: *mut *mut c_void,
            s: *mut i64,
            t: *mut i64,
        ) {
            // SAFETY: legacy callers pass arrays of `n` entries.
            unsafe { data($which, false, std::ptr::null(), d, n, b, p, s, t, null_mut(), null_mut()) }
        }
    };
    ($name:ident, $which:expr, legacy_nowait) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name(
            d: i64,
            n: i32,
            b: *mut *mut c_void,
            p: *mut *mut c_void,
            s: *mut i64,
            t: *mut i64,
            _: i32,
            _: *mut c_void,
            _: i32,
            _: *mut c_void,
        ) {
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

/// One pushed component, laid out as LLVM's `MapComponentInfoTy`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct Component {
    pub base: *mut c_void,
    pub begin: *mut c_void,
    pub size: i64,
    pub ty: i64,
    pub name: *mut c_void,
}

/// The mapper handle, laid out as LLVM's `MapperComponentsTy` (a libstdc++
/// `std::vector<MapComponentInfoTy>`: begin, end, capacity), because programs and tests
/// create handles themselves and call the push functions on them. Storage comes from
/// malloc, which is what the vector's `operator delete` releases to.
#[repr(C)]
pub struct ComponentVec {
    pub begin: *mut Component,
    pub end: *mut Component,
    pub cap: *mut Component,
}

impl ComponentVec {
    pub const fn new() -> Self {
        Self { begin: null_mut(), end: null_mut(), cap: null_mut() }
    }

    pub fn len(&self) -> usize {
        if self.begin.is_null() {
            0
        } else {
            (self.end as usize - self.begin as usize) / std::mem::size_of::<Component>()
        }
    }

    pub fn as_slice(&self) -> &[Component] {
        if self.begin.is_null() {
            return &[];
        }
        // SAFETY: [begin, end) holds `len` initialised components written by `push`.
        unsafe { std::slice::from_raw_parts(self.begin, self.len()) }
    }

    fn push(&mut self, c: Component) {
        if self.end == self.cap {
            let len = self.len();
            let cap = (len * 2).max(4);
            // SAFETY: realloc of our own malloc'd buffer (or NULL) to a larger size.
            let p =
                unsafe { libc::realloc(self.begin.cast(), cap * std::mem::size_of::<Component>()) }.cast::<Component>();
            if p.is_null() {
                omp_runtime::info::error(format_args!("out of memory growing a mapper's component list"));
                return;
            }
            self.begin = p;
            // SAFETY: both stay within the new allocation of `cap` elements.
            unsafe {
                self.end = p.add(len);
                self.cap = p.add(cap);
            }
        }
        // SAFETY: end < cap, inside the allocation.
        unsafe {
            self.end.write(c);
            self.end = self.end.add(1);
        }
    }

    /// Releases the storage (for handles the runtime created).
    pub fn release(&mut self) {
        // SAFETY: `begin` is NULL or our malloc'd buffer.
        unsafe { libc::free(self.begin.cast()) };
        *self = Self::new();
    }
}

/// The number of components a mapper pushed so far.
#[no_mangle]
pub unsafe extern "C" fn __tgt_mapper_num_components(handle: *mut c_void) -> i64 {
    if handle.is_null() {
        return 0;
    }
    // SAFETY: the handle is a `MapperComponentsTy` (see `ComponentVec`).
    unsafe { (*handle.cast::<ComponentVec>()).len() as i64 }
}

#[no_mangle]
pub unsafe extern "C" fn __tgt_push_mapper_component(
    handle: *mut c_void,
    base: *mut c_void,
    begin: *mut c_void,
    size: i64,
    ty: i64,
    name: *mut c_void,
) {
    if handle.is_null() {
        return;
    }
    // SAFETY: as above; a mapper runs on the thread that owns the handle.
    let v = unsafe { &mut *handle.cast::<ComponentVec>() };
    v.push(Component { base, begin, size, ty, name });
}
