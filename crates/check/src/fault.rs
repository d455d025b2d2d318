//! A kernel stopped on an access it may not make: which mapping, and how to fix it.

use super::*;
use omp_plugin::{Fault, TRACK_PAGE};
use omp_runtime::map_type::{FROM, TO};

/// `OMP_MAP_IMPLICIT`.
const IMPLICIT: i64 = 0x200;

impl Checker {
    /// A kernel stopped on an access it may not make.
    /// `kernel` of construct `construct`, launched at `loc` on `device`, stopped at `f`.
    pub(super) fn fault(&self, device: i32, f: Fault, kernel: &str, loc: Loc, construct: u64) {
        let access = if f.write { "wrote" } else { "read" };
        let names: Vec<MapName> =
            self.with_ctx(construct, |c| c.map(|c| c.args.iter().map(|a| a.0).collect())).unwrap_or_default();
        let at = report::place_in(loc, report::file_of(&names), Some(kernel));
        let fix_dir = if f.write { "tofrom" } else { "to" };
        if !f.device_memory {
            let (unmapped, args) =
                self.with_ctx(construct, |c| c.map(|c| (c.unmapped.clone(), c.args.clone()))).unwrap_or_default();
            let culprit = unmapped
                .iter()
                .filter(|(_, a)| *a <= f.addr && f.addr - *a < (1 << 30))
                .min_by_key(|(_, a)| f.addr - *a)
                .or(unmapped.first().filter(|_| unmapped.len() == 1 && f.addr < (1 << 16)));
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
                            device,
                            hint(true, &at)
                        ),
                    );
                }
                // A pointer argument points there, but the program was built without names.
                Some(_) => report::finding(
                    "unmapped access",
                    format_args!(
                        "kernel {kernel} at {at} {access} host memory at 0x{:x}, which is not mapped on device {}: a pointer \
                         the kernel follows points to host data; map that data (`map({fix_dir}: p[0:N])`){}",
                        f.addr,
                        device,
                        hint(false, &at)
                    ),
                ),
                None => report::finding(
                    "unmapped access",
                    format_args!(
                        "kernel {kernel} at {at} {access} memory at 0x{:x}, which is not device memory on device {} and \
                         which no mapping or pointer argument explains ({}); the kernel stopped there{}",
                        f.addr,
                        device,
                        self.nearest_mappings(device, f.addr),
                        hint(true, &at)
                    ),
                ),
            }
            return;
        }
        if self.used_after_end(device, &f, kernel, &at) {
            return;
        }
        let entries = self.entries.lock();
        // The nearest mapping: a guard page after one allocation lies before the next one's.
        let near = entries
            .values()
            .filter(|e| e.device == device && e.size > 0)
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
                // (An array of explicit shape is its own mapping; one reached through a
                // descriptor is the member of the descriptor's.)
                let flang = if report::is_fortran(loc, e.name) && report::multi_dim_section(&sec) && !e.explicit {
                    "; if the kernel uses only the elements named, flang started this section at the wrong element \
                     (a bug of flang 19-22 with allocatable, pointer and assumed-shape arrays): build with ompcc, which \
                     corrects it or says how to write it"
                } else {
                    ""
                };
                let map_type = self.map_type_of(construct, e).unwrap_or(fix_dir);
                report::finding(
                    "out of bounds",
                    format_args!(
                        "kernel {kernel} at {at} {access} {how} {} ({}{made}) on device {}; map every element the \
                         kernel uses (`map({map_type}: {})` with a larger extent) or fix the loop bounds{flang}{}",
                        report::var_or(e.name, e.size),
                        report::bytes(e.size),
                        device,
                        report::widened(&sec, report::is_fortran(loc, e.name)),
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
                    device,
                    hint(true, &at)
                ),
            ),
        }
    }
}

impl Checker {
    /// The map type the program wrote for mapping `e`: the construct's own map argument for
    /// it, else what the mapping's copies say (`to` when the program's data went to the
    /// device, `from` when a construct asked for it back). `None` when nothing says.
    fn map_type_of(&self, construct: u64, e: &Entry) -> Option<&'static str> {
        let var = report::var(e.name).map(report::base_var);
        let written = self.with_ctx(construct, |c| {
            let c = c?;
            let same = |n: MapName| n == e.name || var.is_some() && report::var(n).map(report::base_var) == var;
            c.args.iter().find(|&&(n, ty, _)| same(n) && ty & (TO | FROM) != 0).map(|a| a.1)
        });
        let (to, from) = match written {
            Some(ty) => (ty & TO != 0, ty & FROM != 0),
            None => (e.meaningful, e.from_asked),
        };
        match (to, from) {
            (true, true) => Some("tofrom"),
            (true, false) => Some("to"),
            (false, true) => Some("from"),
            (false, false) => None,
        }
    }

    /// The fault lies in device memory a mapping held before it ended: says which mapping,
    /// and where it ended. False when no ended mapping held the address, or when a live
    /// mapping's guard pages are there (freed memory is reused once out of quarantine, and
    /// the live mapping explains the fault then).
    fn used_after_end(&self, device: i32, f: &Fault, kernel: &str, at: &str) -> bool {
        let beside_live = self.entries.lock().values().any(|e| {
            e.device == device
                && f.addr + TRACK_PAGE >= e.first_page()
                && f.addr < (e.tgt + e.size).next_multiple_of(TRACK_PAGE) + TRACK_PAGE
        });
        if beside_live {
            return false;
        }
        let Some(e) = self
            .ended
            .lock()
            .iter()
            .rev()
            .find(|e| e.device == device && f.addr >= e.tgt && f.addr < e.tgt + e.size)
            .copied()
        else {
            return false;
        };
        report::finding(
            "use after unmap",
            format_args!(
                "kernel {kernel} at {at} {} device memory at 0x{:x} on device {device} that held {} ({}) until its \
                 mapping ended at {}; a device pointer kept from that mapping (`use_device_ptr`, `omp_get_mapped_ptr`, \
                 `is_device_ptr`) is no longer valid: keep the data mapped until the last kernel that uses it{}",
                if f.write { "wrote" } else { "read" },
                f.addr,
                report::var_or(e.name, e.size),
                report::bytes(e.size),
                report::place_for(e.at, e.name, None),
                hint(report::var(e.name).is_some(), at)
            ),
        );
        true
    }

    /// The two mappings of `device` nearest to device address `addr`, in words.
    fn nearest_mappings(&self, device: i32, addr: usize) -> String {
        let entries = self.entries.lock();
        let mut near: Vec<(usize, &Entry)> = entries
            .values()
            .filter(|e| e.device == device && e.size > 0)
            .map(|e| (if addr < e.tgt { e.tgt - addr } else { addr.saturating_sub(e.tgt + e.size - 1) }, e))
            .collect();
        near.sort_unstable_by_key(|n| n.0);
        let said: Vec<String> = near
            .iter()
            .take(2)
            .map(|(_, e)| format!("{} at 0x{:x}..0x{:x}", report::var_or(e.name, e.size), e.tgt, e.tgt + e.size))
            .collect();
        if said.is_empty() {
            "nothing is mapped on that device".into()
        } else {
            format!("nearest mappings: {}", said.join(", "))
        }
    }
}
