//! The one place where program (host) memory is touched through plain addresses: reading a
//! host pointer's value, restoring it, plain copies and fills, compiler-emitted strings.
//!
//! Every function that dereferences an address is `unsafe`: the address comes from the
//! program (a map clause, an API argument, a compiler-built table) and only the caller
//! knows which promise of the program makes it valid.

/// Reads the pointer stored at host address `addr`.
///
/// # Safety
/// `[addr, addr+8)` must be readable (alignment is not required).
pub unsafe fn read_ptr(addr: usize) -> usize {
    // SAFETY: readability is the caller's promise; the read is unaligned.
    unsafe { std::ptr::read_unaligned(addr as *const usize) }
}

/// Stores a pointer value at host address `addr`.
///
/// # Safety
/// `[addr, addr+8)` must be writable and not borrowed by Rust code.
pub unsafe fn write_ptr(addr: usize, value: usize) {
    // SAFETY: writability is the caller's promise; the write is unaligned.
    unsafe { std::ptr::write_unaligned(addr as *mut usize, value) }
}

/// Copies `size` bytes between host addresses (the ranges may overlap).
///
/// # Safety
/// `[src, src+size)` must be readable and `[dst, dst+size)` writable.
pub unsafe fn copy(dst: usize, src: usize, size: usize) {
    if size == 0 {
        return;
    }
    // SAFETY: both ranges are valid by the caller's promise; `ptr::copy` is memmove.
    unsafe { std::ptr::copy(src as *const u8, dst as *mut u8, size) }
}

/// Fills `size` bytes at host address `dst` with `byte`.
///
/// # Safety
/// `[dst, dst+size)` must be writable.
pub unsafe fn fill(dst: usize, byte: u8, size: usize) {
    if size == 0 {
        return;
    }
    // SAFETY: writability is the caller's promise.
    unsafe { std::ptr::write_bytes(dst as *mut u8, byte, size) }
}

/// Reads a NUL-terminated string at `addr`, or `None` for a null pointer or non-UTF-8 bytes.
///
/// # Safety
/// A non-zero `addr` must point to a NUL-terminated string that stays unchanged for `'a`
/// (compiler-emitted names live as long as the binary that holds them is loaded).
pub unsafe fn c_str<'a>(addr: usize) -> Option<&'a str> {
    if addr == 0 {
        return None;
    }
    // SAFETY: termination and lifetime are the caller's promise.
    unsafe { std::ffi::CStr::from_ptr(addr as *const std::ffi::c_char) }.to_str().ok()
}

/// Reads a `u64` at host address `addr` (descriptor arrays the compiler built).
///
/// # Safety
/// `[addr, addr+8)` must be readable.
pub unsafe fn read_u64(addr: usize) -> u64 {
    // SAFETY: readability is the caller's promise; the read is unaligned.
    unsafe { std::ptr::read_unaligned(addr as *const u64) }
}

/// `malloc` for the initial (host) device's `omp_target_alloc`; NULL (0) on failure.
pub fn malloc(size: usize) -> usize {
    // SAFETY: malloc accepts any size and reports failure with NULL.
    unsafe { libc::malloc(size) as usize }
}

/// `free` for memory from [`malloc`]; 0 is ignored.
///
/// # Safety
/// `ptr` must be 0 or a pointer [`malloc`] returned that was not freed since.
pub unsafe fn free(ptr: usize) {
    // SAFETY: the caller's promise is free's contract.
    unsafe { libc::free(ptr as *mut libc::c_void) }
}

/// Whether every page of `[addr, addr+size)` is mapped in this process (a checker's guard
/// before it reads memory the program may have unmapped since mapping it to a device).
pub fn is_mapped(addr: usize, size: usize) -> bool {
    if size == 0 {
        return true;
    }
    let Some(end) = addr.checked_add(size) else { return false };
    let start = addr & !4095;
    // SAFETY: msync with MS_ASYNC only checks that the range is mapped (ENOMEM otherwise);
    // it reads and writes no memory of ours.
    unsafe { libc::msync(start as *mut libc::c_void, end - start, libc::MS_ASYNC) == 0 }
}

/// Host memory as a byte slice, for reading.
///
/// # Safety
/// `[addr, addr+size)` must be readable and not written by anyone while the slice lives.
pub unsafe fn bytes<'a>(addr: usize, size: usize) -> &'a [u8] {
    if size == 0 {
        return &[];
    }
    // SAFETY: the caller's promise.
    unsafe { std::slice::from_raw_parts(addr as *const u8, size) }
}
