//! Messages about a map clause that name its variable and what would fix it.

use crate::map_type::{self as mt, has};
use crate::table::MappingTable;
use crate::{info, DeviceCtx, MapName, Runtime};

impl Runtime {
    /// LLVM's `present` message, then what would help fix it: the variable, its range and
    /// the nearest mapping that does exist on the device.
    pub(super) fn present_message(
        &self,
        dev: &DeviceCtx,
        table: &MappingTable,
        hp: usize,
        size: usize,
        name: MapName,
        motion: bool,
    ) {
        let what = if motion { "motion" } else { "map type" };
        info::message(format_args!(
            "device mapping required by 'present' {what} modifier does not exist for host address 0x{hp:016x} ({size} bytes)"
        ));
        let var = match info::map_name(name).map(omp_format::SourceLocation::from_map_name) {
            Some(l) if l.is_known() => format!("'{}' ({l})", l.name),
            Some(l) => format!("'{}'", l.name),
            None => "the variable".into(),
        };
        let nearest = match table.nearest(hp) {
            Some(e) => format!(
                "the nearest mapping on device {} is '{}' at 0x{:016x}..0x{:016x} ({} bytes)",
                dev.id,
                info::var_name(e.name),
                e.begin,
                e.end,
                e.size()
            ),
            None => format!("nothing is mapped on device {}", dev.id),
        };
        info::message(format_args!(
            "{var} occupies 0x{hp:016x}..0x{:016x}, which is not mapped; {nearest}",
            hp.wrapping_add(size)
        ));
    }
}

/// `'name' (file:line:col)` for a map-name string, for error messages.
pub(super) fn described(name: MapName) -> String {
    match info::map_name(name).map(omp_format::SourceLocation::from_map_name) {
        Some(l) if l.is_known() => format!("'{}' ({l})", l.name),
        Some(l) => format!("'{}'", l.name),
        None => "a mapped variable (compile with -g for its name)".into(),
    }
}

pub(super) fn null_reason(ty: i64) -> &'static str {
    if has(ty, mt::PRESENT) {
        "'present' map type modifier"
    } else {
        "device failure or illegal mapping"
    }
}
