//! The checker's view of the runtime's events: constructs, mappings, transfers.

use super::*;
use crate::map_type::{ALWAYS, MEMBER_OF};
use crate::trace::{ApiOp, Direction, Event, RcChange};
use crate::MapName;
use omp_plugin::TRACK_PAGE;
use std::time::Duration;

/// Fingerprints of past transfers kept for the advisor (then it starts over).
const MAX_FINGERPRINTS: usize = 1 << 16;

impl Checker {
    /// An event from the runtime (after its locks are released).
    pub fn event(&self, ev: &Event, dev: Option<&DeviceCtx>) {
        match *ev {
            Event::Arguments { types, sizes, names, .. } => {
                ARGS.with(|a| {
                    let mut a = a.borrow_mut();
                    a.clear();
                    a.extend(types.iter().zip(sizes).enumerate().map(|(i, (&t, &size))| {
                        (names.and_then(|n| n.get(i).copied()).unwrap_or(MapName::NONE), t, size)
                    }));
                })
            }
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
                let names: Vec<MapName> =
                    with_ctx(|c| c.map(|c| c.args.iter().map(|a| a.0).collect())).unwrap_or_default();
                let name = report::named_like(name, &names);
                let mut e = Entry::new(device, begin, size, tgt_begin, name, current());
                // Named by the construct itself (not by a mapper's expansion or a member).
                e.explicit = with_ctx(|c| {
                    c.is_some_and(|c| {
                        c.args.iter().any(|&(n, ty, sz)| {
                            sz as usize == size
                                && ty & MEMBER_OF == 0
                                && (n.is_none() || n == name || report::var(n).is_none())
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
                        let print = fingerprint(&e.host_bytes(s, end));
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
                    let tracked = dev.is_some_and(|d| d.tracks_accesses());
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
}
