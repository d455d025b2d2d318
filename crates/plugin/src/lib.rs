//! The device abstraction every offload backend implements (the "HAL").
//!
//! Implementations validate little: the runtime above keeps reference counts, checks bounds
//! and decides which device to use. A backend's errors cover only what the caller cannot
//! foresee (a failed operation, exhausted memory, a lost device), and say which it was.
//!
//! # The contract
//!
//! Addresses cross this interface as plain integers, and, as in wgpu-hal, **every method
//! that reads or writes memory by address is `unsafe`**: its caller vouches for the
//! addresses, and the method's `# Safety` section says what exactly.
//!
//! - Host addresses come from the program. [`Device::submit`] and [`Device::retrieve`]
//!   (and their `_async` forms) read or write them; the caller vouches for the host range,
//!   exactly as LLVM's plugins rely on theirs.
//! - Device addresses are whatever the backend returned from [`Device::alloc`] or
//!   [`Device::global`]. On a device whose memory is this process's memory (the host
//!   device), a copy to a wrong device address corrupts the program: the copies and
//!   [`Device::copy_within`] are `unsafe`, and the caller vouches that each device range
//!   lies inside one allocation or global of the device. [`Device::free`] and
//!   [`Device::alloc`] stay safe: a pointer the device did not hand out is an error.
//! - A kernel ([`KernelId`]) is a handle only its backend can make ([`KernelId::new`]); for
//!   the host device it is a function's address. [`Device::launch`] runs it on arguments
//!   the kernel dereferences, so it is `unsafe`: the caller vouches that the kernel came
//!   from [`Device::kernel`] of this device, for an image still loaded, and that the
//!   arguments are what the compiler's kernel expects.
//! - A capability only some devices have is an optional interface, not a method every
//!   backend carries: [`Device::access_tracking`] returns the device's [`AccessTracking`]
//!   (page-level tracking of what kernels touch) where it has one, `None` by default.
//! - Wrappers forward everything or nothing: `Box<D>` and `Arc<D>` are devices through one
//!   blanket impl each, so no hand-written forwarding can drop a method.

pub mod host_memory;
pub mod host_writes;
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
///
/// Only backends make one ([`KernelId::new`], from what their own [`Device::kernel`]
/// resolved); everyone else passes it on as they got it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct KernelId(usize);

impl KernelId {
    /// A kernel handle of the backend's own making: for the host backend the function's
    /// address, for others an index or a handle of their worker or server. Creating one is
    /// harmless; launching one the backend did not resolve is what [`Device::launch`]'s
    /// caller must rule out.
    pub const fn new(raw: usize) -> Self {
        KernelId(raw)
    }

    /// The backend's value for this kernel (to send it to a worker or server, or to call it).
    pub const fn raw(self) -> usize {
        self.0
    }
}

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

/// How a device runs one launch (what LLVM's INFO line reports): blocks and threads per
/// dimension, and the kernel's execution mode as LLVM names it (`SPMD`, `Generic`,
/// `Generic-SPMD`). Given by devices that decide it themselves ([`Device::launch_shape`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LaunchShape {
    pub blocks: [u32; 3],
    pub threads: [u32; 3],
    pub mode: &'static str,
}

/// Granularity of [`AccessTracking::launch_tracked`]'s access tracking.
pub const TRACK_PAGE: usize = 4096;

/// What a tracked kernel did to one watched page ([`AccessTracking::launch_tracked`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PageAccess {
    /// The page's device address (a multiple of [`TRACK_PAGE`]).
    pub page: usize,
    /// The kernel read the page before anything wrote it.
    pub read_first: bool,
    /// The kernel wrote the page.
    pub written: bool,
}

/// The access that stopped a kernel on a device that can tell ([`AccessTracking::last_fault`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fault {
    pub addr: usize,
    pub write: bool,
    /// The address lies in the device's memory (a guard page or freed memory), not in
    /// memory the device never had (a host address).
    pub device_memory: bool,
}

/// Who a device is to the other devices of its backend, for copies between them that do not
/// go through the host ([`Device::copy_to_peer`]): the backend's name and its own handle (a
/// CUDA context).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Peer {
    pub backend: &'static str,
    pub handle: usize,
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
    /// The image's `declare target indirect` functions, each as (host address, device
    /// address), given once after the image is loaded and its entries bound. A device whose
    /// kernels look them up in a table of their own (a GPU's device runtime) builds it from
    /// them; the others need nothing (the default).
    fn bind_indirect_functions(&self, _image: ImageId, _functions: &[(usize, usize)]) -> Result<()> {
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
    /// `[host, host+size)` must be readable host memory for the duration of the call, and
    /// `[tgt, tgt+size)` must lie inside one allocation (or global) of this device.
    unsafe fn submit(&self, tgt: usize, host: usize, size: usize) -> Result<()>;
    /// Copies device bytes at `tgt` to host `[host, host+size)`.
    ///
    /// # Safety
    /// `[host, host+size)` must be writable host memory that nothing else uses during the
    /// call, and `[tgt, tgt+size)` must lie inside one allocation (or global) of this device.
    unsafe fn retrieve(&self, host: usize, tgt: usize, size: usize) -> Result<()>;
    /// Copies between two allocations of this device.
    ///
    /// # Safety
    /// `[src, src+size)` and `[dst, dst+size)` must each lie inside one allocation (or
    /// global) of this device: on a device whose memory is this process's, the copy goes
    /// wherever the addresses point.
    unsafe fn copy_within(&self, dst: usize, src: usize, size: usize) -> Result<()>;
    /// Fills `[tgt, tgt+size)` with `byte`. The default copies a host buffer of that byte;
    /// a GPU fills on the device.
    ///
    /// # Safety
    /// As [`Device::submit`] for the device range.
    unsafe fn fill(&self, tgt: usize, byte: u8, size: usize) -> Result<()> {
        const CHUNK: usize = 1 << 20;
        let buf = vec![byte; size.min(CHUNK)];
        (0..size).step_by(CHUNK).try_for_each(|at| {
            // SAFETY: `buf` is ours and holds at least the chunk's bytes; the device range is
            // the caller's promise.
            unsafe { self.submit(tgt.wrapping_add(at), buf.as_ptr() as usize, (size - at).min(CHUNK)) }
        })
    }
    /// Who this device is to the other devices of its backend ([`Device::copy_to_peer`]);
    /// `None` (the default) for a device without direct copies.
    fn peer(&self) -> Option<Peer> {
        None
    }
    /// Copies `[src, src+size)` of this device to `dst` on the device `peer` names, without
    /// the host, and waits for it; `None` (the default) when this device cannot (another
    /// backend, no direct copies): the caller then goes through the host.
    ///
    /// # Safety
    /// `[src, src+size)` lies inside one allocation (or global) of this device, and
    /// `[dst, dst+size)` inside one of the device `peer` names, which is open.
    unsafe fn copy_to_peer(&self, _peer: Peer, _dst: usize, _src: usize, _size: usize) -> Option<Result<()>> {
        None
    }
    /// Launches a kernel with pointer-sized arguments (already offset) and waits for it.
    ///
    /// # Safety
    /// `kernel` must come from [`Device::kernel`] of this device, for an image that is still
    /// loaded, and `args` must be what that kernel expects: one value per parameter the
    /// compiler's map arrays pass, every one the kernel dereferences a device address valid
    /// for what the kernel does with it. The host device calls the kernel's address with
    /// these arguments in this process.
    unsafe fn launch(&self, kernel: KernelId, args: &[usize], config: &LaunchConfig) -> Result<()>;
    /// A line of device information, `key`/`value`, for `__tgt_print_device_info`.
    fn info(&self) -> Vec<(String, String)>;
    /// How long the device itself took for the last synchronous copy or launch this thread
    /// made on it, where the device measures it (a GPU's events, with the profile on); `None`
    /// (the default): the caller's host timing stands.
    fn device_time(&self) -> Option<std::time::Duration> {
        None
    }
    /// The blocks, threads and mode a launch of `kernel` with `config` gets, for a device
    /// that decides them itself (a GPU); `None` (the default) for devices that run the
    /// construct's numbers as given.
    fn launch_shape(&self, _kernel: KernelId, _config: &LaunchConfig) -> Option<LaunchShape> {
        None
    }
    /// Whether a kernel on this device can read and write host memory `[ptr, ptr+size)`
    /// directly (the host device: yes; a remote or isolated device: no). Lets the runtime
    /// answer `omp_target_is_accessible` and explain unmapped pointers.
    fn is_accessible(&self, ptr: usize, size: usize) -> bool;

    /// The device's page-level access tracking, where it has it now (an isolated device in
    /// check mode); `None` for devices that cannot tell what a kernel touched.
    fn access_tracking(&self) -> Option<&dyn AccessTracking> {
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
    ///
    /// # Safety
    /// As [`Device::launch`], with the memory the arguments point to valid until
    /// `synchronize`.
    unsafe fn launch_async(
        &self,
        kernel: KernelId,
        args: &[usize],
        config: &LaunchConfig,
        _queue: QueueId,
    ) -> Result<()> {
        // SAFETY: the caller's guarantee covers the synchronous launch too.
        unsafe { self.launch(kernel, args, config) }
    }
    /// Waits for everything enqueued on `queue` and reports the first failure.
    fn synchronize(&self, _queue: QueueId) -> Result<()> {
        Ok(())
    }
}

/// Page-level tracking of what kernels touch: an optional capability of a device
/// ([`Device::access_tracking`]), used by the mapping checker.
pub trait AccessTracking: Send + Sync {
    /// Launches like [`Device::launch`], watching the pages of the device ranges `watch`:
    /// returns, for each watched page the kernel touched, whether it read the page before
    /// writing it and whether it wrote it.
    ///
    /// # Safety
    /// As [`Device::launch`].
    unsafe fn launch_tracked(
        &self,
        kernel: KernelId,
        args: &[usize],
        config: &LaunchConfig,
        watch: &[(usize, usize)],
    ) -> Result<Vec<PageAccess>>;
    /// The access that stopped the last kernel that failed, where the device knows it.
    fn last_fault(&self) -> Option<Fault>;
    /// Why the device watches less than it was asked (a system limit reached), with how to
    /// lift it; `None` while it watches everything. Pages it could not watch are reported
    /// as written.
    fn watching_less(&self) -> Option<String> {
        None
    }
    /// What the last kernel this thread launched with [`AccessTracking::launch_tracked`]
    /// used of what a GPU limits, where the device measured it (`LIBOMPTARGET_CHECK=gpu`).
    fn gpu_use(&self) -> Option<GpuUse> {
        None
    }
}

/// What one kernel used of what a GPU limits ([`AccessTracking::gpu_use`]).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct GpuUse {
    /// The most stack one of its threads used, in bytes, from where the kernel's code (or
    /// one of its implicit tasks) began on that thread.
    pub stack: usize,
    /// The most bytes its threads' `malloc` held at once during the kernel.
    pub heap: usize,
    /// The functions it called that no GPU's device libraries provide: each symbol, and a
    /// C++ symbol's name.
    pub host_calls: Vec<(String, Option<String>)>,
    /// The host functions flang's runtime, linked into the kernel's image, called for it
    /// (its I/O statements): not provided on a GPU either.
    pub flang_runtime_calls: Vec<String>,
    /// Why the device could not see all the functions it called (`None`: it could).
    pub calls_unseen: Option<CallsUnseen>,
}

/// Why a device could not see which functions a kernel called ([`GpuUse::calls_unseen`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallsUnseen {
    /// A device image was linked with `-z now`: the loader bound its calls when it loaded it.
    LinkedNow,
    /// The loader bound a device image's calls when it loaded it (`LD_BIND_NOW`).
    BoundAtLoad,
}

/// Forwards every method of the trait to `**self` (one list, used by each blanket impl).
macro_rules! forward_device {
    () => {
        fn load_image(&self, image: &[u8]) -> Result<ImageId> {
            (**self).load_image(image)
        }
        fn unload_image(&self, image: ImageId) -> Result<()> {
            (**self).unload_image(image)
        }
        fn bind_indirect_functions(&self, image: ImageId, functions: &[(usize, usize)]) -> Result<()> {
            (**self).bind_indirect_functions(image, functions)
        }
        fn kernel(&self, image: ImageId, name: &CStr) -> Result<KernelId> {
            (**self).kernel(image, name)
        }
        fn global(&self, image: ImageId, name: &CStr) -> Result<GlobalSymbol> {
            (**self).global(image, name)
        }
        fn alloc(&self, size: usize, kind: AllocKind) -> Result<usize> {
            (**self).alloc(size, kind)
        }
        fn free(&self, ptr: usize, kind: AllocKind) -> Result<()> {
            (**self).free(ptr, kind)
        }
        unsafe fn submit(&self, tgt: usize, host: usize, size: usize) -> Result<()> {
            // SAFETY: the caller's promise, passed on unchanged.
            unsafe { (**self).submit(tgt, host, size) }
        }
        unsafe fn retrieve(&self, host: usize, tgt: usize, size: usize) -> Result<()> {
            // SAFETY: the caller's promise, passed on unchanged.
            unsafe { (**self).retrieve(host, tgt, size) }
        }
        unsafe fn copy_within(&self, dst: usize, src: usize, size: usize) -> Result<()> {
            // SAFETY: the caller's promise, passed on unchanged.
            unsafe { (**self).copy_within(dst, src, size) }
        }
        unsafe fn fill(&self, tgt: usize, byte: u8, size: usize) -> Result<()> {
            // SAFETY: the caller's promise, passed on unchanged.
            unsafe { (**self).fill(tgt, byte, size) }
        }
        fn peer(&self) -> Option<Peer> {
            (**self).peer()
        }
        unsafe fn copy_to_peer(&self, peer: Peer, dst: usize, src: usize, size: usize) -> Option<Result<()>> {
            // SAFETY: the caller's promise, passed on unchanged.
            unsafe { (**self).copy_to_peer(peer, dst, src, size) }
        }
        unsafe fn launch(&self, kernel: KernelId, args: &[usize], config: &LaunchConfig) -> Result<()> {
            // SAFETY: the caller's promise, passed on unchanged.
            unsafe { (**self).launch(kernel, args, config) }
        }
        fn info(&self) -> Vec<(String, String)> {
            (**self).info()
        }
        fn device_time(&self) -> Option<std::time::Duration> {
            (**self).device_time()
        }
        fn launch_shape(&self, kernel: KernelId, config: &LaunchConfig) -> Option<LaunchShape> {
            (**self).launch_shape(kernel, config)
        }
        fn is_accessible(&self, ptr: usize, size: usize) -> bool {
            (**self).is_accessible(ptr, size)
        }
        fn access_tracking(&self) -> Option<&dyn AccessTracking> {
            (**self).access_tracking()
        }
        fn create_queue(&self) -> Result<QueueId> {
            (**self).create_queue()
        }
        unsafe fn submit_async(&self, tgt: usize, host: usize, size: usize, queue: QueueId) -> Result<()> {
            // SAFETY: the caller's promise, passed on unchanged.
            unsafe { (**self).submit_async(tgt, host, size, queue) }
        }
        unsafe fn retrieve_async(&self, host: usize, tgt: usize, size: usize, queue: QueueId) -> Result<()> {
            // SAFETY: the caller's promise, passed on unchanged.
            unsafe { (**self).retrieve_async(host, tgt, size, queue) }
        }
        unsafe fn launch_async(
            &self,
            kernel: KernelId,
            args: &[usize],
            config: &LaunchConfig,
            queue: QueueId,
        ) -> Result<()> {
            // SAFETY: the caller's promise, passed on unchanged.
            unsafe { (**self).launch_async(kernel, args, config, queue) }
        }
        fn synchronize(&self, queue: QueueId) -> Result<()> {
            (**self).synchronize(queue)
        }
    };
}

/// A boxed device is the device it holds: every method forwarded.
impl<D: Device + ?Sized> Device for Box<D> {
    forward_device!();
}

/// A shared device is the device it points to: every method forwarded.
impl<D: Device + ?Sized> Device for std::sync::Arc<D> {
    forward_device!();
}
