//! `LIBOMPTARGET_CHECK=gpu` (and `1`): what a kernel used of what a GPU limits, measured in
//! the worker, per kernel: the most stack one of its threads used, and the most bytes its
//! threads' `malloc` held at once. The worker leaves both in its arena's header
//! ([`STACK_USE`], [`HEAP_PEAK`]) before it answers the launch; the program reads them
//! ([`read`]) and the checker holds them against a GPU's defaults.
//!
//! **Stack.** A *scope* is a stretch of kernel code on one thread: the launch itself on the
//! thread that runs it, and each implicit task (a team's initial task, a `parallel` region's
//! task on each thread), which libomp announces to the worker's OMPT tool (offload-worker
//! exports `ompt_start_tool`, and starts the tool only when this check is on). At a scope's
//! start, on its own thread, [`WINDOW`] bytes below the stack pointer (less a margin for the
//! measuring code's own frames) are filled with a pattern and the pages further below are
//! given back (`MADV_DONTNEED`); at its end the lowest word that lost the pattern, or below
//! the window the lowest page that came back (`mincore`), is the deepest the scope went. A
//! scope in which another begins on the same thread (a fork) is measured up to there.
//!
//! **Heap.** offload-worker exports `malloc`, `calloc`, `realloc` and `free` (glibc's, with
//! [`allocated`] and [`freeing`] around them): while a kernel runs, the usable size of each
//! block a scope's thread allocates or frees is counted, and the launch keeps the most that
//! was live at once beyond what was live when it began. When the check is off, each call
//! costs its entry's jump and one relaxed load and a branch.
//!
//! **Host calls** ([`crate::gpu_calls`]): around each launch, the device images' calls to
//! functions no GPU provides that the loader bound during it.

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicIsize, AtomicUsize, Ordering};

/// Header words ([`crate::header`]): the most stack bytes one thread of the last kernel used
/// (0: under the measuring margin, [`MARGIN`]), and the most bytes the last kernel's threads
/// held from `malloc` at once.
pub use crate::header::{HEAP_PEAK, STACK_USE};

/// Bytes below a scope's stack pointer left to the measuring code's own frames.
pub const MARGIN: usize = 2 << 10;
/// Bytes below the margin filled with the pattern: use within it is measured to the word,
/// below it to the page.
pub const WINDOW: usize = 32 << 10;
/// What the window is filled with.
const PATTERN: u64 = 0x6f6d_7072_735f_5350;
/// Scopes nested on one thread that are followed (deeper ones count as kernel code of the
/// last one followed).
const MAX_DEPTH: usize = 8;

const PAGE: usize = 4096;

/// The arena's base (its header takes the results); 0 while the check is off.
static ARENA: AtomicUsize = AtomicUsize::new(0);
/// A launch is running.
static IN_LAUNCH: AtomicBool = AtomicBool::new(false);
static STACK_MOST: AtomicUsize = AtomicUsize::new(0);
static HEAP_LIVE: AtomicIsize = AtomicIsize::new(0);
static HEAP_START: AtomicIsize = AtomicIsize::new(0);
static HEAP_MOST: AtomicIsize = AtomicIsize::new(0);

/// One scope on a thread: where it began, its window, whether it is still measured, and
/// whether it began during a launch (its thread's `malloc` counts).
#[derive(Clone, Copy)]
struct Scope {
    sp: usize,
    window: (usize, usize),
    measured: bool,
    kernel: bool,
}

const NO_SCOPE: Scope = Scope { sp: 0, window: (0, 0), measured: false, kernel: false };

thread_local! {
    /// This thread's open scopes (only the first [`MAX_DEPTH`] are kept) and how many.
    static SCOPES: Cell<[Scope; MAX_DEPTH]> = const { Cell::new([NO_SCOPE; MAX_DEPTH]) };
    static DEPTH: Cell<usize> = const { Cell::new(0) };
    /// Open scopes on this thread that began during a launch: its `malloc` is counted.
    static KERNEL_SCOPES: Cell<usize> = const { Cell::new(0) };
    /// The lowest usable address of this thread's stack; 0 until asked.
    static STACK_LOW: Cell<usize> = const { Cell::new(0) };
}

/// Turns the measuring on, in the worker, with its results in the header of the arena at
/// `base`.
///
/// # Safety
/// `base` must be the arena's address in this process, its header page mapped read-write
/// for the rest of the process's life.
pub unsafe fn start_in_worker(base: usize) {
    // This executable (the worker) is not the kernel's code.
    if let Some((start, end)) = object_range(start_in_worker as *const () as usize) {
        NOT_KERNELS[0].0.store(start, Ordering::Relaxed);
        NOT_KERNELS[0].1.store(end, Ordering::Release);
    }
    ARENA.store(base, Ordering::Release);
}

/// Whether the measuring is on (offload-worker starts its OMPT tool only then).
pub fn on() -> bool {
    ARENA.load(Ordering::Acquire) != 0
}

/// Runs one launch, measured, on the thread that runs it (inside the worker's other work
/// around a launch, so that none of that is counted).
pub fn measure_launch(run: &mut dyn FnMut()) {
    let base = ARENA.load(Ordering::Acquire);
    if base == 0 {
        return run();
    }
    crate::gpu_calls::before_launch();
    let (stack, heap) = measured(run);
    let (called, unseen) = crate::gpu_calls::after_launch();
    // SAFETY: `start_in_worker`'s promise: the header page stays mapped read-write.
    unsafe {
        crate::track::header_word(base, STACK_USE).store(stack as u64, Ordering::Relaxed);
        crate::track::header_word(base, HEAP_PEAK).store(heap.max(0) as u64, Ordering::Release);
        crate::gpu_calls::write(base, &called, unseen);
    }
}

/// Runs `run` as a measured scope of a launch on this thread: the deepest stack of its
/// scopes, and the most heap bytes it held at once beyond what was live before.
fn measured(run: impl FnOnce()) -> (usize, isize) {
    STACK_MOST.store(0, Ordering::Relaxed);
    let live = HEAP_LIVE.load(Ordering::Relaxed);
    HEAP_START.store(live, Ordering::Relaxed);
    HEAP_MOST.store(live, Ordering::Relaxed);
    IN_LAUNCH.store(true, Ordering::Release);
    scope_begins();
    run();
    scope_ends();
    IN_LAUNCH.store(false, Ordering::Release);
    (STACK_MOST.load(Ordering::Relaxed), HEAP_MOST.load(Ordering::Relaxed) - HEAP_START.load(Ordering::Relaxed))
}

/// What the last launch used, as the worker left it in the header of the arena at `base`.
///
/// # Safety
/// `base` must be a mapped arena (its header page readable).
pub unsafe fn read(base: usize) -> omp_plugin::GpuUse {
    // SAFETY: the caller's promise.
    let word = |offset| unsafe { crate::track::header_word(base, offset) }.load(Ordering::Acquire) as usize;
    // SAFETY: the caller's promise.
    let (mut host_calls, unseen) = unsafe { crate::gpu_calls::read(base) };
    let flang_runtime_calls = match host_calls.iter().position(|(s, _)| s == crate::gpu_calls::FLANG_RUNTIME) {
        Some(i) => host_calls.remove(i).1.unwrap_or_default().split(' ').map(str::to_string).collect(),
        None => Vec::new(),
    };
    let calls_unseen = match unseen {
        0 => None,
        crate::gpu_calls::UNSEEN_LINKED_NOW => Some(omp_plugin::CallsUnseen::LinkedNow),
        _ => Some(omp_plugin::CallsUnseen::BoundAtLoad),
    };
    omp_plugin::GpuUse { stack: word(STACK_USE), heap: word(HEAP_PEAK), host_calls, flang_runtime_calls, calls_unseen }
}

/// A scope of kernel code begins on this thread (an implicit task, or the launch).
#[inline(never)]
pub fn scope_begins() {
    let depth = DEPTH.get();
    DEPTH.set(depth + 1);
    if depth >= MAX_DEPTH {
        return;
    }
    let mut scopes = SCOPES.get();
    let sp = stack_pointer();
    // A fork: the enclosing scope used the frames live here, down to this scope's start
    // (what the runtime did before, once, to start its threads is not the kernel's), and is
    // not measured further.
    if depth > 0 && scopes[depth - 1].measured {
        STACK_MOST.fetch_max(scopes[depth - 1].sp.saturating_sub(sp), Ordering::Relaxed);
        scopes[depth - 1].measured = false;
    }
    let low = stack_low();
    let in_launch = IN_LAUNCH.load(Ordering::Acquire);
    if in_launch {
        KERNEL_SCOPES.set(KERNEL_SCOPES.get() + 1);
    }
    let top = (sp - MARGIN) & !7;
    let window = ((top.saturating_sub(WINDOW)).max(low) & !(PAGE - 1), top);
    let measured = in_launch && low != 0 && window.0 < window.1;
    if measured {
        // SAFETY: the window lies on this thread's own stack, below its stack pointer less
        // the margin this function and the ones it calls stay within: memory no frame holds.
        unsafe { fill(window) };
        if window.0 > low {
            // SAFETY: the pages below the window, down to the stack's lowest usable address,
            // are this thread's stack below its stack pointer: no frame holds them; they come
            // back zeroed when touched.
            unsafe { libc::madvise(low as *mut libc::c_void, window.0 - low, libc::MADV_DONTNEED) };
        }
    }
    scopes[depth] = Scope { sp, window, measured, kernel: in_launch };
    SCOPES.set(scopes);
}

/// The scope [`scope_begins`] began on this thread ends.
#[inline(never)]
pub fn scope_ends() {
    let Some(depth) = DEPTH.get().checked_sub(1) else { return };
    DEPTH.set(depth);
    if depth >= MAX_DEPTH {
        return;
    }
    let mut scopes = SCOPES.get();
    let scope = scopes[depth];
    if scope.measured {
        note_stack_use(&scope);
    }
    if scope.kernel {
        KERNEL_SCOPES.set(KERNEL_SCOPES.get().saturating_sub(1));
    }
    scopes[depth] = NO_SCOPE;
    SCOPES.set(scopes);
}

/// Keeps the stack use of `scope` if it is the most so far.
fn note_stack_use(scope: &Scope) {
    // SAFETY: the scope's window is on this thread's stack, filled by `scope_begins`; the pages
    // below it are the stack's too.
    let deepest = unsafe { deepest_write(scope.window, stack_low()) };
    if let Some(deepest) = deepest {
        STACK_MOST.fetch_max(scope.sp.saturating_sub(deepest), Ordering::Relaxed);
    }
}

/// Whether this thread's `malloc` counts now: a scope of a running kernel is open on it.
#[inline]
fn counting() -> bool {
    ARENA.load(Ordering::Relaxed) != 0 && KERNEL_SCOPES.get() > 0 && IN_LAUNCH.load(Ordering::Relaxed)
}

/// After `malloc`, `calloc` or `realloc` called from `caller` returned `block`: counted
/// when a kernel's thread allocated it in the kernel's code.
#[inline]
pub fn allocated(block: *mut libc::c_void, caller: usize) {
    if ARENA.load(Ordering::Relaxed) != 0 && !block.is_null() {
        count(block, caller, 1);
    }
}

/// Before `free` or `realloc` called from `caller` gives `block` back: counted when a
/// kernel's thread frees it in the kernel's code.
#[inline]
pub fn freeing(block: *mut libc::c_void, caller: usize) {
    if ARENA.load(Ordering::Relaxed) != 0 && !block.is_null() {
        count(block, caller, -1);
    }
}

/// The code that is not the kernel's, by address range: the worker itself and libomp (its
/// threads, teams and their first-use state are the CPU runtime's, not the kernel's).
static NOT_KERNELS: [(AtomicUsize, AtomicUsize); 2] =
    [(AtomicUsize::new(0), AtomicUsize::new(0)), (AtomicUsize::new(0), AtomicUsize::new(0))];

/// The runtime's own code: the loaded object that holds `addr` (libomp, given one of its
/// functions) is not the kernel's; its allocations are not counted.
pub fn runtime_object_at(addr: usize) {
    if let Some((start, end)) = object_range(addr) {
        NOT_KERNELS[1].0.store(start, Ordering::Relaxed);
        NOT_KERNELS[1].1.store(end, Ordering::Release);
    }
}

fn kernels_code(caller: usize) -> bool {
    !NOT_KERNELS
        .iter()
        .any(|(start, end)| (start.load(Ordering::Relaxed)..end.load(Ordering::Acquire)).contains(&caller))
}

/// The address range of the loaded object (executable or library) whose segments hold `addr`.
fn object_range(addr: usize) -> Option<(usize, usize)> {
    struct Find {
        addr: usize,
        found: Option<(usize, usize)>,
    }
    unsafe extern "C" fn each(info: *mut libc::dl_phdr_info, _size: usize, data: *mut libc::c_void) -> i32 {
        // SAFETY: dl_iterate_phdr passes a valid info (its program headers included) and the
        // `Find` given to it below.
        let (info, find) = unsafe { (&*info, &mut *data.cast::<Find>()) };
        // SAFETY: as above: `dlpi_phnum` headers at `dlpi_phdr`.
        let headers = unsafe { std::slice::from_raw_parts(info.dlpi_phdr, info.dlpi_phnum as usize) };
        let loads = headers.iter().filter(|h| h.p_type == libc::PT_LOAD);
        let base = info.dlpi_addr as usize;
        let start = loads.clone().map(|h| base + h.p_vaddr as usize).min();
        let end = loads.map(|h| base + (h.p_vaddr + h.p_memsz) as usize).max();
        match (start, end) {
            (Some(s), Some(e)) if (s..e).contains(&find.addr) => {
                find.found = Some((s, e));
                1
            }
            _ => 0,
        }
    }
    let mut find = Find { addr, found: None };
    // SAFETY: `each` matches dl_iterate_phdr's callback type and only reads what it is given;
    // `find` outlives the call.
    unsafe { libc::dl_iterate_phdr(Some(each), (&mut find as *mut Find).cast()) };
    find.found
}

#[inline(never)]
fn count(block: *mut libc::c_void, caller: usize, sign: isize) {
    if !counting() || !kernels_code(caller) {
        return;
    }
    // SAFETY: `block` is a live block of glibc's malloc (just returned, or about to be freed).
    let size = unsafe { libc::malloc_usable_size(block) } as isize;
    let live = HEAP_LIVE.fetch_add(sign * size, Ordering::Relaxed) + sign * size;
    HEAP_MOST.fetch_max(live, Ordering::Relaxed);
}

/// An address within the caller's frame (a `#[inline(never)]` function's local).
#[inline(never)]
fn stack_pointer() -> usize {
    let here = 0u8;
    std::hint::black_box(&here) as *const u8 as usize
}

/// The lowest usable address of this thread's stack (0 when the system does not say).
fn stack_low() -> usize {
    if STACK_LOW.get() == 0 {
        // SAFETY: pthread_getattr_np fills the attribute object of the calling thread, which
        // is destroyed after its stack was read.
        unsafe {
            let mut attr: libc::pthread_attr_t = std::mem::zeroed();
            if libc::pthread_getattr_np(libc::pthread_self(), &mut attr) == 0 {
                let (mut addr, mut size) = (std::ptr::null_mut(), 0usize);
                if libc::pthread_attr_getstack(&attr, &mut addr, &mut size) == 0 && size > 0 {
                    STACK_LOW.set((addr as usize).next_multiple_of(PAGE));
                }
                libc::pthread_attr_destroy(&mut attr);
            }
        }
    }
    STACK_LOW.get()
}

/// Fills `[window.0, window.1)` with the pattern.
///
/// # Safety
/// The range must be 8-aligned memory of the calling thread's stack that no frame holds.
#[inline(never)]
unsafe fn fill(window: (usize, usize)) {
    let words = (window.1 - window.0) / 8;
    // SAFETY: the caller's promise.
    let w = unsafe { std::slice::from_raw_parts_mut(window.0 as *mut u64, words) };
    w.fill(PATTERN);
}

/// The lowest address a scope wrote: in its window, the lowest word that lost the pattern;
/// when the window's lowest word did, the lowest page below it that is in memory again (the
/// pages there were given back at the scope's start). `None` when nothing in the window was
/// written (the scope stayed within the margin).
///
/// # Safety
/// `window` must be a window [`fill`] filled on the calling thread's stack, and `low` that
/// stack's lowest usable address.
#[inline(never)]
unsafe fn deepest_write(window: (usize, usize), low: usize) -> Option<usize> {
    let words = (window.1 - window.0) / 8;
    // SAFETY: the caller's promise: the window is this thread's stack (below the frames of
    // this function, which runs no deeper than the margin above the window).
    let w = unsafe { std::slice::from_raw_parts(window.0 as *const u64, words) };
    let first = w.iter().position(|&v| v != PATTERN)?;
    if first > 0 || window.0 <= low {
        return Some(window.0 + first * 8);
    }
    let mut resident = [0u8; 64];
    let mut page = low;
    while page < window.0 {
        let n = ((window.0 - page) / PAGE).min(resident.len());
        // SAFETY: `[page, page + n pages)` is part of this thread's stack mapping; mincore
        // writes one byte per page into `resident`, which holds `n`.
        if unsafe { libc::mincore(page as *mut libc::c_void, n * PAGE, resident.as_mut_ptr()) } != 0 {
            break;
        }
        if let Some(i) = resident[..n].iter().position(|&r| r & 1 != 0) {
            return Some(page + i * PAGE);
        }
        page += n * PAGE;
    }
    Some(window.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Frames of about `kib` KiB on the stack, each written.
    #[inline(never)]
    fn use_stack(kib: usize) -> u8 {
        if kib == 0 {
            return 0;
        }
        let mut frame = [0u8; 1024];
        frame[kib % 1024] = kib as u8;
        std::hint::black_box(&mut frame);
        frame[0].wrapping_add(use_stack(kib - 1))
    }

    /// A caller in the kernel's code (this test), and one in the runtime's (libc's).
    const KERNEL: usize = 0;
    static RUNTIME: std::sync::LazyLock<usize> = std::sync::LazyLock::new(|| libc::malloc as *const () as usize);

    /// A scope that begins and ends under about `kib` KiB of frames and uses nothing.
    #[inline(never)]
    fn nested_scope_at_depth(kib: usize) -> u8 {
        if kib == 0 {
            scope_begins();
            scope_ends();
            return 0;
        }
        let mut frame = [0u8; 1024];
        frame[kib % 1024] = kib as u8;
        std::hint::black_box(&mut frame);
        frame[0].wrapping_add(nested_scope_at_depth(kib - 1))
    }

    #[test]
    fn a_scope_measures_its_threads_stack_and_malloc() {
        // On a thread of its own: the scopes are per thread.
        std::thread::Builder::new()
            .stack_size(1 << 20)
            .spawn(|| {
                ARENA.store(1, Ordering::Release);
                // Within the window (to the word), below it (to the page), within the margin;
                // each frame is 1 KiB and what the call takes (more unoptimized), less the
                // few words between the caller's frame and where the scope begins (an
                // optimized build measured 8,167 bytes for 8 frames).
                for (kib, at_least, at_most) in [(8, 7 << 10, 12 << 10), (64, 63 << 10, 80 << 10), (0, 0, MARGIN)] {
                    let (stack, _) = measured(|| {
                        std::hint::black_box(use_stack(kib));
                    });
                    assert!((at_least..=at_most).contains(&stack), "{kib} KiB: measured {stack}");
                }
                // A scope in which another begins counts the frames live at the fork, not
                // what ran deeper before it (the runtime's first-use work).
                let (stack, _) = measured(|| {
                    std::hint::black_box(use_stack(48));
                    nested_scope_at_depth(4);
                });
                assert!(((4 << 10)..(12 << 10)).contains(&stack), "nested: measured {stack}");
                // The most live at once, not the sum: 1 MiB twice, one after the other.
                let (_, heap) = measured(|| {
                    for _ in 0..2 {
                        // SAFETY: a plain allocation, freed at once.
                        unsafe {
                            let p = libc::malloc(1 << 20);
                            allocated(p, KERNEL);
                            freeing(p, KERNEL);
                            libc::free(p);
                        }
                    }
                });
                assert!(((1 << 20)..(1 << 20) + 8192).contains(&heap), "{heap}");
                // The runtime's own allocations are not the kernel's.
                runtime_object_at(*RUNTIME);
                let (_, heap) = measured(|| {
                    // SAFETY: as above.
                    unsafe {
                        let p = libc::malloc(1 << 20);
                        allocated(p, *RUNTIME);
                        libc::free(p);
                    }
                });
                assert_eq!(heap, 0);
                // Outside a launch nothing counts.
                // SAFETY: as above.
                unsafe {
                    let p = libc::malloc(1 << 20);
                    allocated(p, KERNEL);
                    assert_eq!(HEAP_LIVE.load(Ordering::Relaxed), 0);
                    libc::free(p);
                }
                ARENA.store(0, Ordering::Release);
            })
            .unwrap()
            .join()
            .unwrap();
    }
}
