//! What the checker knows of one mapping: the bytes host and device last agreed on, which
//! of them that covers, and which device pages hold data.

use super::advice::Clause;
use super::host_changes::HostDirty;
use omp_plugin::{host_memory, TRACK_PAGE};
use omp_runtime::trace::TargetKind;
use omp_runtime::{Loc, MapName};

/// Copies to the device remembered per mapping while unread (beyond, the oldest are
/// forgotten: advice missed, never wrong).
const MAX_UNREAD_COPIES: usize = 64;

/// The least part of a mapping, in bytes, that advice says no kernel read.
pub(super) const UNTOUCHED_MIN_BYTES: usize = 1 << 20;

/// ... and the least share of the mapping (1/4).
pub(super) const UNTOUCHED_MIN_SHARE: usize = 4;

/// Copies to the device of host offsets `[s, e)` at one place that no kernel has read since
/// (the advisor's).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct UnreadCopy {
    pub at: Loc,
    pub clause: Clause,
    pub s: usize,
    pub e: usize,
    pub times: u64,
}

/// One mapping-table entry, as the checker follows it.
pub(super) struct Entry {
    pub device: i32,
    pub begin: usize,
    pub size: usize,
    /// Device address of `begin`.
    pub tgt: usize,
    /// The map name (`;A[0:N];file;line;col;;`), or 0.
    pub name: MapName,
    /// The construct that made it; `None` when made outside constructs (declare target).
    pub made_by: Option<(TargetKind, Loc)>,
    /// One of that construct's own map arguments made it (not a mapper or a member).
    pub explicit: bool,
    /// Host and device held these bytes after the last copy between them (valid where
    /// `synced` says so).
    pub snapshot: Vec<u8>,
    /// Offsets (from `begin`) of the bytes some copy went through, sorted and merged.
    pub synced: Vec<(usize, usize)>,
    /// Offsets of bytes the runtime itself wrote on the device (attached pointers).
    pub ignore: Vec<(usize, usize)>,
    /// Where the last host→device copy happened.
    pub copied_at: Loc,
    /// The program's data went to the device (`to`, `tofrom`): its contents matter.
    pub meaningful: bool,
    /// A construct asked for the device's bytes back (`from`, `tofrom`, implicit or not)
    /// while the mapping lived: changes the device alone holds at its end were wanted.
    pub from_asked: bool,
    /// Per device page: something wrote it (a copy or a kernel).
    pub init: Vec<bool>,
    /// Per device page: copied to the device and not read by a kernel since (the advisor).
    pub unread: Vec<bool>,
    /// The copies to the device since a kernel last touched this mapping, or its bytes were
    /// copied back (the advisor's: only copies no byte of which was used are advice).
    pub unread_copies: Vec<UnreadCopy>,
    /// Per device page: the program's data was copied there while pages were watched (the
    /// advisor's, for the part of a mapping no kernel read).
    pub copied_in: Vec<bool>,
    /// Per device page: a kernel touched it (or what it did there is unknown) while mapped.
    pub touched: Vec<bool>,
    /// The clause of the first copy to the device that was watched.
    pub copy_clause: Option<Clause>,
    /// Which host pages may have changed since the record was taken, where the system says
    /// (`None`: any of them).
    pub host_dirty: Option<HostDirty>,
}

impl Entry {
    pub fn new(
        device: i32,
        begin: usize,
        size: usize,
        tgt: usize,
        name: MapName,
        made_by: Option<(TargetKind, Loc)>,
    ) -> Self {
        let pages = pages_of(tgt, size);
        Entry {
            device,
            begin,
            size,
            tgt,
            name,
            made_by,
            explicit: false,
            snapshot: Vec::new(),
            synced: Vec::new(),
            ignore: Vec::new(),
            copied_at: Loc::NONE,
            meaningful: false,
            from_asked: false,
            init: vec![false; pages],
            unread: vec![false; pages],
            unread_copies: Vec::new(),
            copied_in: vec![false; pages],
            touched: vec![false; pages],
            copy_clause: None,
            host_dirty: None,
        }
    }

    /// A copy to the device of host offsets `[s, e)` at `at`, which a kernel has yet to read.
    pub fn copied_unread(&mut self, at: Loc, clause: Clause, s: usize, e: usize) {
        let same = |c: &&mut UnreadCopy| (c.at, c.clause, c.s, c.e) == (at, clause, s, e);
        if let Some(c) = self.unread_copies.iter_mut().find(same) {
            c.times += 1;
            return;
        }
        if self.unread_copies.len() >= MAX_UNREAD_COPIES {
            self.unread_copies.remove(0);
        }
        self.unread_copies.push(UnreadCopy { at, clause, s, e, times: 1 });
    }

    /// A kernel touched this mapping, or a copy took its bytes back to the host: the copies
    /// to the device so far may have mattered. Hands them back.
    pub fn copies_used(&mut self) -> Vec<UnreadCopy> {
        std::mem::take(&mut self.unread_copies)
    }

    /// The unread copies that a copy of `[s, e)` replaces entirely: they were wasted.
    pub fn replaced_copies(&mut self, s: usize, e: usize) -> Vec<UnreadCopy> {
        let (gone, kept) = self.unread_copies.iter().partition(|c| s <= c.s && c.e <= e);
        self.unread_copies = kept;
        gone
    }

    /// The part of the mapping copied to the device that no kernel touched, as host offsets
    /// `[s, e)`, when it is worth saying: one run of whole pages at the start or the end of
    /// the mapping (a smaller section leaves it out), at least [`UNTOUCHED_MIN_BYTES`] and
    /// at least 1/[`UNTOUCHED_MIN_SHARE`] of the mapping, while kernels did touch the rest.
    /// Scattered pages (a table read at random places, a stencil's boundary rows) are not.
    pub fn untouched_part(&self) -> Option<(usize, usize)> {
        let n = self.touched.len();
        if n == 0 || !self.touched.iter().any(|&t| t) {
            return None;
        }
        let idle = |i: usize| self.copied_in[i] && !self.touched[i];
        let head = (0..n).take_while(|&i| idle(i)).count();
        let tail = (0..n).rev().take_while(|&i| idle(i)).count();
        let (s, e) = if head >= tail {
            (0, self.page_span(head.checked_sub(1)?).1)
        } else {
            (self.page_span(n - tail).0, self.size)
        };
        let big = e - s >= UNTOUCHED_MIN_BYTES && (e - s) * UNTOUCHED_MIN_SHARE >= self.size;
        big.then_some((s, e))
    }

    /// The first device page's address.
    pub fn first_page(&self) -> usize {
        self.tgt & !(TRACK_PAGE - 1)
    }

    /// The host offsets `[s, e)` that device page `i` holds.
    pub fn page_span(&self, i: usize) -> (usize, usize) {
        let start = self.first_page() + i * TRACK_PAGE;
        let s = start.saturating_sub(self.tgt).min(self.size);
        let e = (start + TRACK_PAGE).saturating_sub(self.tgt).min(self.size);
        (s, e)
    }

    /// Device pages holding host offsets `[s, e)`.
    pub fn pages_for(&self, s: usize, e: usize) -> std::ops::Range<usize> {
        if e <= s {
            return 0..0;
        }
        let first = (self.tgt + s - self.first_page()) / TRACK_PAGE;
        let last = (self.tgt + e - 1 - self.first_page()) / TRACK_PAGE;
        first..(last + 1).min(self.init.len())
    }

    /// The host copy is still mapped in this process (the program may have freed it).
    pub fn host_readable(&self) -> bool {
        host_memory::is_mapped(self.begin, self.size)
    }

    /// Copies the program's bytes at offsets `[s, s+out.len())` of this mapping into `out`.
    /// They are copied, never borrowed: the program's other threads may be writing them.
    fn copy_host(&self, s: usize, out: &mut [u8]) {
        assert!(s + out.len() <= self.size, "a range within the mapping");
        // SAFETY: callers check `host_readable` first; the range lies in the mapping (checked
        // above), which the program keeps alive while it is mapped (a map clause's promise);
        // `out` is ours and holds `out.len()` bytes.
        unsafe { host_memory::copy(out.as_mut_ptr() as usize, self.begin + s, out.len()) }
    }

    /// The program's bytes `[s, e)` of this mapping, copied.
    pub fn host_bytes(&self, s: usize, e: usize) -> Vec<u8> {
        let mut out = vec![0; e - s];
        self.copy_host(s, &mut out);
        out
    }

    /// Whether the program's bytes `[s, e)` equal `expected` (compared a chunk at a time,
    /// copied to the stack).
    fn host_equals(&self, s: usize, expected: &[u8]) -> bool {
        let mut chunk = [0u8; 256];
        expected.chunks(chunk.len()).enumerate().all(|(i, want)| {
            let got = &mut chunk[..want.len()];
            self.copy_host(s + i * 256, got);
            got == want
        })
    }

    /// A copy between host and device went through host offsets `[s, e)`: they agree now.
    /// When the record cannot be allocated (a mapping as large as memory allows), the
    /// mapping is left unjudged.
    pub fn synced_now(&mut self, s: usize, e: usize) {
        if self.snapshot.len() != self.size {
            let mut record = Vec::new();
            if record.try_reserve_exact(self.size).is_err() {
                return;
            }
            record.resize(self.size, 0);
            self.snapshot = record;
        }
        self.refresh(s, e);
        add_range(&mut self.synced, s, e);
        for p in self.pages_for(s, e) {
            self.init[p] = true;
        }
    }

    /// The record of host offsets `[s, e)` becomes the host's bytes now.
    pub fn refresh(&mut self, s: usize, e: usize) {
        let mut snapshot = std::mem::take(&mut self.snapshot);
        self.copy_host(s, &mut snapshot[s..e]);
        self.snapshot = snapshot;
    }

    /// The program changed host offsets `[s, e)` on one side behind the mappings' back
    /// (`omp_target_memcpy`, `omp_target_memset`): nothing is known of them any more.
    pub fn forget(&mut self, s: usize, e: usize) {
        self.in_flight(s, e);
        for p in self.pages_for(s, e) {
            self.init[p] = true;
            self.unread[p] = false;
            self.touched[p] = true;
        }
    }

    /// A copy back into host offsets `[s, e)` is under way: the host changes there are the
    /// runtime's own, and another thread's kernel must not judge them until it is done.
    pub fn in_flight(&mut self, s: usize, e: usize) {
        let mut kept = Vec::new();
        for &(a, b) in &self.synced {
            subtract(&mut kept, a, b, &[(s, e)]);
        }
        self.synced = kept;
    }

    /// Synced byte ranges within `[s, e)`, without the ignored ones.
    pub fn synced_within(&self, s: usize, e: usize) -> Vec<(usize, usize)> {
        let mut out = Vec::new();
        for &(a, b) in &self.synced {
            let (a, b) = (a.max(s), b.min(e));
            if a < b {
                subtract(&mut out, a, b, &self.ignore);
            }
        }
        out
    }

    /// Device pages whose synced bytes the host has changed since.
    ///
    /// A page counts when the host changed the first and the last element (up to 8 bytes)
    /// of its synced bytes: tracking says only that a kernel read the page, not which bytes,
    /// and a page the host changed in part (an update of a sub-range) must not raise a false
    /// alarm. Comparing two elements a page, not every byte, keeps the cost before each
    /// kernel to a few cache lines a page, and only pages the program may have written since
    /// the record are compared at all where the system says which ([`HostDirty`]).
    pub fn host_changed_pages(&self) -> Vec<usize> {
        let mut out = Vec::new();
        let unwritten = self.host_dirty.as_ref().is_some_and(|d| !d.any_page());
        if self.synced.is_empty() || unwritten || !self.host_readable() {
            return out;
        }
        let ranges = self.synced_within(0, self.size);
        // A head or tail of 8 bytes is read as one word, with no call per comparison. What
        // remains is the page walk to each page of the program's and of the record (a
        // translation miss a page: 4 KiB pages), most of the checker's cost on large mappings.
        // A word on no page the program wrote since the record cannot differ from it.
        let written =
            |(a, b): (usize, usize)| self.host_dirty.as_ref().is_none_or(|d| d.any(self.begin + a, self.begin + b));
        let differs = |a: usize, b: usize| {
            let Ok(was) = <[u8; 8]>::try_from(&self.snapshot[a..b]) else {
                return !self.host_equals(a, &self.snapshot[a..b]);
            };
            let mut host = [0u8; 8];
            self.copy_host(a, &mut host);
            host != was
        };
        let mut r = 0;
        for i in 0..self.init.len() {
            let (s, e) = self.page_span(i);
            while r < ranges.len() && ranges[r].1 <= s {
                r += 1;
            }
            let Some(&(a0, b0)) = ranges.get(r).filter(|x| x.0 < e) else { continue };
            let mut k = r;
            while k + 1 < ranges.len() && ranges[k + 1].0 < e {
                k += 1;
            }
            let (first, last) = ((a0.max(s), b0.min(e)), (ranges[k].0.max(s), ranges[k].1.min(e)));
            let head = (first.0, first.1.min(first.0 + 8));
            let tail = (last.1.saturating_sub(8).max(last.0), last.1);
            if written(head) && written(tail) && differs(head.0, head.1) && differs(tail.0, tail.1) {
                out.push(i);
            }
        }
        out
    }

    /// Synced bytes of `[s, e)` where `device` (the device's bytes of `[s, e)`) differs
    /// from what host and device last agreed on and from the host now: results that only
    /// the device has.
    pub fn device_only_bytes(&self, s: usize, e: usize, device: &[u8]) -> usize {
        let host_ok = self.host_readable();
        let mut n = 0;
        for (a, b) in self.synced_within(s, e) {
            let dev = &device[a - s..b - s];
            if dev == &self.snapshot[a..b] {
                continue;
            }
            let host = if host_ok { Some(self.host_bytes(a, b)) } else { None };
            n += dev
                .iter()
                .zip(&self.snapshot[a..b])
                .enumerate()
                .filter(|&(k, (d, snap))| d != snap && host.as_ref().is_none_or(|h| h[k] != *d))
                .count();
        }
        n
    }

    /// Copying the device's bytes of `[s, e)` (`device`) back changes nothing on the host:
    /// every byte of the range went through a copy (or was written by the runtime itself),
    /// and the device and the host both still hold what that copy left. A partial copy
    /// (`target update from(e[:1])`) says nothing of the bytes it did not copy.
    pub fn copy_back_changes_nothing(&self, s: usize, e: usize, device: &[u8]) -> bool {
        if self.snapshot.len() != self.size || !self.host_readable() {
            return false;
        }
        let mut unknown = Vec::new();
        subtract(&mut unknown, s, e, &self.synced);
        if unknown.iter().any(|&(a, b)| !covers(&self.ignore, a, b)) {
            return false;
        }
        let known = self.synced_within(s, e);
        !known.is_empty()
            && known.iter().all(|&(a, b)| {
                let was = &self.snapshot[a..b];
                &device[a - s..b - s] == was && self.host_equals(a, was)
            })
    }

    /// The host offsets `[s, e)` are the same on host and device as at the last copy.
    pub fn unchanged(&self, s: usize, e: usize, device: Option<&[u8]>) -> bool {
        if self.snapshot.len() != self.size || !covers(&self.synced, s, e) || !self.host_readable() {
            return false;
        }
        self.host_equals(s, &self.snapshot[s..e]) && device.is_none_or(|d| d == &self.snapshot[s..e])
    }
}

/// Pages spanned by `[tgt, tgt+size)`.
pub(super) fn pages_of(tgt: usize, size: usize) -> usize {
    if size == 0 {
        return 0;
    }
    let first = tgt & !(TRACK_PAGE - 1);
    (tgt + size - first).div_ceil(TRACK_PAGE)
}

/// Adds `[s, e)` to sorted, merged ranges.
pub(super) fn add_range(ranges: &mut Vec<(usize, usize)>, s: usize, e: usize) {
    if s >= e {
        return;
    }
    ranges.push((s, e));
    ranges.sort_unstable();
    let mut merged: Vec<(usize, usize)> = Vec::with_capacity(ranges.len());
    for &(a, b) in ranges.iter() {
        match merged.last_mut() {
            Some(last) if a <= last.1 => last.1 = last.1.max(b),
            _ => merged.push((a, b)),
        }
    }
    *ranges = merged;
}

/// Whether sorted, merged `ranges` cover `[s, e)`.
fn covers(ranges: &[(usize, usize)], s: usize, e: usize) -> bool {
    ranges.iter().any(|&(a, b)| a <= s && e <= b)
}

/// Pushes `[a, b)` minus the `holes` onto `out`.
fn subtract(out: &mut Vec<(usize, usize)>, a: usize, b: usize, holes: &[(usize, usize)]) {
    let mut cur = a;
    for &(h0, h1) in holes {
        if h1 <= cur || h0 >= b {
            continue;
        }
        if h0 > cur {
            out.push((cur, h0));
        }
        cur = cur.max(h1);
    }
    if cur < b {
        out.push((cur, b));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_merge_and_subtract() {
        let mut r = Vec::new();
        add_range(&mut r, 10, 20);
        add_range(&mut r, 0, 5);
        add_range(&mut r, 5, 12);
        assert_eq!(r, vec![(0, 20)]);
        let mut out = Vec::new();
        subtract(&mut out, 0, 20, &[(4, 8), (15, 30)]);
        assert_eq!(out, vec![(0, 4), (8, 15)]);
    }

    #[test]
    fn a_partial_copy_says_nothing_of_the_rest() {
        let host: Vec<u8> = (0..64).collect();
        let mut e = Entry::new(0, host.as_ptr() as usize, 64, 0x10000, MapName::NONE, None);
        let device = host.clone();
        // `target update from(e[:1])`: the other 56 bytes went through no copy.
        e.synced_now(0, 8);
        assert!(!e.copy_back_changes_nothing(0, 64, &device));
        assert!(e.copy_back_changes_nothing(0, 8, &device));
        e.synced_now(0, 64);
        assert!(e.copy_back_changes_nothing(0, 64, &device));
        let mut changed = device.clone();
        changed[40] ^= 1;
        assert!(!e.copy_back_changes_nothing(0, 64, &changed));
    }

    #[test]
    fn host_changes_count_where_a_page_changed_at_both_ends() {
        // Device page 0 holds the first 3 bytes (shorter than a word), then whole pages.
        let size = 40 * TRACK_PAGE;
        let mut host: Vec<u8> = (0..size).map(|i| (i % 251) as u8).collect();
        let mut e = Entry::new(0, host.as_ptr() as usize, size, 0x10_0ffd, MapName::NONE, None);
        e.synced_now(0, size);
        assert!(e.host_changed_pages().is_empty(), "nothing changed since the copy");
        let (s, t) = e.page_span(3);
        host[s] ^= 1;
        host[t - 1] ^= 1;
        let head_only = e.page_span(5).0;
        host[head_only] ^= 1;
        let tail_only = e.page_span(7).1 - 1;
        host[tail_only] ^= 1;
        let (s, t) = e.page_span(36);
        host[s + 7] ^= 1;
        host[t - 8] ^= 1;
        host[0] ^= 1;
        assert_eq!(e.host_changed_pages(), [0, 3, 36], "both ends changed (first and last word, or the 3 bytes)");
        // Bytes no copy went through are no one's business.
        let mut e = Entry::new(0, host.as_ptr() as usize, size, 0x10_0ffd, MapName::NONE, None);
        e.synced_now(0, e.page_span(10).0);
        host[0] ^= 1;
        let (s, t) = e.page_span(20);
        host[s] ^= 1;
        host[t - 1] ^= 1;
        assert_eq!(e.host_changed_pages(), [0]);
        drop(host);
    }

    #[test]
    fn copies_replaced_unread_are_handed_back_once() {
        let mut e = Entry::new(0, 0x1000, 8192, 0x20000, MapName::NONE, None);
        e.copied_unread(Loc::NONE, Clause::Map("to"), 0, 8192);
        e.copied_unread(Loc::NONE, Clause::Update, 0, 80);
        e.copied_unread(Loc::NONE, Clause::Update, 0, 80);
        assert_eq!(e.unread_copies.len(), 2);
        let gone = e.replaced_copies(0, 4096);
        assert_eq!(gone.len(), 1);
        assert_eq!((gone[0].clause, gone[0].times, gone[0].e), (Clause::Update, 2, 80));
        assert_eq!(e.copies_used().len(), 1);
        assert!(e.unread_copies.is_empty());
    }

    #[test]
    fn only_a_large_untouched_start_or_end_is_a_part_worth_saying() {
        let pages = 1024; // 4 MiB
        let fresh = || {
            let mut e = Entry::new(0, 0x1000_0000, pages * TRACK_PAGE, 0x2000_0000, MapName::NONE, None);
            e.copied_in.iter_mut().for_each(|c| *c = true);
            e
        };
        let mut e = fresh();
        assert_eq!(e.untouched_part(), None, "no kernel touched it: that is other advice");
        e.touched[..512].iter_mut().for_each(|t| *t = true);
        assert_eq!(e.untouched_part(), Some((2 << 20, 4 << 20)), "the last half");
        let mut start = fresh();
        start.touched[300..].iter_mut().for_each(|t| *t = true);
        assert_eq!(start.untouched_part(), Some((0, 300 * TRACK_PAGE)));
        // A stencil's boundary rows: a few pages at each end.
        let mut stencil = fresh();
        stencil.touched[2..pages - 2].iter_mut().for_each(|t| *t = true);
        assert_eq!(stencil.untouched_part(), None);
        // A table read at random places: untouched pages scattered, some at the ends.
        let mut table = fresh();
        for i in (0..pages).filter(|i| i % 7 != 0 && i % 11 != 3) {
            table.touched[i] = true;
        }
        assert_eq!(table.untouched_part(), None);
        // Large, but under a quarter of the mapping.
        let mut quarter = fresh();
        quarter.touched[..800].iter_mut().for_each(|t| *t = true);
        assert_eq!(quarter.untouched_part(), None);
        // Pages no copy reached are not "copied and unread".
        let mut alloc = fresh();
        alloc.touched[..512].iter_mut().for_each(|t| *t = true);
        alloc.copied_in[512..].iter_mut().for_each(|c| *c = false);
        assert_eq!(alloc.untouched_part(), None);
    }

    #[test]
    fn pages_of_a_mapping() {
        let e = Entry::new(0, 0x1000, 8192, 0x20ff8, MapName::NONE, None);
        assert_eq!(e.init.len(), 3);
        assert_eq!(e.page_span(0), (0, 8));
        assert_eq!(e.page_span(1), (8, 4104));
        assert_eq!(e.page_span(2), (4104, 8192));
        assert_eq!(e.pages_for(0, 8), 0..1);
        assert_eq!(e.pages_for(7, 9), 0..2);
        assert_eq!(e.pages_for(8190, 8192), 2..3);
    }
}
