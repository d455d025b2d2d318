//! A cache of small device allocations in front of the plugin's allocator
//! (`LIBOMPTARGET_MEMORY_MANAGER_THRESHOLD`, default 8 KiB, 0 disables). Freed blocks wait
//! on a free list for a request of the same size; nothing returns to the device until the
//! runtime shuts down.

use std::collections::HashMap;
use std::sync::Mutex;

#[derive(Debug, Default)]
struct Pools {
    /// Free blocks by exact size.
    free: HashMap<usize, Vec<usize>>,
    /// Size of every block this manager handed out (free or in use).
    owned: HashMap<usize, usize>,
}

/// The per-device cache.
#[derive(Debug)]
pub struct MemoryManager {
    threshold: usize,
    pools: Mutex<Pools>,
}

impl MemoryManager {
    pub fn new(threshold: usize) -> Self {
        Self { threshold, pools: Mutex::new(Pools::default()) }
    }

    /// Whether requests of `size` bytes go through the cache.
    pub fn manages(&self, size: usize) -> bool {
        size > 0 && size <= self.threshold
    }

    /// A cached block of exactly `size` bytes, if one is free.
    pub fn take(&self, size: usize) -> Option<usize> {
        let mut p = self.pools.lock().unwrap();
        p.free.get_mut(&size).and_then(|v| v.pop())
    }

    /// Records a fresh block the device allocated for a managed size.
    pub fn adopt(&self, ptr: usize, size: usize) {
        self.pools.lock().unwrap().owned.insert(ptr, size);
    }

    /// Puts a managed block back; false when the pointer is not ours (free it directly).
    pub fn give_back(&self, ptr: usize) -> bool {
        let mut p = self.pools.lock().unwrap();
        match p.owned.get(&ptr).copied() {
            Some(size) => {
                p.free.entry(size).or_default().push(ptr);
                true
            }
            None => false,
        }
    }

    /// Every free block, emptied from the cache (to release them to the device).
    pub fn drain_free(&self) -> Vec<usize> {
        let mut p = self.pools.lock().unwrap();
        let blocks: Vec<usize> = p.free.drain().flat_map(|(_, v)| v).collect();
        for b in &blocks {
            p.owned.remove(b);
        }
        blocks
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reuses_exact_sizes_only() {
        let mm = MemoryManager::new(8192);
        assert!(mm.manages(8192) && !mm.manages(8193) && !mm.manages(0));
        assert_eq!(mm.take(64), None);
        mm.adopt(0x1000, 64);
        assert!(mm.give_back(0x1000));
        assert_eq!(mm.take(32), None);
        assert_eq!(mm.take(64), Some(0x1000));
        assert!(!mm.give_back(0x2000));
        mm.give_back(0x1000);
        assert_eq!(mm.drain_free(), vec![0x1000]);
        assert!(!mm.give_back(0x1000));
    }
}
