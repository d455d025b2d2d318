//! The device abstraction every offload backend implements (the "HAL").
//!
//! Implementations validate little: the runtime above keeps reference counts, checks bounds
//! and decides which device to use. A backend's errors cover only what the caller cannot
//! foresee (a failed operation, exhausted memory, a lost device), and say which it was.
//!
//! Addresses cross this interface as plain integers. Device addresses are whatever the
//! backend returned from [`Device::alloc`] or [`Device::global`]. Host addresses come from
//! the program: the methods that read or write them ([`Device::submit`],
//! [`Device::retrieve`]) are `unsafe`, and their callers vouch for the range, exactly as
//! LLVM's plugins rely on theirs.

pub mod host_memory;
#[cfg(feature = "mock")]
pub mod mock;

use std::ffi::CStr;

/// What kind of failure a backend met; the runtime decides what follows from it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// The operation failed; the device is still usable.
    Failed,
    /// The device has no memory left for the request.
    OutOfMemory,
    /// The device is gone (a crashed worker, a closed connection): nothing more will work.
    DeviceLost,
}

/// A failure a backend could not avoid, with its kind and the reason in words.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PluginError {
    pub kind: ErrorKind,
    pub reason: String,
}

impl PluginError {
    pub fn failed(reason: impl Into<String>) -> Self {
        Self { kind: ErrorKind::Failed, reason: reason.into() }
    }
    pub fn out_of_memory(reason: impl Into<String>) -> Self {
        Self { kind: ErrorKind::OutOfMemory, reason: reason.into() }
    }
    pub fn lost(reason: impl Into<String>) -> Self {
        Self { kind: ErrorKind::DeviceLost, reason: reason.into() }
    }
    pub fn is_lost(&self) -> bool {
        self.kind == ErrorKind::DeviceLost
    }
}

impl std::fmt::Display for PluginError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.reason)
    }
}

impl std::error::Error for PluginError {}

pub type Result<T> = std::result::Result<T, PluginError>;

/// Kinds of device memory, with LLVM's numbering (`TargetAllocTy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AllocKind {
    Device = 0,
    Host = 1,
    Shared = 2,
    Default = 3,
    DeviceNonBlocking = 4,
}

/// A loaded image on one device, as the backend names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ImageId(pub usize);

/// A kernel the backend can launch (for the host backend, the function's address).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct KernelId(pub usize);

/// A device global: its address and, where the backend knows it, its size in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GlobalSymbol {
    pub addr: usize,
    /// 0 when the backend cannot tell (the runtime then trusts the entry table's size).
    pub size: usize,
}

/// Everything the compiler asked for a launch. A CPU backend uses little of it; a GPU
/// backend needs all of it, so the runtime always passes it on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LaunchConfig {
    /// Teams per dimension (`num_teams`); 0 in a dimension means "not specified".
    pub num_teams: [u32; 3],
    /// Threads per team per dimension (`thread_limit`).
    pub thread_limit: [u32; 3],
    /// Loop trip count of a combined construct, 0 when unknown.
    pub tripcount: u64,
    /// Dynamic group (team-shared) memory in bytes.
    pub dyn_group_mem: u32,
    /// Pass `dyn_ptr` (the launch environment) as the first argument (KernelArgs version ≥ 3).
    pub with_dyn_ptr: bool,
}

/// Granularity of [`Device::launch_tracked`]'s access tracking.
pub const TRACK_PAGE: usize = 4096;

/// What a tracked kernel did to one watched page ([`Device::launch_tracked`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PageAccess {
    /// The page's device address (a multiple of [`TRACK_PAGE`]).
    pub page: usize,
    /// The kernel read the page before anything wrote it.
    pub read_first: bool,
    /// The kernel wrote the page.
    pub written: bool,
}

/// The access that stopped a kernel on a device that can tell ([`Device::last_fault`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fault {
    pub addr: usize,
    pub write: bool,
    /// The address lies in the device's memory (a guard page or freed memory), not in
    /// memory the device never had (a host address).
    pub device_memory: bool,
}

/// An ordered stream of device work (LLVM's `AsyncInfo`): operations enqueued on one queue
/// run in order, and [`Device::synchronize`] waits for all of them. `QueueId::SYNC` is the
/// queue of a backend that completes everything before returning.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct QueueId(pub usize);

impl QueueId {
    pub const SYNC: QueueId = QueueId(0);
}

/// One backend: a family of devices (the host CPU, a remote server, CUDA).
pub trait Plugin: Send + Sync {
    /// Short name used in messages, e.g. `x86_64`.
    fn name(&self) -> &str;
    /// How many devices the backend offers.
    fn device_count(&self) -> usize;
    /// Whether the backend can run this image (already unwrapped from its OffloadBinary).
    fn is_compatible(&self, image: &[u8], triple: Option<&str>) -> bool;
    /// Opens device `index` of this backend.
    fn open_device(&self, index: usize) -> Result<Box<dyn Device>>;
    /// Why this backend offers no devices although it was configured to (a remote server that
    /// is down or refused the token); `None` when its devices are there or none were asked for.
    /// Under `OMP_TARGET_OFFLOAD=MANDATORY` the runtime reports it instead of falling back.
    fn unavailable(&self) -> Option<String> {
        None
    }
}

/// One device of a backend.
pub trait Device: Send + Sync {
    /// Loads an image and returns its handle.
    fn load_image(&self, image: &[u8]) -> Result<ImageId>;
    /// Unloads an image at the unregistration of the binary that embedded it, releasing what
    /// the backend holds for it; the id is not used again. Backends that keep images until
    /// the device closes need not override it.
    fn unload_image(&self, _image: ImageId) -> Result<()> {
        Ok(())
    }
    /// Resolves a kernel by symbol name in a loaded image.
    fn kernel(&self, image: ImageId, name: &CStr) -> Result<KernelId>;
    /// Resolves a global variable by symbol name in a loaded image.
    fn global(&self, image: ImageId, name: &CStr) -> Result<GlobalSymbol>;
    /// Allocates `size` bytes of device memory (`size` > 0).
    fn alloc(&self, size: usize, kind: AllocKind) -> Result<usize>;
    /// Frees memory from [`Device::alloc`]. A pointer the device did not hand out is an
    /// error, never undefined behaviour.
    fn free(&self, ptr: usize, kind: AllocKind) -> Result<()>;
    /// Copies host bytes `[host, host+size)` to device address `tgt`.
    ///
    /// # Safety
    /// `[host, host+size)` must be readable host memory for the duration of the call.
    unsafe fn submit(&self, tgt: usize, host: usize, size: usize) -> Result<()>;
    /// Copies device bytes at `tgt` to host `[host, host+size)`.
    ///
    /// # Safety
    /// `[host, host+size)` must be writable host memory that nothing else uses during the call.
    unsafe fn retrieve(&self, host: usize, tgt: usize, size: usize) -> Result<()>;
    /// Copies between two allocations of this device.
    fn copy_within(&self, dst: usize, src: usize, size: usize) -> Result<()>;
    /// Launches a kernel with pointer-sized arguments (already offset) and waits for it.
    fn launch(&self, kernel: KernelId, args: &[usize], config: &LaunchConfig) -> Result<()>;
    /// A line of device information, `key`/`value`, for `__tgt_print_device_info`.
    fn info(&self) -> Vec<(String, String)>;
    /// Whether a kernel on this device can read and write host memory `[ptr, ptr+size)`
    /// directly (the host device: yes; a remote or isolated device: no). Lets the runtime
    /// answer `omp_target_is_accessible` and explain unmapped pointers.
    fn is_accessible(&self, ptr: usize, size: usize) -> bool;

    /// Whether [`Device::launch_tracked`] really tracks accesses and [`Device::last_fault`]
    /// can tell what stopped a kernel (an isolated device in check mode).
    fn tracks_accesses(&self) -> bool {
        false
    }
    /// Launches like [`Device::launch`], watching the pages of the device ranges `watch`:
    /// returns, for each watched page the kernel touched, whether it read the page before
    /// writing it and whether it wrote it. Backends that cannot tell return nothing.
    fn launch_tracked(
        &self,
        kernel: KernelId,
        args: &[usize],
        config: &LaunchConfig,
        _watch: &[(usize, usize)],
    ) -> Result<Vec<PageAccess>> {
        self.launch(kernel, args, config).map(|_| Vec::new())
    }
    /// The access that stopped the last kernel that failed, where the backend knows it.
    fn last_fault(&self) -> Option<Fault> {
        None
    }

    /// A queue for asynchronous work. Backends that cannot overlap work keep the default,
    /// and every `*_async` call below completes before it returns.
    fn create_queue(&self) -> Result<QueueId> {
        Ok(QueueId::SYNC)
    }
    /// Enqueues a host-to-device copy.
    ///
    /// # Safety
    /// As [`Device::submit`], for as long as the copy is pending (until `synchronize`).
    unsafe fn submit_async(&self, tgt: usize, host: usize, size: usize, _queue: QueueId) -> Result<()> {
        // SAFETY: the caller's guarantee covers the synchronous copy too.
        unsafe { self.submit(tgt, host, size) }
    }
    /// Enqueues a device-to-host copy.
    ///
    /// # Safety
    /// As [`Device::retrieve`], for as long as the copy is pending (until `synchronize`).
    unsafe fn retrieve_async(&self, host: usize, tgt: usize, size: usize, _queue: QueueId) -> Result<()> {
        // SAFETY: the caller's guarantee covers the synchronous copy too.
        unsafe { self.retrieve(host, tgt, size) }
    }
    /// Enqueues a kernel launch.
    fn launch_async(&self, kernel: KernelId, args: &[usize], config: &LaunchConfig, _queue: QueueId) -> Result<()> {
        self.launch(kernel, args, config)
    }
    /// Waits for everything enqueued on `queue` and reports the first failure.
    fn synchronize(&self, _queue: QueueId) -> Result<()> {
        Ok(())
    }
}
