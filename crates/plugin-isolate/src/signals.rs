//! Signals a kernel sends itself in the worker (`raise(SIGSEGV)`, `kill(getpid(), SIGBUS)`):
//! they end the worker as they end the host device's process, so that the construct fails
//! with a lost device. A fault handler that only resets the action and returns (Rust's
//! stack-overflow handler, the checker's) would swallow them: a sent signal, unlike a fault,
//! does not come back when the handler returns.
//!
//! A kernel that overflows its thread's stack faults in the guard page below it. Each thread
//! that runs kernels records its stack ([`kernel_thread_ready`]) and gets an alternate
//! signal stack, so that the handlers can run, tell such a fault from any other, and leave
//! the stack's size in the arena's header ([`crate::track::STACK_OVERFLOW`]) for the
//! program to say what happened.

use std::cell::Cell;
use std::sync::atomic::{AtomicUsize, Ordering};

/// The signals a kernel's memory fault raises.
const FAULTS: [i32; 2] = [libc::SIGSEGV, libc::SIGBUS];

/// The handlers installed before [`end_on_sent_signals`] (as `sa_sigaction` values), by
/// index in [`FAULTS`], and their `sa_flags`.
static PREVIOUS: [AtomicUsize; 2] = [AtomicUsize::new(0), AtomicUsize::new(0)];
static PREVIOUS_FLAGS: [AtomicUsize; 2] = [AtomicUsize::new(0), AtomicUsize::new(0)];

/// Whether a signal was sent by a process (`kill`, `raise`, `sigqueue`) rather than raised
/// by the processor for a fault: `si_code` ≤ 0 (`SI_USER`, `SI_QUEUE`, `SI_TKILL`, …).
///
/// # Safety
/// `info` must be the `siginfo_t` the kernel passed to an `SA_SIGINFO` handler.
pub unsafe fn sent_by_a_process(info: *const libc::siginfo_t) -> bool {
    // SAFETY: the caller's promise.
    unsafe { (*info).si_code <= 0 }
}

/// Ends the process with `sig`, as its default action does: called from a handler, the
/// signal stays blocked until the handler returns and is delivered then.
pub fn die_of(sig: i32) {
    // SAFETY: signal() with SIG_DFL and raise() are async-signal-safe.
    unsafe {
        libc::signal(sig, libc::SIG_DFL);
        libc::raise(sig);
    }
}

/// Installs, in the worker, a handler for `SIGSEGV` and `SIGBUS` in front of the current
/// one: a sent signal ends the worker; a fault goes to the handler that was there.
pub fn end_on_sent_signals() -> std::io::Result<()> {
    for (i, &sig) in FAULTS.iter().enumerate() {
        // SAFETY: sigaction is plain data (all-zero is valid); reads the current action and
        // installs `on_signal`, an `extern "C"` SA_SIGINFO handler that is async-signal-safe.
        unsafe {
            let mut old: libc::sigaction = std::mem::zeroed();
            if libc::sigaction(sig, std::ptr::null(), &mut old) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            PREVIOUS[i].store(old.sa_sigaction, Ordering::Release);
            PREVIOUS_FLAGS[i].store(old.sa_flags as usize, Ordering::Release);
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = on_signal as *const () as usize;
            // On the alternate stack: a fault of a thread whose stack is used up.
            sa.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK;
            libc::sigemptyset(&mut sa.sa_mask);
            if libc::sigaction(sig, &sa, std::ptr::null_mut()) != 0 {
                return Err(std::io::Error::last_os_error());
            }
        }
    }
    Ok(())
}

extern "C" fn on_signal(sig: i32, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    // Every way on ends the worker (the handler before this one, Rust's, ends it too): its
    // globals go to the record of the launch that failed first.
    crate::record_globals::save(sig as u64);
    // SAFETY: the kernel passes a valid siginfo_t to an SA_SIGINFO handler.
    if unsafe { sent_by_a_process(info) } {
        return die_of(sig);
    }
    // SAFETY: as above.
    if record_stack_overflow(unsafe { (*info).si_addr() } as usize) {
        // The fault comes back when the handler returns, and ends the worker.
        // SAFETY: async-signal-safe.
        unsafe { libc::signal(sig, libc::SIG_DFL) };
        return;
    }
    let i = FAULTS.iter().position(|&s| s == sig).unwrap_or(0);
    let previous = PREVIOUS[i].load(Ordering::Acquire);
    if previous == libc::SIG_DFL || previous == libc::SIG_IGN {
        // The fault comes back when the handler returns, and ends the worker.
        // SAFETY: async-signal-safe.
        unsafe { libc::signal(sig, libc::SIG_DFL) };
        return;
    }
    if PREVIOUS_FLAGS[i].load(Ordering::Acquire) & libc::SA_SIGINFO as usize != 0 {
        // SAFETY: `previous` was installed with SA_SIGINFO: it takes these three arguments.
        let handler = unsafe {
            std::mem::transmute::<usize, extern "C" fn(i32, *mut libc::siginfo_t, *mut libc::c_void)>(previous)
        };
        handler(sig, info, ctx);
    } else {
        // SAFETY: `previous` was installed without SA_SIGINFO: it takes the signal number.
        let handler = unsafe { std::mem::transmute::<usize, extern "C" fn(i32)>(previous) };
        handler(sig);
    }
}

thread_local! {
    /// This thread's stack: (lowest usable address, size asked for); (0, 0) until it ran a
    /// kernel.
    /// Plain data with a constant initializer: read from a signal handler without any
    /// allocation or lock.
    static KERNEL_STACK: Cell<(usize, usize)> = const { Cell::new((0, 0)) };
}

/// An alternate signal stack this module gave its thread: turned off and unmapped when the
/// thread ends (a pool's threads come and go).
struct AltStack(*mut libc::c_void);

impl Drop for AltStack {
    fn drop(&mut self) {
        let off = libc::stack_t { ss_sp: std::ptr::null_mut(), ss_flags: libc::SS_DISABLE, ss_size: 0 };
        // SAFETY: this thread's alternate stack is turned off (the thread is ending, not
        // running a handler on it), then its mapping, made for it alone, goes.
        unsafe {
            if libc::sigaltstack(&off, std::ptr::null_mut()) == 0 {
                libc::munmap(self.0, ALT_STACK);
            }
        }
    }
}

thread_local! {
    static ALT_STACK_OF_THREAD: std::cell::RefCell<Option<AltStack>> = const { std::cell::RefCell::new(None) };
}

/// The arena's base, where stack overflows are recorded; 0 when there is none.
static ARENA_HEADER: AtomicUsize = AtomicUsize::new(0);

/// How far below a stack a fault still counts as its overflow: the guard page, and a frame
/// larger than it that stepped over it (Linux keeps such a gap below the main stack too).
const BELOW_STACK: usize = 1 << 20;

/// Size of the alternate signal stack each kernel thread gets.
const ALT_STACK: usize = 64 << 10;

/// From now on a kernel's stack overflow is recorded in the header of the arena at `base`.
///
/// # Safety
/// `base` must be the arena's address in this process, its header page mapped read-write
/// for the rest of the process's life.
pub unsafe fn record_overflows_in(base: usize) {
    ARENA_HEADER.store(base, Ordering::Release);
}

/// Called on a thread before it runs a kernel: records its stack and gives it an alternate
/// signal stack when it has none (once per thread).
pub fn kernel_thread_ready() {
    if KERNEL_STACK.get().1 != 0 {
        return;
    }
    // SAFETY: pthread_getattr_np fills the attribute object of the calling thread, which is
    // destroyed after its stack was read; sigaltstack reads the current alternate stack and
    // installs a new one only when there is none, on a mapping made for it and unmapped only
    // after it was turned off, when the thread ends (`AltStack`).
    unsafe {
        let mut attr: libc::pthread_attr_t = std::mem::zeroed();
        if libc::pthread_getattr_np(libc::pthread_self(), &mut attr) == 0 {
            let (mut addr, mut size) = (std::ptr::null_mut(), 0usize);
            if libc::pthread_attr_getstack(&attr, &mut addr, &mut size) == 0 && size > 0 {
                // The size said is the one asked for (the system's may differ by a page).
                KERNEL_STACK.set((addr as usize, omp_worker::serve::kernel_stack_size()));
            }
            libc::pthread_attr_destroy(&mut attr);
        }
        let mut old: libc::stack_t = std::mem::zeroed();
        if libc::sigaltstack(std::ptr::null(), &mut old) == 0 && old.ss_flags & libc::SS_DISABLE != 0 {
            let prot = libc::PROT_READ | libc::PROT_WRITE;
            let flags = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS;
            let mem = libc::mmap(std::ptr::null_mut(), ALT_STACK, prot, flags, -1, 0);
            if mem != libc::MAP_FAILED {
                let alt = libc::stack_t { ss_sp: mem, ss_flags: 0, ss_size: ALT_STACK };
                if libc::sigaltstack(&alt, std::ptr::null_mut()) == 0 {
                    ALT_STACK_OF_THREAD.with(|a| *a.borrow_mut() = Some(AltStack(mem)));
                } else {
                    libc::munmap(mem, ALT_STACK);
                }
            }
        }
    }
}

/// Runs one launch of the worker ([`omp_worker::serve::AroundLaunch`]) on a thread ready
/// for a stack overflow.
pub fn around_launch(run: &mut dyn FnMut()) {
    kernel_thread_ready();
    run();
}

/// From a fault handler: whether a fault at `addr` is the running kernel's stack overflow
/// (just below the stack of this thread); if so, records the stack's size in the arena's
/// header for the program. Async-signal-safe.
pub fn record_stack_overflow(addr: usize) -> bool {
    let (low, size) = KERNEL_STACK.get();
    if size == 0 || addr >= low || addr < low.saturating_sub(BELOW_STACK) {
        return false;
    }
    let base = ARENA_HEADER.load(Ordering::Acquire);
    if base != 0 {
        // SAFETY: `record_overflows_in`'s promise: the header page stays mapped read-write.
        unsafe { crate::track::header_word(base, crate::track::STACK_OVERFLOW).store(size as u64, Ordering::Release) };
    }
    true
}

/// The stack size of the kernel thread whose stack overflowed, as recorded in the header of
/// the arena at `base` (by the worker); `None` when no kernel's did.
///
/// # Safety
/// `base` must be a mapped arena (its header page readable).
pub unsafe fn stack_overflowed(base: usize) -> Option<usize> {
    // SAFETY: the caller's promise.
    let size = unsafe { crate::track::header_word(base, crate::track::STACK_OVERFLOW) }.load(Ordering::Acquire);
    (size != 0).then_some(size as usize)
}
