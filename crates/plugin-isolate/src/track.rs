//! Check mode (`LIBOMPTARGET_CHECK`): guard pages and page-level access tracking on the
//! isolated device, the worker's half. The program and the worker share the arena; its
//! header page carries the layout below, and a control block (an arena allocation the
//! program writes before each launch) says which protections changed and which pages to
//! watch.
//!
//! In the worker, every arena page is inaccessible until the program says it was
//! allocated. Before a kernel the worker applies the protection changes and makes the
//! watched pages inaccessible; the SIGSEGV handler then records, per watched page, whether
//! the first access was a read and whether the kernel wrote, opens the page and lets the
//! kernel go on. Any other fault (a guard page, freed device memory, a host address) is
//! recorded in the header for the program to explain, and ends the worker.
//!
//! Header words (byte offsets): [`FAULT_SET`], [`FAULT_ADDR`], [`FAULT_FLAGS`] (written by
//! the worker's handler), [`CTL_ADDR`], [`CTL_LEN`] (written by the program), [`TRACK_OFF`]
//! (the worker gave up protections), [`WATCH_DROPPED`] (a kernel's watch was dropped).
//! Control block, in 64-bit words: number of changes,
//! number of watched ranges, number of watched pages; the changes (address, length,
//! 1 = accessible / 0 = not); the ranges (page address, pages); then one state byte per
//! watched page ([`READ_FIRST`], [`WRITTEN`]).

use omp_plugin::TRACK_PAGE;
use std::sync::atomic::{AtomicPtr, AtomicU8, AtomicUsize, Ordering};

// The header's words are laid out in one place, [`crate::header`].
/// [`STACK_OVERFLOW`]: a kernel's stack overflowed: the size of its thread's stack (written
/// by the worker, in every mode; see [`crate::signals`]). [`GLOBALS_AREA`], [`GLOBALS_SAVED`]:
/// where the globals of a launch that fails are saved (set by the program; see
/// [`crate::record_globals`]), and that the dying worker saved them (written by it).
pub use crate::header::{
    word as header_word, CTL_ADDR, CTL_LEN, FAULT_ADDR, FAULT_FLAGS, FAULT_SET, GLOBALS_AREA, GLOBALS_SAVED,
    STACK_OVERFLOW, TRACK_OFF, WATCH_DROPPED,
};

/// [`FAULT_FLAGS`] bits.
pub const FAULT_WRITE: u64 = 1;
pub const FAULT_IN_ARENA: u64 = 2;

/// Page state bits.
pub const READ_FIRST: u8 = 1;
pub const WRITTEN: u8 = 2;
/// The page's accesses went unseen after the kernel's watch was dropped.
pub const UNSEEN: u8 = 4;

/// Words before the changes in a control block.
pub const CTL_HEAD_WORDS: usize = 3;

static ARENA_BASE: AtomicUsize = AtomicUsize::new(0);
static ARENA_SIZE: AtomicUsize = AtomicUsize::new(0);

/// The watched ranges of the running kernel: (start, end, index of the first page's state).
struct Watch {
    ranges: Vec<(usize, usize, usize)>,
    states: *const AtomicU8,
}

static WATCH: AtomicPtr<Watch> = AtomicPtr::new(std::ptr::null_mut());

/// Memory regions the running kernel's faults added, as far as the page states tell (a page
/// opened between closed ones splits its region in three; one next to an open neighbour
/// merges with it). The system allows `vm.max_map_count` regions in all: past
/// [`REGIONS_MAX`] (or when the system refuses a page), the watch is dropped.
static REGIONS_ADDED: AtomicUsize = AtomicUsize::new(0);
/// The running kernel's watch was dropped: its watched ranges are all open.
static DROPPED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Regions one kernel's watch may add: half of the default `vm.max_map_count` (65,530),
/// which leaves the rest to the guarded allocations.
pub const REGIONS_MAX: usize = 32 << 10;

/// The protection a page state leads to: 0 none, 1 read, 2 read-write.
fn prot_rank(state: u8) -> u8 {
    if state & WRITTEN != 0 {
        2
    } else {
        u8::from(state & READ_FIRST != 0)
    }
}

fn page_down(a: usize) -> usize {
    a & !(TRACK_PAGE - 1)
}

/// Sets the protection of `[addr, addr+len)`; false when the system refused.
///
/// # Safety
/// The range must be pages of the arena, which this process mapped itself and which hold no
/// Rust object of the worker's (only kernels' data, whose accesses the protections watch).
unsafe fn protect(addr: usize, len: usize, prot: i32) -> bool {
    // SAFETY: the caller's promise: only arena pages change protection.
    unsafe { libc::mprotect(addr as *mut libc::c_void, len, prot) == 0 }
}

/// The worker's set-up in check mode: every arena page after the header becomes
/// inaccessible, and the fault handler is installed.
///
/// # Safety
/// `[base, base+size)` must be the arena, mapped by [`crate::arena::map_in_worker`]: from
/// now on its pages are opened and closed behind the back of anything that uses them.
pub unsafe fn start_in_worker(base: usize, size: usize) -> std::io::Result<()> {
    ARENA_BASE.store(base, Ordering::Release);
    ARENA_SIZE.store(size, Ordering::Release);
    // SAFETY: the arena's pages after its header, by the caller's promise.
    if !unsafe { protect(base + TRACK_PAGE, size - TRACK_PAGE, libc::PROT_NONE) } {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: installs `on_fault` (an `extern "C"` SA_SIGINFO handler that only reads and
    // writes atomics and calls mprotect/signal) for SIGSEGV and SIGBUS.
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = on_fault as *const () as usize;
        // On the alternate stack: a fault of a thread whose stack is used up.
        sa.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK;
        libc::sigemptyset(&mut sa.sa_mask);
        if libc::sigaction(libc::SIGSEGV, &sa, std::ptr::null_mut()) != 0
            || libc::sigaction(libc::SIGBUS, &sa, std::ptr::null_mut()) != 0
        {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

/// `si_code` of a SIGSEGV on a page whose protection forbids the access (Linux `SEGV_ACCERR`).
const SEGV_ACCERR: i32 = 2;

extern "C" fn on_fault(sig: i32, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    // A signal the kernel sent itself is no access: it ends the worker, and no fault is
    // recorded (its `si_addr` holds the sender's pid).
    // SAFETY: the kernel passes a valid siginfo_t to an SA_SIGINFO handler.
    if unsafe { crate::signals::sent_by_a_process(info) } {
        crate::record_globals::save(sig as u64);
        return crate::signals::die_of(sig);
    }
    // SAFETY: the kernel passes a valid siginfo_t and ucontext_t to an SA_SIGINFO handler.
    let (addr, write) = unsafe {
        let addr = (*info).si_addr() as usize;
        let uc = &*(ctx as *const libc::ucontext_t);
        (addr, uc.uc_mcontext.gregs[libc::REG_ERR as usize] & 2 != 0)
    };
    // SAFETY: as above.
    let access_fault = sig == libc::SIGSEGV && unsafe { (*info).si_code } == SEGV_ACCERR;
    let watch = WATCH.load(Ordering::Acquire);
    // Only a protection fault can be a watched page's first access; anything else (SIGBUS, an
    // unmapped address) would fault again after the page was opened.
    if !watch.is_null() && access_fault {
        // SAFETY: a non-null WATCH points to the Watch of the running kernel, which stays
        // alive until the kernel has ended (the worker swaps it out only then).
        let w = unsafe { &*watch };
        let i = w.ranges.partition_point(|r| r.1 <= addr);
        if let Some(&(start, end, first)) = w.ranges.get(i) {
            if addr >= start && addr < end {
                let page = page_down(addr);
                if DROPPED.load(Ordering::Acquire) {
                    // SAFETY: `w` is the running kernel's watch, as above.
                    return unsafe { drop_watch(w, page) };
                }
                let index = first + (page - start) / TRACK_PAGE;
                // SAFETY: `states` holds one byte per watched page; the indices passed here are
                // this page's and those of its neighbours inside the same watched range.
                let state_at = |i: usize| unsafe { &*w.states.add(i) };
                let st = state_at(index);
                let before = prot_rank(st.load(Ordering::Acquire));
                let prot = if write {
                    st.fetch_or(WRITTEN, Ordering::AcqRel);
                    libc::PROT_READ | libc::PROT_WRITE
                } else {
                    let _ = st.compare_exchange(0, READ_FIRST, Ordering::AcqRel, Ordering::Acquire);
                    if st.load(Ordering::Acquire) & WRITTEN != 0 {
                        libc::PROT_READ | libc::PROT_WRITE
                    } else {
                        libc::PROT_READ
                    }
                };
                // Neighbours outside the watched range count as different.
                let near = |i: usize| prot_rank(state_at(i).load(Ordering::Acquire));
                let left = if page > start { near(index - 1) } else { 3 };
                let right = if page + TRACK_PAGE < end { near(index + 1) } else { 3 };
                let after = prot_rank(st.load(Ordering::Acquire));
                let edges = |p: u8| usize::from(left != p) + usize::from(right != p);
                let added = edges(after).saturating_sub(edges(before));
                if added > 0 && REGIONS_ADDED.fetch_add(added, Ordering::AcqRel) + added > REGIONS_MAX {
                    // SAFETY: `w` is the running kernel's watch, as above.
                    return unsafe { drop_watch(w, page) };
                }
                // SAFETY: `page` lies in a watched range, inside the arena (checked by `arm`).
                if unsafe { protect(page, TRACK_PAGE, prot) } {
                    return;
                }
                // The system refused one more region: the watch goes, the kernel goes on.
                // SAFETY: as above.
                return unsafe { drop_watch(w, page) };
            }
        }
    }
    // What follows ends the worker: its globals go to the record of the launch that failed.
    crate::record_globals::save(sig as u64);
    // A stack overflow is no access to explain: its size is recorded, and it ends the worker.
    if crate::signals::record_stack_overflow(addr) {
        // SAFETY: signal() with SIG_DFL is async-signal-safe.
        unsafe { libc::signal(sig, libc::SIG_DFL) };
        return;
    }
    let base = ARENA_BASE.load(Ordering::Acquire);
    let size = ARENA_SIZE.load(Ordering::Acquire);
    if base != 0 {
        let in_arena = addr >= base && addr < base + size;
        let flags = if write { FAULT_WRITE } else { 0 } | if in_arena { FAULT_IN_ARENA } else { 0 };
        // SAFETY: the arena's header page stays mapped read-write in the worker.
        unsafe {
            header_word(base, FAULT_ADDR).store(addr as u64, Ordering::Relaxed);
            header_word(base, FAULT_FLAGS).store(flags, Ordering::Relaxed);
            header_word(base, FAULT_SET).store(1, Ordering::Release);
        }
    }
    // Back to the default action: the faulting instruction runs again and ends the worker
    // with this signal, which the program reports.
    // SAFETY: signal() with SIG_DFL is async-signal-safe.
    unsafe { libc::signal(sig, libc::SIG_DFL) };
}

/// Drops the running kernel's watch from a fault handler: its watched ranges open (which
/// merges their regions again), every page whose accesses may now go unseen is marked
/// [`UNSEEN`], and the program is told through [`WATCH_DROPPED`]. `page` (the faulting
/// page) is opened in any case, so that a fault racing with the drop cannot repeat forever.
///
/// # Safety
/// `w` must be the running kernel's watch, its ranges inside the arena.
unsafe fn drop_watch(w: &Watch, page: usize) {
    let rw = libc::PROT_READ | libc::PROT_WRITE;
    if !DROPPED.swap(true, Ordering::AcqRel) {
        for &(start, end, first) in &w.ranges {
            for i in 0..(end - start) / TRACK_PAGE {
                // SAFETY: one state byte per watched page, as `arm` checked.
                let st = unsafe { &*w.states.add(first + i) };
                // A written page's record is whole; any other may yet be read or written.
                if st.load(Ordering::Acquire) & WRITTEN == 0 {
                    st.fetch_or(UNSEEN, Ordering::AcqRel);
                }
            }
            // SAFETY: a watched range, inside the arena.
            if !unsafe { protect(start, end - start, rw) } {
                let (base, size) = (ARENA_BASE.load(Ordering::Acquire), ARENA_SIZE.load(Ordering::Acquire));
                give_up(base, size);
                break;
            }
        }
        let base = ARENA_BASE.load(Ordering::Acquire);
        if base != 0 {
            // SAFETY: the header page is mapped read-write in the worker.
            unsafe { header_word(base, WATCH_DROPPED).store(1, Ordering::Release) };
        }
    }
    // SAFETY: a watched page, inside the arena; opening it inside an open range merges.
    unsafe { protect(page, TRACK_PAGE, rw) };
}

/// Reads the control block before a kernel: applies the protection changes and arms the
/// watch. Returns the watched ranges to open again after the kernel.
fn arm() -> Vec<(usize, usize)> {
    let base = ARENA_BASE.load(Ordering::Acquire);
    let size = ARENA_SIZE.load(Ordering::Acquire);
    if base == 0 {
        return Vec::new();
    }
    // SAFETY: the header page is mapped read-write in the worker.
    let (ctl, len) = unsafe {
        (
            header_word(base, CTL_ADDR).load(Ordering::Acquire) as usize,
            header_word(base, CTL_LEN).load(Ordering::Acquire) as usize,
        )
    };
    let inside = |a: usize, l: usize| a >= base + TRACK_PAGE && a.checked_add(l).is_some_and(|e| e <= base + size);
    if ctl == 0 || !ctl.is_multiple_of(TRACK_PAGE) || len < CTL_HEAD_WORDS * 8 || !inside(ctl, len) {
        return Vec::new();
    }
    // SAFETY: `[ctl, ctl+len)` lies inside the arena (checked just above), page-aligned.
    if !unsafe { protect(ctl, len.next_multiple_of(TRACK_PAGE), libc::PROT_READ | libc::PROT_WRITE) } {
        give_up(base, size);
        return Vec::new();
    }
    // SAFETY: `[ctl, ctl+len)` lies in the arena and was just made readable and writable;
    // the program does not touch it while a kernel runs.
    let words = unsafe { std::slice::from_raw_parts(ctl as *const u64, len / 8) };
    let (nc, nw, np) = (words[0] as usize, words[1] as usize, words[2] as usize);
    let need =
        nc.checked_mul(3).and_then(|c| c.checked_add(nw.checked_mul(2)?)).and_then(|w| w.checked_add(CTL_HEAD_WORDS));
    let Some(need) = need.filter(|&n| n.checked_mul(8).and_then(|b| b.checked_add(np)).is_some_and(|b| b <= len))
    else {
        return Vec::new();
    };
    let mut p = CTL_HEAD_WORDS;
    for _ in 0..nc {
        let (addr, l, open) = (words[p] as usize, words[p + 1] as usize, words[p + 2] != 0);
        p += 3;
        if inside(addr, l) && addr.is_multiple_of(TRACK_PAGE) {
            let prot = if open { libc::PROT_READ | libc::PROT_WRITE } else { libc::PROT_NONE };
            // SAFETY: checked to lie inside the arena, page-aligned.
            if !unsafe { protect(addr, l.next_multiple_of(TRACK_PAGE), prot) } && open {
                // Too many distinct mappings (vm.max_map_count): a page the program
                // allocated must never fault, so protections go.
                give_up(base, size);
                return Vec::new();
            }
        }
    }
    let states = (ctl + need * 8) as *const AtomicU8;
    let mut ranges = Vec::with_capacity(nw);
    let mut first = 0usize;
    for _ in 0..nw {
        let (addr, pages) = (words[p] as usize, words[p + 1] as usize);
        p += 2;
        let Some(l) = pages.checked_mul(TRACK_PAGE) else { break };
        if !inside(addr, l) || !addr.is_multiple_of(TRACK_PAGE) || first + pages > np {
            break;
        }
        ranges.push((addr, addr + l, first));
        first += pages;
    }
    ranges.sort_unstable();
    REGIONS_ADDED.store(0, Ordering::Release);
    DROPPED.store(false, Ordering::Release);
    let opened: Vec<(usize, usize)> = ranges.iter().map(|r| (r.0, r.1 - r.0)).collect();
    let watch = Box::into_raw(Box::new(Watch { ranges, states }));
    WATCH.store(watch, Ordering::Release);
    for &(a, l) in &opened {
        // SAFETY: each watched range was checked to lie inside the arena.
        unsafe { protect(a, l, libc::PROT_NONE) };
    }
    opened
}

/// After the kernel: the watched pages become accessible again.
fn disarm(opened: Vec<(usize, usize)>) {
    for (a, l) in opened {
        // SAFETY: the ranges `arm` returned, inside the arena.
        unsafe { protect(a, l, libc::PROT_READ | libc::PROT_WRITE) };
    }
    let w = WATCH.swap(std::ptr::null_mut(), Ordering::AcqRel);
    if !w.is_null() {
        // SAFETY: `w` came from Box::into_raw in `arm`, and the kernel that could fault
        // on its pages has ended.
        drop(unsafe { Box::from_raw(w) });
    }
}

/// Protections cannot be kept (the system refused an mprotect): the whole arena becomes
/// accessible, and the program is told through [`TRACK_OFF`].
fn give_up(base: usize, size: usize) {
    // SAFETY: `[base, base+size)` is the arena (ARENA_BASE and ARENA_SIZE).
    unsafe { protect(base, size, libc::PROT_READ | libc::PROT_WRITE) };
    ARENA_BASE.store(0, Ordering::Release);
    // SAFETY: the header page is mapped read-write in the worker.
    unsafe { header_word(base, TRACK_OFF).store(1, Ordering::Release) };
}

/// Runs one launch of the worker in check mode ([`omp_worker::serve::AroundLaunch`]): the
/// control block's protection changes are applied and its pages watched while it runs.
pub fn around_launch(run: &mut dyn FnMut()) {
    crate::signals::kernel_thread_ready();
    let opened = arm();
    run();
    disarm(opened);
}
