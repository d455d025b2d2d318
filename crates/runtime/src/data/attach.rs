//! Shadow pointers (clang 19's PTR_AND_OBJ) and deferred ATTACH entries (clang 22).

use super::diagnose::MapError;
use super::{ConstructState, PendingCopy};
use crate::map_type::{self as mt, has};
use crate::table::{Lookup, MappingTable, ShadowPtr};
use crate::{DeviceCtx, Runtime};
use omp_plugin::host_memory;

impl Runtime {
    /// Records a shadow pointer on the entry holding the pointer and writes the device value
    /// when it is new or changed.
    pub(super) fn attach(
        &self,
        table: &mut MappingTable,
        key: Option<usize>,
        shadow: ShadowPtr,
        st: &mut ConstructState,
    ) {
        let Some(e) = key.and_then(|k| table.get_mut(k)) else { return };
        let name = e.name;
        match e.shadows.iter_mut().find(|s| s.host_addr == shadow.host_addr) {
            Some(s) if s.tgt_val == shadow.tgt_val => {
                s.host_val = shadow.host_val;
                return;
            }
            Some(s) => *s = shadow,
            None => e.shadows.push(shadow),
        }
        crate::debug!(
            "omptarget",
            "attach: device pointer at TgtPtr=0x{:016x} set to 0x{:016x} (host pointer at 0x{:016x})",
            shadow.tgt_addr,
            shadow.tgt_val,
            shadow.host_addr
        );
        st.copies.push(PendingCopy::Pointer { tgt: shadow.tgt_addr, value: shadow.tgt_val, name });
    }

    /// clang 22's ATTACH entries: point the device copy of a pointer at the device copy of
    /// its pointee, when both are present and one of them is new (or always is asked).
    pub(super) fn process_attaches(&self, dev: &DeviceCtx, st: &mut ConstructState) -> Result<(), MapError> {
        let attaches = std::mem::take(&mut st.attaches);
        let mut table = dev.lock_table();
        for (ptr_addr, pointee_begin, ty, _name) in attaches {
            let ptr_size = std::mem::size_of::<usize>();
            let Some(pk) = (match table.lookup(ptr_addr, ptr_size) {
                Lookup::Contained(k) => Some(k),
                _ => None,
            }) else {
                continue;
            };
            let Some(ok) = table.lookup(pointee_begin, 0).key() else { continue };
            let always = has(ty, mt::ALWAYS) || self.config.attach_always;
            if !always && !st.new_entries.contains(&pk) && !st.new_entries.contains(&ok) {
                continue;
            }
            // SAFETY: an ATTACH entry's base is the address of the program's pointer variable,
            // mapped by this construct and alive for it.
            let host_val = unsafe { host_memory::read_ptr(ptr_addr) };
            let pointee_tgt = table.get(ok).expect("key").translate(pointee_begin);
            let expected = pointee_tgt.wrapping_sub(pointee_begin.wrapping_sub(host_val));
            let tgt_addr = table.get(pk).expect("key").translate(ptr_addr);
            let shadow =
                ShadowPtr { host_addr: ptr_addr, host_val, tgt_addr, tgt_val: expected, pointee: pointee_begin };
            let e = table.get_mut(pk).expect("key");
            let name = e.name;
            match e.shadows.iter_mut().find(|s| s.host_addr == ptr_addr) {
                Some(s) => *s = shadow,
                None => e.shadows.push(shadow),
            }
            crate::debug!(
                "omptarget",
                "attach: device pointer at TgtPtr=0x{tgt_addr:016x} set to 0x{expected:016x} (host pointer at 0x{ptr_addr:016x})"
            );
            st.copies.push(PendingCopy::Pointer { tgt: tgt_addr, value: expected, name });
        }
        drop(table);
        self.flush(dev, st)
    }
}
