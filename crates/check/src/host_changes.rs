//! Which host pages of a mapping the program may have changed since the checker took its
//! record of them, as the system tells ([`omp_plugin::host_writes`]): before each kernel the
//! checker compares only those pages with its record instead of every page of every mapping
//! (a page walk each, which was most of its cost on large mappings).
//!
//! A mapping's host pages are watched anew when a copy covers them whole (the record of
//! their bytes is taken again just after). Watching anew forgets the writes seen so far, so
//! they are first handed to every other mapping of the same pages (on any device). Mappings
//! of fewer than [`MIN_WATCHED_PAGES`] pages, and all of them where the system cannot watch
//! writes, are compared whole, as before.

use super::*;
use omp_plugin::host_writes::{PageRun, PAGE};

/// Mappings smaller than this (host pages) are compared whole: asking the system costs about
/// as much as comparing that many pages.
pub(crate) const MIN_WATCHED_PAGES: usize = 16;

/// Per host page of one mapping: whether the program may have changed it since the record
/// of its bytes was taken.
pub(crate) struct HostDirty {
    /// The address of the mapping's first host page.
    first: usize,
    dirty: Vec<bool>,
}

impl HostDirty {
    /// Host pages `[start, end)` (addresses) may have changed.
    fn mark(&mut self, start: usize, end: usize, dirty: bool) {
        let last = self.first + self.dirty.len() * PAGE;
        let (s, e) = (start.max(self.first), end.min(last));
        if s < e {
            let (i, j) = ((s - self.first) / PAGE, (e - self.first).div_ceil(PAGE));
            self.dirty[i..j].iter_mut().for_each(|d| *d = dirty);
        }
    }

    /// Whether some host page of the mapping may have changed.
    pub(crate) fn any_page(&self) -> bool {
        self.dirty.contains(&true)
    }

    /// Whether some host page of the bytes `[start, end)` (addresses) may have changed.
    pub(crate) fn any(&self, start: usize, end: usize) -> bool {
        let (i, j) = (start.saturating_sub(self.first) / PAGE, end.saturating_sub(self.first).div_ceil(PAGE));
        self.dirty.get(i..j.min(self.dirty.len())).is_none_or(|d| d.iter().any(|&d| d))
    }
}

/// The host pages `[begin, end)` holding a mapping's bytes.
fn host_pages(e: &Entry) -> (usize, usize) {
    (e.begin & !(PAGE - 1), (e.begin + e.size).next_multiple_of(PAGE))
}

impl Checker {
    /// The record of host offsets `[s, end)` of mapping `key` is about to be taken again: the
    /// host pages whose mapped bytes it covers whole are watched anew, after the writes seen
    /// there were handed to every other mapping of them.
    pub(crate) fn host_record_retaken(
        &self,
        entries: &mut BTreeMap<(i32, usize), Entry>,
        key: (i32, usize),
        s: usize,
        end: usize,
    ) {
        // Only kernels on a device that tracks accesses look for host changes. Skipping a
        // restart is safe: the pages keep what the last one said of them.
        let Some(watch) = self.host_writes.as_ref().filter(|_| self.tracks(key.0)) else { return };
        let Some(e) = entries.get_mut(&key) else { return };
        let (first, last) = host_pages(e);
        if (last - first) / PAGE < MIN_WATCHED_PAGES {
            return;
        }
        let lo = if s == 0 { first } else { (e.begin + s).next_multiple_of(PAGE) };
        let hi = if end >= e.size { last } else { (e.begin + end) & !(PAGE - 1) };
        if lo >= hi {
            return;
        }
        let runs = watch.restart(lo, hi);
        let d = e.host_dirty.get_or_insert_with(|| HostDirty { first, dirty: vec![true; (last - first) / PAGE] });
        match &runs {
            Some(runs) => {
                d.mark(lo, hi, false);
                for r in runs.iter().filter(|r| r.unseen) {
                    d.mark(r.start, r.end, true);
                }
            }
            None => d.mark(lo, hi, true),
        }
        let seen = runs.unwrap_or_else(|| vec![PageRun { start: lo, end: hi, unseen: true }]);
        for r in &seen {
            Self::host_written_elsewhere(entries, key, r.start, r.end);
        }
    }

    /// Host pages `[start, end)` may have changed, for every mapping of them but `key`.
    fn host_written_elsewhere(
        entries: &mut BTreeMap<(i32, usize), Entry>,
        key: (i32, usize),
        start: usize,
        end: usize,
    ) {
        let mut device = i32::MIN;
        while let Some((&(dev, _), _)) = entries.range((device, 0)..).next() {
            // A device's mappings do not overlap: those that hold these pages come last
            // among the ones that begin before `end` (empty ones hold nothing, wherever).
            for (&k, e) in entries.range_mut((dev, 0)..(dev, end)).rev() {
                if e.size == 0 {
                    continue;
                }
                if e.begin + e.size <= start {
                    break;
                }
                if k != key {
                    if let Some(d) = &mut e.host_dirty {
                        d.mark(start, end, true);
                    }
                }
            }
            let Some(next) = dev.checked_add(1) else { break };
            device = next;
        }
    }

    /// Before a kernel: the host pages of `e` the program wrote since they were last watched
    /// are noted as changed (all of them where the system cannot say).
    pub(crate) fn host_writes_noted(&self, e: &mut Entry) {
        let (Some(watch), Some(d)) = (&self.host_writes, &mut e.host_dirty) else { return };
        let (first, last) = (d.first, d.first + d.dirty.len() * PAGE);
        match watch.written(first, last) {
            Some(runs) => runs.iter().for_each(|r| d.mark(r.start, r.end, true)),
            None => d.mark(first, last, true),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `pages` whole pages of memory, each byte 1 (a host array the tests map), in a buffer
    /// of the program's.
    fn host_array(buf: &mut Vec<u8>, pages: usize) -> &mut [u8] {
        *buf = vec![1; (pages + 1) * PAGE];
        let at = buf.as_ptr().align_offset(PAGE);
        &mut buf[at..at + pages * PAGE]
    }

    /// A checker following `host` mapped whole on each of `devices`, every byte copied.
    fn mapped_on(devices: &[i32], host: &[u8]) -> Checker {
        let checker = Checker::new(CheckMode::All).expect("checking is on");
        for &dev in devices {
            let mock = omp_plugin::mock::MockDevice::new();
            mock.track_accesses();
            checker.devices.lock().insert(dev, Arc::new(mock));
        }
        let begin = host.as_ptr() as usize;
        let mut entries = checker.entries.lock();
        for &dev in devices {
            let made = Some((omp_runtime::trace::TargetKind::EnterData, Loc::NONE));
            entries.insert((dev, begin), Entry::new(dev, begin, host.len(), 0x4000_0000, MapName::NONE, made));
            checker.host_record_retaken(&mut entries, (dev, begin), 0, host.len());
            entries.get_mut(&(dev, begin)).expect("inserted").synced_now(0, host.len());
        }
        drop(entries);
        checker
    }

    fn changed(checker: &Checker, key: (i32, usize)) -> Vec<usize> {
        let mut entries = checker.entries.lock();
        let e = entries.get_mut(&key).expect("mapped");
        checker.host_writes_noted(e);
        e.host_changed_pages()
    }

    #[test]
    fn only_pages_the_program_wrote_are_compared_and_none_is_missed() {
        let mut buf = Vec::new();
        let host = host_array(&mut buf, 64);
        let begin = host.as_ptr() as usize;
        let checker = mapped_on(&[0, 1], host);
        let watched = checker.host_writes.is_some();
        let dirty = |dev: i32| -> usize {
            let entries = checker.entries.lock();
            entries[&(dev, begin)].host_dirty.as_ref().map_or(64, |d| d.dirty.iter().filter(|&&x| x).count())
        };
        assert_eq!(changed(&checker, (0, begin)), Vec::<usize>::new());
        if watched {
            assert_eq!(dirty(0), 0, "nothing written since the copy: nothing to compare");
        }
        // Page 3 changed at both ends; page 9 written, but back to what was copied.
        host[3 * PAGE] = 2;
        host[4 * PAGE - 1] = 2;
        host[9 * PAGE] = 1;
        assert_eq!(changed(&checker, (0, begin)), [3]);
        if watched {
            assert_eq!(dirty(0), 2, "the two pages written are compared, no other");
        }
        // Device 0 copies the array again: for it, nothing changed; device 1 still has the
        // old bytes, though the new watch on device 0 forgot the writes (an empty mapping on
        // device 1 where page 3 starts hides nothing).
        let mut entries = checker.entries.lock();
        let empty = Entry::new(1, begin + 3 * PAGE, 0, 0x5000_0000, MapName::NONE, None);
        entries.insert((1, begin + 3 * PAGE), empty);
        checker.host_record_retaken(&mut entries, (0, begin), 0, host.len());
        entries.get_mut(&(0, begin)).expect("mapped").synced_now(0, host.len());
        drop(entries);
        assert_eq!(changed(&checker, (0, begin)), Vec::<usize>::new());
        assert_eq!(changed(&checker, (1, begin)), [3], "device 1 still differs at page 3");
        // A copy of part of the array watches anew only the pages it covers whole: page 25,
        // changed at both ends, stays changed after a copy of 8 bytes in its middle.
        for p in [20, 25, 30] {
            host[p * PAGE] = 3;
            host[(p + 1) * PAGE - 1] = 3;
        }
        let mut entries = checker.entries.lock();
        for (s, t) in [(20 * PAGE + 8, 24 * PAGE), (25 * PAGE + 8, 25 * PAGE + 16)] {
            checker.host_record_retaken(&mut entries, (0, begin), s, t);
            entries.get_mut(&(0, begin)).expect("mapped").synced_now(s, t);
        }
        drop(entries);
        assert_eq!(changed(&checker, (0, begin)), [25, 30], "page 20's last word was copied again");
        assert_eq!(changed(&checker, (1, begin)), [3, 20, 25, 30]);
    }

    #[test]
    fn pages_marked_are_the_ones_asked_about() {
        let mut d = HostDirty { first: 0x10_0000, dirty: vec![false; 8] };
        d.mark(0x10_1000, 0x10_2001, true);
        assert_eq!(d.dirty, [false, true, true, false, false, false, false, false]);
        assert!(d.any(0x10_0ff8, 0x10_1000 + 1), "a word across into a changed page");
        assert!(!d.any(0x10_0ff8, 0x10_1000));
        d.mark(0, usize::MAX, false);
        assert!(!d.dirty.iter().any(|&x| x));
        d.mark(0, 0x10_0001, true);
        assert!(d.any(0x10_0000, 0x10_0008));
    }
}
