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
//! Data entered on the default device (`target enter data`, an enclosing `target data`)
//! is *carried*: an entry that names a whole such mapping is copied from the default device
//! to the region's device before the region (rank to rank between MPI devices) and back
//! after it (`carry.rs`), so the default device holds what the region left there, as if it
//! had run there. Any other entry that finds data on the default device (a part of a
//! mapping, a bare pointer, a member or attached pointer) keeps the region home.
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
    /// or another region in flight), and the entry is not a whole mapping that could be
    /// carried (a part of one, a bare pointer, a member or an attached pointer).
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
            Stay::Present(i) => write!(f, "map entry {i} is already on the device, and not as a whole mapping"),
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
    /// The mappings that regions in flight carried to a device, by device and host address
    /// (counted): another region may carry the same data there (it reads it too, or the
    /// program races), but never onto data the program mapped on that device itself.
    carries: Mutex<HashMap<(i32, usize), u32>>,
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
    /// Entries that name data entered on the default device, which the region reaches there
    /// and must be carried to `device` and back (`carry.rs`); empty when `device` is the
    /// default device.
    pub carried: Vec<usize>,
    /// The default device, where the carried entries' data lives.
    pub home: Option<Arc<DeviceCtx>>,
    spread: &'s Spread,
    mapped: Vec<usize>,
    /// The host addresses of the carried mappings, counted in [`Spread::carries`].
    carried_at: Vec<usize>,
}

impl Drop for Placement<'_> {
    fn drop(&mut self) {
        let id = self.device.id;
        self.spread.release(id);
        uncount(&self.spread.own, id, &self.mapped);
        uncount(&self.spread.carries, id, &self.carried_at);
    }
}

/// Counts `addresses` on device `id` in `counts`.
fn count(counts: &Mutex<HashMap<(i32, usize), u32>>, id: i32, addresses: &[usize]) {
    if addresses.is_empty() {
        return;
    }
    let mut counts = counts.lock();
    for &a in addresses {
        *counts.entry((id, a)).or_insert(0) += 1;
    }
}

/// Takes back what [`count`] counted.
fn uncount(counts: &Mutex<HashMap<(i32, usize), u32>>, id: i32, addresses: &[usize]) {
    if addresses.is_empty() {
        return;
    }
    let mut counts = counts.lock();
    for &a in addresses {
        if let Some(n) = counts.get_mut(&(id, a)) {
            *n -= 1;
            if *n == 0 {
                counts.remove(&(id, a));
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
        Placement { device, carried: Vec::new(), home: None, spread: self, mapped: Vec::new(), carried_at: Vec::new() }
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

    /// Places a movable region on `device`, the data it brings from the host counted as its
    /// own there (not the `carried` entries: that data belongs to the default device `home`).
    fn moved_to(
        &self,
        device: Arc<DeviceCtx>,
        home: &Arc<DeviceCtx>,
        args: &MapArgs,
        carried: Vec<usize>,
    ) -> Placement<'_> {
        let mapped = mapped_addresses(args, &carried);
        count(&self.own, device.id, &mapped);
        if Arc::ptr_eq(&device, home) || carried.is_empty() {
            return Placement { device, carried: Vec::new(), home: None, spread: self, mapped, carried_at: Vec::new() };
        }
        let carried_at: Vec<usize> = carried.iter().map(|&i| args.begins[i]).collect();
        count(&self.carries, device.id, &carried_at);
        Placement { device, carried, home: Some(home.clone()), spread: self, mapped, carried_at }
    }

    /// The host addresses of the mappings that regions in flight carried to `id` (a snapshot).
    fn carried_to(&self, id: i32) -> Vec<usize> {
        self.carries.lock().keys().filter(|k| k.0 == id).map(|k| k.1).collect()
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
/// and attach entries write into (but not its `carried` entries').
fn mapped_addresses(args: &MapArgs, carried: &[usize]) -> Vec<usize> {
    let mut v = Vec::new();
    for i in (0..args.len()).filter(|&i| maps_data(args.types[i]) && !carried.contains(&i)) {
        v.push(args.begins[i]);
        if has(args.types[i], mt::PTR_AND_OBJ) || has(args.types[i], mt::ATTACH) {
            v.push(args.bases[i]);
        }
    }
    v
}

/// Whether every entry that maps data is new in `table`, or a section inside a mapping that
/// starts at one of `own` (made by a movable region in flight), or (with `carry`) names a
/// whole mapping of `table` that may be carried, or attaches a new pointer to data carried;
/// `Ok` with the carried entries, or `Err(Present(i))` for the first entry that is none of
/// these. A pointer that a member or attach entry writes into must be new as well.
fn classify(table: &MappingTable, own: &[usize], args: &MapArgs, carry: bool) -> Result<Vec<usize>, Stay> {
    classify_but(table, own, args, carry, &[])
}

/// [`classify`], leaving out the entries in `skip`.
fn classify_but(
    table: &MappingTable,
    own: &[usize],
    args: &MapArgs,
    carry: bool,
    skip: &[usize],
) -> Result<Vec<usize>, Stay> {
    let mut carried = Vec::new();
    let mut attached = Vec::new();
    // A bare pointer (zero-length section) that finds another region's data would be
    // translated to that data's device copy on its device, and to nothing elsewhere.
    let new = |begin: usize, size: usize| match table.lookup(begin, size) {
        Lookup::NotFound => true,
        Lookup::Contained(k) => size > 0 && own.contains(&k),
        Lookup::Extends(_) => false,
    };
    for i in (0..args.len()).filter(|&i| maps_data(args.types[i]) && !skip.contains(&i)) {
        let ty = args.types[i];
        // Mapped data, a zero-length section or bare pointer, a lambda's captured pointer
        // (LITERAL without TARGET_PARAM).
        let data_new = new(args.begins[i], args.sizes[i].max(0) as usize);
        let pointer_new =
            !(has(ty, mt::PTR_AND_OBJ) || has(ty, mt::ATTACH)) || new(args.bases[i], std::mem::size_of::<usize>());
        if data_new && pointer_new {
            continue;
        }
        if carry && pointer_new && carriable(table, ty, args.begins[i], args.sizes[i]) {
            carried.push(i);
        } else if carry && pointer_new && has(ty, mt::ATTACH) {
            // (clang 22: a pointer variable attached to the section it names)
            attached.push(i);
        } else {
            return Err(Stay::Present(i));
        }
    }
    // An attach entry's target must lie in data the region carries: the pointer is then
    // attached to the carried copy where the region runs, as it is at home.
    for i in attached {
        let carried_here = match table.lookup(args.begins[i], args.sizes[i].max(0) as usize) {
            Lookup::Contained(k) => carried.iter().any(|&c| args.begins[c] == k),
            _ => false,
        };
        if !carried_here {
            return Err(Stay::Present(i));
        }
    }
    Ok(carried)
}

/// Whether an entry names exactly one whole mapping of `table` by itself: not a part of one
/// (a kernel may reach past its section into the rest, which a copy of the section would
/// not hold), not a member or attached pointer (their pointers need translating), not a
/// zero-length section.
fn carriable(table: &MappingTable, ty: i64, begin: usize, size: i64) -> bool {
    let Ok(size) = usize::try_from(size) else { return false };
    if size == 0 || ty & (mt::PTR_AND_OBJ | mt::ATTACH | mt::MEMBER_OF) != 0 {
        return false;
    }
    match table.lookup(begin, size) {
        Lookup::Contained(k) => {
            table.get(k).is_some_and(|e| e.begin == begin && e.size() == size && e.shadows.is_empty())
        }
        _ => false,
    }
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
        let carried = match self.movable(spread, &default, args) {
            Ok(carried) => carried,
            Err(why) => {
                crate::debug!(
                    "omptarget",
                    "spread: target region at {} stays on device {}: {why}",
                    loc.parse(),
                    default.id
                );
                return Some(spread.occupy(default));
            }
        };
        let candidates: Vec<Arc<DeviceCtx>> =
            self.devices().into_iter().filter(|d| d.plugin == default.plugin && d.lost().is_none()).collect();
        let mut tried = Vec::new();
        while let Some(dev) = spread.least_loaded(&candidates, &tried) {
            if Arc::ptr_eq(&dev, &default) {
                crate::debug!("omptarget", "spread: target region at {} placed on device {}", loc.parse(), dev.id);
                return Some(spread.moved_to(dev, &default, args, carried));
            }
            match self.can_take(spread, &dev, host_ptr, args, &carried) {
                Ok(()) => {
                    crate::debug!(
                        "omptarget",
                        "spread: target region at {} placed on device {}{}",
                        loc.parse(),
                        dev.id,
                        Carrying(&carried, default.id)
                    );
                    return Some(spread.moved_to(dev, &default, args, carried));
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
        Some(spread.moved_to(default.clone(), &default, args, carried))
    }

    /// Whether `dev`, another device of the default device's kind, can run a movable
    /// region: its images load, it has the kernel, and the region's data is new there (the
    /// `carried` entries' data not there, or only as other regions in flight carried it).
    fn can_take(
        &self,
        spread: &Spread,
        dev: &DeviceCtx,
        host_ptr: usize,
        args: &MapArgs,
        carried: &[usize],
    ) -> Result<(), String> {
        if let Err(e) = self.ensure_loaded(dev) {
            spread.refuse(dev.id);
            return Err(format!("its images did not load: {e}"));
        }
        if dev.kernel(host_ptr).is_none() {
            return Err("it has no such kernel".into());
        }
        let own = spread.own(dev.id);
        let carries = if carried.is_empty() { Vec::new() } else { spread.carried_to(dev.id) };
        // The carried entries, and the pointers attached to them, are checked below.
        let in_carried = |i: usize| {
            carried.iter().any(|&c| args.begins[i].wrapping_sub(args.begins[c]) < args.sizes[c].max(0) as usize)
        };
        let skip: Vec<usize> = (0..args.len())
            .filter(|&i| carried.contains(&i) || (has(args.types[i], mt::ATTACH) && in_carried(i)))
            .collect();
        let table = dev.lock_table();
        classify_but(&table, &own, args, false, &skip).map_err(|why| why.to_string())?;
        let elsewhere = |i: usize| match table.lookup(args.begins[i], args.sizes[i].max(0) as usize) {
            Lookup::NotFound => true,
            Lookup::Contained(k) => k == args.begins[i] && carries.contains(&k),
            Lookup::Extends(_) => false,
        };
        match carried.iter().find(|&&i| !elsewhere(i)) {
            Some(i) => Err(format!("map entry {i}, entered on the default device, is mapped on this device too")),
            None => Ok(()),
        }
    }

    /// The rule: whether the region may run on another device of the default device's kind;
    /// `Ok` with the entries whose data must be carried from the default device.
    fn movable(&self, spread: &Spread, default: &DeviceCtx, args: &MapArgs) -> Result<Vec<usize>, Stay> {
        if self.requires_usm() {
            return Err(Stay::SharedMemory);
        }
        if self.has_declare_target_data(spread) {
            return Err(Stay::DeclareTargetData);
        }
        movable_map_types(args)?;
        device_address(&self.api_allocs, default, args)?;
        let own = spread.own(default.id);
        classify(&default.lock_table(), &own, args, true)
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

/// The debug trace's note of carried entries: ", carrying entries 0, 2 from device 4".
struct Carrying<'a>(&'a [usize], i32);

impl fmt::Display for Carrying<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Some((first, rest)) = self.0.split_first() else { return Ok(()) };
        write!(f, ", carrying map entr{} {first}", if rest.is_empty() { "y" } else { "ies" })?;
        for i in rest {
            write!(f, ", {i}")?;
        }
        write!(f, " from device {}", self.1)
    }
}

#[cfg(test)]
#[path = "spread_tests.rs"]
mod tests;
