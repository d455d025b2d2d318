//! The one place where the runtime touches program (host) memory directly: reading a host
//! pointer's value, restoring it, and plain copies. Callers pass addresses the program gave
//! them for exactly this purpose (map clauses, API arguments).

/// Reads the pointer stored at host address `addr`.
pub fn read_ptr(addr: usize) -> usize {
    // SAFETY: the caller passes the address of a pointer the program mapped (PTR_AND_OBJ base,
    // link reference pointer); it is aligned and readable for 8 bytes by the map clause's contract.
    unsafe { std::ptr::read_unaligned(addr as *const usize) }
}

/// Stores a pointer value at host address `addr`.
pub fn write_ptr(addr: usize, value: usize) {
    // SAFETY: as for `read_ptr`; the program's pointer storage is writable (it was mapped from).
    unsafe { std::ptr::write_unaligned(addr as *mut usize, value) }
}

/// Copies `size` bytes between host addresses.
pub fn copy(dst: usize, src: usize, size: usize) {
    if size == 0 {
        return;
    }
    // SAFETY: both ranges are program memory handed to the runtime for this copy; `copy`
    // (memmove) tolerates overlap.
    unsafe { std::ptr::copy(src as *const u8, dst as *mut u8, size) }
}

/// Fills `size` bytes at host address `dst` with `byte`.
pub fn fill(dst: usize, byte: u8, size: usize) {
    if size == 0 {
        return;
    }
    // SAFETY: the range is program memory handed to the runtime for this fill.
    unsafe { std::ptr::write_bytes(dst as *mut u8, byte, size) }
}

/// Reads a NUL-terminated string at `addr`, or `None` for a null pointer or non-UTF-8 bytes.
pub fn c_str<'a>(addr: usize) -> Option<&'a str> {
    if addr == 0 {
        return None;
    }
    // SAFETY: names in offload entries, map names and ident_t strings are NUL-terminated
    // constants emitted by the compiler, alive for the program's lifetime.
    unsafe { std::ffi::CStr::from_ptr(addr as *const std::ffi::c_char) }.to_str().ok()
}

/// Reads a `u64` at host address `addr` (descriptor arrays the compiler built).
pub fn read_u64(addr: usize) -> u64 {
    // SAFETY: callers pass addresses of compiler-built descriptor arrays, readable for 8 bytes.
    unsafe { std::ptr::read_unaligned(addr as *const u64) }
}

/// `malloc` for the initial (host) device's `omp_target_alloc`; NULL (0) on failure.
pub fn malloc(size: usize) -> usize {
    // SAFETY: malloc accepts any size and reports failure with NULL.
    unsafe { libc::malloc(size) as usize }
}

/// `free` for memory from [`malloc`]; 0 is ignored.
pub fn free(ptr: usize) {
    // SAFETY: the program hands back a pointer `omp_target_alloc` returned for the host device.
    unsafe { libc::free(ptr as *mut libc::c_void) }
}
