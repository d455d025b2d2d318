//! The device memory API: `omp_target_alloc`, `omp_target_memcpy[_rect]`,
//! `omp_target_associate_ptr`, and friends. These work on a device whose images were never
//! loaded, and answer bad arguments with an error message and the documented return value.

use crate::table::{Lookup, MapEntry, INF};
use crate::trace::{ApiOp, Event};
use crate::{info, DeviceCtx, Runtime};
use omp_plugin::{host_memory, AllocKind};
use std::sync::Arc;

/// `OFFLOAD_FAIL` for the integer-returning API calls.
pub const FAIL: i32 = -1;

/// A device number in an API call: the host (initial device) or an offload device.
pub enum ApiDevice {
    Host,
    Offload(Arc<DeviceCtx>),
}

impl Runtime {
    /// Resolves an API device number, printing an error for a bad one.
    pub fn api_device(&self, id: i32, call: &str) -> Option<ApiDevice> {
        if id == self.initial_device() {
            return Some(ApiDevice::Host);
        }
        match self.device(id) {
            // A lost device was reported when it was lost; calls on it just fail.
            Some(d) if d.lost().is_some() => None,
            Some(d) => Some(ApiDevice::Offload(d)),
            None => {
                info::error(format_args!(
                    "{call}: device number {id} is not valid: {} offload devices (0..{}) and the host ({})",
                    self.num_devices(),
                    (self.num_devices() - 1).max(0),
                    self.initial_device()
                ));
                None
            }
        }
    }

    pub fn target_alloc(&self, size: usize, device: i32, kind: AllocKind, call: &str) -> usize {
        if size == 0 || size > isize::MAX as usize {
            return 0;
        }
        let ptr = match self.api_device(device, call) {
            None => 0,
            Some(ApiDevice::Host) => host_memory::malloc(size),
            Some(ApiDevice::Offload(d)) => d.alloc_direct(size, kind).unwrap_or_else(|e| {
                info::error(format_args!("{call}: allocating {size} bytes on device {device} failed: {e}"));
                0
            }),
        };
        if ptr != 0 {
            self.api_event(ApiOp::Alloc, device, ptr, 0, size);
        }
        ptr
    }

    /// Reports a device memory API call to observers.
    fn api_event(&self, op: ApiOp, device: i32, ptr: usize, other: usize, bytes: usize) {
        if self.observing() {
            self.emit(&Event::Api { op, device, ptr, other, bytes });
        }
    }

    pub fn target_free(&self, ptr: usize, device: i32, kind: AllocKind, call: &str) {
        if ptr == 0 {
            return;
        }
        self.api_event(ApiOp::Free, device, ptr, 0, 0);
        match self.api_device(device, call) {
            None => {}
            // SAFETY: the program hands back what `omp_target_alloc` gave it for the host
            // device (the API's contract; libomp's own allocator relies on the same).
            Some(ApiDevice::Host) => unsafe { host_memory::free(ptr) },
            Some(ApiDevice::Offload(d)) => {
                if let Err(e) = d.dev.free(ptr, kind) {
                    info::error(format_args!("{call}: Failed to deallocate device ptr 0x{ptr:016x}: {e}"));
                }
            }
        }
    }

    /// `omp_target_is_present`.
    pub fn is_present(&self, ptr: usize, device: i32) -> i32 {
        if ptr == 0 {
            return 0;
        }
        match self.api_device(device, "omp_target_is_present") {
            None => 0,
            Some(ApiDevice::Host) => 1,
            Some(ApiDevice::Offload(d)) => i32::from(matches!(d.lock_table().lookup(ptr, 1), Lookup::Contained(_))),
        }
    }

    /// `omp_get_mapped_ptr`.
    pub fn mapped_ptr(&self, ptr: usize, device: i32) -> usize {
        if ptr == 0 {
            info::error(format_args!("omp_get_mapped_ptr: the host pointer is NULL"));
            return 0;
        }
        match self.api_device(device, "omp_get_mapped_ptr") {
            None => 0,
            Some(ApiDevice::Host) => ptr,
            Some(ApiDevice::Offload(d)) => {
                let t = d.lock_table();
                match t.lookup(ptr, 1) {
                    Lookup::Contained(k) => t.get(k).expect("key").translate(ptr),
                    _ => 0,
                }
            }
        }
    }

    /// `omp_target_is_accessible`: host memory is accessible from host devices only where
    /// the address spaces are shared.
    pub fn is_accessible(&self, ptr: usize, size: usize, device: i32) -> i32 {
        if ptr == 0 || size == 0 {
            return 0;
        }
        match self.api_device(device, "omp_target_is_accessible") {
            None => 0,
            Some(ApiDevice::Host) => 1,
            Some(ApiDevice::Offload(d)) => i32::from(d.dev.is_accessible(ptr, size)),
        }
    }

    /// `omp_target_memcpy`: any pair of host and device memory.
    #[allow(clippy::too_many_arguments)]
    pub fn memcpy(
        &self,
        dst: usize,
        src: usize,
        len: usize,
        dst_off: usize,
        src_off: usize,
        dst_dev: i32,
        src_dev: i32,
    ) -> i32 {
        if len == 0 {
            return 0;
        }
        if dst == 0 || src == 0 {
            info::error(format_args!("Call to omp_target_memcpy with invalid arguments (NULL pointer)"));
            return FAIL;
        }
        let (Some(d), Some(s)) =
            (self.api_device(dst_dev, "omp_target_memcpy"), self.api_device(src_dev, "omp_target_memcpy"))
        else {
            return FAIL;
        };
        let dst = dst.wrapping_add(dst_off);
        let src = src.wrapping_add(src_off);
        match (&d, &s) {
            (ApiDevice::Offload(_), ApiDevice::Host) => self.api_event(ApiOp::CopyToDevice, dst_dev, dst, src, len),
            (ApiDevice::Host, ApiDevice::Offload(_)) => self.api_event(ApiOp::CopyFromDevice, src_dev, src, dst, len),
            (ApiDevice::Offload(_), ApiDevice::Offload(_)) => {
                self.api_event(ApiOp::CopyFromDevice, src_dev, src, dst, len);
                self.api_event(ApiOp::CopyToDevice, dst_dev, dst, src, len);
            }
            (ApiDevice::Host, ApiDevice::Host) => {}
        }
        let r = match (d, s) {
            (ApiDevice::Host, ApiDevice::Host) => {
                // SAFETY: both ranges are host memory the program named for this copy
                // (`omp_target_memcpy`'s contract).
                unsafe { host_memory::copy(dst, src, len) };
                Ok(())
            }
            // SAFETY: the host side is memory the program named for this copy.
            (ApiDevice::Offload(d), ApiDevice::Host) => unsafe { d.dev.submit(dst, src, len) },
            // SAFETY: as above, writable by the same contract.
            (ApiDevice::Host, ApiDevice::Offload(s)) => unsafe { s.dev.retrieve(dst, src, len) },
            (ApiDevice::Offload(d), ApiDevice::Offload(s)) => {
                if Arc::ptr_eq(&d, &s) {
                    d.dev.copy_within(dst, src, len)
                } else {
                    let mut bounce = vec![0u8; len];
                    let b = bounce.as_mut_ptr() as usize;
                    // SAFETY: `bounce` is ours and holds `len` bytes.
                    unsafe { s.dev.retrieve(b, src, len).and_then(|_| d.dev.submit(dst, b, len)) }
                }
            }
        };
        match r {
            Ok(()) => 0,
            Err(e) => {
                info::error(format_args!("omp_target_memcpy failed: {e}"));
                FAIL
            }
        }
    }

    /// `omp_target_memcpy_rect`. Null `dst` and `src` ask for the number of dimensions supported.
    #[allow(clippy::too_many_arguments)]
    pub fn memcpy_rect(
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
    ) -> i32 {
        let dims = volume.len();
        if dims == 0
            || elem == 0
            || dst_offsets.len() != dims
            || src_offsets.len() != dims
            || dst_dims.len() != dims
            || src_dims.len() != dims
        {
            info::error(format_args!("Call to omp_target_memcpy_rect with invalid arguments"));
            return FAIL;
        }
        if dims == 1 {
            return self.memcpy(
                dst,
                src,
                elem * volume[0],
                elem * dst_offsets[0],
                elem * src_offsets[0],
                dst_dev,
                src_dev,
            );
        }
        let dst_slice: usize = elem * dst_dims[1..].iter().product::<usize>();
        let src_slice: usize = elem * src_dims[1..].iter().product::<usize>();
        for i in 0..volume[0] {
            let r = self.memcpy_rect(
                dst + dst_slice * (dst_offsets[0] + i),
                src + src_slice * (src_offsets[0] + i),
                elem,
                &volume[1..],
                &dst_offsets[1..],
                &src_offsets[1..],
                &dst_dims[1..],
                &src_dims[1..],
                dst_dev,
                src_dev,
            );
            if r != 0 {
                return r;
            }
        }
        0
    }

    /// `omp_target_memset`: always returns `ptr`.
    pub fn memset(&self, ptr: usize, byte: i32, len: usize, device: i32) -> usize {
        if ptr == 0 || len == 0 {
            return ptr;
        }
        match self.api_device(device, "omp_target_memset") {
            None => {}
            // SAFETY: the range is host memory the program named for this fill.
            Some(ApiDevice::Host) => unsafe { host_memory::fill(ptr, byte as u8, len) },
            Some(ApiDevice::Offload(d)) => {
                self.api_event(ApiOp::Memset, device, ptr, byte as usize, len);
                let buf = vec![byte as u8; len];
                // SAFETY: `buf` is ours and holds `len` bytes.
                if let Err(e) = unsafe { d.dev.submit(ptr, buf.as_ptr() as usize, len) } {
                    info::error(format_args!("omp_target_memset failed: {e}"));
                }
            }
        }
        ptr
    }

    /// `omp_target_associate_ptr`: maps a host range to existing device memory, forever
    /// (until disassociated).
    pub fn associate_ptr(&self, host: usize, tgt: usize, size: usize, offset: usize, device: i32) -> i32 {
        if host == 0 || tgt == 0 || size == 0 {
            info::error(format_args!("omp_target_associate_ptr: invalid arguments (NULL pointer or zero size)"));
            return FAIL;
        }
        let d = match self.api_device(device, "omp_target_associate_ptr") {
            None => return FAIL,
            Some(ApiDevice::Host) => {
                info::error(format_args!("omp_target_associate_ptr: no association possible on the host"));
                return FAIL;
            }
            Some(ApiDevice::Offload(d)) => d,
        };
        let tgt_begin = tgt + offset;
        let mut t = d.lock_table();
        if let Lookup::Contained(k) | Lookup::Extends(k) = t.lookup(host, size) {
            let e = t.get(k).expect("key");
            if e.begin == host && e.tgt_begin == tgt_begin && e.size() == size {
                return 0;
            }
            info::error(format_args!(
                "Not allowed to re-associate a different device ptr+offset with the same host ptr"
            ));
            return FAIL;
        }
        t.insert(MapEntry {
            base: host,
            begin: host,
            end: host + size,
            tgt_alloc: tgt_begin,
            tgt_begin,
            dyn_rc: INF,
            hold_rc: 0,
            name: 0,
            shadows: Vec::new(),
            owns_memory: false,
        });
        0
    }

    /// `omp_target_disassociate_ptr`.
    pub fn disassociate_ptr(&self, host: usize, device: i32) -> i32 {
        let d = match self.api_device(device, "omp_target_disassociate_ptr") {
            None | Some(ApiDevice::Host) => {
                info::error(format_args!("omp_target_disassociate_ptr: no association possible on the host"));
                return FAIL;
            }
            Some(ApiDevice::Offload(d)) => d,
        };
        let mut t = d.lock_table();
        let Some(e) = t.get(host) else {
            info::error(format_args!("Association not found"));
            return FAIL;
        };
        if e.hold_rc != 0 {
            info::error(format_args!("Trying to disassociate a pointer with a non-zero hold reference count"));
            return FAIL;
        }
        if e.dyn_rc != INF || e.owns_memory {
            info::error(format_args!(
                "Trying to disassociate a pointer which was not mapped via omp_target_associate_ptr"
            ));
            return FAIL;
        }
        t.remove(host);
        0
    }
}
