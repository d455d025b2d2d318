//! The device's operations: each calls the backend once and does, once, what every call
//! needs around it: the events that announce and report it, its timer, and marking a lost
//! device lost.

use super::DeviceCtx;
use crate::error::{Diagnostic, Lines};
use crate::memory_manager::MemoryManager;
use crate::table::MapEntry;
use crate::trace::{Direction, Event, Interval};
use crate::{MapName, Runtime};
use omp_plugin::{AllocKind, KernelId, LaunchConfig, PluginError};
use std::fmt;

/// Host buffers for copies between devices that cannot copy to each other are at most this
/// large: no allocation the runtime makes is sized by a length the user passed.
const BOUNCE: usize = 1 << 20;

/// A device operation (for the lost-device line: what the device was doing).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeviceOp {
    Alloc,
    Free,
    Submit,
    Retrieve,
    CopyWithin,
    Launch,
    Unload,
}

impl fmt::Display for DeviceOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            DeviceOp::Alloc => "allocating memory",
            DeviceOp::Free => "freeing memory",
            DeviceOp::Submit => "copying data to it",
            DeviceOp::Retrieve => "copying data from it",
            DeviceOp::CopyWithin => "copying data within it",
            DeviceOp::Launch => "running a kernel",
            DeviceOp::Unload => "unloading an image",
        })
    }
}

/// A backend operation that failed. The device layer has already recorded a lost device as
/// lost; the error that carries this one says what failed and, when this failure lost the
/// device, that it was lost ([`DeviceError::write_lost`]). `Display` is the backend's reason,
/// which those errors put in their own line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceError {
    /// The operation that failed.
    pub op: DeviceOp,
    /// What the backend said.
    pub source: PluginError,
    device: i32,
    /// This failure is the one that lost the device (said once).
    newly_lost: bool,
}

impl DeviceError {
    /// Whether the device is gone.
    pub fn is_lost(&self) -> bool {
        self.source.is_lost()
    }

    /// The line that says the device was lost while `during`, when this failure lost it.
    pub fn write_lost(&self, out: &mut Lines<'_>, during: fmt::Arguments) -> fmt::Result {
        if !self.newly_lost {
            return Ok(());
        }
        out.error(format_args!(
            "device {} was lost while {during}: {}; it will not be used again",
            self.device, self.source.reason
        ))
    }

    /// The lost-device line naming the operation itself.
    pub fn write_lost_during_op(&self, out: &mut Lines<'_>) -> fmt::Result {
        self.write_lost(out, format_args!("{}", self.op))
    }
}

/// Only the lost-device line of a failure whose own message is left out (memory freed after
/// a construct): nothing when the device was lost before.
pub struct LostWhile<'e>(pub &'e DeviceError);

impl Diagnostic for LostWhile<'_> {
    fn write_lines(&self, out: &mut Lines<'_>) -> fmt::Result {
        self.0.write_lost_during_op(out)
    }
}

impl fmt::Display for DeviceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.source, f)
    }
}

impl std::error::Error for DeviceError {}

/// Memory the runtime allocated for a mapping, with the interval the allocation took.
pub(crate) struct Allocation {
    pub tgt: usize,
    pub time: Option<Interval>,
}

impl DeviceCtx {
    /// The bookkeeping of a failed backend call: a lost device is marked lost (the first
    /// failure that says so is the one that reports it).
    #[cold]
    fn failed(&self, source: PluginError, op: DeviceOp) -> DeviceError {
        let newly_lost = source.is_lost() && self.lost.set(source.reason.clone()).is_ok();
        crate::debug!("omptarget", "device {}: plugin call failed while {op}: {source}", self.id);
        DeviceError { op, source, device: self.id, newly_lost }
    }

    #[inline]
    fn check<T>(&self, r: omp_plugin::Result<T>, op: DeviceOp) -> Result<T, DeviceError> {
        r.map_err(|e| self.failed(e, op))
    }

    /// Allocates device memory for the runtime's own use (mappings, private copies), through
    /// the memory manager when small. Free it with [`DeviceCtx::free_sized`].
    pub(crate) fn alloc(&self, size: usize, kind: AllocKind) -> Result<usize, DeviceError> {
        if self.mm.manages(size) {
            if let Some(p) = self.mm.take(size) {
                crate::debug!("omptarget", "device {}: memory manager hit: {size} bytes at 0x{p:016x}", self.id);
                return Ok(p);
            }
            crate::debug!(
                "omptarget",
                "device {}: memory manager miss: {size} bytes, allocating on the device",
                self.id
            );
            return self.alloc_direct(MemoryManager::class(size).1, kind);
        }
        self.mm.take_large(size, kind).map_or_else(|| self.alloc_direct(size, kind), Ok)
    }

    /// Allocates straight from the device; on failure, releases the cache and retries once.
    pub(crate) fn alloc_direct(&self, size: usize, kind: AllocKind) -> Result<usize, DeviceError> {
        let r = self.backend.alloc(size, kind).or_else(|_| {
            for b in self.mm.drain_free() {
                let _ = self.backend.free(b, AllocKind::Default);
            }
            self.backend.alloc(size, kind)
        });
        crate::debug!(
            "omptarget",
            "device {}: plugin alloc({size}, {kind:?}) -> {}",
            self.id,
            r.as_ref().map_or_else(|e| format!("error: {e}"), |p| format!("0x{p:016x}"))
        );
        self.check(r, DeviceOp::Alloc)
    }

    /// A mapping's device memory (`bytes` with its padding), timed for the `Alloc` event the
    /// caller queues (it holds the table lock).
    pub(crate) fn alloc_mapping(&self, rt: &Runtime, bytes: usize) -> Result<Allocation, DeviceError> {
        let start = rt.start_timer();
        let tgt = self.alloc(bytes, AllocKind::Default)?;
        Ok(Allocation { tgt, time: Runtime::stop_timer(start) })
    }

    /// Frees memory from [`DeviceCtx::alloc`] of `size` bytes.
    pub(crate) fn free_sized(&self, ptr: usize, size: usize, kind: AllocKind) -> Result<(), DeviceError> {
        if self.mm.manages(size) {
            crate::debug!("omptarget", "device {}: memory manager keeps {size} bytes at 0x{ptr:016x}", self.id);
            self.mm.give_back(ptr, size);
            return Ok(());
        }
        self.mm.keep_large(ptr, size, kind).try_for_each(|p| self.free_direct(p, kind))
    }

    /// Frees memory from [`DeviceCtx::alloc_direct`].
    pub(crate) fn free_direct(&self, ptr: usize, kind: AllocKind) -> Result<(), DeviceError> {
        let r = self.backend.free(ptr, kind);
        crate::debug!("omptarget", "device {}: plugin free(0x{ptr:016x}, {kind:?}) -> {r:?}", self.id);
        self.check(r, DeviceOp::Free)
    }

    /// Frees the device memory of a removed mapping, with its `Free` event.
    #[link_section = ".text.hot.omp_launch"]
    pub(crate) fn free_mapping(&self, rt: &Runtime, e: &MapEntry) -> Result<(), DeviceError> {
        let allocated = e.size() + (e.tgt_begin - e.tgt_alloc);
        let start = rt.start_timer();
        let freed = self.free_sized(e.tgt_alloc, allocated, AllocKind::Default);
        let time = Runtime::stop_timer(start);
        rt.emit(&Event::Free { device: self.id, tgt: e.tgt_alloc, bytes: e.size(), name: e.name, time });
        freed
    }

    /// Host→device copy, announced and reported as a `Transfer` of mapping `name`. With no
    /// observer it is the backend's call alone (see [`DeviceCtx::launch`]).
    ///
    /// # Safety
    /// `[host, host+size)` must be readable program memory for the duration of the call.
    #[inline]
    pub(crate) unsafe fn submit_traced(
        &self,
        rt: &Runtime,
        tgt: usize,
        host: usize,
        size: usize,
        name: MapName,
    ) -> Result<(), DeviceError> {
        if !rt.observing() {
            // SAFETY: the caller's promise.
            return self.check(unsafe { self.backend.submit(tgt, host, size) }, DeviceOp::Submit);
        }
        self.transfer(rt, Direction::ToDevice, host, tgt, size, name, || {
            // SAFETY: the caller's promise.
            unsafe { self.submit(tgt, host, size) }
        })
    }

    /// Device→host copy, announced and reported as a `Transfer` of mapping `name`. With no
    /// observer it is the backend's call alone (see [`DeviceCtx::launch`]).
    ///
    /// # Safety
    /// `[host, host+size)` must be writable program memory for the duration of the call.
    #[inline]
    pub(crate) unsafe fn retrieve_traced(
        &self,
        rt: &Runtime,
        host: usize,
        tgt: usize,
        size: usize,
        name: MapName,
    ) -> Result<(), DeviceError> {
        if !rt.observing() {
            // SAFETY: the caller's promise.
            return self.check(unsafe { self.backend.retrieve(host, tgt, size) }, DeviceOp::Retrieve);
        }
        self.transfer(rt, Direction::FromDevice, host, tgt, size, name, || {
            // SAFETY: the caller's promise.
            unsafe { self.retrieve(host, tgt, size) }
        })
    }

    /// A copy between the event that announces it and the one that reports it done.
    #[allow(clippy::too_many_arguments)]
    fn transfer<R>(
        &self,
        rt: &Runtime,
        dir: Direction,
        host: usize,
        tgt: usize,
        bytes: usize,
        name: MapName,
        copy: impl FnOnce() -> R,
    ) -> R {
        self.observed(rt, |done| Event::Transfer { device: self.id, dir, host, tgt, bytes, name, done }, copy)
    }

    /// An operation someone observes: between the event that announces it and the one that
    /// reports it done with its interval (when an observer reads intervals). Out of line: the
    /// unobserved paths that call it stay small.
    #[inline(never)]
    fn observed<'e, R>(
        &self,
        rt: &Runtime,
        event: impl Fn(Option<Interval>) -> Event<'e>,
        op: impl FnOnce() -> R,
    ) -> R {
        rt.emit(&event(None));
        let start = rt.start_timer();
        let r = op();
        if let Some(t) = Runtime::stop_timer(start) {
            rt.emit(&event(Some(self.measured(t))));
        }
        r
    }

    /// The interval a backend call took: the host's, its length replaced by the device's own
    /// measure where the backend has one (a GPU's events under the profile).
    fn measured(&self, t: Interval) -> Interval {
        match self.backend.device_time() {
            Some(d) => Interval { start: t.start, end: t.start + d },
            None => t,
        }
    }

    /// Host→device copy with no event (the device memory API reports its own).
    ///
    /// # Safety
    /// `[host, host+size)` must be readable program memory for the duration of the call.
    pub(crate) unsafe fn submit(&self, tgt: usize, host: usize, size: usize) -> Result<(), DeviceError> {
        // SAFETY: the caller's promise.
        let r = unsafe { self.backend.submit(tgt, host, size) };
        crate::debug!(
            "omptarget",
            "device {}: plugin submit(tgt 0x{tgt:016x}, hst 0x{host:016x}, {size}) -> {r:?}",
            self.id
        );
        self.check(r, DeviceOp::Submit)
    }

    /// Device→host copy with no event (the device memory API reports its own).
    ///
    /// # Safety
    /// `[host, host+size)` must be writable program memory for the duration of the call.
    pub(crate) unsafe fn retrieve(&self, host: usize, tgt: usize, size: usize) -> Result<(), DeviceError> {
        // SAFETY: the caller's promise.
        let r = unsafe { self.backend.retrieve(host, tgt, size) };
        crate::debug!(
            "omptarget",
            "device {}: plugin retrieve(hst 0x{host:016x}, tgt 0x{tgt:016x}, {size}) -> {r:?}",
            self.id
        );
        self.check(r, DeviceOp::Retrieve)
    }

    /// Copies `len` bytes between two places of this device's memory.
    ///
    /// # Safety
    /// As [`omp_plugin::Device::copy_within`]: both ranges lie in this device's memory.
    pub(crate) unsafe fn copy_within(&self, dst: usize, src: usize, len: usize) -> Result<(), DeviceError> {
        // SAFETY: the caller's promise.
        let r = unsafe { self.backend.copy_within(dst, src, len) };
        crate::debug!(
            "omptarget",
            "device {}: plugin copy_within(0x{dst:016x}, 0x{src:016x}, {len}) -> {r:?}",
            self.id
        );
        self.check(r, DeviceOp::CopyWithin)
    }

    /// Fills `len` bytes of this device's memory with `byte` (on the device where the backend
    /// can; else from a host buffer).
    ///
    /// # Safety
    /// `[tgt, tgt+len)` lies inside one allocation (or global) of this device.
    pub(crate) unsafe fn fill(&self, tgt: usize, byte: u8, len: usize) -> Result<(), DeviceError> {
        // SAFETY: the caller's promise.
        let r = unsafe { self.backend.fill(tgt, byte, len) };
        crate::debug!("omptarget", "device {}: plugin fill(tgt 0x{tgt:016x}, {byte}, {len}) -> {r:?}", self.id);
        self.check(r, DeviceOp::Submit)
    }

    /// Copies `len` bytes of this device's memory to `dst` on device `to` without the host,
    /// where both backends can (two GPUs of one driver); `None` otherwise.
    ///
    /// # Safety
    /// `[src, src+len)` lies in this device's memory and `[dst, dst+len)` in `to`'s.
    pub(crate) unsafe fn copy_to_peer(
        &self,
        to: &DeviceCtx,
        dst: usize,
        src: usize,
        len: usize,
    ) -> Option<Result<(), DeviceError>> {
        let peer = to.backend.peer()?;
        // SAFETY: the caller's promise; `to` is open while the caller holds it.
        let r = unsafe { self.backend.copy_to_peer(peer, dst, src, len) }?;
        crate::debug!(
            "omptarget",
            "device {}: plugin copy_to_peer(device {}, 0x{dst:016x}, 0x{src:016x}, {len}) -> {r:?}",
            self.id,
            to.id
        );
        Some(self.check(r, DeviceOp::Retrieve))
    }

    /// Copies `len` bytes of this device's memory to `dst` on device `to`: directly where
    /// both backends can ([`DeviceCtx::copy_to_peer`]: MPI ranks, GPUs of one driver), else
    /// through a host buffer of at most [`BOUNCE`] bytes.
    ///
    /// # Safety
    /// `[src, src+len)` lies in this device's memory and `[dst, dst+len)` in `to`'s.
    pub(crate) unsafe fn copy_to_device(
        &self,
        to: &DeviceCtx,
        dst: usize,
        src: usize,
        len: usize,
    ) -> Result<(), DeviceError> {
        // SAFETY: the caller's promise.
        if let Some(r) = unsafe { self.copy_to_peer(to, dst, src, len) } {
            return r;
        }
        let mut bounce = vec![0u8; len.min(BOUNCE)];
        let b = bounce.as_mut_ptr() as usize;
        (0..len).step_by(BOUNCE).try_for_each(|at| {
            let n = (len - at).min(BOUNCE);
            // SAFETY: `bounce` is ours and holds at least `n` bytes; the device ranges are the
            // caller's promise.
            unsafe { self.retrieve(b, src.wrapping_add(at), n).and_then(|_| to.submit(dst.wrapping_add(at), b, n)) }
        })
    }

    /// Device bytes for an observer (the checker): no event, and a failure is the observer's
    /// own business (the next operation of the runtime meets it and reports it).
    ///
    /// # Safety
    /// `[tgt, tgt+len)` lies inside one allocation (or global) of this device.
    pub(crate) unsafe fn read_for_observer(&self, tgt: usize, len: usize) -> Option<Vec<u8>> {
        let mut buf = Vec::new();
        buf.try_reserve_exact(len).ok()?;
        buf.resize(len, 0);
        // SAFETY: `buf` is ours, `len` writable bytes that nothing else uses; the device
        // range is the caller's promise.
        unsafe { self.backend.retrieve(buf.as_mut_ptr() as usize, tgt, len) }.ok()?;
        Some(buf)
    }

    /// Runs a kernel between the `Kernel` events `event` builds (announced, then done with
    /// its interval). The caller names the kernel and its place in the lost-device line
    /// ([`DeviceError::write_lost`]).
    ///
    /// With no observer (the usual case) this is the backend's call and nothing else: one
    /// relaxed load decides it, no event is built, no timer read, and the debug trace needs
    /// no check of its own (it is an observer, so it is off).
    ///
    /// # Safety
    /// As [`omp_plugin::Device::launch`]: `kernel` is this device's and `args` are what the
    /// kernel expects (device addresses of this device, or literals).
    #[inline]
    pub(crate) unsafe fn launch<'e>(
        &self,
        rt: &Runtime,
        kernel: KernelId,
        args: &[usize],
        config: &LaunchConfig,
        event: impl Fn(Option<Interval>) -> Event<'e>,
    ) -> Result<(), DeviceError> {
        if !rt.observing() {
            // SAFETY: the caller's promise, passed on.
            return self.check(unsafe { self.backend.launch(kernel, args, config) }, DeviceOp::Launch);
        }
        let launched = self.observed(rt, event, || {
            // SAFETY: the caller's promise, passed on.
            let launched = unsafe { self.backend.launch(kernel, args, config) };
            crate::debug!(
                "omptarget",
                "device {}: plugin launch({kernel:?}, {} arguments) -> {launched:?}",
                self.id,
                args.len()
            );
            launched
        });
        self.check(launched, DeviceOp::Launch)
    }

    /// Whether a kernel on this device can reach `[ptr, ptr+size)` of the program's memory.
    pub fn is_accessible(&self, ptr: usize, size: usize) -> bool {
        self.backend.is_accessible(ptr, size)
    }

    /// The blocks, threads and mode the backend gives a launch, where it decides them.
    pub(crate) fn launch_shape(&self, kernel: KernelId, config: &LaunchConfig) -> Option<omp_plugin::LaunchShape> {
        self.backend.launch_shape(kernel, config)
    }

    /// What the backend says about the device (`__tgt_print_device_info`).
    pub fn info(&self) -> Vec<(String, String)> {
        self.backend.info()
    }

    /// Unloads an image no launch uses any more.
    pub(crate) fn unload_image(&self, image: omp_plugin::ImageId) -> Result<(), DeviceError> {
        let r = self.backend.unload_image(image);
        crate::debug!("omptarget", "device {}: plugin unload_image({image:?}) -> {r:?}", self.id);
        self.check(r, DeviceOp::Unload)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use omp_plugin::mock::SharedMock;

    #[test]
    fn the_first_failure_that_finds_the_device_lost_marks_it_and_alone_reports_it() {
        let mock = SharedMock::default();
        let dev = DeviceCtx::new(3, 0, Box::new(mock.0.clone()), MemoryManager::new(0));
        let p = dev.alloc(64, AllocKind::Default).expect("a live device allocates");
        mock.0.lose("worker process exited (signal 9)");
        let byte = 0u8;
        // SAFETY: `byte` is a local, 1 readable byte.
        let first = unsafe { dev.submit(p, &byte as *const u8 as usize, 1) }.expect_err("a lost device copies nothing");
        assert!(first.is_lost() && first.newly_lost);
        assert_eq!(first.op, DeviceOp::Submit);
        assert_eq!(first.to_string(), "worker process exited (signal 9)");
        assert_eq!(dev.lost(), Some("worker process exited (signal 9)"));
        let second = dev.alloc(64, AllocKind::Default).expect_err("nor allocates");
        assert!(second.is_lost() && !second.newly_lost, "the loss is reported once");
        assert_eq!(second.op, DeviceOp::Alloc);
    }

    #[test]
    fn a_failure_that_leaves_the_device_usable_does_not_mark_it() {
        let dev = DeviceCtx::new(0, 0, Box::new(SharedMock::default().0), MemoryManager::new(0));
        let e = dev.free_direct(0x1234, AllocKind::Default).expect_err("nothing was allocated there");
        assert!(!e.is_lost() && !e.newly_lost);
        assert_eq!(dev.lost(), None);
    }
}
