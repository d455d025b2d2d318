//! Messages in LLVM's formats, so users' scripts and searches keep working.

use crate::table::{MapEntry, MappingTable, INF};
use omp_format::SourceLocation;
use omp_plugin::host_memory;
use std::fmt::Write as _;
use std::io::Write as _;

/// A source location as the program gave it: the address of an `ident_t` psource string.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Loc(pub usize);

impl Loc {
    pub const NONE: Loc = Loc(0);
    pub fn parse(self) -> SourceLocation<'static> {
        // SAFETY: an `ident_t` psource string is a constant of the calling binary, which
        // is loaded while its construct runs.
        match unsafe { host_memory::c_str(self.0) } {
            Some(s) => SourceLocation::from_ident(s),
            None => SourceLocation::from_ident(";unknown;unknown;0;0;;"),
        }
    }
}

/// A map-name string (`;name;file;line;col;;`), or a descriptor entry's symbol name.
pub fn map_name(name: usize) -> Option<&'static str> {
    // SAFETY: map names and entry names are constants the compiler emitted into a registered
    // binary; the runtime keeps them only while that binary is registered (mappings it made
    // are looked at before its unregistration, as in LLVM).
    unsafe { host_memory::c_str(name) }
}

/// The variable name in a map-name string, or `unknown`.
pub fn var_name(name: usize) -> &'static str {
    map_name(name).map(|s| SourceLocation::from_map_name(s).name).unwrap_or("unknown")
}

/// `name at file:line:col` as the table dump prints declarations.
pub fn declaration(name: usize) -> String {
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

/// `omptarget message: <msg>`
pub fn message(msg: std::fmt::Arguments) {
    emit(&format!("omptarget message: {msg}\n"));
}

/// `omptarget error: <msg>`
pub fn error(msg: std::fmt::Arguments) {
    emit(&format!("omptarget error: {msg}\n"));
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

/// `LIBOMPTARGET_DEBUG`: a line prefixed with its component, when the level is set.
#[macro_export]
macro_rules! debug {
    ($rt:expr, $component:literal, $($arg:tt)*) => {
        if $rt.config.debug > 0 {
            $crate::info::emit(&format!(concat!($component, " --> {}\n"), format_args!($($arg)*)));
        }
    };
}
