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

use crate::{sys, wire};
use omp_sync::{Mutex, MutexGuard, Signal};
use std::collections::HashMap;
use std::io::BufReader;
use std::process::{Child, ChildStdout, Command, Stdio};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

/// Why a worker call failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CallError {
    /// The worker reported an error; it goes on serving.
    Failed(String),
    /// The worker is gone (how it ended), or was stopped because it misbehaved.
    Died(String),
}

impl std::fmt::Display for CallError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CallError::Failed(m) => f.write_str(m),
            CallError::Died(how) => write!(f, "the device worker {how}"),
        }
    }
}

/// One request to a worker.
#[derive(Debug, Clone, Copy)]
pub enum Request<'a> {
    Load { device: u32, image: &'a [u8] },
    Kernel { device: u32, image: u64, name: &'a str },
    Global { device: u32, image: u64, name: &'a str },
    Alloc { device: u32, size: u64 },
    Free { device: u32, addr: u64 },
    Write { device: u32, addr: u64, data: &'a [u8] },
    Read { device: u32, addr: u64, len: u64 },
    Copy { device: u32, dst: u64, src: u64, len: u64 },
    Launch { device: u32, kernel: u64, with_dyn_ptr: bool, num_teams: u32, thread_limit: u32, args: &'a [u64] },
}

/// A successful reply, of the shape its request asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Response {
    /// `Load`: the worker's image index.
    Image(u64),
    /// `Kernel`: the worker's kernel handle.
    Kernel(u64),
    /// `Global`: the device address and size (0 when unknown).
    Global { addr: u64, size: u64 },
    /// `Alloc`: the device address.
    Addr(u64),
    /// `Read`: exactly the bytes asked for.
    Data(Vec<u8>),
    /// `Free`, `Write`, `Copy`, `Launch`.
    Done,
}

/// What a reply must look like.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Expect {
    Image,
    Kernel,
    Global,
    Addr,
    Data(usize),
    Done,
}

impl Request<'_> {
    fn encode(&self) -> (u8, Vec<u8>, &[u8], Expect) {
        use wire::Enc;
        match *self {
            Request::Load { device, image } => (wire::OP_LOAD, Enc::default().u32(device).0, image, Expect::Image),
            Request::Kernel { device, image, name } => {
                (wire::OP_SYMBOL, Enc::default().u32(device).u64(image).u8(1).0, name.as_bytes(), Expect::Kernel)
            }
            Request::Global { device, image, name } => {
                (wire::OP_SYMBOL, Enc::default().u32(device).u64(image).u8(0).0, name.as_bytes(), Expect::Global)
            }
            Request::Alloc { device, size } => {
                (wire::OP_ALLOC, Enc::default().u32(device).u64(size).0, &[], Expect::Addr)
            }
            Request::Free { device, addr } => {
                (wire::OP_FREE, Enc::default().u32(device).u64(addr).0, &[], Expect::Done)
            }
            Request::Write { device, addr, data } => {
                (wire::OP_WRITE, Enc::default().u32(device).u64(addr).0, data, Expect::Done)
            }
            Request::Read { device, addr, len } => {
                (wire::OP_READ, Enc::default().u32(device).u64(addr).u64(len).0, &[], Expect::Data(len as usize))
            }
            Request::Copy { device, dst, src, len } => {
                (wire::OP_COPY, Enc::default().u32(device).u64(dst).u64(src).u64(len).0, &[], Expect::Done)
            }
            Request::Launch { device, kernel, with_dyn_ptr, num_teams, thread_limit, args } => {
                let mut e = Enc::default()
                    .u32(device)
                    .u64(kernel)
                    .u8(u8::from(with_dyn_ptr))
                    .u32(num_teams)
                    .u32(thread_limit)
                    .u32(args.len() as u32);
                for a in args {
                    e = e.u64(*a);
                }
                (wire::OP_LAUNCH, e.0, &[], Expect::Done)
            }
        }
    }

    /// Requests the client refuses to send.
    fn check(&self) -> Result<(), String> {
        match *self {
            Request::Read { len, .. } if len > wire::MAX_READ as u64 => {
                Err(format!("a relayed read of {len} bytes exceeds the limit of {}", wire::MAX_READ))
            }
            Request::Launch { args, .. } if u32::try_from(args.len()).is_err() => {
                Err("too many kernel arguments".into())
            }
            _ => Ok(()),
        }
    }
}

/// Longest error message kept from a worker.
const MAX_MESSAGE: usize = 4096;

/// Checks a reply's payload against what its request expects.
fn decode(expect: Expect, tag: u8, payload: Vec<u8>) -> Result<Result<Response, CallError>, String> {
    match tag {
        wire::STATUS_OK => {}
        wire::STATUS_ERR => {
            let mut m = String::from_utf8_lossy(&payload[..payload.len().min(MAX_MESSAGE)]).into_owned();
            if payload.len() > MAX_MESSAGE {
                m.push_str("...");
            }
            return Ok(Err(CallError::Failed(m)));
        }
        t => return Err(format!("a reply with unknown status {t}")),
    }
    let bad = |what: &str| format!("a {what} reply of {} bytes", payload.len());
    let mut d = wire::Dec(&payload);
    let r = match expect {
        Expect::Image | Expect::Kernel | Expect::Addr => {
            let v = d.u64().map_err(|_| bad("short"))?;
            match expect {
                Expect::Image => Response::Image(v),
                Expect::Kernel => {
                    // The second word is a size, always 0 for kernels.
                    d.u64().map_err(|_| bad("short kernel"))?;
                    Response::Kernel(v)
                }
                _ => Response::Addr(v),
            }
        }
        Expect::Global => {
            let addr = d.u64().map_err(|_| bad("short symbol"))?;
            let size = d.u64().map_err(|_| bad("short symbol"))?;
            Response::Global { addr, size }
        }
        Expect::Data(n) => {
            if payload.len() != n {
                return Err(format!("{} bytes for a read of {n}", payload.len()));
            }
            return Ok(Ok(Response::Data(payload)));
        }
        Expect::Done => Response::Done,
    };
    d.end().map_err(|_| bad("long"))?;
    Ok(Ok(r))
}

/// Completes one call.
pub type Done = Box<dyn FnOnce(Result<Response, CallError>) + Send>;
/// Told how the worker ended.
pub type OnExit = Box<dyn FnOnce(&str) + Send>;
/// Given what the worker's code wrote: `(is stderr, bytes)`, in order, on the reader thread.
pub type OnOutput = Box<dyn FnMut(bool, &[u8]) + Send>;

struct Pending {
    expect: Expect,
    done: Done,
}

/// What the worker's callers and its background reader share.
///
/// Replies are read by whoever holds the reader role ([`Shared::rx`]): a thread waiting in
/// [`Worker::call`] takes it and reads its own reply (no thread hand-off: the reply wakes the
/// very thread that waits for it), completing the replies of others it meets on the way.
/// Callers that find the role taken wait for their reply or for the role to be passed on
/// (leader/follower). A background thread reads only while no call waits: completions of
/// [`Worker::send`] and the worker's death while the program is idle.
struct Shared {
    pending: Mutex<HashMap<u64, Pending>>,
    /// `Some(how it ended)` once the worker is gone.
    died: Mutex<Option<String>>,
    /// Locked only to signal or reap (never across a blocking wait).
    child: Mutex<Child>,
    pid: i32,
    /// The worker's name when it started (`/proc/<pid>/stat`), to tell that it was replaced.
    comm: Option<String>,
    /// The reader role.
    rx: Mutex<Rx>,
    /// Callers waiting without the role, to be passed the role when it is released.
    waiters: Mutex<Vec<Arc<Slot>>>,
    /// Threads inside [`Worker::call`].
    callers: AtomicUsize,
    /// Wakes the background reader when the last caller leaves with replies still due.
    idle: Mutex<()>,
    idle_signal: Signal,
}

/// The reader role's state.
struct Rx {
    r: BufReader<ChildStdout>,
    fd: i32,
    on_output: OnOutput,
    on_exit: Option<OnExit>,
    /// The pipe ended (or broke): nothing more to read.
    ended: bool,
}

/// Where a waiting call's reply lands.
#[derive(Default)]
struct Slot {
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
    fn complete(&self, r: Result<Response, CallError>) {
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

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock()
}

/// Dispatches one reply frame; an error means the worker broke the protocol.
fn dispatch(pending: &Mutex<HashMap<u64, Pending>>, f: wire::Frame) -> Result<(), String> {
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
    fn pass_role(&self) {
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
    fn wait(&self, slot: &Arc<Slot>) -> Result<Response, CallError> {
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
                    self.read_one(&mut rx);
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

    /// The background reader: reads while no caller does (replies to [`Worker::send`], output
    /// while no call waits, the worker's end), until the pipe ends.
    fn background(&self) {
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
    direct: bool,
}

impl Worker {
    /// Starts `cmd` (which must run [`crate::serve::main`]) with its stdin and stdout as the
    /// request and reply pipes.
    pub fn spawn(mut cmd: Command, opts: SpawnOptions) -> std::io::Result<Worker> {
        use std::os::fd::AsRawFd;
        let (ours, theirs) = std::os::unix::net::UnixStream::pair()?;
        cmd.stdin(Stdio::from(std::os::fd::OwnedFd::from(theirs))).stdout(Stdio::piped());
        let (bell_r, bell_w) = doorbell()?;
        let r = bell_r.as_raw_fd();
        // SAFETY: runs in the child before exec: dup2 is async-signal-safe; `r` (at 10 or
        // above, never DOORBELL_FD itself) stays open in the parent until the spawn returns.
        unsafe {
            use std::os::unix::process::CommandExt;
            cmd.pre_exec(move || {
                if libc::dup2(r, wire::DOORBELL_FD) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        cmd.env("OMP_WORKER_DOORBELL", wire::DOORBELL_FD.to_string());
        let spawned = cmd.spawn();
        drop(bell_r);
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
        let rx =
            Rx { r: BufReader::with_capacity(1 << 20, stdout), fd, on_output, on_exit: opts.on_exit, ended: false };
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
            direct: opts.direct_copies,
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

    /// Sends `req` and waits for its reply, reading it on this thread when no other caller
    /// is reading.
    pub fn call(&self, req: &Request) -> Result<Response, CallError> {
        let s = &self.shared;
        let slot = Arc::new(Slot::default());
        let done = slot.clone();
        s.callers.fetch_add(1, Ordering::SeqCst);
        self.send(req, Box::new(move |r| done.complete(r)));
        let r = s.wait(&slot);
        if s.callers.fetch_sub(1, Ordering::SeqCst) == 1 && !lock(&s.pending).is_empty() {
            // Replies to `send` are still due and no caller reads: the background reader must.
            let _g = lock(&s.idle);
            s.idle_signal.notify_one();
        }
        r
    }

    /// Copies `data` to device address `addr`, directly when allowed and possible.
    pub fn write(&self, device: u32, addr: u64, data: &[u8]) -> Result<(), CallError> {
        if self.direct {
            match sys::write_to(self.pid, addr, data) {
                Ok(()) => return Ok(()),
                Err(e) if !relay_instead(&e) => return Err(self.copy_error(e)),
                Err(_) => {}
            }
        }
        self.call(&Request::Write { device, addr, data }).map(|_| ())
    }

    /// Reads `len` bytes at device address `addr`, directly when allowed and possible.
    pub fn read(&self, device: u32, addr: u64, len: usize) -> Result<Vec<u8>, CallError> {
        if self.direct {
            match sys::read_vec(self.pid, addr, len) {
                Ok(buf) => return Ok(buf),
                Err(e) if !relay_instead(&e) => return Err(self.copy_error(e)),
                Err(_) => {}
            }
        }
        match self.call(&Request::Read { device, addr, len: len as u64 })? {
            Response::Data(d) => Ok(d),
            r => Err(CallError::Failed(format!("unexpected reply {r:?}"))),
        }
    }

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
fn proc_comm(pid: i32) -> Option<String> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (head, _) = s.rsplit_once(')')?;
    Some(head.split_once('(')?.1.to_string())
}

/// Direct copies are refused by the system (seccomp, ptrace policy): relay through the pipe.
fn relay_instead(e: &std::io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EPERM | libc::ENOSYS | libc::EACCES))
}

#[cfg(test)]
mod tests {
    use super::*;
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

    #[test]
    fn oversized_reads_are_refused_before_sending() {
        assert!(Request::Read { device: 0, addr: 0, len: wire::MAX_READ as u64 + 1 }.check().is_err());
        assert!(Request::Read { device: 0, addr: 0, len: wire::MAX_READ as u64 }.check().is_ok());
    }

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
