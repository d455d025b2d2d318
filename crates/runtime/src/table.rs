//! The per-device mapping table: host ranges and their device copies, with dynamic and hold
//! reference counts. Pure bookkeeping; data motion and allocation happen in the caller.

use crate::MapName;
use std::collections::BTreeMap;

/// A reference count that never changes and prints as `INF` (globals, associated pointers).
pub const INF: u64 = u64::MAX;

/// A host pointer stored inside a mapped object, whose device copy must hold a device
/// address instead ("attached" pointer).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShadowPtr {
    pub host_addr: usize,
    pub host_val: usize,
    pub tgt_addr: usize,
    pub tgt_val: usize,
    /// A host address inside the pointee's mapping (the section the pointer was attached
    /// to): spreading never carries a mapping that pointers of other mappings point into.
    pub pointee: usize,
}

/// One mapped host range.
#[derive(Debug, Clone)]
pub struct MapEntry {
    pub base: usize,
    pub begin: usize,
    pub end: usize,
    /// What was allocated on the device (the start of the padding).
    pub tgt_alloc: usize,
    pub tgt_begin: usize,
    pub dyn_rc: u64,
    pub hold_rc: u64,
    /// Address of the map-name string (`;name;file;line;col;;`), or 0.
    pub name: MapName,
    pub shadows: Vec<ShadowPtr>,
    /// Whether the runtime owns `tgt_alloc` (false for globals and associated pointers).
    pub owns_memory: bool,
}

impl MapEntry {
    pub fn size(&self) -> usize {
        self.end - self.begin
    }
    /// The device address of host address `hp` inside this entry.
    pub fn translate(&self, hp: usize) -> usize {
        self.tgt_begin.wrapping_add(hp.wrapping_sub(self.begin))
    }
    pub fn total_rc(&self) -> u64 {
        if self.dyn_rc == INF || self.hold_rc == INF {
            INF
        } else {
            self.dyn_rc + self.hold_rc
        }
    }
    pub fn count(&self, hold: bool) -> u64 {
        if hold {
            self.hold_rc
        } else {
            self.dyn_rc
        }
    }
    /// Adds one to the chosen count (INF stays INF).
    pub fn increment(&mut self, hold: bool) {
        let c = if hold { &mut self.hold_rc } else { &mut self.dyn_rc };
        if *c != INF {
            *c += 1;
        }
    }
    /// Subtracts one from the chosen count, never below zero (INF stays INF).
    pub fn decrement(&mut self, hold: bool) {
        let c = if hold { &mut self.hold_rc } else { &mut self.dyn_rc };
        if *c != INF && *c > 0 {
            *c -= 1;
        }
    }
    /// Whether a data-end decrement (or `delete`) will drop the last reference.
    pub fn dec_should_remove(&self, hold: bool, force_delete: bool) -> bool {
        let (this, other) = if hold { (self.hold_rc, self.dyn_rc) } else { (self.dyn_rc, self.hold_rc) };
        if other != 0 {
            return false;
        }
        if force_delete {
            return this != INF;
        }
        this == 1
    }
    /// `delete` resets the count to one so the following decrement removes the entry.
    pub fn reset_for_delete(&mut self, hold: bool) {
        let c = if hold { &mut self.hold_rc } else { &mut self.dyn_rc };
        if *c != INF {
            *c = 1;
        }
    }
    /// The range including the base pointer (zero-length lookups match it).
    fn extended(&self) -> (usize, usize) {
        (self.base.min(self.begin), self.base.max(self.end))
    }
}

/// How a looked-up range relates to the table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lookup {
    /// Inside the entry that starts at this key.
    Contained(usize),
    /// Overlaps the entry at this key but does not fit in it.
    Extends(usize),
    NotFound,
}

impl Lookup {
    pub fn key(self) -> Option<usize> {
        match self {
            Lookup::Contained(k) | Lookup::Extends(k) => Some(k),
            Lookup::NotFound => None,
        }
    }
}

/// The table itself, ordered by host begin address.
#[derive(Debug, Default)]
pub struct MappingTable {
    entries: BTreeMap<usize, MapEntry>,
    /// Entries whose first host-to-device copy is in flight outside the table lock (LLVM's
    /// "being mapped"): others wait until it is done before they use them.
    busy: Vec<usize>,
    /// Threads waiting for a busy entry (only they need a wake-up when one is done).
    pub waiters: usize,
}

impl MappingTable {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn get(&self, key: usize) -> Option<&MapEntry> {
        self.entries.get(&key)
    }

    pub fn get_mut(&mut self, key: usize) -> Option<&mut MapEntry> {
        self.entries.get_mut(&key)
    }

    pub fn iter(&self) -> impl Iterator<Item = &MapEntry> {
        self.entries.values()
    }

    /// Inserts a new entry; the caller has checked that its range is free.
    pub fn insert(&mut self, entry: MapEntry) -> usize {
        let key = entry.begin;
        self.entries.insert(key, entry);
        key
    }

    pub fn remove(&mut self, key: usize) -> Option<MapEntry> {
        self.entries.remove(&key)
    }

    /// Marks an entry as being mapped (its data is on the way to the device).
    pub fn mark_busy(&mut self, key: usize) {
        self.busy.push(key);
    }

    /// Marks an entry's data as arrived.
    pub fn clear_busy(&mut self, key: usize) {
        if let Some(i) = self.busy.iter().position(|&k| k == key) {
            self.busy.swap_remove(i);
        }
    }

    /// Whether the entry that `[hp, hp+size)` falls in is still being mapped.
    pub fn is_busy(&self, hp: usize, size: usize) -> bool {
        !self.busy.is_empty() && self.lookup(hp, size).key().is_some_and(|k| self.busy.contains(&k))
    }

    /// Finds how `[hp, hp+size)` relates to the table (LLVM's `lookupMapping`).
    #[link_section = ".text.hot.omp_launch"]
    pub fn lookup(&self, hp: usize, size: usize) -> Lookup {
        let mut below = self.entries.range(..=hp).next_back();
        // Zero-length sections and bare pointers match an entry's extended range.
        if size == 0 {
            if let Some((&k, e)) = below {
                let (_, ext_end) = e.extended();
                if hp < ext_end {
                    return Lookup::Contained(k);
                }
            }
            if let Some((&k, e)) = self.entries.range(hp.saturating_add(1)..).next() {
                let (ext_begin, _) = e.extended();
                if hp >= ext_begin {
                    return Lookup::Contained(k);
                }
            }
            return Lookup::NotFound;
        }
        let end = hp.saturating_add(size);
        if let Some((&k, e)) = below.take() {
            if hp < e.end {
                return if end <= e.end { Lookup::Contained(k) } else { Lookup::Extends(k) };
            }
        }
        if let Some((&k, e)) = self.entries.range(hp.saturating_add(1)..).next() {
            if end > e.begin {
                return Lookup::Extends(k);
            }
        }
        Lookup::NotFound
    }

    /// The entry whose range is nearest to `hp` (for error messages).
    pub fn nearest(&self, hp: usize) -> Option<&MapEntry> {
        let below = self.entries.range(..=hp).next_back().map(|(_, e)| e);
        let above = self.entries.range(hp.saturating_add(1)..).next().map(|(_, e)| e);
        match (below, above) {
            (Some(b), Some(a)) => Some(if hp - b.end.min(hp) <= a.begin - hp { b } else { a }),
            (b, a) => b.or(a),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(begin: usize, size: usize) -> MapEntry {
        MapEntry {
            base: begin,
            begin,
            end: begin + size,
            tgt_alloc: 0x9000 + begin,
            tgt_begin: 0x9000 + begin,
            dyn_rc: 1,
            hold_rc: 0,
            name: MapName::NONE,
            shadows: Vec::new(),
            owns_memory: true,
        }
    }

    #[test]
    fn contained_extends_and_missing() {
        let mut t = MappingTable::new();
        t.insert(entry(100, 50));
        assert_eq!(t.lookup(100, 50), Lookup::Contained(100));
        assert_eq!(t.lookup(120, 10), Lookup::Contained(100));
        assert_eq!(t.lookup(140, 20), Lookup::Extends(100));
        assert_eq!(t.lookup(90, 20), Lookup::Extends(100));
        assert_eq!(t.lookup(150, 10), Lookup::NotFound);
        assert_eq!(t.lookup(50, 50), Lookup::NotFound);
        assert_eq!(t.get(100).unwrap().translate(120), 0x9000 + 120);
    }

    #[test]
    fn zero_length_uses_the_extended_range() {
        let mut t = MappingTable::new();
        let mut e = entry(100, 50);
        e.base = 80; // a section of an array whose base pointer is below begin
        t.insert(e);
        assert_eq!(t.lookup(100, 0), Lookup::Contained(100));
        assert_eq!(t.lookup(149, 0), Lookup::Contained(100));
        // One past the end matches only through the base clause, which does not cover it here.
        assert_eq!(t.lookup(150, 0), Lookup::NotFound);
        assert_eq!(t.lookup(85, 0), Lookup::Contained(100));
        assert_eq!(t.lookup(79, 0), Lookup::NotFound);
    }

    #[test]
    fn refcounts_dynamic_and_hold() {
        let mut e = entry(0, 8);
        e.increment(false);
        assert_eq!(e.dyn_rc, 2);
        assert!(!e.dec_should_remove(false, false));
        e.decrement(false);
        assert!(e.dec_should_remove(false, false));
        e.increment(true);
        // A hold reference keeps the entry even when the dynamic count drops to zero.
        assert!(!e.dec_should_remove(false, false));
        assert!(!e.dec_should_remove(false, true));
        e.decrement(true);
        assert!(e.dec_should_remove(false, true));
    }

    #[test]
    fn infinite_counts_never_change() {
        let mut e = entry(0, 8);
        e.dyn_rc = INF;
        e.increment(false);
        e.decrement(false);
        e.reset_for_delete(false);
        assert_eq!(e.dyn_rc, INF);
        assert_eq!(e.total_rc(), INF);
        assert!(!e.dec_should_remove(false, true));
        assert!(!e.dec_should_remove(false, false));
    }

    #[test]
    fn delete_resets_to_one() {
        let mut e = entry(0, 8);
        e.dyn_rc = 5;
        assert!(e.dec_should_remove(false, true));
        e.reset_for_delete(false);
        e.decrement(false);
        assert_eq!(e.dyn_rc, 0);
    }

    #[test]
    fn nearest_entry() {
        let mut t = MappingTable::new();
        t.insert(entry(100, 10));
        t.insert(entry(300, 10));
        assert_eq!(t.nearest(120).unwrap().begin, 100);
        assert_eq!(t.nearest(290).unwrap().begin, 300);
        assert_eq!(t.nearest(5).unwrap().begin, 100);
    }
}
