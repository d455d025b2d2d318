//! Device memory a device rank reaches itself, so that MPI moves a copy's bytes straight into
//! and out of it: no buffer of the rank's, no second copy into the worker.
//!
//! With a worker, the rank's devices allocate from an arena, the isolated device's shared
//! memory (`omp_plugin_isolate::arena`): one memfd mapped at the same address in the rank and
//! in its `offload-worker`, so kernels there see what MPI wrote here. In process
//! (`--in-process`), device memory is the rank's own: the devices' allocations, made here.
//! Either way the rank keeps the table of the allocations it made ([`Allocations`]): an
//! address range that arrives from the wire is used only when it lies inside one live
//! allocation of the device it names ([`DeviceMemory::range`]); anything else (a
//! declare-target global, which lives in the device's image, an allocation the arena had no
//! room for) goes the old way, through a buffer and the request handling.
//!
//! Whoever owns device memory that MPI can reach answers the same question: "where, in this
//! process, are these bytes of that device?" ([`DeviceRange`]).

use omp_plugin::{AllocKind, Device};
use omp_plugin_isolate::arena::Arena;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

/// Live allocations: which device each range belongs to.
#[derive(Debug, Default)]
pub struct Allocations {
    /// Start -> (end, device).
    live: BTreeMap<usize, (usize, u32)>,
}

impl Allocations {
    /// Records `[addr, addr+size)` as an allocation of `device`.
    pub fn insert(&mut self, device: u32, addr: usize, size: usize) {
        self.live.insert(addr, (addr.saturating_add(size), device));
    }

    /// Forgets the allocation of `device` that starts at `addr`; false when there is none.
    pub fn remove(&mut self, device: u32, addr: usize) -> bool {
        match self.live.get(&addr) {
            Some(&(_, d)) if d == device => self.live.remove(&addr).is_some(),
            _ => false,
        }
    }

    /// The live allocation of `device` that starts at `addr`.
    pub fn starting_at(&self, device: u32, addr: usize) -> Option<DeviceRange> {
        match self.live.get(&addr) {
            Some(&(end, d)) if d == device => Some(DeviceRange { ptr: addr, len: end - addr }),
            _ => None,
        }
    }

    /// Whether `[addr, addr+len)` lies inside one live allocation of `device`.
    pub fn holds(&self, device: u32, addr: usize, len: usize) -> bool {
        let Some(end) = addr.checked_add(len) else { return false };
        self.live.range(..=addr).next_back().is_some_and(|(_, &(stop, d))| d == device && end <= stop)
    }
}

/// A range of device memory mapped in this process: MPI may read or write its `len` bytes
/// at `ptr` while the allocation it lies in lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeviceRange {
    pub ptr: usize,
    pub len: usize,
}

impl DeviceRange {
    /// Whether this range and `other` share a byte.
    pub fn overlaps(&self, other: &DeviceRange) -> bool {
        self.ptr < other.ptr.saturating_add(other.len) && other.ptr < self.ptr.saturating_add(self.len)
    }

    /// The part `[at, at+len)` of this range (the caller keeps it inside).
    pub fn part(&self, at: usize, len: usize) -> DeviceRange {
        debug_assert!(at + len <= self.len);
        DeviceRange { ptr: self.ptr + at, len }
    }
}

/// Large allocations start this many bytes into a page. MPI's single copy on one node (the
/// kernel's, `process_vm_readv`) runs at a third of its speed when its destination lies a few
/// bytes past its source within a page (8 and 16 measured; glibc's `memcpy` has the same
/// trouble up to 256 bytes: 4K aliasing, docs/cluster.md, "Copies"), and the program's
/// buffers mostly start a little way into a page: at 0 (page-aligned), 16 (glibc's `malloc`
/// of large blocks) or another small multiple of 16. Half a page from there is far from all
/// of them, both ways.
pub const LARGE_BLOCK_PAGE_OFFSET: usize = 2048;

/// Allocations of at least this size get [`LARGE_BLOCK_PAGE_OFFSET`] (a page more is asked
/// for them); copies of smaller ones are short.
const LARGE_BLOCK: usize = 128 << 10;

const PAGE: usize = 4096;

/// Where a rank's device memory comes from.
enum Store {
    /// The arena its worker maps (one per rank: boxed).
    Arena(Box<Arena>),
    /// The rank's own devices, served in its process: their memory is the rank's.
    Devices(Arc<Vec<Arc<dyn Device>>>),
}

/// The device memory of a rank, which MPI reaches directly.
pub struct DeviceMemory {
    store: Store,
    devices: u32,
    table: Allocations,
    /// The block each large allocation lies in, by the address given out.
    blocks: HashMap<usize, usize>,
}

impl DeviceMemory {
    /// Device memory for `devices` devices in `arena`, which the worker has mapped (it
    /// acknowledged it).
    pub fn new(arena: Arena, devices: u32) -> DeviceMemory {
        DeviceMemory::with(Store::Arena(Box::new(arena)), devices)
    }

    /// Device memory allocated by `devices`, opened in this process (a rank serving in
    /// process): their allocations are this process's memory.
    pub fn in_process(devices: Arc<Vec<Arc<dyn Device>>>) -> DeviceMemory {
        let count = u32::try_from(devices.len()).unwrap_or(u32::MAX);
        DeviceMemory::with(Store::Devices(devices), count)
    }

    fn with(store: Store, devices: u32) -> DeviceMemory {
        DeviceMemory { store, devices, table: Allocations::default(), blocks: HashMap::new() }
    }

    /// `size` bytes for `device`; `None` for a device this rank does not have, when the arena
    /// is full or the device could not allocate (the caller then asks through the request
    /// handling, which answers as it always did).
    pub fn alloc(&mut self, device: u32, size: usize) -> Option<usize> {
        if device >= self.devices {
            return None;
        }
        let large = size >= LARGE_BLOCK;
        let room = if large { size.checked_add(PAGE)? } else { size };
        let block = match &self.store {
            Store::Arena(arena) => arena.alloc(room)?,
            Store::Devices(devs) => devs[device as usize].alloc(room, AllocKind::Device).ok()?,
        };
        let addr = if large {
            let addr = block + (LARGE_BLOCK_PAGE_OFFSET + PAGE - block % PAGE) % PAGE;
            self.blocks.insert(addr, block);
            addr
        } else {
            block
        };
        self.table.insert(device, addr, size.max(1));
        Some(addr)
    }

    /// Frees an allocation [`DeviceMemory::alloc`] made for `device`; false for any other
    /// address (the worker's own allocations, or none).
    pub fn free(&mut self, device: u32, addr: usize) -> bool {
        if !self.table.remove(device, addr) {
            return false;
        }
        let block = self.blocks.remove(&addr).unwrap_or(addr);
        match &self.store {
            Store::Arena(arena) => arena.free(block),
            Store::Devices(devs) => devs[device as usize].free(block, AllocKind::Device).is_ok(),
        }
    }

    /// Where `[addr, addr+len)` of `device` is in this process, when it lies inside one live
    /// allocation of that device; `None` otherwise (also for an empty range).
    pub fn range(&self, device: u32, addr: u64, len: usize) -> Option<DeviceRange> {
        let addr = usize::try_from(addr).ok()?;
        let inside = match &self.store {
            Store::Arena(arena) => arena.contains(addr, len),
            Store::Devices(_) => true,
        };
        (len > 0 && self.table.holds(device, addr, len) && inside).then_some(DeviceRange { ptr: addr, len })
    }

    /// The live allocation of `device` that starts at `addr` (what freeing it would free).
    pub fn allocation(&self, device: u32, addr: usize) -> Option<DeviceRange> {
        self.table.starting_at(device, addr)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_range_must_lie_inside_one_allocation_of_its_device() {
        let mut t = Allocations::default();
        t.insert(0, 0x1000, 0x100);
        t.insert(1, 0x1100, 0x100);
        assert!(t.holds(0, 0x1000, 0x100));
        assert!(t.holds(0, 0x10ff, 1));
        assert!(!t.holds(0, 0x10ff, 2), "runs into the next allocation");
        assert!(!t.holds(1, 0x1000, 1), "another device's allocation");
        assert!(t.holds(1, 0x1100, 0x100));
        assert!(!t.holds(0, 0xfff, 2), "starts before the allocation");
        assert!(!t.holds(0, usize::MAX, 2), "wraps around");
        assert!(!t.remove(1, 0x1000), "freed by another device");
        assert!(t.remove(0, 0x1000));
        assert!(!t.remove(0, 0x1000), "freed twice");
        assert!(!t.holds(0, 0x1000, 1), "freed");
    }

    #[test]
    fn device_memory_hands_out_arena_ranges_only_inside_live_allocations() {
        let mut m = DeviceMemory::new(Arena::create(1 << 24).unwrap(), 2);
        let a = m.alloc(0, 1000).unwrap();
        assert_eq!(m.range(0, a as u64, 1000), Some(DeviceRange { ptr: a, len: 1000 }));
        assert_eq!(m.range(0, a as u64 + 10, 20).map(|r| r.part(5, 5)), Some(DeviceRange { ptr: a + 15, len: 5 }));
        assert_eq!(m.range(0, a as u64, 1001), None);
        assert_eq!(m.range(1, a as u64, 10), None);
        assert_eq!(m.range(0, a as u64, 0), None);
        assert_eq!(m.alloc(2, 8), None, "a device the rank does not have");
        assert_eq!(m.alloc(0, 1 << 30), None, "more than the arena holds");
        assert!(!m.free(1, a));
        assert!(m.free(0, a));
        assert_eq!(m.range(0, a as u64, 1), None);
        assert!(!m.free(0, a));
    }

    #[test]
    fn large_blocks_start_half_a_page_in() {
        let mut m = DeviceMemory::new(Arena::create(1 << 26).unwrap(), 1);
        let large = m.alloc(0, 8 << 20).unwrap();
        assert_eq!(large % PAGE, LARGE_BLOCK_PAGE_OFFSET);
        assert_eq!(m.allocation(0, large), Some(DeviceRange { ptr: large, len: 8 << 20 }));
        assert!(m.range(0, large as u64, 8 << 20).is_some(), "all of it, up to its last byte");
        let small = m.alloc(0, 1000).unwrap();
        assert_eq!(small % 64, 0, "small blocks stay as the arena aligns them");
        // Freed by the address given out: the whole block goes back, and can be had again.
        assert!(m.free(0, large));
        assert_eq!(m.allocation(0, large), None);
        for _ in 0..8 {
            let again = m.alloc(0, 8 << 20).expect("the freed block was given back");
            assert!(m.free(0, again));
        }
        assert!(m.free(0, small));
    }

    #[test]
    fn in_process_memory_is_the_devices_own_allocations() {
        use omp_plugin::Plugin;
        let devs: Vec<Arc<dyn Device>> =
            (0..2).map(|i| Arc::from(omp_plugin_host::HostPlugin.open_device(i).unwrap())).collect();
        let devs = Arc::new(devs);
        let mut m = DeviceMemory::in_process(devs.clone());
        let large = m.alloc(0, 1 << 20).unwrap();
        assert_eq!(large % PAGE, LARGE_BLOCK_PAGE_OFFSET, "placed inside the device's block");
        assert!(devs[0].free(large, AllocKind::Device).is_err(), "not the address the device gave out");
        assert!(m.free(0, large), "its block is freed on the device");
        let a = m.alloc(1, 4096).unwrap();
        let r = m.range(1, a as u64, 4096).expect("inside the allocation");
        // SAFETY: `r` is a live allocation of 4096 bytes of the host device, in this process.
        unsafe { std::ptr::write_bytes(r.ptr as *mut u8, 7, r.len) };
        let mut back = [0u8; 4096];
        // SAFETY: `back` holds 4096 bytes; the device range is the allocation above.
        unsafe { devs[1].retrieve(back.as_mut_ptr() as usize, a, 4096) }.unwrap();
        assert!(back.iter().all(|&b| b == 7), "MPI's bytes are the device's");
        assert_eq!(m.range(0, a as u64, 1), None, "another device's");
        assert_eq!(m.range(1, a as u64, 4097), None, "past its end");
        assert_eq!(m.alloc(2, 8), None, "a device the rank does not have");
        assert!(m.free(1, a));
        assert!(devs[1].free(a, AllocKind::Device).is_err(), "freed on the device itself");
        assert!(!m.free(1, a));
    }

    #[test]
    fn ranges_overlap_when_they_share_a_byte() {
        let r = |ptr, len| DeviceRange { ptr, len };
        assert!(r(100, 10).overlaps(&r(109, 5)));
        assert!(!r(100, 10).overlaps(&r(110, 5)));
        assert!(r(100, 10).overlaps(&r(50, 51)));
        assert!(!r(100, 10).overlaps(&r(50, 50)));
        assert!(r(100, 10).overlaps(&r(102, 2)));
    }
}
