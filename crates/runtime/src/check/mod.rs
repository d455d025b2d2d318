//! The mapping checker (`LIBOMPTARGET_CHECK=1`) and the data-movement advisor
//! (`LIBOMPTARGET_CHECK=perf`, and with 1): an observer of the runtime's events that also
//! runs each kernel, so that on a device that can track accesses (an isolated device in
//! check mode) it knows which device pages a kernel read and wrote, and what stopped it.
//!
//! Per mapping it keeps the bytes host and device last agreed on (a copy, made at each
//! transfer); comparing them with the host before a kernel finds host changes that never
//! reached the device, and with the device when a mapping ends finds results that never
//! reached the host. Findings are single lines starting `omptarget check:`; advice is a
//! summary at exit. See docs/check.md.
//!
//! `events` follows the runtime's events (transfers, mappings ending), `tracked` runs a
//! kernel with its pages watched, `fault` explains what stopped one, `leaks` reports at exit.

mod advice;
mod entry;
mod events;
mod fault;
mod leaks;
mod report;
mod tracked;

use crate::config::CheckMode;
use crate::trace::TargetKind;
use crate::MapName;
use crate::{DeviceCtx, Loc};
use advice::{Advisor, Waste};
use entry::Entry;
use omp_sync::Mutex;
use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};

/// Findings remembered as said (beyond, every finding counts as a repeat).
const MAX_REPORTED: usize = 1 << 16;

/// A finding's identity: kind, device, variable or mapping, construct.
type Said = (u8, i32, usize, Loc);

/// The checker's state, shared by all threads.
pub struct Checker {
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
}

/// The construct a thread is in.
struct Ctx {
    kind: TargetKind,
    loc: Loc,
    /// The construct's map arguments: (name, type, size).
    args: Vec<(MapName, i64, i64)>,
    /// Pointer arguments that point to nothing mapped: (variable, host address).
    unmapped: Vec<(String, usize)>,
    /// A transfer announced and judged wasteful (waste, mapping name, bytes), waiting for its
    /// duration.
    waste: Option<(Waste, MapName, usize)>,
    /// The construct's kernel, once launched.
    kernel: String,
}

thread_local! {
    static CTX: RefCell<Vec<Ctx>> = const { RefCell::new(Vec::new()) };
    /// The last `Arguments` event (it precedes its construct's begin).
    static ARGS: RefCell<Vec<(MapName, i64, i64)>> = const { RefCell::new(Vec::new()) };
}

fn with_ctx<R>(f: impl FnOnce(Option<&mut Ctx>) -> R) -> R {
    CTX.with(|c| f(c.borrow_mut().last_mut()))
}

fn current() -> Option<(TargetKind, Loc)> {
    with_ctx(|c| c.map(|c| (c.kind, c.loc)))
}

mod finding {
    pub const STALE: u8 = 3;
    pub const DISCARDED: u8 = 4;
    pub const UNINIT: u8 = 5;
    pub const LEAK: u8 = 6;
}

impl Checker {
    pub fn new(mode: CheckMode) -> Option<Checker> {
        (mode != CheckMode::Off).then(|| Checker {
            mode,
            entries: Mutex::new(BTreeMap::new()),
            reported: Mutex::new((HashSet::new(), HashSet::new())),
            repeats: AtomicU64::new(0),
            advisor: Advisor::default(),
            sent: Mutex::new(HashMap::new()),
        })
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

/// The device's bytes `[tgt, tgt+len)`, read through the device layer.
fn read_device(dev: &DeviceCtx, tgt: usize, len: usize) -> Option<Vec<u8>> {
    dev.read_for_observer(tgt, len)
}
