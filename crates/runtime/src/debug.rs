//! `LIBOMPTARGET_DEBUG`: a trace of the runtime's decisions in LLVM's `omptarget --> ` style,
//! in release builds. Any non-zero level turns it on (LLVM 22: anything but `0`). Lines go to
//! stderr, or to the file `LIBOMPTARGET_DEBUG_FILE` names; each line is one write, so lines
//! of different threads never interleave. Off, a trace point costs one load and one branch
//! ([`on`]); nothing is formatted.
//!
//! Two sources make the trace: the [`DebugObserver`] turns the runtime's events (mappings,
//! allocations, transfers, launches, image loads, constructs) into lines, and the
//! [`crate::debug!`] lines at the decisions events do not carry (registration, memory-manager
//! hits and misses, each backend call and its result, symbols bound, errors).

use crate::info::{rc_str, var_name};
use crate::trace::{ApiOp, Direction, Event, EventCx, Interest, Kinds, Observer, RcChange, TargetKind};
use std::io::Write as _;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;

/// The longest `LIBOMPTARGET_DEBUG_FILE` accepted (Linux's `PATH_MAX`).
pub const MAX_PATH: usize = 4096;

static ON: AtomicBool = AtomicBool::new(false);
static SINK: OnceLock<Sink> = OnceLock::new();

/// Where the lines go.
enum Sink {
    Stderr,
    /// Opened for appending: each line is one `write` at the file's end.
    File(omp_sync::Mutex<std::fs::File>),
}

/// Whether the trace is on: one relaxed load.
#[inline(always)]
pub fn on() -> bool {
    ON.load(Ordering::Relaxed)
}

/// Whether the trace goes somewhere other than stderr (then errors are copied into it).
pub fn to_file() -> bool {
    matches!(SINK.get(), Some(Sink::File(_)))
}

/// Turns the trace on for this process (the first runtime with a non-zero level), writing to
/// `file` if given and usable, else to stderr with a one-line warning naming the file.
pub fn start(level: u32, file: Option<&str>) {
    if level == 0 {
        return;
    }
    SINK.get_or_init(|| match file.map(open) {
        Some(Ok(f)) => Sink::File(omp_sync::Mutex::new(f)),
        Some(Err(why)) => {
            crate::info::emit(&format!(
                "omptarget warning: ignoring LIBOMPTARGET_DEBUG_FILE='{}': {why}; debug output goes to stderr\n",
                file.unwrap_or_default()
            ));
            Sink::Stderr
        }
        None => Sink::Stderr,
    });
    ON.store(true, Ordering::Relaxed);
}

/// Opens (creating, appending) the debug file, after checking the name.
fn open(path: &str) -> Result<std::fs::File, String> {
    if path.is_empty() {
        return Err("empty file name".into());
    }
    if path.len() > MAX_PATH {
        return Err(format!("longer than {MAX_PATH} bytes"));
    }
    std::fs::OpenOptions::new().create(true).append(true).open(path).map_err(|e| e.to_string())
}

/// Writes `<component> --> <msg>` as one line, in one write.
pub fn line(component: &str, msg: std::fmt::Arguments) {
    let text = format!("{component} --> {msg}\n");
    match SINK.get() {
        Some(Sink::File(f)) => {
            let _ = f.lock().write_all(text.as_bytes());
        }
        _ => crate::info::emit(&text),
    }
}

/// `LIBOMPTARGET_DEBUG`: one line prefixed with its component, when the trace is on.
#[macro_export]
macro_rules! debug {
    ($component:literal, $($arg:tt)*) => {
        if $crate::debug::on() {
            $crate::debug::line($component, format_args!($($arg)*));
        }
    };
}

/// The count before a change, from the count after it (`None` when it was reset).
fn rc_before(after: u64, change: RcChange) -> Option<u64> {
    if after == crate::table::INF {
        return Some(after);
    }
    match change {
        RcChange::Incremented => Some(after.saturating_sub(1)),
        RcChange::Decremented | RcChange::DecrementedDelayedDeletion => Some(after + 1),
        RcChange::ResetDelayedDeletion => None,
        RcChange::UpdateSuppressed | RcChange::Unchanged => Some(after),
    }
}

/// `DynRefCount=1->2, HoldRefCount=0`: the changed count before and after.
fn counts(dyn_rc: u64, hold_rc: u64, hold: bool, change: RcChange) -> String {
    let moved = |after: u64| match rc_before(after, change) {
        Some(b) if b == after => rc_str(after),
        Some(b) => format!("{}->{}", rc_str(b), rc_str(after)),
        None => format!("(reset)->{}", rc_str(after)),
    };
    if hold {
        format!("DynRefCount={}, HoldRefCount={}", rc_str(dyn_rc), moved(hold_rc))
    } else {
        format!("DynRefCount={}, HoldRefCount={}", moved(dyn_rc), rc_str(hold_rc))
    }
}

/// A new entry's count: `0->1`, or `0` when it stays 0.
fn from_zero(rc: u64) -> String {
    if rc == 0 {
        "0".into()
    } else {
        format!("0->{}", rc_str(rc))
    }
}

fn kind_name(kind: TargetKind) -> &'static str {
    match kind {
        TargetKind::Target => "target region",
        TargetKind::EnterData => "target enter data",
        TargetKind::ExitData => "target exit data",
        TargetKind::Update => "target update",
    }
}

/// The trace's lines for the runtime's events.
pub struct DebugObserver;

impl Observer for DebugObserver {
    /// Every event; no intervals (measuring them would slow what is traced).
    fn interest(&self) -> Interest {
        Interest { kinds: Kinds::ALL, ..Interest::NONE }
    }

    fn event(&self, ev: &Event, _cx: &EventCx) {
        let l = |msg: std::fmt::Arguments| line("omptarget", msg);
        match *ev {
            Event::DeviceInit { device } => l(format_args!("device {device}: initialized")),
            Event::BinaryRegistered { .. } => l(format_args!("binary registered")),
            Event::Construct { kind, begin, device, loc, target_id, .. } => {
                let l2 = loc.parse();
                let at = format!("{}:{}:{}", l2.file_name(), l2.line, l2.column);
                let what = if begin { "begins" } else { "ends" };
                l(format_args!("device {device}: {} at {at} {what} (target id {target_id})", kind_name(kind)))
            }
            Event::Arguments { device, types, sizes, names, .. } => {
                for (i, (&ty, &size)) in types.iter().zip(sizes).enumerate() {
                    let name = names.and_then(|n| n.get(i).copied()).unwrap_or_default();
                    l(format_args!("device {device}: Entry {i:2}: Size={size}, Type=0x{ty:x}, Name={}", var_name(name)));
                }
            }
            Event::MapCreated { device, base, begin, size, tgt_alloc, tgt_begin, dyn_rc, hold_rc, name } => {
                l(format_args!(
                    "device {device}: lookup HstPtrBegin=0x{begin:016x} Size={size}: new; Creating new map entry with HstPtrBase=0x{base:016x}, HstPtrBegin=0x{begin:016x}, TgtAllocBegin=0x{tgt_alloc:016x}, TgtPtrBegin=0x{tgt_begin:016x}, Size={size}, DynRefCount={}, HoldRefCount={}, Name={}",
                    from_zero(dyn_rc),
                    from_zero(hold_rc),
                    var_name(name)
                ))
            }
            Event::MapReused { device, implicit, begin, tgt, size, dyn_rc, hold_rc, hold, change, name } => {
                let implicit = if implicit { " (implicit)" } else { "" };
                l(format_args!(
                    "device {device}: lookup HstPtrBegin=0x{begin:016x} Size={size}: existing{implicit}; Mapping exists with TgtPtrBegin=0x{tgt:016x}, {}, Name={}",
                    counts(dyn_rc, hold_rc, hold, change),
                    var_name(name)
                ))
            }
            Event::MapReleased { device, begin, tgt, size, dyn_rc, hold_rc, hold, change, name } => l(format_args!(
                "device {device}: release HstPtrBegin=0x{begin:016x} Size={size}: Mapping exists with TgtPtrBegin=0x{tgt:016x}, {}, Name={}",
                counts(dyn_rc, hold_rc, hold, change),
                var_name(name)
            )),
            Event::MapRemoved { device, begin, tgt_begin, size, name } => l(format_args!(
                "device {device}: Removing map entry with HstPtrBegin=0x{begin:016x}, TgtPtrBegin=0x{tgt_begin:016x}, Size={size}, Name={}",
                var_name(name)
            )),
            Event::MapUsm { device, begin, size } => l(format_args!(
                "device {device}: lookup HstPtrBegin=0x{begin:016x} Size={size}: unified shared memory, host address used"
            )),
            Event::NoCounterpart { device, name } => {
                l(format_args!("device {device}: {} has no device counterpart", var_name(name)))
            }
            Event::Alloc { device, host, tgt, bytes, name, .. } => l(format_args!(
                "device {device}: allocated {bytes} bytes at TgtPtr=0x{tgt:016x} for HstPtr=0x{host:016x}, Name={}",
                var_name(name)
            )),
            Event::Free { device, tgt, bytes, name, .. } => l(format_args!(
                "device {device}: freeing {bytes} bytes at TgtPtr=0x{tgt:016x}, Name={}",
                var_name(name)
            )),
            Event::Transfer { device, dir, host, tgt, bytes, name, done: None } => match dir {
                Direction::ToDevice => l(format_args!(
                    "device {device}: Moving {bytes} bytes (hst:0x{host:016x}) -> (tgt:0x{tgt:016x}), Name={}",
                    var_name(name)
                )),
                Direction::FromDevice => l(format_args!(
                    "device {device}: Moving {bytes} bytes (tgt:0x{tgt:016x}) -> (hst:0x{host:016x}), Name={}",
                    var_name(name)
                )),
            },
            Event::Kernel { device, kernel, teams, threads, args, host_args, done: None, .. } => {
                l(format_args!(
                    "device {device}: Launching kernel {kernel} with {teams} teams and {threads} threads, {} arguments",
                    args.len()
                ));
                for (i, (&a, &h)) in args.iter().zip(host_args).enumerate() {
                    l(format_args!("device {device}: kernel argument {i}: 0x{a:016x} (host 0x{h:016x})"));
                }
            }
            Event::UnmappedPointer { device, kernel, var, addr, .. } => l(format_args!(
                "device {device}: pointer {var} passed to kernel {kernel} holds unmapped host address 0x{addr:016x}"
            )),
            Event::Api { op, device, ptr, other, bytes } => {
                let what = match op {
                    ApiOp::Alloc => "omp_target_alloc",
                    ApiOp::Free => "omp_target_free",
                    ApiOp::CopyToDevice => "copy to device",
                    ApiOp::CopyFromDevice => "copy from device",
                    ApiOp::CopyWithinDevice => "copy within device",
                    ApiOp::Memset => "omp_target_memset",
                };
                l(format_args!("device {device}: {what}: ptr 0x{ptr:016x}, other 0x{other:016x}, {bytes} bytes"))
            }
            // The image load has its own line (`device::load`).
            Event::ImageLoaded { .. } | Event::Transfer { .. } | Event::Kernel { .. } | Event::MappingTables { .. } => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_show_before_and_after_of_the_changed_count() {
        assert_eq!(counts(2, 0, false, RcChange::Incremented), "DynRefCount=1->2, HoldRefCount=0");
        assert_eq!(counts(1, 0, true, RcChange::Decremented), "DynRefCount=1, HoldRefCount=1->0");
        assert_eq!(counts(crate::table::INF, 0, false, RcChange::Incremented), "DynRefCount=INF, HoldRefCount=0");
        assert_eq!(counts(0, 0, false, RcChange::ResetDelayedDeletion), "DynRefCount=(reset)->0, HoldRefCount=0");
        assert_eq!(counts(3, 0, false, RcChange::UpdateSuppressed), "DynRefCount=3, HoldRefCount=0");
    }

    #[test]
    fn a_bad_debug_file_is_refused_with_its_reason() {
        assert_eq!(open("").unwrap_err(), "empty file name");
        assert!(open(&"x".repeat(MAX_PATH + 1)).unwrap_err().contains("longer than"));
        assert!(open("/nonexistent-dir/debug.log").is_err());
    }
}
