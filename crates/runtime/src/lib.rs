//! OpenMP offloading semantics, independent of any device and of the C ABI: devices and
//! their images, the mapping table, data motion for `target data`/`enter`/`exit`/`update`,
//! kernel launches, offload policy, and the device memory API.
//!
//! The ABI layer (`omp-libomptarget`) unpacks C arguments into the types here and calls in;
//! this crate calls down into [`omp_plugin`] devices.

pub mod api;
mod carry;
pub mod compose;
pub mod config;
pub mod construct;
pub mod data;
pub mod debug;
pub mod device;
pub mod error;
pub mod info;
pub mod launch;
pub mod map_type;
pub mod memory_manager;
pub mod profile;
pub mod registry;
pub mod select;
pub mod spread;
pub mod table;
#[cfg(test)]
mod test_host;
pub mod trace;

pub use config::Config;
pub use data::{MapArgs, MapperComponents};
pub use device::DeviceCtx;
pub use info::{Loc, MapName};
pub use launch::KernelLaunch;
pub use registry::{BinaryImage, Descriptor};
pub use select::SelectError;

use omp_plugin::Plugin;
use omp_sync::RwLock;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Instant;

/// What the runtime needs from libomp and from the program's code.
pub trait OpenMpHost: Send + Sync {
    /// libomp's `OMP_TARGET_OFFLOAD`: 0 disabled, 1 default, 2 mandatory.
    fn target_offload(&self) -> i32;
    /// libomp's default-device ICV (`OMP_DEFAULT_DEVICE`).
    fn default_device(&self) -> i32;
    /// Calls a compiler-generated `declare mapper` function and returns the components it
    /// pushed through `__tgt_push_mapper_component`.
    fn call_mapper(
        &self,
        mapper: usize,
        base: usize,
        begin: usize,
        size: i64,
        ty: i64,
        name: usize,
    ) -> MapperComponents;
}

/// Offload policy, fixed on first use (`OMP_TARGET_OFFLOAD`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Policy {
    Disabled,
    Mandatory,
}

/// A construct's failure once it has been reported ([`error::report`]): what the offload
/// policy ([`Runtime::handle_outcome`]) decides on, with nothing more to say.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Failed;

pub type Outcome = Result<(), Failed>;

/// The whole runtime: plugins, the devices they opened, and the registered binaries.
pub struct Runtime {
    pub config: Config,
    host: Box<dyn OpenMpHost>,
    plugins: Vec<Box<dyn Plugin>>,
    /// Devices in user numbering; only ever appended to.
    devices: RwLock<Vec<Arc<DeviceCtx>>>,
    /// Held while a plugin's devices are being opened (a backend call), so that they are
    /// opened once; the device list itself is locked only to append.
    opening: omp_sync::Mutex<()>,
    /// Cached `devices.len()` for the hot path.
    num_devices: AtomicUsize,
    pub(crate) registry: RwLock<registry::Registry>,
    /// Bumped at every (un)registration; devices compare it to know when to load images.
    pub(crate) generation: AtomicU64,
    /// `requires unified_shared_memory` is in force.
    pub(crate) usm: AtomicBool,
    /// Only clang 19 binaries are registered (see `clang19_programs_only`).
    pub(crate) legacy_only: AtomicBool,
    policy: OnceLock<Policy>,
    /// INFO output and the profile, then the composition's observers (OMPT tools, the
    /// checker), installed once after start-up (tools connect through libomp, which may
    /// call back into us).
    observers: trace::Observers,
    /// Blocks handed out by `omp_target_alloc` and friends.
    pub(crate) api_allocs: api::Allocations,
    /// Kernel launches in progress (unregistration does not unload an image under them).
    pub(crate) in_flight: launch::InFlight,
    /// `LIBOMPTARGET_SPREAD`: where `nowait` regions are placed, when it is on.
    pub(crate) spread: Option<Box<spread::Spread>>,
}

/// Where a construct should run.
pub enum Target {
    Device(Arc<DeviceCtx>),
    /// On the host: offloading disabled, or the initial device was named.
    Host,
}

impl Runtime {
    pub fn new(config: Config, host: Box<dyn OpenMpHost>, plugins: Vec<Box<dyn Plugin>>) -> Self {
        Self {
            host,
            plugins,
            devices: RwLock::new(Vec::new()),
            opening: omp_sync::Mutex::new(()),
            num_devices: AtomicUsize::new(0),
            registry: RwLock::new(registry::Registry::default()),
            generation: AtomicU64::new(0),
            usm: AtomicBool::new(false),
            legacy_only: AtomicBool::new(false),
            policy: OnceLock::new(),
            observers: trace::Observers::new(Self::builtin_observers(&config)),
            api_allocs: api::Allocations::default(),
            in_flight: launch::InFlight::default(),
            spread: config.spread.then(Box::default),
            config,
        }
    }

    /// INFO output (always there, idle while no INFO bit is set) and the profile (when
    /// asked for).
    fn builtin_observers(config: &Config) -> Vec<Box<dyn trace::Observer>> {
        let mut v: Vec<Box<dyn trace::Observer>> = vec![Box::new(info::InfoObserver::new(config.info_bits()))];
        if config.debug != 0 {
            debug::start(config.debug, config.debug_file.as_deref());
            v.push(Box::new(debug::DebugObserver));
        }
        if let Some(p) = profile::Profiler::new(config.profile.clone(), config.profile_summary) {
            v.push(Box::new(p));
        }
        v
    }

    /// Whether an observer has work at exit (the profile): the ABI layer then arranges
    /// [`Runtime::finish`].
    pub fn finishes_at_exit(&self) -> bool {
        self.observers.at_exit()
    }

    /// Lets every observer finish at process exit (idempotent). Called at exit and before
    /// aborts.
    pub fn finish(&self) {
        self.observers.finish(trace::End::Exit);
    }

    /// Installs the composition's observers (OMPT tools, the checker), after INFO output
    /// and the profile; only the first call counts. Devices opened later are offered to
    /// each ([`trace::Observer::wrap_device`]).
    pub fn set_observers(&self, observers: Vec<Box<dyn trace::Observer>>) {
        self.observers.install(observers);
    }

    /// `__tgt_set_info_flag`: new INFO bits, and so perhaps new interests.
    pub fn set_info_flag(&self, bits: u32) {
        self.config.set_info(bits);
        self.observers.refresh();
    }

    /// Whether anyone listens to events. Events that cost something to build are only
    /// built when this is true.
    #[inline]
    pub(crate) fn observing(&self) -> bool {
        self.observers.observing()
    }

    /// The start of an operation whose duration an observer wants, else `None`.
    #[inline]
    pub(crate) fn start_timer(&self) -> Option<Instant> {
        self.observers.timing().then(Instant::now)
    }

    /// The interval from `start_timer` until now.
    #[inline]
    pub(crate) fn stop_timer(start: Option<Instant>) -> Option<trace::Interval> {
        start.map(|start| trace::Interval { start, end: Instant::now() })
    }

    /// Hands an event to every observer that wants it, in order: INFO output, the profile,
    /// the composition's. Callers emit after releasing the runtime's locks.
    pub(crate) fn emit(&self, ev: &trace::Event) {
        self.observers.emit(ev, &trace::EventCx::new(self));
    }

    /// `omp_get_num_devices()`.
    #[inline]
    pub fn num_devices(&self) -> i32 {
        let n = self.num_devices.load(Ordering::Acquire) as i32;
        if n > 0 && self.disabled_by_user() && !self.clang19_programs_only() {
            return 0;
        }
        n
    }

    /// `OMP_TARGET_OFFLOAD=DISABLED` (without fixing the policy, which waits for devices).
    fn disabled_by_user(&self) -> bool {
        match self.policy.get() {
            Some(p) => *p == Policy::Disabled,
            None => self.host.target_offload() == 0,
        }
    }

    /// `omp_get_initial_device()`: one past the last offload device.
    #[inline]
    pub fn initial_device(&self) -> i32 {
        self.num_devices()
    }

    pub fn default_device(&self) -> i32 {
        self.host.default_device()
    }

    /// The device with this user number, if it exists.
    pub fn device(&self, id: i32) -> Option<Arc<DeviceCtx>> {
        if id < 0 {
            return None;
        }
        self.devices.read().get(id as usize).cloned()
    }

    pub fn devices(&self) -> Vec<Arc<DeviceCtx>> {
        self.devices.read().clone()
    }

    /// The offload policy, computed once: DEFAULT becomes MANDATORY when devices exist.
    pub fn policy(&self) -> Policy {
        *self.policy.get_or_init(|| match self.host.target_offload() {
            0 => Policy::Disabled,
            2 => Policy::Mandatory,
            _ if self.num_devices.load(Ordering::Acquire) > 0 => Policy::Mandatory,
            _ => Policy::Disabled,
        })
    }

    /// Resolves `-1` to the default device.
    pub fn resolve_device(&self, id: i64) -> i64 {
        if id == -1 {
            i64::from(self.default_device())
        } else {
            id
        }
    }

    /// LLVM's `handleTargetOutcome`: under MANDATORY a failure ends the program with the
    /// construct's location.
    #[link_section = ".text.hot.omp_launch"]
    pub fn handle_outcome(&self, outcome: Outcome, loc: Loc) {
        if outcome.is_ok() || self.policy() != Policy::Mandatory {
            return;
        }
        if self.config.info_on(config::info_bits::DUMP_TABLE) {
            self.announce_tables(loc, false);
        } else {
            info::error(format_args!("Consult https://openmp.llvm.org/design/Runtimes.html for debugging options."));
            info::error(format_args!("Run with LIBOMPTARGET_INFO=4 to dump host-target pointer mappings."));
        }
        if self.num_devices() == 0 {
            let reg = self.registry.read();
            info::error(format_args!(
                "No images found compatible with the installed hardware. Found {} image(s): ({})",
                reg.image_count(),
                reg.image_triples().join(",")
            ));
        }
        let l = loc.parse();
        if l.is_known() {
            info::emit(&format!(
                "{l}: omptarget fatal error 1: failure of target construct while offloading is mandatory\n"
            ));
        } else {
            info::error(format_args!(
                "Source location information not present. Compile with -g or -gline-tables-only."
            ));
            info::emit("omptarget fatal error 1: failure of target construct while offloading is mandatory\n");
        }
        self.finish();
        std::process::abort();
    }

    /// Prints every device's mapping table to stdout (`ompx_dump_mapping_tables`).
    pub fn dump_all_tables_stdout(&self) {
        use std::io::Write;
        let loc = omp_format::SourceLocation::from_ident(";libomptarget;libomptarget;0;0;;");
        let mut out = std::io::stdout().lock();
        for dev in self.devices() {
            let _ = out.write_all(dev.table_text(&loc).as_bytes());
        }
        let _ = out.flush();
    }

    pub(crate) fn host(&self) -> &dyn OpenMpHost {
        &*self.host
    }
}
