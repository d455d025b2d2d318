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

/// Copies of at least this many bytes are checked for [`ALIASED_AHEAD`].
const LARGE_COPY: usize = 8 << 20;
/// A large copy whose destination lies less than this many bytes past its source, counted
/// within a 4 KiB page, is copied in [`ALIASED_PIECE`] pieces. glibc's copy of large blocks
/// (non-temporal stores, above about 3/4 of the last-level cache) runs at a third of its speed
/// when each store lands on the same offset within a page as a load just ahead of it ("4K
/// aliasing"): 3.6-4.3 GB/s against 12-14 GB/s on the development machine for a destination
/// 8 to 256 bytes past the source (a malloc'd buffer's 16-byte header against page-aligned
/// device memory is the common case: every device-to-host copy into such a buffer).
const ALIASED_AHEAD: usize = 512;
/// The pieces of such a copy: small enough for glibc's cached copy, which does not suffer
/// from it (8-10 GB/s at any offset).
const ALIASED_PIECE: usize = 4 << 20;

/// Copies `size` bytes between host addresses (the ranges may overlap).
///
/// # Safety
/// `[src, src+size)` must be readable and `[dst, dst+size)` writable.
pub unsafe fn copy(dst: usize, src: usize, size: usize) {
    if size == 0 {
        return;
    }
    // Small copies (every launch's) pay one comparison.
    if size >= LARGE_COPY && dst.abs_diff(src) >= size && (1..ALIASED_AHEAD).contains(&(dst.wrapping_sub(src) % 4096)) {
        // Disjoint ranges: the pieces may go in any order.
        let mut done = 0;
        while done < size {
            let n = ALIASED_PIECE.min(size - done);
            // SAFETY: `[src+done, src+done+n)` and `[dst+done, dst+done+n)` lie inside the
            // caller's ranges, which do not overlap (they are `size` or more apart).
            unsafe { std::ptr::copy_nonoverlapping((src + done) as *const u8, (dst + done) as *mut u8, n) };
            done += n;
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A large copy whose destination is just ahead of its source within a page goes in
    /// pieces; every byte must still arrive, the tail piece included.
    #[test]
    fn aliased_large_copies_arrive_whole() {
        let size = LARGE_COPY + ALIASED_PIECE / 2 + 13;
        let src: Vec<u8> = (0..size + 4096).map(|i| (i * 7 % 251) as u8).collect();
        let mut dst = vec![0u8; size + 8192];
        let s = src.as_ptr() as usize;
        // A destination 16 bytes past the source within a page, and one 16 bytes behind.
        for ahead in [16usize, 4080] {
            let d0 = dst.as_mut_ptr() as usize;
            let d = d0 + (s + ahead - d0 % 4096) % 4096;
            let off = d - d0;
            assert_eq!(d.wrapping_sub(s) % 4096, ahead);
            dst.fill(0);
            // SAFETY: `[s, s+size)` lies in `src`; `[d, d+size)` lies in `dst` (off < 4096).
            unsafe { copy(d, s, size) };
            assert!(dst[off..off + size] == src[..size], "ahead {ahead}");
            assert!(dst[..off].iter().all(|&b| b == 0) && dst[off + size..].iter().all(|&b| b == 0));
        }
    }
}
