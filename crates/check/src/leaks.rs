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
