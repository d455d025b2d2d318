//! The parent's side of a worker: spawns it, sends typed requests, checks every reply
//! against what its request expects, and turns the worker's death into an error for every
//! pending call.
//!
//! Replies (frames capped at [`wire::MAX_REPLY_FRAME`]) complete each call through the
//! callback given to [`Worker::send`]. A thread in [`Worker::call`] reads the pipe itself
//! while no other caller does (so its reply wakes it directly, with no hand-off between
//! threads); a background thread reads while no call waits. A reply that does not fit its request
//! (unknown id, unknown status, wrong length) means the worker can no longer be trusted: it
//! is killed and every call fails with [`CallError::Died`].

mod capture;
mod device;
mod messages;
mod reader;

pub use device::{symbol_name, with_launch_request, RequestPeer};
pub use messages::{decode, CallError, Expect, Request, Response, RELAY_CHUNK};
pub use reader::{Done, OnExit, OnOutput};

use crate::spin::SpinWait;
use crate::{sys, wire};
use omp_sync::{Mutex, Signal};
use reader::{lock, proc_comm, Pending, Rx, Shared, Slot};
use std::io::BufReader;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

/// How the worker is started.
#[derive(Default)]
pub struct SpawnOptions {
    /// Copy data with `process_vm_writev`/`readv` instead of through the pipe when the
    /// system allows it: only for devices whose addresses are the worker's own.
    pub direct_copies: bool,
    /// Called once, with how the worker ended (on whichever thread read the pipe's end).
    pub on_exit: Option<OnExit>,
    /// Where the worker's output goes (default: this process's stderr). Output written
    /// before a reply is delivered before the reply's callback runs.
    pub on_output: Option<OnOutput>,
}

/// The doorbell pipe: the read end at 10 or above (closed on exec; the worker gets a copy
/// as DOORBELL_FD), the write end non-blocking.
fn doorbell() -> std::io::Result<(std::fs::File, std::fs::File)> {
    use std::os::fd::FromRawFd;
    let mut p = [0i32; 2];
    // SAFETY: pipe2 writes two descriptors into `p`; the result is checked.
    if unsafe { libc::pipe2(p.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: both descriptors are fresh and owned here from now on.
    let (r, w) = unsafe { (std::fs::File::from_raw_fd(p[0]), std::fs::File::from_raw_fd(p[1])) };
    use std::os::fd::AsRawFd;
    // SAFETY: fcntl on descriptors we own; results checked.
    unsafe {
        if libc::fcntl(w.as_raw_fd(), libc::F_SETFL, libc::O_NONBLOCK) < 0 {
            return Err(std::io::Error::last_os_error());
        }
        let high = libc::fcntl(r.as_raw_fd(), libc::F_DUPFD_CLOEXEC, 10);
        if high < 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok((std::fs::File::from_raw_fd(high), w))
    }
}

/// Has the child `cmd` starts find each `(from, to)` descriptor of this process at `to`, in
/// order. Each `from` must be at 10 or above (no `to` is) and stay open until the spawn
/// returns.
pub fn pass_fds(cmd: &mut Command, fds: Vec<(i32, i32)>) {
    debug_assert!(fds.iter().all(|&(from, to)| from >= 10 && to < 10));
    // SAFETY: runs in the forked child before exec and calls only dup2 (async-signal-safe)
    // on descriptor numbers the caller keeps open; `fds` was allocated before the fork.
    unsafe {
        use std::os::unix::process::CommandExt;
        cmd.pre_exec(move || {
            for &(from, to) in &fds {
                if libc::dup2(from, to) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            Ok(())
        });
    }
}

/// The parent's end of the request channel.
struct Requests(std::os::unix::net::UnixStream);

impl std::io::Write for Requests {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        use std::os::fd::AsRawFd;
        // SAFETY: `buf` is readable for its length; send reads it only. MSG_NOSIGNAL: a
        // closed peer is EPIPE, never SIGPIPE.
        let n = unsafe { libc::send(self.0.as_raw_fd(), buf.as_ptr().cast(), buf.len(), libc::MSG_NOSIGNAL) };
        if n < 0 {
            Err(std::io::Error::last_os_error())
        } else {
            Ok(n as usize)
        }
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// A running worker.
pub struct Worker {
    pid: i32,
    /// The request channel: a socket, written with `MSG_NOSIGNAL` (a C program does not
    /// ignore SIGPIPE; writing to a worker that just died must be an error, not its death).
    stdin: Mutex<Option<Requests>>,
    /// The worker's doorbell (non-blocking): rung for a request sent while others are
    /// outstanding, so that the worker reads it even while its reader runs a kernel.
    bell: std::fs::File,
    shared: Arc<Shared>,
    next: AtomicU64,
    /// Copies go straight into the worker's memory until the system refuses that once.
    direct: AtomicBool,
    /// How long [`Worker::send_and_look`] looks for its reply, learnt from its past calls.
    look: Arc<SpinWait>,
}

impl Worker {
    /// Starts `cmd` (which must run [`crate::serve::main`]) with its stdin and stdout as the
    /// request and reply pipes.
    pub fn spawn(mut cmd: Command, opts: SpawnOptions) -> std::io::Result<Worker> {
        use std::os::fd::AsRawFd;
        let (ours, theirs) = std::os::unix::net::UnixStream::pair()?;
        cmd.stdin(Stdio::from(std::os::fd::OwnedFd::from(theirs))).stdout(Stdio::piped());
        let (bell_r, bell_w) = doorbell()?;
        // The worker's output pipes, made here so that what a dying worker did not forward
        // can still be taken (`capture`).
        let (kept, for_worker) = capture::pipes()?;
        // The doorbell's read end and the pipes' ends are at 10 or above, open until the spawn
        // returns.
        let mut fds = vec![(bell_r.as_raw_fd(), wire::DOORBELL_FD)];
        fds.extend(for_worker.raw().into_iter().zip(wire::CAPTURE_FDS));
        pass_fds(&mut cmd, fds);
        cmd.env("OMP_WORKER_DOORBELL", wire::DOORBELL_FD.to_string());
        cmd.env("OMP_WORKER_CAPTURE", "1");
        // A worker inherits its parent's MPI launcher variables (an isolated device's program
        // or a device rank started by mpirun): an image it loads that brings the OpenMP runtime
        // along (a shared library with target regions of its own) would start MPI devices in
        // the worker, as if it were the program's rank, and hang in MPI_Init.
        cmd.env("LIBOMPTARGET_MPI", "0");
        let spawned = cmd.spawn();
        drop(bell_r);
        drop(for_worker);
        let mut child = spawned?;
        // The worker's end is closed here with `cmd` (the caller keeps no copy of it).
        drop(cmd);
        let pid = child.id() as i32;
        let stdin = Some(Requests(ours));
        let stdout = child.stdout.take().ok_or_else(|| std::io::Error::other("no reply pipe"))?;
        let on_output = opts.on_output.unwrap_or_else(|| {
            Box::new(|_, b: &[u8]| {
                use std::io::Write;
                let _ = std::io::stderr().write_all(b);
            })
        });
        let fd = stdout.as_raw_fd();
        let rx = Rx {
            r: BufReader::with_capacity(1 << 20, stdout),
            fd,
            on_output,
            on_exit: opts.on_exit,
            ended: false,
            capture: Some(kept),
        };
        let shared = Arc::new(Shared {
            pending: Mutex::default(),
            died: Mutex::new(None),
            child: Mutex::new(child),
            pid,
            comm: proc_comm(pid),
            rx: Mutex::new(rx),
            waiters: Mutex::default(),
            callers: AtomicUsize::new(0),
            idle: Mutex::new(()),
            idle_signal: Signal::new(),
            spin: SpinWait::default(),
        });
        let s = shared.clone();
        let reader = std::thread::Builder::new().name(format!("worker-{pid}")).spawn(move || s.background());
        if let Err(e) = reader {
            let _ = lock(&shared.child).kill();
            let _ = lock(&shared.child).wait();
            return Err(e);
        }
        Ok(Worker {
            pid,
            stdin: Mutex::new(stdin),
            bell: bell_w,
            shared,
            next: AtomicU64::new(1),
            direct: AtomicBool::new(opts.direct_copies),
            look: Arc::default(),
        })
    }

    /// The worker's process id.
    pub fn pid(&self) -> i32 {
        self.pid
    }

    /// How the worker ended, if it has.
    pub fn died(&self) -> Option<String> {
        lock(&self.shared.died).clone()
    }

    /// Sends `req`; `done` is called once with the reply (on the thread that reads it, or on
    /// this one when the request cannot be sent). Writes the whole request to the pipe before
    /// it returns, so large requests belong on a thread that may block.
    pub fn send(&self, req: &Request, done: Done) {
        if let Err(e) = req.check() {
            return done(Err(CallError::Failed(e)));
        }
        let (op, head, body, expect) = req.encode();
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let concurrent = {
            let mut pending = lock(&self.shared.pending);
            let busy = !pending.is_empty();
            pending.insert(id, Pending { expect, done });
            busy
        };
        if let Some(how) = self.died() {
            // The pipe's reader has drained (or is draining) the pending calls; whoever
            // removes the entry completes it.
            if let Some(p) = lock(&self.shared.pending).remove(&id) {
                (p.done)(Err(CallError::Died(how)));
            }
            return;
        }
        let sent = match lock(&self.stdin).as_mut() {
            Some(w) => wire::write_frame(w, id, op, &[&head, body]),
            None => Err(std::io::Error::other("stopped")),
        };
        if sent.is_err() {
            // The worker is gone or going (a stopped worker is killed): the pipe's reader
            // sees it close and completes this call with how it ended.
            let _ = lock(&self.shared.child).kill();
        } else if concurrent {
            // A full doorbell already has rings enough; a closed one means the worker is gone.
            let ring = [1u8];
            use std::os::fd::AsRawFd;
            // SAFETY: writes one byte from our buffer to our own non-blocking pipe.
            unsafe { libc::write(self.bell.as_raw_fd(), ring.as_ptr().cast(), 1) };
        }
    }

    /// Sends `req` as [`Worker::send`] does, then, when no other thread reads replies, reads
    /// them here for as long as a look lasts ([`crate::spin`]) without blocking: the reply of
    /// a short request then completes `done` on this thread, with no hand-off through the
    /// background reader (for a caller that must not block, such as an async task). A later
    /// reply completes `done` on the background reader, as after `send`.
    pub fn send_and_look(&self, req: &Request, done: Done) {
        let s = &self.shared;
        let arrived = Arc::new(AtomicBool::new(false));
        let gave_up_at = Arc::new(Mutex::new(None::<Instant>));
        let (seen, since, look) = (arrived.clone(), gave_up_at.clone(), self.look.clone());
        s.callers.fetch_add(1, Ordering::SeqCst);
        self.send(
            req,
            Box::new(move |r| {
                seen.store(true, Ordering::Release);
                if let Some(at) = lock(&since).take() {
                    // Teaches the look how late replies come after it gives up.
                    look.blocked(at.elapsed());
                }
                done(r)
            }),
        );
        if s.look_for(&self.look, &arrived) {
            *lock(&gave_up_at) = Some(Instant::now());
        }
        self.leave_call();
    }

    /// Sends `req` and waits for its reply, reading it on this thread when no other caller
    /// is reading.
    pub fn call(&self, req: &Request) -> Result<Response, CallError> {
        let s = &self.shared;
        let slot = Arc::new(Slot::default());
        let done = slot.clone();
        s.callers.fetch_add(1, Ordering::SeqCst);
        self.send(req, Box::new(move |r| done.complete(r)));
        let r = s.wait(&slot);
        self.leave_call();
        r
    }

    /// A caller that read replies itself leaves.
    fn leave_call(&self) {
        let s = &self.shared;
        if s.callers.fetch_sub(1, Ordering::SeqCst) == 1 && !lock(&s.pending).is_empty() {
            // Replies to `send` are still due and no caller reads: the background reader must.
            let _g = lock(&s.idle);
            s.idle_signal.notify_one();
        }
    }

    /// Copies `data` to device address `addr`: straight into the worker's memory when the
    /// worker was spawned for it and the system allows it, otherwise relayed through the
    /// pipe in pieces of at most [`RELAY_CHUNK`] bytes.
    pub fn write(&self, device: u32, addr: u64, data: &[u8]) -> Result<(), CallError> {
        if self.direct.load(Ordering::Relaxed) {
            match sys::write_to(self.pid, addr, data) {
                Ok(()) => return Ok(()),
                Err(e) if relay_instead(&e) => self.direct.store(false, Ordering::Relaxed),
                Err(e) => return Err(self.copy_error(e)),
            }
        }
        for (i, chunk) in data.chunks(RELAY_CHUNK).enumerate() {
            let at = addr + (i * RELAY_CHUNK) as u64;
            self.call(&Request::Write { device, addr: at, data: chunk })?;
        }
        Ok(())
    }

    /// Reads `len` bytes at device address `addr` into a new buffer, as [`Worker::read_into`].
    pub fn read(&self, device: u32, addr: u64, len: usize) -> Result<Vec<u8>, CallError> {
        if self.direct.load(Ordering::Relaxed) {
            match sys::read_vec(self.pid, addr, len) {
                Ok(buf) => return Ok(buf),
                Err(e) if relay_instead(&e) => self.direct.store(false, Ordering::Relaxed),
                Err(e) => return Err(self.copy_error(e)),
            }
        }
        let mut buf = vec![0; len];
        self.read_relayed(device, addr, &mut buf)?;
        Ok(buf)
    }

    /// Fills `buf` with the bytes at device address `addr`: straight from the worker's memory
    /// when allowed and possible, otherwise relayed in pieces of at most [`RELAY_CHUNK`].
    pub fn read_into(&self, device: u32, addr: u64, buf: &mut [u8]) -> Result<(), CallError> {
        if self.direct.load(Ordering::Relaxed) {
            match sys::read_from(self.pid, addr, buf) {
                Ok(()) => return Ok(()),
                Err(e) if relay_instead(&e) => self.direct.store(false, Ordering::Relaxed),
                Err(e) => return Err(self.copy_error(e)),
            }
        }
        self.read_relayed(device, addr, buf)
    }

    fn read_relayed(&self, device: u32, addr: u64, buf: &mut [u8]) -> Result<(), CallError> {
        for (i, chunk) in buf.chunks_mut(RELAY_CHUNK).enumerate() {
            let at = addr + (i * RELAY_CHUNK) as u64;
            match self.call(&Request::Read { device, addr: at, len: chunk.len() as u64 })? {
                // The reply was checked to hold exactly the bytes asked for.
                Response::Data(d) => chunk.copy_from_slice(&d),
                r => return Err(CallError::Failed(format!("unexpected reply {r:?}"))),
            }
        }
        Ok(())
    }

    /// A failed direct copy: the worker is gone, or the copy failed.
    fn copy_error(&self, e: std::io::Error) -> CallError {
        match e.raw_os_error() {
            Some(libc::ESRCH) => CallError::Died(self.died().unwrap_or_else(|| "is gone".into())),
            _ => CallError::Failed(format!("device memory copy failed: {e}")),
        }
    }

    /// Stops the worker (closing its pipe, then killing it); the reader thread reaps it.
    pub fn stop(&self) {
        lock(&self.stdin).take();
        let _ = lock(&self.shared.child).kill();
        let _g = lock(&self.shared.idle);
        self.shared.idle_signal.notify_one();
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Direct copies are refused by the system (seccomp, ptrace policy): relay through the pipe.
fn relay_instead(e: &std::io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EPERM | libc::ENOSYS | libc::EACCES))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;

    /// A worker that answers with garbage (here: `sh` printing a 2 GiB frame header) is
    /// stopped, and the call fails instead of allocating 2 GiB or hanging.
    #[test]
    fn a_worker_announcing_a_huge_frame_is_stopped() {
        let mut cmd = Command::new("sh");
        cmd.arg("-c").arg("printf '\\377\\377\\377\\177'; sleep 30");
        let (tx, rx) = mpsc::channel();
        let w = Worker::spawn(
            cmd,
            SpawnOptions {
                direct_copies: false,
                on_output: None,
                on_exit: Some(Box::new(move |how| {
                    let _ = tx.send(how.to_string());
                })),
            },
        )
        .unwrap();
        let how = rx.recv().unwrap();
        assert!(how.contains("malformed") && how.contains("bad frame length"), "{how}");
        match w.call(&Request::Alloc { device: 0, size: 8 }) {
            Err(CallError::Died(m)) => assert!(m.contains("malformed"), "{m}"),
            r => panic!("{r:?}"),
        }
    }

    /// Output frames (id 0) go to `on_output` in order, before the reply that follows them.
    #[test]
    fn output_frames_reach_on_output_before_the_reply() {
        // Once the 25-byte request has arrived: two output frames ("hi" to stdout, "err" to
        // stderr), then an empty OK reply to request 1; then the worker waits.
        let mut cmd = Command::new("sh");
        cmd.arg("-c").arg(concat!(
            r"head -c 25 >/dev/null; ",
            r"printf '\013\0\0\0\0\0\0\0\0\0\0\0\002hi'; ",
            r"printf '\014\0\0\0\0\0\0\0\0\0\0\0\003err'; ",
            r"printf '\011\0\0\0\001\0\0\0\0\0\0\0\000'; sleep 30",
        ));
        let seen = Arc::new(Mutex::new(Vec::new()));
        let s = seen.clone();
        let w = Worker::spawn(
            cmd,
            SpawnOptions {
                on_output: Some(Box::new(move |is_err, b: &[u8]| lock(&s).push((is_err, b.to_vec())))),
                ..Default::default()
            },
        )
        .unwrap();
        assert_eq!(w.call(&Request::Free { device: 0, addr: 8 }), Ok(Response::Done));
        assert_eq!(*lock(&seen), vec![(false, b"hi".to_vec()), (true, b"err".to_vec())]);
        w.stop();
    }

    /// `send_and_look` completes each call with its reply: one answered at once (read on the
    /// caller's thread or by the reader), and one answered long after the look gave up
    /// (delivered by the background reader, with no further call to read it).
    #[test]
    fn send_and_look_delivers_prompt_and_late_replies() {
        let mut cmd = Command::new("sh");
        cmd.arg("-c").arg(concat!(
            r"head -c 25 >/dev/null; printf '\011\0\0\0\001\0\0\0\0\0\0\0\000'; ",
            r"head -c 25 >/dev/null; sleep 0.3; printf '\011\0\0\0\002\0\0\0\0\0\0\0\000'; sleep 30",
        ));
        let w = Worker::spawn(cmd, SpawnOptions::default()).unwrap();
        for _ in 0..2 {
            let (tx, rx) = mpsc::channel();
            w.send_and_look(
                &Request::Free { device: 0, addr: 8 },
                Box::new(move |r| {
                    tx.send(r).unwrap();
                }),
            );
            assert_eq!(rx.recv_timeout(std::time::Duration::from_secs(20)), Ok(Ok(Response::Done)));
        }
        w.stop();
    }

    /// A worker that exits: pending and later calls fail, naming how it ended.
    #[test]
    fn a_dead_worker_fails_every_call() {
        let mut cmd = Command::new("sh");
        cmd.arg("-c").arg("exit 3");
        let w = Worker::spawn(cmd, SpawnOptions::default()).unwrap();
        for _ in 0..3 {
            match w.call(&Request::Free { device: 0, addr: 8 }) {
                Err(CallError::Died(m)) => assert!(m.contains("exited with status 3"), "{m}"),
                r => panic!("{r:?}"),
            }
        }
    }
}
