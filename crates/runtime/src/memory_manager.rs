//! A cache of small device allocations in front of the plugin's allocator
//! (`LIBOMPTARGET_MEMORY_MANAGER_THRESHOLD`, default 8 KiB, 0 disables). Requests are rounded
//! up to a power of two (at least 16 bytes) and freed blocks wait on that class's free list;
//! nothing returns to the device until the cache is drained. Callers pass the size back on
//! free, so the cache keeps no per-block bookkeeping.

use omp_sync::Mutex;

const MIN_SHIFT: u32 = 4;
const CLASSES: usize = 28;

/// The per-device cache.
#[derive(Debug)]
pub struct MemoryManager {
    threshold: usize,
    free: Mutex<[Vec<usize>; CLASSES]>,
}

impl MemoryManager {
    pub fn new(threshold: usize) -> Self {
        Self { threshold: threshold.min(1 << (CLASSES as u32 + MIN_SHIFT - 1)), free: Mutex::new(Default::default()) }
    }

    /// Whether requests of `size` bytes go through the cache.
    #[inline]
    pub fn manages(&self, size: usize) -> bool {
        size > 0 && size <= self.threshold
    }

    /// The size class of a managed request, and the bytes to allocate for it.
    #[inline]
    pub fn class(size: usize) -> (usize, usize) {
        let bytes = size.next_power_of_two().max(1 << MIN_SHIFT);
        ((bytes.trailing_zeros() - MIN_SHIFT) as usize, bytes)
    }

    /// A cached block for a request of `size` bytes, if one is free.
    #[inline]
    pub fn take(&self, size: usize) -> Option<usize> {
        let (class, _) = Self::class(size);
        self.free.lock()[class].pop()
    }

    /// Returns a block that was allocated for a request of `size` bytes.
    #[inline]
    pub fn give_back(&self, ptr: usize, size: usize) {
        let (class, _) = Self::class(size);
        self.free.lock()[class].push(ptr);
    }

    /// Every free block, emptied from the cache (to release them to the device).
    pub fn drain_free(&self) -> Vec<usize> {
        let mut f = self.free.lock();
        f.iter_mut().flat_map(std::mem::take).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes_and_reuse() {
        let mm = MemoryManager::new(8192);
        assert!(mm.manages(8192) && !mm.manages(8193) && !mm.manages(0));
        assert_eq!(MemoryManager::class(1), (0, 16));
        assert_eq!(MemoryManager::class(17), (1, 32));
        assert_eq!(MemoryManager::class(8192), (9, 8192));
        assert_eq!(mm.take(64), None);
        mm.give_back(0x1000, 60);
        assert_eq!(mm.take(33), Some(0x1000), "same class (64 bytes)");
        assert_eq!(mm.take(64), None);
        mm.give_back(0x2000, 100);
        assert_eq!(mm.drain_free(), vec![0x2000]);
        assert_eq!(mm.take(100), None);
    }
}
