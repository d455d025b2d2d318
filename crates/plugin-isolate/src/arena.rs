//! Device memory shared with the worker: one memfd mapped at the same address in the program
//! and in the worker. The program allocates device memory from it (no round trip) and copies
//! to and from it with `memcpy`; kernels in the worker see the same bytes at the same
//! addresses. The program's own heap and stack stay out of the worker's reach.
//!
//! The address is chosen by the program in a range that neither process's loader, heap or
//! stack uses (tens of TiB, far below the `mmap` area); the worker maps the memfd there with
//! `MAP_FIXED_NOREPLACE` and says so by writing [`MAGIC`] into the first word. A worker that
//! could not map it does not write it, and the program then falls back to memory allocated
//! by the worker and copied through `process_vm_writev`/`readv`.

use crate::track;
use omp_sync::Mutex;
use std::collections::{BTreeMap, HashMap};
use std::io;
use std::sync::atomic::Ordering;

/// Descriptor the worker finds the arena's memfd on.
pub const ARENA_FD: i32 = 4;

/// Written by the worker into the arena's first word once it has mapped the arena.
pub const MAGIC: u64 = 0x6f6d_7072_7341_5245; // "omprsARE"

/// The first page is the header ([`crate::header`]); allocations start after it.
const HEADER: usize = crate::header::SIZE;

/// Candidate addresses, each far from where Linux puts executables (~0x55.. TiB), heaps and
/// shared libraries (~0x7f.. TiB).
const HINTS: [usize; 4] = [0x2000_0000_0000, 0x3000_0000_0000, 0x1000_0000_0000, 0x4000_0000_0000];

const PAGE: usize = omp_plugin::TRACK_PAGE;

/// Allocations of at least this size get blocks of whole pages, given back on free, and start
/// where [`LARGE_START`] says.
const LARGE: usize = 64 << 10;

/// A large allocation's block has this much before it: an odd number of pages, so that arrays
/// of one power-of-two size, allocated one after the other, do not all start at addresses
/// equal modulo a large power of two. Three 128 MiB arrays exactly 2^27 bytes apart ran a
/// bandwidth-bound kernel 8-15% slower than the same arrays 17 pages further apart (as
/// `malloc`'s arrays are on the host device), on this machine's AMD cores. The gap is address
/// space only: no page of it before the allocation's first is ever touched.
const LARGE_GAP: usize = 17 * PAGE;

/// Where in its block a large (unguarded) allocation starts: half a page before the gap's
/// end, so in the middle of a page. A `malloc`ed host buffer starts 16 bytes into a page, and
/// a copy from a page-aligned device block into it had its loads run 16 bytes ahead of its
/// stores modulo 4 KiB, where the core takes each load for one from the store before it (4K
/// aliasing): 512 MiB device-to-host copies ran at 7.7-8.7 GB/s against 10-12.7 GB/s from
/// the middle of a page, memcpy 10-12 GB/s.
const LARGE_START: usize = LARGE_GAP - PAGE / 2;

/// An arena's size: this machine's memory, between 1 GiB and 1 TiB (address space only
/// until used).
pub fn machine_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    let (pages, page) = unsafe { (libc::sysconf(libc::_SC_PHYS_PAGES), libc::sysconf(libc::_SC_PAGESIZE)) };
    let ram = if pages > 0 && page > 0 { (pages as usize).saturating_mul(page as usize) } else { 0 };
    ram.clamp(1 << 30, 1 << 40)
}

/// The program's side of the arena.
pub struct Arena {
    base: usize,
    size: usize,
    fd: i32,
    heap: Mutex<Heap>,
    /// Check mode: guarded allocations and what the worker must be told.
    check: Option<Mutex<Guards>>,
}

/// Check mode's bookkeeping: each allocation sits between two inaccessible pages, right
/// against the second one, and every change of what is accessible reaches the worker
/// before the next kernel.
#[derive(Default)]
struct Guards {
    /// Allocation address -> heap offset of its block (guard pages included).
    live: HashMap<usize, usize>,
    /// (page address, length, accessible) in the order they happened.
    changes: Vec<(usize, usize, bool)>,
    /// The control block: heap offset and capacity in bytes.
    ctl: Option<(usize, usize)>,
    /// Freed blocks (heap offset, bytes) held back from reuse, oldest first: a kernel that
    /// uses a device pointer after its mapping ended faults there, and the checker can
    /// name that mapping instead of whatever would have been allocated in its place.
    quarantine: std::collections::VecDeque<(usize, usize)>,
    /// Bytes in `quarantine`.
    quarantined: usize,
}

/// Most bytes, and blocks, of freed device memory held back from reuse in check mode.
const QUARANTINE_BYTES: usize = 64 << 20;
const QUARANTINE_BLOCKS: usize = 4096;

impl Arena {
    /// Creates a memfd of `size` bytes (sparse) and maps it at one of [`HINTS`].
    pub fn create(size: usize) -> io::Result<Arena> {
        let size = size.next_multiple_of(4096);
        // SAFETY: memfd_create takes a NUL-terminated name; it returns a new fd or -1.
        let fd0 = unsafe { libc::memfd_create(c"omp-isolated-device".as_ptr(), libc::MFD_CLOEXEC) };
        if fd0 < 0 {
            return Err(io::Error::last_os_error());
        }
        // A descriptor at 10 or above, so that it is never ARENA_FD (or the kernels' stdout)
        // when the child's descriptors are arranged.
        // SAFETY: fcntl duplicates our own fd; the original is closed right after.
        let fd = unsafe { libc::fcntl(fd0, libc::F_DUPFD_CLOEXEC, 10) };
        // SAFETY: `fd0` is ours and no longer needed.
        unsafe { libc::close(fd0) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        let fail = |e: io::Error| {
            // SAFETY: `fd` is ours and nothing maps it.
            unsafe { libc::close(fd) };
            Err(e)
        };
        // SAFETY: ftruncate on our memfd; the file stays sparse.
        if unsafe { libc::ftruncate(fd, size as libc::off_t) } != 0 {
            return fail(io::Error::last_os_error());
        }
        for hint in HINTS {
            match map_at(fd, hint, size) {
                Ok(()) => {
                    // Huge pages where the system allows them for shared memory
                    // (shmem_enabled=advise): fewer TLB misses on bulk copies.
                    // SAFETY: madvise on our own mapping; a refusal changes nothing.
                    unsafe { libc::madvise(hint as *mut libc::c_void, size, libc::MADV_HUGEPAGE) };
                    return Ok(Arena { base: hint, size, fd, heap: Mutex::new(Heap::new(HEADER, size)), check: None });
                }
                Err(_) => continue,
            }
        }
        fail(io::Error::other("no free address range for the device memory arena"))
    }

    pub fn base(&self) -> usize {
        self.base
    }
    pub fn size(&self) -> usize {
        self.size
    }
    pub fn fd(&self) -> i32 {
        self.fd
    }

    /// Whether `[addr, addr+len)` lies in the arena.
    pub fn contains(&self, addr: usize, len: usize) -> bool {
        addr >= self.base && addr.checked_add(len).is_some_and(|end| end <= self.base + self.size)
    }

    /// Whether the worker mapped the arena (it wrote [`MAGIC`]).
    pub fn acknowledged(&self) -> bool {
        // SAFETY: `base` is the start of our mapping (its header page read-write), and the
        // worker writes this word through its own mapping of the same file.
        let word = unsafe { crate::header::word(self.base, crate::header::ACKNOWLEDGED) };
        word.load(Ordering::Acquire) == MAGIC
    }

    /// Allocates `size` bytes (at least 1); `None` when the arena is full.
    pub fn alloc(&self, size: usize) -> Option<usize> {
        if let Some(check) = &self.check {
            return self.alloc_guarded(&mut check.lock(), size);
        }
        self.heap.lock().alloc(size.max(1)).map(|off| self.base + off)
    }

    /// Allocates `size` bytes of whole pages at the top of the arena, unguarded in check mode
    /// (and so never opened for a kernel there): memory of the runtime's own, placed where
    /// it moves no device allocation's address. Never freed. `None` when it does not fit.
    pub fn alloc_at_top(&self, size: usize) -> Option<usize> {
        let pages = size.max(1).checked_next_multiple_of(PAGE)?;
        self.heap.lock().alloc_top(pages, PAGE).map(|off| self.base + off)
    }

    /// Check mode: from now on allocations are guarded (call before the first one).
    pub fn enable_checks(&mut self) {
        self.check = Some(Mutex::new(Guards::default()));
    }

    pub fn checking(&self) -> bool {
        self.check.is_some()
    }

    /// A block of whole pages with an inaccessible page on each side; the allocation ends
    /// where the second guard page starts, or up to 15 bytes before it: a block of 16 bytes
    /// or more is 16-aligned, as the x86-64 ABI aligns such arrays and as compilers assume
    /// (a firstprivate `int[10]` is copied with aligned vector moves); a smaller one is
    /// aligned to what its size allows.
    fn alloc_guarded(&self, g: &mut Guards, size: usize) -> Option<usize> {
        let size = size.max(1);
        let pages = size.checked_next_multiple_of(PAGE)?;
        // A large block has the gap before its first guard page, as an unguarded one has.
        let gap = if size >= LARGE { LARGE_GAP } else { 0 };
        let off = self.heap.lock().alloc_aligned(pages.checked_add(2 * PAGE + gap)?, PAGE)?;
        let region = self.base + off + gap + PAGE;
        let align = if size >= 16 { 16 } else { 1usize << size.trailing_zeros() };
        let addr = (region + pages - size) & !(align - 1);
        g.live.insert(addr, off);
        g.changes.push((region, pages, true));
        Some(addr)
    }

    /// Frees an allocation; false when `addr` is not one.
    pub fn free(&self, addr: usize) -> bool {
        let addr = match &self.check {
            Some(check) => {
                let mut g = check.lock();
                let Some(off) = g.live.remove(&addr) else { return false };
                let len = self.heap.lock().live.get(&off).map_or(0, |b| b.1);
                // The opened pages: from the one `addr` is in (the allocation ends against the
                // last guard page, less than a page after its first opened page's start) to
                // that guard page.
                let region = addr & !(PAGE - 1);
                let guard = (self.base + off + len).saturating_sub(PAGE);
                if len > 2 * PAGE && guard > region {
                    let opened = (region, guard - region, true);
                    // Freed before any kernel saw it: the worker never opened it, and the
                    // list of changes stays as long as the live allocations.
                    match g.changes.iter().rposition(|c| *c == opened) {
                        Some(i) => {
                            g.changes.remove(i);
                        }
                        None => g.changes.push((opened.0, opened.1, false)),
                    }
                }
                g.quarantine.push_back((off, len));
                g.quarantined += len;
                while g.quarantined > QUARANTINE_BYTES || g.quarantine.len() > QUARANTINE_BLOCKS {
                    let Some((old, old_len)) = g.quarantine.pop_front() else { break };
                    g.quarantined -= old_len;
                    self.give_back(old);
                }
                return true;
            }
            None => addr,
        };
        let Some(off) = addr.checked_sub(self.base) else { return false };
        self.give_back(off)
    }

    /// Returns the block at heap offset `off` to the heap; false when it is not one.
    fn give_back(&self, off: usize) -> bool {
        // The lock is held until the pages are given back: until then nobody may be handed
        // this range again (the hole would zero their data).
        let mut heap = self.heap.lock();
        let Some((off, len)) = heap.free(off) else { return false };
        if len >= LARGE {
            // Give the pages back (the worker's view follows: same file).
            // SAFETY: fallocate on our memfd, on a page-aligned range inside it.
            unsafe {
                libc::fallocate(
                    self.fd,
                    libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
                    off as libc::off_t,
                    len as libc::off_t,
                )
            };
        }
        drop(heap);
        true
    }
}

/// A control block written for one launch: where its page states are, and the watched
/// pages they stand for.
pub struct Prepared {
    states: usize,
    ranges: Vec<(usize, usize)>,
}

impl Arena {
    /// Check mode, before a launch: writes the control block for the worker (the changes
    /// of what is accessible since the last launch, and the pages of `watch` to track).
    /// The caller keeps other launches out until [`Arena::accesses`].
    pub fn prepare(&self, watch: &[(usize, usize)]) -> Option<Prepared> {
        let check = self.check.as_ref()?;
        let mut g = check.lock();
        let mut ranges: Vec<(usize, usize)> = watch
            .iter()
            .filter(|&&(a, l)| l > 0 && self.contains(a, l) && a >= self.base + HEADER)
            .map(|&(a, l)| (a & !(PAGE - 1), (a + l).next_multiple_of(PAGE)))
            .collect();
        ranges.sort_unstable();
        let mut merged: Vec<(usize, usize)> = Vec::with_capacity(ranges.len());
        for (s, e) in ranges {
            match merged.last_mut() {
                Some(last) if s <= last.1 => last.1 = last.1.max(e),
                _ => merged.push((s, e)),
            }
        }
        let pages: usize = merged.iter().map(|r| (r.1 - r.0) / PAGE).sum();
        let words = track::CTL_HEAD_WORDS + 3 * g.changes.len() + 2 * merged.len();
        let need = words * 8 + pages;
        let (off, cap) = match g.ctl {
            Some((off, cap)) if cap >= need => (off, cap),
            old => {
                let cap = need.saturating_mul(2).max(64 << 10).next_multiple_of(PAGE);
                let off = self.heap.lock().alloc_aligned(cap, PAGE)?;
                if let Some((old_off, old_cap)) = old {
                    self.heap.lock().free(old_off);
                    g.changes.push((self.base + old_off, old_cap, false));
                }
                g.ctl = Some((off, cap));
                (off, cap)
            }
        };
        let ctl = self.base + off;
        // The changes may have grown by the old block's closing: recount.
        let words = track::CTL_HEAD_WORDS + 3 * g.changes.len() + 2 * merged.len();
        if words * 8 + pages > cap {
            return None;
        }
        let mut out: Vec<u64> = Vec::with_capacity(words);
        out.extend([g.changes.len() as u64, merged.len() as u64, pages as u64]);
        for (a, l, open) in g.changes.drain(..) {
            out.extend([a as u64, l as u64, open as u64]);
        }
        for &(s, e) in &merged {
            out.extend([s as u64, ((e - s) / PAGE) as u64]);
        }
        let states = ctl + words * 8;
        // SAFETY: `[ctl, ctl+cap)` is an arena block this arena allocated for itself,
        // mapped read-write here; no kernel runs while it is written (the caller's promise).
        unsafe {
            std::ptr::copy_nonoverlapping(out.as_ptr().cast::<u8>(), ctl as *mut u8, words * 8);
            std::ptr::write_bytes(states as *mut u8, 0, pages);
            track::header_word(self.base, track::CTL_LEN).store(cap as u64, Ordering::Relaxed);
            track::header_word(self.base, track::CTL_ADDR).store(ctl as u64, Ordering::Release);
        }
        Some(Prepared { states, ranges: merged })
    }

    /// After the launch: what the kernel did to each watched page it touched.
    pub fn accesses(&self, p: &Prepared) -> Vec<omp_plugin::PageAccess> {
        let mut out = Vec::new();
        let mut i = 0;
        for &(s, e) in &p.ranges {
            for page in (s..e).step_by(PAGE) {
                // SAFETY: the states follow the control block written by `prepare`, one
                // byte per watched page, in this arena's read-write mapping.
                let st = unsafe { std::ptr::read_volatile((p.states + i) as *const u8) };
                i += 1;
                if st != 0 {
                    // A page whose accesses went unseen is taken as written (missed findings,
                    // never false ones).
                    out.push(omp_plugin::PageAccess {
                        page,
                        read_first: st & track::READ_FIRST != 0,
                        written: st & (track::WRITTEN | track::UNSEEN) != 0,
                    });
                }
            }
        }
        out
    }

    /// The access that ended the worker, as its fault handler recorded it.
    pub fn fault(&self) -> Option<omp_plugin::Fault> {
        // SAFETY: the header page is part of this arena's read-write mapping.
        unsafe {
            if track::header_word(self.base, track::FAULT_SET).load(Ordering::Acquire) == 0 {
                return None;
            }
            let addr = track::header_word(self.base, track::FAULT_ADDR).load(Ordering::Relaxed) as usize;
            let flags = track::header_word(self.base, track::FAULT_FLAGS).load(Ordering::Relaxed);
            Some(omp_plugin::Fault {
                addr,
                write: flags & track::FAULT_WRITE != 0,
                device_memory: flags & track::FAULT_IN_ARENA != 0,
            })
        }
    }

    /// The worker dropped a kernel's watch: it touched too many scattered pages.
    pub fn watch_dropped(&self) -> bool {
        // SAFETY: the header page is part of this arena's read-write mapping.
        unsafe { track::header_word(self.base, track::WATCH_DROPPED).load(Ordering::Acquire) != 0 }
    }

    /// The worker had to give up protections (the system refused them).
    pub fn tracking_off(&self) -> bool {
        // SAFETY: the header page is part of this arena's read-write mapping.
        unsafe { track::header_word(self.base, track::TRACK_OFF).load(Ordering::Acquire) != 0 }
    }
}

impl Drop for Arena {
    fn drop(&mut self) {
        // SAFETY: the mapping and the descriptor are this arena's own; an arena is dropped
        // only when the worker did not acknowledge it, before any allocation was handed out.
        unsafe {
            libc::munmap(self.base as *mut libc::c_void, self.size);
            libc::close(self.fd);
        }
    }
}

/// Maps `fd` (`size` bytes) at exactly `addr`, failing instead of replacing anything.
fn map_at(fd: i32, addr: usize, size: usize) -> io::Result<()> {
    // SAFETY: MAP_FIXED_NOREPLACE never replaces an existing mapping; the result is checked.
    let p = unsafe {
        libc::mmap(
            addr as *mut libc::c_void,
            size,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED | libc::MAP_NORESERVE | libc::MAP_FIXED_NOREPLACE,
            fd,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    if p as usize != addr {
        // A kernel older than MAP_FIXED_NOREPLACE treats it as a hint.
        // SAFETY: `p` is the mapping just made, of `size` bytes.
        unsafe { libc::munmap(p, size) };
        return Err(io::Error::other("the kernel placed the arena elsewhere"));
    }
    Ok(())
}

/// The worker's side: maps the arena passed as [`ARENA_FD`] at `addr` and acknowledges it.
pub fn map_in_worker(addr: usize, size: usize) -> io::Result<()> {
    if addr & 4095 != 0 || size < HEADER || addr.checked_add(size).is_none() {
        return Err(io::Error::other("bad arena address or size"));
    }
    map_at(ARENA_FD, addr, size)?;
    // SAFETY: `addr` is the start of the mapping just made (its header page read-write).
    let word = unsafe { crate::header::word(addr, crate::header::ACKNOWLEDGED) };
    word.store(MAGIC, Ordering::Release);
    // The mapping keeps the file; the descriptor is no longer needed.
    // SAFETY: ARENA_FD was given to this process for this mapping only.
    unsafe { libc::close(ARENA_FD) };
    Ok(())
}

/// First-fit allocator over offsets, with coalescing.
struct Heap {
    /// Free blocks: offset -> length.
    free: BTreeMap<usize, usize>,
    /// Live allocations: the offset given out -> (offset, length) of its block.
    live: HashMap<usize, (usize, usize)>,
}

impl Heap {
    fn new(start: usize, end: usize) -> Heap {
        let mut free = BTreeMap::new();
        if end > start {
            free.insert(start, end - start);
        }
        Heap { free, live: HashMap::new() }
    }

    fn alloc(&mut self, size: usize) -> Option<usize> {
        if size < LARGE {
            return self.alloc_aligned(size, 64);
        }
        let need = size.checked_next_multiple_of(PAGE)?.checked_add(LARGE_GAP)?;
        let block = self.alloc_aligned(need, PAGE)?;
        let b = self.live.remove(&block)?;
        self.live.insert(block + LARGE_START, b);
        Some(block + LARGE_START)
    }

    fn alloc_aligned(&mut self, size: usize, align: usize) -> Option<usize> {
        let need = size.checked_next_multiple_of(align)?;
        let (off, len, start) = self.free.iter().find_map(|(&off, &len)| {
            let start = off.checked_next_multiple_of(align)?;
            (start.checked_add(need)? <= off + len).then_some((off, len, start))
        })?;
        Some(self.take(off, len, start, need))
    }

    /// Gives out `need` bytes at `start` from the free block `off..off + len`, keeping what is
    /// left of the block on either side free.
    fn take(&mut self, off: usize, len: usize, start: usize, need: usize) -> usize {
        self.free.remove(&off);
        if start > off {
            self.free.insert(off, start - off);
        }
        if start + need < off + len {
            self.free.insert(start + need, off + len - start - need);
        }
        self.live.insert(start, (start, need));
        start
    }

    /// As [`Heap::alloc_aligned`], from the highest free block that fits, at its end.
    fn alloc_top(&mut self, size: usize, align: usize) -> Option<usize> {
        let need = size.checked_next_multiple_of(align)?;
        let (off, len, start) = self.free.iter().rev().find_map(|(&off, &len)| {
            let start = (off + len).checked_sub(need)? / align * align;
            (start >= off).then_some((off, len, start))
        })?;
        Some(self.take(off, len, start, need))
    }

    /// Frees the allocation given out at `off`: the (offset, length) of its block.
    fn free(&mut self, off: usize) -> Option<(usize, usize)> {
        let (off, len) = self.live.remove(&off)?;
        let (mut start, mut end) = (off, off + len);
        if let Some((&p, &plen)) = self.free.range(..start).next_back() {
            if p + plen == start {
                self.free.remove(&p);
                start = p;
            }
        }
        if let Some(nlen) = self.free.remove(&end) {
            end += nlen;
        }
        self.free.insert(start, end - start);
        Some((off, len))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heap_allocates_aligned_and_coalesces() {
        let mut h = Heap::new(4096, 1 << 20);
        let a = h.alloc(10).unwrap();
        let b = h.alloc(100).unwrap();
        let c = h.alloc(LARGE).unwrap();
        let d = h.alloc(LARGE).unwrap();
        assert_eq!((a % 64, b % 64, c % 4096), (0, 0, 2048), "a large block starts mid-page");
        assert!(a + 64 <= b && b + 128 + LARGE_START <= c);
        assert_eq!(d - c, LARGE + LARGE_GAP, "two large blocks of one size are an odd number of pages apart");
        assert_eq!(h.free(b), Some((b, 128)));
        assert_eq!(h.free(b), None);
        assert_eq!(h.free(a), Some((a, 64)));
        assert_eq!(h.free(c), Some((c - LARGE_START, LARGE + LARGE_GAP)), "the gap is freed with it");
        assert_eq!(h.free(c), None);
        assert_eq!(h.free(d), Some((d - LARGE_START, LARGE + LARGE_GAP)));
        assert_eq!(h.free.len(), 1, "{:?}", h.free);
        assert_eq!(h.free.get(&4096), Some(&((1 << 20) - 4096)));
        assert!(h.alloc(1 << 20).is_none());
        assert!(h.alloc(usize::MAX - 10).is_none());
        let top = h.alloc_top(5000, 4096).unwrap();
        assert_eq!(top, (1 << 20) - 8192, "the last two pages");
        assert_eq!(h.alloc(10), Some(4096), "the bottom stays where it was");
        assert!(h.alloc_top(usize::MAX - 10, 4096).is_none());
    }

    #[test]
    fn guarded_allocations_end_at_a_page_and_cancel_unseen_changes() {
        let mut a = Arena::create(1 << 24).unwrap();
        a.enable_checks();
        let p = a.alloc(8192).unwrap();
        let q = a.alloc(12).unwrap();
        assert_eq!((p + 8192) % PAGE, 0);
        assert_eq!((q + 12) % PAGE, 0);
        assert!(q >= p + 8192 + 2 * PAGE, "a guard page after p and one before q");
        // q is freed before any kernel: its opening is dropped, not followed by a closing.
        assert!(a.free(q));
        let changes = a.check.as_ref().unwrap().lock().changes.clone();
        assert_eq!(changes, vec![(p, 8192, true)]);
        assert!(a.prepare(&[]).is_some());
        assert!(a.check.as_ref().unwrap().lock().changes.is_empty());
        assert!(a.free(p));
        assert_eq!(a.check.as_ref().unwrap().lock().changes, vec![(p, 8192, false)]);
    }

    #[test]
    fn large_guarded_allocations_keep_the_gap_and_close_exactly_their_pages() {
        let mut a = Arena::create(1 << 26).unwrap();
        a.enable_checks();
        let size = LARGE + 16;
        let (p, q) = (a.alloc(size).unwrap(), a.alloc(size).unwrap());
        assert_eq!(((p + size) % PAGE, (q + size) % PAGE), (0, 0));
        let pages = size.next_multiple_of(PAGE);
        assert_eq!(q - p, pages + 2 * PAGE + LARGE_GAP, "an odd number of pages apart");
        assert!(a.prepare(&[]).is_some());
        assert!(a.free(p));
        let changes = a.check.as_ref().unwrap().lock().changes.clone();
        assert_eq!(changes, vec![(p & !(PAGE - 1), pages, false)], "the opened pages, closed again");
    }

    #[test]
    fn guarded_arrays_are_16_aligned_and_freed_blocks_are_not_reused_at_once() {
        let mut a = Arena::create(1 << 24).unwrap();
        a.enable_checks();
        // A firstprivate `int[10]`: compilers copy it with 16-byte aligned moves.
        let p = a.alloc(40).unwrap();
        assert_eq!(p % 16, 0);
        assert!(p + 40 <= p.next_multiple_of(PAGE) && p.next_multiple_of(PAGE) - (p + 40) < 16);
        let small = a.alloc(4).unwrap();
        assert_eq!((small + 4) % PAGE, 0, "a block under 16 bytes still ends at its guard page");
        assert!(a.free(p));
        assert!(!a.free(p), "freed once");
        let q = a.alloc(40).unwrap();
        assert_ne!(q, p, "a freed block stays inaccessible for a while (use after unmap faults there)");
    }

    #[test]
    fn arena_is_shared_memory_at_a_fixed_address() {
        let a = Arena::create(1 << 24).unwrap();
        assert!(HINTS.contains(&a.base()));
        assert!(!a.acknowledged());
        let p = a.alloc(1000).unwrap();
        assert!(a.contains(p, 1000) && !a.contains(p, 1 << 25) && !a.contains(0, 1));
        assert!(a.free(p));
        assert!(!a.free(p));
        assert!(!a.free(12));
    }
}
