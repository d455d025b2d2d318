//! `LIBOMPTARGET_SPREAD=1`: `nowait` target regions that name no device and bring all their
//! data in their own map clauses run on the least loaded device of the default device's
//! kind, instead of all on the default device (docs/cluster.md, "Spreading").
//!
//! The rule is conservative: a region is moved only when the device it runs on cannot
//! change what it computes. Its data comes from the host and goes back to the host within
//! the region, so any device that runs the same image computes the same thing; everything
//! else stays on the default device, as in the unmodified program. `depend` needs nothing
//! here: libomp releases a target task only when the tasks it depends on have ended, and a
//! region here ends with its data back on the host.
//!
//! Placement is least loaded: the device with the fewest regions in flight placed through
//! here, ties taking turns. A HEFT-style list scheduler needs the task graph ahead of time
//! and per-device costs that differ; the runtime sees each task only when libomp releases
//! it, the candidates are devices of one kind, and a moved region copies the same bytes
//! wherever it runs, so the earliest-finishing device is the least loaded one.

use crate::api::Allocations;
use crate::data::MapArgs;
use crate::map_type::{self as mt, has};
use crate::table::{Lookup, MappingTable};
use crate::{DeviceCtx, Loc, Runtime, Target};
use omp_sync::Mutex;
use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// Map-type bits that keep a region on the default device: data that must already be there
/// (`present`), a `delete`, a device address handed back (`use_device_*`), strided
/// sections (kept simple).
const STAYS: i64 = mt::PRESENT | mt::DELETE | mt::RETURN_PARAM | mt::NON_CONTIG;

/// Why a region stays on the default device (said in the `LIBOMPTARGET_DEBUG` trace).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stay {
    /// `requires unified_shared_memory`: the region may reach data through any pointer.
    SharedMemory,
    /// A registered binary has declare-target variables, which a kernel may touch without
    /// naming them in a map clause, so its regions are not moved.
    DeclareTargetData,
    /// Entry `i` is `present`, `delete`, `use_device_*`, non-contiguous, or has a mapper.
    MapType(usize),
    /// Entry `i`'s data is already on the device (enter data, an enclosing `target data`,
    /// or another region in flight).
    Present(usize),
    /// Entry `i` passes the address of device memory (`is_device_ptr`, `has_device_addr`,
    /// an `omp_target_alloc` block).
    DeviceAddress(usize),
}

impl fmt::Display for Stay {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Stay::SharedMemory => f.write_str("unified shared memory is required"),
            Stay::DeclareTargetData => f.write_str("the program has declare-target variables"),
            Stay::MapType(i) => write!(f, "map entry {i} is present, delete, use_device, strided or has a mapper"),
            Stay::Present(i) => write!(f, "map entry {i} is already on the device"),
            Stay::DeviceAddress(i) => write!(f, "argument {i} is a device address"),
        }
    }
}

/// The placement state: regions in flight per device, and the data they map.
#[derive(Default)]
pub struct Spread {
    /// Per device number: regions placed there and still running, and whether its images
    /// failed to load (it is then not chosen again).
    slots: Mutex<Vec<Slot>>,
    /// Where the search for the least loaded device starts: equally loaded devices take
    /// turns.
    turn: AtomicUsize,
    /// Whether registered binaries have declare-target variables, for the registry
    /// generation it was computed at.
    globals: Mutex<Option<(u64, bool)>>,
    /// The host addresses that movable regions in flight map, by device: a mapping that
    /// starts at one of them is such a region's own data, not data entered on the device.
    /// Counted: several regions may map the same data.
    own: Mutex<HashMap<(i32, usize), u32>>,
}

#[derive(Debug, Default, Clone, Copy)]
struct Slot {
    in_flight: u32,
    refused: bool,
}

/// A region's device, counted as in flight there until dropped, with the host addresses
/// its data starts at when it was moved (its own data, see [`Spread::own`]).
pub struct Placement<'s> {
    pub device: Arc<DeviceCtx>,
    spread: &'s Spread,
    mapped: Vec<usize>,
}

impl Drop for Placement<'_> {
    fn drop(&mut self) {
        let id = self.device.id;
        self.spread.release(id);
        if self.mapped.is_empty() {
            return;
        }
        let mut own = self.spread.own.lock();
        for &begin in &self.mapped {
            if let Some(n) = own.get_mut(&(id, begin)) {
                *n -= 1;
                if *n == 0 {
                    own.remove(&(id, begin));
                }
            }
        }
    }
}

impl Spread {
    /// Counts a region on `device` and returns its placement.
    fn occupy(&self, device: Arc<DeviceCtx>) -> Placement<'_> {
        let mut slots = self.slots.lock();
        let i = device.id as usize;
        if slots.len() <= i {
            slots.resize(i + 1, Slot::default());
        }
        slots[i].in_flight += 1;
        drop(slots);
        Placement { device, spread: self, mapped: Vec::new() }
    }

    /// The least loaded of `candidates` that is neither refused nor `tried`, counted in
    /// flight there; ties take turns.
    fn least_loaded(&self, candidates: &[Arc<DeviceCtx>], tried: &[i32]) -> Option<Arc<DeviceCtx>> {
        let mut slots = self.slots.lock();
        if let Some(last) = candidates.iter().map(|d| d.id as usize).max() {
            if slots.len() <= last {
                slots.resize(last + 1, Slot::default());
            }
        }
        let start = self.turn.fetch_add(1, Ordering::Relaxed);
        let n = candidates.len();
        let best = (0..n)
            .map(|k| &candidates[(start + k) % n])
            .filter(|d| !slots[d.id as usize].refused && !tried.contains(&d.id))
            .min_by_key(|d| slots[d.id as usize].in_flight)?
            .clone();
        slots[best.id as usize].in_flight += 1;
        Some(best)
    }

    /// A region on `id` ended (or was not placed there after all).
    fn release(&self, id: i32) {
        if let Some(s) = self.slots.lock().get_mut(id as usize) {
            s.in_flight = s.in_flight.saturating_sub(1);
        }
    }

    /// Marks a device whose images did not load: not chosen again.
    fn refuse(&self, id: i32) {
        if let Some(s) = self.slots.lock().get_mut(id as usize) {
            s.refused = true;
        }
    }

    /// The host addresses that movable regions in flight on `id` map (a snapshot).
    fn own(&self, id: i32) -> Vec<usize> {
        self.own.lock().keys().filter(|k| k.0 == id).map(|k| k.1).collect()
    }

    /// Places a movable region on `device`, its data counted as its own there.
    fn moved_to(&self, device: Arc<DeviceCtx>, args: &MapArgs) -> Placement<'_> {
        let mapped = mapped_addresses(args);
        let mut own = self.own.lock();
        for &begin in &mapped {
            *own.entry((device.id, begin)).or_insert(0) += 1;
        }
        drop(own);
        Placement { device, spread: self, mapped }
    }

    /// Regions in flight on each device, by device number (for tests and the trace).
    pub fn in_flight(&self) -> Vec<u32> {
        self.slots.lock().iter().map(|s| s.in_flight).collect()
    }
}

/// Whether a region's map entries allow it to move, looking at their kinds only.
pub fn movable_map_types(args: &MapArgs) -> Result<(), Stay> {
    for i in 0..args.len() {
        if args.types[i] & STAYS != 0 || args.mapper(i) != 0 {
            return Err(Stay::MapType(i));
        }
    }
    Ok(())
}

/// Whether an entry maps data (or names a pointer the runtime writes into): everything
/// but private copies and by-value arguments.
fn maps_data(ty: i64) -> bool {
    !has(ty, mt::PRIVATE) && !has(ty, mt::LITERAL | mt::TARGET_PARAM)
}

/// The host addresses a region's data starts at: its sections and the pointers its member
/// and attach entries write into.
fn mapped_addresses(args: &MapArgs) -> Vec<usize> {
    let mut v = Vec::new();
    for i in (0..args.len()).filter(|&i| maps_data(args.types[i])) {
        v.push(args.begins[i]);
        if has(args.types[i], mt::PTR_AND_OBJ) || has(args.types[i], mt::ATTACH) {
            v.push(args.bases[i]);
        }
    }
    v
}

/// Whether every entry that maps data is new in `table`, or a section inside a mapping that
/// starts at one of `own` (made by a movable region in flight); `Err(Present(i))` for the
/// first that is not. A pointer that a member or attach entry writes into must be new as well.
fn all_new(table: &MappingTable, own: &[usize], args: &MapArgs) -> Result<(), Stay> {
    // A bare pointer (zero-length section) that finds another region's data would be
    // translated to that data's device copy on its device, and to nothing elsewhere.
    let new = |begin: usize, size: usize| match table.lookup(begin, size) {
        Lookup::NotFound => true,
        Lookup::Contained(k) => size > 0 && own.contains(&k),
        Lookup::Extends(_) => false,
    };
    for i in (0..args.len()).filter(|&i| maps_data(args.types[i])) {
        let ty = args.types[i];
        // Mapped data, a zero-length section or bare pointer, a lambda's captured pointer
        // (LITERAL without TARGET_PARAM).
        let mut ok = new(args.begins[i], args.sizes[i].max(0) as usize);
        if has(ty, mt::PTR_AND_OBJ) || has(ty, mt::ATTACH) {
            ok &= new(args.bases[i], std::mem::size_of::<usize>());
        }
        if !ok {
            return Err(Stay::Present(i));
        }
    }
    Ok(())
}

/// Whether a by-value argument passes an address of device memory the runtime knows: an
/// API allocation of any device, or the device copy of a mapping on `dev`.
/// (`is_device_ptr` and `has_device_addr` look like any by-value scalar.)
fn device_address(allocs: &Allocations, dev: &DeviceCtx, args: &MapArgs) -> Result<(), Stay> {
    let values = || {
        (0..args.len())
            .filter(|&i| has(args.types[i], mt::LITERAL | mt::TARGET_PARAM) && !has(args.types[i], mt::PRIVATE))
            .map(|i| (i, args.bases[i]))
    };
    // One lock at a time: the API's allocations, then the table.
    if let Some((i, _)) = values().find(|&(_, v)| allocs.holds(v)) {
        return Err(Stay::DeviceAddress(i));
    }
    let table = dev.lock_table();
    match values().find(|&(_, v)| table.iter().any(|e| v.wrapping_sub(e.tgt_begin) < e.size())) {
        Some((i, _)) => Err(Stay::DeviceAddress(i)),
        None => Ok(()),
    }
}

impl Runtime {
    /// Where a `nowait` region that names no device runs under `LIBOMPTARGET_SPREAD`:
    /// `None` when the default device cannot be used (the caller's own selection then says
    /// why), else a device of the default device's kind, counted in flight until the
    /// placement drops.
    #[cold]
    #[inline(never)]
    pub(crate) fn place<'s>(
        &self,
        spread: &'s Spread,
        loc: Loc,
        host_ptr: usize,
        args: &MapArgs,
    ) -> Option<Placement<'s>> {
        let Ok(Target::Device(default)) = self.check_device(-1, loc) else { return None };
        if let Err(why) = self.movable(spread, &default, args) {
            crate::debug!(
                "omptarget",
                "spread: target region at {} stays on device {}: {why}",
                loc.parse(),
                default.id
            );
            return Some(spread.occupy(default));
        }
        let candidates: Vec<Arc<DeviceCtx>> =
            self.devices().into_iter().filter(|d| d.plugin == default.plugin && d.lost().is_none()).collect();
        let mut tried = Vec::new();
        while let Some(dev) = spread.least_loaded(&candidates, &tried) {
            if Arc::ptr_eq(&dev, &default) {
                crate::debug!("omptarget", "spread: target region at {} placed on device {}", loc.parse(), dev.id);
                return Some(spread.moved_to(dev, args));
            }
            match self.can_take(spread, &dev, host_ptr, args) {
                Ok(()) => {
                    crate::debug!("omptarget", "spread: target region at {} placed on device {}", loc.parse(), dev.id);
                    return Some(spread.moved_to(dev, args));
                }
                Err(why) => {
                    crate::debug!(
                        "omptarget",
                        "spread: device {} does not take the region at {}: {why}",
                        dev.id,
                        loc.parse()
                    );
                    spread.release(dev.id);
                    tried.push(dev.id);
                }
            }
        }
        Some(spread.moved_to(default, args))
    }

    /// Whether `dev`, another device of the default device's kind, can run a movable
    /// region: its images load, it has the kernel, and the region's data is new there.
    fn can_take(&self, spread: &Spread, dev: &DeviceCtx, host_ptr: usize, args: &MapArgs) -> Result<(), String> {
        if let Err(e) = self.ensure_loaded(dev) {
            spread.refuse(dev.id);
            return Err(format!("its images did not load: {e}"));
        }
        if dev.kernel(host_ptr).is_none() {
            return Err("it has no such kernel".into());
        }
        let own = spread.own(dev.id);
        all_new(&dev.lock_table(), &own, args).map_err(|why| why.to_string())
    }

    /// The rule: whether the region may run on another device of the default device's kind.
    fn movable(&self, spread: &Spread, default: &DeviceCtx, args: &MapArgs) -> Result<(), Stay> {
        if self.requires_usm() {
            return Err(Stay::SharedMemory);
        }
        if self.has_declare_target_data(spread) {
            return Err(Stay::DeclareTargetData);
        }
        movable_map_types(args)?;
        device_address(&self.api_allocs, default, args)?;
        let own = spread.own(default.id);
        all_new(&default.lock_table(), &own, args)
    }

    /// Whether any registered binary has declare-target variables (computed once per
    /// registry generation).
    fn has_declare_target_data(&self, spread: &Spread) -> bool {
        let generation = self.generation.load(Ordering::Acquire);
        let mut cached = spread.globals.lock();
        if let Some((g, answer)) = *cached {
            if g == generation {
                return answer;
            }
        }
        let answer = self
            .registry
            .read()
            .descs
            .iter()
            .flat_map(|d| d.entries.iter())
            .any(|e| !e.is_requires() && !e.is_indirect() && (e.size > 0 || e.is_link()));
        *cached = Some((generation, answer));
        answer
    }
}

#[cfg(test)]
#[path = "spread_tests.rs"]
mod tests;
