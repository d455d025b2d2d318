//! targetDataBegin.

use super::diagnose::MapError;
use super::{ConstructState, MapArgs, Request};
use crate::map_type::{self as mt, has, member_of};
use crate::table::ShadowPtr;
use crate::trace::Event;
use crate::{DeviceCtx, Runtime};
use omp_plugin::host_memory;

impl Runtime {
    /// targetDataBegin: map every entry, in order, then perform deferred ATTACHes.
    #[link_section = ".text.hot.omp_launch"]
    pub fn data_begin(
        &self,
        dev: &DeviceCtx,
        args: &mut MapArgs,
        from_mapper: bool,
        st: &mut ConstructState,
    ) -> Result<(), MapError> {
        let n = args.len();
        // The table stays locked from one entry to the next while nothing waits for its
        // release (no copy, event or being-mapped entry): one lock per construct, not per entry.
        let mut held = None;
        for i in 0..n {
            let ty = args.types[i];
            if ty & (mt::LITERAL | mt::PRIVATE) != 0 {
                continue;
            }
            if args.mapper(i) != 0 {
                held = None;
                let mut comps = self.expand_mapper(args, i);
                self.data_begin(dev, &mut comps.args(), true, st)?;
                continue;
            }
            if has(ty, mt::ATTACH) {
                st.attaches.push((args.bases[i], args.begins[i], ty, args.name(i)));
                continue;
            }
            let begin = args.begins[i];
            let mut base = args.bases[i];
            if args.sizes[i] < 0 {
                return Err(MapError::NegativeLength { name: args.name(i), size: args.sizes[i], device: dev.id });
            }
            let size = args.sizes[i] as usize;
            let name = args.name(i);
            let mut padding = 0;
            if member_of(ty).is_none() && i + 1 < n && member_of(args.types[i + 1]) == Some(i) {
                let align = if base == 0 { 16 } else { (1usize << base.trailing_zeros().min(63)).min(16) };
                padding = begin % align;
            }
            let mut update_ref = member_of(ty).is_none() && !(from_mapper && i == 0);
            let ptr_and_obj = has(ty, mt::PTR_AND_OBJ);
            let outcome = (|| -> Result<(), MapError> {
                let ptr_range = if ptr_and_obj { (base, std::mem::size_of::<usize>()) } else { (begin, size) };
                let mut table = self.lock_idle(dev, held.take(), &[(begin, size), ptr_range]);
                let mut pointer = None;
                if has(ty, mt::PTR_AND_OBJ) {
                    let req = Request {
                        begin: base,
                        base,
                        padding: 0,
                        size: std::mem::size_of::<usize>(),
                        name,
                        ty: ty & !(mt::TO | mt::ALWAYS),
                        update_ref,
                        copy_to: false,
                    };
                    let p = self.get_target_pointer(dev, &mut table, &req, st, ty)?;
                    if !p.present() {
                        return Err(MapError::NoTargetPointer { ty, why: None });
                    }
                    pointer = Some(p);
                    // SAFETY: a PTR_AND_OBJ entry's base is the address of the program's pointer
                    // variable, which the map clause names and which is alive for the construct.
                    base = unsafe { host_memory::read_ptr(args.bases[i]) };
                    update_ref = !from_mapper || i != 0;
                }
                if size != 0 && begin < NULL_PAGE {
                    return Err(MapError::NullBase { name, size, begin });
                }
                let req = Request { begin, base, padding, size, name, ty, update_ref, copy_to: has(ty, mt::TO) };
                let obj = self.get_target_pointer(dev, &mut table, &req, st, ty)?;
                if !obj.present() && (size != 0 || has(ty, mt::PRESENT)) {
                    return Err(MapError::NoTargetPointer { ty, why: None });
                }
                if !obj.present() && !has(ty, mt::IMPLICIT) && member_of(ty).is_none() && ty != 0 {
                    self.queue(st, || Event::NoCounterpart { device: dev.id, name });
                }
                if has(ty, mt::RETURN_PARAM) {
                    // An unmapped use_device_ptr/addr yields the host pointer for clang 22 programs
                    // (OpenMP 5.1, LLVM 22) and NULL for clang 19 programs, as their runtimes do.
                    args.bases[i] = if obj.present() {
                        if let (Some(spread), Some(key)) = (&self.spread, obj.key) {
                            spread.expose(dev.id, key);
                        }
                        obj.tgt.wrapping_sub(begin.wrapping_sub(base))
                    } else if self.clang19_programs_only() {
                        0
                    } else {
                        base
                    };
                }
                if let (Some(p), false) = (pointer, obj.is_host) {
                    if obj.tgt != 0 && !p.is_host {
                        let expected = obj.tgt.wrapping_sub(begin.wrapping_sub(base));
                        let shadow = ShadowPtr {
                            host_addr: args.bases[i],
                            host_val: base,
                            tgt_addr: p.tgt,
                            tgt_val: expected,
                            pointee: begin,
                        };
                        self.attach(&mut table, p.key, shadow, st);
                    }
                }
                held = Some(table);
                Ok(())
            })();
            if outcome.is_err() || st.pending() {
                held = None;
                let flushed = self.flush(dev, st);
                outcome.and(flushed)?;
            }
        }
        drop(held);
        if !from_mapper && !st.attaches.is_empty() {
            self.process_attaches(dev, st)?;
        }
        Ok(())
    }
}

/// No program memory lives in the first page (Linux's `mmap_min_addr` is at least this):
/// a section that begins there has a NULL base.
const NULL_PAGE: usize = 4096;
