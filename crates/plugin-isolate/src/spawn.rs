//! Starting the worker process and ending it with the program: where `offload-worker` is,
//! the environment it gets, the thread that forks it, and the handlers that stop and reap
//! it at exit or on a fatal signal.

use crate::{arena, WORKER_NAME};
use omp_plugin_host::NUM_DEVICES;
use omp_sync::Mutex;
use omp_worker::{SpawnOptions, Worker};
use std::ffi::{CStr, OsString};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// The path of the loaded object that contains `addr`, if any.
fn object_of(addr: *const libc::c_void) -> Option<PathBuf> {
    // SAFETY: an all-zero Dl_info is a valid value of this plain C struct.
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    // SAFETY: dladdr only compares `addr` with the loaded objects' ranges and writes `info`.
    if unsafe { libc::dladdr(addr, &mut info) } == 0 || info.dli_fname.is_null() {
        return None;
    }
    // SAFETY: a non-NULL dli_fname is the loader's NUL-terminated path of the object, valid
    // while the object is loaded; it is copied at once.
    let name = unsafe { CStr::from_ptr(info.dli_fname) };
    let path = PathBuf::from(<std::ffi::OsStr as std::os::unix::ffi::OsStrExt>::from_bytes(name.to_bytes()));
    std::fs::canonicalize(&path).ok().or(Some(path))
}

/// The library (or executable) this code was linked into.
pub(crate) fn own_object() -> Option<PathBuf> {
    object_of(own_object as fn() -> Option<PathBuf> as *const libc::c_void)
}

/// The loaded object providing `symbol`, found in the global scope.
pub(crate) fn object_providing(symbol: &CStr) -> Option<PathBuf> {
    // SAFETY: dlsym with RTLD_DEFAULT and a NUL-terminated name; NULL when not found.
    let addr = unsafe { libc::dlsym(libc::RTLD_DEFAULT, symbol.as_ptr()) };
    if addr.is_null() {
        return None;
    }
    object_of(addr)
}

/// The worker's library path: the directories of this runtime and of libomp first, so the
/// images it loads bind to the same libraries as the program's.
fn worker_library_path() -> OsString {
    let mut dirs: Vec<PathBuf> = Vec::new();
    for obj in [own_object(), object_providing(c"__kmpc_fork_call")].into_iter().flatten() {
        if let Some(d) = obj.parent() {
            if !dirs.iter().any(|x| x == d) {
                dirs.push(d.to_path_buf());
            }
        }
    }
    let mut path = OsString::new();
    for d in &dirs {
        if !path.is_empty() {
            path.push(":");
        }
        path.push(d.as_os_str());
    }
    if let Some(old) = std::env::var_os("LD_LIBRARY_PATH").filter(|o| !o.is_empty()) {
        if !path.is_empty() {
            path.push(":");
        }
        path.push(old);
    }
    path
}

/// Starts the worker. The fork happens on a thread that never ends: the worker's
/// `PR_SET_PDEATHSIG` fires when the *thread* that forked it exits, and the first device use
/// may come from any thread of the program.
pub(crate) fn start(
    exe: &Path,
    check: bool,
    gpu_limits: bool,
) -> std::result::Result<(Worker, Option<arena::Arena>, Arc<Exited>), String> {
    let cannot = |why: String| {
        format!(
            "cannot start the isolated device's worker {}: {why} (LIBOMPTARGET_ISOLATE=1 runs kernels in \
             {WORKER_NAME}, looked for next to the runtime library)",
            exe.display()
        )
    };
    match std::fs::metadata(exe) {
        Ok(m) if m.is_file() => {}
        Ok(_) => return Err(cannot("not a file".into())),
        Err(e) => return Err(cannot(e.to_string())),
    }
    let mut cmd = std::process::Command::new(exe);
    cmd.arg("--worker").arg(NUM_DEVICES.to_string()).arg(std::process::id().to_string());
    // The worker's own runtime (loaded by the images) must neither isolate nor reach a server.
    for var in
        ["LIBOMPTARGET_ISOLATE", "LIBOMPTARGET_RPC_ADDRESS", "LIBOMPTARGET_RPC_TOKEN", "LIBOMPTARGET_RPC_TOKEN_FILE"]
    {
        cmd.env_remove(var);
    }
    cmd.env("LD_LIBRARY_PATH", worker_library_path());
    cmd.stderr(std::process::Stdio::inherit());
    // Device memory shared with the worker, as large as this machine's memory (sparse).
    let mut arena = arena::Arena::create(arena::machine_size()).ok();
    let arena_fd = arena.as_ref().map_or(-1, |a| a.fd());
    if let Some(a) = &mut arena {
        cmd.arg("--arena").arg(a.base().to_string()).arg(a.size().to_string());
        if check {
            a.enable_checks();
            cmd.arg("--check");
            if gpu_limits {
                cmd.arg("--gpu-limits");
            }
        }
    }
    // SAFETY: the closure runs in the forked child before exec and calls only
    // async-signal-safe functions (dup2, setrlimit) on plain values.
    unsafe {
        cmd.pre_exec(move || {
            if arena_fd >= 0 && libc::dup2(arena_fd, arena::ARENA_FD) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            // A crashing kernel leaves no core file behind.
            let none = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
            libc::setrlimit(libc::RLIMIT_CORE, &none);
            Ok(())
        });
    }
    let (tx, rx) = std::sync::mpsc::sync_channel(1);
    let exited = Arc::new(Exited::default());
    let signal = exited.clone();
    let on_exit: omp_worker::client::OnExit = Box::new(move |_: &str| signal.set());
    reap_on_fatal_signals();
    let keeper = std::thread::Builder::new().name("omp-isolate".into()).spawn(move || {
        // What kernels print reaches the program's own stdout and stderr, before the
        // launch that printed it returns (the program flushed its own output first).
        let on_output: omp_worker::client::OnOutput = Box::new(|is_err: bool, bytes: &[u8]| {
            write_all(if is_err { 2 } else { 1 }, bytes);
        });
        let opts = SpawnOptions { direct_copies: true, on_exit: Some(on_exit), on_output: Some(on_output) };
        let r = Worker::spawn(cmd, opts);
        let _ = tx.send(r);
        // This thread is the worker's parent for PR_SET_PDEATHSIG: it stays.
        loop {
            std::thread::park();
        }
    });
    let r = match keeper {
        Ok(_) => rx.recv().unwrap_or_else(|_| Err(std::io::Error::other("the starting thread ended"))),
        Err(e) => Err(e),
    };
    let w = r.map_err(|e| cannot(e.to_string()))?;
    exited.pid.store(w.pid(), Ordering::SeqCst);
    // (With more workers than slots, one is not reaped on an abort; PR_SET_PDEATHSIG still
    // ends it.)
    fatal::watch(w.pid());
    if exited.is_set() {
        fatal::forget(w.pid());
    }
    Ok((w, arena, exited))
}

/// Kills and reaps the running workers when the program dies of a signal it does not handle
/// (an abort: `OMP_TARGET_OFFLOAD=MANDATORY`'s fatal error, a failed `assert`; SIGTERM,
/// SIGINT, SIGHUP), so no worker is left as a zombie for an init that may not reap orphans.
fn reap_on_fatal_signals() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(fatal::install);
}

mod fatal {
    use std::sync::atomic::{AtomicI32, Ordering};

    /// Running workers' pids (0: free slot).
    static PIDS: [AtomicI32; 8] = [const { AtomicI32::new(0) }; 8];
    /// The process that installed the handler (a forked child inherits it, not the workers).
    static OWNER: AtomicI32 = AtomicI32::new(0);
    const SIGNALS: [i32; 4] = [libc::SIGABRT, libc::SIGTERM, libc::SIGINT, libc::SIGHUP];

    pub fn watch(pid: i32) {
        let _ = PIDS.iter().any(|s| s.compare_exchange(0, pid, Ordering::SeqCst, Ordering::SeqCst).is_ok());
    }

    /// The worker `pid` was reaped: its pid may be reused, never signal it again.
    pub fn forget(pid: i32) {
        for s in &PIDS {
            let _ = s.compare_exchange(pid, 0, Ordering::SeqCst, Ordering::SeqCst);
        }
    }

    pub fn install() {
        // SAFETY: getpid has no preconditions.
        OWNER.store(unsafe { libc::getpid() }, Ordering::SeqCst);
        for sig in SIGNALS {
            // SAFETY: sigaction is plain data; an all-zero value is valid and filled below.
            let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
            // SAFETY: querying the current disposition (NULL new action).
            if unsafe { libc::sigaction(sig, std::ptr::null(), &mut old) } != 0 || old.sa_sigaction != libc::SIG_DFL {
                // The program handles (or ignores) it itself: leave it alone.
                continue;
            }
            // SAFETY: as above.
            let mut act: libc::sigaction = unsafe { std::mem::zeroed() };
            act.sa_sigaction = on_signal as extern "C" fn(i32) as libc::sighandler_t;
            act.sa_flags = libc::SA_RESETHAND | libc::SA_RESTART;
            // SAFETY: sa_mask is initialised by sigemptyset; the handler only calls
            // async-signal-safe functions (getpid, kill, waitpid, raise).
            unsafe {
                libc::sigemptyset(&mut act.sa_mask);
                libc::sigaction(sig, &act, std::ptr::null_mut());
            }
        }
    }

    extern "C" fn on_signal(sig: i32) {
        // SAFETY: getpid, kill, waitpid and raise are async-signal-safe; the pids are our
        // children's (a slot is cleared before its worker is reaped elsewhere).
        unsafe {
            if libc::getpid() == OWNER.load(Ordering::SeqCst) {
                for s in &PIDS {
                    let pid = s.swap(0, Ordering::SeqCst);
                    if pid > 0 && libc::kill(pid, libc::SIGKILL) == 0 {
                        while libc::waitpid(pid, std::ptr::null_mut(), 0) < 0
                            && *libc::__errno_location() == libc::EINTR
                        {}
                    }
                }
            }
            // SA_RESETHAND restored the default action: die of the signal as intended.
            libc::raise(sig);
        }
    }
}

/// Writes all of `bytes` to descriptor `fd` (the program's stdout or stderr); output that
/// cannot be written is dropped, as a full or closed stream would drop it.
fn write_all(fd: i32, mut bytes: &[u8]) {
    while !bytes.is_empty() {
        // SAFETY: `bytes` is a valid buffer of its length; write reads it only.
        let n = unsafe { libc::write(fd, bytes.as_ptr().cast(), bytes.len()) };
        if n <= 0 {
            if n < 0 && std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return;
        }
        bytes = &bytes[n as usize..];
    }
}

/// Set once the worker has ended and was reaped.
#[derive(Default)]
pub(crate) struct Exited {
    done: std::sync::Mutex<bool>,
    cv: std::sync::Condvar,
    pid: std::sync::atomic::AtomicI32,
}

impl Exited {
    fn set(&self) {
        fatal::forget(self.pid.load(Ordering::SeqCst));
        *self.done.lock().unwrap_or_else(|p| p.into_inner()) = true;
        self.cv.notify_all();
    }

    fn is_set(&self) -> bool {
        *self.done.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Waits at most `limit` for the end.
    fn wait(&self, limit: std::time::Duration) {
        let done = self.done.lock().unwrap_or_else(|p| p.into_inner());
        let _ = self.cv.wait_timeout_while(done, limit, |d| !*d);
    }
}

/// Workers to stop and reap when the program exits normally.
static AT_EXIT: Mutex<Vec<(std::sync::Weak<Worker>, Arc<Exited>)>> = Mutex::new(Vec::new());

/// At a normal exit, each worker is stopped and reaped by the program (a container's init
/// may not reap orphans). After an abort, `PR_SET_PDEATHSIG` ends it.
pub(crate) fn stop_at_exit(w: &Arc<Worker>, exited: Arc<Exited>) {
    AT_EXIT.lock().push((Arc::downgrade(w), exited));
}

pub(crate) extern "C" fn stop_workers() {
    // No panic may leave an exit handler.
    let _ = std::panic::catch_unwind(|| {
        let workers = std::mem::take(&mut *AT_EXIT.lock());
        for (w, exited) in workers {
            if let Some(w) = w.upgrade() {
                w.stop();
                exited.wait(std::time::Duration::from_secs(2));
            }
        }
    });
}
