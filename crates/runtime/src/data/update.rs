//! targetDataUpdate.

use super::diagnose::{MapError, NotPresent};
use super::strided::{strided_name, MAX_DIMS};
use super::MapArgs;
use crate::map_type::{self as mt, has};
use crate::table::Lookup;
use crate::{DeviceCtx, MapName, Runtime};
use omp_plugin::host_memory;

impl Runtime {
    /// targetDataUpdate: `target update to/from`, contiguous or strided.
    pub fn data_update(&self, dev: &DeviceCtx, args: &mut MapArgs) -> Result<(), MapError> {
        for i in 0..args.len() {
            let ty = args.types[i];
            if ty & (mt::LITERAL | mt::PRIVATE) != 0 {
                continue;
            }
            if args.mapper(i) != 0 {
                let mut comps = self.expand_mapper(args, i);
                self.data_update(dev, &mut comps.args())?;
                continue;
            }
            if has(ty, mt::NON_CONTIG) {
                // clang emits one descriptor per dimension and passes their number as the
                // size; clang 22 passes the section's byte size there for a section of a
                // pointer member, which cannot be read as descriptors.
                if !(1..=MAX_DIMS).contains(&args.sizes[i]) {
                    return Err(MapError::StridedDimensions { name: args.name(i), dims: args.sizes[i] });
                }
                self.update_non_contiguous(
                    dev,
                    args.bases[i],
                    args.begins[i],
                    args.sizes[i].max(0) as usize,
                    ty,
                    args.name(i),
                )?;
            } else {
                if strided_name(args.name(i)) {
                    // clang 19 drops the stride of a section of a pointer member and asks for
                    // every element in its span: copying them would overwrite the elements
                    // the section leaves out.
                    return Err(MapError::StridedAsContiguous { name: args.name(i), size: args.sizes[i] });
                }
                self.update_contiguous(dev, args.begins[i], args.sizes[i].max(0) as usize, ty, args.name(i))?;
            }
        }
        Ok(())
    }

    pub(super) fn update_contiguous(
        &self,
        dev: &DeviceCtx,
        begin: usize,
        size: usize,
        ty: i64,
        name: MapName,
    ) -> Result<(), MapError> {
        let table = self.lock_idle(dev, None, &[(begin, size)]);
        let Lookup::Contained(key) = table.lookup(begin, size) else {
            if has(ty, mt::PRESENT) {
                return Err(MapError::NotPresent(Box::new(NotPresent::new(dev, &table, begin, size, name, true))));
            }
            return Ok(());
        };
        let e = table.get(key).expect("key");
        let tgt = e.translate(begin);
        let shadows = e.shadows.clone();
        // Under spreading, data being updated does not go on a trip until the copy is done
        // (the copy would land in the copy at home after the data left).
        let mut table = table;
        let hold = self.spread.is_some();
        if hold {
            table.mark_busy(key);
        }
        drop(table);
        let result = (|| {
            if has(ty, mt::TO) {
                // SAFETY: (begin, size) is the `update to` section: program memory it names.
                unsafe { self.submit(dev, tgt, begin, size, name) }?;
                for s in &shadows {
                    // SAFETY: `s.tgt_val` is a field of a local copy, 8 readable bytes.
                    unsafe {
                        self.submit(
                            dev,
                            s.tgt_addr,
                            &s.tgt_val as *const usize as usize,
                            std::mem::size_of::<usize>(),
                            MapName::NONE,
                        )
                    }?;
                }
            }
            if has(ty, mt::FROM) {
                // SAFETY: (begin, size) is the `update from` section: program memory it names.
                unsafe { self.retrieve(dev, begin, tgt, size, name) }?;
                for s in &shadows {
                    // SAFETY: as in `data_end`: the pointer lies in the object just copied back.
                    unsafe { host_memory::write_ptr(s.host_addr, s.host_val) };
                }
            }
            Ok(())
        })();
        if hold {
            dev.clear_busy(&[key]);
        }
        result
    }
}
