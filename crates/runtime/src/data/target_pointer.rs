//! LLVM's getTargetPointer: find or create the device copy of one host range.

use super::diagnose::{Absent, MapError, NotPresent};
use super::{ConstructState, PendingCopy, Request, TargetPointer};
use crate::device::Allocation;
use crate::map_type::{self as mt, has};
use crate::table::{Lookup, MapEntry, MappingTable};
use crate::trace::{Event, RcChange};
use crate::{DeviceCtx, MapName, Runtime};

impl Runtime {
    /// LLVM's getTargetPointer: find or create the device copy of one host range. A range
    /// that extends a mapping, or that `present` asks for and is not mapped, has none: that
    /// is [`MapError::NoTargetPointer`] (with the map type `ty` of the caller's entry).
    #[link_section = ".text.hot.omp_launch"]
    pub(super) fn get_target_pointer(
        &self,
        dev: &DeviceCtx,
        t: &mut MappingTable,
        r: &Request,
        st: &mut ConstructState,
        ty: i64,
    ) -> Result<TargetPointer, MapError> {
        let hold = has(r.ty, mt::OMPX_HOLD);
        let implicit = has(r.ty, mt::IMPLICIT);
        let lookup = t.lookup(r.begin, r.size);
        let reuse = match lookup {
            Lookup::Contained(k) => Some(k),
            Lookup::Extends(k) if implicit => Some(k),
            _ => None,
        };
        let mut tp = TargetPointer::default();
        if let Some(k) = reuse {
            let e = t.get_mut(k).expect("looked-up key exists");
            let change;
            if r.update_ref {
                e.increment(hold);
                change = RcChange::Incremented;
            } else {
                // Members of a struct allocated by this same construct get their data; a
                // struct mapped earlier is not copied again (which would also overwrite its
                // attached device pointers).
                tp.is_new = e.total_rc() == 1 && st.new_entries.contains(&k);
                change = RcChange::UpdateSuppressed;
            }
            tp.tgt = e.translate(r.begin);
            tp.key = Some(k);
            self.queue(st, || Event::MapReused {
                device: dev.id,
                implicit,
                begin: r.begin,
                tgt: tp.tgt,
                size: r.size,
                dyn_rc: e.dyn_rc,
                hold_rc: e.hold_rc,
                hold,
                change,
                name: r.name,
            });
        } else if let Lookup::Extends(k) = lookup {
            let e = t.get(k).expect("looked-up key exists");
            let present = has(r.ty, mt::PRESENT).then(|| NotPresent::new(dev, t, r.begin, r.size, r.name, false));
            let why = Absent::Extension { begin: r.begin, size: r.size, mapped: (e.begin, e.size()), present };
            return Err(MapError::NoTargetPointer { ty, why: Some(Box::new(why)) });
        } else if self.requires_usm() && !has(r.ty, mt::CLOSE) {
            if r.size > 0 {
                tp.is_host = true;
                tp.tgt = r.begin;
                self.queue(st, || Event::MapUsm { device: dev.id, begin: r.begin, size: r.size });
            }
            return Ok(tp);
        } else if has(r.ty, mt::PRESENT) {
            let why = Absent::NotPresent(NotPresent::new(dev, t, r.begin, r.size, r.name, false));
            return Err(MapError::NoTargetPointer { ty, why: Some(Box::new(why)) });
        } else if r.size > 0 {
            let bytes = r.size + r.padding;
            let Allocation { tgt: alloc, time } = dev.alloc_mapping(self, bytes).map_err(|e| MapError::Alloc {
                bytes,
                device: dev.id,
                source: Box::new(e),
            })?;
            let tgt_begin = alloc + r.padding;
            self.queue(st, || Event::Alloc { device: dev.id, host: r.begin, tgt: alloc, bytes, name: r.name, time });
            let (dyn_rc, hold_rc) = if hold { (0, 1) } else { (1, 0) };
            let key = t.insert(MapEntry {
                base: r.base,
                begin: r.begin,
                end: r.begin + r.size,
                tgt_alloc: alloc,
                tgt_begin,
                dyn_rc,
                hold_rc,
                name: r.name,
                shadows: Vec::new(),
                owns_memory: true,
            });
            st.new_entries.push(key);
            self.queue(st, || Event::MapCreated {
                device: dev.id,
                base: r.base,
                begin: r.begin,
                size: r.size,
                tgt_alloc: alloc,
                tgt_begin,
                dyn_rc,
                hold_rc,
                name: r.name,
            });
            tp = TargetPointer { tgt: tgt_begin, key: Some(key), is_new: true, is_host: false };
        } else {
            return Ok(tp);
        }
        if r.copy_to && tp.tgt != 0 && !tp.is_host && r.size != 0 && (tp.is_new || has(r.ty, mt::ALWAYS)) {
            st.copies.push(PendingCopy::Data { tgt: tp.tgt, host: r.begin, size: r.size, name: r.name });
            match tp.key {
                Some(key) if tp.is_new && !st.busy.contains(&key) => {
                    t.mark_busy(key);
                    st.busy.push(key);
                }
                _ => {}
            }
            // The copy brings host pointer values; put the attached device values back.
            if let Some(e) = tp.key.and_then(|k| t.get(k)) {
                for s in e.shadows.iter().filter(|s| s.host_addr >= r.begin && s.host_addr < r.begin + r.size) {
                    st.copies.push(PendingCopy::Pointer { tgt: s.tgt_addr, value: s.tgt_val, name: MapName::NONE });
                }
            }
        }
        Ok(tp)
    }
}
