//! The libomp and libc functions this runtime calls. They resolve against the `libomp.so` and
//! `libc.so` that the linker wrapper links into every device image.

use core::ffi::c_void;

/// libomp's `ident_t` (source location and flags), passed through untouched.
#[repr(C)]
pub struct Ident {
    reserved_1: i32,
    flags: i32,
    reserved_2: i32,
    reserved_3: i32,
    psource: *const u8,
}

// SAFETY: an `Ident` is immutable data (a string pointer to a 'static literal) shared read-only.
unsafe impl Sync for Ident {}

/// `KMP_IDENT_KMPC`: what compilers set in the flags of every ident they emit.
const KMP_IDENT_KMPC: i32 = 2;

/// Used when generated code passes a null location, which libomp does not accept everywhere.
pub static UNKNOWN_LOC: Ident = Ident {
    reserved_1: 0,
    flags: KMP_IDENT_KMPC,
    reserved_2: 0,
    reserved_3: 0,
    psource: c";unknown;unknown;0;0;;".as_ptr().cast(),
};

/// `loc`, or a valid placeholder when the caller passed null.
pub fn loc_or_default(loc: *mut Ident) -> *mut Ident {
    if loc.is_null() {
        core::ptr::addr_of!(UNKNOWN_LOC).cast_mut()
    } else {
        loc
    }
}

/// libomp's microtask type: `void (*)(kmp_int32 *gtid, kmp_int32 *btid, ...)`.
pub type Microtask = unsafe extern "C" fn(*mut i32, *mut i32, ...);

extern "C" {
    pub fn __kmpc_fork_call(loc: *mut Ident, argc: i32, microtask: Microtask, ...);
    pub fn __kmpc_push_num_threads(loc: *mut Ident, gtid: i32, num_threads: i32);
    pub fn __kmpc_push_proc_bind(loc: *mut Ident, gtid: i32, proc_bind: i32);
    pub fn __kmpc_serialized_parallel(loc: *mut Ident, gtid: i32);
    pub fn __kmpc_end_serialized_parallel(loc: *mut Ident, gtid: i32);
    pub fn __kmpc_global_thread_num(loc: *mut Ident) -> i32;
    pub fn __kmpc_barrier(loc: *mut Ident, gtid: i32);
    pub fn omp_get_thread_num() -> i32;
    pub fn omp_get_num_threads() -> i32;
    pub fn omp_get_max_threads() -> i32;
    // libomp's Fortran-name aliases of the queries this image overrides: the image is linked
    // with -Bsymbolic, so calling the C names from here would call our own overrides.
    pub fn omp_is_initial_device_() -> i32;
    pub fn omp_get_team_num_() -> i32;
    pub fn omp_get_num_teams_() -> i32;

    pub fn sched_yield() -> i32;
    pub fn write(fd: i32, buf: *const c_void, count: usize) -> isize;
    pub fn abort() -> !;
}

/// Reports a fatal misuse of the ABI on stderr and aborts (never unwinds into C).
pub fn fatal(msg: &str) -> ! {
    let prefix = "omptarget.devicertl (x86_64): ";
    // SAFETY: both buffers are valid for their lengths; write(2) and abort(3) have no other
    // preconditions. A short write only truncates the message.
    unsafe {
        write(2, prefix.as_ptr().cast(), prefix.len());
        write(2, msg.as_ptr().cast(), msg.len());
        write(2, b"\n".as_ptr().cast(), 1);
        abort()
    }
}
