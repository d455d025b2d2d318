//! Why a device memory API call failed ([`MemoryApiError`]), in the lines users know.

use crate::device::{DeviceError, LoadError};
use crate::error::{diagnostic_display, Diagnostic, Lines};
use std::fmt;

/// Why a call of the device memory API (`omp_target_alloc`, `omp_target_memcpy`…) failed.
/// The C boundary reports it and returns the call's documented failure value. Small: the
/// rare large payloads are boxed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MemoryApiError {
    /// The device number names neither an offload device nor the host.
    InvalidDevice { call: &'static str, id: i32, devices: i32, host: i32 },
    /// The device was lost earlier (said then): the call fails with no message.
    LostDevice,
    /// Both device numbers of a copy are refused: destination's error, then source's.
    Devices(Box<[MemoryApiError; 2]>),
    /// `len` bytes at `ptr` run past the end of the block that holds them (`room` bytes left).
    PastAllocation { call: &'static str, len: usize, ptr: usize, on: On, room: usize },
    /// The device could not allocate.
    Alloc { call: &'static str, size: usize, device: i32, source: Box<DeviceError> },
    /// `ptr` is not a block `omp_target_alloc` handed out on that device (or it was freed).
    BadFree { call: &'static str, ptr: usize, on: On },
    /// The device could not free.
    Free { call: &'static str, ptr: usize, source: Box<DeviceError> },
    /// `omp_get_mapped_ptr` of NULL.
    NullHostPointer,
    /// `omp_target_memcpy` with a NULL pointer.
    MemcpyNull,
    /// `omp_target_memcpy` whose offsets overflow.
    MemcpyOffsetOverflow,
    /// `omp_target_memcpy` past the end of the address space.
    MemcpyPastEnd { len: usize },
    /// The device failed during `omp_target_memcpy`.
    Memcpy(Box<DeviceError>),
    /// `omp_target_memcpy_rect` with inconsistent arguments.
    RectArguments,
    /// `omp_target_memcpy_rect` whose sizes overflow.
    RectOverflow,
    /// `omp_target_memset` past the end of the address space.
    MemsetPastEnd { len: usize, ptr: usize },
    /// The device failed during `omp_target_memset`.
    Memset(Box<DeviceError>),
    /// `omp_target_associate_ptr` with a NULL pointer or zero size.
    AssociateArguments,
    /// An association asked of the host device.
    NoAssociationOnHost { call: &'static str },
    /// The host pointer is associated with another device address already.
    Reassociate,
    /// `omp_target_disassociate_ptr` of a pointer with no association.
    AssociationNotFound,
    /// `omp_target_disassociate_ptr` of a mapping held by `ompx_hold`.
    DisassociateHeld,
    /// `omp_target_disassociate_ptr` of a mapping that a map clause made.
    NotAssociated,
    /// The device's images could not be loaded before a call that may name their globals
    /// (the call goes on: said where it happens).
    Load { call: &'static str, device: i32, source: Box<LoadError> },
}

/// The device a block is on, as the messages name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum On {
    Host,
    Device(i32),
}

impl fmt::Display for On {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            On::Host => f.write_str("the host device"),
            On::Device(id) => write!(f, "device {id}"),
        }
    }
}

impl Diagnostic for MemoryApiError {
    fn write_lines(&self, out: &mut Lines<'_>) -> fmt::Result {
        use MemoryApiError as E;
        match self {
            E::InvalidDevice { call, id, devices, host } => out.error(format_args!(
                "{call}: device number {id} is not valid: {devices} offload devices (0..{}) and the host ({host})",
                (devices - 1).max(0)
            )),
            E::LostDevice => Ok(()),
            E::Devices(both) => {
                both[0].write_lines(out)?;
                both[1].write_lines(out)
            }
            E::PastAllocation { call, len, ptr, on, room } => out.error(format_args!(
                "{call}: {len} bytes at 0x{ptr:016x} on {on} run past the end of its allocation ({room} bytes left)"
            )),
            E::Alloc { call, size, device, source } => {
                out.error(format_args!("{call}: allocating {size} bytes on device {device} failed: {source}"))?;
                source.write_lost_during_op(out)
            }
            E::BadFree { call, ptr, on } => out.error(format_args!(
                "{call}: bad free of 0x{ptr:016x}: not allocated on {on} by omp_target_alloc, or already freed"
            )),
            E::Free { call, ptr, source } => {
                out.error(format_args!("{call}: Failed to deallocate device ptr 0x{ptr:016x}: {source}"))?;
                source.write_lost_during_op(out)
            }
            E::NullHostPointer => out.error(format_args!("omp_get_mapped_ptr: the host pointer is NULL")),
            E::MemcpyNull => out.error(format_args!("Call to omp_target_memcpy with invalid arguments (NULL pointer)")),
            E::MemcpyOffsetOverflow => {
                out.error(format_args!("Call to omp_target_memcpy with invalid arguments (offset overflows)"))
            }
            E::MemcpyPastEnd { len } => {
                out.error(format_args!("omp_target_memcpy: {len} bytes run past the end of memory"))
            }
            E::Memcpy(source) => {
                out.error(format_args!("omp_target_memcpy failed: {source}"))?;
                source.write_lost_during_op(out)
            }
            E::RectArguments => out.error(format_args!("Call to omp_target_memcpy_rect with invalid arguments")),
            E::RectOverflow => {
                out.error(format_args!("Call to omp_target_memcpy_rect with invalid arguments (sizes overflow)"))
            }
            E::MemsetPastEnd { len, ptr } => {
                out.error(format_args!("omp_target_memset: {len} bytes at 0x{ptr:016x} run past the end of memory"))
            }
            E::Memset(source) => {
                out.error(format_args!("omp_target_memset failed: {source}"))?;
                source.write_lost_during_op(out)
            }
            E::AssociateArguments => {
                out.error(format_args!("omp_target_associate_ptr: invalid arguments (NULL pointer or zero size)"))
            }
            E::NoAssociationOnHost { call } => out.error(format_args!("{call}: no association possible on the host")),
            E::Reassociate => out.error(format_args!(
                "Not allowed to re-associate a different device ptr+offset with the same host ptr"
            )),
            E::AssociationNotFound => out.error(format_args!("Association not found")),
            E::DisassociateHeld => {
                out.error(format_args!("Trying to disassociate a pointer with a non-zero hold reference count"))
            }
            E::NotAssociated => out.error(format_args!(
                "Trying to disassociate a pointer which was not mapped via omp_target_associate_ptr"
            )),
            E::Load { call, device, source } => {
                out.error(format_args!("{call}: Failed to init globals on device {device}: {source}"))
            }
        }
    }
}

diagnostic_display!(MemoryApiError);
