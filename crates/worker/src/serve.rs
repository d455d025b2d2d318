//! The worker process's side: serve requests from the parent until it closes the pipe.
//!
//! Requests arrive on stdin and replies leave on the original stdout. The worker's own fd 1
//! and fd 2 become pipes it reads itself: what its code writes there goes to the parent as
//! output frames, in order with the replies (all output written before a reply precedes
//! it), so kernels' `printf` can neither corrupt the framing nor be lost. A launch runs on the thread that read
//! it while another thread takes over reading, so a long kernel never holds up allocations
//! or copies.

pub use crate::capture::{Capture, OutputSink};
use crate::slice;
use crate::spin::SpinWait;
use crate::wire::{self, Dec, Enc};
use omp_plugin::{AllocKind, Device, ImageId, KernelId, LaunchConfig, Plugin};
use omp_sync::Mutex;
use std::ffi::CString;
use std::fs::File;
use std::io::{BufReader, BufWriter};
use std::os::fd::{AsRawFd, FromRawFd};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

type Out = Arc<Mutex<BufWriter<File>>>;

/// Runs every kernel of a worker: given the launch to run, runs it (and whatever must
/// happen around it in this process: check mode's page protections).
pub type AroundLaunch = fn(run: &mut dyn FnMut());

/// Runs the worker until the parent closes the pipe: opens `devices` devices of `plugin`.
/// `parent` is the parent's pid (the worker ends with it). Returns the exit status.
/// What kernels print goes to the parent as output frames, before the reply that follows.
pub fn main(plugin: &dyn Plugin, devices: usize, parent: i32) -> i32 {
    main_around_launches(plugin, devices, parent, |run| run())
}

/// [`main`], with every launch run through `around_launch`.
pub fn main_around_launches(plugin: &dyn Plugin, devices: usize, parent: i32, around_launch: AroundLaunch) -> i32 {
    if std::env::var_os(crate::spin::YIELD_ENV).is_some() {
        crate::spin::always_yield();
    }
    if let Err(e) = die_with_parent(parent) {
        eprintln!("device worker: {e}");
        return 1;
    }
    let out = match private_stdout() {
        Ok(f) => Arc::new(Mutex::new(BufWriter::with_capacity(1 << 16, f))),
        Err(e) => {
            eprintln!("device worker: cannot set up its pipe: {e}");
            return 1;
        }
    };
    let capture = match Capture::start(frames_to(out.clone())) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("device worker: cannot capture its output: {e}");
            return 1;
        }
    };
    let devs: Vec<Arc<dyn Device>> = match (0..devices).map(|i| plugin.open_device(i).map(Arc::from)).collect() {
        Ok(d) => d,
        Err(e) => {
            eprintln!("device worker: {e}");
            return 1;
        }
    };
    let input = match private_stdin() {
        Ok(f) => f,
        Err(e) => {
            eprintln!("device worker: cannot read its pipe: {e}");
            return 1;
        }
    };
    // Output a kernel wrote before it called exit() reaches the parent.
    let _ = CAPTURE.set(capture.clone());
    // SAFETY: atexit takes a plain `extern "C" fn()` that lives as long as the process.
    unsafe { libc::atexit(drain_at_exit) };
    crate::forks::watch();
    let shared = Arc::new(Shared {
        input: Mutex::new(BufReader::with_capacity(1 << 20, input)),
        spin: SpinWait::default(),
        waiting: AtomicUsize::new(0),
        bell: doorbell(),
        at_bell: AtomicUsize::new(0),
        // SAFETY: getpid has no preconditions.
        pid: unsafe { libc::getpid() },
        devs,
        out,
        capture,
        around_launch,
    });
    // Kernels run on threads of their own with the stack OpenMP's threads get (OMP_STACKSIZE),
    // not on this one, whose stack is the system's (`ulimit -s`).
    let first = shared.clone();
    match kernel_thread().spawn(move || serve(&first)) {
        Ok(t) => t.join().unwrap_or(1),
        Err(e) => {
            eprintln!("device worker: cannot start a thread: {e}");
            1
        }
    }
}

/// The stack of a thread that runs kernels: `OMP_STACKSIZE` (or `KMP_STACKSIZE`), read as
/// libomp reads it (a number with an optional B, K, M or G; K when none), else libomp's own
/// default for x86-64, 4 MiB; at least 64 KiB.
pub fn kernel_stack_size() -> usize {
    const DEFAULT: usize = 4 << 20;
    ["OMP_STACKSIZE", "KMP_STACKSIZE"]
        .iter()
        .find_map(|k| std::env::var(k).ok().and_then(|v| parse_stack_size(&v)))
        .unwrap_or(DEFAULT)
        .max(64 << 10)
}

/// An `OMP_STACKSIZE` value in bytes: `512`, `512K`, `8M`, `1g`, ` 64 B `.
fn parse_stack_size(v: &str) -> Option<usize> {
    let v = v.trim();
    let split = v.find(|c: char| !c.is_ascii_digit()).unwrap_or(v.len());
    let n: usize = v[..split].parse().ok()?;
    let unit = match v[split..].trim().to_ascii_uppercase().as_str() {
        "B" => 1,
        "" | "K" => 1 << 10,
        "M" => 1 << 20,
        "G" => 1 << 30,
        _ => return None,
    };
    n.checked_mul(unit)
}

/// A builder for a thread that runs kernels.
fn kernel_thread() -> std::thread::Builder {
    std::thread::Builder::new().stack_size(kernel_stack_size())
}

/// What the worker's threads share. Threads take turns reading requests (leader/follower):
/// the reader answers control requests itself and keeps reading; for a launch it hands the
/// input to another thread (starting one when none waits) and runs the kernel itself, so a
/// launch costs no thread hand-off and a long kernel never holds up the requests behind it.
struct Shared {
    input: Mutex<BufReader<File>>,
    /// How long the reader looks for the next request before it blocks (a launch in a loop
    /// then finds the worker awake).
    spin: SpinWait,
    /// Threads waiting to read (or about to).
    waiting: AtomicUsize,
    /// The parent's doorbell ([`crate::wire::DOORBELL_FD`]), when it gave one: a byte for
    /// each request it sends while others are outstanding. With it, a launch needs no
    /// hand-off: a thread waiting on the bell takes over reading only when a request comes
    /// while the kernel runs.
    bell: Option<File>,
    /// Threads waiting on the doorbell.
    at_bell: AtomicUsize,
    /// The worker's own pid (a process forked by a kernel has another).
    pid: i32,
    devs: Vec<Arc<dyn Device>>,
    out: Out,
    capture: Arc<Capture>,
    around_launch: AroundLaunch,
}

fn serve(shared: &Arc<Shared>) -> i32 {
    answer_promptly();
    loop {
        let mut input = take_input(shared);
        let frame = loop {
            let read = |input: &mut BufReader<File>| wire::read_frame(input, wire::MAX_REQUEST_FRAME);
            let next = if input.buffer().is_empty() {
                let fd = input.get_ref().as_raw_fd();
                shared.spin.wait(fd, || read(&mut input))
            } else {
                read(&mut input)
            };
            let frame = match next {
                Ok(Some(f)) => f,
                // The parent closed the pipe (or broke it): the session is over.
                Ok(None) => std::process::exit(0),
                Err(e) => {
                    eprintln!("device worker: {e}");
                    std::process::exit(1);
                }
            };
            if frame.tag == wire::OP_LAUNCH {
                break frame;
            }
            let result = handle(&shared.devs, frame.tag, &frame.payload).map_err(|e| e.to_string());
            if frame.tag == wire::OP_LOAD {
                // Global constructors may print.
                // SAFETY: fflush(NULL) flushes every open output stream; it takes no pointer of ours.
                unsafe { libc::fflush(std::ptr::null_mut()) };
            }
            shared.capture.drain();
            reply(&shared.out, frame.id, result);
        };
        drop(input);
        hand_off(shared);
        let mut result = Err(String::from("the launch did not run"));
        (shared.around_launch)(&mut || result = launch(&shared.devs, &frame.payload).map_err(|e| e.to_string()));
        forked_child_ends(shared.pid);
        // What the kernel printed goes out before its reply (C streams are buffered when
        // they are pipes).
        // SAFETY: fflush(NULL) flushes every open output stream; it takes no pointer of ours.
        unsafe { libc::fflush(std::ptr::null_mut()) };
        shared.capture.drain();
        reply(&shared.out, frame.id, result);
    }
}

/// Gives the calling thread, one that reads requests (and runs the kernels they launch), the
/// short time slice `LIBOMPTARGET_ISOLATE_SLICE_US` asks for, if it does (`slice.rs`); the
/// kernel's own threads, which it starts, keep the default.
fn answer_promptly() {
    if let Some(us) = slice::slice_from_env() {
        slice::shorten_this_thread(us);
    }
}

/// Takes the reader role. With a doorbell: at once if nobody reads (a thread back from a
/// kernel goes on reading), else after the bell rings.
fn take_input(shared: &Shared) -> omp_sync::MutexGuard<'_, BufReader<File>> {
    let Some(bell) = &shared.bell else {
        shared.waiting.fetch_add(1, Ordering::AcqRel);
        let input = shared.input.lock();
        shared.waiting.fetch_sub(1, Ordering::AcqRel);
        return input;
    };
    if let Some(input) = shared.input.try_lock() {
        return input;
    }
    wait_for_bell(shared, bell);
    shared.input.lock()
}

/// Waits for one ring of the doorbell; its end means the parent is gone.
fn wait_for_bell(shared: &Shared, mut bell: &File) {
    use std::io::Read;
    shared.at_bell.fetch_add(1, Ordering::AcqRel);
    let mut b = [0u8; 1];
    loop {
        match bell.read(&mut b) {
            Ok(1) => break,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            _ => std::process::exit(0),
        }
    }
    shared.at_bell.fetch_sub(1, Ordering::AcqRel);
}

/// Before a kernel runs on this thread: some thread must be able to read the requests that
/// come meanwhile (a thread waiting on the doorbell, or one waiting for the input).
fn hand_off(shared: &Arc<Shared>) {
    let waiting = match &shared.bell {
        Some(_) => &shared.at_bell,
        None => &shared.waiting,
    };
    if waiting.load(Ordering::Acquire) == 0 {
        let next = shared.clone();
        let spawned = kernel_thread().spawn(move || {
            answer_promptly();
            if let Some(bell) = &next.bell {
                wait_for_bell(&next, bell);
            }
            serve(&next)
        });
        if let Err(e) = spawned {
            eprintln!("device worker: cannot start a thread: {e}");
            std::process::exit(1);
        }
    }
}

/// The doorbell the parent passed, moved to a descriptor closed on exec.
fn doorbell() -> Option<File> {
    let fd = std::env::var("OMP_WORKER_DOORBELL").ok()?.parse::<i32>().ok()?;
    if fd != wire::DOORBELL_FD {
        return None;
    }
    // SAFETY: fcntl on a descriptor number the parent named; F_DUPFD_CLOEXEC fails on a
    // closed one. The original is closed: it is ours, and the copy replaces it.
    let moved = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 3) };
    if moved < 0 {
        return None;
    }
    // SAFETY: as above.
    unsafe { libc::close(fd) };
    // SAFETY: `moved` is a fresh descriptor that nothing else owns.
    Some(unsafe { File::from_raw_fd(moved) })
}

fn reply(out: &Out, id: u64, result: Result<Vec<u8>, String>) {
    let mut w = out.lock();
    let r = match result {
        Ok(p) => wire::write_frame(&mut *w, id, wire::STATUS_OK, &[&p]),
        Err(e) => wire::write_frame(&mut *w, id, wire::STATUS_ERR, &[e.as_bytes()]),
    };
    if r.is_err() {
        // The parent is gone: nothing left to serve.
        std::process::exit(0);
    }
}

fn device(devs: &[Arc<dyn Device>], index: u32) -> Result<&Arc<dyn Device>, String> {
    devs.get(index as usize).ok_or_else(|| format!("no device {index}"))
}

fn len(v: u64) -> Result<usize, String> {
    usize::try_from(v).map_err(|_| format!("length {v} does not fit this machine"))
}

/// One request, handled as the worker handles it: `op` and `payload` as [`crate::Request::encode`]
/// makes them, the reply's payload or the error's text as the worker would send it. For a
/// process that serves requests itself (an MPI device rank's `--in-process` mode); a launch
/// runs its kernel on the calling thread.
pub fn execute(devs: &[Arc<dyn Device>], op: u8, payload: &[u8]) -> Result<Vec<u8>, String> {
    let result = if op == wire::OP_LAUNCH { launch(devs, payload) } else { handle(devs, op, payload) };
    result.map_err(|e| e.to_string())
}

fn handle(devs: &[Arc<dyn Device>], op: u8, payload: &[u8]) -> Result<Vec<u8>, Box<dyn std::error::Error>> {
    let mut d = Dec(payload);
    Ok(match op {
        wire::OP_LOAD => {
            let dev = device(devs, d.u32()?)?;
            let image = dev.load_image(d.rest())?;
            Enc::default().u64(image.0 as u64).0
        }
        wire::OP_SYMBOL => {
            let dev = device(devs, d.u32()?)?;
            let image = ImageId(len(d.u64()?)?);
            let kernel = d.u8()? != 0;
            let name = CString::new(d.rest())?;
            if kernel {
                Enc::default().u64(dev.kernel(image, &name)?.raw() as u64).u64(0).0
            } else {
                let global = dev.global(image, &name)?;
                Enc::default().u64(global.addr as u64).u64(global.size as u64).0
            }
        }
        wire::OP_ALLOC => {
            let dev = device(devs, d.u32()?)?;
            let size = len(d.u64()?)?;
            Enc::default().u64(dev.alloc(size, AllocKind::Device)? as u64).0
        }
        wire::OP_FREE => {
            let dev = device(devs, d.u32()?)?;
            dev.free(len(d.u64()?)?, AllocKind::Device)?;
            Vec::new()
        }
        // The parent checked these ranges against what it allocated; the device does the copy.
        // Were it wrong, what it harms is this process's memory, the device memory the worker
        // exists to hold apart from the parent's: device addresses here are the parent's to
        // vouch for, as the HAL's callers vouch for theirs.
        wire::OP_WRITE => {
            let dev = device(devs, d.u32()?)?;
            let addr = len(d.u64()?)?;
            let data = d.rest();
            // SAFETY: `data` is this request's payload: `data.len()` readable bytes; the
            // device range is the parent's (see above).
            unsafe { dev.submit(addr, data.as_ptr() as usize, data.len()) }?;
            Vec::new()
        }
        wire::OP_READ => {
            let dev = device(devs, d.u32()?)?;
            let addr = len(d.u64()?)?;
            let n = len(d.u64()?)?;
            if n > wire::MAX_READ {
                return Err(format!("a read of {n} bytes exceeds the limit of {}", wire::MAX_READ).into());
            }
            let mut buf = vec![0u8; n];
            // SAFETY: `buf` is ours and holds `n` writable bytes; the device range is the
            // parent's (see above).
            unsafe { dev.retrieve(buf.as_mut_ptr() as usize, addr, n) }?;
            buf
        }
        wire::OP_COPY => {
            let dev = device(devs, d.u32()?)?;
            let (dst, src, n) = (len(d.u64()?)?, len(d.u64()?)?, len(d.u64()?)?);
            // SAFETY: both device ranges are the parent's (see above).
            unsafe { dev.copy_within(dst, src, n) }?;
            Vec::new()
        }
        _ => return Err(format!("unknown worker op {op}").into()),
    })
}

fn launch(devs: &[Arc<dyn Device>], payload: &[u8]) -> Result<Vec<u8>, Box<dyn std::error::Error>> {
    let mut d = Dec(payload);
    let dev = device(devs, d.u32()?)?;
    let kernel = KernelId::new(len(d.u64()?)?);
    let with_dyn_ptr = d.u8()? != 0;
    let (num_teams, thread_limit) = (d.u32()?, d.u32()?);
    let n = d.u32()? as usize;
    if n > d.0.len() / 8 {
        return Err(format!("{n} kernel arguments announced, {} bytes sent", d.0.len()).into());
    }
    let args = (0..n).map(|_| d.u64().map(|v| v as usize)).collect::<Result<Vec<_>, _>>()?;
    let config = LaunchConfig {
        num_teams: [num_teams, 0, 0],
        thread_limit: [thread_limit, 0, 0],
        with_dyn_ptr,
        ..LaunchConfig::default()
    };
    // SAFETY: the parent sends back a kernel this worker resolved and the arguments the
    // compiler's map arrays gave it, device addresses of this process; a kernel that goes
    // wrong takes down this worker, never the parent (what the worker is for).
    unsafe { dev.launch(kernel, &args, &config) }?;
    Ok(Vec::new())
}

/// Ends the worker with its parent (SIGKILL on the parent's death).
fn die_with_parent(parent: i32) -> Result<(), String> {
    // SAFETY: prctl(PR_SET_PDEATHSIG) takes a signal number and changes only this process.
    if unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) } != 0 {
        return Err(format!("prctl failed: {}", std::io::Error::last_os_error()));
    }
    // SAFETY: getppid has no preconditions.
    if unsafe { libc::getppid() } != parent {
        return Err("the parent exited before the worker started".into());
    }
    Ok(())
}

/// A process forked by code in a target region that returned from the kernel: a copy of
/// the worker, not of the program. It must not answer for the worker: it is ended, saying so
/// (through the worker's captured stderr, which it shares).
fn forked_child_ends(worker: i32) {
    if !crate::forks::is_copy_of(worker as u32) {
        return;
    }
    let msg = b"omptarget warning: a process forked inside a target region on an isolated device (a copy of the \
device's process, not of the program) returned from the region; it was ended (end it with _exit or exec)\n";
    // SAFETY: writes our own buffer to fd 2, then ends this process without running exit
    // handlers or flushing the streams it copied from the worker.
    unsafe {
        libc::write(2, msg.as_ptr().cast(), msg.len());
        libc::_exit(0);
    }
}

/// The capture, for the exit handler.
static CAPTURE: std::sync::OnceLock<Arc<Capture>> = std::sync::OnceLock::new();

/// At the worker's exit (also a kernel's `exit()`): what was printed goes to the parent.
extern "C" fn drain_at_exit() {
    // A process a kernel forked shares the capture but is not the worker: it must not take
    // the worker's output (nor its locks, which another thread may have held at the fork).
    if crate::forks::forked() {
        return;
    }
    // SAFETY: fflush(NULL) flushes every open output stream; it takes no pointer of ours.
    unsafe { libc::fflush(std::ptr::null_mut()) };
    if let Some(c) = CAPTURE.get() {
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| c.drain()));
    }
}

/// Moves the request pipe (fd 0) to a private descriptor, closed on exec, and puts
/// `/dev/null` in its place: a program a kernel starts must not read the requests.
fn private_stdin() -> std::io::Result<File> {
    // SAFETY: fcntl on the process's own fd 0; the result is checked.
    let fd = unsafe { libc::fcntl(0, libc::F_DUPFD_CLOEXEC, 3) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: `fd` is a fresh descriptor that nothing else owns.
    let input = unsafe { File::from_raw_fd(fd) };
    let null = File::open("/dev/null")?;
    // SAFETY: dup2 replaces our own fd 0 with a descriptor we own.
    if unsafe { libc::dup2(null.as_raw_fd(), 0) } < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(input)
}

/// Moves the reply pipe (fd 1) to a fresh descriptor (fd 1 is then replaced by [`Capture`]).
fn private_stdout() -> std::io::Result<File> {
    // SAFETY: fcntl on the process's own fd 1; the result is checked.
    let fd = unsafe { libc::fcntl(1, libc::F_DUPFD_CLOEXEC, 3) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: `fd` is a fresh descriptor that nothing else owns.
    Ok(unsafe { File::from_raw_fd(fd) })
}

/// The worker's output: frames on its reply pipe.
fn frames_to(out: Out) -> OutputSink {
    Box::new(move |tag, bytes| wire::write_frame(&mut *out.lock(), 0, tag, &[bytes]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stack_sizes_are_read_as_libomp_reads_them() {
        assert_eq!(parse_stack_size("512"), Some(512 << 10), "kilobytes when no unit is given");
        assert_eq!(parse_stack_size("8M"), Some(8 << 20));
        assert_eq!(parse_stack_size(" 1g "), Some(1 << 30));
        assert_eq!(parse_stack_size("64 B"), Some(64));
        assert_eq!(parse_stack_size("4k"), Some(4096));
        assert_eq!(parse_stack_size("big"), None);
        assert_eq!(parse_stack_size("8X"), None);
    }
}
