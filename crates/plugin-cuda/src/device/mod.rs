//! One CUDA device: its primary context, a stream for synchronous work and one per queue,
//! the modules loaded into it, the kernels resolved from them, and the memory it handed out.
//! Every call makes the context current on the calling thread first; after a sticky error
//! the device is lost and every later call says so.

use crate::driver::*;
use crate::image;
use crate::launch_rules::{self, GridLimits, Kernel};
use crate::streams::{Streams, Touches};
use crate::Settings;
use omp_plugin::{
    AllocKind, Device, GlobalSymbol, ImageId, KernelId, LaunchConfig, LaunchShape, Peer, PluginError, QueueId, Result,
};
use omp_sync::Mutex;
use std::collections::HashMap;
use std::ffi::{c_void, CStr};
use std::sync::OnceLock;

/// The backend name in a CUDA device's [`Peer`]: another CUDA device of this process
/// copies to it with `cuMemcpyPeer`.
const PEER_BACKEND: &str = "cuda";

/// Dynamic shared memory a kernel may use without opting in (48 KiB on every NVIDIA GPU).
const DEFAULT_DYN_SHARED_LIMIT: u32 = 48 * 1024;

/// What the device reported at open.
#[derive(Debug, Clone)]
pub struct DeviceProps {
    pub name: String,
    pub sm: image::Sm,
    pub total_memory: usize,
    pub multiprocessors: i32,
    pub max_threads_per_block: i32,
    pub max_threads_per_multiprocessor: i32,
    pub shared_memory_per_block: i32,
    pub clock_khz: i32,
    pub driver_version: i32,
    pub limits: GridLimits,
}

struct Module {
    handle: usize,
    /// The image as loaded: kernel environments are read from it.
    bytes: Vec<u8>,
    /// The device runtime's indirect-call table (device memory), freed at unload.
    indirect_table: Option<usize>,
}

struct KernelEntry {
    func: usize,
    kernel: Kernel,
    name: String,
}

/// One launch's device memory for the launch environment, freed once its stream is done.
type PendingFrees = Vec<usize>;

mod launch;
mod properties;
mod setup;
mod timing;

pub struct CudaDevice {
    driver: &'static Driver,
    /// The CUDA device ordinal (after `CUDA_VISIBLE_DEVICES`).
    ordinal: usize,
    device: CuDevice,
    /// The retained primary context (a `CUcontext`), released at drop.
    context: usize,
    /// The stream of the synchronous operations (`QueueId::SYNC`).
    stream: usize,
    /// Streams made by `create_queue`, the launch environments to free after their next
    /// synchronisation, and the writes in flight on them (`crate::streams`).
    streams: Mutex<Streams>,
    modules: Mutex<Vec<Option<Module>>>,
    /// `KernelId(i + 1)` is `kernels[i]`.
    kernels: Mutex<Vec<KernelEntry>>,
    /// Live allocations: address → (kind, size).
    allocations: Mutex<HashMap<usize, (AllocKind, usize)>>,
    props: DeviceProps,
    settings: Settings,
    /// Why the device is lost, once a sticky error said so.
    lost: OnceLock<String>,
    /// The kernel launched last (a fault is reported at the next synchronisation, so it is
    /// the one that faulted, or ran at the same time as it).
    last_kernel: Mutex<Option<String>>,
}

/// Under `LIBOMPTARGET_CHECK`, what a fault on a GPU can say: which kernel, and where to run
/// the program to learn which variable (a GPU cannot tell which address faulted).
fn fault_hint(ordinal: usize, kernel: Option<&str>, reason: &str) -> String {
    let kernel = kernel.map_or_else(|| "a kernel".to_string(), |k| format!("kernel {k}"));
    format!(
        "omptarget check: {kernel} faulted on CUDA device {ordinal} ({reason}); a GPU cannot tell which variable: \
         run the same program with LIBOMPTARGET_CHECK=1 on the isolated CPU device, which names it \
         (OMP_DEFAULT_DEVICE=0 or device(0) with a binary that also carries an x86_64 image; \
         build one with ompcc --target-offload=x86_64-pc-linux-gnu)\n"
    )
}

impl CudaDevice {
    /// Opens CUDA device `ordinal`: its primary context, a stream, its properties.
    pub fn open(driver: &'static Driver, ordinal: usize, settings: Settings) -> Result<CudaDevice> {
        let mut device: CuDevice = 0;
        // SAFETY: cuDeviceGet writes one CUdevice; the ordinal is below cuDeviceGetCount.
        driver.check(unsafe { (driver.device_get)(&mut device, ordinal as i32) }, "cuDeviceGet")?;
        let mut context: CuContext = std::ptr::null_mut();
        // SAFETY: writes one CUcontext for a valid device.
        driver.check(unsafe { (driver.primary_ctx_retain)(&mut context, device) }, "cuDevicePrimaryCtxRetain")?;
        // SAFETY: `context` was just retained.
        driver.check(unsafe { (driver.ctx_set_current)(context) }, "cuCtxSetCurrent")?;
        let mut stream: CuStream = std::ptr::null_mut();
        // SAFETY: writes one CUstream; the context is current.
        driver.check(unsafe { (driver.stream_create)(&mut stream, CU_STREAM_NON_BLOCKING) }, "cuStreamCreate")?;
        let props = properties::read(driver, device)?;
        for (var, limit, value) in [
            ("stack", CU_LIMIT_STACK_SIZE, settings.stack_size),
            ("heap", CU_LIMIT_MALLOC_HEAP_SIZE, settings.heap_size),
        ] {
            if let Some(v) = value {
                // SAFETY: a limit and its value; the context is current.
                driver.check(unsafe { (driver.ctx_set_limit)(limit, v) }, &format!("cuCtxSetLimit ({var} size)"))?;
            }
        }
        let mut limits = props.limits;
        if let Some(n) = settings.num_teams {
            limits.block_limit = limits.block_limit.min(n);
        }
        if let Some(n) = settings.teams_thread_limit {
            limits.thread_limit = limits.thread_limit.min(n);
        }
        if let Some(n) = settings.min_threads_for_low_trip_count {
            limits.min_threads_for_low_trip_count = n;
        }
        let props = DeviceProps { limits, ..props };
        if settings.info_kernel {
            crate::emit(&format!(
                "CUDA device {ordinal} info: Device supports up to {} CUDA blocks and {} threads with a warp size of {}\n",
                props.limits.block_limit, props.limits.thread_limit, props.limits.warp_size
            ));
        }
        Ok(CudaDevice {
            driver,
            ordinal,
            device,
            context: context as usize,
            stream: stream as usize,
            streams: Mutex::new(Streams::default()),
            modules: Mutex::new(Vec::new()),
            kernels: Mutex::new(Vec::new()),
            allocations: Mutex::new(HashMap::new()),
            props,
            settings,
            lost: OnceLock::new(),
            last_kernel: Mutex::new(None),
        })
    }

    /// Makes the context current on this thread, unless the device is lost.
    fn enter(&self) -> Result<()> {
        if let Some(why) = self.lost.get() {
            return Err(PluginError::lost(why.clone()));
        }
        // SAFETY: the context was retained at open and is released only at drop.
        self.check(unsafe { (self.driver.ctx_set_current)(self.context as CuContext) }, "cuCtxSetCurrent")
    }

    /// The driver's verdict; a sticky error marks the device lost.
    fn check(&self, code: CuResult, call: &str) -> Result<()> {
        self.driver.check(code, call).inspect_err(|e| {
            if e.is_lost() && self.lost.set(e.reason.clone()).is_ok() && self.settings.check_findings {
                let kernel = self.last_kernel.lock().clone();
                crate::emit(&fault_hint(self.ordinal, kernel.as_deref(), &e.reason));
            }
        })
    }

    fn stream_of(&self, queue: QueueId) -> Result<CuStream> {
        if queue == QueueId::SYNC {
            return Ok(self.stream as CuStream);
        }
        let stream = self.streams.lock().stream(queue);
        stream.map(|s| s as CuStream).ok_or_else(|| {
            PluginError::failed(format!("queue {} is not a queue of CUDA device {}", queue.0, self.ordinal))
        })
    }

    /// Makes `stream` (of `queue`) wait, on the device, for the writes in flight on other
    /// queues that overlap what the next operation touches.
    fn order_after_writes(&self, queue: QueueId, stream: CuStream, touches: Touches) -> Result<()> {
        let events = self.streams.lock().waits(queue, touches);
        for event in events {
            // SAFETY: `stream` and `event` belong to this device's context, which is current;
            // the event stays alive until its queue is synchronised.
            let r = unsafe { (self.driver.stream_wait_event)(stream, event as CuEvent, 0) };
            self.check(r, "cuStreamWaitEvent")?;
        }
        Ok(())
    }

    /// After a write to device memory enqueued on `queue`: an event recorded behind it, for
    /// operations on other streams to wait for. Nothing for the synchronous stream, which is
    /// done before the call returns.
    fn note_write(&self, queue: QueueId, stream: CuStream, touches: Touches) -> Result<()> {
        if queue == QueueId::SYNC {
            return Ok(());
        }
        let mut event: CuEvent = std::ptr::null_mut();
        // SAFETY: writes one event of the current context.
        self.check(unsafe { (self.driver.event_create)(&mut event, CU_EVENT_DISABLE_TIMING) }, "cuEventCreate")?;
        // SAFETY: the event was just created and `stream` is a stream of this context.
        if let Err(e) = self.check(unsafe { (self.driver.event_record)(event, stream) }, "cuEventRecord") {
            // SAFETY: the event was created above and is known to nothing else.
            unsafe { (self.driver.event_destroy)(event) };
            return Err(e);
        }
        self.streams.lock().wrote(queue, touches, event as usize);
        Ok(())
    }

    /// Waits for `stream`, then frees what launches on it left to free.
    fn sync_stream(&self, stream: CuStream, frees: PendingFrees) -> Result<()> {
        // SAFETY: `stream` was created on this device's context, which is current.
        let done = self.check(unsafe { (self.driver.stream_synchronize)(stream) }, "cuStreamSynchronize");
        for p in frees {
            // SAFETY: `p` came from cuMemAlloc for a launch environment whose kernel is done.
            unsafe { (self.driver.mem_free)(p as CuDevicePtr) };
        }
        done
    }

    fn kernel_entry(&self, kernel: KernelId) -> Result<(CuFunction, Kernel)> {
        let kernels = self.kernels.lock();
        let e = kernels.get(kernel.raw().wrapping_sub(1)).ok_or_else(|| {
            PluginError::failed(format!("kernel {} is not a kernel of CUDA device {}", kernel.raw(), self.ordinal))
        })?;
        Ok((e.func as CuFunction, e.kernel))
    }

    fn module(&self, image: ImageId) -> Result<usize> {
        self.modules.lock().get(image.0).and_then(|m| m.as_ref().map(|m| m.handle)).ok_or_else(|| {
            PluginError::failed(format!("image {} is not loaded on CUDA device {}", image.0, self.ordinal))
        })
    }

    /// Enqueues a copy or fill on `queue`'s stream after the writes in flight on other
    /// queues to what it `reads` or `writes`; then waits for it (the synchronous stream) or
    /// records its write for the other streams.
    fn copy(
        &self,
        call: &str,
        queue: QueueId,
        reads: Option<Touches>,
        writes: Option<Touches>,
        f: impl FnOnce(CuStream) -> CuResult,
    ) -> Result<()> {
        self.enter()?;
        let stream = self.stream_of(queue)?;
        for touches in [reads, writes].into_iter().flatten() {
            self.order_after_writes(queue, stream, touches)?;
        }
        let timing = if queue == QueueId::SYNC { self.timing_start(stream) } else { None };
        self.check(f(stream), call)?;
        if queue == QueueId::SYNC {
            let timing = timing.and_then(|t| t.stop(stream));
            let synced = self.sync_stream(stream, Vec::new());
            self.timing_done(timing);
            return synced;
        }
        match writes {
            Some(touches) => self.note_write(queue, stream, touches),
            None => Ok(()),
        }
    }
}

impl Device for CudaDevice {
    fn load_image(&self, bytes: &[u8]) -> Result<ImageId> {
        self.enter()?;
        if let Some(sm) = image::cubin_sm(bytes) {
            if !image::sm_runs_on(sm, self.props.sm) {
                return Err(PluginError::failed(format!(
                    "the image was built for sm_{sm}, but CUDA device {} ({}) is sm_{}: rebuild with --offload-arch=sm_{}",
                    self.ordinal, self.props.name, self.props.sm, self.props.sm
                )));
            }
        }
        // PTX text must end with a NUL; a cubin or fatbin is passed as it is.
        let mut owned = bytes.to_vec();
        if !omp_format::elf::is_elf(bytes) {
            owned.push(0);
        }
        let mut module: CuModule = std::ptr::null_mut();
        // SAFETY: `owned` is the whole image and lives across the call; no options are passed.
        let r = unsafe {
            (self.driver.module_load_data_ex)(
                &mut module,
                owned.as_ptr().cast(),
                0,
                std::ptr::null_mut(),
                std::ptr::null_mut(),
            )
        };
        self.check(r, "cuModuleLoadDataEx").map_err(|e| PluginError {
            reason: format!("cannot load the image on CUDA device {}: {}", self.ordinal, e.reason),
            ..e
        })?;
        let mut modules = self.modules.lock();
        modules.push(Some(Module { handle: module as usize, bytes: owned, indirect_table: None }));
        let id = ImageId(modules.len() - 1);
        drop(modules);
        self.write_device_environment(id);
        self.run_global_ctors_dtors(id, setup::Phase::Constructors).map_err(|e| PluginError {
            reason: format!("cannot run the image's global constructors on CUDA device {}: {}", self.ordinal, e.reason),
            ..e
        })?;
        Ok(id)
    }

    fn unload_image(&self, image: ImageId) -> Result<()> {
        if self.module(image).is_err() {
            return Ok(());
        }
        self.enter()?;
        let destructed = self.run_global_ctors_dtors(image, setup::Phase::Destructors);
        let Some(m) = self.modules.lock().get_mut(image.0).and_then(Option::take) else {
            return destructed;
        };
        if let Some(table) = m.indirect_table {
            // SAFETY: the table was allocated by `bind_indirect_functions` for this module,
            // whose kernels can run no more (their stream was synchronised).
            unsafe { (self.driver.mem_free)(table as CuDevicePtr) };
        }
        // SAFETY: the module was loaded here and was just taken out of `modules`: unloaded once.
        let unloaded = self.check(unsafe { (self.driver.module_unload)(m.handle as CuModule) }, "cuModuleUnload");
        destructed.and(unloaded)
    }

    fn bind_indirect_functions(&self, image: ImageId, functions: &[(usize, usize)]) -> Result<()> {
        self.enter()?;
        self.set_indirect_call_table(image, functions)
    }

    fn kernel(&self, image: ImageId, name: &CStr) -> Result<KernelId> {
        self.enter()?;
        let handle = self.module(image)?;
        let mut func: CuFunction = std::ptr::null_mut();
        // SAFETY: `handle` is a loaded module and `name` is NUL-terminated.
        let r = unsafe { (self.driver.module_get_function)(&mut func, handle as CuModule, name.as_ptr()) };
        let text = name.to_string_lossy();
        self.check(r, "cuModuleGetFunction")
            .map_err(|e| PluginError { reason: format!("failed to load kernel '{text}': {}", e.reason), ..e })?;
        let env = self
            .modules
            .lock()
            .get(image.0)
            .and_then(|m| m.as_ref().and_then(|m| image::kernel_environment(&m.bytes, &text)));
        let mut kernels = self.kernels.lock();
        kernels.push(KernelEntry { func: func as usize, kernel: Kernel { env }, name: text.into_owned() });
        Ok(KernelId::new(kernels.len()))
    }

    fn global(&self, image: ImageId, name: &CStr) -> Result<GlobalSymbol> {
        self.enter()?;
        let handle = self.module(image)?;
        let (mut addr, mut size): (CuDevicePtr, usize) = (0, 0);
        // SAFETY: `handle` is a loaded module, `name` NUL-terminated; writes an address and a size.
        let r = unsafe { (self.driver.module_get_global)(&mut addr, &mut size, handle as CuModule, name.as_ptr()) };
        self.check(r, "cuModuleGetGlobal").map_err(|e| PluginError {
            reason: format!("Failed to load global '{}': {}", name.to_string_lossy(), e.reason),
            ..e
        })?;
        Ok(GlobalSymbol { addr: addr as usize, size })
    }

    fn alloc(&self, size: usize, kind: AllocKind) -> Result<usize> {
        self.enter()?;
        let ptr = match kind {
            AllocKind::Host => {
                let mut p: *mut c_void = std::ptr::null_mut();
                // SAFETY: writes one pointer to page-locked host memory of `size` bytes.
                self.check(unsafe { (self.driver.mem_alloc_host)(&mut p, size) }, "cuMemAllocHost")?;
                p as usize
            }
            AllocKind::Shared => {
                let mut p: CuDevicePtr = 0;
                // SAFETY: writes one managed pointer.
                let r = unsafe { (self.driver.mem_alloc_managed)(&mut p, size, CU_MEM_ATTACH_GLOBAL) };
                self.check(r, "cuMemAllocManaged")?;
                p as usize
            }
            AllocKind::Device | AllocKind::Default | AllocKind::DeviceNonBlocking => {
                let mut p: CuDevicePtr = 0;
                // SAFETY: writes one device pointer.
                self.check(unsafe { (self.driver.mem_alloc)(&mut p, size) }, "cuMemAlloc")?;
                p as usize
            }
        };
        self.allocations.lock().insert(ptr, (kind, size));
        Ok(ptr)
    }

    fn free(&self, ptr: usize, _kind: AllocKind) -> Result<()> {
        let Some((kind, _)) = self.allocations.lock().remove(&ptr) else {
            return Err(PluginError::failed(format!(
                "0x{ptr:016x} is not memory allocated on CUDA device {} (freed twice, or never allocated)",
                self.ordinal
            )));
        };
        self.enter()?;
        if kind == AllocKind::Host {
            // SAFETY: `ptr` came from cuMemAllocHost and was live until removed above.
            self.check(unsafe { (self.driver.mem_free_host)(ptr as *mut c_void) }, "cuMemFreeHost")
        } else {
            // SAFETY: `ptr` came from cuMemAlloc/cuMemAllocManaged and was live until removed above.
            self.check(unsafe { (self.driver.mem_free)(ptr as CuDevicePtr) }, "cuMemFree")
        }
    }

    unsafe fn submit(&self, tgt: usize, host: usize, size: usize) -> Result<()> {
        // SAFETY: the caller's promise for both ranges; the stream is synchronised before
        // this returns.
        unsafe { self.submit_async(tgt, host, size, QueueId::SYNC) }
    }

    unsafe fn retrieve(&self, host: usize, tgt: usize, size: usize) -> Result<()> {
        // SAFETY: as for `submit`.
        unsafe { self.retrieve_async(host, tgt, size, QueueId::SYNC) }
    }

    unsafe fn copy_within(&self, dst: usize, src: usize, size: usize) -> Result<()> {
        let (reads, writes) = (Touches::range(src, size), Touches::range(dst, size));
        self.copy("cuMemcpyDtoDAsync", QueueId::SYNC, Some(reads), Some(writes), |stream| {
            // SAFETY: both ranges lie in allocations or globals of this device (the
            // caller's promise).
            unsafe { (self.driver.memcpy_dtod_async)(dst as CuDevicePtr, src as CuDevicePtr, size, stream) }
        })
    }

    unsafe fn fill(&self, tgt: usize, byte: u8, size: usize) -> Result<()> {
        self.copy("cuMemsetD8Async", QueueId::SYNC, None, Some(Touches::range(tgt, size)), |stream| {
            // SAFETY: the device range lies in an allocation or global of this device (the
            // caller's promise).
            unsafe { (self.driver.memset_d8_async)(tgt as CuDevicePtr, byte, size, stream) }
        })
    }

    fn peer(&self) -> Option<Peer> {
        Some(Peer { backend: PEER_BACKEND, handle: self.context })
    }

    unsafe fn copy_to_peer(&self, peer: Peer, dst: usize, src: usize, size: usize) -> Option<Result<()>> {
        if peer.backend != PEER_BACKEND {
            return None;
        }
        Some(self.copy("cuMemcpyPeerAsync", QueueId::SYNC, Some(Touches::range(src, size)), None, |stream| {
            // SAFETY: the source range lies in this device's memory and the destination in
            // that of the open CUDA device whose primary context `peer.handle` is (the
            // caller's promise); the stream is synchronised before this returns.
            unsafe {
                (self.driver.memcpy_peer_async)(
                    dst as CuDevicePtr,
                    peer.handle as CuContext,
                    src as CuDevicePtr,
                    self.context as CuContext,
                    size,
                    stream,
                )
            }
        }))
    }

    unsafe fn launch(&self, kernel: KernelId, args: &[usize], config: &LaunchConfig) -> Result<()> {
        let mut frees = Vec::new();
        let stream = self.stream as CuStream;
        let timing = self.timing_start(stream);
        // SAFETY: the caller's promise, passed on; the stream is synchronised below.
        let launched = unsafe { self.launch_on(kernel, args, config, QueueId::SYNC, &mut frees) };
        let timing = timing.filter(|_| launched.is_ok()).and_then(|t| t.stop(stream));
        let synced = self.sync_stream(stream, frees);
        self.timing_done(timing);
        launched.and(synced)
    }

    fn info(&self) -> Vec<(String, String)> {
        let p = &self.props;
        let kv = |k: &str, v: String| (k.to_string(), v);
        vec![
            kv("CUDA Driver Version", p.driver_version.to_string()),
            kv("CUDA OpenMP Device Number", self.ordinal.to_string()),
            kv("Device Name", p.name.clone()),
            kv("Compute Capabilities", format!("sm_{}", p.sm)),
            kv("Global Memory Size", format!("{} bytes", p.total_memory)),
            kv("Number of Multiprocessors", p.multiprocessors.to_string()),
            kv("Shared Memory per Block", format!("{} bytes", p.shared_memory_per_block)),
            kv("Warp Size", p.limits.warp_size.to_string()),
            kv("Maximum Threads per Block", p.max_threads_per_block.to_string()),
            kv("Maximum Threads per Multiprocessor", p.max_threads_per_multiprocessor.to_string()),
            kv("Maximum Blocks per Launch", p.limits.block_limit.to_string()),
            kv("Clock Rate", format!("{} kHz", p.clock_khz)),
        ]
    }

    fn is_accessible(&self, ptr: usize, size: usize) -> bool {
        // Page-locked host memory and managed memory of ours are; program memory is not.
        self.allocations.lock().iter().any(|(&base, &(kind, len))| {
            matches!(kind, AllocKind::Host | AllocKind::Shared) && ptr >= base && ptr.saturating_add(size) <= base + len
        })
    }

    fn device_time(&self) -> Option<std::time::Duration> {
        self.last_device_time()
    }

    fn launch_shape(&self, kernel: KernelId, config: &LaunchConfig) -> Option<LaunchShape> {
        let (_, k) = self.kernel_entry(kernel).ok()?;
        Some(launch_rules::shape(&k, &self.props.limits, config))
    }

    fn create_queue(&self) -> Result<QueueId> {
        self.enter()?;
        let mut stream: CuStream = std::ptr::null_mut();
        // SAFETY: writes one stream of the current context.
        self.check(unsafe { (self.driver.stream_create)(&mut stream, CU_STREAM_NON_BLOCKING) }, "cuStreamCreate")?;
        Ok(self.streams.lock().add(stream as usize))
    }

    unsafe fn submit_async(&self, tgt: usize, host: usize, size: usize, queue: QueueId) -> Result<()> {
        self.copy("cuMemcpyHtoDAsync", queue, None, Some(Touches::range(tgt, size)), |stream| {
            // SAFETY: the caller vouches for the host range until the queue is synchronised
            // and for the device range.
            unsafe { (self.driver.memcpy_htod_async)(tgt as CuDevicePtr, host as *const c_void, size, stream) }
        })
    }

    unsafe fn retrieve_async(&self, host: usize, tgt: usize, size: usize, queue: QueueId) -> Result<()> {
        self.copy("cuMemcpyDtoHAsync", queue, Some(Touches::range(tgt, size)), None, |stream| {
            // SAFETY: as for `submit_async`, the host range writable.
            unsafe { (self.driver.memcpy_dtoh_async)(host as *mut c_void, tgt as CuDevicePtr, size, stream) }
        })
    }

    unsafe fn launch_async(
        &self,
        kernel: KernelId,
        args: &[usize],
        config: &LaunchConfig,
        queue: QueueId,
    ) -> Result<()> {
        if queue == QueueId::SYNC {
            // SAFETY: the caller's promise.
            return unsafe { self.launch(kernel, args, config) };
        }
        let mut frees = Vec::new();
        // SAFETY: the caller's promise, valid until the queue is synchronised.
        let launched = unsafe { self.launch_on(kernel, args, config, queue, &mut frees) };
        self.streams.lock().free_after(queue, frees);
        launched
    }

    fn synchronize(&self, queue: QueueId) -> Result<()> {
        self.enter()?;
        let stream = self.stream_of(queue)?;
        let (events, frees) = self.streams.lock().done(queue);
        let synced = self.sync_stream(stream, frees);
        for event in events {
            // SAFETY: the event was created on this context and recorded on `stream`, which
            // is done; it was just taken out of the bookkeeping, so nothing waits on it again.
            unsafe { (self.driver.event_destroy)(event as CuEvent) };
        }
        synced
    }
}

impl Drop for CudaDevice {
    fn drop(&mut self) {
        if self.lost.get().is_some() || self.enter().is_err() {
            return;
        }
        // SAFETY: the events and streams were created on this context and are destroyed
        // once, here; then the primary context retained at open is released.
        unsafe {
            let (streams, events) = self.streams.get_mut().drain();
            for e in events {
                (self.driver.event_destroy)(e as CuEvent);
            }
            for s in streams {
                (self.driver.stream_destroy)(s as CuStream);
            }
            (self.driver.stream_destroy)(self.stream as CuStream);
            (self.driver.primary_ctx_release)(self.device);
        }
    }
}
