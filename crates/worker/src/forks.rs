//! Whether this process is a copy that code in a target region forked (and that returned from
//! the kernel): such a copy must not go on as the process that serves the device. Knowing it
//! costs no system call on the way of every launch: a fork handler marks every child, and only
//! a marked process asks for its pid.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Once;

/// Set in every process forked from this one once [`watch`] ran (`pthread_atfork`).
static FORKED: AtomicBool = AtomicBool::new(false);

extern "C" fn note_fork() {
    FORKED.store(true, Ordering::Relaxed);
}

/// Marks every process forked from now on (once per process; later calls do nothing).
pub fn watch() {
    static WATCHING: Once = Once::new();
    WATCHING.call_once(|| {
        // SAFETY: pthread_atfork takes plain `extern "C" fn()`s that live as long as the process.
        unsafe { libc::pthread_atfork(None, None, Some(note_fork)) };
    });
}

/// Whether this process was forked from another since [`watch`] ran there.
pub fn forked() -> bool {
    FORKED.load(Ordering::Relaxed)
}

/// Whether this process is not `server` but a fork of it (since [`watch`]).
pub fn is_copy_of(server: u32) -> bool {
    // SAFETY: getpid has no preconditions (asked only after a fork).
    forked() && unsafe { libc::getpid() } as u32 != server
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_forked_child_knows_it_is_a_copy_and_the_parent_does_not() {
        watch();
        let me = std::process::id();
        assert!(!is_copy_of(me));
        // SAFETY: the child only reads an atomic, asks for its pid and _exits.
        let child = unsafe { libc::fork() };
        assert!(child >= 0, "fork failed");
        if child == 0 {
            let code = if is_copy_of(me) { 0 } else { 1 };
            // SAFETY: ends the child at once, running nothing of the parent's.
            unsafe { libc::_exit(code) };
        }
        let mut status = 0;
        // SAFETY: waits for our own child.
        assert_eq!(unsafe { libc::waitpid(child, &mut status, 0) }, child);
        assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0, "the child did not see the fork");
        assert!(!forked(), "the parent is not marked");
    }
}
