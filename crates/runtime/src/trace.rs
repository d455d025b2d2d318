//! The runtime's structured events and their observers: INFO output, the profile, OMPT
//! tools (through the ABI layer), the mapping checker and advisor (`omp-check`). Every
//! observer is the same kind of thing: it says what it wants ([`Observer::interest`]),
//! hears each event with a context that can read device memory ([`EventCx`]), may wrap each
//! device as it opens ([`Observer::wrap_device`]), and finishes at exit
//! ([`Observer::finish`]). With no observer, each event costs one branch.

use crate::{Loc, MapName, Runtime};
use omp_plugin::Device;
use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::OnceLock;
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
    /// `other` is 1 for memory the host reaches too (the host and shared kinds), else 0.
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

impl Event<'_> {
    /// Which kind of event this is (what [`Interest::kinds`] selects).
    pub fn kind(&self) -> EventKind {
        match self {
            Event::DeviceInit { .. } => EventKind::DeviceInit,
            Event::BinaryRegistered { .. } => EventKind::BinaryRegistered,
            Event::ImageLoaded { .. } => EventKind::ImageLoaded,
            Event::Construct { .. } => EventKind::Construct,
            Event::Arguments { .. } => EventKind::Arguments,
            Event::MapCreated { .. } => EventKind::MapCreated,
            Event::MapReused { .. } => EventKind::MapReused,
            Event::MapReleased { .. } => EventKind::MapReleased,
            Event::MapRemoved { .. } => EventKind::MapRemoved,
            Event::MapUsm { .. } => EventKind::MapUsm,
            Event::NoCounterpart { .. } => EventKind::NoCounterpart,
            Event::Alloc { .. } => EventKind::Alloc,
            Event::Free { .. } => EventKind::Free,
            Event::Transfer { .. } => EventKind::Transfer,
            Event::Kernel { .. } => EventKind::Kernel,
            Event::UnmappedPointer { .. } => EventKind::UnmappedPointer,
            Event::Api { .. } => EventKind::Api,
            Event::MappingTables { .. } => EventKind::MappingTables,
        }
    }
}

/// The kinds of [`Event`], one bit each in [`Kinds`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u32)]
pub enum EventKind {
    DeviceInit,
    BinaryRegistered,
    ImageLoaded,
    Construct,
    Arguments,
    MapCreated,
    MapReused,
    MapReleased,
    MapRemoved,
    MapUsm,
    NoCounterpart,
    Alloc,
    Free,
    Transfer,
    Kernel,
    UnmappedPointer,
    Api,
    MappingTables,
}

/// A set of event kinds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Kinds(u32);

impl Kinds {
    pub const NONE: Kinds = Kinds(0);
    pub const ALL: Kinds = Kinds(u32::MAX);

    /// The set of these kinds.
    pub const fn of(kinds: &[EventKind]) -> Kinds {
        let mut bits = 0;
        let mut i = 0;
        while i < kinds.len() {
            bits |= 1 << kinds[i] as u32;
            i += 1;
        }
        Kinds(bits)
    }

    #[inline]
    pub fn contains(self, kind: EventKind) -> bool {
        self.0 & (1 << kind as u32) != 0
    }

    pub fn is_empty(self) -> bool {
        self.0 == 0
    }

    const fn bits(self) -> u32 {
        self.0
    }
}

/// What an observer wants, said before any event is built (as a `tracing` subscriber's
/// interest): the runtime builds no event nobody wants and measures no interval nobody reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Interest {
    /// The event kinds it hears.
    pub kinds: Kinds,
    /// It reads the intervals of operations (`time`, `done`): the runtime measures them,
    /// and emits the events that report an operation done.
    pub timing: bool,
    /// It has work for [`End::Exit`]: the ABI layer then arranges an exit handler.
    pub at_exit: bool,
}

impl Interest {
    /// Nothing: the observer is idle (INFO output with no bit set).
    pub const NONE: Interest = Interest { kinds: Kinds::NONE, timing: false, at_exit: false };
}

/// The moments an observer finishes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum End {
    /// The program's last binary unregistered: its offloading is over. The mapping checker
    /// reports leaks and the advice here, before INFO's last table dump.
    LastUnregistration,
    /// The process is exiting or aborting (the profile writes its file and summary). May
    /// come more than once; observers finish once.
    Exit,
}

/// What an observer may ask while it hears an event: the construct the event belongs to
/// (taken when the event is emitted, on the thread that emits it) and device memory.
pub struct EventCx<'a> {
    rt: &'a Runtime,
    /// `(target id, return address)` of the construct, or zeros outside constructs.
    construct: (u64, usize),
}

impl<'a> EventCx<'a> {
    pub(crate) fn new(rt: &'a Runtime) -> Self {
        Self { rt, construct: current() }
    }

    /// The construct the event belongs to: the `target_id` of its [`Event::Construct`]
    /// (its [`Event::Arguments`] come after the id is made, just before the begin event),
    /// or 0 outside constructs.
    pub fn construct(&self) -> u64 {
        self.construct.0
    }

    /// Where the program entered the construct the event belongs to (the return address of
    /// its runtime call, OMPT's `codeptr_ra`), or 0 outside constructs.
    pub fn codeptr(&self) -> usize {
        self.construct.1
    }

    /// Device `device`'s bytes `[addr, addr+len)`, copied through the device layer with no
    /// event; `None` when the device or the read fails (the runtime's next operation on it
    /// meets the failure and reports it).
    ///
    /// # Safety
    /// `[addr, addr+len)` lies inside one allocation (or global) of that device, such as a
    /// mapping whose `MapCreated` the observer heard and whose memory is not freed yet (a
    /// `MapRemoved` comes before the free). On a device whose memory is this process's,
    /// the read goes wherever the address points.
    pub unsafe fn read_device(&self, device: i32, addr: usize, len: usize) -> Option<Vec<u8>> {
        // SAFETY: the caller's promise.
        unsafe { self.rt.device(device)?.read_for_observer(addr, len) }
    }
}

/// Something that wants to hear about the runtime's work. Observers hear events after the
/// runtime's locks are released, in the order they were installed: INFO output, the
/// profile, then the composition's (OMPT tools, the checker).
pub trait Observer: Send + Sync {
    /// What it wants. Read when the observer is installed and again when the runtime's
    /// settings change ([`Runtime::set_info_flag`]).
    fn interest(&self) -> Interest;
    /// One event of a kind it wants.
    fn event(&self, ev: &Event, cx: &EventCx);
    /// The device `device` was opened: an observer may wrap it (a decorator that watches
    /// what kernels touch). The default keeps it as it is.
    fn wrap_device(&self, _device: i32, backend: Box<dyn Device>) -> Box<dyn Device> {
        backend
    }
    /// The program or the process ends (see [`End`]).
    fn finish(&self, _end: End) {}
}

/// An observer and the kinds it wants now.
struct Installed {
    observer: Box<dyn Observer>,
    kinds: AtomicU32,
}

impl Installed {
    fn new(observer: Box<dyn Observer>) -> Self {
        let kinds = AtomicU32::new(observer.interest().kinds.bits());
        Self { observer, kinds }
    }
}

/// The observers and what they want, summed, so that the runtime's question "does anyone
/// listen?" is one load.
pub(crate) struct Observers {
    /// INFO output and the profile, made from the configuration.
    builtin: Vec<Installed>,
    /// The composition's (OMPT tools, the checker), installed once after start-up.
    installed: OnceLock<Vec<Installed>>,
    /// Some observer wants some event.
    observing: AtomicBool,
    /// Some observer reads intervals.
    timing: AtomicBool,
}

impl Observers {
    pub(crate) fn new(builtin: Vec<Box<dyn Observer>>) -> Self {
        let o = Self {
            builtin: builtin.into_iter().map(Installed::new).collect(),
            installed: OnceLock::new(),
            observing: AtomicBool::new(false),
            timing: AtomicBool::new(false),
        };
        o.refresh();
        o
    }

    fn all(&self) -> impl Iterator<Item = &Installed> {
        self.builtin.iter().chain(self.installed.get().into_iter().flatten())
    }

    /// Installs the composition's observers; only the first call counts.
    pub(crate) fn install(&self, observers: Vec<Box<dyn Observer>>) {
        if self.installed.set(observers.into_iter().map(Installed::new).collect()).is_ok() {
            self.refresh();
        }
    }

    /// Reads every observer's interest again (a setting changed).
    pub(crate) fn refresh(&self) {
        let (mut observing, mut timing) = (false, false);
        for o in self.all() {
            let i = o.observer.interest();
            o.kinds.store(i.kinds.bits(), Ordering::Relaxed);
            observing |= !i.kinds.is_empty();
            timing |= i.timing;
        }
        self.observing.store(observing, Ordering::Relaxed);
        self.timing.store(timing, Ordering::Relaxed);
    }

    #[inline]
    pub(crate) fn observing(&self) -> bool {
        self.observing.load(Ordering::Relaxed)
    }

    #[inline]
    pub(crate) fn timing(&self) -> bool {
        self.timing.load(Ordering::Relaxed)
    }

    /// Some observer has work at [`End::Exit`].
    pub(crate) fn at_exit(&self) -> bool {
        self.all().any(|o| o.observer.interest().at_exit)
    }

    /// Hands an event to every observer that wants its kind, in order.
    pub(crate) fn emit(&self, ev: &Event, cx: &EventCx) {
        let bit = 1 << ev.kind() as u32;
        for o in self.all() {
            if o.kinds.load(Ordering::Relaxed) & bit != 0 {
                o.observer.event(ev, cx);
            }
        }
    }

    /// Lets every observer wrap a device as it opens.
    pub(crate) fn wrap_device(&self, device: i32, mut backend: Box<dyn Device>) -> Box<dyn Device> {
        for o in self.all() {
            backend = o.observer.wrap_device(device, backend);
        }
        backend
    }

    pub(crate) fn finish(&self, end: End) {
        for o in self.all() {
            o.observer.finish(end);
        }
    }
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

/// The construct this thread is running: `(target id, return address)`. Observers have it
/// from each event's [`EventCx`]; a device decorator (the checker's) reads it here.
pub fn current() -> (u64, usize) {
    CURRENT.with(|c| c.get())
}
