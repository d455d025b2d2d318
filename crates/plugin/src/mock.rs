//! A device with its own (simulated) address space and no code: lets the runtime's mapping
//! semantics be unit-tested without loading any image. Kernels are Rust closures.

use crate::{host_memory, AllocKind, Device, GlobalSymbol, ImageId, KernelId, LaunchConfig, PluginError, Result};
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

    /// Reads device bytes (for assertions).
    pub fn read(&self, addr: usize, size: usize) -> Vec<u8> {
        let mem = self.memory.lock();
        let (start, block) = mem.block(addr, size).expect("mock read out of bounds");
        block[addr - start..addr - start + size].to_vec()
    }

    /// Writes device bytes (kernels use this).
    pub fn write(&self, addr: usize, bytes: &[u8]) {
        let mut mem = self.memory.lock();
        let (start, block) = mem.block_mut(addr, bytes.len()).expect("mock write out of bounds");
        block[addr - start..addr - start + bytes.len()].copy_from_slice(bytes);
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
            .map(KernelId)
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
    fn copy_within(&self, dst: usize, src: usize, size: usize) -> Result<()> {
        let bytes = self.read(src, size);
        self.write(dst, &bytes);
        Ok(())
    }
    fn launch(&self, kernel: KernelId, args: &[usize], _config: &LaunchConfig) -> Result<()> {
        self.check_alive()?;
        let ks = self.kernels.lock();
        let (_, body) = ks.get(kernel.0).ok_or_else(|| PluginError::failed("mock device: bad kernel"))?;
        body(self, args);
        Ok(())
    }
    fn info(&self) -> Vec<(String, String)> {
        vec![("Device Type".into(), "mock".into())]
    }
    fn is_accessible(&self, _ptr: usize, _size: usize) -> bool {
        false
    }
}

/// A mock device shared between a test and the runtime that owns it.
#[derive(Clone, Default)]
pub struct SharedMock(pub std::sync::Arc<MockDevice>);

impl Device for SharedMock {
    fn load_image(&self, image: &[u8]) -> Result<ImageId> {
        self.0.load_image(image)
    }
    fn kernel(&self, image: ImageId, name: &CStr) -> Result<KernelId> {
        self.0.kernel(image, name)
    }
    fn global(&self, image: ImageId, name: &CStr) -> Result<GlobalSymbol> {
        self.0.global(image, name)
    }
    fn alloc(&self, size: usize, kind: AllocKind) -> Result<usize> {
        self.0.alloc(size, kind)
    }
    fn free(&self, ptr: usize, kind: AllocKind) -> Result<()> {
        self.0.free(ptr, kind)
    }
    unsafe fn submit(&self, tgt: usize, host: usize, size: usize) -> Result<()> {
        // SAFETY: forwarded with the caller's promise.
        unsafe { self.0.submit(tgt, host, size) }
    }
    unsafe fn retrieve(&self, host: usize, tgt: usize, size: usize) -> Result<()> {
        // SAFETY: forwarded with the caller's promise.
        unsafe { self.0.retrieve(host, tgt, size) }
    }
    fn copy_within(&self, dst: usize, src: usize, size: usize) -> Result<()> {
        self.0.copy_within(dst, src, size)
    }
    fn launch(&self, kernel: KernelId, args: &[usize], config: &LaunchConfig) -> Result<()> {
        self.0.launch(kernel, args, config)
    }
    fn info(&self) -> Vec<(String, String)> {
        self.0.info()
    }
    fn is_accessible(&self, _ptr: usize, _size: usize) -> bool {
        false
    }
}

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
        Ok(Box::new(self.0.clone()))
    }
}
