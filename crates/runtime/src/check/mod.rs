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

mod advice;
mod entry;
mod report;

use crate::config::CheckMode;
use crate::map_type::{ALWAYS, MEMBER_OF};
use crate::trace::{ApiOp, Direction, Event, RcChange, TargetKind};
use crate::{DeviceCtx, Loc};
use advice::{Advisor, Waste};
use entry::Entry;
use omp_plugin::{Fault, KernelId, LaunchConfig, TRACK_PAGE};
use omp_sync::Mutex;
use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// `OMP_MAP_IMPLICIT`.
const IMPLICIT: i64 = 0x200;
/// Most device pages watched during one kernel (16 GiB).
const MAX_WATCHED_PAGES: usize = 1 << 22;
/// Fingerprints of past transfers kept for the advisor (then it starts over).
const MAX_FINGERPRINTS: usize = 1 << 16;
/// Findings remembered as said (beyond, every finding counts as a repeat).
const MAX_REPORTED: usize = 1 << 16;

/// A finding's identity: kind, device, variable or mapping, construct.
type Said = (u8, i32, usize, usize);

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
    args: Vec<(usize, i64, i64)>,
    /// Pointer arguments that point to nothing mapped: (variable, host address).
    unmapped: Vec<(String, usize)>,
    /// A transfer announced and judged wasteful (waste, mapping name, bytes), waiting for its
    /// duration.
    waste: Option<(Waste, usize, usize)>,
    /// The construct's kernel, once launched.
    kernel: String,
}

thread_local! {
    static CTX: RefCell<Vec<Ctx>> = const { RefCell::new(Vec::new()) };
    /// The last `Arguments` event (it precedes its construct's begin).
    static ARGS: RefCell<Vec<(usize, i64, i64)>> = const { RefCell::new(Vec::new()) };
}

fn with_ctx<R>(f: impl FnOnce(Option<&mut Ctx>) -> R) -> R {
    CTX.with(|c| f(c.borrow_mut().last_mut()))
}

fn current() -> Option<(TargetKind, Loc)> {
    with_ctx(|c| c.map(|c| (c.kind, c.loc)))
}

/// Why a page is watched during a kernel.
#[derive(Clone, Copy, Default)]
struct Why {
    changed: bool,
    uninit: bool,
    unread: bool,
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
        let what = if report::var(e.name).is_some() { e.name } else { e.begin };
        let mut r = self.reported.lock();
        let (said, seen) = &mut *r;
        let new_mapping = seen.len() < MAX_REPORTED && seen.insert((kind, e.device, e.begin, loc.0));
        let new = said.len() < MAX_REPORTED && said.insert((kind, e.device, what, loc.0));
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

    /// An event from the runtime (after its locks are released).
    pub fn event(&self, ev: &Event, dev: Option<&DeviceCtx>) {
        match *ev {
            Event::Arguments { types, sizes, names, .. } => ARGS.with(|a| {
                let mut a = a.borrow_mut();
                a.clear();
                a.extend(
                    types
                        .iter()
                        .zip(sizes)
                        .enumerate()
                        .map(|(i, (&t, &size))| (names.and_then(|n| n.get(i).copied()).unwrap_or(0), t, size)),
                );
            }),
            Event::Construct { kind, begin: true, loc, .. } => {
                let args = ARGS.with(|a| std::mem::take(&mut *a.borrow_mut()));
                CTX.with(|c| {
                    c.borrow_mut().push(Ctx {
                        kind,
                        loc,
                        args,
                        unmapped: Vec::new(),
                        waste: None,
                        kernel: String::new(),
                    })
                });
            }
            Event::Construct { begin: false, .. } => {
                CTX.with(|c| c.borrow_mut().pop());
            }
            Event::MapCreated { device, begin, size, tgt_begin, name, .. } => {
                let names: Vec<usize> =
                    with_ctx(|c| c.map(|c| c.args.iter().map(|a| a.0).collect())).unwrap_or_default();
                let name = report::named_like(name, &names);
                let mut e = Entry::new(device, begin, size, tgt_begin, name, current());
                // Named by the construct itself (not by a mapper's expansion or a member).
                e.explicit = with_ctx(|c| {
                    c.is_some_and(|c| {
                        c.args.iter().any(|&(n, ty, sz)| {
                            sz as usize == size
                                && ty & MEMBER_OF == 0
                                && (n == 0 || n == name || report::var(n).is_none())
                        })
                    })
                });
                self.entries.lock().insert((device, begin), e);
            }
            Event::Kernel { kernel, done: None, .. } => with_ctx(|c| {
                if let Some(c) = c {
                    c.kernel = kernel.to_string();
                }
            }),
            Event::MapReleased { device, begin, size, change, .. }
                if matches!(current(), Some((TargetKind::ExitData, _)))
                    && matches!(change, RcChange::Unchanged | RcChange::UpdateSuppressed) =>
            {
                // An exit the runtime's reference counting did not count (a mapper's own
                // first component, as in LLVM): the program did unmap it.
                let mut entries = self.entries.lock();
                if let Some(key) = Self::containing(&entries, device, begin, size) {
                    entries.get_mut(&key).expect("key").explicit = false;
                }
            }
            Event::UnmappedPointer { var, addr, .. } => with_ctx(|c| {
                if let Some(c) = c {
                    c.unmapped.push((var.to_string(), addr));
                }
            }),
            Event::Transfer { device, dir, host, tgt, bytes, done, .. } => {
                self.transfer(dev, device, dir, host, tgt, bytes, done.map(|t| t.end - t.start))
            }
            Event::MapRemoved { device, begin, tgt_begin, .. } => {
                // The record of this very mapping: another thread may already have mapped the
                // same host range anew (events of different threads arrive in any order).
                let removed = {
                    let mut entries = self.entries.lock();
                    match entries.get(&(device, begin)) {
                        Some(e) if e.tgt == tgt_begin => entries.remove(&(device, begin)),
                        _ => None,
                    }
                };
                if let (Some(e), Some(dev)) = (removed, dev) {
                    self.mapping_ended(&e, dev);
                }
            }
            Event::Api { op, device, ptr, other, bytes } => {
                // Device memory API calls on mapped data: the checker no longer knows what
                // either side holds there (no judgement, no false alarm).
                let mut entries = self.entries.lock();
                let hit = match op {
                    ApiOp::CopyToDevice | ApiOp::CopyWithinDevice | ApiOp::Memset => entries
                        .values_mut()
                        .find(|e| e.device == device && ptr >= e.tgt && ptr + bytes <= e.tgt + e.size)
                        .map(|e| (ptr - e.tgt, e)),
                    ApiOp::CopyFromDevice => Self::containing(&entries, device, other, bytes)
                        .and_then(|k| entries.get_mut(&k))
                        .map(|e| (other - e.begin, e)),
                    _ => None,
                };
                if let Some((s, e)) = hit {
                    e.forget(s, s + bytes);
                }
            }
            Event::Alloc { bytes, name, .. } if self.advising() => {
                if let Some((_, loc)) = current() {
                    self.advisor.note(Waste::RepeatedAlloc, loc, name, bytes, Duration::ZERO);
                }
            }
            _ => {}
        }
    }

    /// A copy between host and device, announced (`time` is `None`) or done.
    #[allow(clippy::too_many_arguments)]
    fn transfer(
        &self,
        dev: Option<&DeviceCtx>,
        device: i32,
        dir: Direction,
        host: usize,
        tgt: usize,
        bytes: usize,
        time: Option<Duration>,
    ) {
        let mut entries = self.entries.lock();
        let Some(key) = Self::containing(&entries, device, host, bytes) else {
            // The runtime writing a device pointer into a mapped object (an attachment):
            // those device bytes differ from the host's on purpose.
            if time.is_some() && dir == Direction::ToDevice {
                if let Some(e) =
                    entries.values_mut().find(|e| e.device == device && tgt >= e.tgt && tgt + bytes <= e.tgt + e.size)
                {
                    let (s, end) = (tgt - e.tgt, tgt - e.tgt + bytes);
                    entry::add_range(&mut e.ignore, s, end);
                    for p in e.pages_for(s, end) {
                        e.init[p] = true;
                    }
                }
            }
            return;
        };
        let e = entries.get_mut(&key).expect("key");
        let (s, end) = (host - e.begin, host - e.begin + bytes);
        let loc = current().map_or(Loc::NONE, |c| c.1);
        // flang copies a descriptor into every construct that maps its array (`always`, as a
        // member of the descriptor's map): nothing the program can avoid, so no advice on it.
        let compilers_copy = dir == Direction::ToDevice
            && report::is_fortran(loc, e.name)
            && with_ctx(|c| {
                c.is_some_and(|c| {
                    c.args.iter().any(|&(_, ty, sz)| ty & MEMBER_OF != 0 && ty & ALWAYS != 0 && sz as usize == bytes)
                })
            });
        match time {
            None if !self.advising() || compilers_copy => {
                if dir == Direction::FromDevice {
                    e.in_flight(s, end);
                }
            }
            None => {
                // Before the copy: is it needed?
                let waste = match dir {
                    Direction::ToDevice if e.unchanged(s, end, None) => {
                        let device_bytes = dev.and_then(|d| read_device(d, e.tgt + s, bytes));
                        e.unchanged(s, end, device_bytes.as_deref()).then_some(Waste::RedundantToDevice)
                    }
                    Direction::ToDevice if e.synced.is_empty() && e.host_readable() => {
                        // A new mapping: were these very bytes sent here before?
                        let print = fingerprint(e.host(s, end));
                        let mut sent = self.sent.lock();
                        if sent.len() >= MAX_FINGERPRINTS {
                            sent.clear();
                        }
                        let before = sent.insert((device, host, bytes), print);
                        (before == Some(print)).then_some(Waste::ResentToDevice)
                    }
                    Direction::FromDevice if e.snapshot.len() == e.size => {
                        let device_bytes = dev.and_then(|d| read_device(d, e.tgt + s, bytes));
                        device_bytes
                            .filter(|d| {
                                e.synced_within(s, end).iter().all(|&(a, b)| d[a - s..b - s] == e.snapshot[a..b])
                            })
                            .filter(|_| !e.synced_within(s, end).is_empty())
                            .map(|_| Waste::UnchangedFromDevice)
                    }
                    _ => None,
                };
                if dir == Direction::ToDevice {
                    // Bytes copied earlier and replaced unread were wasted.
                    let unread = (e.pages_for(s, end)).filter(|&p| e.unread[p]).count();
                    if unread > 0 {
                        self.advisor.note(
                            Waste::UnreadToDevice,
                            e.copied_at,
                            e.name,
                            bytes.min(unread * TRACK_PAGE),
                            Duration::ZERO,
                        );
                    }
                }
                let name = e.name;
                with_ctx(|c| {
                    if let Some(c) = c {
                        c.waste = waste.map(|w| (w, name, bytes));
                    }
                });
                if dir == Direction::FromDevice {
                    e.in_flight(s, end);
                }
            }
            Some(t) => {
                if !e.host_readable() {
                    return;
                }
                e.synced_now(s, end);
                if dir == Direction::ToDevice && !compilers_copy {
                    e.meaningful = true;
                    e.copied_at = loc;
                    // Whether a kernel reads them only a device that tracks accesses can tell.
                    let tracked = dev.is_some_and(|d| d.dev.access_tracking().is_some());
                    for p in e.pages_for(s, end).filter(|_| tracked) {
                        e.unread[p] = true;
                    }
                }
                drop(entries);
                if let Some((w, name, n)) = with_ctx(|c| c.and_then(|c| c.waste.take())) {
                    self.advisor.note(w, loc, name, n, t);
                }
            }
        }
    }

    /// A mapping left the table (its device memory is still there): results the device
    /// alone holds are lost.
    fn mapping_ended(&self, e: &Entry, dev: &DeviceCtx) {
        let loc = current().map_or(Loc::NONE, |c| c.1);
        let unread = if self.advising() { e.unread.iter().filter(|&&u| u).count() } else { 0 };
        if unread > 0 {
            self.advisor.note(
                Waste::UnreadToDevice,
                e.copied_at,
                e.name,
                (unread * TRACK_PAGE).min(e.size),
                Duration::ZERO,
            );
        }
        if !self.findings() || !e.meaningful || e.size == 0 || e.snapshot.len() != e.size {
            return;
        }
        let Some(device) = read_device(dev, e.tgt, e.size) else { return };
        let lost = e.device_only_bytes(0, e.size, &device);
        if lost == 0 || !self.first_time(finding::DISCARDED, e, loc) {
            return;
        }
        let kernel = with_ctx(|c| c.map(|c| c.kernel.clone())).unwrap_or_default();
        let fortran = report::is_fortran(loc, e.name);
        let made = e
            .made_by
            .map_or(String::new(), |(_, l)| format!(" (mapped at {})", report::place_for(l, e.name, Some(&kernel))));
        let sec = report::section(e.name, fortran);
        let at = report::place_for(loc, e.name, Some(&kernel));
        report::finding(
            "discarded device results",
            format_args!(
                "{}{made} was changed on device {} by a kernel, and its mapping ended at {} without the changes \
                 being copied back ({} differ from the host); map it with `tofrom` (`map(tofrom: {sec})`) or add {} \
                 before the mapping ends{}",
                report::var_or(e.name, e.size),
                e.device,
                at,
                report::bytes(lost),
                report::directive(fortran, &format!("target update from({sec})")),
                hint(report::var(e.name).is_some(), &at)
            ),
        );
    }

    /// Runs a kernel. On a device that tracks accesses, the pages that matter are watched:
    /// changed on the host since the last copy (stale data), never written (uninitialized),
    /// copied and not read yet (the advisor).
    ///
    /// # Safety
    /// As [`omp_plugin::Device::launch`].
    pub unsafe fn launch(
        &self,
        dev: &DeviceCtx,
        kernel: KernelId,
        args: &[usize],
        config: &LaunchConfig,
        name: &str,
        loc: Loc,
    ) -> omp_plugin::Result<()> {
        let Some(tracking) = dev.dev.access_tracking() else {
            // SAFETY: the caller's promise.
            return unsafe { dev.dev.launch(kernel, args, config) };
        };
        // Page → (mapping key, its device address, page index, why watched).
        let mut plan: HashMap<usize, ((i32, usize), usize, usize, Why)> = HashMap::new();
        // Pages left unwatched by the bound: what the kernel does there is unknown.
        let mut unwatched: Vec<((i32, usize), usize)> = Vec::new();
        {
            let entries = self.entries.lock();
            for (&key, e) in entries.range((dev.id, 0)..=(dev.id, usize::MAX)) {
                if e.size == 0 || e.made_by.is_none() {
                    continue;
                }
                let changed = if self.findings() { e.host_changed_pages() } else { Vec::new() };
                let first_page = e.first_page();
                let mut watch = |i: usize, f: &dyn Fn(&mut Why)| {
                    let page = first_page + i * TRACK_PAGE;
                    // Bounded: beyond it, pages go unwatched and are taken as written and read
                    // after the kernel (missed findings, never false ones).
                    if plan.len() < MAX_WATCHED_PAGES || plan.contains_key(&page) {
                        f(&mut plan.entry(page).or_insert((key, e.tgt, i, Why::default())).3);
                    } else {
                        unwatched.push((key, i));
                    }
                };
                if self.findings() {
                    for i in changed {
                        watch(i, &|w| w.changed = true);
                    }
                    for i in (0..e.init.len()).filter(|&i| !e.init[i]) {
                        watch(i, &|w| w.uninit = true);
                    }
                }
                for i in (0..e.unread.len()).filter(|&i| self.advising() && e.unread[i]) {
                    watch(i, &|w| w.unread = true);
                }
            }
        }
        let watch: Vec<(usize, usize)> = plan.keys().map(|&p| (p, TRACK_PAGE)).collect();
        // SAFETY: the caller's promise.
        match unsafe { tracking.launch_tracked(kernel, args, config, &watch) } {
            Ok(accesses) => {
                let mut entries = self.entries.lock();
                let mut found: Vec<(u8, (i32, usize), usize)> = Vec::new();
                for (key, i) in unwatched {
                    if let Some(e) = entries.get_mut(&key).filter(|e| i < e.init.len()) {
                        e.init[i] = true;
                        e.unread[i] = false;
                    }
                }
                for a in accesses {
                    let Some(&(key, tgt, i, why)) = plan.get(&a.page) else { continue };
                    // Another thread may have unmapped and mapped the range anew meanwhile.
                    let Some(e) = entries.get_mut(&key).filter(|e| e.tgt == tgt && i < e.init.len()) else { continue };
                    if a.read_first && why.changed {
                        found.push((finding::STALE, key, i));
                    }
                    if a.read_first && why.uninit && !e.init[i] {
                        found.push((finding::UNINIT, key, i));
                    }
                    // A page the kernel wrote first may still have been read (`x += 1` faults as a
                    // write): only pages no kernel touched count as unread.
                    e.unread[i] = false;
                    if a.written {
                        e.init[i] = true;
                        if why.changed && e.host_readable() && e.snapshot.len() == e.size {
                            // The kernel replaced these bytes: the host's change is moot.
                            let (s, t) = e.page_span(i);
                            e.refresh(s, t);
                        }
                    }
                }
                found.sort_unstable();
                found.dedup_by_key(|f| (f.0, f.1));
                for (kind, key, _) in found {
                    if let Some(e) = entries.get(&key) {
                        self.kernel_finding(kind, e, name, loc);
                    }
                }
                Ok(())
            }
            Err(err) => {
                if err.is_lost() && self.findings() {
                    if let Some(f) = tracking.last_fault() {
                        self.fault(dev, f, name, loc);
                    }
                }
                Err(err)
            }
        }
    }

    fn kernel_finding(&self, kind: u8, e: &Entry, kernel: &str, loc: Loc) {
        if !self.first_time(kind, e, loc) {
            return;
        }
        let fortran = report::is_fortran(loc, e.name);
        let sec = report::section(e.name, fortran);
        let made = e.made_by.map_or(String::new(), |(k, l)| {
            format!(" (mapped by {} at {})", report::construct(k), report::place_for(l, e.name, Some(kernel)))
        });
        let what = report::var_or(e.name, e.size);
        let at = report::place_for(loc, e.name, Some(kernel));
        let dev = e.device;
        match kind {
            finding::STALE => report::finding(
                "stale device data",
                format_args!(
                    "kernel {kernel} at {at} read {what}{made} on device {dev}, but the host changed it after it was last \
                     copied to the device (at {}); add {} before the construct, or map it with `always, to`{}",
                    report::place_for(e.copied_at, e.name, None),
                    report::directive(fortran, &format!("target update to({sec})")),
                    hint(report::var(e.name).is_some(), &at)
                ),
            ),
            _ => report::finding(
                "uninitialized device memory",
                format_args!(
                    "kernel {kernel} at {at} read {what}{made} on device {dev} before anything wrote it (it was mapped \
                     without `to`; checked per 4 KiB page); map it `to` or `tofrom` (`map(tofrom: {sec})`), or write it \
                     on the device before reading it{}",
                    hint(report::var(e.name).is_some(), &at)
                ),
            ),
        }
    }

    /// A kernel stopped on an access it may not make.
    fn fault(&self, dev: &DeviceCtx, f: Fault, kernel: &str, loc: Loc) {
        let access = if f.write { "wrote" } else { "read" };
        let names: Vec<usize> = with_ctx(|c| c.map(|c| c.args.iter().map(|a| a.0).collect())).unwrap_or_default();
        let at = report::place_in(loc, report::file_of(&names), Some(kernel));
        let fix_dir = if f.write { "tofrom" } else { "to" };
        if !f.device_memory {
            let (unmapped, args) = with_ctx(|c| c.map(|c| (c.unmapped.clone(), c.args.clone()))).unwrap_or_default();
            let culprit = unmapped
                .iter()
                .filter(|(_, a)| *a <= f.addr && f.addr - *a < (1 << 30))
                .min_by_key(|(_, a)| f.addr - *a)
                .or(unmapped.first().filter(|_| f.addr < (1 << 16)));
            match culprit {
                Some((var, _)) if !matches!(report::base_var(var), "" | "unknown") => {
                    let spelled = report::base_var(var);
                    let map = args.iter().find(|(n, _, _)| report::var(*n).is_some_and(|v| report::base_var(v) == spelled));
                    let how = match map {
                        Some(&(_, ty, _)) if ty & IMPLICIT != 0 => format!("implicit zero-length map at {at}"),
                        Some(_) => format!("mapped at {at}"),
                        None => format!("at {at}"),
                    };
                    report::finding(
                        "unmapped access",
                        format_args!(
                            "kernel {kernel} at {at} {access} host memory at 0x{:x} through `{spelled}` ({how}), which is \
                             not mapped on device {}; add `map({fix_dir}: {spelled}[0:N])` with N the number of elements \
                             the kernel uses{}",
                            f.addr,
                            dev.id,
                            hint(true, &at)
                        ),
                    );
                }
                _ => report::finding(
                    "unmapped access",
                    format_args!(
                        "kernel {kernel} at {at} {access} host memory at 0x{:x}, which is not mapped on device {}: a pointer \
                         the kernel follows points to host data; map that data (`map({fix_dir}: p[0:N])`){}",
                        f.addr,
                        dev.id,
                        hint(culprit.is_none(), &at)
                    ),
                ),
            }
            return;
        }
        let entries = self.entries.lock();
        // The nearest mapping: a guard page after one allocation lies before the next one's.
        let near = entries
            .values()
            .filter(|e| e.device == dev.id && e.size > 0)
            .filter_map(|e| {
                let end = e.tgt + e.size;
                if f.addr >= end && f.addr < end + 2 * TRACK_PAGE {
                    let how = match f.addr - end {
                        0 => "just past the end of".to_string(),
                        d => format!("{d} bytes past the end of"),
                    };
                    Some((f.addr - end, e, how))
                } else if f.addr < e.tgt && f.addr + 2 * TRACK_PAGE >= e.first_page() {
                    Some((e.tgt - f.addr, e, format!("{} bytes before the start of", e.tgt - f.addr)))
                } else {
                    None
                }
            })
            .min_by_key(|c| c.0)
            .map(|(_, e, how)| (e, how));
        match near {
            Some((e, how)) => {
                let made = e
                    .made_by
                    .map_or(String::new(), |(_, l)| format!(", mapped at {}", report::place_for(l, e.name, Some(kernel))));
                let sec = report::section(e.name, report::is_fortran(loc, e.name));
                // flang 19–22 start some such sections of allocatable, pointer and assumed-shape
                // arrays at the wrong element (docs/ompcc.md, "Fortran array sections").
                let flang = if report::is_fortran(loc, e.name) && report::multi_dim_section(&sec) {
                    "; if the kernel uses only the elements named, flang started this section at the wrong element \
                     (a bug of flang 19-22 with allocatable, pointer and assumed-shape arrays): build with ompcc, which \
                     corrects it or says how to write it"
                } else {
                    ""
                };
                report::finding(
                    "out of bounds",
                    format_args!(
                        "kernel {kernel} at {at} {access} {how} {} ({}{made}) on device {}; map every element the \
                         kernel uses (`map({fix_dir}: {})` with a larger extent) or fix the loop bounds{flang}{}",
                        report::var_or(e.name, e.size),
                        report::bytes(e.size),
                        dev.id,
                        if report::is_fortran(loc, e.name) {
                            report::base_var(&sec).to_string() + "(1:m)"
                        } else {
                            report::base_var(&sec).to_string() + "[0:M]"
                        },
                        hint(report::var(e.name).is_some(), &at)
                    ),
                );
            }
            None => report::finding(
                "out of bounds",
                format_args!(
                    "kernel {kernel} at {at} {access} device memory at 0x{:x} on device {} that belongs to no mapping (freed, \
                     or outside every mapped section){}",
                    f.addr,
                    dev.id,
                    hint(true, &at)
                ),
            ),
        }
    }

    /// The program is ending (its last binary unregisters): mappings still present leaked;
    /// the advice is printed.
    pub fn at_exit(&self) {
        let entries = std::mem::take(&mut *self.entries.lock());
        if self.findings() {
            for e in entries.values() {
                let Some((kind, made)) = e.made_by else { continue };
                // A `target` construct's own mappings end with it; one left over is the
                // runtime's doing (as LLVM's, with mappers), and so is a pointer that only
                // held an attachment.
                let attachment_only = e.ignore.iter().map(|r| r.1 - r.0).sum::<usize>() >= e.size;
                if kind == TargetKind::Target || attachment_only || !e.explicit {
                    continue;
                }
                if !self.first_time(finding::LEAK, e, made) {
                    continue;
                }
                let fortran = report::is_fortran(made, e.name);
                let sec = report::section(e.name, fortran);
                let at = report::place_for(made, e.name, None);
                report::finding(
                    "leak",
                    format_args!(
                        "{} ({} on device {}) is still mapped at exit; it was mapped by {} at {}; add {}{}",
                        report::var_or(e.name, e.size),
                        report::bytes(e.size),
                        e.device,
                        report::construct(kind),
                        at,
                        report::directive(fortran, &format!("target exit data map(release: {sec})")),
                        hint(report::var(e.name).is_some(), &at)
                    ),
                );
            }
        }
        let repeats = self.repeats.swap(0, Ordering::Relaxed);
        if repeats > 0 {
            crate::info::emit(&format!(
                "omptarget check: {repeats} more finding{} like the ones above not printed (each kind is said once per \
                 variable and construct)\n",
                if repeats == 1 { "" } else { "s" }
            ));
        }
        let advice = if self.advising() { self.advisor.summary() } else { String::new() };
        if !advice.is_empty() {
            crate::info::emit(&advice);
        }
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

/// The device's bytes `[tgt, tgt+len)`, read through the plugin.
fn read_device(dev: &DeviceCtx, tgt: usize, len: usize) -> Option<Vec<u8>> {
    let mut buf = Vec::new();
    buf.try_reserve_exact(len).ok()?;
    buf.resize(len, 0);
    // SAFETY: `buf` is ours, `len` writable bytes; the device range is a live mapping's.
    unsafe { dev.dev.retrieve(buf.as_mut_ptr() as usize, tgt, len) }.ok()?;
    Some(buf)
}
