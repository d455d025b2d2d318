//! A process's fd 1 and fd 2, captured into pipes whose read ends are drained into a sink: a
//! worker's output frames (what its kernels print, in order with its replies), or an MPI
//! device rank's messages when it serves in process.

use crate::wire;
use omp_sync::Mutex;
use std::fs::File;
use std::os::fd::{AsRawFd, FromRawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// Set while output read from the pipes may not have reached the sink yet: a worker that
/// died meanwhile would lose it. What is still in a pipe, the worker's parent reads after
/// the death.
static SENDING: AtomicBool = AtomicBool::new(false);
/// Set by a fault that ends the process: nothing more is taken out of the pipes.
static DYING: AtomicBool = AtomicBool::new(false);

/// From a handler of a fault that ends the process: stops taking output out of the pipes and
/// waits (a bounded while) for what was taken to reach the sink, so that what a kernel
/// printed before it failed reaches the program, through the sink or from the pipe.
/// Async-signal-safe.
pub fn stop_and_wait_until_sent() {
    // With `drain`'s SeqCst pair: either it sees DYING and takes nothing, or this sees
    // SENDING and waits until what it took is sent.
    DYING.store(true, Ordering::SeqCst);
    for _ in 0..100_000 {
        if !SENDING.load(Ordering::SeqCst) {
            return;
        }
        // SAFETY: sched_yield has no preconditions.
        unsafe { libc::sched_yield() };
    }
}

/// Where captured output goes: its tag ([`wire::OUT_STDOUT`] or [`wire::OUT_STDERR`]) and
/// bytes; an error means nobody takes it any more (the process then ends at once).
pub type OutputSink = Box<dyn Fn(u8, &[u8]) -> std::io::Result<()> + Send + Sync>;

/// The process's fd 1 and fd 2, captured: pipes whose read ends are drained into a sink (the
/// worker's: output frames) by a thread of their own, and by each reply before it is sent.
pub struct Capture {
    /// Non-blocking read ends with their frame tags; the lock keeps chunks in order.
    ends: Mutex<[(File, u8); 2]>,
    sink: OutputSink,
}

impl Capture {
    /// Replaces fd 1 and fd 2 with pipes and starts the thread that forwards what arrives
    /// there while no reply is due.
    pub fn start(sink: OutputSink) -> std::io::Result<Arc<Capture>> {
        let ends = match std::env::var_os("OMP_WORKER_CAPTURE") {
            // A worker's parent made the pipes (it keeps their read ends too).
            Some(_) => {
                // Not passed on to what this process starts.
                std::env::remove_var("OMP_WORKER_CAPTURE");
                Self::adopt()?
            }
            None => Self::pipes()?,
        };
        let c = Arc::new(Capture { ends: Mutex::new(ends), sink });
        let t = c.clone();
        std::thread::Builder::new().name("output".into()).spawn(move || t.forward())?;
        Ok(c)
    }

    /// The pipes the parent made, at [`wire::CAPTURE_FDS`]: their write ends become fd 1 and 2.
    fn adopt() -> std::io::Result<[(File, u8); 2]> {
        let [out_r, err_r, out_w, err_w] = wire::CAPTURE_FDS;
        for fd in wire::CAPTURE_FDS {
            // SAFETY: fcntl on a descriptor number; an unopened one is an error, checked.
            if unsafe { libc::fcntl(fd, libc::F_GETFD) } < 0 {
                return Err(std::io::Error::other(format!("output pipe descriptor {fd} is not open")));
            }
        }
        // SAFETY: fcntl and dup2 on the descriptors the parent gave this process; dup2 replaces
        // our own fd 1 and 2; the write ends' extra numbers are closed once duplicated.
        unsafe {
            for (w, fd) in [(out_w, 1), (err_w, 2)] {
                if libc::dup2(w, fd) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                libc::close(w);
            }
            for r in [out_r, err_r] {
                if libc::fcntl(r, libc::F_SETFD, libc::FD_CLOEXEC) < 0
                    || libc::fcntl(r, libc::F_SETFL, libc::O_NONBLOCK) < 0
                {
                    return Err(std::io::Error::last_os_error());
                }
            }
        }
        // SAFETY: the read ends are this process's from now on, owned by these Files only.
        Ok(unsafe { [(File::from_raw_fd(out_r), wire::OUT_STDOUT), (File::from_raw_fd(err_r), wire::OUT_STDERR)] })
    }

    /// Pipes of its own, when no parent made them (a device rank serving in process).
    fn pipes() -> std::io::Result<[(File, u8); 2]> {
        let mut ends = Vec::new();
        for (fd, tag) in [(1, wire::OUT_STDOUT), (2, wire::OUT_STDERR)] {
            let mut p = [0i32; 2];
            // SAFETY: pipe2 writes two descriptors into `p`; the result is checked.
            if unsafe { libc::pipe2(p.as_mut_ptr(), libc::O_CLOEXEC | libc::O_NONBLOCK) } != 0 {
                return Err(std::io::Error::last_os_error());
            }
            // SAFETY: both descriptors are fresh and owned here from now on.
            let (r, w) = unsafe { (File::from_raw_fd(p[0]), File::from_raw_fd(p[1])) };
            // The write end must block (a kernel's printf waits for room, never fails).
            // SAFETY: fcntl on a descriptor we own; dup2 replaces our own fd 1 or 2.
            unsafe {
                let flags = libc::fcntl(w.as_raw_fd(), libc::F_GETFL);
                if flags < 0 || libc::fcntl(w.as_raw_fd(), libc::F_SETFL, flags & !libc::O_NONBLOCK) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                if libc::dup2(w.as_raw_fd(), fd) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            ends.push((r, tag));
        }
        ends.try_into().map_err(|_| std::io::Error::other("two pipes"))
    }

    /// Waits for output and forwards it, for output written while no reply is due.
    fn forward(&self) {
        let fds: Vec<i32> = self.ends.lock().iter().map(|(f, _)| f.as_raw_fd()).collect();
        loop {
            let mut polls: Vec<libc::pollfd> =
                fds.iter().map(|&fd| libc::pollfd { fd, events: libc::POLLIN, revents: 0 }).collect();
            // SAFETY: `polls` is a valid array of pollfd for the call.
            let n = unsafe { libc::poll(polls.as_mut_ptr(), polls.len() as libc::nfds_t, -1) };
            if n < 0 && std::io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
                return;
            }
            self.drain();
            if DYING.load(Ordering::SeqCst) {
                // What is left stays in the pipes, for the parent; polling them would spin.
                return;
            }
        }
    }

    /// Sends everything the pipes hold now to the sink (call it after `fflush(NULL)`).
    pub fn drain(&self) {
        use std::io::Read;
        let mut ends = self.ends.lock();
        // One system call when there is nothing (the common case before a reply).
        let mut polls = [0, 1].map(|i| libc::pollfd { fd: ends[i].0.as_raw_fd(), events: libc::POLLIN, revents: 0 });
        // SAFETY: `polls` is a valid array of two pollfd for the call.
        if unsafe { libc::poll(polls.as_mut_ptr(), 2, 0) } == 0 {
            return;
        }
        let mut buf = [0u8; 64 << 10];
        SENDING.store(true, Ordering::SeqCst);
        if DYING.load(Ordering::SeqCst) {
            SENDING.store(false, Ordering::SeqCst);
            return;
        }
        for (r, tag) in ends.iter_mut() {
            loop {
                match r.read(&mut buf) {
                    Ok(0) => break,
                    Ok(n) => {
                        if (self.sink)(*tag, &buf[..n]).is_err() {
                            // The parent is gone. (Not exit(): this may run in an exit handler.)
                            // SAFETY: _exit ends the process at once; nothing is left to flush.
                            unsafe { libc::_exit(0) };
                        }
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(_) => break, // WouldBlock: nothing more now
                }
            }
        }
        SENDING.store(false, Ordering::SeqCst);
    }
}
