//! Whether a loop that polls MPI for what it waits for keeps its CPU between polls.
//!
//! Such a loop yields the CPU between polls (`sched_yield`) so that, on a machine with fewer
//! cores than busy threads, the side it waits for still runs. But a yield is a system call
//! each time, and on a machine whose cores all run busy processes it hands the CPU to one of
//! them for a whole time slice. So for its first [`KEEP_CPU`] a wait keeps the CPU (the
//! reply of an empty target in process comes within 3-8 µs here) and yields only after.
//!
//! Keeping the CPU is wrong only when the other side needs this very CPU (both ranks bound to
//! one core, or more busy ranks than cores): then what the loop waits for comes right after
//! its first yield, or that first yield gives the CPU away for long (to the other side's own
//! wait, or to a busy process). When that happens the next waits yield from their start, for
//! a number of waits that doubles each time it happens again (up to [`MOST_OFF`]) and halves
//! each time a wait that kept its CPU saw its reply come while it did.
//!
//! A thread bound to one CPU keeps it only where no rank it waits for may run on that CPU
//! ([`set_peer_cpus`], from the ranks' hellos): Open MPI binds each rank to a core of its own
//! when a job has no more ranks than the machine has cores, and then the other side never
//! needs this one. A worker, which inherits its rank's binding, does need it: a rank that
//! serves through one sets no peers, and its bound threads never keep their CPU.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// How long a wait keeps its CPU between polls before it yields.
pub const KEEP_CPU: Duration = Duration::from_micros(30);

/// The most waits that yield from their start after one that held the other side back.
const MOST_OFF: u32 = 1 << 12;

/// A set of CPUs (the first 128; a set with a CPU past them is taken as every CPU).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cpus(pub [u64; 2]);

impl Cpus {
    pub const ALL: Cpus = Cpus([u64::MAX; 2]);
    pub const NONE: Cpus = Cpus([0; 2]);

    /// The CPUs this thread may run on (every CPU where that cannot be read).
    pub fn of_this_thread() -> Cpus {
        let Some(list) = omp_worker::spin::cpus_of_this_thread() else { return Cpus::ALL };
        let mut cpus = Cpus::NONE;
        for c in list {
            if c >= 128 {
                return Cpus::ALL;
            }
            cpus.0[c / 64] |= 1 << (c % 64);
        }
        cpus
    }

    pub fn contains(&self, cpu: usize) -> bool {
        cpu >= 128 || self.0[cpu / 64] & (1 << (cpu % 64)) != 0
    }

    pub fn union(self, other: Cpus) -> Cpus {
        Cpus([self.0[0] | other.0[0], self.0[1] | other.0[1]])
    }
}

/// The CPUs of this machine that the ranks this process waits for may run on (every CPU
/// until [`set_peer_cpus`]).
static PEER_CPUS: [AtomicU64; 2] = [AtomicU64::new(u64::MAX), AtomicU64::new(u64::MAX)];

/// Says which CPUs of this machine the ranks this process waits for may run on (from their
/// hellos; ranks on other machines take none).
pub fn set_peer_cpus(cpus: Cpus) {
    for (slot, word) in PEER_CPUS.iter().zip(cpus.0) {
        slot.store(word, Ordering::Relaxed);
    }
}

fn peer_cpus() -> Cpus {
    Cpus([PEER_CPUS[0].load(Ordering::Relaxed), PEER_CPUS[1].load(Ordering::Relaxed)])
}

/// Whether a thread may keep its CPU while it waits: one that may run on several CPUs may;
/// one bound to one CPU only when no rank it waits for may run there.
fn may_keep(may_run_elsewhere: bool, only_cpu: Option<usize>, peers: Cpus) -> bool {
    may_run_elsewhere || only_cpu.is_some_and(|c| !peers.contains(c))
}

/// What the waits of one loop (or of several threads taking turns) learnt.
pub struct KeepCpu {
    /// Waits left that yield from their start.
    off: AtomicU32,
    /// How many waits yield from their start after the next one that held the other side back.
    backoff: AtomicU32,
}

impl Default for KeepCpu {
    fn default() -> Self {
        KeepCpu { off: AtomicU32::new(0), backoff: AtomicU32::new(1) }
    }
}

/// One wait: since when, how long it keeps its CPU, and its pauses so far.
#[derive(Clone, Copy)]
pub struct Wait {
    since: Instant,
    window: Duration,
    pauses: u32,
    yields: u32,
}

impl KeepCpu {
    /// A wait that began at `since`.
    pub fn begin(&self, since: Instant) -> Wait {
        let off = self.off.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1)).is_ok()
            || !may_keep(omp_worker::spin::may_run_elsewhere(), omp_worker::spin::only_cpu(), peer_cpus());
        Wait { since, window: if off { Duration::ZERO } else { KEEP_CPU }, pauses: 0, yields: 0 }
    }

    /// Between two polls of `wait`: keeps the CPU within its window, then yields it; `false`
    /// when a yield gave the CPU to another process's time slice
    /// ([`crate::proto::yield_cheaply`]).
    pub fn pause(&self, wait: &mut Wait) -> bool {
        wait.pauses = wait.pauses.saturating_add(1);
        if wait.since.elapsed() < wait.window {
            std::hint::spin_loop();
            return true;
        }
        wait.yields = wait.yields.saturating_add(1);
        crate::proto::yield_cheaply()
    }

    /// `wait` ended without what it waited for: its first yield gave the CPU away for long
    /// (the other side, or a busy process, ran meanwhile); the waits after it yield from
    /// their start as after [`KeepCpu::came`] right after a first yield.
    pub fn gave_up(&self, wait: &Wait) {
        if wait.yields == 1 && !wait.window.is_zero() {
            self.held_back();
        }
    }

    fn held_back(&self) {
        let b = self.backoff.load(Ordering::Relaxed);
        self.off.store(b, Ordering::Relaxed);
        self.backoff.store((b * 2).min(MOST_OFF), Ordering::Relaxed);
    }

    /// What `wait` waited for came (seen by the poll after its last pause).
    pub fn came(&self, wait: &Wait) {
        if wait.yields == 1 && !wait.window.is_zero() {
            // Right after the first yield: the other side ran only once this one let it.
            self.held_back();
        } else if wait.yields == 0 && wait.pauses > 0 {
            // Keeping the CPU did not hold the other side back this time (what was there at
            // the first poll says nothing of it).
            let b = self.backoff.load(Ordering::Relaxed);
            self.backoff.store((b / 2).max(1), Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wait_through(keep: &KeepCpu, yields: u32) -> Wait {
        let mut w = keep.begin(Instant::now());
        while w.yields < yields {
            keep.pause(&mut w);
        }
        w
    }

    /// Whether this test thread may keep its CPU at all (not when the tests run bound to one
    /// CPU: what `a_thread_bound_to_one_cpu_never_keeps_it_when_the_peers_are_unknown` checks).
    fn this_thread_may_keep() -> bool {
        omp_worker::spin::may_run_elsewhere()
    }

    /// Binds this thread to CPU 0.
    fn bind_to_cpu_0() {
        // SAFETY: a zeroed cpu_set_t is a valid empty set.
        let mut one: libc::cpu_set_t = unsafe { std::mem::zeroed() };
        // SAFETY: CPU 0 is inside the set's size; CPU_SET writes only into `one`.
        unsafe { libc::CPU_SET(0, &mut one) };
        // SAFETY: `one` is a valid set of its size; pid 0 is this thread.
        assert_eq!(unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &one) }, 0);
    }

    #[test]
    fn a_bound_thread_keeps_its_cpu_only_where_no_rank_it_waits_for_may_run() {
        let on_cpu_1 = Cpus([0b10, 0]);
        assert!(may_keep(false, Some(0), on_cpu_1), "the other side has a core of its own");
        assert!(!may_keep(false, Some(1), on_cpu_1), "the other side needs this very core");
        assert!(!may_keep(false, Some(0), Cpus::ALL), "peers unknown (a worker, or no hellos)");
        assert!(may_keep(true, None, Cpus::ALL), "a thread that may run elsewhere keeps as before");
        assert!(Cpus::NONE.union(on_cpu_1).contains(1) && !on_cpu_1.contains(0));
        assert!(on_cpu_1.contains(300), "CPUs past the set's 128 are taken as in it");
        let bound = std::thread::spawn(|| {
            bind_to_cpu_0();
            (Cpus::of_this_thread(), omp_worker::spin::only_cpu())
        });
        assert_eq!(bound.join().unwrap(), (Cpus([1, 0]), Some(0)));
    }

    #[test]
    fn a_thread_bound_to_one_cpu_never_keeps_it_when_the_peers_are_unknown() {
        std::thread::spawn(|| {
            // (No test sets the peers' CPUs: they are every CPU.)
            bind_to_cpu_0();
            assert_eq!(KeepCpu::default().begin(Instant::now()).window, Duration::ZERO);
        })
        .join()
        .unwrap();
    }

    #[test]
    fn a_reply_right_after_the_first_yield_makes_twice_as_many_waits_yield_each_time() {
        if !this_thread_may_keep() {
            return;
        }
        let keep = KeepCpu::default();
        let w = wait_through(&keep, 0);
        assert_eq!(w.window, KEEP_CPU, "a wait keeps its CPU at first");
        keep.came(&wait_through(&keep, 1));
        assert_eq!(keep.begin(Instant::now()).window, Duration::ZERO, "the next wait yields from its start");
        assert_eq!(keep.begin(Instant::now()).window, KEEP_CPU, "one wait only");
        keep.came(&wait_through(&keep, 1));
        let windows: Vec<Duration> = (0..3).map(|_| keep.begin(Instant::now()).window).collect();
        assert_eq!(windows, [Duration::ZERO, Duration::ZERO, KEEP_CPU], "then two");
        keep.came(&wait_through(&keep, 3));
        assert_eq!(keep.begin(Instant::now()).window, KEEP_CPU, "a reply after several yields says nothing");
    }

    #[test]
    fn a_first_yield_that_gave_the_cpu_away_makes_the_next_wait_yield() {
        if !this_thread_may_keep() {
            return;
        }
        let keep = KeepCpu::default();
        let w = Wait { since: Instant::now(), window: KEEP_CPU, pauses: 3, yields: 2 };
        keep.gave_up(&w);
        assert_eq!(keep.begin(Instant::now()).window, KEEP_CPU, "a later yield says nothing");
        keep.gave_up(&Wait { yields: 1, ..w });
        assert_eq!(keep.begin(Instant::now()).window, Duration::ZERO);
    }

    #[test]
    fn a_reply_caught_while_keeping_the_cpu_halves_the_count() {
        if !this_thread_may_keep() {
            return;
        }
        let keep = KeepCpu::default();
        for _ in 0..3 {
            keep.came(&wait_through(&keep, 1));
            while keep.begin(Instant::now()).window.is_zero() {}
        }
        assert_eq!(keep.backoff.load(Ordering::Relaxed), 8);
        let first = Wait { since: Instant::now(), window: KEEP_CPU, pauses: 0, yields: 0 };
        keep.came(&first);
        assert_eq!(keep.backoff.load(Ordering::Relaxed), 8, "there at the first poll: no change");
        keep.came(&Wait { pauses: 1, ..first });
        assert_eq!(keep.backoff.load(Ordering::Relaxed), 4, "caught after a pause that kept the CPU: halved");
    }
}
