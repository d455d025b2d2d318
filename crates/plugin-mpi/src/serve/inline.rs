//! A rank that serves in process runs a launch on the thread that serves MPI: the request
//! and its reply then pass through one thread of the rank, with no hand-off to a kernel
//! thread (on a virtual machine, waking a thread that sleeps costs tens of microseconds).
//! A long kernel must not stop the rank from serving copies and other launches meanwhile: a
//! standby thread looks every [`TAKEOVER`] while launches run, and serves MPI itself from
//! the moment it finds the same launch still running, until that launch ends. While it
//! serves, launches go to kernel threads, as they do with no standby thread.
//!
//! Only one thread calls MPI at a time (`MPI_THREAD_SERIALIZED`): the one that holds the
//! serving state ([`Serve`]), which the thread running a launch has let go.

use super::Serve;
use crate::backend::Job;
use omp_sync::{Mutex, Signal};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How often the standby thread looks while launches run: a launch seen running twice in a
/// row has run this long at least, and the standby thread takes over.
const TAKEOVER: Duration = Duration::from_millis(1);
/// After this long with no launch the standby thread sleeps until the next one starts.
const QUIET: Duration = Duration::from_millis(100);

struct Shared {
    serve: Mutex<Serve>,
    /// Twice the launches run on the serving thread so far, plus one while one runs.
    launches: AtomicU64,
    /// The standby thread sleeps until a launch starts (it is then rung).
    asleep: AtomicBool,
    rung: Mutex<bool>,
    ring: Signal,
}

/// Serves until the program ends; returns the exit status. In process, launches run on the
/// serving thread, with a standby thread.
pub(super) fn run(mut serve: Serve, in_process: bool) -> i32 {
    if !in_process {
        loop {
            if let Some(code) = serve.turn() {
                return code;
            }
        }
    }
    let shared = Arc::new(Shared {
        serve: Mutex::new(serve),
        launches: AtomicU64::new(0),
        asleep: AtomicBool::new(false),
        rung: Mutex::new(false),
        ring: Signal::new(),
    });
    let standby = shared.clone();
    let started = std::thread::Builder::new().name("omp-mpi-standby".into()).spawn(move || standby.stand_by());
    // Without a standby thread, every launch goes to a kernel thread.
    let may_inline = started.is_ok();
    loop {
        let (exit, job) = {
            let mut s = shared.serve.lock();
            s.may_inline = may_inline;
            let exit = s.turn();
            s.may_inline = false;
            (exit, s.inline.take())
        };
        if let Some(code) = exit {
            return code;
        }
        if let Some(job) = job {
            shared.run_inline(job);
            // Its reply goes out now, not after the next turn's first yield.
            shared.serve.lock().take_events();
        }
    }
}

/// Whether a launch runs on the serving thread, by [`Shared::launches`].
fn a_launch_runs(launches: u64) -> bool {
    !launches.is_multiple_of(2)
}

impl Shared {
    /// Runs a launch on this thread, the serving state let go meanwhile.
    fn run_inline(&self, job: Job) {
        self.launches.fetch_add(1, Ordering::SeqCst);
        if self.asleep.load(Ordering::SeqCst) {
            *self.rung.lock() = true;
            self.ring.notify_one();
        }
        let deliver = job();
        self.launches.fetch_add(1, Ordering::SeqCst);
        deliver();
    }

    /// The standby thread: looks while launches run, serves while one runs long.
    fn stand_by(&self) {
        crate::slice::shorten_this_thread();
        let mut last = self.launches.load(Ordering::SeqCst);
        let mut last_change = Instant::now();
        let mut watched = None;
        loop {
            let now = self.launches.load(Ordering::SeqCst);
            if now != last {
                (last, last_change) = (now, Instant::now());
            }
            if a_launch_runs(now) {
                if watched == Some(now) {
                    self.serve_while(now);
                    watched = None;
                    continue;
                }
                watched = Some(now);
            } else {
                watched = None;
            }
            if !a_launch_runs(now) && last_change.elapsed() > QUIET {
                self.sleep_until_a_launch();
            } else {
                std::thread::sleep(TAKEOVER);
            }
        }
    }

    /// Serves MPI while launch `running` runs on the serving thread.
    fn serve_while(&self, running: u64) {
        while self.launches.load(Ordering::SeqCst) == running {
            let exit = self.serve.lock().turn();
            if let Some(code) = exit {
                // The program ended (MPI is finalised) during a long launch: so does the rank.
                std::process::exit(code);
            }
        }
    }

    fn sleep_until_a_launch(&self) {
        let mut rung = self.rung.lock();
        self.asleep.store(true, Ordering::SeqCst);
        // A launch that started before `asleep` was seen does not ring: look once more.
        while !*rung && !a_launch_runs(self.launches.load(Ordering::SeqCst)) {
            rung = self.ring.wait(rung);
        }
        self.asleep.store(false, Ordering::SeqCst);
        *rung = false;
    }
}
