//! Trips: data entered on the default device going along with spread regions
//! (`LIBOMPTARGET_SPREAD=1`, docs/cluster.md, "Spreading"; which regions move is in
//! `spread.rs`).
//!
//! A mapping of the default device (its *home*) that nothing at home uses goes on a trip with
//! the first movable region that names it: it is marked busy at home (every construct there
//! that touches it waits, as for data being mapped), mapped on the region's device with no
//! host copy and copied there from home (rank to rank between MPI devices). While it is away,
//! every movable region that names it follows it there, so all the work that may touch it
//! runs on one copy, as at home. When the last of them ends it is copied home, let go where
//! it was, and the constructs waiting at home go on. The host's copy is never read or
//! written on the way, as at home.

use crate::data::{ConstructState, MapArgs, MapError};
use crate::device::DeviceError;
use crate::error::{report, Diagnostic, Lines};
use crate::launch::{KernelLaunch, OFFLOAD_SUCCESS};
use crate::map_type::{self as mt, has};
use crate::spread::{Placement, Spread, Stay};
use crate::table::{Lookup, MappingTable};
use crate::{DeviceCtx, Failed, Loc, Runtime};
use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

/// A mapping of a default device away on another device.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Trip {
    /// The device it is on.
    pub to: i32,
    /// Regions using it there, the one that took it included.
    pub users: u32,
    /// Its bytes have arrived there: regions may follow it.
    pub ready: bool,
    /// Its length in bytes.
    pub size: usize,
}

/// The trips of every default device, by (device, host begin of the mapping).
pub(crate) type Trips = HashMap<(i32, usize), Trip>;

/// What a movable region needs of data entered on its default device.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct Need {
    /// Mappings at home it takes along: (host begin, bytes).
    pub take: Vec<(usize, usize)>,
    /// Mappings away on device `to` that it follows (host begins).
    pub follow: Vec<usize>,
    /// Where the data it follows is.
    pub to: Option<i32>,
    /// The region's entries that name that data, and the attach entries that point into it.
    pub entries: Vec<usize>,
}

impl Need {
    /// Every mapping the region uses on a trip.
    fn keys(&self) -> impl Iterator<Item = usize> + '_ {
        self.take.iter().map(|t| t.0).chain(self.follow.iter().copied())
    }
}

/// Whether the mapping at `key` may go on a trip now: one reference (nothing at home uses it
/// beyond the directive that entered it), not being mapped or updated, memory the runtime
/// allocated, and no way to reach it that the runtime would not see: no attached pointer
/// inside it, none of another mapping pointing into it, its device address never handed out.
pub(crate) fn quiet(table: &MappingTable, key: usize, exposed: impl Fn(usize) -> bool) -> bool {
    let Some(e) = table.get(key) else { return false };
    let points_in = |o: &crate::table::MapEntry| {
        o.shadows
            .iter()
            .any(|s| s.pointee.wrapping_sub(e.begin) < e.size() || s.tgt_val.wrapping_sub(e.tgt_begin) < e.size())
    };
    e.total_rc() == 1
        && e.owns_memory
        && e.shadows.is_empty()
        && !table.is_busy(e.begin, e.size())
        && !exposed(key)
        && !table.iter().any(points_in)
}

/// Sorts a movable region's entries whose data is not new at home (`new` says which are,
/// by section and pointer): each must name data inside one mapping that may go along (or
/// already went) by itself, not through a member or attached pointer, and all it follows
/// must be on one device; attach entries must point into that data.
pub(crate) fn classify_home(
    table: &MappingTable,
    trips: &Trips,
    home: i32,
    args: &MapArgs,
    new: impl Fn(usize, usize) -> bool,
    exposed: impl Fn(usize) -> bool,
) -> Result<Need, Stay> {
    let mut need = Need::default();
    let mut attached = Vec::new();
    for i in (0..args.len()).filter(|&i| crate::spread::maps_data(args.types[i])) {
        let (ty, begin, size) = (args.types[i], args.begins[i], args.sizes[i].max(0) as usize);
        let pointer = has(ty, mt::PTR_AND_OBJ) || has(ty, mt::ATTACH);
        let pointer_new = !pointer || new(args.bases[i], std::mem::size_of::<usize>());
        if new(begin, size) && pointer_new {
            continue;
        }
        if !pointer_new {
            return Err(Stay::Present(i));
        }
        if has(ty, mt::ATTACH) {
            // (clang 22: a pointer variable attached to the section it names)
            attached.push(i);
            continue;
        }
        let whole_entry = ty & (mt::PTR_AND_OBJ | mt::MEMBER_OF) == 0 && size > 0;
        let Lookup::Contained(k) = table.lookup(begin, size) else { return Err(Stay::Present(i)) };
        if !whole_entry {
            return Err(Stay::Present(i));
        }
        match trips.get(&(home, k)) {
            Some(t) if t.ready => {
                if need.to.is_some_and(|to| to != t.to) {
                    return Err(Stay::Scattered);
                }
                need.to = Some(t.to);
                if !need.follow.contains(&k) {
                    need.follow.push(k);
                }
            }
            Some(_) => return Err(Stay::Present(i)),
            None if quiet(table, k, &exposed) => {
                if !need.take.iter().any(|t| t.0 == k) {
                    need.take.push((k, table.get(k).map_or(0, |e| e.size())));
                }
            }
            None => return Err(Stay::Present(i)),
        }
        need.entries.push(i);
    }
    for i in attached {
        let into = table.lookup(args.begins[i], args.sizes[i].max(0) as usize).key();
        if !into.is_some_and(|k| need.keys().any(|n| n == k)) {
            return Err(Stay::Present(i));
        }
        need.entries.push(i);
    }
    Ok(need)
}

/// One mapping as a map array of its own, map type 0: `alloc` when entered, `release` when
/// left (no copy from or to the host either way).
struct Section {
    bases: [usize; 1],
    begins: [usize; 1],
    sizes: [i64; 1],
    types: [i64; 1],
}

impl Section {
    fn new(begin: usize, size: usize) -> Self {
        Section { bases: [begin], begins: [begin], sizes: [size as i64], types: [0] }
    }

    fn args(&mut self) -> MapArgs<'_> {
        // SAFETY: map type 0 reads and writes no host byte: the section is only a range the
        // table records (a mapping of the default device, whose host memory the program owns).
        unsafe { MapArgs::new(&mut self.bases, &self.begins, &self.sizes, &self.types, None, None) }
    }
}

/// A trip that failed.
enum TripError {
    /// Mapping or letting go of the data on the region's device.
    Map(MapError),
    /// Its bytes between the two devices.
    Copy { begin: usize, len: usize, from: i32, to: i32, source: DeviceError },
    /// The mapping was no longer on a device.
    Gone { begin: usize, device: i32 },
}

impl Diagnostic for TripError {
    fn write_lines(&self, out: &mut Lines<'_>) -> fmt::Result {
        match self {
            TripError::Map(e) => e.write_lines(out),
            TripError::Copy { begin, len, from, to, source } => {
                out.error(format_args!(
                    "spreading: copying the data entered at 0x{begin:x} ({len} bytes) from device {from} to device {to} failed: {source}"
                ))?;
                source.write_lost_during_op(out)
            }
            TripError::Gone { begin, device } => {
                out.error(format_args!("spreading: the data entered at 0x{begin:x} is no longer on device {device}"))
            }
        }
    }
}

impl Runtime {
    /// Books the trips a region placed on device `to` needs, under `home`'s table lock: the
    /// mappings it takes must still be quiet, those it follows still there and nobody at home
    /// waiting for them (they then come home first). `false` when that changed since the
    /// placement looked: the region then runs at home.
    pub(crate) fn book_trips(&self, spread: &Spread, home: &DeviceCtx, to: i32, need: &Need) -> bool {
        let mut table = home.lock_table();
        let mut trips = spread.trips.lock();
        let exposed = |k| spread.exposed(home.id, k);
        if need.take.iter().any(|&(k, _)| trips.contains_key(&(home.id, k)) || !quiet(&table, k, exposed)) {
            return false;
        }
        let here = |k: &usize| trips.get(&(home.id, *k)).is_some_and(|t| t.to == to && t.ready);
        if !need.follow.iter().all(here) || (!need.follow.is_empty() && table.waiters > 0) {
            return false;
        }
        for &(k, size) in &need.take {
            table.mark_busy(k);
            trips.insert((home.id, k), Trip { to, users: 1, ready: false, size });
        }
        for k in &need.follow {
            if let Some(t) = trips.get_mut(&(home.id, *k)) {
                t.users += 1;
            }
        }
        true
    }

    /// Runs a spread region on its device with the entered data it needs there: what it
    /// takes is sent first; when that fails, or the device cannot be used after all, the
    /// region runs at home, as without spreading (after its data came back). When the data
    /// cannot be copied home, that is the region's failure, under the offload policy.
    pub(crate) fn target_carried(
        &self,
        loc: Loc,
        host_ptr: usize,
        launch: &mut KernelLaunch,
        placed: &Placement,
        home: &Arc<DeviceCtx>,
    ) -> i32 {
        let (dev, spread, need) = (&placed.device, placed.spread, &placed.need);
        if let Err(e) = self.send_trips(spread, home, dev, need) {
            crate::debug!(
                "omptarget",
                "spread: target region at {} runs on device {} after all: {}",
                loc.parse(),
                home.id,
                DebugText(&e)
            );
            let _ = self.end_trips(spread, home, dev, need);
            return self.target_kernel(loc, i64::from(home.id), host_ptr, launch);
        }
        let rc = self.target_kernel(loc, i64::from(dev.id), host_ptr, launch);
        let ended = self.end_trips(spread, home, dev, need);
        if rc != OFFLOAD_SUCCESS {
            // The device could not be used at all (lost since the placement): nothing ran.
            // The host version would compute on the host's copy, not the data at home, so the
            // region runs at home, as it would have without spreading.
            return self.target_kernel(loc, i64::from(home.id), host_ptr, launch);
        }
        if let Err(e) = ended {
            report(&e);
            self.handle_outcome(Err(Failed), loc);
        }
        rc
    }

    /// Maps what the region takes on `dev` and copies it there from home; then others may
    /// follow it.
    fn send_trips(&self, spread: &Spread, home: &DeviceCtx, dev: &DeviceCtx, need: &Need) -> Result<(), TripError> {
        for &(begin, size) in &need.take {
            self.data_begin(dev, &mut Section::new(begin, size).args(), false, &mut ConstructState::default())
                .map_err(TripError::Map)?;
            self.copy_mapping(home, dev, begin, size)?;
            if let Some(t) = spread.trips.lock().get_mut(&(home.id, begin)) {
                t.ready = true;
            }
        }
        Ok(())
    }

    /// The region no longer uses its trips; the last user of each brings it home: copied
    /// back and let go there (unless it never arrived, or its device was lost: home then
    /// holds what it held before, as after a failed region), and unmarked at home.
    fn end_trips(&self, spread: &Spread, home: &DeviceCtx, dev: &DeviceCtx, need: &Need) -> Result<(), TripError> {
        let mut back = Vec::new();
        {
            let mut trips = spread.trips.lock();
            for k in need.keys() {
                let Some(t) = trips.get_mut(&(home.id, k)) else { continue };
                t.users -= 1;
                if t.users == 0 {
                    back.push((k, trips.remove(&(home.id, k)).expect("present")));
                }
            }
        }
        let mut result = Ok(());
        for (begin, trip) in back {
            debug_assert_eq!(trip.to, dev.id);
            // A lost device's failure was said where it was met (once): nothing more to do
            // there, and home keeps what it held.
            let lost = dev.lost().is_some();
            if trip.ready && !lost {
                result = result.and(self.copy_mapping(dev, home, begin, trip.size));
            }
            if !lost && matches!(dev.lock_table().lookup(begin, trip.size), Lookup::Contained(_)) {
                let released = self.data_end(dev, &mut Section::new(begin, trip.size).args(), false);
                result = result.and(released.map_err(TripError::Map));
            }
            home.clear_busy(&[begin]);
        }
        result
    }

    /// Copies the mapping at host `begin` from `from`'s copy to `to`'s.
    fn copy_mapping(&self, from: &DeviceCtx, to: &DeviceCtx, begin: usize, len: usize) -> Result<(), TripError> {
        let src = device_copy(from, begin, len).ok_or(TripError::Gone { begin, device: from.id })?;
        let dst = device_copy(to, begin, len).ok_or(TripError::Gone { begin, device: to.id })?;
        // SAFETY: `src` and `dst` are the device copies of the same `len` host bytes, each
        // inside a mapping of its device that the trip holds until it ends.
        unsafe { from.copy_to_device(to, dst, src, len) }.map_err(|source| TripError::Copy {
            begin,
            len,
            from: from.id,
            to: to.id,
            source,
        })
    }
}

/// The device address of host range `[begin, begin+len)` on `dev`, if it lies in one mapping.
fn device_copy(dev: &DeviceCtx, begin: usize, len: usize) -> Option<usize> {
    let table = dev.lock_table();
    match table.lookup(begin, len) {
        Lookup::Contained(k) => table.get(k).map(|e| e.translate(begin)),
        _ => None,
    }
}

/// A trip error as one line of debug text.
struct DebugText<'a>(&'a TripError);

impl fmt::Display for DebugText<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut first = true;
        self.0.write_lines(&mut Lines::new(&mut |_, text| {
            if !std::mem::take(&mut first) {
                f.write_str("; ")?;
            }
            write!(f, "{text}")
        }))
    }
}

#[cfg(test)]
#[path = "carry_tests.rs"]
mod tests;
