//! The globals of a launch that fails, for its record ([`crate::record`]): an image's device
//! globals (`declare target` variables) live in the worker's copy of the image, which is gone
//! once the worker has died. So the worker saves them as it dies, into an area of the arena
//! (shared memory, which outlives it), and the program reads them from there afterwards.
//!
//! The program keeps the area: each global the runtime resolves (at image load) gets an
//! entry and room for its bytes, in an area at the top of the arena (so that device
//! allocations keep their addresses), never given to a kernel and, in check mode, never
//! opened for one. The worker's fault handlers (SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT:
//! [`save_on_faults_in`]) and its `exit()` (a kernel's) copy each global into its room with
//! `process_vm_readv` on the worker itself, which fails with `EFAULT` instead of faulting
//! again on an address that is no longer mapped, and mark each entry copied. The bytes are
//! the globals as the failure left them; other threads of the kernel may have run on a
//! little meanwhile, as for the device memory.
//!
//! Area layout, in 64-bit words: number of entries, entry capacity, offset of the bytes
//! from the area's start, the area's length in bytes; then per entry: the global's address
//! in the worker, its size, the offset of its bytes among the area's bytes, and 1 once the
//! worker copied it. The arena header's [`crate::track::GLOBALS_AREA`] says where the area
//! is, and [`crate::track::GLOBALS_SAVED`] that the worker saved them (the signal, or
//! [`SAVED_AT_EXIT`]).

use crate::arena::Arena;
use crate::track::{header_word, GLOBALS_AREA, GLOBALS_SAVED};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

/// Words before the entries.
const HEAD_WORDS: usize = 4;
/// Words per entry.
const ENTRY_WORDS: usize = 4;
/// Entries, and bytes, the first area has room for.
const FIRST_CAPACITY: usize = 16;
const FIRST_ROOM: usize = 4096;
/// [`GLOBALS_SAVED`] when the worker saved the globals in `exit()`, not in a signal handler.
pub const SAVED_AT_EXIT: u64 = 1 << 16;

/// A global with room in the area: who resolved it, its name, address and size, and where
/// its bytes go (offset among the area's bytes).
struct Entry {
    device: u32,
    image: usize,
    name: String,
    addr: usize,
    size: usize,
    offset: usize,
}

/// The program's side: the area and the entries it holds.
#[derive(Default)]
pub(crate) struct FaultGlobals {
    entries: Vec<Entry>,
    /// The current area: (address, entry capacity, byte capacity).
    area: Option<(usize, usize, usize)>,
    /// Bytes of the entries so far.
    bytes: usize,
}

/// The word at `index` of the area at `area`.
///
/// # Safety
/// `[area, area + 8 * (index + 1))` must lie in a mapped arena, 8-aligned.
unsafe fn word<'a>(area: usize, index: usize) -> &'a AtomicU64 {
    // SAFETY: the caller's promise.
    unsafe { &*((area + 8 * index) as *const AtomicU64) }
}

impl FaultGlobals {
    /// Gives a global room in the area (a new, larger area when it is full), unless its
    /// bytes would take the area past `max_bytes` or the arena has no room: the record of a
    /// launch that fails then goes without it.
    pub(crate) fn add(&mut self, arena: &Arena, max_bytes: u64, g: (u32, usize, &str, usize, usize)) {
        let (device, image, name, addr, size) = g;
        let Some(bytes) = self.bytes.checked_add(size).filter(|&b| b as u64 <= max_bytes) else { return };
        let (area, capacity, room) = match self.area {
            Some((area, capacity, room)) if self.entries.len() < capacity && bytes <= room => (area, capacity, room),
            current => {
                // Each that is full doubles (so that areas are made a logarithmic number of times).
                let capacity = match current {
                    None => FIRST_CAPACITY,
                    Some(c) if self.entries.len() < c.1 => c.1,
                    Some(c) => 2 * c.1,
                };
                let room = current.map_or(FIRST_ROOM, |c| 2 * c.2).max(bytes).min(max_bytes as usize).max(bytes);
                let start = 8 * (HEAD_WORDS + ENTRY_WORDS * capacity);
                let Some(area) = start.checked_add(room).and_then(|len| arena.alloc_at_top(len)) else { return };
                // SAFETY: `area` is an arena block of `start + room` bytes, page-aligned, that
                // only this recorder writes (the worker only once it is dying).
                unsafe {
                    word(area, 1).store(capacity as u64, Ordering::Relaxed);
                    word(area, 2).store(start as u64, Ordering::Relaxed);
                    word(area, 3).store((start + room) as u64, Ordering::Relaxed);
                    for (i, e) in self.entries.iter().enumerate() {
                        write_entry(area, i, e);
                    }
                    word(area, 0).store(self.entries.len() as u64, Ordering::Release);
                    header_word(arena.base(), GLOBALS_AREA).store(area as u64, Ordering::Release);
                }
                // A superseded area is not freed: a dying worker may have read its address
                // just before, and its bytes were never written (the memfd keeps no pages
                // for them).
                (area, capacity, room)
            }
        };
        self.area = Some((area, capacity, room));
        let e = Entry { device, image, name: name.to_string(), addr, size, offset: self.bytes };
        // SAFETY: the area holds `capacity` entries, and this one's index is below it.
        unsafe {
            write_entry(area, self.entries.len(), &e);
            word(area, 0).store(self.entries.len() as u64 + 1, Ordering::Release);
        }
        self.entries.push(e);
        self.bytes = bytes;
    }

    /// After the worker died: the globals of `image` on `device` it saved, each with its
    /// bytes (`None` when it saved none). An entry whose words a kernel overwrote (only
    /// possible outside check mode) is left out.
    pub(crate) fn saved(
        &self,
        arena: &Arena,
        device: u32,
        image: usize,
    ) -> Option<(Vec<crate::record::Global>, Vec<u8>)> {
        let (area, _, _) = self.area?;
        // SAFETY: the header page is part of the arena's read-write mapping.
        if unsafe { header_word(arena.base(), GLOBALS_SAVED) }.load(Ordering::Acquire) == 0 {
            return None;
        }
        // SAFETY: the area's head words, written by `add`.
        let start = unsafe { word(area, 2) }.load(Ordering::Relaxed) as usize;
        let (mut globals, mut bytes) = (Vec::new(), Vec::new());
        for (i, e) in self.entries.iter().enumerate() {
            if e.device != device || e.image != image {
                continue;
            }
            let at = |k: usize| {
                // SAFETY: entry `i` lies in the area (written by `add`).
                unsafe { word(area, HEAD_WORDS + ENTRY_WORDS * i + k) }.load(Ordering::Acquire) as usize
            };
            if [at(0), at(1), at(2), at(3)] != [e.addr, e.size, e.offset, 1] {
                continue;
            }
            // SAFETY: the entry's bytes lie in the area (`add` gave them room); the worker
            // that wrote them is gone.
            bytes.extend_from_slice(unsafe {
                std::slice::from_raw_parts((area + start + e.offset) as *const u8, e.size)
            });
            globals.push((e.name.clone(), e.addr, e.size));
        }
        (!globals.is_empty()).then_some((globals, bytes))
    }
}

/// Writes entry `i` (not yet copied) into the area at `area`.
///
/// # Safety
/// The area must have room for entry `i`.
unsafe fn write_entry(area: usize, i: usize, e: &Entry) {
    let at = HEAD_WORDS + ENTRY_WORDS * i;
    // SAFETY: the caller's promise.
    unsafe {
        word(area, at).store(e.addr as u64, Ordering::Relaxed);
        word(area, at + 1).store(e.size as u64, Ordering::Relaxed);
        word(area, at + 2).store(e.offset as u64, Ordering::Relaxed);
        word(area, at + 3).store(0, Ordering::Release);
    }
}

// The worker's side.

static ARENA_BASE: AtomicUsize = AtomicUsize::new(0);
static ARENA_SIZE: AtomicUsize = AtomicUsize::new(0);
/// One thread saves; the others that fail meanwhile wait for it ([`SAVED`]).
static SAVING: AtomicBool = AtomicBool::new(false);
static SAVED: AtomicBool = AtomicBool::new(false);
/// The worker is ending because its parent closed the pipe, not by a kernel's `exit()`.
static ENDING_NORMALLY: AtomicBool = AtomicBool::new(false);

/// The signals, besides SIGSEGV and SIGBUS (whose handlers save the globals themselves),
/// that end the worker for something a kernel did.
const OTHER_FAULTS: [i32; 3] = [libc::SIGFPE, libc::SIGILL, libc::SIGABRT];

/// In the worker: from now on a failure saves the globals into the area the arena at `base`
/// names. Installs handlers for SIGFPE, SIGILL and SIGABRT (where none is installed) and one
/// for `exit()`; the SIGSEGV and SIGBUS handlers call [`save`] themselves.
///
/// # Safety
/// `[base, base+size)` must be the arena, mapped read-write for the rest of the process's life.
pub unsafe fn save_on_faults_in(base: usize, size: usize) {
    ARENA_BASE.store(base, Ordering::Release);
    ARENA_SIZE.store(size, Ordering::Release);
    for sig in OTHER_FAULTS {
        // SAFETY: sigaction is plain data (all-zero is valid); reads the current action and,
        // when it is the default, installs `on_fault`, an `extern "C"` SA_SIGINFO handler that
        // is async-signal-safe.
        unsafe {
            let mut old: libc::sigaction = std::mem::zeroed();
            if libc::sigaction(sig, std::ptr::null(), &mut old) != 0 || old.sa_sigaction != libc::SIG_DFL {
                continue;
            }
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = on_fault as *const () as usize;
            sa.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK;
            libc::sigemptyset(&mut sa.sa_mask);
            libc::sigaction(sig, &sa, std::ptr::null_mut());
        }
    }
    // SAFETY: atexit takes a plain `extern "C" fn()` that lives as long as the process.
    unsafe { libc::atexit(save_at_exit) };
}

/// In the worker, before it ends because its parent is done with it: `exit()` then saves
/// nothing.
pub fn ending_normally() {
    ENDING_NORMALLY.store(true, Ordering::Release);
}

extern "C" fn on_fault(sig: i32, info: *mut libc::siginfo_t, _ctx: *mut libc::c_void) {
    save(sig as u64);
    // SAFETY: the kernel passes a valid siginfo_t to an SA_SIGINFO handler.
    if sig == libc::SIGABRT || unsafe { crate::signals::sent_by_a_process(info) } {
        return crate::signals::die_of(sig);
    }
    // The faulting instruction runs again and ends the worker with this signal.
    // SAFETY: signal() with SIG_DFL is async-signal-safe.
    unsafe { libc::signal(sig, libc::SIG_DFL) };
}

extern "C" fn save_at_exit() {
    if !ENDING_NORMALLY.load(Ordering::Acquire) {
        save(SAVED_AT_EXIT);
    }
}

/// From a handler of a failure that ends the worker (`why`: the signal): lets what the
/// kernels printed reach the program (for a signal: output already taken from the pipes is
/// sent, the rest stays there for the parent), then copies each global into its room in
/// the area, marks it copied, and says so in the arena's header. Only the first thread to
/// fail copies; the others wait for it (a while). Async-signal-safe.
pub fn save(why: u64) {
    if why != SAVED_AT_EXIT {
        // (At exit, the worker's own exit handler still forwards what is left.)
        omp_worker::capture::stop_and_wait_until_sent();
    }
    let base = ARENA_BASE.load(Ordering::Acquire);
    if base == 0 {
        return;
    }
    if SAVING.swap(true, Ordering::AcqRel) {
        for _ in 0..100_000 {
            if SAVED.load(Ordering::Acquire) {
                break;
            }
            // SAFETY: sched_yield has no preconditions.
            unsafe { libc::sched_yield() };
        }
        return;
    }
    // SAFETY: `save_on_faults_in`'s promise: the arena at `base` stays mapped read-write.
    let copied = unsafe { copy_globals(base, ARENA_SIZE.load(Ordering::Acquire)) };
    if copied {
        // SAFETY: as above.
        unsafe { header_word(base, GLOBALS_SAVED) }.store(why, Ordering::Release);
    }
    SAVED.store(true, Ordering::Release);
}

/// Copies each global of the area the arena's header names into its room; false when there
/// is no area (or its head does not fit the arena).
///
/// # Safety
/// `[base, base+size)` must be the arena, mapped read-write.
unsafe fn copy_globals(base: usize, size: usize) -> bool {
    // SAFETY: the caller's promise: the header page is mapped.
    let area = unsafe { header_word(base, GLOBALS_AREA) }.load(Ordering::Acquire) as usize;
    let end = base + size;
    let inside = |a: usize, len: usize| a >= base + 4096 && a.checked_add(len).is_some_and(|e| e <= end);
    if area == 0 || !area.is_multiple_of(4096) || !inside(area, 8 * HEAD_WORDS) {
        return false;
    }
    // In check mode the area's pages are closed to kernels: open them for this copy.
    // SAFETY: the area's first page lies in the arena (checked above); mprotect is a system call.
    if unsafe { libc::mprotect(area as *mut libc::c_void, 4096, libc::PROT_READ | libc::PROT_WRITE) } != 0 {
        return false;
    }
    // SAFETY: the head words lie in the area's first page, just opened.
    let head = |i: usize| unsafe { word(area, i) }.load(Ordering::Acquire) as usize;
    let (count, capacity, start, len) = (head(0), head(1), head(2), head(3));
    let table_end = capacity.checked_mul(ENTRY_WORDS).and_then(|w| w.checked_add(HEAD_WORDS)?.checked_mul(8));
    if count > capacity || table_end.is_none_or(|t| t > start || start > len) || !inside(area, len) {
        return false;
    }
    // SAFETY: the area lies in the arena (checked just above).
    if unsafe {
        libc::mprotect(area as *mut libc::c_void, len.next_multiple_of(4096), libc::PROT_READ | libc::PROT_WRITE)
    } != 0
    {
        return false;
    }
    // SAFETY: getpid has no preconditions.
    let pid = unsafe { libc::getpid() };
    for i in 0..count {
        let at = HEAD_WORDS + ENTRY_WORDS * i;
        let (addr, size, offset) = (head(at), head(at + 1), head(at + 2));
        let room = start.checked_add(offset).filter(|&o| o.checked_add(size).is_some_and(|e| e <= len));
        let Some(room) = room else { continue };
        let local = libc::iovec { iov_base: (area + room) as *mut libc::c_void, iov_len: size };
        let remote = libc::iovec { iov_base: addr as *mut libc::c_void, iov_len: size };
        // SAFETY: `local` is the entry's room in the area (inside it, checked above, and
        // opened); the system checks `remote` against this process's mappings and answers
        // EFAULT, never a fault, for a range not mapped.
        let n = unsafe { libc::process_vm_readv(pid, &local, 1, &remote, 1, 0) };
        if n == size as isize {
            // SAFETY: the entry lies in the area's table (i < count <= capacity).
            unsafe { word(area, at + 3) }.store(1, Ordering::Release);
        }
    }
    true
}

/// What [`save`] does, for a test in which this process plays the dying worker.
///
/// # Safety
/// As [`copy_globals`].
#[cfg(test)]
pub(crate) unsafe fn save_in_test(base: usize, size: usize) {
    // SAFETY: the caller's promise.
    if unsafe { copy_globals(base, size) } {
        // SAFETY: as above.
        unsafe { header_word(base, GLOBALS_SAVED) }.store(libc::SIGSEGV as u64, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dying_workers_globals_are_read_back_by_image() {
        let arena = Arena::create(1 << 24).unwrap();
        let mut g = FaultGlobals::default();
        let (one, two, three) = (vec![1u8; 8], vec![2u8; 3], vec![3u8; 5000]);
        let addr = |v: &Vec<u8>| v.as_ptr() as usize;
        g.add(&arena, 1 << 20, (0, 1, "one", addr(&one), 8));
        g.add(&arena, 1 << 20, (0, 2, "other_image", addr(&two), 3));
        // A global no longer mapped: left out, the others saved.
        g.add(&arena, 1 << 20, (0, 1, "gone", 0x10, 4));
        for i in 0..20 {
            // Past the first area's capacity: a second area, the entries moved to it.
            g.add(&arena, 1 << 20, (1, 1, &format!("g{i}"), addr(&three), 5000));
        }
        // Over the bound: no room, not saved.
        g.add(&arena, 1 << 20, (0, 1, "huge", addr(&three), 1 << 20));
        assert!(g.area.unwrap().0 > arena.base() + (1 << 23), "at the arena's top");
        assert_eq!(g.area.unwrap().1, 32, "23 entries: the first area's 16 doubled once");
        assert!(g.saved(&arena, 0, 1).is_none(), "nothing saved before the worker died");
        // SAFETY: the arena is mapped read-write for the whole test; this process plays the
        // dying worker, whose globals are the vectors above.
        unsafe { save_in_test(arena.base(), arena.size()) };
        let (globals, bytes) = g.saved(&arena, 0, 1).unwrap();
        assert_eq!(globals, vec![("one".to_string(), addr(&one), 8)]);
        assert_eq!(bytes, one);
        let (globals, bytes) = g.saved(&arena, 1, 1).unwrap();
        assert_eq!(globals.len(), 20);
        assert_eq!(bytes.len(), 20 * 5000);
        assert!(bytes.iter().all(|&b| b == 3));
        assert_eq!(g.saved(&arena, 0, 2).unwrap().1, two);
    }
}
