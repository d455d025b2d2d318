//! Reading the worker's replies: the reader role that callers take in turn (or the
//! background thread while none waits), the dispatch of each reply to its call, and the
//! worker's end (reaped, described, every pending call failed).

use super::messages::{decode, CallError, Expect, Response};
use crate::spin::{Look, SpinWait};
use crate::{sys, wire};
use omp_sync::{Mutex, MutexGuard, Signal};
use std::collections::HashMap;
use std::io::BufReader;
use std::process::{Child, ChildStdout};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

/// Completes one call.
pub type Done = Box<dyn FnOnce(Result<Response, CallError>) + Send>;
/// Told how the worker ended.
pub type OnExit = Box<dyn FnOnce(&str) + Send>;
/// Given what the worker's code wrote: `(is stderr, bytes)`, in order, on the reader thread.
pub type OnOutput = Box<dyn FnMut(bool, &[u8]) + Send>;

pub(super) struct Pending {
    pub(super) expect: Expect,
    pub(super) done: Done,
}

/// What the worker's callers and its background reader share.
///
/// Replies are read by whoever holds the reader role ([`Shared::rx`]): a thread waiting in
/// [`Worker::call`] takes it and reads its own reply (no thread hand-off: the reply wakes the
/// very thread that waits for it), completing the replies of others it meets on the way.
/// Callers that find the role taken wait for their reply or for the role to be passed on
/// (leader/follower). A background thread reads only while no call waits: completions of
/// [`Worker::send`] and the worker's death while the program is idle.
pub(super) struct Shared {
    pub(super) pending: Mutex<HashMap<u64, Pending>>,
    /// `Some(how it ended)` once the worker is gone.
    pub(super) died: Mutex<Option<String>>,
    /// Locked only to signal or reap (never across a blocking wait).
    pub(super) child: Mutex<Child>,
    pub(super) pid: i32,
    /// The worker's name when it started (`/proc/<pid>/stat`), to tell that it was replaced.
    pub(super) comm: Option<String>,
    /// The reader role.
    pub(super) rx: Mutex<Rx>,
    /// Callers waiting without the role, to be passed the role when it is released.
    pub(super) waiters: Mutex<Vec<Arc<Slot>>>,
    /// Threads inside [`Worker::call`].
    pub(super) callers: AtomicUsize,
    /// Wakes the background reader when the last caller leaves with replies still due.
    pub(super) idle: Mutex<()>,
    pub(super) idle_signal: Signal,
    /// How long a caller with the reader role looks for its reply before it blocks.
    pub(super) spin: SpinWait,
}

/// The reader role's state.
pub(super) struct Rx {
    pub(super) r: BufReader<ChildStdout>,
    pub(super) fd: i32,
    pub(super) on_output: OnOutput,
    pub(super) on_exit: Option<OnExit>,
    /// The pipe ended (or broke): nothing more to read.
    pub(super) ended: bool,
    /// The worker's output pipes, drained once it ended, then closed (a process it started
    /// that still writes there gets EPIPE, not a pipe nobody reads).
    pub(super) capture: Option<super::capture::Kept>,
}

/// Where a waiting call's reply lands.
#[derive(Default)]
pub(super) struct Slot {
    state: Mutex<SlotState>,
    signal: Signal,
}

#[derive(Default)]
struct SlotState {
    result: Option<Result<Response, CallError>>,
    /// The reader role was released to this caller.
    lead: bool,
    /// The caller sleeps on `signal` (only then is it notified: no wake-up system call
    /// for a caller that read its own reply).
    sleeping: bool,
}

impl Slot {
    pub(super) fn complete(&self, r: Result<Response, CallError>) {
        let mut s = self.state.lock();
        s.result = Some(r);
        if s.sleeping {
            self.signal.notify_one();
        }
    }

    fn lead(&self) {
        let mut s = self.state.lock();
        s.lead = true;
        if s.sleeping {
            self.signal.notify_one();
        }
    }

    fn done(&self) -> bool {
        self.state.lock().result.is_some()
    }
}

pub(super) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock()
}

/// Dispatches one reply frame; an error means the worker broke the protocol.
pub(super) fn dispatch(pending: &Mutex<HashMap<u64, Pending>>, f: wire::Frame) -> Result<(), String> {
    let p = lock(pending).remove(&f.id).ok_or_else(|| format!("a reply to request {}, which is not pending", f.id))?;
    match decode(p.expect, f.tag, f.payload) {
        Ok(r) => {
            (p.done)(r);
            Ok(())
        }
        Err(why) => {
            (p.done)(Err(CallError::Died(format!("sent a malformed reply ({why}) and was stopped"))));
            Err(why)
        }
    }
}

/// Whether `buf` starts with a whole frame (reading it will not block).
fn whole_frame(buf: &[u8]) -> bool {
    buf.len() >= 4 && {
        let len = u32::from_le_bytes([buf[0], buf[1], buf[2], buf[3]]) as usize;
        buf.len() - 4 >= len
    }
}

/// Whether `fd` has data (or its end) now, or within `timeout_ms` (-1: no limit).
fn readable(fd: i32, timeout_ms: i32) -> bool {
    let mut p = libc::pollfd { fd, events: libc::POLLIN, revents: 0 };
    // SAFETY: `p` is one valid pollfd for the call.
    unsafe { libc::poll(&mut p, 1, timeout_ms) > 0 }
}

impl Shared {
    /// Reads and delivers one frame (the role's holder only); at the pipe's end, ends the worker.
    fn read_one(&self, rx: &mut Rx) {
        if rx.ended {
            return;
        }
        let broke = match wire::read_frame(&mut rx.r, wire::MAX_REPLY_FRAME) {
            Ok(Some(f)) if f.id == 0 && matches!(f.tag, wire::OUT_STDOUT | wire::OUT_STDERR) => {
                (rx.on_output)(f.tag == wire::OUT_STDERR, &f.payload);
                return;
            }
            Ok(Some(f)) => match dispatch(&self.pending, f) {
                Ok(()) => return,
                Err(why) => Some(format!("sent a malformed reply ({why}) and was stopped")),
            },
            Ok(None) => None,
            Err(e) => Some(format!("sent a malformed reply ({e}) and was stopped")),
        };
        rx.ended = true;
        if broke.is_some() {
            let _ = lock(&self.child).kill();
        }
        let ended = reap(self);
        // What the worker's code wrote and the worker did not forward (it died) comes before
        // the error its pending calls end with.
        if let Some(mut kept) = rx.capture.take() {
            kept.drain(&mut *rx.on_output);
        }
        let how = broke.unwrap_or(ended);
        *lock(&self.died) = Some(how.clone());
        let pending: Vec<Pending> = lock(&self.pending).drain().map(|(_, p)| p).collect();
        for p in pending {
            (p.done)(Err(CallError::Died(how.clone())));
        }
        if let Some(f) = rx.on_exit.take() {
            f(&how);
        }
    }

    /// Delivers the whole frames already read ahead (the role's holder, before it leaves).
    fn read_buffered(&self, rx: &mut Rx) {
        while !rx.ended && whole_frame(rx.r.buffer()) {
            self.read_one(rx);
        }
    }

    /// Passes the released reader role to one waiting caller, if any.
    pub(super) fn pass_role(&self) {
        // Told under the list's lock: a caller that leaves the list after this sees the lead.
        let mut waiters = lock(&self.waiters);
        if let Some(s) = waiters.pop() {
            s.lead();
        }
    }

    fn unregister(&self, slot: &Arc<Slot>) {
        lock(&self.waiters).retain(|s| !Arc::ptr_eq(s, slot));
    }

    /// Waits for `slot`'s reply, reading replies while it holds the reader role.
    pub(super) fn wait(&self, slot: &Arc<Slot>) -> Result<Response, CallError> {
        loop {
            {
                let mut s = lock(&slot.state);
                if let Some(r) = s.result.take() {
                    let lead = std::mem::take(&mut s.lead);
                    drop(s);
                    if lead {
                        // Passed the role with the reply already here: pass it on.
                        self.pass_role();
                    }
                    return r;
                }
                s.lead = false;
            }
            // Registered before trying for the role: whoever releases it after this either
            // passes it to us or released it before our try.
            lock(&self.waiters).push(slot.clone());
            if let Some(mut rx) = self.rx.try_lock() {
                self.unregister(slot);
                while !rx.ended && !slot.done() {
                    if whole_frame(rx.r.buffer()) {
                        self.read_one(&mut rx);
                    } else {
                        // The reply of a short request comes within microseconds: look for
                        // it before sleeping (a sleep's wake-up costs more than the request).
                        let fd = rx.fd;
                        self.spin.wait(fd, || self.read_one(&mut rx));
                    }
                }
                self.read_buffered(&mut rx);
                let ended = rx.ended;
                drop(rx);
                self.pass_role();
                if ended && !slot.done() {
                    // Cannot happen (the end completes every pending call), but never spin.
                    let how = lock(&self.died).clone().unwrap_or_else(|| "is gone".into());
                    return Err(CallError::Died(how));
                }
                continue;
            }
            let mut s = lock(&slot.state);
            while s.result.is_none() && !s.lead {
                s.sleeping = true;
                s = slot.signal.wait(s);
                s.sleeping = false;
            }
            drop(s);
            // Passed the role (then already off the list) or completed by its holder.
            self.unregister(slot);
        }
    }

    /// Reads replies on this thread until `arrived` is set, never blocking: while whole
    /// frames are buffered or one comes within a look of `spin`. Returns at once when another
    /// thread holds the reader role; says whether it gave up with `arrived` still unset.
    pub(super) fn look_for(&self, spin: &SpinWait, arrived: &AtomicBool) -> bool {
        let Some(mut rx) = self.rx.try_lock() else { return true };
        while !rx.ended && !arrived.load(Ordering::Acquire) {
            if whole_frame(rx.r.buffer()) || spin.look(rx.fd) == Look::Ready {
                self.read_one(&mut rx);
            } else {
                break;
            }
        }
        self.read_buffered(&mut rx);
        drop(rx);
        self.pass_role();
        !arrived.load(Ordering::Acquire)
    }

    /// The background reader: reads while no caller does (replies to [`Worker::send`], output
    /// while no call waits, the worker's end), until the pipe ends.
    pub(super) fn background(&self) {
        let fd = lock(&self.rx).fd;
        loop {
            if self.callers.load(Ordering::SeqCst) > 0 {
                // Callers read for themselves; look again now and then (a safety net).
                let g = lock(&self.idle);
                drop(self.idle_signal.wait_timeout(g, std::time::Duration::from_millis(20)));
            } else {
                readable(fd, 100);
            }
            let Some(mut rx) = self.rx.try_lock() else { continue };
            while !rx.ended && (whole_frame(rx.r.buffer()) || readable(fd, 0)) {
                self.read_one(&mut rx);
            }
            let ended = rx.ended;
            drop(rx);
            self.pass_role();
            if ended {
                return;
            }
        }
    }
}

/// Reaps the worker once its reply pipe has ended, and says how it ended. A worker that
/// keeps running without its pipe (a kernel called `exec`: the pipe closes on exec) is
/// stopped.
fn reap(s: &Shared) -> String {
    // Wait for the exit but leave the zombie, so the pid cannot be reused while `stop`
    // may still signal it. An exiting process closes its pipes just before it exits.
    let mut tries = 0;
    let mut stopped = false;
    loop {
        // SAFETY: siginfo_t is plain data, written by waitid.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        let flags = libc::WEXITED | libc::WNOWAIT | if stopped { 0 } else { libc::WNOHANG };
        // SAFETY: waitid on our own child's pid with a valid out-pointer; WNOWAIT reaps nothing.
        let r = unsafe { libc::waitid(libc::P_PID, s.pid as libc::id_t, &mut info, flags) };
        if r != 0 {
            if std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
                continue;
            }
            break;
        }
        // SAFETY: waitid succeeded; si_pid is 0 when no child had exited (WNOHANG).
        if stopped || unsafe { info.si_pid() } != 0 {
            break;
        }
        tries += 1;
        if tries > 200 {
            // Two hundred milliseconds without its pipe and still running: stop it.
            let _ = lock(&s.child).kill();
            stopped = true;
        } else {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }
    // Exited, or replaced by another program (the name changes on exec; a zombie keeps it).
    let replaced = match (&s.comm, proc_comm(s.pid)) {
        (Some(was), Some(now)) if *was != now => Some(now),
        _ => None,
    };
    // The worker has exited: this wait returns at once.
    let how = match lock(&s.child).wait() {
        Ok(status) => sys::describe_exit(status),
        Err(e) => format!("was lost ({e})"),
    };
    match (replaced, stopped) {
        (Some(now), true) => {
            format!("was replaced by the program '{now}' (code in a target region called exec) and was stopped: {how}")
        }
        (Some(now), false) => {
            format!("was replaced by the program '{now}' (code in a target region called exec), which {how}")
        }
        (None, true) => format!("closed its reply pipe but kept running, and was stopped: {how}"),
        (None, false) => how,
    }
}

/// A process's name (`/proc/<pid>/stat`), if readable.
pub(super) fn proc_comm(pid: i32) -> Option<String> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (head, _) = s.rsplit_once(')')?;
    Some(head.split_once('(')?.1.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::messages::MAX_MESSAGE;
    use std::sync::mpsc;

    fn frame(id: u64, tag: u8, payload: &[u8]) -> wire::Frame {
        wire::Frame { id, tag, payload: payload.to_vec() }
    }

    /// A pending table with one call of `expect` as id 1; returns its reply channel.
    type Table = Mutex<HashMap<u64, Pending>>;

    fn one(expect: Expect) -> (Table, mpsc::Receiver<Result<Response, CallError>>) {
        let (tx, rx) = mpsc::channel();
        let m = Mutex::new(HashMap::new());
        lock(&m).insert(
            1,
            Pending {
                expect,
                done: Box::new(move |r| {
                    let _ = tx.send(r);
                }),
            },
        );
        (m, rx)
    }

    fn le(v: &[u64]) -> Vec<u8> {
        v.iter().flat_map(|x| x.to_le_bytes()).collect()
    }

    #[test]
    fn well_formed_replies_are_typed() {
        let cases = [
            (Expect::Image, le(&[3]), Response::Image(3)),
            (Expect::Kernel, le(&[0x40, 0]), Response::Kernel(0x40)),
            (Expect::Global, le(&[0x1000, 24]), Response::Global { addr: 0x1000, size: 24 }),
            (Expect::Addr, le(&[0x2000]), Response::Addr(0x2000)),
            (Expect::Data(3), vec![1, 2, 3], Response::Data(vec![1, 2, 3])),
            (Expect::Done, vec![], Response::Done),
        ];
        for (expect, payload, want) in cases {
            let (p, rx) = one(expect);
            dispatch(&p, frame(1, wire::STATUS_OK, &payload)).unwrap();
            assert_eq!(rx.recv().unwrap(), Ok(want));
        }
        let (p, rx) = one(Expect::Addr);
        dispatch(&p, frame(1, wire::STATUS_ERR, b"out of memory")).unwrap();
        assert_eq!(rx.recv().unwrap(), Err(CallError::Failed("out of memory".into())));
    }

    #[test]
    fn malformed_replies_are_errors_never_values() {
        let cases: [(Expect, u8, Vec<u8>); 9] = [
            // A symbol reply cut short used to become address 0.
            (Expect::Global, wire::STATUS_OK, le(&[0x1000])),
            (Expect::Global, wire::STATUS_OK, vec![]),
            (Expect::Global, wire::STATUS_OK, le(&[1, 2, 3])),
            (Expect::Kernel, wire::STATUS_OK, le(&[1])),
            (Expect::Addr, wire::STATUS_OK, vec![1, 2, 3]),
            (Expect::Image, wire::STATUS_OK, le(&[1, 2])),
            (Expect::Data(8), wire::STATUS_OK, vec![0; 7]),
            (Expect::Done, wire::STATUS_OK, vec![0]),
            (Expect::Done, 7, vec![]),
        ];
        for (expect, tag, payload) in cases {
            let (p, rx) = one(expect);
            let e = dispatch(&p, frame(1, tag, &payload)).unwrap_err();
            match rx.recv().unwrap() {
                Err(CallError::Died(m)) => assert!(m.contains("malformed"), "{m}"),
                r => panic!("{expect:?} {tag} {payload:?}: {r:?} ({e})"),
            }
        }
        // A reply nobody asked for.
        let (p, rx) = one(Expect::Done);
        assert!(dispatch(&p, frame(2, wire::STATUS_OK, &[])).unwrap_err().contains("not pending"));
        assert!(rx.try_recv().is_err());
        // The same reply twice: the second is unknown.
        dispatch(&p, frame(1, wire::STATUS_OK, &[])).unwrap();
        assert!(dispatch(&p, frame(1, wire::STATUS_OK, &[])).is_err());
    }

    #[test]
    fn long_error_messages_are_cut() {
        let (p, rx) = one(Expect::Done);
        dispatch(&p, frame(1, wire::STATUS_ERR, &vec![b'x'; 1 << 20])).unwrap();
        match rx.recv().unwrap() {
            Err(CallError::Failed(m)) => assert_eq!(m.len(), MAX_MESSAGE + 3),
            r => panic!("{r:?}"),
        }
    }
}
