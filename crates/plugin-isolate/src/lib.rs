//! Isolated local devices (`LIBOMPTARGET_ISOLATE=1`): the host devices 0-3, same images and
//! same semantics, but their kernels run in a worker process of their own, with its own
//! address space, as on a discrete GPU. A kernel that dereferences host memory nobody
//! mapped faults in the worker; the launch then fails with the worker's death as a lost
//! device (the runtime names the kernel and its `file:line:col`).
//!
//! The worker is `offload-worker` (found next to the runtime library), an [`omp_worker`]
//! process that runs the host plugin: the same worker the offload-server uses, over a local
//! pipe instead of gRPC. Device addresses are the worker's; data moves straight between the
//! program's memory and the worker's (`process_vm_writev`/`readv`, relayed through the pipe
//! where the system refuses that). The worker starts at the first use of a device and ends
//! with the program (`PR_SET_PDEATHSIG`, and the end of its pipe).

pub mod arena;
pub mod track;

use omp_plugin::{
    host_memory, AccessTracking, AllocKind, Device, Fault, GlobalSymbol, ImageId, KernelId, LaunchConfig, PageAccess,
    Plugin, PluginError, Result,
};
use omp_plugin_host::{HostPlugin, NUM_DEVICES};
use omp_sync::Mutex;
use omp_worker::{CallError, Request, Response, SpawnOptions, Worker};
use std::ffi::{CStr, OsString};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// The worker executable's name, looked for in the runtime library's directory.
pub const WORKER_NAME: &str = "offload-worker";

/// Most devices a worker accepts on its command line.
pub const MAX_DEVICES: usize = 64;

/// The plugin: the host devices, each run in one shared worker process.
pub struct IsolatePlugin {
    shared: Arc<Shared>,
}

enum State {
    NotStarted,
    Running(Arc<Running>),
    /// Why it could not start (said once per device use; the device is then lost).
    Failed(String),
}

/// A started worker, and the device memory it shares with the program (when it could map it).
struct Running {
    worker: Arc<Worker>,
    arena: Option<arena::Arena>,
}

struct Shared {
    /// Where the worker is, or why its place is unknown.
    exe: std::result::Result<PathBuf, String>,
    state: Mutex<State>,
    /// Check mode (`LIBOMPTARGET_CHECK`): guard pages and access tracking.
    check: bool,
    /// Check mode: one launch at a time (each is armed with the pages it watches).
    tracked_launch: Mutex<()>,
}

impl Default for IsolatePlugin {
    fn default() -> Self {
        Self::new()
    }
}

impl IsolatePlugin {
    /// The worker is `offload-worker` in the directory of the library (or executable) this
    /// code is part of: `dist/lib/` and an installation's `lib/`.
    pub fn new() -> Self {
        let exe = own_object()
            .and_then(|p| p.parent().map(|d| d.join(WORKER_NAME)))
            .ok_or_else(|| "cannot tell where the OpenMP runtime library was loaded from (dladdr failed)".to_string());
        Self::with_worker_result(exe)
    }

    /// A plugin whose worker is `exe`.
    pub fn with_worker(exe: PathBuf) -> Self {
        Self::with_worker_result(Ok(exe))
    }

    /// Check mode (`LIBOMPTARGET_CHECK`): every device allocation between guard pages, and
    /// launches that can track which device pages a kernel reads and writes.
    pub fn checking(mut self) -> Self {
        if let Some(shared) = Arc::get_mut(&mut self.shared) {
            shared.check = true;
        }
        self
    }

    fn with_worker_result(exe: std::result::Result<PathBuf, String>) -> Self {
        // Registered now, when the runtime starts (the program's registration constructor):
        // exit handlers run in reverse order, so the workers are stopped after the handlers
        // and static destructors registered later, which may still run target regions.
        static REGISTER: std::sync::Once = std::sync::Once::new();
        REGISTER.call_once(|| {
            // SAFETY: atexit takes a plain `extern "C" fn()` that lives as long as the program.
            unsafe { libc::atexit(stop_workers) };
        });
        IsolatePlugin {
            shared: Arc::new(Shared {
                exe,
                state: Mutex::new(State::NotStarted),
                check: false,
                tracked_launch: Mutex::new(()),
            }),
        }
    }

    /// The worker's process id, once it runs.
    pub fn worker_pid(&self) -> Option<i32> {
        match &*self.shared.state.lock() {
            State::Running(r) => Some(r.worker.pid()),
            _ => None,
        }
    }
}

impl Plugin for IsolatePlugin {
    fn name(&self) -> &str {
        "x86_64 (isolated)"
    }
    fn device_count(&self) -> usize {
        NUM_DEVICES
    }
    fn is_compatible(&self, image: &[u8], triple: Option<&str>) -> bool {
        HostPlugin.is_compatible(image, triple)
    }
    fn open_device(&self, index: usize) -> Result<Box<dyn Device>> {
        if index >= NUM_DEVICES {
            return Err(PluginError::failed(format!("no isolated device {index}")));
        }
        Ok(Box::new(IsolateDevice { index: index as u32, shared: self.shared.clone() }))
    }
}

impl Shared {
    /// The running worker, started at the first call.
    fn worker(&self) -> Result<Arc<Running>> {
        let mut state = self.state.lock();
        match &*state {
            State::Running(w) => return Ok(w.clone()),
            State::Failed(why) => return Err(PluginError::lost(why.clone())),
            State::NotStarted => {}
        }
        let started = match &self.exe {
            Ok(exe) => start(exe, self.check),
            Err(why) => Err(format!("cannot start the isolated device's worker: {why}")),
        };
        match started {
            Ok((w, arena, exited)) => {
                let worker = Arc::new(w);
                stop_at_exit(&worker, exited);
                // Any reply means the worker has set up (or failed to set up) the arena; none
                // means it could not start (a system limit, a policy, a wrong binary).
                if let Err(CallError::Died(how)) = worker.call(&Request::Free { device: 0, addr: 0 }) {
                    let why = match &self.exe {
                        Ok(exe) => format!(
                            "cannot start the isolated device's worker {}: it ended before it answered: {how} \
                             (LIBOMPTARGET_ISOLATE=1 runs kernels in {WORKER_NAME})",
                            exe.display()
                        ),
                        Err(e) => e.clone(),
                    };
                    *state = State::Failed(why.clone());
                    return Err(PluginError::lost(why));
                }
                let arena = arena.filter(|a| a.acknowledged());
                let r = Arc::new(Running { worker, arena });
                *state = State::Running(r.clone());
                Ok(r)
            }
            Err(why) => {
                *state = State::Failed(why.clone());
                Err(PluginError::lost(why))
            }
        }
    }
}

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
fn own_object() -> Option<PathBuf> {
    object_of(own_object as fn() -> Option<PathBuf> as *const libc::c_void)
}

/// The loaded object providing `symbol`, found in the global scope.
fn object_providing(symbol: &CStr) -> Option<PathBuf> {
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
fn start(exe: &Path, check: bool) -> std::result::Result<(Worker, Option<arena::Arena>, Arc<Exited>), String> {
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
    let mut arena = arena::Arena::create(arena_size()).ok();
    let arena_fd = arena.as_ref().map_or(-1, |a| a.fd());
    if let Some(a) = &mut arena {
        cmd.arg("--arena").arg(a.base().to_string()).arg(a.size().to_string());
        if check {
            a.enable_checks();
            cmd.arg("--check");
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

/// The arena's size: this machine's memory, between 1 GiB and 1 TiB (address space only
/// until used).
fn arena_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    let (pages, page) = unsafe { (libc::sysconf(libc::_SC_PHYS_PAGES), libc::sysconf(libc::_SC_PAGESIZE)) };
    let ram = if pages > 0 && page > 0 { (pages as usize).saturating_mul(page as usize) } else { 0 };
    ram.clamp(1 << 30, 1 << 40)
}

/// Set once the worker has ended and was reaped.
#[derive(Default)]
struct Exited {
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
fn stop_at_exit(w: &Arc<Worker>, exited: Arc<Exited>) {
    AT_EXIT.lock().push((Arc::downgrade(w), exited));
}

extern "C" fn stop_workers() {
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

/// One isolated device: device `index` of the worker.
pub struct IsolateDevice {
    index: u32,
    shared: Arc<Shared>,
}

/// A worker call's failure as the plugin contract's error.
fn error(w: &Worker, e: CallError) -> PluginError {
    match e {
        CallError::Failed(m) => PluginError::failed(m),
        CallError::Died(how) => {
            PluginError::lost(format!("the isolated device's worker (pid {}) ended: {how}", w.pid()))
        }
    }
}

impl IsolateDevice {
    /// Launches in the worker, without tracking (kernels never run in this process: a bad
    /// kernel or argument harms only the worker).
    fn launch_untracked(&self, kernel: KernelId, args: &[usize], config: &LaunchConfig) -> Result<()> {
        let r = self.shared.worker()?;
        let w = &r.worker;
        let mut small = [0u64; 16];
        let heap: Vec<u64>;
        let args: &[u64] = if args.len() <= small.len() {
            for (d, s) in small.iter_mut().zip(args) {
                *d = *s as u64;
            }
            &small[..args.len()]
        } else {
            heap = args.iter().map(|a| *a as u64).collect();
            &heap
        };
        // What the program printed so far goes out before what the kernel prints, as when
        // both share one process.
        // SAFETY: fflush(NULL) flushes every open output stream; it takes no pointer of ours.
        unsafe { libc::fflush(std::ptr::null_mut()) };
        let req = Request::Launch {
            device: self.index,
            kernel: kernel.raw() as u64,
            with_dyn_ptr: config.with_dyn_ptr,
            num_teams: config.num_teams[0],
            thread_limit: config.thread_limit[0],
            args,
        };
        match w.call(&req) {
            Ok(_) => Ok(()),
            Err(CallError::Died(how)) => {
                let hint = if how.contains("SIGSEGV") || how.contains("SIGBUS") {
                    "; the kernel touched memory that is not device memory, e.g. a host pointer that was never \
                     mapped (the isolated device, like a GPU, cannot reach the program's memory)"
                } else if how.contains("called exec") {
                    ""
                } else if how.starts_with("exited with status") {
                    "; code in the target region ended the device's process (exit() inside a target region \
                     ends the isolated device's worker, not the program; a GPU kernel cannot exit)"
                } else if how.contains("SIGABRT") {
                    "; code in the target region aborted (abort(), or a failed assert)"
                } else {
                    ""
                };
                Err(PluginError::lost(format!("the isolated device's worker (pid {}) ended: {how}{hint}", w.pid())))
            }
            Err(e) => Err(error(w, e)),
        }
    }

    fn call(&self, req: &Request) -> Result<Response> {
        let r = self.shared.worker()?;
        r.worker.call(req).map_err(|e| error(&r.worker, e))
    }
}

fn unexpected(r: Response) -> PluginError {
    PluginError::failed(format!("unexpected reply from the isolated device's worker: {r:?}"))
}

fn name_of(name: &CStr) -> Result<&str> {
    name.to_str().map_err(|_| PluginError::failed(format!("symbol name {name:?} is not UTF-8")))
}

impl Device for IsolateDevice {
    fn load_image(&self, image: &[u8]) -> Result<ImageId> {
        match self.call(&Request::Load { device: self.index, image })? {
            Response::Image(i) => Ok(ImageId(i as usize)),
            r => Err(unexpected(r)),
        }
    }

    fn kernel(&self, image: ImageId, name: &CStr) -> Result<KernelId> {
        match self.call(&Request::Kernel { device: self.index, image: image.0 as u64, name: name_of(name)? })? {
            Response::Kernel(k) => Ok(KernelId::new(k as usize)),
            r => Err(unexpected(r)),
        }
    }

    fn global(&self, image: ImageId, name: &CStr) -> Result<GlobalSymbol> {
        match self.call(&Request::Global { device: self.index, image: image.0 as u64, name: name_of(name)? })? {
            Response::Global { addr, size } => Ok(GlobalSymbol { addr: addr as usize, size: size as usize }),
            r => Err(unexpected(r)),
        }
    }

    fn alloc(&self, size: usize, _kind: AllocKind) -> Result<usize> {
        // Every kind is device memory: no kernel reaches the program's own memory.
        let r = self.shared.worker()?;
        if let Some(a) = &r.arena {
            return a
                .alloc(size)
                .ok_or_else(|| PluginError::out_of_memory(format!("out of device memory allocating {size} bytes")));
        }
        match self.call(&Request::Alloc { device: self.index, size: size as u64 }) {
            Ok(Response::Addr(a)) => Ok(a as usize),
            Ok(r) => Err(unexpected(r)),
            Err(e) if e.kind == omp_plugin::ErrorKind::Failed && e.reason.contains("out of memory") => {
                Err(PluginError::out_of_memory(e.reason))
            }
            Err(e) => Err(e),
        }
    }

    fn free(&self, ptr: usize, _kind: AllocKind) -> Result<()> {
        let r = self.shared.worker()?;
        if let Some(a) = &r.arena {
            if a.free(ptr) {
                return Ok(());
            }
            return Err(PluginError::failed(format!(
                "0x{ptr:016x} is not memory allocated on device {} (freed twice, or never allocated)",
                self.index
            )));
        }
        self.call(&Request::Free { device: self.index, addr: ptr as u64 }).map(|_| ())
    }

    unsafe fn submit(&self, tgt: usize, host: usize, size: usize) -> Result<()> {
        if size == 0 {
            return Ok(());
        }
        let r = self.shared.worker()?;
        let w = &r.worker;
        if r.arena.as_ref().is_some_and(|a| a.contains(tgt, size)) {
            // SAFETY: the host range is readable by the caller's promise; `[tgt, tgt+size)`
            // lies in the arena, mapped read-write in this process for its whole life.
            unsafe { host_memory::copy(tgt, host, size) };
            return Ok(());
        }
        // SAFETY: the caller vouches that `[host, host+size)` is readable for this call.
        let data = unsafe { std::slice::from_raw_parts(host as *const u8, size) };
        w.write(self.index, tgt as u64, data).map_err(|e| error(w, e))
    }

    unsafe fn retrieve(&self, host: usize, tgt: usize, size: usize) -> Result<()> {
        if size == 0 {
            return Ok(());
        }
        let r = self.shared.worker()?;
        let w = &r.worker;
        if r.arena.as_ref().is_some_and(|a| a.contains(tgt, size)) {
            // SAFETY: the host range is writable by the caller's promise; `[tgt, tgt+size)`
            // lies in the arena, mapped in this process for its whole life.
            unsafe { host_memory::copy(host, tgt, size) };
            return Ok(());
        }
        // SAFETY: the caller vouches that `[host, host+size)` is writable and unused by
        // anything else during this call.
        let buf = unsafe { std::slice::from_raw_parts_mut(host as *mut u8, size) };
        w.read_into(self.index, tgt as u64, buf).map_err(|e| error(w, e))
    }

    unsafe fn copy_within(&self, dst: usize, src: usize, size: usize) -> Result<()> {
        let r = self.shared.worker()?;
        if r.arena.as_ref().is_some_and(|a| a.contains(dst, size) && a.contains(src, size)) {
            // SAFETY: both ranges lie in the arena (checked just above), mapped read-write
            // here for its whole life and holding no Rust object.
            unsafe { host_memory::copy(dst, src, size) };
            return Ok(());
        }
        self.call(&Request::Copy { device: self.index, dst: dst as u64, src: src as u64, len: size as u64 }).map(|_| ())
    }

    unsafe fn launch(&self, kernel: KernelId, args: &[usize], config: &LaunchConfig) -> Result<()> {
        if self.shared.check {
            // SAFETY: the caller's promise, passed on.
            return unsafe { self.launch_tracked(kernel, args, config, &[]) }.map(|_| ());
        }
        self.launch_untracked(kernel, args, config)
    }

    fn access_tracking(&self) -> Option<&dyn AccessTracking> {
        let tracks = self.shared.check
            && match &*self.shared.state.lock() {
                State::Running(r) => r.arena.as_ref().is_some_and(|a| a.checking() && !a.tracking_off()),
                _ => false,
            };
        tracks.then_some(self as &dyn AccessTracking)
    }

    fn info(&self) -> Vec<(String, String)> {
        let worker = match &*self.shared.state.lock() {
            State::Running(r) => match &r.arena {
                Some(a) => {
                    format!("pid {}, device memory shared at 0x{:x} ({} bytes)", r.worker.pid(), a.base(), a.size())
                }
                None => format!("pid {}", r.worker.pid()),
            },
            State::Failed(why) => format!("failed to start: {why}"),
            State::NotStarted => "not started".into(),
        };
        vec![
            ("Device Type".into(), "Generic-elf-64bit (isolated, LIBOMPTARGET_ISOLATE=1)".into()),
            ("UID".into(), format!("x86_64-isolated-{}", self.index)),
            ("Worker".into(), worker),
        ]
    }

    /// As on a discrete GPU: a kernel here never reaches the program's own memory; memory
    /// the device allocated (the shared arena, like managed memory) it does.
    fn is_accessible(&self, ptr: usize, size: usize) -> bool {
        match &*self.shared.state.lock() {
            State::Running(r) => r.arena.as_ref().is_some_and(|a| a.contains(ptr, size.max(1))),
            _ => false,
        }
    }
}

/// Check mode's tracked launches: the pages to watch go to the worker in the arena's control
/// block, and what the kernel did to them comes back there.
impl AccessTracking for IsolateDevice {
    unsafe fn launch_tracked(
        &self,
        kernel: KernelId,
        args: &[usize],
        config: &LaunchConfig,
        watch: &[(usize, usize)],
    ) -> Result<Vec<PageAccess>> {
        let r = self.shared.worker()?;
        let Some(arena) = r.arena.as_ref().filter(|a| a.checking()) else {
            return self.launch_untracked(kernel, args, config).map(|_| Vec::new());
        };
        let _one = self.shared.tracked_launch.lock();
        // Without a control block the worker would not open the memory allocated since the
        // last launch: the kernel would fault on it.
        let prepared = arena.prepare(watch).ok_or_else(|| {
            PluginError::out_of_memory("device memory is too full for the checker's record of this launch")
        })?;
        self.launch_untracked(kernel, args, config)?;
        Ok(arena.accesses(&prepared))
    }

    fn last_fault(&self) -> Option<Fault> {
        match &*self.shared.state.lock() {
            State::Running(r) => r.arena.as_ref().and_then(|a| a.fault()),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_worker_is_a_clear_error_naming_the_path() {
        let p = IsolatePlugin::with_worker(PathBuf::from("/nonexistent/dir/offload-worker"));
        let d = p.open_device(0).unwrap();
        let e = d.alloc(8, AllocKind::Device).unwrap_err();
        assert!(e.is_lost(), "{e:?}");
        assert!(e.reason.contains("/nonexistent/dir/offload-worker"), "{e}");
        assert!(e.reason.contains("LIBOMPTARGET_ISOLATE=1"), "{e}");
        // Said again, without a second attempt, by every device.
        let e2 = p.open_device(3).unwrap().alloc(8, AllocKind::Device).unwrap_err();
        assert_eq!(e, e2);
        assert!(!d.is_accessible(0x1000, 8));
        assert!(p.open_device(NUM_DEVICES).is_err());
    }

    #[test]
    fn the_worker_is_looked_for_next_to_this_object() {
        // In a test, this object is the test executable.
        let own = own_object().unwrap();
        assert!(own.is_absolute(), "{}", own.display());
        assert!(own.exists(), "{}", own.display());
    }
}
