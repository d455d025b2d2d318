//! The data-movement advisor: transfers and allocations that could be avoided, summed per
//! construct and variable, and printed at exit.
//!
//! Advice must be safe to follow: each kind is noted only when doing without the copy (or
//! the allocation) leaves the program's results as they were, fixes name the clause the
//! program wrote, and an unnamed mapping is told apart from every other by its address.

use super::report;
use omp_runtime::map_type::{FROM, IMPLICIT, TO};
use omp_runtime::trace::TargetKind;
use omp_runtime::{info, Loc, MapName};
use omp_sync::Mutex;
use std::collections::{HashMap, HashSet};
use std::time::Duration;

/// At most this many places are listed (the rest are counted).
const MAX_LISTED: usize = 20;

/// Advice saving less than this many bytes (and under [`SMALL_SHARE`] of the run's
/// transfer time) is summed into one line.
const SMALL_BYTES: u64 = 1 << 20;

/// The share of the run's transfer time, in percent, under which small advice is summed.
const SMALL_SHARE: u32 = 1;

/// How the program asked for a copy: the clause as it wrote it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(super) enum Clause {
    /// A `target update to/from`.
    Update,
    /// A map clause of this map type (`to`, `from`, `tofrom`).
    Map(&'static str),
    /// A map the compiler made implicitly, of this map type.
    Implicit(&'static str),
    /// `from` at the end of a data region: a `target exit data` (or `target data`).
    ExitFrom,
    /// Not known (the construct's arguments were not seen).
    Unknown,
}

impl Clause {
    /// The clause of a map argument of type `ty` at a construct of kind `kind`.
    pub fn of(kind: Option<TargetKind>, ty: Option<i64>) -> Clause {
        if kind == Some(TargetKind::Update) {
            return Clause::Update;
        }
        let Some(ty) = ty else { return Clause::Unknown };
        if kind == Some(TargetKind::ExitData) && ty & (TO | FROM) == FROM {
            return Clause::ExitFrom;
        }
        let map_type = match (ty & TO != 0, ty & FROM != 0) {
            (true, true) => "tofrom",
            (true, false) => "to",
            (false, true) => "from",
            (false, false) => "alloc",
        };
        if ty & IMPLICIT != 0 {
            Clause::Implicit(map_type)
        } else {
            Clause::Map(map_type)
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(super) enum Waste {
    /// Host→device copy of bytes the device already held.
    RedundantToDevice,
    /// Host→device copy, into a new mapping, of the same bytes as a mapping before it.
    ResentToDevice,
    /// Device→host copy of bytes no kernel changed, and that the host still held.
    UnchangedFromDevice(Clause),
    /// Host→device copy of bytes no kernel read before they were dropped or overwritten.
    UnreadToDevice(Clause),
    /// Device memory allocated again and again for the same host range at the same place.
    RepeatedAlloc,
    /// Host→device copy of a mapping whose kernels read only part of it: the start or the
    /// end, large ([`crate::entry::Entry::untouched_part`]), no kernel touched.
    PartlyUnreadToDevice(Clause),
}

impl Waste {
    fn says(self) -> &'static str {
        match self {
            Waste::RedundantToDevice => "copied to the device although the device already held the same bytes",
            Waste::ResentToDevice => "copied to the device again with the same contents after its mapping ended",
            Waste::UnchangedFromDevice(_) => "copied back from the device although no kernel changed it",
            Waste::UnreadToDevice(_) => "copied to the device but never read there by a kernel",
            Waste::RepeatedAlloc => "allocated and freed on the device again and again",
            Waste::PartlyUnreadToDevice(_) => "copied to the device, but no kernel read part of it",
        }
    }

    fn fix(self, fortran: bool) -> String {
        match self {
            Waste::RedundantToDevice => format!(
                "keep it on the device across constructs ({}) and copy only when the host changed it",
                report::directive(fortran, "target data map(to: …)")
            ),
            Waste::ResentToDevice => format!(
                "keep it mapped across the constructs ({} before, {} after)",
                report::directive(fortran, "target enter data map(to: …)"),
                report::directive(fortran, "target exit data map(release: …)")
            ),
            Waste::UnchangedFromDevice(clause) => match clause {
                Clause::Update => "drop the `target update from`".into(),
                Clause::Map("from") => "map it `alloc` instead of `from`".into(),
                Clause::Map(written) => format!("map it `to` instead of `{written}`"),
                Clause::Implicit(_) => "map it explicitly with `map(to: …)`".into(),
                Clause::ExitFrom => {
                    "map it `alloc` instead of `from` (at a `target exit data`: `release` instead of `from`)".into()
                }
                Clause::Unknown => "map it `to` instead of `tofrom`, or drop the `target update from`".into(),
            },
            Waste::UnreadToDevice(clause) => match clause {
                Clause::Update => "drop the `target update to`".into(),
                Clause::Map(written) => format!("map it `alloc` instead of `{written}`"),
                Clause::Implicit(_) => "map it explicitly with `map(alloc: …)`".into(),
                Clause::ExitFrom => "map it `alloc` instead of `from`".into(),
                Clause::Unknown => "map it `alloc` instead of `to`/`tofrom`".into(),
            },
            Waste::RepeatedAlloc => format!(
                "map it once around the loop ({} … {})",
                report::directive(fortran, "target enter data map(alloc: …)"),
                report::directive(fortran, "target exit data map(delete: …)")
            ),
            Waste::PartlyUnreadToDevice(_) => "if no kernel needs that part, map only the rest".into(),
        }
    }

    /// The words of partial advice: which part no kernel read, and the fix with the smaller
    /// section when the program's section says its elements (`a[0:1048576]`).
    fn says_part(self, (s, e, size): (usize, usize, usize), name: MapName, fortran: bool) -> (String, String) {
        let which = if s == 0 { "first" } else { "last" };
        let elements = report::var(name)
            .and_then(|v| literal_section(v, fortran))
            .filter(|&(_, n)| n > 0 && size % n as usize == 0);
        let mut says = format!(
            "copied to the device, but no kernel read its {which} {} (bytes {s}..{e} of {size}",
            report::bytes(e - s)
        );
        let mut rest = String::from("the rest");
        if let (Some((lo, n)), Some(v)) = (elements, report::var(name)) {
            let elem = size / n as usize;
            let (i, j) = (lo + (s / elem) as i64, lo + (e / elem) as i64);
            if fortran {
                says.push_str(&format!(", elements {i} to {}", j - 1));
            } else {
                says.push_str(&format!(", elements {i}..{j}"));
            }
            let (keep_lo, keep_n) = if s == 0 { (j, n - (j - lo) as u64) } else { (lo, (i - lo) as u64) };
            let base = report::base_var(v);
            let sec = if fortran {
                format!("{base}({keep_lo}:{})", keep_lo + keep_n as i64 - 1)
            } else {
                format!("{base}[{keep_lo}:{keep_n}]")
            };
            rest = match self {
                Waste::PartlyUnreadToDevice(Clause::Map(t) | Clause::Implicit(t)) => format!("`map({t}: {sec})`"),
                Waste::PartlyUnreadToDevice(Clause::Update) => {
                    report::directive(fortran, &format!("target update to({sec})"))
                }
                _ => format!("`{sec}`"),
            };
        }
        says.push(')');
        (says, format!("if no kernel needs that part, map only {rest}"))
    }

    /// Whether the waste is data moved (allocations move nothing).
    fn moves_data(self) -> bool {
        self != Waste::RepeatedAlloc
    }
}

/// The mapping some waste concerns, as the program wrote it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(super) struct Mapped {
    pub name: MapName,
    /// The host range `[begin, begin + size)`.
    pub begin: usize,
    pub size: usize,
}

/// Who a tally is about: a variable by its spelling, or an unnamed mapping by its host
/// range (two unnamed mappings are never one). Allocations count per host range: distinct
/// sections of one variable are not the same allocation made again.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
struct Who {
    var: Option<&'static str>,
    range: Option<(usize, usize)>,
}

impl Who {
    fn of(waste: Waste, m: Mapped) -> Who {
        let var = report::var(m.name);
        let range = (var.is_none() || waste == Waste::RepeatedAlloc).then_some((m.begin, m.size));
        Who { var, range }
    }

    /// Whose needed copies forbid advice on `who`: the same variable's at the same place;
    /// for an unnamed mapping, any unnamed mapping's there (a construct that maps a new
    /// section each time is one clause).
    fn needing(who: Who) -> Who {
        Who { var: who.var, range: None }
    }
}

#[derive(Default)]
struct Tally {
    times: u64,
    bytes: u64,
    time: Duration,
    /// The program is Fortran (directives are spelled `!$omp`).
    fortran: bool,
    /// The mapping's name (for its place when the construct has none).
    name: MapName,
    /// Partial advice: the part no kernel read every time, as host offsets of a mapping of
    /// this size `(s, e, size)`; `None` once some time had no such part.
    part: Option<(usize, usize, usize)>,
}

/// A copy's direction, for [`Advisor::needed`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(super) enum Copy {
    /// To the device.
    There,
    /// Back to the host.
    Back,
    /// To the device into a new mapping, with contents other than the last mapping's.
    Changed,
}

/// Places whose copies were needed at least once, remembered up to this many (beyond, no
/// advice of the kinds that need them is given: missed, never wrong).
const MAX_NEEDED: usize = 1 << 16;

/// What was wasted where: (waste, construct, mapping) → totals.
#[derive(Default)]
pub(super) struct Advisor {
    tallies: Mutex<HashMap<(Waste, Loc, Who), Tally>>,
    /// (direction, construct, mapping) of copies that were needed at least once: a place
    /// whose copy was wasted once but needed another time (a loop whose first step changes
    /// nothing) gets no advice to drop it. `None` once too many to remember.
    needed: Mutex<Option<HashSet<(Copy, Loc, Who)>>>,
    /// Some needed copies were not remembered.
    forgot_needs: std::sync::atomic::AtomicBool,
    /// The time every copy of the run took (the measure of what is small).
    transfer_time: Mutex<Duration>,
}

impl Advisor {
    /// Notes waste at construct `loc` on mapping `m`: `times` copies (or allocations) of
    /// `bytes` in all, which took `time`.
    pub fn note(&self, waste: Waste, loc: Loc, m: Mapped, times: u64, bytes: usize, time: Duration) {
        let fortran = report::is_fortran(loc, m.name);
        let mut t = self.tallies.lock();
        let e = t.entry((waste, loc, Who::of(waste, m))).or_default();
        e.fortran |= fortran;
        e.name = m.name;
        e.times += times;
        e.bytes += bytes as u64;
        e.time += time;
    }

    /// A mapping made at `loc` (`m`) ended whose kernels read some of it, and no kernel read
    /// the part `part` (host offsets; `None`: none worth saying). Advice is given only when
    /// every such mapping at `loc` left the same part unread (the part they all share).
    pub fn note_part(&self, waste: Waste, loc: Loc, m: Mapped, part: Option<(usize, usize)>) {
        let fortran = report::is_fortran(loc, m.name);
        let mut t = self.tallies.lock();
        let first = !t.contains_key(&(waste, loc, Who::of(waste, m)));
        let e = t.entry((waste, loc, Who::of(waste, m))).or_default();
        let part = part.map(|(s, end)| (s, end, m.size));
        e.part = match (first, e.part, part) {
            (true, _, p) => p,
            (false, Some((a, b, n)), Some((c, d, k))) if n == k && a.max(c) < b.min(d) => Some((a.max(c), b.min(d), n)),
            _ => None,
        };
        e.fortran |= fortran;
        e.name = m.name;
        e.times += 1;
        e.bytes = e.part.map_or(0, |(s, end, _)| (end - s) as u64 * e.times);
    }

    /// A copy in direction `dir` at `loc` of mapping `m` was needed.
    pub fn needed(&self, dir: Copy, loc: Loc, m: Mapped) {
        let mut needed = self.needed.lock();
        let set = needed.get_or_insert_with(HashSet::new);
        if set.len() >= MAX_NEEDED {
            *needed = None;
            self.forgot_needs.store(true, std::sync::atomic::Ordering::Relaxed);
        } else {
            set.insert((dir, loc, Who::needing(Who::of(Waste::ResentToDevice, m))));
        }
    }

    /// Whether advice `waste` at `loc` on `who` could break the program: the same copy was
    /// needed another time.
    fn unsafe_to_follow(&self, waste: Waste, loc: Loc, who: &Who) -> bool {
        let dir = match waste {
            Waste::UnchangedFromDevice(_) => Copy::Back,
            Waste::UnreadToDevice(_) => Copy::There,
            Waste::ResentToDevice => Copy::Changed,
            _ => return false,
        };
        if self.forgot_needs.load(std::sync::atomic::Ordering::Relaxed) {
            return true;
        }
        self.needed.lock().as_ref().is_some_and(|set| set.contains(&(dir, loc, Who::needing(who.clone()))))
    }

    /// A copy between host and device took `time`.
    pub fn transferred(&self, time: Duration) {
        *self.transfer_time.lock() += time;
    }

    /// The summary at exit, largest saving first, with the total; advice under a threshold
    /// (under 1 MiB and under 1% of the run's transfer time) in one line. Nothing when
    /// nothing was wasted.
    pub fn summary(&self) -> String {
        let t = self.tallies.lock();
        let all = *self.transfer_time.lock();
        let mut rows: Vec<_> = t
            .iter()
            .filter(|((w, _, _), tally)| *w != Waste::RepeatedAlloc || tally.times >= 2)
            .filter(|((w, _, _), tally)| !matches!(w, Waste::PartlyUnreadToDevice(_)) || tally.part.is_some())
            .filter(|((w, loc, who), _)| !self.unsafe_to_follow(*w, *loc, who))
            .collect();
        if rows.is_empty() {
            return String::new();
        }
        // Largest saving first; equal savings in a fixed order (kind, place, variable), never by
        // measured time, so two runs of a program print the same advice in the same order.
        rows.sort_by(|a, b| b.1.bytes.cmp(&a.1.bytes).then(a.0.cmp(b.0)));
        let total: u64 = rows.iter().filter(|r| r.0 .0.moves_data()).map(|r| r.1.bytes).sum();
        let small = |tally: &Tally| tally.bytes < SMALL_BYTES && tally.time * 100 <= all * SMALL_SHARE;
        let (listed, summed): (Vec<_>, Vec<_>) = rows.iter().partition(|r| !small(r.1));
        let mut out = if rows.iter().any(|r| r.0 .0.moves_data()) {
            format!(
                "omptarget advice: data movement that could be avoided ({} in {} place{}):\n",
                report::bytes(total as usize),
                rows.len(),
                plural(rows.len() as u64)
            )
        } else {
            format!(
                "omptarget advice: device allocations that could be avoided ({} place{}):\n",
                rows.len(),
                plural(rows.len() as u64)
            )
        };
        for ((waste, loc, who), tally) in listed.iter().take(MAX_LISTED) {
            let (says, fix) = match tally.part {
                Some(part) => waste.says_part(part, tally.name, tally.fortran),
                None => (waste.says().to_string(), waste.fix(tally.fortran)),
            };
            out.push_str(&format!(
                "omptarget advice:   {} at {}: {says} ({} time{}, {}, {:.3} ms); {fix}\n",
                mapping(who, tally.name),
                place(*loc, tally.name),
                tally.times,
                plural(tally.times),
                report::bytes(tally.bytes as usize),
                tally.time.as_secs_f64() * 1e3,
            ));
        }
        if listed.len() > MAX_LISTED {
            out.push_str(&format!("omptarget advice:   … and {} more\n", listed.len() - MAX_LISTED));
        }
        if !summed.is_empty() {
            // Bytes moved and bytes allocated are different savings: each said as what it is.
            let (moving, allocating): (Vec<_>, Vec<_>) = summed.iter().partition(|r| r.0 .0.moves_data());
            let total = |rows: &[&(&(Waste, Loc, Who), &Tally)]| {
                report::bytes(rows.iter().map(|r| r.1.bytes).sum::<u64>() as usize)
            };
            let (moved, allocated) = (total(&moving), total(&allocating));
            let what = match (moving.is_empty(), allocating.is_empty()) {
                (_, true) => format!("{moved} in all"),
                (true, false) => format!("{allocated} allocated in all"),
                (false, false) => format!("{moved} moved and {allocated} allocated in all"),
            };
            out.push_str(&format!(
                "omptarget advice:   and {} smaller place{} ({what}; each under 1 MiB and under 1% of the run's \
                 transfer time)\n",
                summed.len(),
                plural(summed.len() as u64),
            ));
        }
        out
    }
}

/// The lower bound and the number of elements of a one-subscript section written with
/// numbers: `a[16:1024]` → (16, 1024), `a(1:100)` → (1, 100). `None` for any other.
fn literal_section(spelling: &str, fortran: bool) -> Option<(i64, u64)> {
    let (open, close) = if fortran { ('(', ')') } else { ('[', ']') };
    let inner = spelling.split_once(open)?.1.strip_suffix(close)?;
    let (lo, hi) = inner.split_once(':')?;
    let lo: i64 = if lo.trim().is_empty() && !fortran { 0 } else { lo.trim().parse().ok()? };
    let hi: i64 = hi.trim().parse().ok()?;
    let n = if fortran { hi - lo + 1 } else { hi };
    u64::try_from(n).ok().map(|n| (lo, n))
}

fn plural(n: u64) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
}

/// The variable's spelling, or the unnamed mapping's size and address.
fn mapping(who: &Who, name: MapName) -> String {
    match (who.var, who.range) {
        (Some(v), _) => v.to_string(),
        (None, Some((begin, size))) => format!("an unnamed mapping of {size} bytes at {begin:#x}"),
        (None, None) => report::var_or(name, 0),
    }
}

/// The construct's place; where the construct has none, the mapping's own (its map name
/// carries the clause's `file:line:col`).
fn place(loc: Loc, name: MapName) -> String {
    if name.is_none() {
        return report::place(loc);
    }
    let at = report::place_for(loc, name, None);
    if at != "an unknown place" {
        return at;
    }
    let l = info::map_name(name).map(omp_format::SourceLocation::from_map_name);
    match l {
        Some(l) if l.is_known() && l.file != "unknown" => format!("{}:{}:{}", l.file_name(), l.line, l.column),
        _ => at,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unnamed(begin: usize, size: usize) -> Mapped {
        Mapped { name: MapName::NONE, begin, size }
    }

    #[test]
    fn unnamed_mappings_are_never_merged() {
        let a = Advisor::default();
        for begin in [0x1000, 0x9000, 0x20000] {
            a.note(Waste::RepeatedAlloc, Loc::NONE, unnamed(begin, 4 << 20), 1, 4 << 20, Duration::ZERO);
        }
        assert_eq!(a.summary(), "", "three arrays allocated once each are not allocated again and again");
        a.note(Waste::RepeatedAlloc, Loc::NONE, unnamed(0x1000, 4 << 20), 1, 4 << 20, Duration::ZERO);
        let s = a.summary();
        assert!(s.starts_with("omptarget advice: device allocations that could be avoided (1 place):\n"), "{s}");
        assert!(s.contains("an unnamed mapping of 4194304 bytes at 0x1000 at an unknown place: allocated"), "{s}");
        assert!(s.contains("(2 times, 8192.0 KiB, 0.000 ms)"), "{s}");
        let a = Advisor::default();
        a.note(Waste::ResentToDevice, Loc::NONE, unnamed(0x1000, 4 << 20), 1, 4 << 20, Duration::ZERO);
        a.note(Waste::ResentToDevice, Loc::NONE, unnamed(0x9000, 4 << 20), 1, 4 << 20, Duration::ZERO);
        let s = a.summary();
        assert!(s.contains("(8192.0 KiB in 2 places)"), "{s}");
        assert!(s.contains("an unnamed mapping of 4194304 bytes at 0x1000"), "{s}");
        assert!(s.contains("an unnamed mapping of 4194304 bytes at 0x9000"), "{s}");
    }

    #[test]
    fn small_advice_is_one_line_and_the_largest_comes_first() {
        let a = Advisor::default();
        a.transferred(Duration::from_millis(100));
        let big = unnamed(0x1000, 8 << 20);
        a.note(Waste::UnchangedFromDevice(Clause::Map("tofrom")), Loc::NONE, big, 2, 16 << 20, Duration::ZERO);
        a.note(Waste::ResentToDevice, Loc::NONE, big, 1, 8 << 20, Duration::ZERO);
        for begin in [0x100, 0x200, 0x300] {
            a.note(Waste::RedundantToDevice, Loc::NONE, unnamed(begin, 8), 1, 8, Duration::from_micros(1));
        }
        // Small in bytes, but 5% of the run's transfer time: listed.
        a.note(Waste::ResentToDevice, Loc::NONE, unnamed(0x400, 80), 1, 80, Duration::from_millis(5));
        let s = a.summary();
        let lines: Vec<&str> = s.lines().collect();
        assert_eq!(lines[0], "omptarget advice: data movement that could be avoided (24.0 MiB in 6 places):", "{s}");
        assert!(lines[1].contains("16.0 MiB") && lines[1].ends_with("map it `to` instead of `tofrom`"), "{s}");
        assert!(lines[2].contains("8192.0 KiB"), "{s}");
        assert!(lines[3].contains("80 bytes") && lines[3].contains("(1 time, "), "{s}");
        assert_eq!(
            lines[4],
            "omptarget advice:   and 3 smaller places (24 bytes in all; each under 1 MiB and under 1% of the run's \
             transfer time)"
        );
        assert_eq!(lines.len(), 5, "{s}");
    }

    #[test]
    fn small_allocations_are_summed_as_bytes_allocated_not_moved() {
        let a = Advisor::default();
        a.transferred(Duration::from_millis(100));
        for begin in [0x1000, 0x9000] {
            for _ in 0..3 {
                a.note(Waste::RepeatedAlloc, Loc::NONE, unnamed(begin, 4096), 1, 4096, Duration::ZERO);
            }
        }
        let s = a.summary();
        assert_eq!(
            s.lines().nth(1),
            Some(
                "omptarget advice:   and 2 smaller places (24.0 KiB allocated in all; each under 1 MiB and under 1% \
                 of the run's transfer time)"
            ),
            "{s}"
        );
        a.note(Waste::ResentToDevice, Loc::NONE, unnamed(0x20000, 80), 1, 80, Duration::ZERO);
        let s = a.summary();
        assert!(s.contains("(80 bytes moved and 24.0 KiB allocated in all; "), "{s}");
    }

    #[test]
    fn a_copy_needed_once_is_never_advised_away() {
        let a = Advisor::default();
        let (e, f) = (unnamed(0x1000, 4 << 20), unnamed(0x9000, 4 << 20));
        let (here, there) = (Loc::from_static(c";t.c;main;7;1;;"), Loc::from_static(c";t.c;main;9;1;;"));
        let back = Waste::UnchangedFromDevice(Clause::Map("tofrom"));
        a.note(back, here, e, 1, 4 << 20, Duration::ZERO);
        a.note(back, there, f, 1, 4 << 20, Duration::ZERO);
        // A copy back at `here` was needed another time, of another section (an unnamed
        // mapping: one clause mapping a new section each time): dropping it would lose
        // results. At `there` a copy to the device was needed: no matter.
        a.needed(Copy::Back, here, f);
        a.needed(Copy::There, there, f);
        let s = a.summary();
        assert!(s.contains("(4096.0 KiB in 1 place)") && s.contains("at 0x9000 at t.c:9:1"), "{s}");
    }

    #[test]
    fn the_part_no_kernel_read_is_said_only_when_every_mapping_left_it_unread() {
        let leak = |s: &str| {
            let c = Box::leak(std::ffi::CString::new(s).unwrap().into_boxed_c_str());
            // SAFETY: a leaked string lives, unchanged, to the end of the process.
            unsafe { MapName::from_raw(c.as_ptr() as usize) }
        };
        let name = leak(";a[0:1048576];t.c;9;1;;");
        let m = Mapped { name, begin: 0x1000, size: 8 << 20 };
        let at = Loc::from_static(c";t.c;main;9;1;;");
        let part = Waste::PartlyUnreadToDevice(Clause::Map("tofrom"));
        let a = Advisor::default();
        a.note_part(part, at, m, Some((4 << 20, 8 << 20)));
        a.note_part(part, at, m, Some((6 << 20, 8 << 20)));
        let s = a.summary();
        assert!(
            s.contains(
                "a[0:1048576] at t.c:9:1: copied to the device, but no kernel read its last 2048.0 KiB (bytes \
                 6291456..8388608 of 8388608, elements 786432..1048576) (2 times, 4096.0 KiB, 0.000 ms); if no kernel \
                 needs that part, map only `map(tofrom: a[0:786432])`"
            ),
            "{s}"
        );
        a.note_part(part, at, m, None);
        assert_eq!(a.summary(), "", "one mapping read it all: no advice");
        let f = Advisor::default();
        let fname = leak(";t.f90;b(1:1000000);9;1;;");
        f.note_part(part, at, Mapped { name: fname, begin: 0x1000, size: 8_000_000 }, Some((0, 4_000_000)));
        let s = f.summary();
        assert!(s.contains("first 3906.2 KiB (bytes 0..4000000 of 8000000, elements 1 to 500000)"), "{s}");
        assert!(s.contains("map only `map(tofrom: b(500001:1000000))`"), "{s}");
    }

    #[test]
    fn fixes_name_the_clause_the_program_wrote() {
        let from = |c| Waste::UnchangedFromDevice(c).fix(false);
        let target = Some(TargetKind::Target);
        assert_eq!(from(Clause::of(target, Some(TO | FROM))), "map it `to` instead of `tofrom`");
        assert_eq!(from(Clause::of(target, Some(FROM))), "map it `alloc` instead of `from`");
        assert_eq!(from(Clause::of(Some(TargetKind::Update), Some(FROM))), "drop the `target update from`");
        let exit = from(Clause::of(Some(TargetKind::ExitData), Some(FROM)));
        assert!(exit.contains("`release` instead of `from`"), "{exit}");
        let fortran = Waste::RepeatedAlloc.fix(true);
        assert!(fortran.contains("`!$omp target enter data map(alloc: …)`"), "{fortran}");
        let to = |c| Waste::UnreadToDevice(c).fix(false);
        assert_eq!(to(Clause::of(Some(TargetKind::EnterData), Some(TO))), "map it `alloc` instead of `to`");
        assert_eq!(to(Clause::of(Some(TargetKind::Update), None)), "drop the `target update to`");
        assert_eq!(to(Clause::of(target, Some(TO | IMPLICIT))), "map it explicitly with `map(alloc: …)`");
        assert_eq!(to(Clause::of(None, None)), "map it `alloc` instead of `to`/`tofrom`");
    }
}
