//! Which pages of the program's memory this process wrote since a given moment, asked of the
//! kernel instead of read page by page: userfaultfd write-protection in its asynchronous mode
//! (a write to a protected page only clears the protection, with no signal and no handler
//! thread) and the `PAGEMAP_SCAN` ioctl on `/proc/self/pagemap`, which reads the protection
//! bits of a whole range in one call (Linux 6.7). The checker uses it to find the host pages
//! the program changed since they were copied to a device without reading every one.
//!
//! It answers conservatively: a page whose writes it cannot see (memory that another mapping
//! or process may change — file and shared memory —, a page not in memory, a range it could
//! not watch) is reported as written. Where the system offers none of this (an older kernel,
//! userfaultfd forbidden), [`WriteWatch::new`] returns `None`.

use std::fs::File;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicUsize, Ordering};

/// The page size the watch works in.
pub const PAGE: usize = 4096;

/// Ranges watched at most ([`WriteWatch::restart`] registers a range the first time it
/// watches it, which may split one memory region of the process in three: the bound keeps
/// well below `vm.max_map_count`). Beyond it, new ranges are reported written.
const MAX_REGISTERED: usize = 1024;

// userfaultfd (linux/userfaultfd.h).
const UFFD_API: u64 = 0xAA;
const UFFD_USER_MODE_ONLY: i32 = 1;
const UFFD_FEATURE_WP_UNPOPULATED: u64 = 1 << 13;
const UFFD_FEATURE_WP_ASYNC: u64 = 1 << 15;
const UFFDIO_API: libc::c_ulong = 0xC018_AA3F;
const UFFDIO_REGISTER: libc::c_ulong = 0xC020_AA00;
const UFFDIO_REGISTER_MODE_WP: u64 = 1 << 1;

// PAGEMAP_SCAN (linux/fs.h, Linux 6.7).
const PAGEMAP_SCAN: libc::c_ulong = 0xC060_6610;
const PM_SCAN_WP_MATCHING: u64 = 1;
const PM_SCAN_CHECK_WPASYNC: u64 = 2;
const PAGE_IS_WRITTEN: u64 = 1 << 1;
const PAGE_IS_FILE: u64 = 1 << 2;
const PAGE_IS_PRESENT: u64 = 1 << 3;

#[repr(C)]
struct UffdioApi {
    api: u64,
    features: u64,
    ioctls: u64,
}

#[repr(C)]
struct UffdioRegister {
    start: u64,
    len: u64,
    mode: u64,
    ioctls: u64,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
struct PageRegion {
    start: u64,
    end: u64,
    categories: u64,
}

#[repr(C)]
#[derive(Default)]
struct PmScanArg {
    size: u64,
    flags: u64,
    start: u64,
    end: u64,
    walk_end: u64,
    vec: u64,
    vec_len: u64,
    max_pages: u64,
    category_inverted: u64,
    category_mask: u64,
    category_anyof_mask: u64,
    return_mask: u64,
}

/// A run of pages `[start, end)` a scan reported.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PageRun {
    pub start: usize,
    pub end: usize,
    /// Writes to these pages cannot be seen (file or shared memory, or not in memory): they
    /// may change at any time.
    pub unseen: bool,
}

/// The process's write watch (one userfaultfd and the pagemap file).
pub struct WriteWatch {
    uffd: OwnedFd,
    pagemap: File,
    registered: AtomicUsize,
}

impl WriteWatch {
    /// The watch, where the system has asynchronous write-protection and `PAGEMAP_SCAN`.
    pub fn new() -> Option<WriteWatch> {
        // SAFETY: the userfaultfd syscall takes flags and returns a new descriptor or -1.
        let fd =
            unsafe { libc::syscall(libc::SYS_userfaultfd, libc::O_CLOEXEC | libc::O_NONBLOCK | UFFD_USER_MODE_ONLY) };
        if fd < 0 {
            return None;
        }
        // SAFETY: `fd` is a descriptor the syscall just returned, owned by nothing else.
        let uffd = unsafe { OwnedFd::from_raw_fd(fd as i32) };
        // Unpopulated: anonymous memory is protected page by page only with it (the kernel then
        // keeps a page's protection across its leaving memory, too).
        let features = UFFD_FEATURE_WP_ASYNC | UFFD_FEATURE_WP_UNPOPULATED;
        let mut api = UffdioApi { api: UFFD_API, features, ioctls: 0 };
        // SAFETY: UFFDIO_API reads and writes a `struct uffdio_api`, which `api` is.
        if unsafe { libc::ioctl(uffd.as_raw_fd(), UFFDIO_API, &mut api) } != 0 {
            return None;
        }
        let pagemap = File::open("/proc/self/pagemap").ok()?;
        let watch = WriteWatch { uffd, pagemap, registered: AtomicUsize::new(0) };
        // PAGEMAP_SCAN itself (an empty range answers 0 where the ioctl exists).
        watch.scan(0, 0, 0, 0, PAGE_IS_WRITTEN, PAGE_IS_WRITTEN).ok()?;
        Some(watch)
    }

    /// Starts watching `[start, end)` (page-aligned) anew and returns its pages written since
    /// they were last watched, or that may change unseen: they are protected again in the same
    /// step, so that no write is lost between the answer and the new start. `None` when the
    /// range cannot be watched (take every page as written).
    pub fn restart(&self, start: usize, end: usize) -> Option<Vec<PageRun>> {
        let flags = PM_SCAN_WP_MATCHING | PM_SCAN_CHECK_WPASYNC;
        let any = PAGE_IS_WRITTEN | PAGE_IS_FILE | PAGE_IS_PRESENT;
        match self.scan(start, end, flags, PAGE_IS_PRESENT, any, any) {
            Ok(runs) => Some(runs),
            // Part of the range is not registered yet (or no more: it was unmapped and mapped
            // again). What the failed scan protected before it stopped is lost: the answer
            // is the whole range, written, and the pages the second scan finds unseen.
            Err(e) if e.raw_os_error() == Some(libc::EPERM) => {
                self.register(start, end);
                let mut runs = self.scan(start, end, flags, PAGE_IS_PRESENT, any, any).ok()?;
                runs.retain(|r| r.unseen);
                runs.insert(0, PageRun { start, end, unseen: false });
                Some(runs)
            }
            Err(_) => None,
        }
    }

    /// The pages of `[start, end)` (page-aligned) written since [`Self::restart`], or that may
    /// have changed unseen; `None` when the system could not say (take every page as written).
    /// Protects nothing: a page stays written until restarted.
    pub fn written(&self, start: usize, end: usize) -> Option<Vec<PageRun>> {
        // Not whether a page is file memory: telling costs a look at each page's descriptor
        // (ten times the scan); a restart said it, and such a page stays written till the next.
        let any = PAGE_IS_WRITTEN | PAGE_IS_PRESENT;
        self.scan(start, end, 0, PAGE_IS_PRESENT, any, any).ok()
    }

    /// Registers `[start, end)` for write-protection (once per range, up to the bound).
    fn register(&self, start: usize, end: usize) {
        if self.registered.fetch_add(1, Ordering::Relaxed) >= MAX_REGISTERED {
            return;
        }
        let mut reg =
            UffdioRegister { start: start as u64, len: (end - start) as u64, mode: UFFDIO_REGISTER_MODE_WP, ioctls: 0 };
        // SAFETY: UFFDIO_REGISTER reads and writes a `struct uffdio_register`, which `reg` is. It
        // changes no memory of the process: in the asynchronous mode a write to a protected
        // page only clears the protection. A range with a hole or another userfaultfd fails.
        unsafe { libc::ioctl(self.uffd.as_raw_fd(), UFFDIO_REGISTER, &mut reg) };
    }

    /// `PAGEMAP_SCAN` over `[start, end)`: the runs of pages whose categories, with `inverted`
    /// flipped, have any of `any`, told apart by the categories `told`. A page counts as
    /// unseen when it is file-backed (where `told` asks) or not in memory.
    fn scan(
        &self,
        start: usize,
        end: usize,
        flags: u64,
        inverted: u64,
        any: u64,
        told: u64,
    ) -> std::io::Result<Vec<PageRun>> {
        debug_assert!(start.is_multiple_of(PAGE) && end.is_multiple_of(PAGE) && start <= end);
        let mut out: Vec<PageRun> = Vec::new();
        let mut regions = [PageRegion::default(); 64];
        let mut from = start;
        loop {
            let mut arg = PmScanArg {
                size: std::mem::size_of::<PmScanArg>() as u64,
                flags,
                start: from as u64,
                end: end as u64,
                vec: regions.as_mut_ptr() as u64,
                vec_len: regions.len() as u64,
                category_inverted: inverted,
                category_anyof_mask: any,
                return_mask: told,
                ..PmScanArg::default()
            };
            // SAFETY: PAGEMAP_SCAN reads `arg` and writes at most `vec_len` page regions to
            // `vec`, which `regions` holds; with PM_SCAN_WP_MATCHING it write-protects pages of
            // a userfaultfd-registered range (asynchronous mode: no memory of ours changes).
            let n = unsafe { libc::ioctl(self.pagemap.as_raw_fd(), PAGEMAP_SCAN, &mut arg) };
            if n < 0 {
                return Err(std::io::Error::last_os_error());
            }
            for r in &regions[..n as usize] {
                let unseen = r.categories & PAGE_IS_FILE != 0 || r.categories & PAGE_IS_PRESENT == 0;
                let run = PageRun { start: r.start as usize, end: r.end as usize, unseen };
                match out.last_mut() {
                    Some(last) if last.end == run.start && last.unseen == run.unseen => last.end = run.end,
                    _ => out.push(run),
                }
            }
            let walked = arg.walk_end as usize;
            if walked >= end || walked <= from {
                return Ok(out);
            }
            from = walked;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The watch; on a kernel older than 6.7 there is none (and none may be claimed).
    fn watch_where_the_kernel_has_it() -> Option<WriteWatch> {
        let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").expect("a Linux kernel");
        let mut v = release.split(|c: char| !c.is_ascii_digit()).map(|n| n.parse::<u32>().unwrap_or(0));
        let (major, minor) = (v.next().unwrap_or(0), v.next().unwrap_or(0));
        let w = WriteWatch::new();
        if (major, minor) < (6, 7) {
            assert!(w.is_none(), "PAGEMAP_SCAN came with Linux 6.7; this is {release}");
            return None;
        }
        assert!(w.is_some(), "Linux {release} has asynchronous write-protection and PAGEMAP_SCAN");
        w
    }

    /// Fresh anonymous memory of `pages` pages, every page written once.
    fn memory(pages: usize) -> (usize, usize) {
        let len = pages * PAGE;
        // SAFETY: a new private anonymous mapping; nothing else refers to it.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(p, libc::MAP_FAILED);
        // SAFETY: the mapping just made, `len` bytes.
        unsafe { std::ptr::write_bytes(p as *mut u8, 1, len) };
        (p as usize, p as usize + len)
    }

    fn poke(addr: usize) {
        // SAFETY: callers pass an address inside a mapping of `memory`.
        unsafe { std::ptr::write_volatile(addr as *mut u8, 7) };
    }

    #[test]
    fn writes_after_a_restart_are_the_pages_written() {
        let Some(w) = watch_where_the_kernel_has_it() else { return };
        let (s, e) = memory(64);
        let first = w.restart(s, e).expect("the range can be watched");
        assert_eq!(first, [PageRun { start: s, end: e, unseen: false }], "freshly registered: all written");
        assert_eq!(w.restart(s, e), Some(vec![]), "nothing written since");
        assert_eq!(w.written(s, e), Some(vec![]), "nothing written since");
        poke(s + 5 * PAGE + 17);
        poke(s + 6 * PAGE);
        poke(s + 40 * PAGE + 4095);
        let runs = vec![
            PageRun { start: s + 5 * PAGE, end: s + 7 * PAGE, unseen: false },
            PageRun { start: s + 40 * PAGE, end: s + 41 * PAGE, unseen: false },
        ];
        assert_eq!(w.written(s, e).as_ref(), Some(&runs));
        assert_eq!(w.written(s, e).as_ref(), Some(&runs), "asking protects nothing");
        assert_eq!(w.restart(s, s + 8 * PAGE).as_deref(), Some(&runs[..1]), "a restart answers its own range");
        assert_eq!(w.written(s, e).as_deref(), Some(&runs[1..]));
        // A page given back to the system is not in memory: it may hold anything later.
        // SAFETY: one page of the mapping, which holds no Rust object.
        unsafe { libc::madvise((s + 10 * PAGE) as *mut libc::c_void, PAGE, libc::MADV_DONTNEED) };
        let gone = PageRun { start: s + 10 * PAGE, end: s + 11 * PAGE, unseen: true };
        assert_eq!(w.written(s, s + 16 * PAGE), Some(vec![gone]));
        // SAFETY: the mapping made by `memory`.
        unsafe { libc::munmap(s as *mut libc::c_void, e - s) };
    }

    #[test]
    fn shared_memory_is_always_unseen() {
        let Some(w) = watch_where_the_kernel_has_it() else { return };
        let len = 8 * PAGE;
        // SAFETY: a new shared anonymous mapping (shmem: another process may write it).
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        } as usize;
        // SAFETY: the mapping just made.
        unsafe { std::ptr::write_bytes(p as *mut u8, 1, len) };
        let whole = |unseen| PageRun { start: p, end: p + len, unseen };
        assert_eq!(w.restart(p, p + len), Some(vec![whole(false), whole(true)]), "registered now");
        assert_eq!(w.restart(p, p + len), Some(vec![whole(true)]));
        // SAFETY: the mapping made above.
        unsafe { libc::munmap(p as *mut libc::c_void, len) };
    }
}
