//! What a device rank serves the program's requests with: an `offload-worker` process (the
//! default, kernels isolated from the rank) or, with `offload-mpi-device --in-process`, this
//! rank's own process, through the worker's own request handling
//! ([`omp_worker::serve::execute`]) and output capture ([`Capture`]): no pipe between the
//! rank and its devices, no reader thread, kernels run in the rank (docs/cluster.md, "In
//! process"). A kernel that faults then ends the rank, which the MPI launcher reports.

use omp_plugin::{Device, Plugin};
use omp_worker::client::Expect;
use omp_worker::serve::{self, Capture, OutputSink};
use omp_worker::wire;
use omp_worker::{CallError, Request, Worker};
use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex, PoisonError};

/// A call's completion, as [`Worker::send`] takes it.
pub type Done = omp_worker::client::Done;

/// The devices a rank serves: the calls the rank makes on them.
pub trait Backend: Send + Sync {
    /// Runs `req`; `done` is called once with its reply, on any thread.
    fn send(&self, req: &Request, done: Done);
    /// As [`Backend::send`], but a launch that would run on a thread of this process comes
    /// back as a job for the caller to run itself (in process): one thread hand-off less.
    fn send_or_hand_back(&self, req: &Request, done: Done) -> Option<Job> {
        self.send(req, done);
        None
    }
    /// Fills `buf` with the bytes at device address `addr` of `device`.
    fn read_into(&self, device: u32, addr: u64, buf: &mut [u8]) -> Result<(), CallError>;
    /// Copies `data` to device address `addr` of `device`.
    fn write(&self, device: u32, addr: u64, data: &[u8]) -> Result<(), CallError>;
    /// How the devices' process ended, if it has (never, for this rank's own process).
    fn died(&self) -> Option<String>;
    /// The process the kernels run in.
    fn pid(&self) -> i32;
    /// Stops serving (at shutdown).
    fn stop(&self);
}

impl Backend for Worker {
    /// A small request's reply is read on this thread when it comes within a look
    /// ([`Worker::send_and_look`]): no hand-off through the client's reader thread. An
    /// image's load is only sent (it takes long, and would teach the look to give up early).
    fn send(&self, req: &Request, done: Done) {
        match req {
            Request::Load { .. } => Worker::send(self, req, done),
            _ => Worker::send_and_look(self, req, done),
        }
    }
    fn read_into(&self, device: u32, addr: u64, buf: &mut [u8]) -> Result<(), CallError> {
        Worker::read_into(self, device, addr, buf)
    }
    fn write(&self, device: u32, addr: u64, data: &[u8]) -> Result<(), CallError> {
        Worker::write(self, device, addr, data)
    }
    fn died(&self) -> Option<String> {
        Worker::died(self)
    }
    fn pid(&self) -> i32 {
        Worker::pid(self)
    }
    fn stop(&self) {
        Worker::stop(self)
    }
}

/// A launch: runs the kernel, and returns what delivers its result.
pub type Job = Box<dyn FnOnce() -> Deliver + Send>;
pub type Deliver = Box<dyn FnOnce() + Send>;

/// Kernel threads: each runs one launch at a time; one more starts when a launch finds none
/// idle, so a long kernel never holds up another (as the worker's threads do).
#[derive(Default)]
struct Kernels {
    queue: Mutex<Queue>,
    ready: Condvar,
}

#[derive(Default)]
struct Queue {
    jobs: VecDeque<Job>,
    /// Threads waiting for a job.
    idle: usize,
}

impl Kernels {
    fn run(self: &Arc<Self>, job: Job) {
        let mut q = self.queue.lock().unwrap_or_else(PoisonError::into_inner);
        q.jobs.push_back(job);
        // Each idle thread takes one job.
        let spawn = q.jobs.len() > q.idle;
        drop(q);
        if !spawn {
            self.ready.notify_one();
            return;
        }
        let me = self.clone();
        let started = std::thread::Builder::new()
            .name("omp-mpi-kernel".into())
            .stack_size(serve::kernel_stack_size())
            .spawn(move || {
                crate::slice::shorten_this_thread();
                me.serve()
            });
        if let Err(e) = started {
            eprintln!("offload-mpi-device: cannot start a thread: {e}");
            std::process::exit(1);
        }
    }

    /// A kernel thread: runs jobs as they come.
    fn serve(&self) {
        let mut q = self.queue.lock().unwrap_or_else(PoisonError::into_inner);
        loop {
            if let Some(job) = q.jobs.pop_front() {
                drop(q);
                job()();
                q = self.queue.lock().unwrap_or_else(PoisonError::into_inner);
                continue;
            }
            q.idle += 1;
            q = self.ready.wait_while(q, |q| q.jobs.is_empty()).unwrap_or_else(PoisonError::into_inner);
            q.idle -= 1;
        }
    }
}

/// This rank's own devices, served in its process.
pub struct InProcess {
    devs: Arc<Vec<Arc<dyn Device>>>,
    capture: Arc<Capture>,
    kernels: Arc<Kernels>,
    /// The rank's pid (a process forked by a kernel has another).
    pid: u32,
}

impl InProcess {
    /// Opens `devices` devices of `plugin` here, and captures this process's fd 1 and 2:
    /// what kernels (and this rank) print goes to `output` (`true`: stderr), and what was
    /// printed before a reply reaches `output` before the reply's `done` runs.
    pub fn start(
        plugin: &dyn Plugin,
        devices: u32,
        output: impl Fn(bool, &[u8]) + Send + Sync + 'static,
    ) -> std::io::Result<InProcess> {
        let devs = (0..devices as usize)
            .map(|i| plugin.open_device(i).map(Arc::from))
            .collect::<Result<Vec<Arc<dyn Device>>, _>>()
            .map_err(|e| std::io::Error::other(e.to_string()))?;
        let sink: OutputSink = Box::new(move |tag, bytes| {
            output(tag == wire::OUT_STDERR, bytes);
            Ok(())
        });
        let capture = Capture::start(sink)?;
        omp_worker::forks::watch();
        Ok(InProcess { devs: Arc::new(devs), capture, kernels: Arc::default(), pid: std::process::id() })
    }

    /// The devices served (their memory is this process's: [`crate::direct::DeviceMemory`]).
    pub fn devices(&self) -> Arc<Vec<Arc<dyn Device>>> {
        self.devs.clone()
    }

    fn device(&self, index: u32) -> Result<&Arc<dyn Device>, CallError> {
        self.devs.get(index as usize).ok_or_else(|| CallError::Failed(format!("no device {index}")))
    }
}

/// Completes `done` with a request's result (as the worker would reply) after what the
/// request printed went out.
fn complete(capture: &Capture, result: Result<Vec<u8>, String>, expect: Expect, done: Done) {
    // What the request printed (a kernel, an image's constructors) goes out before its reply
    // (C streams are buffered when they are pipes).
    // SAFETY: fflush(NULL) flushes every open output stream; it takes no pointer of ours.
    unsafe { libc::fflush(std::ptr::null_mut()) };
    capture.drain();
    let (tag, payload) = match result {
        Ok(p) => (wire::STATUS_OK, p),
        Err(e) => (wire::STATUS_ERR, e.into_bytes()),
    };
    // The worker's own check of its replies: a reply that does not fit its request is a bug
    // here, said as a failed call.
    done(omp_worker::client::decode(expect, tag, payload).unwrap_or_else(|e| Err(CallError::Failed(e))));
}

/// A process forked by a kernel that returned from it is a copy of the rank (its MPI state
/// included): it must not go on as the rank. It is ended, saying so.
fn forked_child_ends(rank: u32) {
    if !omp_worker::forks::is_copy_of(rank) {
        return;
    }
    let msg = b"omptarget warning: a process forked inside a target region on an MPI device served in process (a \
copy of the device rank, not of the program) returned from the region; it was ended (end it with _exit or exec)\n";
    // SAFETY: writes our own buffer to fd 2, then ends this process without running exit
    // handlers (MPI's among them) or flushing the streams it copied from the rank.
    unsafe {
        libc::write(2, msg.as_ptr().cast(), msg.len());
        libc::_exit(0);
    }
}

impl Backend for InProcess {
    fn send(&self, req: &Request, done: Done) {
        if let Some(job) = self.send_or_hand_back(req, done) {
            self.kernels.run(job);
        }
    }

    fn send_or_hand_back(&self, req: &Request, done: Done) -> Option<Job> {
        if let Request::Read { len, .. } = *req {
            if len > wire::MAX_READ as u64 {
                let e = format!("a relayed read of {len} bytes exceeds the limit of {}", wire::MAX_READ);
                done(Err(CallError::Failed(e)));
                return None;
            }
        }
        let (op, head, body, expect) = req.encode();
        let payload = [head.as_slice(), body].concat();
        if op != wire::OP_LAUNCH {
            complete(&self.capture, serve::execute(&self.devs, op, &payload), expect, done);
            return None;
        }
        let (devs, capture) = (self.devs.clone(), self.capture.clone());
        let rank = self.pid;
        Some(Box::new(move || {
            let result = serve::execute(&devs, op, &payload);
            forked_child_ends(rank);
            Box::new(move || complete(&capture, result, expect, done))
        }))
    }

    fn read_into(&self, device: u32, addr: u64, buf: &mut [u8]) -> Result<(), CallError> {
        let dev = self.device(device)?;
        // SAFETY: `buf` is ours, `buf.len()` writable bytes; the device range is the program's
        // to vouch for, as for the worker's copies (its runtime checked it against what it
        // allocated). Device memory is this process's.
        unsafe { dev.retrieve(buf.as_mut_ptr() as usize, addr as usize, buf.len()) }
            .map_err(|e| CallError::Failed(e.to_string()))
    }

    fn write(&self, device: u32, addr: u64, data: &[u8]) -> Result<(), CallError> {
        let dev = self.device(device)?;
        // SAFETY: `data` is ours, `data.len()` readable bytes; the device range as above.
        unsafe { dev.submit(addr as usize, data.as_ptr() as usize, data.len()) }
            .map_err(|e| CallError::Failed(e.to_string()))
    }

    fn died(&self) -> Option<String> {
        None
    }

    fn pid(&self) -> i32 {
        self.pid as i32
    }

    fn stop(&self) {
        // What was printed last goes out; kernel threads end with the process.
        // SAFETY: fflush(NULL) flushes every open output stream; it takes no pointer of ours.
        unsafe { libc::fflush(std::ptr::null_mut()) };
        self.capture.drain();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;
    use std::time::Duration;

    #[test]
    fn a_running_kernel_never_holds_up_the_next_launch() {
        let kernels = Arc::new(Kernels::default());
        let (release, held) = mpsc::channel::<()>();
        let (done, finished) = mpsc::channel::<&str>();
        let first_done = done.clone();
        // The first launch runs until the second has finished.
        kernels.run(Box::new(move || {
            held.recv().unwrap();
            Box::new(move || first_done.send("first").unwrap())
        }));
        kernels.run(Box::new(move || Box::new(move || done.send("second").unwrap())));
        assert_eq!(finished.recv_timeout(Duration::from_secs(20)), Ok("second"));
        release.send(()).unwrap();
        assert_eq!(finished.recv_timeout(Duration::from_secs(20)), Ok("first"));
    }

    #[test]
    fn idle_kernel_threads_are_reused() {
        let kernels = Arc::new(Kernels::default());
        let (done, finished) = mpsc::channel::<std::thread::ThreadId>();
        let mut threads = std::collections::HashSet::new();
        for _ in 0..20 {
            let done = done.clone();
            let ran_on = std::thread::current;
            kernels.run(Box::new(move || {
                let id = ran_on().id();
                Box::new(move || done.send(id).unwrap())
            }));
            threads.insert(finished.recv_timeout(Duration::from_secs(20)).unwrap());
            // The next launch comes once the thread is back waiting (a launch that comes
            // sooner starts another one, by design; on a loaded machine that can be every time).
            let start = std::time::Instant::now();
            while kernels.queue.lock().unwrap_or_else(PoisonError::into_inner).idle == 0 {
                assert!(start.elapsed() < Duration::from_secs(20), "the kernel thread never came back");
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        // One launch at a time, each after the last one's thread is idle: that thread runs them all.
        assert_eq!(threads.len(), 1, "{} threads for 20 launches one after another", threads.len());
    }
}
