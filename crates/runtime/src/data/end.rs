//! targetDataEnd.

use super::diagnose::{MapError, NotPresent};
use super::MapArgs;
use crate::device::DeviceError;
use crate::map_type::{self as mt, has, member_of};
use crate::table::{Lookup, MapEntry};
use crate::trace::{Event, RcChange};
use crate::{DeviceCtx, Runtime};
use omp_plugin::host_memory;
use smallvec::SmallVec;

/// The entries a construct's end may copy back or remove: (table key, copied back, delete).
/// Inline for the usual few, so that unmapping allocates nothing.
pub(super) type Removals = SmallVec<[(usize, bool, bool); 8]>;

impl Runtime {
    /// targetDataEnd: release every entry, in reverse order; copy back on the last
    /// reference (or `always`); free storage once the whole construct is done.
    #[link_section = ".text.hot.omp_launch"]
    pub fn data_end(&self, dev: &DeviceCtx, args: &mut MapArgs, from_mapper: bool) -> Result<(), MapError> {
        let mut removals = Removals::new();
        let result = self.data_end_entries(dev, args, from_mapper, &mut removals);
        if removals.is_empty() {
            return result;
        }
        let mut removed: SmallVec<[MapEntry; 2]> = SmallVec::new();
        let mut table = dev.lock_table();
        for (key, copied_back, delete) in removals {
            let Some(e) = table.get_mut(key) else { continue };
            if copied_back {
                for s in &e.shadows {
                    // SAFETY: a shadow's host address is a pointer inside a mapped object
                    // whose data was just copied back into the program's memory.
                    unsafe { host_memory::write_ptr(s.host_addr, s.host_val) };
                }
            }
            if delete && e.total_rc() == 0 {
                removed.push(table.remove(key).expect("key"));
            }
        }
        drop(table);
        for e in removed {
            self.release_entry(dev, &e);
        }
        result
    }

    /// Reports a removed entry and frees its device memory (outside the table lock).
    pub(super) fn release_entry(&self, dev: &DeviceCtx, e: &MapEntry) {
        self.emit(&Event::MapRemoved {
            device: dev.id,
            begin: e.begin,
            tgt_begin: e.tgt_begin,
            size: e.size(),
            name: e.name,
        });
        if e.owns_memory {
            if let Err(err) = dev.free_mapping(self, e) {
                // The construct's outcome does not change: said here, once.
                crate::error::report(&DeallocFailed(err));
            }
        }
    }

    #[link_section = ".text.hot.omp_launch"]
    pub(super) fn data_end_entries(
        &self,
        dev: &DeviceCtx,
        args: &mut MapArgs,
        from_mapper: bool,
        removals: &mut Removals,
    ) -> Result<(), MapError> {
        // The table stays locked from one entry to the next until an entry needs a copy back
        // or an event emitted (both done with no lock held).
        let mut held = None;
        for i in (0..args.len()).rev() {
            let ty = args.types[i];
            if ty & (mt::LITERAL | mt::PRIVATE) != 0 || has(ty, mt::ATTACH) {
                continue;
            }
            if args.mapper(i) != 0 {
                held = None;
                let mut comps = self.expand_mapper(args, i);
                self.data_end(dev, &mut comps.args(), true)?;
                continue;
            }
            let begin = args.begins[i];
            let size = args.sizes[i].max(0) as usize;
            let hold = has(ty, mt::OMPX_HOLD);
            let update_ref = (member_of(ty).is_none() || has(ty, mt::PTR_AND_OBJ)) && !(from_mapper && i == 0);
            let must_contain = !has(ty, mt::IMPLICIT);
            let force_delete = has(ty, mt::DELETE);
            // (Waits while the entry is being mapped, or away on a spreading trip.)
            let idle = self.lock_idle(dev, held.take(), &[(begin, size)]);
            let table = held.insert(idle);
            let found = match table.lookup(begin, size) {
                Lookup::Contained(k) => Some(k),
                Lookup::Extends(k) if !must_contain => Some(k),
                _ => None,
            };
            let Some(key) = found else {
                if self.requires_usm() && !has(ty, mt::CLOSE) {
                    continue;
                }
                if has(ty, mt::PRESENT) {
                    let why = NotPresent::new(dev, table, begin, size, args.name(i), false);
                    return Err(MapError::NotPresent(Box::new(why)));
                }
                continue;
            };
            let e = table.get_mut(key).expect("key");
            let is_last = e.dec_should_remove(hold, force_delete);
            if force_delete {
                e.reset_for_delete(hold);
            }
            let mut change = RcChange::Unchanged;
            if update_ref {
                e.decrement(hold);
                change = if force_delete {
                    RcChange::ResetDelayedDeletion
                } else if is_last {
                    RcChange::DecrementedDelayedDeletion
                } else {
                    RcChange::Decremented
                };
            }
            let tgt = e.translate(begin);
            let released = self.observing().then(|| Event::MapReleased {
                device: dev.id,
                begin,
                tgt,
                size,
                dyn_rc: e.dyn_rc,
                hold_rc: e.hold_rc,
                hold,
                change,
                name: args.name(i),
            });
            let copy_back = has(ty, mt::FROM) && (has(ty, mt::ALWAYS) || is_last) && size != 0;
            // Counts only go down during data-end: an entry that is not at zero now cannot be
            // at zero when the construct's removals are decided, so only entries at zero are
            // candidates (and those whose shadow pointers a copy-back must restore).
            let delete = (member_of(ty).is_none() || has(ty, mt::PTR_AND_OBJ)) && e.total_rc() == 0;
            if copy_back || delete {
                removals.push((key, copy_back, delete));
            }
            if released.is_some() || copy_back {
                held = None;
            }
            if let Some(released) = released {
                self.emit(&released);
            }
            if copy_back {
                // SAFETY: (begin, size) is a map clause's section: program memory that the
                // construct names, writable for a `from` map.
                unsafe { self.retrieve(dev, begin, tgt, size, args.name(i)) }?;
            }
        }
        Ok(())
    }
}

/// Freeing a removed mapping's device memory failed; the construct still succeeds.
struct DeallocFailed(DeviceError);

impl crate::error::Diagnostic for DeallocFailed {
    fn write_lines(&self, out: &mut crate::error::Lines<'_>) -> std::fmt::Result {
        out.error(format_args!("Deallocating data from device failed: {}", self.0))?;
        self.0.write_lost_during_op(out)
    }
}
