//! The per-device cache in front of the plugin's allocator, in two tiers.
//!
//! - Small allocations (`LIBOMPTARGET_MEMORY_MANAGER_THRESHOLD`, default 8 KiB, 0 disables the
//!   whole memory manager): requests are rounded up to a power of two (at least 16 bytes) and
//!   freed blocks wait on that class's free list; nothing returns to the device until the
//!   cache is drained. Callers pass the size back on free, so the cache keeps no per-block
//!   bookkeeping.
//! - Large blocks ([`LARGE_BLOCK`] bytes and more, `AllocKind::Default` only): a freed block
//!   waits, bounded in bytes (`LIBOMPTARGET_MEMORY_MANAGER_CACHE`, default
//!   [`DEFAULT_CACHE_BOUND`]), for a request of about its size. Its pages stay faulted in, so
//!   an array entered and exited repeatedly is copied at memory speed instead of faulting in
//!   fresh device memory for every mapping. Beyond the bound the oldest blocks go back to the
//!   device; a block larger than the bound is never kept.

use crate::config::Config;
use omp_plugin::AllocKind;
use omp_sync::Mutex;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

const MIN_SHIFT: u32 = 4;
const CLASSES: usize = 28;

/// Blocks of at least this many bytes are kept in the large-block cache when freed.
pub const LARGE_BLOCK: usize = 1 << 20;

/// Most bytes of freed large blocks a device keeps, unless `LIBOMPTARGET_MEMORY_MANAGER_CACHE`
/// says otherwise.
pub const DEFAULT_CACHE_BOUND: usize = 512 << 20;

/// The variable that sets the large-block cache's bound, in bytes (0 turns that tier off).
pub const CACHE_VAR: &str = "LIBOMPTARGET_MEMORY_MANAGER_CACHE";

/// The INFO bit under which keeping a large block is reported (mapping entries created and
/// removed: the cache holds what removed entries used).
const INFO_ALLOCATIONS: u32 = 0x08;

/// The per-device cache.
#[derive(Debug)]
pub struct MemoryManager {
    threshold: usize,
    free: Mutex<[Vec<usize>; CLASSES]>,
    large: Mutex<LargeBlocks>,
    /// The device, and the INFO bits, for the line that reports what the cache holds.
    device: i32,
    info: Option<Arc<AtomicU32>>,
}

impl MemoryManager {
    /// A cache with the small-allocation `threshold` and the default large-block bound (both
    /// tiers off when `threshold` is 0), reporting nothing.
    pub fn new(threshold: usize) -> Self {
        Self::with_bound(threshold, DEFAULT_CACHE_BOUND)
    }

    /// Device `device`'s cache as `config` sets it up.
    pub fn for_device(config: &Config, device: i32) -> Self {
        // Warned about once, though every device reads it.
        let bound = cache_bound(config.var(CACHE_VAR).as_deref(), device == 0);
        Self { device, info: Some(config.info_bits()), ..Self::with_bound(config.mm_threshold, bound) }
    }

    fn with_bound(threshold: usize, bound: usize) -> Self {
        Self {
            threshold: threshold.min(1 << (CLASSES as u32 + MIN_SHIFT - 1)),
            free: Mutex::new(Default::default()),
            large: Mutex::new(LargeBlocks::new(if threshold == 0 { 0 } else { bound })),
            device: 0,
            info: None,
        }
    }

    /// Whether requests of `size` bytes go through the small-allocation cache.
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

    /// A freed large block that serves a request of `size` bytes of `kind`, if the cache has
    /// one (the block may be up to an eighth larger than asked for).
    pub fn take_large(&self, size: usize, kind: AllocKind) -> Option<usize> {
        if !self.caches_large(size, kind) {
            return None;
        }
        let hit = self.large.lock().take(size);
        if let Some(p) = hit {
            crate::debug!("omptarget", "device {}: memory manager hit: {size} bytes at 0x{p:016x}", self.device);
        }
        hit
    }

    /// Frees a block of `size` bytes of `kind` (not one the small classes manage) into the
    /// large-block cache where it fits: returns the blocks the caller must free on the device
    /// now (`ptr` itself when it is not kept, and the oldest blocks the bound pushes out).
    pub fn keep_large(&self, ptr: usize, size: usize, kind: AllocKind) -> std::vec::IntoIter<usize> {
        if !self.caches_large(size, kind) {
            return vec![ptr].into_iter();
        }
        let mut large = self.large.lock();
        let Some(evicted) = large.keep(ptr, size) else {
            return vec![ptr].into_iter();
        };
        let (held, blocks, bound) = (large.held, large.blocks.len(), large.bound);
        drop(large);
        crate::debug!("omptarget", "device {}: memory manager keeps {size} bytes at 0x{ptr:016x}", self.device);
        if self.info.as_ref().is_some_and(|bits| bits.load(Ordering::Relaxed) & INFO_ALLOCATIONS != 0) {
            let device = self.device;
            crate::info::info(
                device,
                format_args!(
                    "Memory manager keeps {size} bytes at 0x{ptr:016x} for reuse; freed large blocks held: \
                     {held} bytes in {blocks} (at most {bound}, {CACHE_VAR})"
                ),
            );
        }
        evicted.into_iter()
    }

    fn caches_large(&self, size: usize, kind: AllocKind) -> bool {
        matches!(kind, AllocKind::Default) && size >= LARGE_BLOCK && !self.manages(size)
    }

    /// Bytes of freed large blocks the cache holds now.
    pub fn large_held(&self) -> usize {
        self.large.lock().held
    }

    /// Every free block of both tiers, emptied from the cache (to release them to the device).
    pub fn drain_free(&self) -> Vec<usize> {
        let mut f = self.free.lock();
        let mut out: Vec<usize> = f.iter_mut().flat_map(std::mem::take).collect();
        out.extend(self.large.lock().drain());
        out
    }
}

/// The large-block bound `LIBOMPTARGET_MEMORY_MANAGER_CACHE` sets (-1: no bound); a value
/// that is not a number keeps the default, with a warning when `warn`.
fn cache_bound(raw: Option<&str>, warn: bool) -> usize {
    let Some(raw) = raw else { return DEFAULT_CACHE_BOUND };
    match crate::config::parse_int(raw) {
        Some(v) => usize::try_from(v).unwrap_or(usize::MAX),
        None => {
            if warn {
                eprintln!("omptarget warning: ignoring {CACHE_VAR}='{raw}': not a number (use decimal, 0x-hex or -1)");
            }
            DEFAULT_CACHE_BOUND
        }
    }
}

/// Freed large blocks, oldest first, and the bytes they hold.
#[derive(Debug)]
struct LargeBlocks {
    /// (address, size asked for when it was allocated or last handed out).
    blocks: VecDeque<(usize, usize)>,
    held: usize,
    bound: usize,
}

impl LargeBlocks {
    fn new(bound: usize) -> Self {
        Self { blocks: VecDeque::new(), held: 0, bound }
    }

    /// The smallest block of at least `size` bytes and at most an eighth more.
    fn take(&mut self, size: usize) -> Option<usize> {
        let most = size.saturating_add(size / 8);
        let (i, _) = self
            .blocks
            .iter()
            .enumerate()
            .filter(|(_, &(_, b))| b >= size && b <= most)
            .min_by_key(|(_, &(_, b))| b)?;
        let (ptr, bytes) = self.blocks.remove(i)?;
        self.held -= bytes;
        Some(ptr)
    }

    /// Keeps `ptr` (`size` bytes) and returns the blocks pushed out by the bound, oldest
    /// first; `None` when a block of this size is never kept (larger than the bound).
    fn keep(&mut self, ptr: usize, size: usize) -> Option<Vec<usize>> {
        if size > self.bound {
            return None;
        }
        let mut evicted = Vec::new();
        while self.held + size > self.bound {
            let (old, bytes) = self.blocks.pop_front()?;
            self.held -= bytes;
            evicted.push(old);
        }
        self.blocks.push_back((ptr, size));
        self.held += size;
        Some(evicted)
    }

    fn drain(&mut self) -> Vec<usize> {
        self.held = 0;
        self.blocks.drain(..).map(|(p, _)| p).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: usize = 1 << 20;

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

    fn kept(mm: &MemoryManager, ptr: usize, size: usize) -> Vec<usize> {
        kept_kind(mm, ptr, size, AllocKind::Default)
    }

    fn kept_kind(mm: &MemoryManager, ptr: usize, size: usize, kind: AllocKind) -> Vec<usize> {
        mm.keep_large(ptr, size, kind).collect()
    }

    #[test]
    fn freed_large_blocks_are_reused_by_size() {
        let mm = MemoryManager::with_bound(8192, 256 * MIB);
        assert_eq!(mm.take_large(64 * MIB, AllocKind::Default), None, "nothing freed yet");
        assert_eq!(kept(&mm, 0x10_0000, 64 * MIB), Vec::<usize>::new(), "kept, nothing to free");
        assert_eq!(kept(&mm, 0x90_0000, 8 * MIB), Vec::<usize>::new());
        assert_eq!(mm.large_held(), 72 * MIB);
        assert_eq!(mm.take_large(65 * MIB, AllocKind::Default), None, "too small for 65 MiB");
        assert_eq!(mm.take_large(50 * MIB, AllocKind::Default), None, "64 MiB is too large a block for 50 MiB");
        assert_eq!(mm.take_large(60 * MIB, AllocKind::Default), Some(0x10_0000), "within an eighth");
        assert_eq!(mm.take_large(60 * MIB, AllocKind::Default), None, "handed out once");
        assert_eq!(mm.large_held(), 8 * MIB);
        // Given back with the size it was handed out for: it now serves 60 MiB, not 64.
        assert_eq!(kept(&mm, 0x10_0000, 60 * MIB), Vec::<usize>::new());
        assert_eq!(mm.take_large(64 * MIB, AllocKind::Default), None);
        assert_eq!(mm.take_large(8 * MIB, AllocKind::Default), Some(0x90_0000));
        assert_eq!(mm.drain_free(), vec![0x10_0000]);
        assert_eq!(mm.large_held(), 0);
    }

    #[test]
    fn the_bound_pushes_out_the_oldest_blocks() {
        let mm = MemoryManager::with_bound(8192, 100 * MIB);
        assert!(kept(&mm, 0x1000_0000, 40 * MIB).is_empty());
        assert!(kept(&mm, 0x2000_0000, 40 * MIB).is_empty());
        assert_eq!(kept(&mm, 0x3000_0000, 30 * MIB), vec![0x1000_0000], "the oldest goes back to the device");
        assert_eq!(mm.large_held(), 70 * MIB);
        assert_eq!(kept(&mm, 0x4000_0000, 100 * MIB), vec![0x2000_0000, 0x3000_0000], "exactly the bound fits");
        assert_eq!(mm.large_held(), 100 * MIB);
        assert_eq!(kept(&mm, 0x5000_0000, 101 * MIB), vec![0x5000_0000], "larger than the bound: never kept");
        assert_eq!(mm.large_held(), 100 * MIB, "and nothing else was pushed out for it");
    }

    #[test]
    fn zero_small_huge_and_other_kinds_are_not_cached() {
        let mm = MemoryManager::with_bound(8192, 256 * MIB);
        for (size, kind) in [
            (0, AllocKind::Default),
            (4096, AllocKind::Default),
            (LARGE_BLOCK - 1, AllocKind::Default),
            (usize::MAX, AllocKind::Default),
            (64 * MIB, AllocKind::Host),
            (64 * MIB, AllocKind::Shared),
        ] {
            assert_eq!(kept_kind(&mm, 0x7000, size, kind), vec![0x7000], "{size} bytes of {kind:?}: freed at once");
            assert_eq!(mm.take_large(size, kind), None, "{size} bytes of {kind:?}");
        }
        assert_eq!(mm.large_held(), 0);
        assert!(kept(&mm, 0x8000, LARGE_BLOCK).is_empty(), "exactly LARGE_BLOCK is kept");
        assert_eq!(mm.take_large(usize::MAX, AllocKind::Default), None, "a huge request overflows nothing");
    }

    #[test]
    fn threshold_zero_or_bound_zero_turns_the_large_tier_off() {
        for mm in [MemoryManager::with_bound(0, 256 * MIB), MemoryManager::with_bound(8192, 0)] {
            assert_eq!(kept(&mm, 0x10_0000, 64 * MIB), vec![0x10_0000]);
            assert_eq!(mm.take_large(64 * MIB, AllocKind::Default), None);
        }
    }

    #[test]
    fn the_bound_comes_from_the_environment() {
        assert_eq!(cache_bound(None, false), DEFAULT_CACHE_BOUND);
        assert_eq!(cache_bound(Some("0x100000"), false), MIB);
        assert_eq!(cache_bound(Some("0"), false), 0);
        assert_eq!(cache_bound(Some("-1"), false), usize::MAX);
        assert_eq!(cache_bound(Some("lots"), false), DEFAULT_CACHE_BOUND);
        let mm = MemoryManager::for_device(&Config::from_env(|_| None), 2);
        assert_eq!((mm.device, mm.large.lock().bound, mm.threshold), (2, DEFAULT_CACHE_BOUND, 8192));
    }
}
