//! Waiting for the other side's next frame without falling asleep at once.
//!
//! A blocked reader is woken by the writer's system call, and on a virtual machine whose
//! CPU went idle meanwhile that wake-up costs tens of microseconds (the host must run the
//! halted virtual CPU again): an empty kernel's round trip was two of them. So each side,
//! before it blocks on the pipe, looks for a while whether the next frame is already there.
//! The while is bounded and adapts: it grows while frames come soon after the look gave up
//! (launches in a loop, which then never sleep), and shrinks while they come much later
//! (long kernels, an idle program), so that an idle program uses no CPU.
//!
//! A look keeps its CPU: it does not yield between its glances. On a machine whose cores all
//! run busy processes, a yield hands the CPU to one of them for a whole time slice
//! (milliseconds), where a thread that keeps looking catches the other side's frame as soon
//! as both run (an empty target with a busy loop on each core: 26-37 us, against 87-153 us
//! with yielding looks and 38-51 us for a bare pipe round trip between two processes).
//!
//! Keeping the CPU is wrong only when the other side needs this very CPU (one core for both,
//! or more busy threads than cores): then the frame comes right after the look gives up and
//! blocks. When that happens the next looks yield between glances, for a number of waits
//! that doubles each time it happens again (up to [`MOST_YIELDING`]) and halves each time a
//! look that kept its CPU saw the frame. A thread bound to one CPU always yields
//! ([`may_run_elsewhere`]), and so does every look of a process told so ([`always_yield`]).
//! A yield that took long gave the CPU to someone else's time slice: it ends that look, and
//! the next of those yielding looks are skipped (blocking at once) for a number of waits that
//! doubles each time it happens again, up to [`MOST_SKIPPED`].

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// Set in a worker's environment by a process that wants its looks to yield too
/// ([`always_yield`]).
pub const YIELD_ENV: &str = "OMP_WORKER_LOOKS_YIELD";

/// Whether looks may keep their CPU in this process at all.
static MAY_KEEP: AtomicBool = AtomicBool::new(true);

/// From now on every look in this process yields between glances, as a thread bound to one
/// CPU's does: for a process that takes turns with more busy processes than its machine has
/// CPUs (an MPI device rank, its worker and the program's rank on a small node), where a look
/// that keeps its CPU keeps it from the very process it waits for.
pub fn always_yield() {
    MAY_KEEP.store(false, Ordering::Relaxed);
}

/// The longest look, in microseconds (about two wake-ups of an idle virtual CPU).
const MOST_US: u32 = 100;
/// The shortest look: a wait that keeps missing still looks this long.
const LEAST_US: u32 = 4;

/// A yield that took longer than this gave the CPU to someone else's time slice.
const YIELD_LOST_US: u64 = 50;
/// The most waits skipped without looking after yields were lost.
const MOST_SKIPPED: u32 = 1 << 12;

/// A frame that came this soon after a look that kept its CPU gave up was most likely held
/// back by that look: the other side could run only once this one blocked.
const HELD_BACK_US: u64 = 15;
/// The most waits whose looks yield after frames were held back.
const MOST_YIELDING: u32 = 1 << 12;

/// How one look ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Look {
    /// The frame (or the end) is there.
    Ready,
    /// Nothing came within the budget.
    GaveUp,
    /// Not looked, or the look ended on a lost yield: the CPU is contended.
    Contended,
}

/// How long one side looks before it blocks, learnt from its past waits.
pub struct SpinWait {
    budget_us: AtomicU32,
    /// Waits left to block at once, without looking.
    skip: AtomicU32,
    /// How many waits the next lost yield skips.
    backoff: AtomicU32,
    /// Waits left whose looks yield between glances.
    yielding: AtomicU32,
    /// How many waits yield after the next frame held back.
    yield_backoff: AtomicU32,
    /// The last look that gave up kept its CPU.
    kept_cpu: AtomicBool,
}

impl Default for SpinWait {
    fn default() -> Self {
        SpinWait {
            budget_us: AtomicU32::new(MOST_US / 2),
            skip: AtomicU32::new(0),
            backoff: AtomicU32::new(1),
            yielding: AtomicU32::new(0),
            yield_backoff: AtomicU32::new(1),
            kept_cpu: AtomicBool::new(false),
        }
    }
}

impl SpinWait {
    /// Looks, without blocking, whether `fd` becomes readable (data, or its end) within the
    /// current budget. After [`Look::GaveUp`] the caller blocks and tells
    /// [`SpinWait::blocked`] how long that took.
    pub fn look(&self, fd: i32) -> Look {
        let yielding = take_one(&self.yielding) || !MAY_KEEP.load(Ordering::Relaxed) || !may_run_elsewhere();
        if yielding && take_one(&self.skip) {
            return Look::Contended;
        }
        let budget = Duration::from_micros(u64::from(self.budget_us.load(Ordering::Relaxed)));
        let start = Instant::now();
        let mut yielded = false;
        let mut glanced = false;
        loop {
            if readable_now(fd) {
                if yielded {
                    // Looking helped: the skips after a lost yield shrink again, slowly (a
                    // frame that was there at once says nothing of what yielding costs).
                    let backoff = self.backoff.load(Ordering::Relaxed);
                    self.backoff.store((backoff / 2).max(1), Ordering::Relaxed);
                } else if !yielding && glanced {
                    // Keeping the CPU did not hold the other side back this time (a frame
                    // there at the first glance says nothing of it).
                    let b = self.yield_backoff.load(Ordering::Relaxed);
                    self.yield_backoff.store((b / 2).max(1), Ordering::Relaxed);
                }
                return Look::Ready;
            }
            if start.elapsed() >= budget {
                self.kept_cpu.store(!yielding, Ordering::Relaxed);
                return Look::GaveUp;
            }
            glanced = true;
            if !yielding {
                std::hint::spin_loop();
                continue;
            }
            let before = Instant::now();
            // SAFETY: sched_yield has no preconditions; it lets a thread of the other side
            // (or anyone else) run on this CPU if one is waiting for it.
            unsafe { libc::sched_yield() };
            yielded = true;
            if before.elapsed() > Duration::from_micros(YIELD_LOST_US) {
                let backoff = self.backoff.load(Ordering::Relaxed);
                self.skip.store(backoff, Ordering::Relaxed);
                self.backoff.store((backoff * 2).min(MOST_SKIPPED), Ordering::Relaxed);
                return Look::Contended;
            }
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
        if self.kept_cpu.swap(false, Ordering::Relaxed) && waited <= Duration::from_micros(HELD_BACK_US) {
            // The other side ran only once this one blocked: the next looks yield.
            let b = self.yield_backoff.load(Ordering::Relaxed);
            self.yielding.store(b, Ordering::Relaxed);
            self.yield_backoff.store((b * 2).min(MOST_YIELDING), Ordering::Relaxed);
        }
    }

    /// Looks, and when the look gives up, blocks until `fd` is readable (or `block` returns),
    /// adapting the budget to how long that took. `block` does the blocking read itself.
    pub fn wait<T>(&self, fd: i32, block: impl FnOnce() -> T) -> T {
        if self.look(fd) != Look::GaveUp {
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

    /// A lost yield, as [`SpinWait::look`] meets it (tests).
    #[cfg(test)]
    fn lost_a_yield(&self) {
        let backoff = self.backoff.load(Ordering::Relaxed);
        self.skip.store(backoff, Ordering::Relaxed);
        self.backoff.store((backoff * 2).min(MOST_SKIPPED), Ordering::Relaxed);
    }
}

/// Whether this thread may run on more than one CPU (its affinity, read once per thread). A
/// thread bound to one CPU (`taskset -c 0`, an MPI rank bound to a core) never keeps its
/// CPU while it waits: where the other side was started from it (a worker inherits the
/// program's binding) it needs that very CPU.
pub fn may_run_elsewhere() -> bool {
    this_threads_cpus().is_none_or(|(count, _)| count > 1)
}

/// The one CPU this thread is bound to, if it is bound to exactly one (read once per thread).
pub fn only_cpu() -> Option<usize> {
    this_threads_cpus().and_then(|(count, first)| (count == 1).then_some(first))
}

/// The CPUs this thread may run on, as they are now; `None` where they cannot be read.
pub fn cpus_of_this_thread() -> Option<Vec<usize>> {
    // SAFETY: a zeroed cpu_set_t is a valid empty set; sched_getaffinity writes at most its
    // size into it; pid 0 is this thread.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    if unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) } != 0 {
        return None;
    }
    // SAFETY: `set` is a valid cpu_set_t, and each CPU_ISSET reads below its size.
    Some((0..libc::CPU_SETSIZE as usize).filter(|&c| unsafe { libc::CPU_ISSET(c, &set) }).collect())
}

/// How many CPUs this thread may run on, and the first of them (read once per thread);
/// `None` where the affinity cannot be read.
fn this_threads_cpus() -> Option<(usize, usize)> {
    thread_local! {
        static CPUS: Option<(usize, usize)> =
            cpus_of_this_thread().map(|cpus| (cpus.len(), cpus.first().copied().unwrap_or(0)));
    }
    CPUS.with(|c| *c)
}

/// Takes one from a count of waits left, if any is: whether one was.
fn take_one(left: &AtomicU32) -> bool {
    left.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1)).is_ok()
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
        let look = spin.look(r.as_raw_fd());
        let took = start.elapsed();
        if look == Look::Contended {
            return; // a loaded machine took the CPU during a yield: nothing to measure here
        }
        assert_eq!(look, Look::GaveUp, "nothing was written");
        assert!(took >= Duration::from_micros(u64::from(MOST_US / 2)), "it looked for its budget: {took:?}");
        assert!(took < Duration::from_secs(1), "and then gave up: {took:?}");
        w.write_all(b"x").unwrap();
        assert_eq!(spin.look(r.as_raw_fd()), Look::Ready, "a written byte is seen");
        drop(w);
        let mut b = [0u8; 1];
        use std::io::Read;
        (&r).read_exact(&mut b).unwrap();
        assert_eq!(spin.look(r.as_raw_fd()), Look::Ready, "the end of the stream is seen");
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
    fn after_a_lost_yield_yielding_looks_are_skipped_for_twice_as_many_waits_each_time() {
        let (r, mut w) = std::os::unix::net::UnixStream::pair().unwrap();
        w.write_all(b"x").unwrap();
        let spin = SpinWait::default();
        spin.lost_a_yield();
        if may_run_elsewhere() {
            assert_eq!(spin.look(r.as_raw_fd()), Look::Ready, "a look that keeps its CPU is never skipped");
        }
        spin.yielding.store(u32::MAX, Ordering::Relaxed);
        assert_eq!(spin.look(r.as_raw_fd()), Look::Contended, "one wait blocks at once");
        assert_eq!(spin.look(r.as_raw_fd()), Look::Ready, "then it looks again");
        spin.lost_a_yield();
        let skipped = std::iter::repeat_with(|| spin.look(r.as_raw_fd())).take_while(|l| *l == Look::Contended);
        assert_eq!(skipped.count(), 2, "a frame there at once does not shrink the skips: the next loss skips two");
        spin.lost_a_yield();
        let skipped = std::iter::repeat_with(|| spin.look(r.as_raw_fd())).take_while(|l| *l == Look::Contended);
        assert_eq!(skipped.count(), 4, "and the next four");
        for _ in 0..20 {
            spin.lost_a_yield();
        }
        let skipped = std::iter::repeat_with(|| spin.look(r.as_raw_fd())).take_while(|l| *l == Look::Contended);
        assert_eq!(skipped.count(), MOST_SKIPPED as usize, "never more than the bound");
    }

    #[test]
    fn a_frame_held_back_by_a_look_that_kept_its_cpu_makes_the_next_looks_yield() {
        let (r, mut w) = std::os::unix::net::UnixStream::pair().unwrap();
        let fd = r.as_raw_fd();
        let spin = SpinWait::default();
        if !may_run_elsewhere() {
            // Bound to one CPU: every look yields (what the next test checks).
            return;
        }
        let yielding = || spin.yielding.load(Ordering::Relaxed);
        assert_eq!(spin.look(fd), Look::GaveUp, "a look that keeps its CPU never meets a lost yield");
        spin.blocked(Duration::from_millis(5));
        assert_eq!(yielding(), 0, "a frame long after the look: the look held nobody back");
        assert_eq!(spin.look(fd), Look::GaveUp);
        spin.blocked(Duration::from_micros(5));
        assert_eq!(yielding(), 1, "a frame just after the look gave up: the next wait yields");
        assert_ne!(spin.look(fd), Look::Ready, "nothing was written");
        assert_eq!(yielding(), 0);
        spin.blocked(Duration::from_micros(5));
        assert_eq!(yielding(), 0, "that look yielded: it held nobody back");
        assert_eq!(spin.look(fd), Look::GaveUp);
        spin.blocked(Duration::from_micros(5));
        assert_eq!(yielding(), 2, "held back again: twice as many waits yield");
        while yielding() > 0 {
            spin.look(fd);
        }
        w.write_all(b"x").unwrap();
        assert_eq!(spin.look(fd), Look::Ready);
        assert_eq!(
            spin.yield_backoff.load(Ordering::Relaxed),
            4,
            "a frame there at the first glance says nothing of what keeping the CPU costs"
        );
    }

    #[test]
    fn a_thread_bound_to_one_cpu_always_yields() {
        std::thread::spawn(|| {
            // SAFETY: a zeroed cpu_set_t is a valid empty set.
            let mut one: libc::cpu_set_t = unsafe { std::mem::zeroed() };
            // SAFETY: CPU 0 is inside the set's size; CPU_SET writes only into `one`.
            unsafe { libc::CPU_SET(0, &mut one) };
            // SAFETY: `one` is a valid set of its size; pid 0 is this thread.
            assert_eq!(unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &one) }, 0);
            assert!(!may_run_elsewhere());
            let spin = SpinWait::default();
            let (r, _w) = std::os::unix::net::UnixStream::pair().unwrap();
            spin.look(r.as_raw_fd());
            spin.blocked(Duration::from_micros(5));
            assert_eq!(spin.yielding.load(Ordering::Relaxed), 0, "a yielding look held nobody back");
        })
        .join()
        .unwrap();
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
        assert!(spin.budget_us() <= MOST_US / 2, "a 200 ms wait never grows the look");
        writer.join().unwrap();
    }
}
