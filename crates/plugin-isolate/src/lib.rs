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
mod device;
mod gpu_calls;
pub mod gpu_limits;
pub mod header;
mod plt_slots;
mod record;
mod record_desc;
pub mod record_globals;
pub mod signals;
mod spawn;
pub mod track;

pub use device::IsolateDevice;
pub use record::{DEFAULT_MAX_BYTES as RECORD_MAX_DEFAULT, FORMAT_VERSION as RECORD_FORMAT_VERSION};

use omp_plugin::{Device, Plugin, PluginError, Result};
use omp_plugin_host::{HostPlugin, NUM_DEVICES};
use omp_sync::Mutex;
use omp_worker::{CallError, Request, Worker};
use spawn::{own_object, start, stop_at_exit, stop_workers};
use std::path::PathBuf;
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
    /// `LIBOMPTARGET_CHECK=gpu` (and `1`): the worker measures each kernel's stack and
    /// device `malloc` use against a GPU's defaults ([`gpu_limits`]).
    gpu_limits: bool,
    /// Check mode: one launch at a time (each is armed with the pages it watches).
    tracked_launch: Mutex<()>,
    /// Kernel record (`LIBOMPTARGET_RECORD`), when asked for.
    record: Option<record::Recorder>,
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

    /// `LIBOMPTARGET_CHECK=gpu` (and `1`), with [`IsolatePlugin::checking`]: the worker
    /// measures, per kernel, its threads' stack use and its device `malloc` use, which
    /// [`omp_plugin::AccessTracking::gpu_use`] hands to the checker (docs/check.md).
    pub fn measuring_gpu_limits(mut self) -> Self {
        if let Some(shared) = Arc::get_mut(&mut self.shared) {
            shared.gpu_limits = true;
        }
        self
    }

    /// Kernel record: `LIBOMPTARGET_RECORD=DIR` (and `LIBOMPTARGET_RECORD_MAX`) as `var`
    /// gives them; nothing changes when it is not set (docs/replay.md).
    pub fn recording(mut self, var: impl Fn(&str) -> Option<String>) -> Self {
        if let Some(shared) = Arc::get_mut(&mut self.shared) {
            shared.record = record::Recorder::from_vars(var);
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
                gpu_limits: false,
                tracked_launch: Mutex::new(()),
                record: None,
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
            Ok(exe) => start(exe, self.check, self.check && self.gpu_limits),
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

#[cfg(test)]
mod tests {
    use super::*;
    use omp_plugin::AllocKind;

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
