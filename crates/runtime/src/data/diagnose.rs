//! Why a map clause failed ([`MapError`]), with the messages that name its variable and
//! what would fix it.

use crate::device::DeviceError;
use crate::error::{diagnostic_display, Diagnostic, Lines};
use crate::map_type::{self as mt, has};
use crate::table::MappingTable;
use crate::{info, DeviceCtx, MapName};
use std::fmt;

/// Why mapping, unmapping or updating a construct's data failed. Small: the rare large
/// payloads are boxed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MapError {
    /// A section of negative length.
    NegativeLength { name: MapName, size: i64, device: i32 },
    /// A section of `size` bytes in the first page: its base pointer is NULL.
    NullBase { name: MapName, size: usize, begin: usize },
    /// LLVM's getTargetPointer found or made no device copy (`ty`: the entry's map type),
    /// and why, when the reason has its own lines.
    NoTargetPointer { ty: i64, why: Option<Box<Absent>> },
    /// `present` on `exit data`/`target data` end or on `update`: nothing is mapped there.
    NotPresent(Box<NotPresent>),
    /// A strided update whose dimension count cannot be one.
    StridedDimensions { name: MapName, dims: i64 },
    /// A strided section the compiler passed as contiguous bytes.
    StridedAsContiguous { name: MapName, size: i64 },
    /// Device memory for a mapping could not be allocated.
    Alloc { bytes: usize, device: i32, source: Box<DeviceError> },
    /// A copy to the device failed.
    CopyTo(Box<DeviceError>),
    /// A copy from the device failed.
    CopyFrom(Box<DeviceError>),
}

/// Why getTargetPointer has no device copy for a range.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Absent {
    /// The range extends a mapping (`mapped`: that mapping's begin and size); `present`
    /// when the map type also asked for one.
    Extension { begin: usize, size: usize, mapped: (usize, usize), present: Option<NotPresent> },
    /// The `present` modifier, and nothing is mapped there.
    NotPresent(NotPresent),
}

/// A `present` modifier that found no mapping: the range, its variable, and the nearest
/// mapping on the device (found while the table was locked).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NotPresent {
    pub device: i32,
    pub begin: usize,
    pub size: usize,
    pub name: MapName,
    /// `target update` (a motion modifier) rather than a map type.
    pub motion: bool,
    /// The nearest mapping: its name, begin, end.
    pub nearest: Option<(MapName, usize, usize)>,
}

impl NotPresent {
    /// The failure for `[begin, begin+size)` on `dev`, whose table is `table`.
    pub(super) fn new(
        dev: &DeviceCtx,
        table: &MappingTable,
        begin: usize,
        size: usize,
        name: MapName,
        motion: bool,
    ) -> Self {
        let nearest = table.nearest(begin).map(|e| (e.name, e.begin, e.end));
        NotPresent { device: dev.id, begin, size, name, motion, nearest }
    }

    /// LLVM's `present` message, then what would help fix it: the variable, its range and
    /// the nearest mapping that does exist on the device.
    fn write_lines(&self, out: &mut Lines<'_>) -> fmt::Result {
        let NotPresent { device, begin: hp, size, name, motion, nearest } = *self;
        let what = if motion { "motion" } else { "map type" };
        out.message(format_args!(
            "device mapping required by 'present' {what} modifier does not exist for host address 0x{hp:016x} ({size} bytes)"
        ))?;
        let var = match info::map_name(name).map(omp_format::SourceLocation::from_map_name) {
            Some(l) if l.is_known() => format!("'{}' ({l})", l.name),
            Some(l) => format!("'{}'", l.name),
            None => "the variable".into(),
        };
        let nearest = match nearest {
            Some((name, begin, end)) => format!(
                "the nearest mapping on device {device} is '{}' at 0x{begin:016x}..0x{end:016x} ({} bytes)",
                info::var_name(name),
                end - begin
            ),
            None => format!("nothing is mapped on device {device}"),
        };
        out.message(format_args!(
            "{var} occupies 0x{hp:016x}..0x{:016x}, which is not mapped; {nearest}",
            hp.wrapping_add(size)
        ))
    }
}

impl Absent {
    fn write_lines(&self, out: &mut Lines<'_>) -> fmt::Result {
        match self {
            Absent::Extension { begin, size, mapped: (mapped_begin, mapped_size), present } => {
                out.message(format_args!(
                    "explicit extension not allowed: host address specified is 0x{begin:016x} ({size} bytes), but device allocation maps to host at 0x{mapped_begin:016x} ({mapped_size} bytes)"
                ))?;
                match present {
                    Some(p) => p.write_lines(out),
                    None => Ok(()),
                }
            }
            Absent::NotPresent(p) => p.write_lines(out),
        }
    }
}

impl Diagnostic for MapError {
    fn write_lines(&self, out: &mut Lines<'_>) -> fmt::Result {
        match self {
            MapError::NegativeLength { name, size, device } => out.error(format_args!(
                "{} has a negative length ({size} bytes): cannot map it on device {device}",
                described(*name)
            )),
            MapError::NullBase { name, size, begin } => out.error(format_args!(
                "{} maps {size} bytes at host address 0x{begin:016x}: its base pointer is NULL",
                described(*name)
            )),
            MapError::NoTargetPointer { ty, why } => {
                if let Some(why) = why {
                    why.write_lines(out)?;
                }
                out.error(format_args!("Call to getTargetPointer returned null pointer ({}).", null_reason(*ty)))
            }
            MapError::NotPresent(p) => p.write_lines(out),
            MapError::StridedDimensions { name, dims } => out.error(format_args!(
                "{}: a strided (non-contiguous) update with {dims} dimensions cannot be right (at most {}; the compiler may have passed a size instead): not updated",
                described(*name),
                super::strided::MAX_DIMS
            )),
            MapError::StridedAsContiguous { name, size } => out.error(format_args!(
                "{}: the compiler passed this strided section as {size} contiguous bytes; updating them would overwrite the elements the stride skips: not updated",
                described(*name)
            )),
            MapError::Alloc { bytes, device, source } => {
                out.error(format_args!("Failed to allocate {bytes} bytes on device {device}: {source}"))?;
                source.write_lost_during_op(out)
            }
            MapError::CopyTo(source) => {
                out.error(format_args!("Copying data to device failed: {source}"))?;
                source.write_lost_during_op(out)
            }
            MapError::CopyFrom(source) => {
                out.error(format_args!("Copying data from device failed: {source}"))?;
                source.write_lost_during_op(out)
            }
        }
    }
}

diagnostic_display!(MapError);

/// `'name' (file:line:col)` for a map-name string, for error messages.
pub(super) fn described(name: MapName) -> String {
    match info::map_name(name).map(omp_format::SourceLocation::from_map_name) {
        Some(l) if l.is_known() => format!("'{}' ({l})", l.name),
        Some(l) => format!("'{}'", l.name),
        None => "a mapped variable (compile with -g for its name)".into(),
    }
}

fn null_reason(ty: i64) -> &'static str {
    if has(ty, mt::PRESENT) {
        "'present' map type modifier"
    } else {
        "device failure or illegal mapping"
    }
}
