//! Signals a kernel sends itself in the worker (`raise(SIGSEGV)`, `kill(getpid(), SIGBUS)`):
//! they end the worker as they end the host device's process, so that the construct fails
//! with a lost device. A fault handler that only resets the action and returns (Rust's
//! stack-overflow handler, the checker's) would swallow them: a sent signal, unlike a fault,
//! does not come back when the handler returns.

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
            sa.sa_flags = libc::SA_SIGINFO | (old.sa_flags & libc::SA_ONSTACK);
            libc::sigemptyset(&mut sa.sa_mask);
            if libc::sigaction(sig, &sa, std::ptr::null_mut()) != 0 {
                return Err(std::io::Error::last_os_error());
            }
        }
    }
    Ok(())
}

extern "C" fn on_signal(sig: i32, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    // SAFETY: the kernel passes a valid siginfo_t to an SA_SIGINFO handler.
    if unsafe { sent_by_a_process(info) } {
        return die_of(sig);
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
