//! A kernel run with the pages that matter watched, and what its accesses reveal: the
//! device decorator the checker installs on every device, and the checker's side of it.

use super::*;
use omp_plugin::{
    AccessTracking, AllocKind, Fault, GlobalSymbol, ImageId, KernelId, LaunchConfig, LaunchShape, PageAccess, Peer,
    Result, TRACK_PAGE,
};
use std::ffi::CStr;

/// Most device pages watched during one kernel (16 GiB).
const MAX_WATCHED_PAGES: usize = 1 << 22;

/// Why a page is watched during a kernel.
#[derive(Clone, Copy, Default)]
struct Why {
    changed: bool,
    uninit: bool,
    unread: bool,
}

/// What the checker asked a device to watch during one kernel.
pub(crate) struct WatchPlan {
    /// Page → (mapping key, its device address, page index, why watched).
    pages: HashMap<usize, ((i32, usize), usize, usize, Why)>,
    /// Pages left unwatched by the bound: what the kernel does there is unknown.
    unwatched: Vec<((i32, usize), usize)>,
    /// The pages of `omp_target_alloc` blocks watched for reads of what nothing wrote.
    raw: raw::RawWatch,
}

impl WatchPlan {
    /// The device ranges to watch.
    fn ranges(&self) -> Vec<(usize, usize)> {
        self.pages.keys().chain(self.raw.pages.keys()).map(|&p| (p, TRACK_PAGE)).collect()
    }
}

/// A device as the checker runs it: every operation is the backend's, except that a launch
/// on a backend that tracks accesses (now) watches the pages the checker asks for, and
/// what the kernel did, or what stopped it, goes back to the checker.
///
/// The queue methods keep the trait's synchronous defaults, so that a launch (tracked,
/// synchronous) never overtakes a copy still queued on the backend.
pub(crate) struct TrackedDevice {
    device: i32,
    backend: Arc<dyn Device>,
    checker: Arc<Checker>,
}

impl TrackedDevice {
    pub(crate) fn new(device: i32, backend: Arc<dyn Device>, checker: Arc<Checker>) -> Self {
        Self { device, backend, checker }
    }
}

impl Device for TrackedDevice {
    fn load_image(&self, image: &[u8]) -> Result<ImageId> {
        self.backend.load_image(image)
    }
    fn unload_image(&self, image: ImageId) -> Result<()> {
        self.backend.unload_image(image)
    }
    fn kernel(&self, image: ImageId, name: &CStr) -> Result<KernelId> {
        self.backend.kernel(image, name)
    }
    fn global(&self, image: ImageId, name: &CStr) -> Result<GlobalSymbol> {
        self.backend.global(image, name)
    }
    fn alloc(&self, size: usize, kind: AllocKind) -> Result<usize> {
        self.backend.alloc(size, kind)
    }
    fn free(&self, ptr: usize, kind: AllocKind) -> Result<()> {
        self.backend.free(ptr, kind)
    }
    unsafe fn submit(&self, tgt: usize, host: usize, size: usize) -> Result<()> {
        // SAFETY: the caller's promise, passed on unchanged.
        unsafe { self.backend.submit(tgt, host, size) }
    }
    unsafe fn retrieve(&self, host: usize, tgt: usize, size: usize) -> Result<()> {
        // SAFETY: the caller's promise, passed on unchanged.
        unsafe { self.backend.retrieve(host, tgt, size) }
    }
    unsafe fn copy_within(&self, dst: usize, src: usize, size: usize) -> Result<()> {
        // SAFETY: the caller's promise, passed on unchanged.
        unsafe { self.backend.copy_within(dst, src, size) }
    }
    unsafe fn launch(&self, kernel: KernelId, args: &[usize], config: &LaunchConfig) -> Result<()> {
        let Some(tracking) = self.backend.access_tracking() else {
            // SAFETY: the caller's promise, passed on unchanged.
            return unsafe { self.backend.launch(kernel, args, config) };
        };
        // The launching thread is in the construct whose `Kernel` event announced this launch.
        let construct = omp_runtime::trace::current().0;
        let plan = self.checker.watch_plan(self.device);
        // SAFETY: the caller's promise, passed on unchanged.
        let launched = unsafe { tracking.launch_tracked(kernel, args, config, &plan.ranges()) };
        if let Some(why) = tracking.watching_less() {
            self.checker.watching_less(self.device, &why);
        }
        match launched {
            Ok(accesses) => {
                if let Some(used) = tracking.gpu_use().filter(|_| self.checker.gpu()) {
                    self.checker.gpu_use(used, construct);
                }
                self.checker.kernel_done(plan, &accesses, construct);
                Ok(())
            }
            Err(err) => {
                if err.is_lost() && self.checker.findings() {
                    if let Some(f) = tracking.last_fault() {
                        self.checker.kernel_stopped(self.device, f, construct);
                    }
                }
                Err(err)
            }
        }
    }
    fn info(&self) -> Vec<(String, String)> {
        self.backend.info()
    }
    fn is_accessible(&self, ptr: usize, size: usize) -> bool {
        self.backend.is_accessible(ptr, size)
    }
    fn access_tracking(&self) -> Option<&dyn AccessTracking> {
        self.backend.access_tracking()
    }
    // What a GPU does itself (fills, peer copies, its indirect-call table, device timing, its
    // own launch shape) is the backend's, checked or not.
    fn bind_indirect_functions(&self, image: ImageId, functions: &[(usize, usize)]) -> Result<()> {
        self.backend.bind_indirect_functions(image, functions)
    }
    unsafe fn fill(&self, tgt: usize, byte: u8, size: usize) -> Result<()> {
        // SAFETY: the caller's promise, passed on unchanged.
        unsafe { self.backend.fill(tgt, byte, size) }
    }
    fn peer(&self) -> Option<Peer> {
        self.backend.peer()
    }
    unsafe fn copy_to_peer(&self, peer: Peer, dst: usize, src: usize, size: usize) -> Option<Result<()>> {
        // SAFETY: the caller's promise, passed on unchanged.
        unsafe { self.backend.copy_to_peer(peer, dst, src, size) }
    }
    fn device_time(&self) -> Option<std::time::Duration> {
        self.backend.device_time()
    }
    fn launch_shape(&self, kernel: KernelId, config: &LaunchConfig) -> Option<LaunchShape> {
        self.backend.launch_shape(kernel, config)
    }
}

impl Checker {
    /// The pages that matter during the next kernel on `device`: changed on the host since
    /// the last copy (stale data), never written (uninitialized), copied and not read yet
    /// (the advisor).
    fn watch_plan(&self, device: i32) -> WatchPlan {
        let mut plan = WatchPlan { pages: HashMap::new(), unwatched: Vec::new(), raw: raw::RawWatch::default() };
        let mut entries = self.entries.lock();
        for (&key, e) in entries.range_mut((device, 0)..=(device, usize::MAX)) {
            if e.size == 0 || e.made_by.is_none() {
                continue;
            }
            let changed = if self.findings() {
                self.host_writes_noted(e);
                e.host_changed_pages()
            } else {
                Vec::new()
            };
            let e = &*e;
            let first_page = e.first_page();
            let mut watch = |i: usize, f: &dyn Fn(&mut Why)| {
                let page = first_page + i * TRACK_PAGE;
                // Bounded: beyond it, pages go unwatched and are taken as written and read
                // after the kernel (missed findings, never false ones).
                if plan.pages.len() < MAX_WATCHED_PAGES || plan.pages.contains_key(&page) {
                    f(&mut plan.pages.entry(page).or_insert((key, e.tgt, i, Why::default())).3);
                } else {
                    plan.unwatched.push((key, i));
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
        drop(entries);
        plan.raw = self.raw_watch(device, &plan.pages, MAX_WATCHED_PAGES.saturating_sub(plan.pages.len()));
        plan
    }

    /// The kernel of `construct` ran to its end and touched the watched pages `accesses`.
    fn kernel_done(&self, mut plan: WatchPlan, accesses: &[PageAccess], construct: u64) {
        self.raw_done(std::mem::take(&mut plan.raw), accesses, construct);
        let mut entries = self.entries.lock();
        let mut found: Vec<(u8, (i32, usize), usize)> = Vec::new();
        for (key, i) in plan.unwatched {
            if let Some(e) = entries.get_mut(&key).filter(|e| i < e.init.len()) {
                e.init[i] = true;
                e.unread[i] = false;
                e.touched[i] = true;
                self.copies_used(e);
            }
        }
        for a in accesses {
            let Some(&(key, tgt, i, why)) = plan.pages.get(&a.page) else { continue };
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
            e.touched[i] = true;
            self.copies_used(e);
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
        if found.is_empty() {
            return;
        }
        let (name, loc) = self.kernel_of(construct);
        for (kind, key, _) in found {
            if let Some(e) = entries.get(&key) {
                self.kernel_finding(kind, e, &name, loc);
            }
        }
    }

    /// Device `device` watches less than the checker asks, for the reason `why`: said once
    /// per device.
    fn watching_less(&self, device: i32, why: &str) {
        if self.watching_less_said.lock().insert(device) {
            report::finding("note", format_args!("device {device} checks less than it could: {why}"));
        }
    }

    /// The kernel of `construct` on `device` stopped on an access it may not make.
    fn kernel_stopped(&self, device: i32, f: Fault, construct: u64) {
        let (name, loc) = self.kernel_of(construct);
        self.fault(device, f, &name, loc, construct);
    }

    /// The name of the kernel `construct` launched, and the place it launched it from.
    pub(crate) fn kernel_of(&self, construct: u64) -> (String, Loc) {
        self.with_ctx(construct, |c| c.map(|c| (c.kernel.clone(), c.kernel_loc))).unwrap_or((String::new(), Loc::NONE))
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

#[cfg(test)]
mod tests {
    use super::*;
    use omp_plugin::mock::MockDevice;

    /// A checker following one mapping of two pages on device 0 (made by an `enter data`,
    /// nothing copied: both pages uninitialised), and the decorator over `mock`.
    fn checking(mock: &Arc<MockDevice>) -> (Arc<Checker>, TrackedDevice, usize) {
        let checker = Arc::new(Checker::new(CheckMode::All).expect("checking is on"));
        let backend: Arc<dyn Device> = mock.clone();
        let tgt = backend.alloc(2 * TRACK_PAGE, AllocKind::Device).expect("mock memory");
        assert_eq!(tgt % TRACK_PAGE, 0, "the mock's first allocation starts a page");
        let e = Entry::new(0, 0x1000, 2 * TRACK_PAGE, tgt, MapName::NONE, Some((TargetKind::EnterData, Loc::NONE)));
        checker.entries.lock().insert((0, 0x1000), e);
        mock.add_kernel(
            "writes_page_0_reads_page_1",
            Box::new(|d: &MockDevice, a: &[usize]| {
                d.write(a[0], &[1; 8]);
                d.read(a[0] + TRACK_PAGE, 8);
            }),
        );
        (checker.clone(), TrackedDevice::new(0, backend, checker), tgt)
    }

    fn launch(dev: &TrackedDevice, tgt: usize) -> Result<()> {
        let k = dev.kernel(ImageId(1), c"writes_page_0_reads_page_1").expect("registered");
        // SAFETY: the mock's kernel reaches memory only through its bounds-checked accessors.
        unsafe { dev.launch(k, &[tgt], &LaunchConfig::default()) }
    }

    #[test]
    fn a_tracked_launch_hands_the_checker_what_the_kernel_did_to_the_watched_pages() {
        let mock = Arc::new(MockDevice::new());
        mock.track_accesses();
        let (checker, dev, tgt) = checking(&mock);
        assert!(dev.access_tracking().is_some(), "the decorator keeps the backend's capability");
        launch(&dev, tgt).expect("the kernel runs");
        let entries = checker.entries.lock();
        let e = &entries[&(0, 0x1000)];
        assert_eq!(e.init, [true, false], "the page the kernel wrote holds data now; the one it read does not");
        drop(entries);
        let found = checker.reported.lock().1.clone();
        assert_eq!(
            found.into_iter().collect::<Vec<_>>(),
            [(finding::UNINIT, 0, 0x1000, Loc::NONE)],
            "reading the page nothing wrote is the finding, once"
        );
    }

    #[test]
    fn on_a_device_that_cannot_track_the_launch_is_the_backends_own() {
        let mock = Arc::new(MockDevice::new());
        let (checker, dev, tgt) = checking(&mock);
        assert!(dev.access_tracking().is_none());
        launch(&dev, tgt).expect("the kernel runs");
        assert_eq!(mock.read(tgt, 1), [1], "the kernel ran");
        assert_eq!(checker.entries.lock()[&(0, 0x1000)].init, [false, false], "nothing is known of its accesses");
        assert!(checker.reported.lock().1.is_empty());
    }
}
