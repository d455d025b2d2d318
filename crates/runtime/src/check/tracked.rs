//! A kernel run with the pages that matter watched, and what its accesses reveal.

use super::*;
use omp_plugin::{KernelId, LaunchConfig, TRACK_PAGE};

/// Most device pages watched during one kernel (16 GiB).
const MAX_WATCHED_PAGES: usize = 1 << 22;

/// Why a page is watched during a kernel.
#[derive(Clone, Copy, Default)]
struct Why {
    changed: bool,
    uninit: bool,
    unread: bool,
}

impl Checker {
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
        if !dev.tracks_accesses() {
            // SAFETY: the caller's promise.
            return unsafe { dev.launch_untracked(kernel, args, config) };
        }
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
        match unsafe { dev.launch_tracked(kernel, args, config, &watch) } {
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
                    if let Some(f) = dev.last_fault() {
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
}
