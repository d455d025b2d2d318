//! Mappings still present at exit, and the advice summary.

use super::*;

impl Checker {
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
                // A Fortran allocatable, pointer or assumed-shape array is mapped as its
                // descriptor with the data as a member: the data's size is what leaked.
                let size = if fortran { data_of_descriptor(&entries, e).map_or(e.size, |d| d.size) } else { e.size };
                report::finding(
                    "leak",
                    format_args!(
                        "{} ({} on device {}) is still mapped at exit; it was mapped by {} at {}; add {}{}",
                        report::var_or(e.name, size),
                        report::bytes(size),
                        e.device,
                        report::construct(kind),
                        at,
                        report::directive(fortran, &format!("target exit data map(release: {sec})")),
                        hint(report::var(e.name).is_some(), &at)
                    ),
                );
            }
        }
        self.raw_leaks();
        let repeats = self.repeats.swap(0, Ordering::Relaxed);
        if repeats > 0 {
            omp_runtime::info::emit(&format!(
                "omptarget check: {repeats} more finding{} like the ones above not printed (each kind is said once per \
                 variable and construct)\n",
                if repeats == 1 { "" } else { "s" }
            ));
        }
        let advice = if self.advising() { self.advisor.summary() } else { String::new() };
        if !advice.is_empty() {
            omp_runtime::info::emit(&advice);
        }
    }
}

/// The data mapping of Fortran descriptor mapping `e`: the mapping, made by the same
/// construct as a member (not one of its own arguments), at the host address the
/// descriptor's first word (its base address) held when it was last copied.
fn data_of_descriptor<'a>(entries: &'a BTreeMap<(i32, usize), Entry>, e: &Entry) -> Option<&'a Entry> {
    let word = e.snapshot.get(..8).filter(|_| e.synced.first().is_some_and(|r| r.0 == 0 && r.1 >= 8))?;
    let base = usize::from_le_bytes(word.try_into().ok()?);
    entries.get(&(e.device, base)).filter(|d| !d.explicit && d.made_by == e.made_by && d.begin != e.begin)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_descriptors_data_is_the_member_at_its_base_address() {
        let data = vec![0u8; 32 << 10];
        let mut descriptor = [0u8; 48];
        descriptor[..8].copy_from_slice(&(data.as_ptr() as usize).to_le_bytes());
        let made = Some((TargetKind::EnterData, Loc::NONE));
        let mut d = Entry::new(0, descriptor.as_ptr() as usize, 48, 0x10000, MapName::NONE, made);
        d.explicit = true;
        let mut entries = BTreeMap::new();
        let member = Entry::new(0, data.as_ptr() as usize, data.len(), 0x20000, MapName::NONE, made);
        entries.insert((0, member.begin), member);
        assert!(data_of_descriptor(&entries, &d).is_none(), "nothing copied: the base address is not known");
        d.synced_now(0, 48);
        assert_eq!(data_of_descriptor(&entries, &d).map(|e| e.size), Some(32 << 10));
        entries.values_mut().for_each(|e| e.explicit = true);
        assert!(data_of_descriptor(&entries, &d).is_none(), "an array of its own is not the descriptor's data");
    }
}
