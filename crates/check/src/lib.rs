//! The mapping checker (`LIBOMPTARGET_CHECK=1`) and the data-movement advisor
//! (`LIBOMPTARGET_CHECK=perf`, and with 1): an observer of the runtime's events, installed
//! by the composition like any other ([`observer`]). On a device that can track accesses
//! (an isolated device in check mode) it also knows which device pages a kernel read and
//! wrote, and what stopped it: each device is wrapped, as it opens, in a decorator
//! ([`tracked::TrackedDevice`]) that asks the checker which pages to watch during a launch
//! and hands back what the kernel did.
//!
//! Per mapping it keeps the bytes host and device last agreed on (a copy, made at each
//! transfer); comparing them with the host before a kernel finds host changes that never
//! reached the device, and with the device when a mapping ends finds results that never
//! reached the host. Findings are single lines starting `omptarget check:`; advice is a
//! summary at exit. With `LIBOMPTARGET_CHECK=gpu` (and `1`) a kernel's stack and device
//! `malloc` use, as the isolated device measured them, is held against a GPU's defaults
//! (`gpu`). See docs/check.md.
//!
//! `events` follows the runtime's events (transfers, mappings ending), `tracked` runs a
//! kernel with its pages watched, `fault` explains what stopped one, `leaks` reports at exit.
//! What a construct passed (its kind, place, map arguments, kernel) is kept by construct id
//! ([`omp_runtime::trace::EventCx::construct`]), as its events say it.

mod advice;
mod entry;
mod events;
mod fault;
mod gpu;
mod host_changes;
mod leaks;
mod raw;
mod report;
mod tracked;

use advice::{Advisor, Clause, Copy, Mapped, Waste};
use entry::Entry;
use omp_plugin::Device;
use omp_runtime::config::CheckMode;
use omp_runtime::trace::{End, Event, EventCx, Interest, Kinds, Observer, TargetKind};
use omp_runtime::{Loc, MapName};
use omp_sync::Mutex;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Findings remembered as said (beyond, every finding counts as a repeat).
const MAX_REPORTED: usize = 1 << 16;

/// A finding's identity: kind, device, variable or mapping, construct.
type Said = (u8, i32, usize, Loc);

/// The checker and advisor for `mode`, as an observer; `None` when checking is off.
pub fn observer(mode: CheckMode) -> Option<Box<dyn Observer>> {
    Checker::new(mode).map(|c| Box::new(CheckObserver(Arc::new(c))) as Box<dyn Observer>)
}

/// The checker as the runtime sees it: one more observer.
struct CheckObserver(Arc<Checker>);

impl Observer for CheckObserver {
    /// Every event, with the intervals (the advisor sums the time copies took).
    fn interest(&self) -> Interest {
        Interest { kinds: Kinds::ALL, timing: true, at_exit: false }
    }

    fn event(&self, ev: &Event, cx: &EventCx) {
        self.0.event(ev, cx);
    }

    /// Every device gets the decorator: whether it can track accesses may change while it
    /// runs (an isolated device tracks once its worker runs), so the decorator asks at each
    /// launch.
    fn wrap_device(&self, device: i32, backend: Box<dyn Device>) -> Box<dyn Device> {
        let backend: Arc<dyn Device> = Arc::from(backend);
        self.0.devices.lock().insert(device, backend.clone());
        Box::new(tracked::TrackedDevice::new(device, backend, self.0.clone()))
    }

    fn finish(&self, end: End) {
        if end == End::LastUnregistration {
            self.0.at_exit();
        }
    }
}

/// The checker's state, shared by all threads.
pub(crate) struct Checker {
    mode: CheckMode,
    entries: Mutex<BTreeMap<(i32, usize), Entry>>,
    /// (finding, device, variable name or mapping, construct) already said, and (finding,
    /// device, mapping, construct) already found.
    reported: Mutex<(HashSet<Said>, HashSet<Said>)>,
    /// Mappings with a finding not printed because one like it was.
    repeats: AtomicU64,
    advisor: Advisor,
    /// (device, host begin, bytes) → fingerprint of the bytes last copied there, kept
    /// after the mapping ends: the same bytes sent again could have stayed mapped.
    sent: Mutex<HashMap<(i32, usize, usize), u64>>,
    /// The constructs in progress, by id.
    constructs: Mutex<HashMap<u64, Ctx>>,
    /// The backend under each device's decorator (to ask whether it tracks accesses now).
    devices: Mutex<HashMap<i32, Arc<dyn Device>>>,
    /// Mappings that ended, newest last (bounded): a kernel that faults in device memory one
    /// of them held used it after its end.
    ended: Mutex<std::collections::VecDeque<Ended>>,
    /// The devices whose checking stopped short, once said.
    watching_less_said: Mutex<HashSet<i32>>,
    /// Live `omp_target_alloc` blocks by (device, address).
    raw: Mutex<BTreeMap<(i32, usize), raw::RawBlock>>,
    /// What the system says of the program's writes (finding stale data), where it can.
    host_writes: Option<omp_plugin::host_writes::WriteWatch>,
    /// (kernel, kind) of the GPU findings said (`LIBOMPTARGET_CHECK=gpu`).
    gpu_said: Mutex<HashSet<(String, u8)>>,
}

/// Mappings remembered after their end.
const MAX_ENDED: usize = 1 << 12;

/// A mapping that ended: where its device memory was, what it held, and where it ended.
#[derive(Clone, Copy)]
struct Ended {
    device: i32,
    tgt: usize,
    size: usize,
    name: MapName,
    at: Loc,
}

/// A construct in progress, as its events describe it.
#[derive(Default)]
struct Ctx {
    /// Its kind and place, from its begin event.
    begun: Option<(TargetKind, Loc)>,
    /// Its map arguments: (name, type, size).
    args: Vec<(MapName, i64, i64)>,
    /// Pointer arguments that point to nothing mapped: (variable, host address).
    unmapped: Vec<(String, usize)>,
    /// A transfer announced and judged wasteful (waste, mapping, bytes), waiting for its
    /// duration.
    waste: Option<(Waste, Mapped, usize)>,
    /// The construct's kernel and the place it was launched from, once announced.
    kernel: String,
    kernel_loc: Loc,
}

mod finding {
    pub const STALE: u8 = 3;
    pub const DISCARDED: u8 = 4;
    pub const UNINIT: u8 = 5;
    pub const LEAK: u8 = 6;
}

impl Checker {
    fn new(mode: CheckMode) -> Option<Checker> {
        (mode != CheckMode::Off).then(|| Checker {
            mode,
            entries: Mutex::new(BTreeMap::new()),
            reported: Mutex::new((HashSet::new(), HashSet::new())),
            repeats: AtomicU64::new(0),
            advisor: Advisor::default(),
            sent: Mutex::new(HashMap::new()),
            constructs: Mutex::new(HashMap::new()),
            devices: Mutex::new(HashMap::new()),
            ended: Mutex::new(std::collections::VecDeque::new()),
            watching_less_said: Mutex::new(HashSet::new()),
            raw: Mutex::new(BTreeMap::new()),
            host_writes: matches!(mode, CheckMode::All | CheckMode::Bugs)
                .then(omp_plugin::host_writes::WriteWatch::new)
                .flatten(),
            gpu_said: Mutex::new(HashSet::new()),
        })
    }

    /// Runs `f` on construct `id`, if it is in progress. `f` takes no other lock of the
    /// checker's (the construct lock is taken last).
    fn with_ctx<R>(&self, id: u64, f: impl FnOnce(Option<&mut Ctx>) -> R) -> R {
        let mut constructs = self.constructs.lock();
        f(constructs.get_mut(&id).filter(|c| c.begun.is_some()))
    }

    /// The kind and place of construct `id`, if it is in progress.
    fn current(&self, id: u64) -> Option<(TargetKind, Loc)> {
        self.with_ctx(id, |c| c.and_then(|c| c.begun))
    }

    /// Whether device `device` can say, now, what its kernels touch.
    fn tracks(&self, device: i32) -> bool {
        self.devices.lock().get(&device).is_some_and(|d| d.access_tracking().is_some())
    }

    fn findings(&self) -> bool {
        matches!(self.mode, CheckMode::All | CheckMode::Bugs)
    }

    fn advising(&self) -> bool {
        matches!(self.mode, CheckMode::All | CheckMode::Perf)
    }

    /// True the first time a finding is made for this mapping at this construct.
    /// A finding is printed once per kind, construct and variable (the mapping's address when
    /// it has no name): a loop that maps a new section each time says it once. Repeats are
    /// counted and their number said at exit.
    fn first_time(&self, kind: u8, e: &Entry, loc: Loc) -> bool {
        let what = if report::var(e.name).is_some() { e.name.addr() } else { e.begin };
        let mut r = self.reported.lock();
        let (said, seen) = &mut *r;
        let new_mapping = seen.len() < MAX_REPORTED && seen.insert((kind, e.device, e.begin, loc));
        let new = said.len() < MAX_REPORTED && said.insert((kind, e.device, what, loc));
        if !new && new_mapping {
            self.repeats.fetch_add(1, Ordering::Relaxed);
        }
        new
    }

    /// The entry holding host range `[addr, addr+len)` on `device`.
    fn containing(
        entries: &BTreeMap<(i32, usize), Entry>,
        device: i32,
        addr: usize,
        len: usize,
    ) -> Option<(i32, usize)> {
        let (&key, e) = entries.range(..=(device, addr)).next_back()?;
        (key.0 == device && e.size > 0 && addr + len.max(1) <= e.begin + e.size).then_some(key)
    }
}

/// Said once: how to get names and places when they are missing.
fn hint(named: bool, place: &str) -> &'static str {
    if !named || place == "an unknown place" {
        report::hint_debug_info()
    } else {
        ""
    }
}

/// A fast fingerprint of bytes (not cryptographic: equal contents, equal prints).
fn fingerprint(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0x9e37_79b9_7f4a_7c15 ^ bytes.len() as u64;
    let mut words = bytes.chunks_exact(8);
    for w in &mut words {
        let v = u64::from_le_bytes(w.try_into().expect("8 bytes"));
        h = (h ^ v).wrapping_mul(0x100_0000_01b3).rotate_left(29);
    }
    for &b in words.remainder() {
        h = (h ^ b as u64).wrapping_mul(0x100_0000_01b3);
    }
    h
}
