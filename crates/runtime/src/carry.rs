//! Carrying data entered on the default device to the device a spread region moved to, and
//! back (`LIBOMPTARGET_SPREAD=1`, docs/cluster.md, "Spreading"; the rule is in `spread.rs`).
//!
//! The region's carried entries each name one whole mapping of the default device (its
//! *home*). For the region's time the runtime holds those mappings at home (as the region's
//! own mapping of them would there), maps them on the region's device with no host copy,
//! copies their bytes from home to the device (directly where the backends can: rank to rank
//! between MPI devices), runs the region there (its map clauses find the data present, as
//! they would have at home), copies the bytes back home and lets both go. The host copy is
//! never read or written on the way, as at home.

use crate::data::{ConstructState, MapArgs, MapError};
use crate::device::DeviceError;
use crate::error::{report, Diagnostic, Lines};
use crate::launch::{KernelLaunch, OFFLOAD_SUCCESS};
use crate::table::Lookup;
use crate::{DeviceCtx, Failed, Loc, Runtime};
use std::fmt;
use std::sync::Arc;

/// The carried entries' sections as map arrays of their own, each with map type 0: `alloc`
/// when entered, `release` when left (no copy from or to the host either way).
struct Sections {
    /// The region's entry numbers, for messages.
    entries: Vec<usize>,
    bases: Vec<usize>,
    begins: Vec<usize>,
    sizes: Vec<i64>,
    types: Vec<i64>,
}

impl Sections {
    fn new(args: &MapArgs, carried: &[usize]) -> Self {
        let begins: Vec<usize> = carried.iter().map(|&i| args.begins[i]).collect();
        Sections {
            entries: carried.to_vec(),
            bases: begins.clone(),
            sizes: carried.iter().map(|&i| args.sizes[i]).collect(),
            types: vec![0; carried.len()],
            begins,
        }
    }

    fn args(&mut self) -> MapArgs<'_> {
        // SAFETY: each section is a whole entry of the running region's own map arrays
        // (`carriable`), which `MapArgs::new`'s promise already covers until the region ends;
        // map type 0 reads and writes no host byte.
        unsafe { MapArgs::new(&mut self.bases, &self.begins, &self.sizes, &self.types, None, None) }
    }

    /// Section `k`'s length in bytes (positive: `carriable` checked it).
    fn len(&self, k: usize) -> usize {
        self.sizes[k].max(0) as usize
    }
}

/// A carry that failed.
enum CarryError {
    /// Holding or mapping the sections on a device.
    Map(MapError),
    /// A section's bytes between the two devices.
    Copy { entry: usize, len: usize, from: i32, to: i32, source: DeviceError },
    /// A section was no longer mapped on a device (the program let it go meanwhile).
    Gone { entry: usize, device: i32 },
}

impl Diagnostic for CarryError {
    fn write_lines(&self, out: &mut Lines<'_>) -> fmt::Result {
        match self {
            CarryError::Map(e) => e.write_lines(out),
            CarryError::Copy { entry, len, from, to, source } => {
                out.error(format_args!(
                    "spreading: copying map entry {entry} ({len} bytes) from device {from} to device {to} failed: {source}"
                ))?;
                source.write_lost_during_op(out)
            }
            CarryError::Gone { entry, device } => {
                out.error(format_args!("spreading: map entry {entry} is no longer mapped on device {device}"))
            }
        }
    }
}

impl Runtime {
    /// Runs a spread region on `dev` whose `carried` entries' data lives on `home` (the
    /// default device): carried there, run, carried back. When the data cannot be carried
    /// there, the region runs at home instead (nothing was changed yet); when it cannot be
    /// carried back, that is the region's failure, under the offload policy.
    pub(crate) fn target_carried(
        &self,
        loc: Loc,
        host_ptr: usize,
        launch: &mut KernelLaunch,
        dev: &Arc<DeviceCtx>,
        home: &Arc<DeviceCtx>,
        carried: &[usize],
    ) -> i32 {
        let mut sections = Sections::new(&launch.args, carried);
        if let Err(e) = self.carry_there(home, dev, &mut sections) {
            crate::debug!(
                "omptarget",
                "spread: target region at {} runs on device {} after all: {}",
                loc.parse(),
                home.id,
                DebugText(&e)
            );
            return self.target_kernel(loc, i64::from(home.id), host_ptr, launch);
        }
        let rc = self.target_kernel(loc, i64::from(dev.id), host_ptr, launch);
        if rc != OFFLOAD_SUCCESS {
            // The device could not be used at all (lost since the placement): nothing ran.
            // The host version would compute on the host's copy, not the data at home, so the
            // region runs at home, as it would have without spreading.
            let _ = self.let_go(dev, &mut sections).and(self.let_go(home, &mut sections));
            return self.target_kernel(loc, i64::from(home.id), host_ptr, launch);
        }
        // A region whose device was lost while it ran has failed already (and said so); its
        // data at home is what it was before, as a failed region's.
        let back = if dev.lost().is_none() { self.copy_sections(dev, home, &sections) } else { Ok(()) };
        let released = self.let_go(dev, &mut sections).and(self.let_go(home, &mut sections));
        if let Err(e) = back.and(released) {
            report(&e);
            self.handle_outcome(Err(Failed), loc);
        }
        rc
    }

    /// Holds the sections at `home`, maps them on `dev` and copies them there; on failure
    /// lets go of what it took.
    fn carry_there(&self, home: &DeviceCtx, dev: &DeviceCtx, sections: &mut Sections) -> Result<(), CarryError> {
        self.data_begin(home, &mut sections.args(), false, &mut ConstructState::default()).map_err(CarryError::Map)?;
        if let Err(e) = self.data_begin(dev, &mut sections.args(), false, &mut ConstructState::default()) {
            let _ = self.let_go(home, sections);
            return Err(CarryError::Map(e));
        }
        self.copy_sections(home, dev, sections).inspect_err(|_| {
            let _ = self.let_go(dev, sections);
            let _ = self.let_go(home, sections);
        })
    }

    /// Releases the sections on `dev` (map type 0: no copy to the host).
    fn let_go(&self, dev: &DeviceCtx, sections: &mut Sections) -> Result<(), CarryError> {
        self.data_end(dev, &mut sections.args(), false).map_err(CarryError::Map)
    }

    /// Copies every section's bytes from `from`'s copy to `to`'s.
    fn copy_sections(&self, from: &DeviceCtx, to: &DeviceCtx, sections: &Sections) -> Result<(), CarryError> {
        for k in 0..sections.begins.len() {
            let (begin, len, entry) = (sections.begins[k], sections.len(k), sections.entries[k]);
            let src = device_copy(from, begin, len).ok_or(CarryError::Gone { entry, device: from.id })?;
            let dst = device_copy(to, begin, len).ok_or(CarryError::Gone { entry, device: to.id })?;
            // SAFETY: `src` and `dst` are the device copies of the same `len` host bytes, each
            // inside a mapping of its device that this carry holds until it lets go.
            unsafe { from.copy_to_device(to, dst, src, len) }.map_err(|source| CarryError::Copy {
                entry,
                len,
                from: from.id,
                to: to.id,
                source,
            })?;
        }
        Ok(())
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

/// A carry error as one line of debug text.
struct DebugText<'a>(&'a CarryError);

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
