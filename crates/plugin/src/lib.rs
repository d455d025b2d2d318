//! The device abstraction every offload backend implements (the "HAL").
//!
//! Implementations validate little: the runtime above keeps reference counts, checks bounds
//! and decides which device to use. A backend's errors cover only what the caller cannot
//! foresee (a failed allocation, an image that does not load, a lost device).
//!
//! Addresses cross this interface as plain integers. Host addresses come from the program;
//! the runtime vouches that each `(host, size)` range it passes is readable or writable host
//! memory, exactly as LLVM's plugins rely on their caller. Device addresses are whatever the
//! backend returned from [`Device::alloc`] or [`Device::global`].

pub mod host_memory;
pub mod mock;

use std::ffi::CStr;

/// A failure a backend could not avoid.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PluginError(pub String);

impl std::fmt::Display for PluginError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
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

/// How a kernel is launched; the host backend only reports these.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LaunchConfig {
    pub num_teams: u32,
    pub thread_limit: u32,
    /// Pass `dyn_ptr` (the launch environment) as the first argument (KernelArgs version ≥ 3).
    pub with_dyn_ptr: bool,
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
    /// Resolves a kernel by symbol name in a loaded image.
    fn kernel(&self, image: ImageId, name: &CStr) -> Result<KernelId>;
    /// Resolves a global variable's device address by symbol name.
    fn global(&self, image: ImageId, name: &CStr) -> Result<usize>;
    /// Allocates `size` bytes of device memory (`size` > 0).
    fn alloc(&self, size: usize, kind: AllocKind) -> Result<usize>;
    /// Frees memory from [`Device::alloc`].
    fn free(&self, ptr: usize, kind: AllocKind) -> Result<()>;
    /// Copies host bytes `[host, host+size)` to device address `tgt`.
    fn submit(&self, tgt: usize, host: usize, size: usize) -> Result<()>;
    /// Copies device bytes at `tgt` to host `[host, host+size)`.
    fn retrieve(&self, host: usize, tgt: usize, size: usize) -> Result<()>;
    /// Copies between two allocations of this device.
    fn copy_within(&self, dst: usize, src: usize, size: usize) -> Result<()>;
    /// Launches a kernel with pointer-sized arguments (already offset) and waits for it.
    fn launch(&self, kernel: KernelId, args: &[usize], config: &LaunchConfig) -> Result<()>;
    /// A line of device information, `key`/`value`, for `__tgt_print_device_info`.
    fn info(&self) -> Vec<(String, String)>;
    /// True when device addresses are host addresses (the host backend); lets the runtime
    /// skip bounce buffers.
    fn shares_host_address_space(&self) -> bool;
}
