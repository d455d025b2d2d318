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

/// The placement state: regions in flight per device.
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
}

#[derive(Debug, Default, Clone, Copy)]
struct Slot {
    in_flight: u32,
    refused: bool,
}

/// A region's device, counted as in flight there until dropped.
pub struct Placement<'s> {
    pub device: Arc<DeviceCtx>,
    spread: &'s Spread,
}

impl Drop for Placement<'_> {
    fn drop(&mut self) {
        if let Some(s) = self.spread.slots.lock().get_mut(self.device.id as usize) {
            s.in_flight = s.in_flight.saturating_sub(1);
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
        Placement { device, spread: self }
    }

    /// The least loaded of `candidates` (not refused), counted in flight; ties take turns.
    fn least_loaded(&self, candidates: &[Arc<DeviceCtx>]) -> Option<Placement<'_>> {
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
            .filter(|d| !slots[d.id as usize].refused)
            .min_by_key(|d| slots[d.id as usize].in_flight)?
            .clone();
        slots[best.id as usize].in_flight += 1;
        drop(slots);
        Some(Placement { device: best, spread: self })
    }

    /// Marks a device whose images did not load: not chosen again.
    fn refuse(&self, id: i32) {
        if let Some(s) = self.slots.lock().get_mut(id as usize) {
            s.refused = true;
        }
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

/// Whether every entry that maps data is new in `table`; `Err(Present(i))` for the first
/// that is not. A pointer that a member or attach entry writes into must be new as well.
fn all_new(table: &MappingTable, args: &MapArgs) -> Result<(), Stay> {
    for i in 0..args.len() {
        let ty = args.types[i];
        let size = args.sizes[i].max(0) as usize;
        let found = if has(ty, mt::PRIVATE) || (has(ty, mt::LITERAL) && has(ty, mt::TARGET_PARAM)) {
            // Copied from the host (private), or a value (checked by `device_address`).
            false
        } else if has(ty, mt::PTR_AND_OBJ) || has(ty, mt::ATTACH) {
            let pointer = table.lookup(args.bases[i], std::mem::size_of::<usize>());
            pointer != Lookup::NotFound || table.lookup(args.begins[i], size) != Lookup::NotFound
        } else {
            // Mapped data, a zero-length section or bare pointer, a lambda's captured
            // pointer (LITERAL without TARGET_PARAM): found if the table knows it.
            table.lookup(args.begins[i], size) != Lookup::NotFound
        };
        if found {
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
        let placed = spread.least_loaded(&candidates)?;
        if Arc::ptr_eq(&placed.device, &default) {
            return Some(placed);
        }
        let dev = placed.device.clone();
        if let Err(e) = self.ensure_loaded(&dev) {
            crate::debug!("omptarget", "spread: device {} is not used: its images did not load: {e}", dev.id);
            spread.refuse(dev.id);
            drop(placed);
            return Some(spread.occupy(default));
        }
        if dev.kernel(host_ptr).is_none() {
            drop(placed);
            return Some(spread.occupy(default));
        }
        if let Err(why) = all_new(&dev.lock_table(), args) {
            crate::debug!(
                "omptarget",
                "spread: target region at {} stays on device {}: on device {}, {why}",
                loc.parse(),
                default.id,
                dev.id
            );
            drop(placed);
            return Some(spread.occupy(default));
        }
        crate::debug!("omptarget", "spread: target region at {} placed on device {}", loc.parse(), dev.id);
        Some(placed)
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
        all_new(&default.lock_table(), args)
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
