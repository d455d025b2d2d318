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
//! Data entered on the default device (`target enter data`, an enclosing `target data`) that
//! a region names goes along on a *trip* (`carry.rs`) when nothing else uses it there: it is
//! copied to the region's device (rank to rank between MPI devices), every later region that
//! names it *follows* it there while it is away, every other construct that touches it at
//! home waits, and it is copied home when the last region using it ends. One copy of it is
//! in use at any time, so regions that write disjoint parts of it with no `depend` between
//! them see each other's writes, as at home. A mapping is taken only when the runtime can see
//! every way to reach it: no pointer of another mapping attached to it, none inside it, its
//! device address never handed to the program, one reference (no construct using it now).
//!
//! Placement is least loaded: the device with the fewest regions in flight placed through
//! here, ties taking turns. A HEFT-style list scheduler needs the task graph ahead of time
//! and per-device costs that differ; the runtime sees each task only when libomp releases
//! it, the candidates are devices of one kind, and a moved region copies the same bytes
//! wherever it runs, so the earliest-finishing device is the least loaded one.

use crate::api::Allocations;
use crate::carry::{classify_home, Need, Trips};
use crate::data::MapArgs;
use crate::map_type::{self as mt, has};
use crate::table::{Lookup, MappingTable};
use crate::{DeviceCtx, Loc, Runtime, Target};
use omp_sync::Mutex;
use std::collections::{HashMap, HashSet};
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
    /// or another region in flight), and cannot go along: a part of a mapping reached through
    /// a member or attached pointer, data in use at home, or reachable in ways the runtime
    /// does not see (attached pointers, a device address handed out).
    Present(usize),
    /// The region names entered data that is away on two different devices.
    Scattered,
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
            Stay::Scattered => f.write_str("its entered data is away on two devices"),
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
    /// Mappings of a default device away on trips, by (default device, host begin).
    /// Locked after that device's table when both are (`carry.rs`).
    pub(crate) trips: Mutex<Trips>,
    /// Mappings whose device address the program was handed (`use_device_ptr`/`addr`,
    /// `omp_get_mapped_ptr`), by (device, host begin): it may reach them without naming them,
    /// so they never go on a trip. Locked after the device's table.
    exposed: Mutex<HashSet<(i32, usize)>>,
}

#[derive(Debug, Default, Clone, Copy)]
struct Slot {
    in_flight: u32,
    refused: bool,
}

/// A region's device, counted as in flight there until dropped, with the host addresses
/// its data starts at when it was moved (its own data, see [`Spread::own`]), and the trips
/// of entered data it takes part in.
pub struct Placement<'s> {
    pub device: Arc<DeviceCtx>,
    pub(crate) spread: &'s Spread,
    mapped: Vec<usize>,
    /// The default device the region's entered data lives on, when it goes along.
    pub(crate) home: Option<Arc<DeviceCtx>>,
    /// The entered data that goes along: mappings this region takes there, and all it uses.
    pub(crate) need: Need,
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
    pub(crate) fn occupy(&self, device: Arc<DeviceCtx>) -> Placement<'_> {
        self.count(device.id);
        Placement { device, spread: self, mapped: Vec::new(), home: None, need: Need::default() }
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

    /// Counts a region in flight on `id`.
    fn count(&self, id: i32) {
        let mut slots = self.slots.lock();
        let i = id as usize;
        if slots.len() <= i {
            slots.resize(i + 1, Slot::default());
        }
        slots[i].in_flight += 1;
    }

    /// Whether device `a` has more regions in flight than `b` has besides the one just
    /// counted there.
    fn busier(&self, a: i32, b: i32) -> bool {
        let slots = self.slots.lock();
        let n = |id: i32| slots.get(id as usize).map_or(0, |s| s.in_flight);
        n(a) >= n(b)
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
    /// own there (not the entered data it `need`s: that lives at `home` and goes along).
    fn moved_to(
        &self,
        device: Arc<DeviceCtx>,
        args: &MapArgs,
        home: Option<Arc<DeviceCtx>>,
        need: Need,
    ) -> Placement<'_> {
        let mapped = mapped_addresses(args, &need.entries);
        let mut own = self.own.lock();
        for &begin in &mapped {
            *own.entry((device.id, begin)).or_insert(0) += 1;
        }
        drop(own);
        Placement { device, spread: self, mapped, home, need }
    }

    /// Notes that the program was handed the device address of `dev`'s mapping at `key`.
    pub(crate) fn expose(&self, dev: i32, key: usize) {
        self.exposed.lock().insert((dev, key));
    }

    /// Whether the program was handed the device address of `dev`'s mapping at `key`.
    pub(crate) fn exposed(&self, dev: i32, key: usize) -> bool {
        self.exposed.lock().contains(&(dev, key))
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
pub(crate) fn maps_data(ty: i64) -> bool {
    !has(ty, mt::PRIVATE) && !has(ty, mt::LITERAL | mt::TARGET_PARAM)
}

/// The host addresses a region's data starts at: its sections and the pointers its member
/// and attach entries write into (not the entries in `skip`: entered data that goes along).
fn mapped_addresses(args: &MapArgs, skip: &[usize]) -> Vec<usize> {
    let mut v = Vec::new();
    for i in (0..args.len()).filter(|&i| maps_data(args.types[i]) && !skip.contains(&i)) {
        v.push(args.begins[i]);
        if has(args.types[i], mt::PTR_AND_OBJ) || has(args.types[i], mt::ATTACH) {
            v.push(args.bases[i]);
        }
    }
    v
}

/// Whether a section or bare pointer `[begin, begin+size)` is new in `table`, or inside a
/// mapping that starts at one of `own` (made by a movable region in flight).
fn is_new(table: &MappingTable, own: &[usize], begin: usize, size: usize) -> bool {
    // A bare pointer (zero-length section) that finds another region's data would be
    // translated to that data's device copy on its device, and to nothing elsewhere.
    match table.lookup(begin, size) {
        Lookup::NotFound => true,
        Lookup::Contained(k) => size > 0 && own.contains(&k),
        Lookup::Extends(_) => false,
    }
}

/// Whether every entry that maps data, but those in `skip`, is new in `table` ([`is_new`]);
/// `Err(Present(i))` for the first that is not. A pointer that a member or attach entry
/// writes into must be new as well.
fn all_new_but(table: &MappingTable, own: &[usize], args: &MapArgs, skip: &[usize]) -> Result<(), Stay> {
    for i in (0..args.len()).filter(|&i| maps_data(args.types[i]) && !skip.contains(&i)) {
        let ty = args.types[i];
        // Mapped data, a zero-length section or bare pointer, a lambda's captured pointer
        // (LITERAL without TARGET_PARAM).
        let mut ok = is_new(table, own, args.begins[i], args.sizes[i].max(0) as usize);
        if has(ty, mt::PTR_AND_OBJ) || has(ty, mt::ATTACH) {
            ok &= is_new(table, own, args.bases[i], std::mem::size_of::<usize>());
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
        let stay = |why: Stay| {
            crate::debug!(
                "omptarget",
                "spread: target region at {} stays on device {}: {why}",
                loc.parse(),
                default.id
            );
            Some(spread.occupy(default.clone()))
        };
        let need = match self.movable(spread, &default, args) {
            Ok(need) => need,
            Err(why) => return stay(why),
        };
        let candidates: Vec<Arc<DeviceCtx>> = self
            .devices()
            .into_iter()
            .filter(|d| d.plugin == default.plugin && d.lost().is_none() && need.to.is_none_or(|to| d.id == to))
            .collect();
        let mut tried = Vec::new();
        while let Some(dev) = spread.least_loaded(&candidates, &tried) {
            if Arc::ptr_eq(&dev, &default) {
                crate::debug!("omptarget", "spread: target region at {} placed on device {}", loc.parse(), dev.id);
                return Some(spread.moved_to(dev, args, None, need));
            }
            match self.can_take(spread, &dev, host_ptr, args, &need) {
                Ok(()) if need.entries.is_empty() => {
                    crate::debug!("omptarget", "spread: target region at {} placed on device {}", loc.parse(), dev.id);
                    return Some(spread.moved_to(dev, args, None, need));
                }
                // Taking data along costs two copies of it: worth it only to leave a device
                // that is busier than this one (ties stay home). Following data is free.
                Ok(()) if !need.take.is_empty() && need.follow.is_empty() && !spread.busier(default.id, dev.id) => {
                    crate::debug!(
                        "omptarget",
                        "spread: target region at {} placed on device {}: its entered data stays there (device {} is as busy)",
                        loc.parse(),
                        default.id,
                        dev.id
                    );
                    spread.release(dev.id);
                    spread.count(default.id);
                    return Some(spread.moved_to(default, args, None, need));
                }
                Ok(()) if self.book_trips(spread, &default, dev.id, &need) => {
                    crate::debug!(
                        "omptarget",
                        "spread: target region at {} placed on device {}, its entered data along ({} taken, {} followed)",
                        loc.parse(),
                        dev.id,
                        need.take.len(),
                        need.follow.len()
                    );
                    return Some(spread.moved_to(dev, args, Some(default), need));
                }
                Ok(()) => {
                    spread.release(dev.id);
                    return stay(Stay::Present(need.entries[0]));
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
        if need.to.is_some() {
            return stay(Stay::Present(need.entries[0]));
        }
        Some(spread.moved_to(default, args, None, need))
    }

    /// Whether `dev`, another device of the default device's kind, can run a movable
    /// region: its images load, it has the kernel, and the region's data is new there (the
    /// entered data it takes not there at all, what it follows there on its trip).
    fn can_take(
        &self,
        spread: &Spread,
        dev: &DeviceCtx,
        host_ptr: usize,
        args: &MapArgs,
        need: &Need,
    ) -> Result<(), String> {
        if let Err(e) = self.ensure_loaded(dev) {
            spread.refuse(dev.id);
            return Err(format!("its images did not load: {e}"));
        }
        if dev.kernel(host_ptr).is_none() {
            return Err("it has no such kernel".into());
        }
        let own = spread.own(dev.id);
        let table = dev.lock_table();
        all_new_but(&table, &own, args, &need.entries).map_err(|why| why.to_string())?;
        match need.take.iter().find(|&&(begin, size)| table.lookup(begin, size) != Lookup::NotFound) {
            Some((begin, _)) => Err(format!("the data entered at 0x{begin:x} is mapped on this device too")),
            None => Ok(()),
        }
    }

    /// The rule: whether the region may run on another device of the default device's kind;
    /// `Ok` with the entered data that goes along with it.
    pub(crate) fn movable(&self, spread: &Spread, default: &DeviceCtx, args: &MapArgs) -> Result<Need, Stay> {
        if self.requires_usm() {
            return Err(Stay::SharedMemory);
        }
        if self.has_declare_target_data(spread) {
            return Err(Stay::DeclareTargetData);
        }
        movable_map_types(args)?;
        device_address(&self.api_allocs, default, args)?;
        let own = spread.own(default.id);
        let table = default.lock_table();
        let trips = spread.trips.lock();
        let new = |begin, size| is_new(&table, &own, begin, size);
        classify_home(&table, &trips, default.id, args, new, |k| spread.exposed(default.id, k))
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
pub(crate) mod tests;
