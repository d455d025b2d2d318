//! Messages in LLVM's formats, so users' scripts and searches keep working.

use crate::config::info_bits;
use crate::table::{MapEntry, MappingTable, INF};
use crate::trace::{Direction, Event, EventCx, Interest, Kinds, Observer, RcChange};
use omp_format::SourceLocation;
use omp_plugin::host_memory;
use std::fmt::Write as _;
use std::io::Write as _;

/// A source location as the program gave it: the address of an `ident_t` psource string.
/// Made only by [`Loc::from_raw`] at the C boundary (or from a string of ours): reading it is
/// then safe.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Loc(usize);

impl Loc {
    pub const NONE: Loc = Loc(0);

    /// A location from the program.
    ///
    /// # Safety
    /// `psource` is 0 or the address of a NUL-terminated string that stays mapped and
    /// unchanged while the location is used: an `ident_t` psource constant of a registered
    /// binary (the runtime keeps locations no longer than its binary is registered).
    pub unsafe fn from_raw(psource: usize) -> Loc {
        Loc(psource)
    }

    /// A location of the runtime's own.
    pub fn from_static(psource: &'static std::ffi::CStr) -> Loc {
        Loc(psource.as_ptr() as usize)
    }

    /// No location was given.
    pub fn is_none(self) -> bool {
        self.0 == 0
    }

    pub fn parse(self) -> SourceLocation<'static> {
        // SAFETY: `Loc::from_raw`'s promise (or a `'static` string of ours).
        match unsafe { host_memory::c_str(self.0) } {
            Some(s) => SourceLocation::from_ident(s),
            None => SourceLocation::from_ident(";unknown;unknown;0;0;;"),
        }
    }
}

/// The address of a map-name string (`;name;file;line;col;;`) or of a descriptor entry's
/// symbol name, as the program gave it. Made only by [`MapName::from_raw`] (at the C
/// boundary, or from what it vouched for): reading it is then safe.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
#[repr(transparent)]
pub struct MapName(usize);

impl MapName {
    /// No name (compiled without debug information).
    pub const NONE: MapName = MapName(0);

    /// A name from the program.
    ///
    /// # Safety
    /// `addr` is 0 or the address of a NUL-terminated string that stays mapped and
    /// unchanged while the name is used: a constant the compiler emitted into a registered
    /// binary (the runtime keeps names only while their binary is registered: mappings it
    /// made are looked at before its unregistration, as in LLVM).
    pub unsafe fn from_raw(addr: usize) -> MapName {
        MapName(addr)
    }

    /// Whether there is no name.
    pub fn is_none(self) -> bool {
        self.0 == 0
    }

    /// The address, to hand back to the program (a `declare mapper` function's argument).
    pub fn addr(self) -> usize {
        self.0
    }
}

/// A map-name string (`;name;file;line;col;;`), or a descriptor entry's symbol name.
pub fn map_name(name: MapName) -> Option<&'static str> {
    // SAFETY: `MapName::from_raw`'s promise.
    unsafe { host_memory::c_str(name.0) }
}

/// The variable name in a map-name string, or `unknown`.
pub fn var_name(name: MapName) -> &'static str {
    map_name(name).map(|s| SourceLocation::from_map_name(s).name).unwrap_or("unknown")
}

/// `name at file:line:col` as the table dump prints declarations.
pub fn declaration(name: MapName) -> String {
    match map_name(name) {
        Some(s) => {
            let l = SourceLocation::from_map_name(s);
            format!("{} at {}:{}:{}", l.name, l.file_name(), l.line, l.column)
        }
        None => "unknown at unknown:0:0".to_string(),
    }
}

pub fn rc_str(rc: u64) -> String {
    if rc == INF {
        "INF".into()
    } else {
        rc.to_string()
    }
}

/// Writes one whole message to stderr at once, so lines from threads do not interleave.
pub fn emit(text: &str) {
    let mut e = std::io::stderr().lock();
    let _ = e.write_all(text.as_bytes());
}

/// `omptarget device <id> info: <msg>`
pub fn info(device: i32, msg: std::fmt::Arguments) {
    emit(&format!("omptarget device {device} info: {msg}\n"));
}

/// `omptarget message: <msg>` (copied into the debug file, when there is one)
pub fn message(msg: std::fmt::Arguments) {
    emit(&format!("omptarget message: {msg}\n"));
    if crate::debug::on() && crate::debug::to_file() {
        crate::debug::line("omptarget", format_args!("message: {msg}"));
    }
}

/// `omptarget error: <msg>` (copied into the debug file, when there is one)
pub fn error(msg: std::fmt::Arguments) {
    emit(&format!("omptarget error: {msg}\n"));
    if crate::debug::on() && crate::debug::to_file() {
        crate::debug::line("omptarget", format_args!("error: {msg}"));
    }
}

/// The mapping table in LLVM's layout (INFO bit 0x4 and `ompx_dump_mapping_tables`).
pub fn table_dump(device: i32, loc: &SourceLocation, table: &MappingTable) -> String {
    let mut s = String::new();
    let prefix = format!("omptarget device {device} info: ");
    if table.is_empty() {
        let _ = writeln!(s, "{prefix}OpenMP Host-Device pointer mappings table empty");
        return s;
    }
    let _ = writeln!(
        s,
        "{prefix}OpenMP Host-Device pointer mappings after block at {}:{}:{}:",
        loc.file_name(),
        loc.line,
        loc.column
    );
    let _ =
        writeln!(s, "{prefix}{:<18} {:<18} Size (B) DynRefCount HoldRefCount Declaration", "Host Ptr", "Target Ptr");
    for e in table.iter() {
        let _ = writeln!(s, "{prefix}{}", table_row(e));
    }
    s
}

fn table_row(e: &MapEntry) -> String {
    format!(
        "0x{:016x} 0x{:016x} {:<8} {:<11} {:<12} {}",
        e.begin,
        e.tgt_begin,
        e.size(),
        rc_str(e.dyn_rc),
        rc_str(e.hold_rc),
        declaration(e.name)
    )
}

/// INFO output (`LIBOMPTARGET_INFO`) as an observer of the runtime's events: each bit's
/// lines, in LLVM's formats.
pub struct InfoObserver {
    bits: std::sync::Arc<std::sync::atomic::AtomicU32>,
}

impl InfoObserver {
    pub fn new(bits: std::sync::Arc<std::sync::atomic::AtomicU32>) -> Self {
        Self { bits }
    }
}

/// `DynRefCount=…, HoldRefCount=…`, the changed count marked with how it changed.
fn counts_line(dyn_rc: u64, hold_rc: u64, hold: bool, change: RcChange) -> String {
    let suffix = rc_suffix(change);
    let (dyn_s, hold_s) = if hold { ("", suffix) } else { (suffix, "") };
    format!("DynRefCount={}{dyn_s}, HoldRefCount={}{hold_s}", rc_str(dyn_rc), rc_str(hold_rc))
}

fn rc_suffix(change: RcChange) -> &'static str {
    match change {
        RcChange::Incremented => " (incremented)",
        RcChange::UpdateSuppressed => " (update suppressed)",
        RcChange::Decremented => " (decremented)",
        RcChange::DecrementedDelayedDeletion => " (decremented, delayed deletion)",
        RcChange::ResetDelayedDeletion => " (reset, delayed deletion)",
        RcChange::Unchanged => "",
    }
}

impl Observer for InfoObserver {
    /// Every event while some INFO bit is set; nothing otherwise.
    fn interest(&self) -> Interest {
        if self.bits.load(std::sync::atomic::Ordering::Relaxed) == 0 {
            Interest::NONE
        } else {
            Interest { kinds: Kinds::ALL, ..Interest::NONE }
        }
    }

    fn event(&self, ev: &Event, _cx: &EventCx) {
        let bits = self.bits.load(std::sync::atomic::Ordering::Relaxed);
        if bits == 0 {
            return;
        }
        let on = |bit: u32| bits & bit != 0;
        match *ev {
            Event::Arguments { device, region, loc, types, sizes, names } if on(info_bits::KERNEL_ARGS) => {
                let l = loc.parse();
                let mut s = format!(
                    "omptarget device {device} info: {region} at {}:{}:{} with {} arguments:\n",
                    l.file_name(),
                    l.line,
                    l.column,
                    types.len()
                );
                for (i, (&ty, &size)) in types.iter().zip(sizes).enumerate() {
                    let name = names.and_then(|n| n.get(i).copied()).unwrap_or(MapName::NONE);
                    let _ = writeln!(
                        s,
                        "omptarget device {device} info: {}({})[{}] {}",
                        crate::map_type::describe(ty, size),
                        var_name(name),
                        size,
                        if crate::map_type::has(ty, crate::map_type::IMPLICIT) { "(implicit)" } else { "" }
                    );
                }
                emit(&s);
            }
            Event::MapCreated { device, base, begin, size, tgt_alloc, tgt_begin, dyn_rc, hold_rc, name }
                if on(info_bits::MAPPING_CHANGED) =>
            {
                info(
                    device,
                    format_args!(
                        "Creating new map entry with HstPtrBase=0x{base:016x}, HstPtrBegin=0x{begin:016x}, TgtAllocBegin=0x{tgt_alloc:016x}, TgtPtrBegin=0x{tgt_begin:016x}, Size={size}, DynRefCount={dyn_rc}, HoldRefCount={hold_rc}, Name={}",
                        var_name(name)
                    ),
                );
            }
            Event::MapReused { device, implicit, begin, tgt, size, dyn_rc, hold_rc, hold, change, name }
                if on(info_bits::MAPPING_EXISTS) =>
            {
                let counts = counts_line(dyn_rc, hold_rc, hold, change);
                let implicit = if implicit { " (implicit)" } else { "" };
                info(
                    device,
                    format_args!(
                        "Mapping exists{implicit} with HstPtrBegin=0x{begin:016x}, TgtPtrBegin=0x{tgt:016x}, Size={size}, {counts}, Name={}",
                        var_name(name)
                    ),
                );
            }
            Event::MapReleased { device, begin, tgt, size, dyn_rc, hold_rc, hold, change, .. }
                if on(info_bits::MAPPING_EXISTS) =>
            {
                let counts = counts_line(dyn_rc, hold_rc, hold, change);
                info(
                    device,
                    format_args!("Mapping exists with HstPtrBegin=0x{begin:016x}, TgtPtrBegin=0x{tgt:016x}, Size={size}, {counts}"),
                );
            }
            Event::MapRemoved { device, begin, tgt_begin, size, name } if on(info_bits::MAPPING_CHANGED) => {
                info(
                    device,
                    format_args!(
                        "Removing map entry with HstPtrBegin=0x{begin:016x}, TgtPtrBegin=0x{tgt_begin:016x}, Size={size}, Name={}",
                        var_name(name)
                    ),
                );
            }
            Event::MapUsm { device, begin, size } if on(info_bits::MAPPING_CHANGED) => {
                info(device, format_args!("Return HstPtrBegin 0x{begin:016x} Size={size} for unified shared memory"));
            }
            Event::NoCounterpart { device, name } if on(info_bits::EMPTY_MAPPING) => {
                info(device, format_args!("variable {} does not have a valid device counterpart", var_name(name)));
            }
            Event::Transfer { device, dir, host, tgt, bytes, name, done: None } if on(info_bits::DATA_TRANSFER) => {
                match dir {
                    Direction::ToDevice => info(
                        device,
                        format_args!(
                            "Copying data from host to device, HstPtr=0x{host:016x}, TgtPtr=0x{tgt:016x}, Size={bytes}, Name={}",
                            var_name(name)
                        ),
                    ),
                    Direction::FromDevice => info(
                        device,
                        format_args!(
                            "Copying data from device to host, TgtPtr=0x{tgt:016x}, HstPtr=0x{host:016x}, Size={bytes}, Name={}",
                            var_name(name)
                        ),
                    ),
                }
            }
            Event::Kernel { device, kernel, teams, threads, shape, clang19, done: None, .. }
                if on(info_bits::PLUGIN_KERNEL) =>
            {
                let shape = shape.unwrap_or(omp_plugin::LaunchShape {
                    blocks: [teams.max(1), 1, 1],
                    threads: [threads.max(1), 1, 1],
                    mode: "Generic",
                });
                let ([bx, by, bz], [tx, ty, tz]) = (shape.blocks, shape.threads);
                // LLVM 22 prints three-dimensional sizes; clang 19 programs get LLVM 19's line.
                let (teams, threads) =
                    if clang19 { (bx.to_string(), tx.to_string()) } else { (format!("[{bx},{by},{bz}]"), format!("[{tx},{ty},{tz}]")) };
                emit(&format!(
                    "\"PluginInterface\" device {device} info: Launching kernel {kernel} with {teams} blocks and {threads} threads in {} mode\n",
                    shape.mode
                ));
            }
            Event::MappingTables { tables } if on(info_bits::DUMP_TABLE) => emit(&(tables.0)()),
            Event::UnmappedPointer { device, loc, kernel, var, addr, accessible } if on(info_bits::EMPTY_MAPPING) => {
                let why = if accessible {
                    " (this works only because the device shares the host's memory: map the data it points to)"
                } else {
                    ""
                };
                info(
                    device,
                    format_args!(
                        "{}: pointer {var} passed to kernel {kernel} holds host address 0x{addr:016x}, which is not mapped on device {device}{why}",
                        loc.parse()
                    ),
                );
            }
            _ => {}
        }
    }
}
