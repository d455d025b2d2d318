//! The worker process's side: serve requests from the parent until it closes the pipe.
//!
//! Requests arrive on stdin and replies leave on the original stdout; the worker's own
//! fd 1 is pointed at its stderr first, so kernels' `printf` cannot corrupt the framing
//! (what reaches stderr is the parent's to forward). A launch runs on the thread that read
//! it while another thread takes over reading, so a long kernel never holds up allocations
//! or copies.

use crate::wire::{self, Dec, Enc};
use omp_plugin::{AllocKind, Device, ImageId, KernelId, LaunchConfig, Plugin};
use std::ffi::CString;
use std::fs::File;
use std::io::{BufReader, BufWriter};
use std::os::fd::FromRawFd;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

type Out = Arc<Mutex<BufWriter<File>>>;

/// Runs the worker until the parent closes the pipe: opens `devices` devices of `plugin`.
/// `parent` is the parent's pid (the worker ends with it). Returns the exit status.
/// What kernels print on their standard output goes to the worker's stderr.
pub fn main(plugin: &dyn Plugin, devices: usize, parent: i32) -> i32 {
    main_with_output(plugin, devices, parent, 2)
}

/// As [`main`], with kernels' standard output sent to descriptor `kernel_stdout` (an
/// isolated local device passes the program's own stdout, so that a kernel's `printf`
/// lands where it would on the host device).
pub fn main_with_output(plugin: &dyn Plugin, devices: usize, parent: i32, kernel_stdout: i32) -> i32 {
    if let Err(e) = die_with_parent(parent) {
        eprintln!("device worker: {e}");
        return 1;
    }
    let out = match private_stdout(kernel_stdout) {
        Ok(f) => Arc::new(Mutex::new(BufWriter::with_capacity(1 << 16, f))),
        Err(e) => {
            eprintln!("device worker: cannot set up its pipe: {e}");
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
    use std::os::fd::AsFd;
    let input = match std::io::stdin().as_fd().try_clone_to_owned() {
        Ok(fd) => File::from(fd),
        Err(e) => {
            eprintln!("device worker: cannot read its pipe: {e}");
            return 1;
        }
    };
    let shared = Arc::new(Shared {
        input: Mutex::new(BufReader::with_capacity(1 << 20, input)),
        waiting: AtomicUsize::new(0),
        devs,
        out,
    });
    serve(&shared)
}

/// What the worker's threads share. Threads take turns reading requests (leader/follower):
/// the reader answers control requests itself and keeps reading; for a launch it hands the
/// input to another thread (starting one when none waits) and runs the kernel itself, so a
/// launch costs no thread hand-off and a long kernel never holds up the requests behind it.
struct Shared {
    input: Mutex<BufReader<File>>,
    /// Threads waiting to read (or about to).
    waiting: AtomicUsize,
    devs: Vec<Arc<dyn Device>>,
    out: Out,
}

fn serve(shared: &Arc<Shared>) -> i32 {
    loop {
        shared.waiting.fetch_add(1, Ordering::AcqRel);
        let mut input = shared.input.lock().unwrap_or_else(|p| p.into_inner());
        shared.waiting.fetch_sub(1, Ordering::AcqRel);
        let frame = loop {
            let frame = match wire::read_frame(&mut *input, wire::MAX_REQUEST_FRAME) {
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
            reply(&shared.out, frame.id, result);
        };
        drop(input);
        if shared.waiting.load(Ordering::Acquire) == 0 {
            let next = shared.clone();
            std::thread::spawn(move || serve(&next));
        }
        let result = launch(&shared.devs, &frame.payload).map_err(|e| e.to_string());
        // What the kernel printed goes out before its reply (C streams are buffered when
        // they are pipes).
        // SAFETY: fflush(NULL) flushes every open output stream; it takes no pointer of ours.
        unsafe { libc::fflush(std::ptr::null_mut()) };
        reply(&shared.out, frame.id, result);
    }
}

fn reply(out: &Out, id: u64, result: Result<Vec<u8>, String>) {
    let mut w = out.lock().unwrap_or_else(|p| p.into_inner());
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
                Enc::default().u64(dev.kernel(image, &name)?.0 as u64).u64(0).0
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
        wire::OP_WRITE => {
            let dev = device(devs, d.u32()?)?;
            let addr = len(d.u64()?)?;
            let data = d.rest();
            // SAFETY: `data` is this request's payload: `data.len()` readable bytes.
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
            // SAFETY: `buf` is ours and holds `n` writable bytes.
            unsafe { dev.retrieve(buf.as_mut_ptr() as usize, addr, n) }?;
            buf
        }
        wire::OP_COPY => {
            let dev = device(devs, d.u32()?)?;
            let (dst, src, n) = (len(d.u64()?)?, len(d.u64()?)?, len(d.u64()?)?);
            dev.copy_within(dst, src, n)?;
            Vec::new()
        }
        _ => return Err(format!("unknown worker op {op}").into()),
    })
}

fn launch(devs: &[Arc<dyn Device>], payload: &[u8]) -> Result<Vec<u8>, Box<dyn std::error::Error>> {
    let mut d = Dec(payload);
    let dev = device(devs, d.u32()?)?;
    let kernel = KernelId(len(d.u64()?)?);
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
    dev.launch(kernel, &args, &config)?;
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

/// Moves the reply pipe (fd 1) to a fresh descriptor and points fd 1 at `kernel_stdout`.
fn private_stdout(kernel_stdout: i32) -> std::io::Result<File> {
    if kernel_stdout <= 1 {
        return Err(std::io::Error::other(format!("descriptor {kernel_stdout} cannot be the kernels' stdout")));
    }
    // SAFETY: dup/dup2 on the process's own standard descriptors; results are checked.
    let fd = unsafe { libc::fcntl(1, libc::F_DUPFD_CLOEXEC, 3) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: as above; dup2 fails (checked) when `kernel_stdout` is not open.
    if unsafe { libc::dup2(kernel_stdout, 1) } < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: `fd` is a fresh descriptor that nothing else owns.
    Ok(unsafe { File::from_raw_fd(fd) })
}
