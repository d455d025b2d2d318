//! The recorded device memory, mapped back at its recorded addresses in this process: only
//! the pages that hold the recorded allocations, each mapped with `MAP_FIXED_NOREPLACE` (a
//! range this process already uses is an error, never replaced), filled from
//! `.record_input`, and compared with `.record_output` after the kernel.
//!
//! Filling fresh memory costs more in page faults than in copying: a `pread` into untouched
//! pages takes one fault per 4 KiB page. So the pages are asked to be huge where the system
//! gives them on request (`MADV_HUGEPAGE`; transparent huge pages set to `madvise`, as here,
//! or `always`) and are all faulted in by one call before the read (`MADV_POPULATE_WRITE`,
//! Linux 5.14); where either is refused the read faults them in as before.

use crate::desc::Allocation;
use crate::ReplayError;
use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;

const PAGE: usize = 4096;

/// The pages mapped for a record's allocations (unmapped on drop).
pub struct DeviceMemory {
    ranges: Vec<(usize, usize)>,
    allocations: Vec<Allocation>,
}

/// The first byte where the memory after the replay differs from the recording.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Difference {
    pub allocation: usize,
    pub addr: usize,
    pub size: usize,
    pub offset: usize,
    pub recorded: u8,
    pub replayed: u8,
}

/// The page ranges `[start, end)` covering `allocations` (sorted, not overlapping), merged.
pub fn page_ranges(allocations: &[Allocation]) -> Vec<(usize, usize)> {
    let mut out: Vec<(usize, usize)> = Vec::new();
    for a in allocations {
        let start = a.addr & !(PAGE - 1);
        let end = (a.addr + a.size.max(1)).next_multiple_of(PAGE);
        match out.last_mut() {
            Some(last) if start <= last.1 => last.1 = last.1.max(end),
            _ => out.push((start, end)),
        }
    }
    out
}

impl DeviceMemory {
    /// Maps the pages of `allocations` (checked by [`crate::desc::Description::parse`]:
    /// sorted, within the recorded device memory) at their addresses.
    pub fn map(allocations: &[Allocation]) -> Result<DeviceMemory, ReplayError> {
        let mut mem = DeviceMemory { ranges: Vec::new(), allocations: allocations.to_vec() };
        for (start, end) in page_ranges(allocations) {
            // SAFETY: an anonymous private mapping; MAP_FIXED_NOREPLACE never replaces a
            // mapping of this process (it fails with EEXIST instead); the result is checked.
            let p = unsafe {
                libc::mmap(
                    start as *mut libc::c_void,
                    end - start,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE | libc::MAP_FIXED_NOREPLACE,
                    -1,
                    0,
                )
            };
            if p == libc::MAP_FAILED {
                let e = io::Error::last_os_error();
                let why = if e.raw_os_error() == Some(libc::EEXIST) {
                    "this process already uses part of it (run omp-replay without tools that load much before \
                     main, or record again)"
                        .to_string()
                } else {
                    e.to_string()
                };
                return Err(ReplayError::new(format!(
                    "cannot map the recorded device memory at 0x{start:x}-0x{end:x}: {why}"
                )));
            }
            if p as usize != start {
                // A kernel older than MAP_FIXED_NOREPLACE takes the address as a hint.
                // SAFETY: `p` is the mapping just made, of this length, used by nothing.
                unsafe { libc::munmap(p, end - start) };
                return Err(ReplayError::new(format!(
                    "cannot map the recorded device memory at 0x{start:x}-0x{end:x}: the system placed it elsewhere"
                )));
            }
            // SAFETY: advice on the mapping just made; a refusal changes nothing.
            unsafe { libc::madvise(p, end - start, libc::MADV_HUGEPAGE) };
            mem.ranges.push((start, end));
        }
        Ok(mem)
    }

    /// The page ranges mapped, `[start, end)`.
    pub fn ranges(&self) -> &[(usize, usize)] {
        &self.ranges
    }

    /// Fills every allocation from `file` (`.record_input`), at its file offset.
    pub fn restore(&self, file: &File) -> Result<(), ReplayError> {
        for &(start, end) in &self.ranges {
            // SAFETY: faults in (zeroed, or as they are) pages of a mapping `map` made; the
            // bytes are written just below. A kernel without it refuses (EINVAL): no harm.
            unsafe { libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_POPULATE_WRITE) };
        }
        for a in &self.allocations {
            // SAFETY: `[a.addr, a.addr+a.size)` lies in a page range mapped read-write by
            // `map` (every allocation is covered), and no kernel runs during a restore.
            unsafe { read_at(file, a.addr, a.size, a.file_offset) }?;
        }
        Ok(())
    }

    /// Fills every allocation from `snapshot` (what [`read_input`] returned).
    pub fn restore_from(&self, snapshot: &[u8]) {
        for a in &self.allocations {
            let from = &snapshot[a.file_offset as usize..a.file_offset as usize + a.size];
            // SAFETY: the destination lies in a page range mapped read-write by `map`, the
            // source is a slice of the same length that cannot overlap it (a heap buffer),
            // and no kernel runs during a restore.
            unsafe { std::ptr::copy_nonoverlapping(from.as_ptr(), a.addr as *mut u8, a.size) };
        }
    }

    /// The first difference between the allocations now and `file` (`.record_output`).
    pub fn compare(&self, file: &File) -> Result<Option<Difference>, ReplayError> {
        use std::os::unix::fs::FileExt;
        let mut buf = vec![0u8; 8 << 20];
        for (i, a) in self.allocations.iter().enumerate() {
            let mut done = 0usize;
            while done < a.size {
                let n = (a.size - done).min(buf.len());
                file.read_exact_at(&mut buf[..n], a.file_offset + done as u64)
                    .map_err(|e| ReplayError::new(format!("cannot read the recorded device memory: {e}")))?;
                // SAFETY: `[a.addr+done, +n)` lies in a page range mapped by `map`; the kernel
                // has returned, so nothing writes it while this slice lives.
                let now = unsafe { std::slice::from_raw_parts((a.addr + done) as *const u8, n) };
                if let Some(k) = now.iter().zip(&buf[..n]).position(|(x, y)| x != y) {
                    return Ok(Some(Difference {
                        allocation: i,
                        addr: a.addr,
                        size: a.size,
                        offset: done + k,
                        recorded: buf[k],
                        replayed: now[k],
                    }));
                }
                done += n;
            }
        }
        Ok(None)
    }
}

/// The whole of `file` (`.record_input`: the allocations' bytes one after the other), read
/// into memory: kept by `--repeat` to restore later runs with a plain copy.
pub fn read_input(file: &File) -> Result<Vec<u8>, ReplayError> {
    use std::io::Read as _;
    let mut bytes = Vec::new();
    let mut reader = file;
    reader
        .read_to_end(&mut bytes)
        .map_err(|e| ReplayError::new(format!("cannot read the recorded device memory: {e}")))?;
    Ok(bytes)
}

/// Reads `len` bytes of `file` at `off` into this process's memory at `addr`.
///
/// # Safety
/// `[addr, addr+len)` must be mapped writable and hold nothing anyone else reads or writes
/// meanwhile (no Rust object, no running kernel).
pub unsafe fn read_at(file: &File, mut addr: usize, mut len: usize, mut off: u64) -> Result<(), ReplayError> {
    while len > 0 {
        // SAFETY: the caller's promise about `[addr, addr+len)`.
        let n = unsafe { libc::pread(file.as_raw_fd(), addr as *mut libc::c_void, len, off as libc::off_t) };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(ReplayError::new(format!("cannot read the recorded device memory: {e}")));
        }
        if n == 0 {
            return Err(ReplayError::new("the recorded device memory file ended early"));
        }
        (addr, len, off) = (addr + n as usize, len - n as usize, off + n as u64);
    }
    Ok(())
}

impl Drop for DeviceMemory {
    fn drop(&mut self) {
        for &(start, end) in &self.ranges {
            // SAFETY: each range is a mapping `map` made and nothing else owns.
            unsafe { libc::munmap(start as *mut libc::c_void, end - start) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn alloc(addr: usize, size: usize, file_offset: u64) -> Allocation {
        Allocation { addr, size, file_offset }
    }

    #[test]
    fn only_the_allocations_pages_are_mapped() {
        let a = [alloc(0x1000_0000_1010, 16, 0), alloc(0x1000_0000_1f00, 0x200, 16), alloc(0x1000_0001_0000, 1, 528)];
        assert_eq!(page_ranges(&a), vec![(0x1000_0000_1000, 0x1000_0000_3000), (0x1000_0001_0000, 0x1000_0001_1000)]);
    }

    #[test]
    fn restores_compares_and_refuses_a_taken_range() {
        let base = 0x1234_0000_0000usize;
        let allocs = [alloc(base + 16, 8, 0), alloc(base + 0x3000, 4, 8)];
        let dir = std::env::temp_dir().join(format!("omp-replay-mem-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("in"), [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12]).unwrap();
        std::fs::write(dir.join("out"), [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 99, 12]).unwrap();
        let mem = DeviceMemory::map(&allocs).unwrap();
        let taken = DeviceMemory::map(&allocs).err().unwrap().to_string();
        assert!(taken.contains("already uses"), "{taken}");
        mem.restore(&File::open(dir.join("in")).unwrap()).unwrap();
        // SAFETY: mapped above, 8 bytes at base+16.
        assert_eq!(unsafe { *((base + 17) as *const u8) }, 2);
        let saved = read_input(&File::open(dir.join("in")).unwrap()).unwrap();
        assert_eq!(saved, [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12]);
        // SAFETY: as above.
        unsafe { *((base + 17) as *mut u8) = 77 };
        mem.restore_from(&saved);
        // SAFETY: as above.
        assert_eq!(unsafe { *((base + 17) as *const u8) }, 2);
        assert_eq!(mem.compare(&File::open(dir.join("in")).unwrap()).unwrap(), None);
        let d = mem.compare(&File::open(dir.join("out")).unwrap()).unwrap().unwrap();
        assert_eq!((d.allocation, d.offset, d.recorded, d.replayed), (1, 2, 99, 11));
        drop(mem);
        assert!(DeviceMemory::map(&allocs).is_ok(), "unmapped on drop");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
