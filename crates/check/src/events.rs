//! The checker's view of the runtime's events: constructs, mappings, transfers.

use super::*;
use omp_runtime::map_type::{ALWAYS, DELETE, FROM, MEMBER_OF};
use omp_runtime::trace::{ApiOp, Direction, RcChange};
use std::time::Duration;

/// Fingerprints of past transfers kept for the advisor (then it starts over).
const MAX_FINGERPRINTS: usize = 1 << 16;

impl Checker {
    /// An event from the runtime (after its locks are released).
    pub(crate) fn event(&self, ev: &Event, cx: &EventCx) {
        let id = cx.construct();
        match *ev {
            Event::Arguments { types, sizes, names, .. } => {
                let args =
                    types.iter().zip(sizes).enumerate().map(|(i, (&t, &size))| {
                        (names.and_then(|n| n.get(i).copied()).unwrap_or(MapName::NONE), t, size)
                    });
                let mut constructs = self.constructs.lock();
                let c = constructs.entry(id).or_default();
                c.args.clear();
                c.args.extend(args);
            }
            Event::Construct { kind, begin: true, loc, target_id, .. } => {
                self.constructs.lock().entry(target_id).or_default().begun = Some((kind, loc));
            }
            Event::Construct { begin: false, target_id, .. } => {
                self.constructs.lock().remove(&target_id);
            }
            Event::MapCreated { device, begin, size, tgt_begin, name, .. } => {
                let names: Vec<MapName> =
                    self.with_ctx(id, |c| c.map(|c| c.args.iter().map(|a| a.0).collect())).unwrap_or_default();
                let name = report::named_like(name, &names);
                let mut e = Entry::new(device, begin, size, tgt_begin, name, self.current(id));
                // Named by the construct itself (not by a mapper's expansion or a member).
                e.explicit = self.with_ctx(id, |c| {
                    c.is_some_and(|c| {
                        c.args.iter().any(|&(n, ty, sz)| {
                            sz as usize == size
                                && ty & MEMBER_OF == 0
                                && (n.is_none() || n == name || report::var(n).is_none())
                        })
                    })
                });
                e.from_asked = self.asks_for(id, FROM, name, size);
                self.entries.lock().insert((device, begin), e);
            }
            Event::Kernel { kernel, loc, done: None, .. } => self.with_ctx(id, |c| {
                if let Some(c) = c {
                    c.kernel = kernel.to_string();
                    c.kernel_loc = loc;
                }
            }),
            Event::MapReleased { device, begin, size, name, .. } if self.asks_for(id, FROM, name, size) => {
                let mut entries = self.entries.lock();
                if let Some(key) = Self::containing(&entries, device, begin, size) {
                    entries.get_mut(&key).expect("key").from_asked = true;
                }
                drop(entries);
                self.exit_uncounted(ev, id);
            }
            Event::MapReleased { .. } => self.exit_uncounted(ev, id),
            Event::UnmappedPointer { var, addr, .. } => self.with_ctx(id, |c| {
                if let Some(c) = c {
                    c.unmapped.push((var.to_string(), addr));
                }
            }),
            Event::Transfer { device, dir, host, tgt, bytes, done, .. } => {
                self.transfer(cx, device, dir, host, tgt, bytes, done.map(|t| t.end - t.start))
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
                if let Some(e) = removed {
                    let at = self.current(id).map_or(Loc::NONE, |c| c.1);
                    let mut ended = self.ended.lock();
                    if ended.len() >= MAX_ENDED {
                        ended.pop_front();
                    }
                    ended.push_back(Ended { device, tgt: e.tgt, size: e.size, name: e.name, at });
                    drop(ended);
                    self.mapping_ended(&e, cx);
                }
            }
            Event::Api { op, device, ptr, other, bytes } => {
                self.raw_api(op, device, ptr, other, bytes);
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
                    self.copies_used(e);
                }
            }
            Event::Alloc { host, bytes, name, .. } if self.advising() => {
                if let Some((_, loc)) = self.current(id) {
                    let m = Mapped { name, begin: host, size: bytes };
                    self.advisor.note(Waste::RepeatedAlloc, loc, m, 1, bytes, Duration::ZERO);
                }
            }
            _ => {}
        }
    }

    /// An exit the runtime's reference counting did not count (a mapper's own first
    /// component, as in LLVM): the program did unmap it.
    fn exit_uncounted(&self, ev: &Event, id: u64) {
        let Event::MapReleased { device, begin, size, change, .. } = *ev else { return };
        if matches!(self.current(id), Some((TargetKind::ExitData, _)))
            && matches!(change, RcChange::Unchanged | RcChange::UpdateSuppressed)
        {
            let mut entries = self.entries.lock();
            if let Some(key) = Self::containing(&entries, device, begin, size) {
                entries.get_mut(&key).expect("key").explicit = false;
            }
        }
    }

    /// Whether construct `id` has a map argument with every bit of `bits` for the mapping
    /// named `name` of `size` bytes: the same variable when both are named, else the same
    /// size.
    fn asks_for(&self, id: u64, bits: i64, name: MapName, size: usize) -> bool {
        let var = report::var(name).map(report::base_var);
        self.with_ctx(id, |c| {
            c.is_some_and(|c| {
                c.args.iter().any(|&(n, ty, sz)| {
                    let same = match (var, report::var(n).map(report::base_var)) {
                        (Some(mine), Some(theirs)) => mine == theirs,
                        _ => sz as usize == size,
                    };
                    ty & bits == bits && ty & MEMBER_OF == 0 && same
                })
            })
        })
    }

    /// A copy between host and device, announced (`time` is `None`) or done.
    #[allow(clippy::too_many_arguments)]
    fn transfer(
        &self,
        cx: &EventCx,
        device: i32,
        dir: Direction,
        host: usize,
        tgt: usize,
        bytes: usize,
        time: Option<Duration>,
    ) {
        if dir == Direction::ToDevice {
            self.raw_copied(device, tgt, bytes);
        }
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
        let id = cx.construct();
        let loc = self.current(id).map_or(Loc::NONE, |c| c.1);
        // flang copies a descriptor into every construct that maps its array (`always`, as a
        // member of the descriptor's map): nothing the program can avoid, so no advice on it.
        let compilers_copy = dir == Direction::ToDevice
            && report::is_fortran(loc, e.name)
            && self.with_ctx(id, |c| {
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
                        // SAFETY: `[s, end)` lies in the mapping, whose device memory is
                        // allocated while it is in the table (it is being copied to).
                        let device_bytes = unsafe { cx.read_device(device, e.tgt + s, bytes) };
                        e.unchanged(s, end, device_bytes.as_deref()).then_some(Waste::RedundantToDevice)
                    }
                    Direction::ToDevice if e.synced.is_empty() && e.host_readable() => {
                        // A new mapping: were these very bytes sent here before?
                        let print = fingerprint(&e.host_bytes(s, end));
                        let mut sent = self.sent.lock();
                        if sent.len() >= MAX_FINGERPRINTS {
                            sent.clear();
                        }
                        let before = sent.insert((device, host, bytes), print);
                        if before.is_some_and(|b| b != print) {
                            // Keeping it mapped would have kept stale contents.
                            self.advisor.needed(
                                Copy::Changed,
                                loc,
                                Mapped { name: e.name, begin: e.begin, size: e.size },
                            );
                        }
                        (before == Some(print)).then_some(Waste::ResentToDevice)
                    }
                    Direction::FromDevice if e.snapshot.len() == e.size => {
                        // SAFETY: as above (it is being copied from).
                        let device_bytes = unsafe { cx.read_device(device, e.tgt + s, bytes) };
                        device_bytes
                            .filter(|d| e.copy_back_changes_nothing(s, end, d))
                            .map(|_| Waste::UnchangedFromDevice(self.clause(id, e.name, bytes)))
                    }
                    _ => None,
                };
                let m = Mapped { name: e.name, begin: e.begin, size: e.size };
                if dir == Direction::ToDevice {
                    // Copies made earlier and replaced, unread, by this one were wasted.
                    for c in e.replaced_copies(s, end) {
                        let wasted = Waste::UnreadToDevice(c.clause);
                        self.advisor.note(wasted, c.at, m, c.times, (c.e - c.s) * c.times as usize, Duration::ZERO);
                    }
                }
                self.with_ctx(id, |c| {
                    if let Some(c) = c {
                        c.waste = waste.map(|w| (w, m, bytes));
                    }
                });
                if dir == Direction::FromDevice {
                    // What went to the device now comes back: it mattered.
                    self.copies_used(e);
                    if waste.is_none() {
                        self.advisor.needed(Copy::Back, loc, m);
                    }
                    e.in_flight(s, end);
                }
            }
            Some(t) => {
                if !e.host_readable() {
                    return;
                }
                self.host_record_retaken(&mut entries, key, s, end);
                let e = entries.get_mut(&key).expect("key");
                e.synced_now(s, end);
                if dir == Direction::ToDevice && !compilers_copy {
                    e.meaningful = true;
                    e.copied_at = loc;
                    // Whether a kernel reads them only a device that tracks accesses can tell.
                    if self.advising() && self.tracks(device) {
                        for p in e.pages_for(s, end) {
                            e.unread[p] = true;
                            e.copied_in[p] = true;
                        }
                        let clause = self.clause(id, e.name, bytes);
                        e.copy_clause.get_or_insert(clause);
                        e.copied_unread(loc, clause, s, end);
                    }
                }
                drop(entries);
                if self.advising() {
                    self.advisor.transferred(t);
                }
                if let Some((w, m, n)) = self.with_ctx(id, |c| c.and_then(|c| c.waste.take())) {
                    self.advisor.note(w, loc, m, 1, n, t);
                }
            }
        }
    }

    /// A kernel touched mapping `e`, or its bytes went back to the host: its copies to the
    /// device so far were needed, and no advice may say the places that made them waste.
    pub(crate) fn copies_used(&self, e: &mut Entry) {
        let m = Mapped { name: e.name, begin: e.begin, size: e.size };
        for c in e.copies_used() {
            self.advisor.needed(Copy::There, c.at, m);
        }
    }

    /// The clause, as the program wrote it, of construct `id` that copies `bytes` of the
    /// mapping named `name`.
    fn clause(&self, id: u64, name: MapName, bytes: usize) -> Clause {
        self.with_ctx(id, |c| {
            let Some(c) = c else { return Clause::Unknown };
            let sized = |&&(_, ty, sz): &&(MapName, i64, i64)| sz as usize == bytes && ty & MEMBER_OF == 0;
            let arg = c.args.iter().filter(sized).find(|a| a.0 == name).or_else(|| c.args.iter().find(sized));
            Clause::of(c.begun.map(|b| b.0), arg.map(|a| a.1))
        })
    }

    /// A mapping left the table (its device memory is still there): results the device
    /// alone holds are lost.
    fn mapping_ended(&self, e: &Entry, cx: &EventCx) {
        let id = cx.construct();
        let loc = self.current(id).map_or(Loc::NONE, |c| c.1);
        if self.advising() {
            // Copies no kernel read a byte of, and that never came back: mapping `alloc`
            // (or dropping the update) leaves the program's results as they are.
            let m = Mapped { name: e.name, begin: e.begin, size: e.size };
            for c in &e.unread_copies {
                let wasted = Waste::UnreadToDevice(c.clause);
                self.advisor.note(wasted, c.at, m, c.times, (c.e - c.s) * c.times as usize, Duration::ZERO);
            }
            // Part of it no kernel read: said with the part, where the mapping was made. A
            // mapping whose kernels read it all says so too (no advice then at that place).
            if let (Some((_, made)), Some(clause)) = (e.made_by, e.copy_clause) {
                if e.touched.iter().any(|&t| t) {
                    let part = e.untouched_part();
                    self.advisor.note_part(Waste::PartlyUnreadToDevice(clause), made, m, part);
                }
            }
        }
        // Device changes are lost results only when the program asked for them (`from`,
        // `tofrom`) and the copy back did not come (another reference held the mapping
        // open). A mapping only ever mapped `to` is the kernels' own to change (device
        // scratch, loop counters under `defaultmap(to)`), and an explicit `delete` is intent.
        let deleted =
            matches!(self.current(id), Some((TargetKind::ExitData, _))) && self.asks_for(id, DELETE, e.name, e.size);
        if !self.findings() || !e.meaningful || !e.from_asked || deleted || e.size == 0 || e.snapshot.len() != e.size {
            return;
        }
        // SAFETY: the mapping's device memory is freed only after its `MapRemoved`.
        let Some(device) = (unsafe { cx.read_device(e.device, e.tgt, e.size) }) else { return };
        let lost = e.device_only_bytes(0, e.size, &device);
        if lost == 0 || !self.first_time(finding::DISCARDED, e, loc) {
            return;
        }
        let kernel = self.with_ctx(id, |c| c.map(|c| c.kernel.clone())).unwrap_or_default();
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
}
