//! The device memory API: `omp_target_alloc`, `omp_target_memcpy[_rect]`,
//! `omp_target_associate_ptr`, and friends. These work on a device whose images were never
//! loaded. A bad argument or a failed device is a [`MemoryApiError`]: the C boundary reports
//! it and returns the call's documented failure value.

mod error;

pub use error::{MemoryApiError, On};

use crate::table::{Lookup, MapEntry, INF};
use crate::trace::{ApiOp, Event};
use crate::{DeviceCtx, MapName, Runtime};
use omp_plugin::{host_memory, AllocKind};
use omp_sync::Mutex;
use std::collections::BTreeMap;
use std::sync::Arc;

/// `OFFLOAD_FAIL` for the integer-returning API calls.
pub const FAIL: i32 = -1;

/// The key of the host device in [`Allocations`] (its user number moves as devices open).
const HOST_KEY: i32 = -1;

/// What `omp_target_alloc` and friends handed out, per device: copies and fills are bounded
/// by it, and frees are checked against it.
#[derive(Default)]
pub struct Allocations(Mutex<BTreeMap<(i32, usize), usize>>);

impl Allocations {
    fn lock(&self) -> omp_sync::MutexGuard<'_, BTreeMap<(i32, usize), usize>> {
        self.0.lock()
    }
    fn insert(&self, dev: i32, ptr: usize, size: usize) {
        self.lock().insert((dev, ptr), size);
    }
    /// Forgets a block; false when `ptr` does not start one (never allocated, freed already).
    fn remove(&self, dev: i32, ptr: usize) -> bool {
        self.lock().remove(&(dev, ptr)).is_some()
    }
    /// Bytes from `ptr` to the end of the allocation that contains it, if one does.
    fn room(&self, dev: i32, ptr: usize) -> Option<usize> {
        let all = self.lock();
        let (&(d, start), &size) = all.range(..=(dev, ptr)).next_back()?;
        (d == dev && ptr - start < size).then(|| size - (ptr - start))
    }
    /// Whether `ptr` lies in a block handed out for any device.
    pub(crate) fn holds(&self, ptr: usize) -> bool {
        self.lock().iter().any(|(&(_, start), &size)| ptr.wrapping_sub(start) < size)
    }
}

/// A device number in an API call: the host (initial device) or an offload device.
pub enum ApiDevice {
    Host,
    Offload(Arc<DeviceCtx>),
}

impl ApiDevice {
    fn key(&self) -> i32 {
        match self {
            ApiDevice::Host => HOST_KEY,
            ApiDevice::Offload(d) => d.id,
        }
    }

    /// The device as messages name it.
    fn on(&self) -> On {
        match self {
            ApiDevice::Host => On::Host,
            ApiDevice::Offload(d) => On::Device(d.id),
        }
    }
}

impl Runtime {
    /// Bytes from `ptr` to the end of the block of `dev` that holds it (an API allocation or
    /// a mapping's device copy), when the runtime knows one.
    fn room(&self, dev: &ApiDevice, ptr: usize) -> Option<usize> {
        if let Some(n) = self.api_allocs.room(dev.key(), ptr) {
            return Some(n);
        }
        let ApiDevice::Offload(d) = dev else { return None };
        let t = d.lock_table();
        let e = t.iter().find(|e| ptr >= e.tgt_begin && ptr - e.tgt_begin < e.size())?;
        Some(e.size() - (ptr - e.tgt_begin))
    }

    /// Checks that `len` bytes at `ptr` fit in the block that holds them.
    fn fits(&self, call: &'static str, dev: &ApiDevice, ptr: usize, len: usize) -> Result<(), MemoryApiError> {
        match self.room(dev, ptr) {
            Some(room) if len > room => Err(MemoryApiError::PastAllocation { call, len, ptr, on: dev.on(), room }),
            _ => Ok(()),
        }
    }

    /// Loads the device's images before an API call that may name declare-target data, as a
    /// launch does (LLVM 22; LLVM 19 does not, and clang 19 programs keep its answers).
    /// The call goes on when loading fails (the answer is then the unloaded device's): the
    /// failure is said here.
    fn load_for_api(&self, d: &DeviceCtx, call: &'static str) {
        if self.clang19_programs_only() {
            return;
        }
        if let Err(e) = self.ensure_loaded(d) {
            crate::error::report(&MemoryApiError::Load { call, device: d.id, source: Box::new(e) });
        }
    }

    /// Resolves an API device number.
    pub fn api_device(&self, id: i32, call: &'static str) -> Result<ApiDevice, MemoryApiError> {
        if id == self.initial_device() {
            return Ok(ApiDevice::Host);
        }
        match self.device(id) {
            // A lost device was reported when it was lost; calls on it just fail.
            Some(d) if d.lost().is_some() => Err(MemoryApiError::LostDevice),
            Some(d) => Ok(ApiDevice::Offload(d)),
            None => Err(MemoryApiError::InvalidDevice {
                call,
                id,
                devices: self.num_devices(),
                host: self.initial_device(),
            }),
        }
    }

    /// `omp_target_alloc` and friends: the block, or 0 for a size that cannot be allocated.
    pub fn target_alloc(
        &self,
        size: usize,
        device: i32,
        kind: AllocKind,
        call: &'static str,
    ) -> Result<usize, MemoryApiError> {
        if size == 0 || size > isize::MAX as usize {
            return Ok(0);
        }
        let dev = self.api_device(device, call)?;
        let ptr = match &dev {
            ApiDevice::Host => host_memory::malloc(size),
            ApiDevice::Offload(d) => d.alloc_direct(size, kind).map_err(|e| MemoryApiError::Alloc {
                call,
                size,
                device,
                source: Box::new(e),
            })?,
        };
        if ptr != 0 {
            self.api_allocs.insert(dev.key(), ptr, size);
            self.api_event(
                ApiOp::Alloc,
                device,
                ptr,
                matches!(kind, AllocKind::Host | AllocKind::Shared) as usize,
                size,
            );
        }
        Ok(ptr)
    }

    /// Reports a device memory API call to observers.
    fn api_event(&self, op: ApiOp, device: i32, ptr: usize, other: usize, bytes: usize) {
        if self.observing() {
            self.emit(&Event::Api { op, device, ptr, other, bytes });
        }
    }

    /// `omp_target_free` and friends.
    pub fn target_free(
        &self,
        ptr: usize,
        device: i32,
        kind: AllocKind,
        call: &'static str,
    ) -> Result<(), MemoryApiError> {
        if ptr == 0 {
            return Ok(());
        }
        let dev = self.api_device(device, call)?;
        if !self.api_allocs.remove(dev.key(), ptr) {
            return Err(MemoryApiError::BadFree { call, ptr, on: dev.on() });
        }
        self.api_event(ApiOp::Free, device, ptr, 0, 0);
        match dev {
            // SAFETY: `api_allocs` just confirmed that `omp_target_alloc` returned `ptr` for
            // the host device (from `host_memory::malloc`) and that it was not freed since.
            ApiDevice::Host => unsafe { host_memory::free(ptr) },
            ApiDevice::Offload(d) => {
                d.free_direct(ptr, kind).map_err(|e| MemoryApiError::Free { call, ptr, source: Box::new(e) })?
            }
        }
        Ok(())
    }

    /// `omp_target_is_present`.
    pub fn is_present(&self, ptr: usize, device: i32) -> Result<i32, MemoryApiError> {
        if ptr == 0 {
            return Ok(0);
        }
        Ok(match self.api_device(device, "omp_target_is_present")? {
            ApiDevice::Host => 1,
            ApiDevice::Offload(d) => {
                self.load_for_api(&d, "omp_target_is_present");
                i32::from(matches!(d.lock_table().lookup(ptr, 1), Lookup::Contained(_)))
            }
        })
    }

    /// `omp_get_mapped_ptr`.
    pub fn mapped_ptr(&self, ptr: usize, device: i32) -> Result<usize, MemoryApiError> {
        if ptr == 0 {
            return Err(MemoryApiError::NullHostPointer);
        }
        Ok(match self.api_device(device, "omp_get_mapped_ptr")? {
            ApiDevice::Host => ptr,
            ApiDevice::Offload(d) => {
                self.load_for_api(&d, "omp_get_mapped_ptr");
                // Data on a spreading trip comes home first, and never goes again.
                let t = self.lock_idle(&d, None, &[(ptr, 1)]);
                match t.lookup(ptr, 1) {
                    Lookup::Contained(k) => {
                        if let Some(spread) = &self.spread {
                            spread.expose(d.id, k);
                        }
                        t.get(k).expect("key").translate(ptr)
                    }
                    _ => 0,
                }
            }
        })
    }

    /// `omp_target_is_accessible`: host memory is accessible from the initial device; never
    /// from an isolated device; from a device that shares the address space only for clang 19
    /// programs. LLVM 22 asks its plugin, and its host plugin answers false (with or without
    /// `requires unified_shared_memory`): clang 22 programs, and LLVM 22's own test
    /// `mapping/is_accessible.cpp`, take that answer's path (docs/ARCHITECTURE.md).
    pub fn is_accessible(&self, ptr: usize, size: usize, device: i32) -> Result<i32, MemoryApiError> {
        if ptr == 0 || size == 0 {
            return Ok(0);
        }
        Ok(match self.api_device(device, "omp_target_is_accessible")? {
            ApiDevice::Host => 1,
            ApiDevice::Offload(d) => i32::from(d.is_accessible(ptr, size) && self.clang19_programs_only()),
        })
    }

    /// `omp_target_memcpy`: any pair of host and device memory.
    ///
    /// # Safety
    /// A side on the initial device (the host) is program memory the caller names for this
    /// copy: `[src+src_off, +len)` readable, `[dst+dst_off, +len)` writable, for the call.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn memcpy(
        &self,
        dst: usize,
        src: usize,
        len: usize,
        dst_off: usize,
        src_off: usize,
        dst_dev: i32,
        src_dev: i32,
    ) -> Result<(), MemoryApiError> {
        if len == 0 {
            return Ok(());
        }
        if dst == 0 || src == 0 {
            return Err(MemoryApiError::MemcpyNull);
        }
        // Both numbers are checked: two bad ones are two errors.
        let (d, s) =
            match (self.api_device(dst_dev, "omp_target_memcpy"), self.api_device(src_dev, "omp_target_memcpy")) {
                (Ok(d), Ok(s)) => (d, s),
                (Err(a), Err(b)) => return Err(MemoryApiError::Devices(Box::new([a, b]))),
                (Err(e), _) | (_, Err(e)) => return Err(e),
            };
        let (Some(dst), Some(src)) = (dst.checked_add(dst_off), src.checked_add(src_off)) else {
            return Err(MemoryApiError::MemcpyOffsetOverflow);
        };
        if dst.checked_add(len).is_none() || src.checked_add(len).is_none() {
            return Err(MemoryApiError::MemcpyPastEnd { len });
        }
        self.fits("omp_target_memcpy", &d, dst, len)?;
        self.fits("omp_target_memcpy", &s, src, len)?;
        match (&d, &s) {
            (ApiDevice::Offload(_), ApiDevice::Host) => self.api_event(ApiOp::CopyToDevice, dst_dev, dst, src, len),
            (ApiDevice::Host, ApiDevice::Offload(_)) => self.api_event(ApiOp::CopyFromDevice, src_dev, src, dst, len),
            (ApiDevice::Offload(a), ApiDevice::Offload(b)) if Arc::ptr_eq(a, b) => {
                self.api_event(ApiOp::CopyWithinDevice, dst_dev, dst, src, len)
            }
            (ApiDevice::Offload(_), ApiDevice::Offload(_)) => {
                self.api_event(ApiOp::CopyFromDevice, src_dev, src, dst, len);
                self.api_event(ApiOp::CopyToDevice, dst_dev, dst, src, len);
            }
            (ApiDevice::Host, ApiDevice::Host) => {}
        }
        let r = match (d, s) {
            (ApiDevice::Host, ApiDevice::Host) => {
                // SAFETY: both ranges are host memory the program named for this copy (the
                // caller's promise).
                unsafe { host_memory::copy(dst, src, len) };
                Ok(())
            }
            // SAFETY: the host side is memory the program named for this copy (the caller's
            // promise).
            (ApiDevice::Offload(d), ApiDevice::Host) => unsafe { d.submit(dst, src, len) },
            // SAFETY: as above, writable by the same contract.
            (ApiDevice::Host, ApiDevice::Offload(s)) => unsafe { s.retrieve(dst, src, len) },
            (ApiDevice::Offload(d), ApiDevice::Offload(s)) => {
                if Arc::ptr_eq(&d, &s) {
                    // SAFETY: both are device addresses the program named for this copy
                    // (`omp_target_memcpy`'s contract).
                    unsafe { d.copy_within(dst, src, len) }
                } else {
                    // SAFETY: both are device addresses the program named for this copy, each
                    // on its device (`omp_target_memcpy`'s contract).
                    unsafe { s.copy_to_device(&d, dst, src, len) }
                }
            }
        };
        r.map_err(|e| MemoryApiError::Memcpy(Box::new(e)))
    }

    /// `omp_target_memcpy_rect`. Null `dst` and `src` ask for the number of dimensions supported.
    ///
    /// # Safety
    /// A side on the initial device is program memory holding the whole sub-volume the
    /// offsets and dimensions describe, readable (`src`) or writable (`dst`), for the call.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn memcpy_rect(
        &self,
        dst: usize,
        src: usize,
        elem: usize,
        volume: &[usize],
        dst_offsets: &[usize],
        src_offsets: &[usize],
        dst_dims: &[usize],
        src_dims: &[usize],
        dst_dev: i32,
        src_dev: i32,
    ) -> Result<(), MemoryApiError> {
        let dims = volume.len();
        if dims == 0
            || elem == 0
            || dst_offsets.len() != dims
            || src_offsets.len() != dims
            || dst_dims.len() != dims
            || src_dims.len() != dims
        {
            return Err(MemoryApiError::RectArguments);
        }
        let overflow = || Err(MemoryApiError::RectOverflow);
        if dims == 1 {
            let (Some(len), Some(dst_off), Some(src_off)) =
                (elem.checked_mul(volume[0]), elem.checked_mul(dst_offsets[0]), elem.checked_mul(src_offsets[0]))
            else {
                return overflow();
            };
            // SAFETY: one row of the volume the caller vouched for.
            return unsafe { self.memcpy(dst, src, len, dst_off, src_off, dst_dev, src_dev) };
        }
        let product = |dims: &[usize]| dims.iter().try_fold(elem, |acc, &d| acc.checked_mul(d));
        let (Some(dst_slice), Some(src_slice)) = (product(&dst_dims[1..]), product(&src_dims[1..])) else {
            return overflow();
        };
        for i in 0..volume[0] {
            let at = |base: usize, slice: usize, off: usize| {
                off.checked_add(i).and_then(|row| slice.checked_mul(row)).and_then(|o| base.checked_add(o))
            };
            let (Some(dst_row), Some(src_row)) =
                (at(dst, dst_slice, dst_offsets[0]), at(src, src_slice, src_offsets[0]))
            else {
                return overflow();
            };
            // SAFETY: a slice of the volume the caller vouched for.
            unsafe {
                self.memcpy_rect(
                    dst_row,
                    src_row,
                    elem,
                    &volume[1..],
                    &dst_offsets[1..],
                    &src_offsets[1..],
                    &dst_dims[1..],
                    &src_dims[1..],
                    dst_dev,
                    src_dev,
                )
            }?;
        }
        Ok(())
    }

    /// `omp_target_memset` (whose C function always returns `ptr`).
    ///
    /// # Safety
    /// On the initial device, `[ptr, ptr+len)` is program memory the caller names for this
    /// fill, writable for the call.
    pub unsafe fn memset(&self, ptr: usize, byte: i32, len: usize, device: i32) -> Result<(), MemoryApiError> {
        if ptr == 0 || len == 0 {
            return Ok(());
        }
        let dev = self.api_device(device, "omp_target_memset")?;
        if ptr.checked_add(len).is_none() {
            return Err(MemoryApiError::MemsetPastEnd { len, ptr });
        }
        self.fits("omp_target_memset", &dev, ptr, len)?;
        match dev {
            // SAFETY: `fits` checked the range against what `omp_target_alloc` handed out, or
            // it is host memory the program named for this fill (the caller's promise).
            ApiDevice::Host => unsafe { host_memory::fill(ptr, byte as u8, len) },
            ApiDevice::Offload(d) => {
                self.api_event(ApiOp::Memset, device, ptr, byte as usize, len);
                // SAFETY: device memory the program named for this fill (`omp_target_memset`'s
                // contract), checked by `fits` against what `omp_target_alloc` handed out.
                unsafe { d.fill(ptr, byte as u8, len) }.map_err(|e| MemoryApiError::Memset(Box::new(e)))?;
            }
        }
        Ok(())
    }

    /// `omp_target_associate_ptr`: maps a host range to existing device memory, forever
    /// (until disassociated).
    pub fn associate_ptr(
        &self,
        host: usize,
        tgt: usize,
        size: usize,
        offset: usize,
        device: i32,
    ) -> Result<(), MemoryApiError> {
        const CALL: &str = "omp_target_associate_ptr";
        if host == 0 || tgt == 0 || size == 0 {
            return Err(MemoryApiError::AssociateArguments);
        }
        let d = match self.api_device(device, CALL)? {
            ApiDevice::Host => return Err(MemoryApiError::NoAssociationOnHost { call: CALL }),
            ApiDevice::Offload(d) => d,
        };
        let tgt_begin = tgt + offset;
        let mut t = d.lock_table();
        if let Lookup::Contained(k) | Lookup::Extends(k) = t.lookup(host, size) {
            let e = t.get(k).expect("key");
            if e.begin == host && e.tgt_begin == tgt_begin && e.size() == size {
                return Ok(());
            }
            return Err(MemoryApiError::Reassociate);
        }
        t.insert(MapEntry {
            base: host,
            begin: host,
            end: host + size,
            tgt_alloc: tgt_begin,
            tgt_begin,
            dyn_rc: INF,
            hold_rc: 0,
            name: MapName::NONE,
            shadows: Vec::new(),
            owns_memory: false,
        });
        Ok(())
    }

    /// `omp_target_disassociate_ptr`.
    pub fn disassociate_ptr(&self, host: usize, device: i32) -> Result<(), MemoryApiError> {
        const CALL: &str = "omp_target_disassociate_ptr";
        let d = match self.api_device(device, CALL)? {
            ApiDevice::Host => return Err(MemoryApiError::NoAssociationOnHost { call: CALL }),
            ApiDevice::Offload(d) => d,
        };
        let mut t = d.lock_table();
        let Some(e) = t.get(host) else {
            return Err(MemoryApiError::AssociationNotFound);
        };
        if e.hold_rc != 0 {
            return Err(MemoryApiError::DisassociateHeld);
        }
        if e.dyn_rc != INF || e.owns_memory {
            return Err(MemoryApiError::NotAssociated);
        }
        t.remove(host);
        Ok(())
    }
}
