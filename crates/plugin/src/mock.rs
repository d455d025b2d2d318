//! A device with its own (simulated) address space and no code: lets the runtime's mapping
//! semantics be unit-tested without loading any image. Kernels are Rust closures; every
//! access they make goes through [`MockDevice::read`] and [`MockDevice::write`], which are
//! bounds-checked, so the mock's `unsafe` methods are unsafe only by the trait's contract.
//! With [`MockDevice::track_accesses`] it has the [`AccessTracking`] capability: those
//! reads and writes are what a tracked launch reports.

use crate::{
    host_memory, AccessTracking, AllocKind, Device, Fault, GlobalSymbol, ImageId, KernelId, LaunchConfig, PageAccess,
    PluginError, Result, TRACK_PAGE,
};
use omp_sync::Mutex;
use std::collections::BTreeMap;
use std::ffi::CStr;

/// A kernel body: receives the argument vector (device addresses) and the device.
pub type MockKernel = Box<dyn Fn(&MockDevice, &[usize]) + Send + Sync>;

/// Device memory lives in `Vec<u8>` blocks at synthetic addresses far from the host's.
#[derive(Default)]
pub struct MockDevice {
    memory: Mutex<MockMemory>,
    kernels: Mutex<Vec<(String, MockKernel)>>,
    globals: Mutex<Vec<(String, usize, usize)>>,
    /// Host-to-device copies so far (tests count them).
    submits: std::sync::atomic::AtomicUsize,
    /// A pause inside every copy, to let tests overlap threads.
    copy_delay: Mutex<std::time::Duration>,
    /// Set once the device is "lost": every later operation fails with that reason.
    lost: Mutex<Option<String>>,
    /// Copies wait here until this many are in flight at once (or a deadline passes).
    rendezvous: Mutex<Rendezvous>,
    /// Whether the device offers [`AccessTracking`].
    tracking: std::sync::atomic::AtomicBool,
    /// During a tracked launch: the watched pages and what the kernel did to each so far.
    watched: Mutex<Option<BTreeMap<usize, PageAccess>>>,
    /// What stopped the last kernel (set by [`MockDevice::fault`]).
    fault: Mutex<Option<Fault>>,
}

#[derive(Default)]
struct Rendezvous {
    expected: usize,
    in_flight: usize,
    met: bool,
}

#[derive(Default)]
struct MockMemory {
    blocks: BTreeMap<usize, Vec<u8>>,
    next: usize,
    allocs: usize,
    frees: usize,
}

const BASE: usize = 0x7000_0000_0000;

impl MockDevice {
    pub fn new() -> Self {
        Self::default()
    }

    /// Registers a kernel that `kernel(name)` will find.
    pub fn add_kernel(&self, name: &str, body: MockKernel) {
        self.kernels.lock().push((name.to_string(), body));
    }

    /// Adds a global of `size` bytes and returns its device address.
    pub fn add_global(&self, name: &str, size: usize) -> usize {
        let addr = self.alloc(size.max(1), AllocKind::Device).unwrap();
        self.globals.lock().push((name.to_string(), addr, size));
        addr
    }

    /// Reads device bytes (kernels use this; so do assertions).
    pub fn read(&self, addr: usize, size: usize) -> Vec<u8> {
        self.touched(addr, size, false);
        let mem = self.memory.lock();
        let (start, block) = mem.block(addr, size).expect("mock read out of bounds");
        block[addr - start..addr - start + size].to_vec()
    }

    /// Writes device bytes (kernels use this).
    pub fn write(&self, addr: usize, bytes: &[u8]) {
        self.touched(addr, bytes.len(), true);
        let mut mem = self.memory.lock();
        let (start, block) = mem.block_mut(addr, bytes.len()).expect("mock write out of bounds");
        block[addr - start..addr - start + bytes.len()].copy_from_slice(bytes);
    }

    /// Gives the device the [`AccessTracking`] capability.
    pub fn track_accesses(&self) {
        self.tracking.store(true, std::sync::atomic::Ordering::SeqCst);
    }

    /// Stops the device as a fault at `fault` would stop a kernel: the device is lost, and
    /// [`AccessTracking::last_fault`] tells the access.
    pub fn fault(&self, fault: Fault) {
        *self.fault.lock() = Some(fault);
        self.lose(&format!("a kernel faulted at {:#x}", fault.addr));
    }

    /// Records an access of a tracked launch to the watched pages of `[addr, addr+size)`.
    fn touched(&self, addr: usize, size: usize, write: bool) {
        let mut watched = self.watched.lock();
        let Some(pages) = watched.as_mut() else { return };
        let first = addr & !(TRACK_PAGE - 1);
        let end = addr + size.max(1);
        for page in (first..end).step_by(TRACK_PAGE) {
            if let Some(a) = pages.get_mut(&page) {
                if write {
                    a.written = true;
                } else if !a.written {
                    a.read_first = true;
                }
            }
        }
    }

    /// Host-to-device copies performed so far.
    pub fn submits(&self) -> usize {
        self.submits.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Makes every copy take at least `d` (outside any lock of the device).
    pub fn set_copy_delay(&self, d: std::time::Duration) {
        *self.copy_delay.lock() = d;
    }

    /// Loses the device: every later operation fails with `DeviceLost`.
    pub fn lose(&self, reason: &str) {
        *self.lost.lock() = Some(reason.to_string());
    }

    fn check_alive(&self) -> Result<()> {
        match &*self.lost.lock() {
            Some(why) => Err(PluginError::lost(why.clone())),
            None => Ok(()),
        }
    }

    /// Makes copies wait (up to `deadline`) until `n` of them are in flight together;
    /// [`MockDevice::rendezvous_met`] then tells whether they were.
    pub fn expect_overlap(&self, n: usize) {
        *self.rendezvous.lock() = Rendezvous { expected: n, in_flight: 0, met: false };
    }

    /// Whether the copies expected by [`MockDevice::expect_overlap`] were in flight together.
    pub fn rendezvous_met(&self) -> bool {
        self.rendezvous.lock().met
    }

    fn meet(&self) {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        let mut r = self.rendezvous.lock();
        if r.expected == 0 {
            return;
        }
        r.in_flight += 1;
        if r.in_flight >= r.expected {
            r.met = true;
        }
        while !r.met && std::time::Instant::now() < deadline {
            drop(r);
            std::thread::sleep(std::time::Duration::from_millis(1));
            r = self.rendezvous.lock();
        }
        r.in_flight -= 1;
    }

    fn pause(&self) {
        self.meet();
        let d = *self.copy_delay.lock();
        if !d.is_zero() {
            std::thread::sleep(d);
        }
    }

    /// Number of live allocations.
    pub fn live_allocations(&self) -> usize {
        let m = self.memory.lock();
        m.allocs - m.frees
    }
}

impl MockMemory {
    fn block(&self, addr: usize, size: usize) -> Option<(usize, &Vec<u8>)> {
        let (&start, block) = self.blocks.range(..=addr).next_back()?;
        (addr + size <= start + block.len()).then_some((start, block))
    }
    fn block_mut(&mut self, addr: usize, size: usize) -> Option<(usize, &mut Vec<u8>)> {
        let (&start, block) = self.blocks.range_mut(..=addr).next_back()?;
        (addr + size <= start + block.len()).then_some((start, block))
    }
}

fn oob(what: &str, addr: usize, size: usize) -> PluginError {
    PluginError::failed(format!("mock device: {what} of {size} bytes at {addr:#x} is outside any allocation"))
}

impl Device for MockDevice {
    fn load_image(&self, _image: &[u8]) -> Result<ImageId> {
        Ok(ImageId(1))
    }
    fn kernel(&self, _image: ImageId, name: &CStr) -> Result<KernelId> {
        let name = name.to_string_lossy();
        let ks = self.kernels.lock();
        ks.iter()
            .position(|(n, _)| *n == name)
            .map(KernelId::new)
            .ok_or_else(|| PluginError::failed(format!("mock device: no kernel {name}")))
    }
    fn global(&self, _image: ImageId, name: &CStr) -> Result<GlobalSymbol> {
        let name = name.to_string_lossy();
        let gs = self.globals.lock();
        gs.iter()
            .find(|(n, _, _)| *n == name)
            .map(|&(_, addr, size)| GlobalSymbol { addr, size })
            .ok_or_else(|| PluginError::failed(format!("mock device: no global {name}")))
    }
    fn alloc(&self, size: usize, _kind: AllocKind) -> Result<usize> {
        self.check_alive()?;
        let mut mem = self.memory.lock();
        let addr = BASE + mem.next;
        // Leave a gap so out-of-bounds accesses hit no block.
        mem.next += size.next_multiple_of(64) + 64;
        mem.blocks.insert(addr, vec![0; size]);
        mem.allocs += 1;
        Ok(addr)
    }
    fn free(&self, ptr: usize, _kind: AllocKind) -> Result<()> {
        let mut mem = self.memory.lock();
        mem.blocks.remove(&ptr).ok_or_else(|| PluginError::failed(format!("mock device: free of unknown {ptr:#x}")))?;
        mem.frees += 1;
        Ok(())
    }
    unsafe fn submit(&self, tgt: usize, host: usize, size: usize) -> Result<()> {
        self.check_alive()?;
        self.pause();
        self.submits.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let mut mem = self.memory.lock();
        let (start, block) = mem.block_mut(tgt, size).ok_or_else(|| oob("submit", tgt, size))?;
        let dst = &mut block[tgt - start..tgt - start + size];
        // SAFETY: `dst` is a block of ours checked to hold `size` bytes; the host range is
        // readable by the caller's promise.
        unsafe { host_memory::copy(dst.as_mut_ptr() as usize, host, size) };
        Ok(())
    }
    unsafe fn retrieve(&self, host: usize, tgt: usize, size: usize) -> Result<()> {
        self.check_alive()?;
        self.pause();
        let mem = self.memory.lock();
        let (start, block) = mem.block(tgt, size).ok_or_else(|| oob("retrieve", tgt, size))?;
        let src = &block[tgt - start..tgt - start + size];
        // SAFETY: `src` is a block of ours checked to hold `size` bytes; the host range is
        // writable by the caller's promise.
        unsafe { host_memory::copy(host, src.as_ptr() as usize, size) };
        Ok(())
    }
    unsafe fn copy_within(&self, dst: usize, src: usize, size: usize) -> Result<()> {
        let bytes = self.read(src, size);
        self.write(dst, &bytes);
        Ok(())
    }
    unsafe fn launch(&self, kernel: KernelId, args: &[usize], _config: &LaunchConfig) -> Result<()> {
        self.check_alive()?;
        let ks = self.kernels.lock();
        let (_, body) = ks.get(kernel.raw()).ok_or_else(|| PluginError::failed("mock device: bad kernel"))?;
        body(self, args);
        Ok(())
    }
    fn info(&self) -> Vec<(String, String)> {
        vec![("Device Type".into(), "mock".into())]
    }
    fn is_accessible(&self, _ptr: usize, _size: usize) -> bool {
        false
    }
    fn access_tracking(&self) -> Option<&dyn AccessTracking> {
        self.tracking.load(std::sync::atomic::Ordering::SeqCst).then_some(self as &dyn AccessTracking)
    }
}

impl AccessTracking for MockDevice {
    unsafe fn launch_tracked(
        &self,
        kernel: KernelId,
        args: &[usize],
        config: &LaunchConfig,
        watch: &[(usize, usize)],
    ) -> Result<Vec<PageAccess>> {
        let mut pages = BTreeMap::new();
        for &(addr, len) in watch {
            let first = addr & !(TRACK_PAGE - 1);
            for page in (first..addr + len.max(1)).step_by(TRACK_PAGE) {
                pages.insert(page, PageAccess { page, read_first: false, written: false });
            }
        }
        *self.watched.lock() = Some(pages);
        // SAFETY: the caller's promise; the mock's kernels only reach memory through its
        // bounds-checked `read` and `write`.
        let launched = unsafe { self.launch(kernel, args, config) };
        let pages = self.watched.lock().take().unwrap_or_default();
        launched?;
        Ok(pages.into_values().filter(|a| a.read_first || a.written).collect())
    }
    fn last_fault(&self) -> Option<Fault> {
        *self.fault.lock()
    }
}

/// A mock device shared between a test and the runtime that owns it: the plugin hands out
/// the `Arc` itself (a device through the blanket impl), the test keeps `.0`.
#[derive(Clone, Default)]
pub struct SharedMock(pub std::sync::Arc<MockDevice>);

/// A plugin with one mock device, compatible with images that start with `MOCK`.
pub struct MockPlugin(pub SharedMock);

impl crate::Plugin for MockPlugin {
    fn name(&self) -> &str {
        "mock"
    }
    fn device_count(&self) -> usize {
        1
    }
    fn is_compatible(&self, image: &[u8], _triple: Option<&str>) -> bool {
        image.starts_with(b"MOCK")
    }
    fn open_device(&self, _index: usize) -> Result<Box<dyn Device>> {
        Ok(Box::new(self.0 .0.clone()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Plugin;

    /// A runtime sees the mock through the plugin's `Box<dyn Device>` (over an `Arc`): the
    /// capability and every tracked access must come through both wrappers.
    #[test]
    fn tracked_launches_report_the_pages_a_kernel_touched_through_every_wrapper() {
        let shared = SharedMock::default();
        let mock = shared.0.clone();
        let dev = MockPlugin(shared).open_device(0).unwrap();
        assert!(dev.access_tracking().is_none(), "tracking is a capability the device must offer");
        mock.track_accesses();
        let a = dev.alloc(3 * TRACK_PAGE, AllocKind::Device).unwrap();
        // Reads page 0 before writing it, writes page 1 before reading it, leaves page 2.
        mock.add_kernel(
            "k",
            Box::new(|d: &MockDevice, args: &[usize]| {
                let p = args[0];
                let v = d.read(p, 8);
                d.write(p, &v);
                d.write(p + TRACK_PAGE, &[1]);
                d.read(p + TRACK_PAGE, 1);
            }),
        );
        let k = dev.kernel(ImageId(1), c"k").unwrap();
        let tracking = dev.access_tracking().expect("offered through Box and Arc");
        let watch = [(a & !(TRACK_PAGE - 1), 4 * TRACK_PAGE)];
        // SAFETY: `k` is this device's kernel and `a` one of its allocations.
        let seen = unsafe { tracking.launch_tracked(k, &[a], &LaunchConfig::default(), &watch) }.unwrap();
        let page = |addr: usize| addr & !(TRACK_PAGE - 1);
        let expect_first = PageAccess { page: page(a), read_first: true, written: true };
        let expect_second = PageAccess { page: page(a + TRACK_PAGE), read_first: false, written: true };
        assert!(seen.contains(&expect_first), "{seen:?}");
        assert!(seen.contains(&expect_second), "{seen:?}");
        assert!(seen.iter().all(|s| s.page < page(a + 2 * TRACK_PAGE) || !s.written), "{seen:?}");
        // An untracked launch records nothing, and a fault is told once the device is lost.
        // SAFETY: as above.
        unsafe { dev.launch(k, &[a], &LaunchConfig::default()) }.unwrap();
        assert_eq!(tracking.last_fault(), None);
        let fault = Fault { addr: a + 3 * TRACK_PAGE, write: true, device_memory: true };
        mock.fault(fault);
        // SAFETY: as above.
        let e = unsafe { tracking.launch_tracked(k, &[a], &LaunchConfig::default(), &watch) }.unwrap_err();
        assert!(e.is_lost(), "{e:?}");
        assert_eq!(tracking.last_fault(), Some(fault));
    }
}
