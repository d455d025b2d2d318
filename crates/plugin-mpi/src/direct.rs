//! Device memory a device rank reaches itself, so that MPI moves a copy's bytes straight into
//! and out of it: no buffer of the rank's, no second copy into the worker.
//!
//! The rank's devices allocate from an arena, the isolated device's shared memory
//! (`omp_plugin_isolate::arena`): one memfd mapped at the same address in the rank and in its
//! `offload-worker`, so kernels there see what MPI wrote here. The rank keeps the table of its
//! allocations ([`Allocations`]): an address range that arrives from the wire is used only
//! when it lies inside one live allocation of the device it names ([`DeviceMemory::range`]);
//! anything else (a declare-target global, which lives in the worker's image, an allocation the
//! arena had no room for) goes the old way, through a buffer and the worker.
//!
//! Whoever owns device memory that MPI can reach (this arena, or the rank's own memory when its
//! kernels run in the rank) answers the same question: "where, in this process, are these bytes
//! of that device?" ([`DeviceRange`]).

use omp_plugin_isolate::arena::Arena;
use std::collections::BTreeMap;

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
    /// The part `[at, at+len)` of this range (the caller keeps it inside).
    pub fn part(&self, at: usize, len: usize) -> DeviceRange {
        debug_assert!(at + len <= self.len);
        DeviceRange { ptr: self.ptr + at, len }
    }
}

/// The device memory of a rank whose worker maps the arena.
pub struct DeviceMemory {
    arena: Arena,
    devices: u32,
    table: Allocations,
}

impl DeviceMemory {
    /// Device memory for `devices` devices in `arena`, which the worker has mapped (it
    /// acknowledged it).
    pub fn new(arena: Arena, devices: u32) -> DeviceMemory {
        DeviceMemory { arena, devices, table: Allocations::default() }
    }

    /// `size` bytes for `device`; `None` for a device this rank does not have or when the
    /// arena is full (the caller asks the worker instead, which answers as it always did).
    pub fn alloc(&mut self, device: u32, size: usize) -> Option<usize> {
        if device >= self.devices {
            return None;
        }
        let addr = self.arena.alloc(size)?;
        self.table.insert(device, addr, size.max(1));
        Some(addr)
    }

    /// Frees an allocation [`DeviceMemory::alloc`] made for `device`; false for any other
    /// address (the worker's own allocations, or none).
    pub fn free(&mut self, device: u32, addr: usize) -> bool {
        if !self.table.remove(device, addr) {
            return false;
        }
        self.arena.free(addr)
    }

    /// Where `[addr, addr+len)` of `device` is in this process, when it lies inside one live
    /// allocation of that device; `None` otherwise (also for an empty range).
    pub fn range(&self, device: u32, addr: u64, len: usize) -> Option<DeviceRange> {
        let addr = usize::try_from(addr).ok()?;
        (len > 0 && self.table.holds(device, addr, len) && self.arena.contains(addr, len))
            .then_some(DeviceRange { ptr: addr, len })
    }

    /// The arena's address and size (INFO and tests).
    pub fn arena(&self) -> (usize, usize) {
        (self.arena.base(), self.arena.size())
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
        let (base, size) = m.arena();
        assert!(base <= a && a < base + size);
    }
}
