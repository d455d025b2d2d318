//! The runtime's structured events and their observers: INFO output, the profile, OMPT
//! tools (through the ABI layer), and checkers to come. With no observer, each event costs
//! one branch.

use crate::{Loc, MapName};
use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

/// OMPT's `ompt_target_t`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TargetKind {
    Target = 1,
    EnterData = 2,
    ExitData = 3,
    Update = 4,
}

/// Which way a copy goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    ToDevice,
    FromDevice,
}

/// When an operation started and ended (measured only while an observer wants durations).
#[derive(Debug, Clone, Copy)]
pub struct Interval {
    pub start: Instant,
    pub end: Instant,
}

/// How a data construct changed a reference count (the suffix of LLVM's "Mapping exists").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RcChange {
    Incremented,
    UpdateSuppressed,
    Decremented,
    DecrementedDelayedDeletion,
    ResetDelayedDeletion,
    Unchanged,
}

/// A device memory API call (`omp_target_*`): work done outside any construct.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ApiOp {
    Alloc,
    Free,
    /// A copy into device memory (`ptr` is the destination).
    CopyToDevice,
    /// A copy out of device memory (`ptr` is the source).
    CopyFromDevice,
    CopyWithinDevice,
    Memset,
}

/// One thing the runtime did, with its facts. Observers (INFO output, the profile, OMPT
/// tools, checkers) see every event after the runtime's locks are released.
#[derive(Debug, Clone, Copy)]
pub enum Event<'a> {
    /// A device was opened.
    DeviceInit { device: i32 },
    /// `__tgt_register_lib` finished.
    BinaryRegistered { time: Option<Interval> },
    /// An image was loaded on a device.
    ImageLoaded {
        device: i32,
        image: &'a [u8],
        module_id: u64,
        triple: &'a str,
        entries: usize,
        time: Option<Interval>,
    },
    /// A construct begins (`time` is `None`) or ends.
    Construct {
        kind: TargetKind,
        begin: bool,
        device: i32,
        loc: Loc,
        target_id: u64,
        codeptr: usize,
        time: Option<Interval>,
    },
    /// The map arguments of a construct, as the compiler passed them (INFO 0x1).
    Arguments {
        device: i32,
        region: &'a str,
        loc: Loc,
        types: &'a [i64],
        sizes: &'a [i64],
        names: Option<&'a [MapName]>,
    },
    /// A new mapping-table entry.
    MapCreated {
        device: i32,
        base: usize,
        begin: usize,
        size: usize,
        tgt_alloc: usize,
        tgt_begin: usize,
        dyn_rc: u64,
        hold_rc: u64,
        name: MapName,
    },
    /// A construct's begin found the range mapped already.
    MapReused {
        device: i32,
        implicit: bool,
        begin: usize,
        tgt: usize,
        size: usize,
        dyn_rc: u64,
        hold_rc: u64,
        hold: bool,
        change: RcChange,
        name: MapName,
    },
    /// A construct's end released its reference.
    MapReleased {
        device: i32,
        begin: usize,
        tgt: usize,
        size: usize,
        dyn_rc: u64,
        hold_rc: u64,
        hold: bool,
        change: RcChange,
        name: MapName,
    },
    /// An entry left the table (its device memory is freed next, if the runtime owns it).
    MapRemoved { device: i32, begin: usize, tgt_begin: usize, size: usize, name: MapName },
    /// Under unified shared memory, the host address is used as is.
    MapUsm { device: i32, begin: usize, size: usize },
    /// An explicit map produced no device counterpart (INFO 0x10).
    NoCounterpart { device: i32, name: MapName },
    /// Device memory for a mapping.
    Alloc { device: i32, host: usize, tgt: usize, bytes: usize, name: MapName, time: Option<Interval> },
    /// A mapping's device memory was released.
    Free { device: i32, tgt: usize, bytes: usize, name: MapName, time: Option<Interval> },
    /// A copy starts (`done` is `None`) or has finished.
    Transfer {
        device: i32,
        dir: Direction,
        host: usize,
        tgt: usize,
        bytes: usize,
        name: MapName,
        done: Option<Interval>,
    },
    /// A kernel launch starts (`done` is `None`) or has finished. `args` are the device
    /// values passed; `host_args` the host values they stand for (equal for literals).
    Kernel {
        device: i32,
        kernel: &'a str,
        loc: Loc,
        teams: u32,
        threads: u32,
        /// What the device runs, where it decides that itself (blocks, threads, mode).
        shape: Option<omp_plugin::LaunchShape>,
        args: &'a [usize],
        host_args: &'a [usize],
        clang19: bool,
        done: Option<Interval>,
    },
    /// A pointer argument that points to nothing mapped on the device.
    UnmappedPointer { device: i32, loc: Loc, kernel: &'a str, var: &'a str, addr: usize, accessible: bool },
    /// A device memory API call.
    Api { op: ApiOp, device: i32, ptr: usize, other: usize, bytes: usize },
    /// Every device's mapping table, in LLVM's layout, after a construct, before a
    /// mandatory-offload abort, or at the last unregistration (INFO 0x4 prints it).
    MappingTables { tables: Lazy<'a> },
}

/// Text built only if an observer asks for it.
#[derive(Clone, Copy)]
pub struct Lazy<'a>(pub &'a dyn Fn() -> String);

impl std::fmt::Debug for Lazy<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Lazy(..)")
    }
}

/// Something that wants to hear about the runtime's work.
pub trait Observer: Send + Sync {
    fn event(&self, ev: &Event);
}

thread_local! {
    /// (target id, return address) of the construct this thread is running.
    static CURRENT: Cell<(u64, usize)> = const { Cell::new((0, 0)) };
    /// The program's return address, recorded by the ABI layer at each entry point.
    static RETURN_ADDRESS: Cell<usize> = const { Cell::new(0) };
}

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// A fresh id for a construct or a host operation.
pub fn next_id() -> u64 {
    NEXT_ID.fetch_add(1, Ordering::Relaxed)
}

/// Records where the program called the runtime from (for tools' `codeptr_ra`).
#[inline]
pub fn set_return_address(ra: usize) {
    RETURN_ADDRESS.with(|c| c.set(ra));
}

pub(crate) fn return_address() -> usize {
    RETURN_ADDRESS.with(|c| c.get())
}

pub(crate) fn enter_construct(target_id: u64, codeptr: usize) -> (u64, usize) {
    CURRENT.with(|c| c.replace((target_id, codeptr)))
}

pub(crate) fn leave_construct(prev: (u64, usize)) {
    CURRENT.with(|c| c.set(prev));
}

pub fn current() -> (u64, usize) {
    CURRENT.with(|c| c.get())
}
