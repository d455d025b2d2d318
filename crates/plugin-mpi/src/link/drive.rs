//! Who calls MPI on the program's side, and how a caller waits for its reply.
//!
//! MPI is initialised `MPI_THREAD_SERIALIZED`: any thread may call it, one at a time. The
//! link's state ([`Progress`]) sits behind a mutex, and a caller that finds it free moves
//! everything itself: it sends what other callers queued (in order), then its own call,
//! and polls MPI (keeping the CPU for a while, then yielding it between polls: `keep.rs`)
//! until its reply is in, delivering the replies of others on the way ("the caller drives
//! MPI"). Its reply then reaches the very thread that waits for it, with no hand-off: on a
//! virtual machine, waking a thread that sleeps costs tens of microseconds, more than the
//! whole MPI round trip.
//!
//! A caller polls for at most [`SPIN`], and stops at once when a yield between polls gave
//! the CPU to another process's time slice ([`crate::proto::yield_cheaply`]: on a loaded
//! machine a sleeping thread is woken sooner than a yielding one runs again). A reply still
//! due then (a long kernel, a large copy) is left to the progress thread (`omp-mpi`), which
//! the caller rings ([`Bell`]) before it sleeps on its slot. The progress thread works only
//! while some caller sleeps: it polls while a transfer is in flight and otherwise backs off
//! ([`Backoff`](crate::proto::Backoff)), so a program waiting for a long kernel, or idle,
//! uses almost no CPU.

use super::Progress;
use crate::keep::KeepCpu;
use crate::proto::SPIN;
use omp_sync::{Mutex, Signal};
use omp_worker::{CallError, Response};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// Where a call's result goes: its caller polls it while it drives MPI, then sleeps on it.
#[derive(Default)]
pub(super) struct Slot {
    state: Mutex<SlotState>,
    ready: Signal,
    /// Set with the result: a caller that polls looks here without taking the lock.
    done: AtomicBool,
}

#[derive(Default)]
struct SlotState {
    result: Option<Result<Response, CallError>>,
    /// The caller sleeps on `ready` (only then is it notified).
    sleeping: bool,
}

impl Slot {
    pub(super) fn complete(&self, r: Result<Response, CallError>) {
        let mut s = self.state.lock();
        s.result = Some(r);
        self.done.store(true, Ordering::Release);
        if s.sleeping {
            self.ready.notify_one();
        }
    }

    /// The result, if it is in.
    fn take(&self) -> Option<Result<Response, CallError>> {
        if !self.done.load(Ordering::Acquire) {
            return None;
        }
        self.state.lock().result.take()
    }

    fn sleep(&self) -> Result<Response, CallError> {
        let mut s = self.state.lock();
        loop {
            if let Some(r) = s.result.take() {
                return r;
            }
            s.sleeping = true;
            s = self.ready.wait(s);
            s.sleeping = false;
        }
    }
}

/// Wakes the progress thread: a latch, so a ring before it waits is not lost.
#[derive(Default)]
struct Bell {
    rung: Mutex<bool>,
    signal: Signal,
}

impl Bell {
    fn ring(&self) {
        *self.rung.lock() = true;
        self.signal.notify_one();
    }

    /// Waits for a ring, or for at most `limit`.
    fn wait(&self, limit: Option<Duration>) {
        let mut rung = self.rung.lock();
        if !*rung {
            rung = match limit {
                Some(d) => self.signal.wait_timeout(rung, d),
                None => self.signal.wait(rung),
            };
        }
        *rung = false;
    }
}

/// What the callers and the progress thread share.
pub(super) struct Shared {
    /// MPI and every call in flight; whoever holds it may call MPI.
    pub(super) progress: Mutex<Progress>,
    /// Callers asleep on their slot: the progress thread works while there are any.
    sleepers: AtomicUsize,
    bell: Bell,
    /// Whether callers keep their CPU while they poll.
    keep: KeepCpu,
    /// MPI was finalised: the progress thread ends.
    ended: AtomicBool,
}

/// How the progress thread waits before it looks again.
pub(super) enum Next {
    /// Yield the CPU, then look (a transfer moves only while MPI is called).
    Poll,
    /// Sleep this long unless rung.
    Sleep(Duration),
}

impl Shared {
    pub(super) fn new(progress: Progress) -> Shared {
        Shared {
            progress: Mutex::new(progress),
            sleepers: AtomicUsize::new(0),
            bell: Bell::default(),
            keep: KeepCpu::default(),
            ended: AtomicBool::new(false),
        }
    }

    /// Sends what is queued and makes progress, if MPI is free now; `false` when another
    /// thread holds it.
    fn try_step(&self) -> bool {
        let Some(mut p) = self.progress.try_lock() else { return false };
        self.step(&mut p);
        true
    }

    /// With MPI held: sends every queued call, in order, then completes what finished.
    pub(super) fn step(&self, p: &mut Progress) {
        p.send_queued();
        if p.ended {
            self.ended.store(true, Ordering::Release);
        } else {
            p.progress();
        }
    }

    /// Waits for `slot`'s result: drives MPI while it can, for at most [`SPIN`], then
    /// leaves the rest to the progress thread and sleeps.
    pub(super) fn wait(&self, slot: &Slot) -> Result<Response, CallError> {
        let start = Instant::now();
        let mut wait = self.keep.begin(start);
        loop {
            if let Some(r) = slot.take() {
                self.keep.came(&wait);
                return r;
            }
            if self.try_step() {
                if let Some(r) = slot.take() {
                    self.keep.came(&wait);
                    return r;
                }
            }
            if start.elapsed() >= SPIN {
                break;
            }
            if !self.keep.pause(&mut wait) {
                self.keep.gave_up(&wait);
                break;
            }
        }
        self.sleepers.fetch_add(1, Ordering::SeqCst);
        self.bell.ring();
        let r = slot.sleep();
        self.sleepers.fetch_sub(1, Ordering::SeqCst);
        r
    }

    /// Wakes the progress thread to end (MPI was finalised).
    pub(super) fn end(&self) {
        self.ended.store(true, Ordering::Release);
        self.bell.ring();
    }

    /// The progress thread: moves the calls of callers that sleep, until MPI is finalised.
    pub(super) fn run(&self) {
        crate::slice::shorten_this_thread();
        loop {
            if self.ended.load(Ordering::Acquire) {
                return;
            }
            if self.sleepers.load(Ordering::SeqCst) == 0 {
                // Every caller drives its own call (or none waits): nothing to do here.
                self.bell.wait(None);
                continue;
            }
            let next = match self.progress.try_lock() {
                Some(mut p) => {
                    self.step(&mut p);
                    p.next_wait()
                }
                // A caller drives MPI now; look again soon (it may leave sleepers' calls).
                None => Next::Poll,
            };
            match next {
                Next::Poll => std::thread::yield_now(),
                Next::Sleep(d) => self.bell.wait(Some(d)),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn a_result_is_taken_once_whether_it_came_before_or_during_the_sleep() {
        let slot = Slot::default();
        assert!(slot.take().is_none(), "nothing before the reply");
        slot.complete(Ok(Response::Done));
        assert_eq!(slot.take(), Some(Ok(Response::Done)));
        assert!(slot.take().is_none(), "taken once");

        let slot = Arc::new(Slot::default());
        let replier = slot.clone();
        let reply = std::thread::spawn(move || {
            // Completes once the caller sleeps (or has its result at once, if it never did).
            while !replier.state.lock().sleeping {
                std::thread::yield_now();
            }
            replier.complete(Err(CallError::Failed("no".into())));
        });
        assert_eq!(slot.sleep(), Err(CallError::Failed("no".into())), "the sleeper is woken with its result");
        reply.join().unwrap();
    }

    #[test]
    fn a_ring_before_the_wait_is_not_lost_and_is_used_once() {
        let bell = Arc::new(Bell::default());
        bell.ring();
        bell.wait(None); // returns: the ring came first
        assert!(!*bell.rung.lock(), "the ring is used up");
        bell.wait(Some(Duration::from_millis(1))); // no ring: returns after its limit
        let ringer = bell.clone();
        let ring = std::thread::spawn(move || ringer.ring());
        bell.wait(None);
        ring.join().unwrap();
    }
}
