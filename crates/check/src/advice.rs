//! The data-movement advisor: transfers and allocations that could be avoided, summed per
//! construct and variable, and printed at exit.

use super::report;
use omp_runtime::{Loc, MapName};
use omp_sync::Mutex;
use std::collections::HashMap;
use std::time::Duration;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(super) enum Waste {
    /// Host→device copy of bytes the device already held.
    RedundantToDevice,
    /// Host→device copy, into a new mapping, of the same bytes as a mapping before it.
    ResentToDevice,
    /// Device→host copy of bytes no kernel changed.
    UnchangedFromDevice,
    /// Host→device copy of bytes no kernel read before they were dropped or overwritten.
    UnreadToDevice,
    /// Device memory allocated again and again for the same variable at the same place.
    RepeatedAlloc,
}

impl Waste {
    fn says(self) -> &'static str {
        match self {
            Waste::RedundantToDevice => "copied to the device although the device already held the same bytes",
            Waste::ResentToDevice => "copied to the device again with the same contents after its mapping ended",
            Waste::UnchangedFromDevice => "copied back from the device although no kernel changed it",
            Waste::UnreadToDevice => "copied to the device but never read there by a kernel",
            Waste::RepeatedAlloc => "allocated and freed on the device again and again",
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
            Waste::UnchangedFromDevice => "map it `to` instead of `tofrom`, or drop the `target update from`".into(),
            Waste::UnreadToDevice => "map it `alloc` (or `from`) instead of `to`/`tofrom`".into(),
            Waste::RepeatedAlloc => format!(
                "map it once around the loop ({} … {})",
                report::directive(fortran, "target enter data map(alloc: …)"),
                report::directive(fortran, "target exit data map(delete: …)")
            ),
        }
    }
}

#[derive(Default)]
struct Tally {
    times: u64,
    bytes: u64,
    time: Duration,
    /// The program is Fortran (directives are spelled `!$omp`).
    fortran: bool,
}

/// What was wasted where: (waste, construct, variable) → totals.
#[derive(Default)]
pub(super) struct Advisor {
    tallies: Mutex<HashMap<(Waste, Loc, String), Tally>>,
}

impl Advisor {
    /// Notes waste at construct `loc` on the mapping named `name` (a `map_names` entry or 0).
    pub fn note(&self, waste: Waste, loc: Loc, name: MapName, bytes: usize, time: Duration) {
        let var = report::var(name).unwrap_or("an unnamed mapping");
        let fortran = report::is_fortran(loc, name);
        let mut t = self.tallies.lock();
        let e = t.entry((waste, loc, var.to_string())).or_default();
        e.fortran |= fortran;
        e.times += 1;
        e.bytes += bytes as u64;
        e.time += time;
    }

    /// The summary at exit, largest waste first; nothing when nothing was wasted.
    pub fn summary(&self) -> String {
        let t = self.tallies.lock();
        let mut rows: Vec<_> =
            t.iter().filter(|((w, _, _), tally)| *w != Waste::RepeatedAlloc || tally.times >= 2).collect();
        if rows.is_empty() {
            return String::new();
        }
        rows.sort_by(|a, b| b.1.bytes.cmp(&a.1.bytes).then(a.0.cmp(b.0)));
        let total: u64 = rows.iter().filter(|r| r.0 .0 != Waste::RepeatedAlloc).map(|r| r.1.bytes).sum();
        let mut out = format!(
            "omptarget advice: data movement that could be avoided ({} in {} place{}):\n",
            report::bytes(total as usize),
            rows.len(),
            if rows.len() == 1 { "" } else { "s" }
        );
        for ((waste, loc, var), tally) in rows.iter().take(20) {
            let loc = *loc;
            out.push_str(&format!(
                "omptarget advice:   {var} at {}: {} ({} time{}, {}, {:.3} ms); {}\n",
                report::place(loc),
                waste.says(),
                tally.times,
                if tally.times == 1 { "" } else { "s" },
                report::bytes(tally.bytes as usize),
                tally.time.as_secs_f64() * 1e3,
                waste.fix(tally.fortran)
            ));
        }
        if rows.len() > 20 {
            out.push_str(&format!("omptarget advice:   … and {} more\n", rows.len() - 20));
        }
        out
    }
}
