//! One isolated device: the HAL's operations as requests to the worker, or as plain copies
//! into the device memory shared with it (the arena); in check mode, tracked launches.

use crate::{Running, Shared, State};
use omp_plugin::{
    host_memory, AccessTracking, AllocKind, Device, Fault, GlobalSymbol, GpuUse, ImageId, KernelId, LaunchConfig,
    PageAccess, PluginError, Result,
};
use omp_worker::{symbol_name, with_launch_request, CallError, Request, RequestPeer, Response, Worker};
use std::ffi::CStr;
use std::sync::Arc;

thread_local! {
    /// What the last kernel this thread launched tracked used of what a GPU limits
    /// (`LIBOMPTARGET_CHECK=gpu`), read while its launch held the device.
    static LAST_GPU_USE: std::cell::Cell<Option<GpuUse>> = const { std::cell::Cell::new(None) };
}

/// One isolated device: device `index` of the worker.
pub struct IsolateDevice {
    pub(crate) index: u32,
    pub(crate) shared: Arc<Shared>,
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
    /// kernel or argument harms only the worker); recorded under `LIBOMPTARGET_RECORD`.
    fn launch_untracked(&self, kernel: KernelId, args: &[usize], config: &LaunchConfig) -> Result<()> {
        let r = self.shared.worker()?;
        match &self.shared.record {
            Some(rec) => {
                let launch = || self.send_launch(&r, kernel, args, config);
                let read_global = |addr: usize, buf: &mut [u8]| {
                    r.worker.read_into(self.index, addr as u64, buf).map_err(|e| error(&r.worker, e))
                };
                rec.around_launch((self.index, kernel.raw()), args, config, r.arena.as_ref(), &read_global, launch)
            }
            None => self.send_launch(&r, kernel, args, config),
        }
    }

    fn send_launch(&self, r: &Running, kernel: KernelId, args: &[usize], config: &LaunchConfig) -> Result<()> {
        let w = &r.worker;
        match with_launch_request(self.index, kernel, args, config, |req| w.call(req)) {
            Ok(_) => Ok(()),
            Err(CallError::Died(how)) => {
                // SAFETY: the arena of a running worker stays mapped in this process.
                let overflow = r.arena.as_ref().and_then(|a| unsafe { crate::signals::stack_overflowed(a.base()) });
                let hint = if let Some(size) = overflow.filter(|_| how.contains("SIGSEGV")) {
                    stack_overflow_hint(size)
                } else if how.contains("SIGSEGV") || how.contains("SIGBUS") {
                    "; the kernel touched memory that is not device memory, e.g. a host pointer that was never \
                     mapped (the isolated device, like a GPU, cannot reach the program's memory)"
                        .to_string()
                } else if how.contains("called exec") {
                    String::new()
                } else if how.starts_with("exited with status") {
                    "; code in the target region ended the device's process (exit() inside a target region \
                     ends the isolated device's worker, not the program; a GPU kernel cannot exit)"
                        .to_string()
                } else if how.contains("SIGABRT") {
                    "; code in the target region aborted (abort(), or a failed assert)".to_string()
                } else {
                    String::new()
                };
                Err(PluginError::lost(format!("the isolated device's worker (pid {}) ended: {how}{hint}", w.pid())))
            }
            Err(e) => Err(error(w, e)),
        }
    }
}

impl RequestPeer for IsolateDevice {
    fn device_index(&self) -> u32 {
        self.index
    }

    fn peer_name(&self) -> &str {
        "the isolated device's worker"
    }

    fn request(&self, req: &Request) -> Result<Response> {
        let r = self.shared.worker()?;
        r.worker.call(req).map_err(|e| error(&r.worker, e))
    }
}

/// What a kernel whose stack overflowed is told: the stack its threads had, how to raise it,
/// and what a GPU allows.
fn stack_overflow_hint(size: usize) -> String {
    let kib = size / 1024;
    let raise = if size >= 1 << 20 { format!("{}M", 2 * size.div_ceil(1 << 20)) } else { format!("{}K", 2 * kib) };
    format!(
        "; stack overflow in the kernel (the kernel's threads had {kib} KiB of stack; raise it with \
         OMP_STACKSIZE={raise}; a GPU thread has about 1 KiB by default, raised with LIBOMPTARGET_STACK_SIZE): \
         deep recursion or large local arrays in a target region"
    )
}

impl Device for IsolateDevice {
    fn load_image(&self, image: &[u8]) -> Result<ImageId> {
        let id = self.load_request(image)?;
        if let Some(rec) = &self.shared.record {
            rec.image_loaded(self.index, id.0, image);
        }
        Ok(id)
    }

    fn kernel(&self, image: ImageId, name: &CStr) -> Result<KernelId> {
        let k = self.kernel_request(image, name)?;
        if let Some(rec) = &self.shared.record {
            rec.kernel_resolved(self.index, k.raw(), image.0, symbol_name(name)?);
        }
        Ok(k)
    }

    fn global(&self, image: ImageId, name: &CStr) -> Result<GlobalSymbol> {
        let g = self.global_request(image, name)?;
        if let Some(rec) = &self.shared.record {
            let r = self.shared.worker()?;
            rec.global_resolved((self.index, image.0), (symbol_name(name)?, g.addr, g.size), r.arena.as_ref());
        }
        Ok(g)
    }

    fn alloc(&self, size: usize, _kind: AllocKind) -> Result<usize> {
        // Every kind is device memory: no kernel reaches the program's own memory.
        let r = self.shared.worker()?;
        if let Some(a) = &r.arena {
            let addr = a
                .alloc(size)
                .ok_or_else(|| PluginError::out_of_memory(format!("out of device memory allocating {size} bytes")))?;
            if let Some(rec) = &self.shared.record {
                rec.allocated(addr, size);
            }
            return Ok(addr);
        }
        self.alloc_request(size)
    }

    fn free(&self, ptr: usize, _kind: AllocKind) -> Result<()> {
        let r = self.shared.worker()?;
        if let Some(a) = &r.arena {
            if a.free(ptr) {
                if let Some(rec) = &self.shared.record {
                    rec.freed(ptr);
                }
                return Ok(());
            }
            return Err(PluginError::failed(format!(
                "0x{ptr:016x} is not memory allocated on device {} (freed twice, or never allocated)",
                self.index
            )));
        }
        self.free_request(ptr)
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
        self.copy_request(dst, src, size)
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
                // Also where protections are off: the checker must hear why.
                State::Running(_) => true,
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
        // Nothing watched: every page counts as written, so that no finding is false.
        let all_written = || {
            let pages = watch
                .iter()
                .flat_map(|&(a, l)| (a & !(omp_plugin::TRACK_PAGE - 1)..a + l).step_by(omp_plugin::TRACK_PAGE));
            pages.map(|page| PageAccess { page, read_first: false, written: true }).collect()
        };
        LAST_GPU_USE.set(None);
        let r = self.shared.worker()?;
        let Some(arena) = r.arena.as_ref().filter(|a| a.checking() && !a.tracking_off()) else {
            self.launch_untracked(kernel, args, config)?;
            return Ok(all_written());
        };
        let _one = self.shared.tracked_launch.lock();
        // Without a control block the worker would not open the memory allocated since the
        // last launch: the kernel would fault on it.
        let prepared = arena.prepare(watch).ok_or_else(|| {
            PluginError::out_of_memory("device memory is too full for the checker's record of this launch")
        })?;
        self.launch_untracked(kernel, args, config)?;
        if self.shared.gpu_limits {
            // SAFETY: the arena's header page is part of its read-write mapping.
            LAST_GPU_USE.set(Some(unsafe { crate::gpu_limits::read(arena.base()) }));
        }
        // The worker may have given protections up before this kernel.
        Ok(if arena.tracking_off() { all_written() } else { arena.accesses(&prepared) })
    }

    fn gpu_use(&self) -> Option<GpuUse> {
        LAST_GPU_USE.take()
    }

    fn last_fault(&self) -> Option<Fault> {
        match &*self.shared.state.lock() {
            State::Running(r) => r.arena.as_ref().and_then(|a| a.fault()),
            _ => None,
        }
    }

    fn watching_less(&self) -> Option<String> {
        let State::Running(r) = &*self.shared.state.lock() else { return None };
        let Some(arena) = r.arena.as_ref().filter(|a| a.checking()) else {
            return Some(
                "its memory could not be shared with its worker (the address space is limited: `ulimit -v`), so \
                 out-of-bounds, stale and uninitialized accesses are not checked; lift the limit (`ulimit -v \
                 unlimited`) to check them"
                    .into(),
            );
        };
        if arena.tracking_off() {
            return Some(format!(
                "the system allows no more page protections (vm.max_map_count is {}; each mapping takes about two), \
                 so out-of-bounds, stale and uninitialized accesses are not checked from here on; raise it (`sysctl -w \
                 vm.max_map_count=1048576`) or map fewer arrays at once to check them",
                max_map_count()
            ));
        }
        arena.watch_dropped().then(|| {
            format!(
                "a kernel touched pages so scattered that watching each one would split its memory into more than {} \
                 regions (vm.max_map_count is {}), so the rest of that kernel's accesses are not checked for stale and \
                 uninitialized data; raise it (`sysctl -w vm.max_map_count=1048576`) to check them",
                crate::track::REGIONS_MAX,
                max_map_count()
            )
        })
    }
}

/// The system's `vm.max_map_count`, or 0 when it cannot be read.
fn max_map_count() -> usize {
    std::fs::read_to_string("/proc/sys/vm/max_map_count").ok().and_then(|s| s.trim().parse().ok()).unwrap_or(0)
}
