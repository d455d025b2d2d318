//! Waiting for the other side's next frame without falling asleep at once.
//!
//! A blocked reader is woken by the writer's system call, and on a virtual machine whose
//! CPU went idle meanwhile that wake-up costs tens of microseconds (the host must run the
//! halted virtual CPU again): an empty kernel's round trip was two of them. So each side,
//! before it blocks on the pipe, looks for a while whether the next frame is already there,
//! yielding the CPU between looks so that on a machine with fewer cores than busy threads
//! the side it waits for still runs. The while is bounded and adapts: it grows while frames
//! come soon after the look gave up (launches in a loop, which then never sleep), and
//! shrinks while they come much later (long kernels, an idle program), so that an idle
//! program uses no CPU.

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// The longest look, in microseconds (about two wake-ups of an idle virtual CPU).
const MOST_US: u32 = 100;
/// The shortest look: a wait that keeps missing still looks this long.
const LEAST_US: u32 = 4;

/// How long one side looks before it blocks, learnt from its past waits.
pub struct SpinWait {
    budget_us: AtomicU32,
}

impl Default for SpinWait {
    fn default() -> Self {
        SpinWait { budget_us: AtomicU32::new(MOST_US / 2) }
    }
}

impl SpinWait {
    /// Whether `fd` becomes readable (data, or its end) within the current budget, looking
    /// without blocking. When it does not, the caller blocks, and tells [`SpinWait::blocked`]
    /// how long that took.
    pub fn look(&self, fd: i32) -> bool {
        let budget = Duration::from_micros(u64::from(self.budget_us.load(Ordering::Relaxed)));
        let start = Instant::now();
        loop {
            if readable_now(fd) {
                return true;
            }
            if start.elapsed() >= budget {
                return false;
            }
            // SAFETY: sched_yield has no preconditions; it lets a thread of the other side
            // (or anyone else) run on this CPU if one is waiting for it.
            unsafe { libc::sched_yield() };
        }
    }

    /// After a look that gave up: the frame came `waited` after the caller blocked. A frame
    /// that came soon after would have been caught by a longer look; one that came much
    /// later (a long kernel, an idle program) means looking is wasted here.
    pub fn blocked(&self, waited: Duration) {
        let b = self.budget_us.load(Ordering::Relaxed);
        let next = if waited <= Duration::from_micros(u64::from(MOST_US)) {
            (b * 2).min(MOST_US)
        } else {
            (b / 2).max(LEAST_US)
        };
        self.budget_us.store(next, Ordering::Relaxed);
    }

    /// Looks, and when the look gives up, blocks until `fd` is readable (or `block` returns),
    /// adapting the budget to how long that took. `block` does the blocking read itself.
    pub fn wait<T>(&self, fd: i32, block: impl FnOnce() -> T) -> T {
        if self.look(fd) {
            return block();
        }
        let start = Instant::now();
        let r = block();
        self.blocked(start.elapsed());
        r
    }

    /// The current budget, in microseconds (tests).
    #[cfg(test)]
    fn budget_us(&self) -> u32 {
        self.budget_us.load(Ordering::Relaxed)
    }
}

/// Whether `fd` has data or its end now (no waiting).
fn readable_now(fd: i32) -> bool {
    let mut p = libc::pollfd { fd, events: libc::POLLIN, revents: 0 };
    // SAFETY: `p` is one valid pollfd for the call; a timeout of 0 never blocks.
    unsafe { libc::poll(&mut p, 1, 0) > 0 }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::fd::AsRawFd;

    #[test]
    fn a_look_sees_what_is_there_and_gives_up_within_its_budget() {
        let (r, mut w) = std::os::unix::net::UnixStream::pair().unwrap();
        let spin = SpinWait::default();
        let start = Instant::now();
        assert!(!spin.look(r.as_raw_fd()), "nothing was written");
        let took = start.elapsed();
        assert!(took >= Duration::from_micros(u64::from(MOST_US / 2)), "it looked for its budget: {took:?}");
        assert!(took < Duration::from_secs(1), "and then gave up: {took:?}");
        w.write_all(b"x").unwrap();
        assert!(spin.look(r.as_raw_fd()), "a written byte is seen");
        drop(w);
        let mut b = [0u8; 1];
        use std::io::Read;
        (&r).read_exact(&mut b).unwrap();
        assert!(spin.look(r.as_raw_fd()), "the end of the stream is seen");
    }

    #[test]
    fn the_budget_grows_after_near_misses_and_shrinks_after_long_waits() {
        let spin = SpinWait::default();
        spin.blocked(Duration::from_micros(10));
        assert_eq!(spin.budget_us(), MOST_US, "a frame just after the look: look longer");
        spin.blocked(Duration::from_micros(10));
        assert_eq!(spin.budget_us(), MOST_US, "never past the bound");
        for _ in 0..20 {
            spin.blocked(Duration::from_millis(5));
        }
        assert_eq!(spin.budget_us(), LEAST_US, "long waits shrink it to the least, never to nothing");
    }

    #[test]
    fn wait_runs_the_blocking_read_either_way() {
        let (r, mut w) = std::os::unix::net::UnixStream::pair().unwrap();
        let spin = SpinWait::default();
        let writer = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(200));
            w.write_all(b"y").unwrap();
        });
        let got = spin.wait(r.as_raw_fd(), || {
            let mut b = [0u8; 1];
            use std::io::Read;
            (&r).read_exact(&mut b).map(|()| b[0])
        });
        assert_eq!(got.unwrap(), b'y');
        assert!(spin.budget_us() < MOST_US / 2, "a 200 ms wait shrank the look");
        writer.join().unwrap();
    }
}
