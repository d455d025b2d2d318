//! Data motion for `target data`, `enter data`, `exit data`, `update`, and the map clauses
//! of `target`: LLVM's targetDataBegin / targetDataEnd / targetDataUpdate semantics.

use crate::config::info_bits;
use crate::map_type::{self as mt, has, member_of};
use crate::profile::{Category, Span};
use crate::table::{Lookup, MapEntry, MappingTable, ShadowPtr};
use crate::trace::{DataOp, TargetKind};
use crate::{info, DeviceCtx, Failed, Loc, Outcome, Runtime};
use omp_plugin::{host_memory, AllocKind};

/// The map arrays of one construct, as the compiler laid them out.
pub struct MapArgs<'a> {
    /// `ArgsBase`: written back for `use_device_ptr`/`use_device_addr` (RETURN_PARAM).
    pub bases: &'a mut [usize],
    pub begins: &'a [usize],
    pub sizes: &'a [i64],
    pub types: &'a [i64],
    /// Map-name strings, when compiled with debug information.
    pub names: Option<&'a [usize]>,
    /// `declare mapper` functions, per entry (0 for none).
    pub mappers: Option<&'a [usize]>,
}

impl MapArgs<'_> {
    pub fn len(&self) -> usize {
        self.types.len()
    }
    pub fn is_empty(&self) -> bool {
        self.types.is_empty()
    }
    pub fn name(&self, i: usize) -> usize {
        self.names.and_then(|n| n.get(i).copied()).unwrap_or(0)
    }
    fn mapper(&self, i: usize) -> usize {
        self.mappers.and_then(|m| m.get(i).copied()).unwrap_or(0)
    }
}

/// Components a `declare mapper` function pushed (`__tgt_push_mapper_component`).
#[derive(Debug, Default)]
pub struct MapperComponents {
    pub bases: Vec<usize>,
    pub begins: Vec<usize>,
    pub sizes: Vec<i64>,
    pub types: Vec<i64>,
    pub names: Vec<usize>,
}

impl MapperComponents {
    pub fn push(&mut self, base: usize, begin: usize, size: i64, ty: i64, name: usize) {
        self.bases.push(base);
        self.begins.push(begin);
        self.sizes.push(size);
        self.types.push(ty);
        self.names.push(name);
    }
    fn args(&mut self) -> MapArgs<'_> {
        MapArgs {
            bases: &mut self.bases,
            begins: &self.begins,
            sizes: &self.sizes,
            types: &self.types,
            names: Some(&self.names),
            mappers: None,
        }
    }
}

/// State carried across the entries of one construct.
#[derive(Default)]
pub struct ConstructState {
    /// Entries (table keys) this construct created: ATTACH attaches only when one side is new.
    new_entries: Vec<usize>,
    /// ATTACH entries, deferred to the end of data-begin: (pointer address, pointee begin, type).
    attaches: Vec<(usize, usize, i64, usize)>,
}

/// Where a pointer or object landed on the device.
#[derive(Debug, Clone, Copy, Default)]
struct TargetPointer {
    tgt: usize,
    key: Option<usize>,
    is_new: bool,
    /// Unified shared memory: the host address is used as is.
    is_host: bool,
}

impl TargetPointer {
    fn present(&self) -> bool {
        self.tgt != 0 || self.is_host
    }
}

struct Request {
    begin: usize,
    base: usize,
    padding: usize,
    size: usize,
    name: usize,
    ty: i64,
    update_ref: bool,
    copy_to: bool,
}

/// Which directive a data operation comes from (for INFO messages).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Directive {
    Begin,
    End,
    Update,
}

impl Runtime {
    /// LLVM's `present` message, then what would help fix it: the variable, its range and
    /// the nearest mapping that does exist on the device.
    fn present_message(
        &self,
        dev: &DeviceCtx,
        table: &MappingTable,
        hp: usize,
        size: usize,
        name: usize,
        motion: bool,
    ) {
        let what = if motion { "motion" } else { "map type" };
        info::message(format_args!(
            "device mapping required by 'present' {what} modifier does not exist for host address 0x{hp:016x} ({size} bytes)"
        ));
        let var = match host_memory::c_str(name).map(omp_format::SourceLocation::from_map_name) {
            Some(l) if l.is_known() => format!("'{}' ({l})", l.name),
            Some(l) => format!("'{}'", l.name),
            None => "the variable".into(),
        };
        let nearest = match table.nearest(hp) {
            Some(e) => format!(
                "the nearest mapping on device {} is '{}' at 0x{:016x}..0x{:016x} ({} bytes)",
                dev.id,
                info::var_name(e.name),
                e.begin,
                e.end,
                e.size()
            ),
            None => format!("nothing is mapped on device {}", dev.id),
        };
        info::message(format_args!(
            "{var} occupies 0x{hp:016x}..0x{:016x}, which is not mapped; {nearest}",
            hp.wrapping_add(size)
        ));
    }

    /// LLVM's getTargetPointer: find or create the device copy of one host range.
    fn get_target_pointer(
        &self,
        dev: &DeviceCtx,
        t: &mut MappingTable,
        r: &Request,
        st: &mut ConstructState,
    ) -> Result<TargetPointer, Failed> {
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
            let suffix;
            if r.update_ref {
                e.increment(hold);
                suffix = " (incremented)";
            } else {
                // Members of a struct allocated by this same construct get their data; a
                // struct mapped earlier is not copied again (which would also overwrite its
                // attached device pointers).
                tp.is_new = e.total_rc() == 1 && st.new_entries.contains(&k);
                suffix = " (update suppressed)";
            }
            tp.tgt = e.translate(r.begin);
            tp.key = Some(k);
            if self.config.info_on(info_bits::MAPPING_EXISTS) {
                let (dyn_s, hold_s) = if hold { ("", suffix) } else { (suffix, "") };
                info::info(
                    dev.id,
                    format_args!(
                        "Mapping exists{} with HstPtrBegin=0x{:016x}, TgtPtrBegin=0x{:016x}, Size={}, DynRefCount={}{}, HoldRefCount={}{}, Name={}",
                        if implicit { " (implicit)" } else { "" },
                        r.begin,
                        tp.tgt,
                        r.size,
                        info::rc_str(e.dyn_rc),
                        dyn_s,
                        info::rc_str(e.hold_rc),
                        hold_s,
                        info::var_name(r.name)
                    ),
                );
            }
        } else if let Lookup::Extends(k) = lookup {
            let e = t.get(k).expect("looked-up key exists");
            info::message(format_args!(
                "explicit extension not allowed: host address specified is 0x{:016x} ({} bytes), but device allocation maps to host at 0x{:016x} ({} bytes)",
                r.begin,
                r.size,
                e.begin,
                e.size()
            ));
            if has(r.ty, mt::PRESENT) {
                self.present_message(dev, t, r.begin, r.size, r.name, false);
            }
            return Ok(tp);
        } else if self.requires_usm() && !has(r.ty, mt::CLOSE) {
            if r.size > 0 {
                tp.is_host = true;
                tp.tgt = r.begin;
                if self.config.info_on(info_bits::MAPPING_CHANGED) {
                    info::info(
                        dev.id,
                        format_args!("Return HstPtrBegin 0x{:016x} Size={} for unified shared memory", r.begin, r.size),
                    );
                }
            }
            return Ok(tp);
        } else if has(r.ty, mt::PRESENT) {
            self.present_message(dev, t, r.begin, r.size, r.name, false);
            return Ok(tp);
        } else if r.size > 0 {
            let bytes = r.size + r.padding;
            let span = || Span {
                cat: Category::Alloc,
                name: info::var_name(r.name).into(),
                device: dev.id,
                bytes: bytes as u64,
                args: vec![],
            };
            let alloc = self.timed(span, || dev.alloc(bytes, AllocKind::Default)).map_err(|e| {
                info::error(format_args!("Failed to allocate {} bytes on device {}: {e}", r.size + r.padding, dev.id));
                Failed
            })?;
            let tgt_begin = alloc + r.padding;
            self.data_op(DataOp::Alloc, r.begin, self.initial_device(), alloc, dev.id, r.size + r.padding);
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
            if self.config.info_on(info_bits::MAPPING_CHANGED) {
                info::info(
                    dev.id,
                    format_args!(
                        "Creating new map entry with HstPtrBase=0x{:016x}, HstPtrBegin=0x{:016x}, TgtAllocBegin=0x{alloc:016x}, TgtPtrBegin=0x{tgt_begin:016x}, Size={}, DynRefCount={dyn_rc}, HoldRefCount={hold_rc}, Name={}",
                        r.base,
                        r.begin,
                        r.size,
                        info::var_name(r.name)
                    ),
                );
            }
            tp = TargetPointer { tgt: tgt_begin, key: Some(key), is_new: true, is_host: false };
        } else {
            return Ok(tp);
        }
        if r.copy_to && tp.tgt != 0 && !tp.is_host && r.size != 0 && (tp.is_new || has(r.ty, mt::ALWAYS)) {
            self.submit(dev, tp.tgt, r.begin, r.size, r.name)?;
            // The copy brought host pointer values; put the attached device values back.
            if let Some(e) = tp.key.and_then(|k| t.get(k)) {
                for s in e.shadows.iter().filter(|s| s.host_addr >= r.begin && s.host_addr < r.begin + r.size) {
                    self.submit(dev, s.tgt_addr, &s.tgt_val as *const usize as usize, std::mem::size_of::<usize>(), 0)?;
                }
            }
        }
        Ok(tp)
    }

    /// Host→device copy with INFO 0x20 reporting.
    pub(crate) fn submit(&self, dev: &DeviceCtx, tgt: usize, host: usize, size: usize, name: usize) -> Outcome {
        if self.config.info_on(info_bits::DATA_TRANSFER) {
            info::info(
                dev.id,
                format_args!(
                    "Copying data from host to device, HstPtr=0x{host:016x}, TgtPtr=0x{tgt:016x}, Size={size}, Name={}",
                    info::var_name(name)
                ),
            );
        }
        self.data_op(DataOp::ToDevice, host, self.initial_device(), tgt, dev.id, size);
        let span = || Span {
            cat: Category::HostToDevice,
            name: info::var_name(name).into(),
            device: dev.id,
            bytes: size as u64,
            args: vec![],
        };
        self.timed(span, || dev.dev.submit(tgt, host, size)).map_err(|e| {
            info::error(format_args!("Copying data to device failed: {e}"));
            Failed
        })
    }

    /// Device→host copy with INFO 0x20 reporting.
    pub(crate) fn retrieve(&self, dev: &DeviceCtx, host: usize, tgt: usize, size: usize, name: usize) -> Outcome {
        if self.config.info_on(info_bits::DATA_TRANSFER) {
            info::info(
                dev.id,
                format_args!(
                    "Copying data from device to host, TgtPtr=0x{tgt:016x}, HstPtr=0x{host:016x}, Size={size}, Name={}",
                    info::var_name(name)
                ),
            );
        }
        self.data_op(DataOp::FromDevice, tgt, dev.id, host, self.initial_device(), size);
        let span = || Span {
            cat: Category::DeviceToHost,
            name: info::var_name(name).into(),
            device: dev.id,
            bytes: size as u64,
            args: vec![],
        };
        self.timed(span, || dev.dev.retrieve(host, tgt, size)).map_err(|e| {
            info::error(format_args!("Copying data from device failed: {e}"));
            Failed
        })
    }

    /// Runs a `declare mapper` function and returns the components it pushed.
    fn expand_mapper(&self, args: &MapArgs, i: usize) -> MapperComponents {
        self.host().call_mapper(
            args.mapper(i),
            args.bases[i],
            args.begins[i],
            args.sizes[i],
            args.types[i],
            args.name(i),
        )
    }

    /// targetDataBegin: map every entry, in order, then perform deferred ATTACHes.
    pub fn data_begin(
        &self,
        dev: &DeviceCtx,
        args: &mut MapArgs,
        from_mapper: bool,
        st: &mut ConstructState,
    ) -> Outcome {
        let n = args.len();
        for i in 0..n {
            let ty = args.types[i];
            if ty & (mt::LITERAL | mt::PRIVATE) != 0 {
                continue;
            }
            if args.mapper(i) != 0 {
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
                info::error(format_args!(
                    "{} has a negative length ({} bytes): cannot map it on device {}",
                    described(args.name(i)),
                    args.sizes[i],
                    dev.id
                ));
                return Err(Failed);
            }
            let size = args.sizes[i] as usize;
            let name = args.name(i);
            let mut padding = 0;
            if member_of(ty).is_none() && i + 1 < n && member_of(args.types[i + 1]) == Some(i) {
                let align = if base == 0 { 16 } else { (1usize << base.trailing_zeros().min(63)).min(16) };
                padding = begin % align;
            }
            let mut update_ref = member_of(ty).is_none() && !(from_mapper && i == 0);
            let mut table = dev.lock_table();
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
                let p = self.get_target_pointer(dev, &mut table, &req, st)?;
                if !p.present() {
                    info::error(format_args!("Call to getTargetPointer returned null pointer ({}).", null_reason(ty)));
                    return Err(Failed);
                }
                pointer = Some(p);
                base = host_memory::read_ptr(args.bases[i]);
                update_ref = !from_mapper || i != 0;
            }
            if size != 0 && begin < NULL_PAGE {
                info::error(format_args!(
                    "{} maps {size} bytes at host address 0x{begin:016x}: its base pointer is NULL",
                    described(name)
                ));
                return Err(Failed);
            }
            let req = Request { begin, base, padding, size, name, ty, update_ref, copy_to: has(ty, mt::TO) };
            let obj = self.get_target_pointer(dev, &mut table, &req, st)?;
            if !obj.present() && (size != 0 || has(ty, mt::PRESENT)) {
                info::error(format_args!("Call to getTargetPointer returned null pointer ({}).", null_reason(ty)));
                return Err(Failed);
            }
            if self.config.info_on(info_bits::EMPTY_MAPPING)
                && !obj.present()
                && !has(ty, mt::IMPLICIT)
                && member_of(ty).is_none()
                && ty != 0
            {
                info::info(
                    dev.id,
                    format_args!("variable {} does not have a valid device counterpart", info::var_name(name)),
                );
            }
            if has(ty, mt::RETURN_PARAM) {
                // An unmapped use_device_ptr/addr yields the host pointer for clang 22 programs
                // (OpenMP 5.1, LLVM 22) and NULL for clang 19 programs, as their runtimes do.
                args.bases[i] = if obj.present() {
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
                    let shadow =
                        ShadowPtr { host_addr: args.bases[i], host_val: base, tgt_addr: p.tgt, tgt_val: expected };
                    self.attach(dev, &mut table, p.key, shadow)?;
                }
            }
        }
        if !from_mapper && !st.attaches.is_empty() {
            self.process_attaches(dev, st)?;
        }
        Ok(())
    }

    /// Records a shadow pointer on the entry holding the pointer and writes the device value
    /// when it is new or changed.
    fn attach(&self, dev: &DeviceCtx, table: &mut MappingTable, key: Option<usize>, shadow: ShadowPtr) -> Outcome {
        let Some(e) = key.and_then(|k| table.get_mut(k)) else { return Ok(()) };
        let name = e.name;
        match e.shadows.iter_mut().find(|s| s.host_addr == shadow.host_addr) {
            Some(s) if s.tgt_val == shadow.tgt_val => {
                s.host_val = shadow.host_val;
                return Ok(());
            }
            Some(s) => *s = shadow,
            None => e.shadows.push(shadow),
        }
        self.submit(dev, shadow.tgt_addr, &shadow.tgt_val as *const usize as usize, std::mem::size_of::<usize>(), name)
    }

    /// clang 22's ATTACH entries: point the device copy of a pointer at the device copy of
    /// its pointee, when both are present and one of them is new (or always is asked).
    fn process_attaches(&self, dev: &DeviceCtx, st: &mut ConstructState) -> Outcome {
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
            let host_val = host_memory::read_ptr(ptr_addr);
            let pointee_tgt = table.get(ok).expect("key").translate(pointee_begin);
            let expected = pointee_tgt.wrapping_sub(pointee_begin.wrapping_sub(host_val));
            let tgt_addr = table.get(pk).expect("key").translate(ptr_addr);
            let shadow = ShadowPtr { host_addr: ptr_addr, host_val, tgt_addr, tgt_val: expected };
            let e = table.get_mut(pk).expect("key");
            let name = e.name;
            match e.shadows.iter_mut().find(|s| s.host_addr == ptr_addr) {
                Some(s) => *s = shadow,
                None => e.shadows.push(shadow),
            }
            self.submit(dev, tgt_addr, &expected as *const usize as usize, ptr_size, name)?;
        }
        Ok(())
    }

    /// targetDataEnd: release every entry, in reverse order; copy back on the last
    /// reference (or `always`); free storage once the whole construct is done.
    pub fn data_end(&self, dev: &DeviceCtx, args: &mut MapArgs, from_mapper: bool) -> Outcome {
        let mut removals: Vec<(usize, bool, bool)> = Vec::new();
        let result = self.data_end_entries(dev, args, from_mapper, &mut removals);
        let mut table = dev.lock_table();
        for (key, copied_back, delete) in removals {
            let Some(e) = table.get_mut(key) else { continue };
            if copied_back {
                for s in &e.shadows {
                    host_memory::write_ptr(s.host_addr, s.host_val);
                }
            }
            if delete && e.total_rc() == 0 {
                let e = table.remove(key).expect("key");
                self.release_entry(dev, &e);
            }
        }
        result
    }

    fn release_entry(&self, dev: &DeviceCtx, e: &MapEntry) {
        if self.config.info_on(info_bits::MAPPING_CHANGED) {
            info::info(
                dev.id,
                format_args!(
                    "Removing map entry with HstPtrBegin=0x{:016x}, TgtPtrBegin=0x{:016x}, Size={}, Name={}",
                    e.begin,
                    e.tgt_begin,
                    e.size(),
                    info::var_name(e.name)
                ),
            );
        }
        if e.owns_memory {
            self.data_op(DataOp::Delete, e.tgt_alloc, dev.id, 0, self.initial_device(), e.size());
            let span = || Span {
                cat: Category::Free,
                name: info::var_name(e.name).into(),
                device: dev.id,
                bytes: e.size() as u64,
                args: vec![],
            };
            let allocated = e.size() + (e.tgt_begin - e.tgt_alloc);
            if let Err(err) = self.timed(span, || dev.free_sized(e.tgt_alloc, allocated, AllocKind::Default)) {
                info::error(format_args!("Deallocating data from device failed: {err}"));
            }
        }
    }

    fn data_end_entries(
        &self,
        dev: &DeviceCtx,
        args: &mut MapArgs,
        from_mapper: bool,
        removals: &mut Vec<(usize, bool, bool)>,
    ) -> Outcome {
        for i in (0..args.len()).rev() {
            let ty = args.types[i];
            if ty & (mt::LITERAL | mt::PRIVATE) != 0 || has(ty, mt::ATTACH) {
                continue;
            }
            if args.mapper(i) != 0 {
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
            let mut table = dev.lock_table();
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
                    self.present_message(dev, &table, begin, size, args.name(i), false);
                    return Err(Failed);
                }
                continue;
            };
            let e = table.get_mut(key).expect("key");
            let is_last = e.dec_should_remove(hold, force_delete);
            if force_delete {
                e.reset_for_delete(hold);
            }
            let mut suffix = "";
            if update_ref {
                e.decrement(hold);
                suffix = if force_delete {
                    " (reset, delayed deletion)"
                } else if is_last {
                    " (decremented, delayed deletion)"
                } else {
                    " (decremented)"
                };
            }
            let tgt = e.translate(begin);
            if self.config.info_on(info_bits::MAPPING_EXISTS) {
                let (dyn_s, hold_s) = if hold { ("", suffix) } else { (suffix, "") };
                info::info(
                    dev.id,
                    format_args!(
                        "Mapping exists with HstPtrBegin=0x{begin:016x}, TgtPtrBegin=0x{tgt:016x}, Size={size}, DynRefCount={}{dyn_s}, HoldRefCount={}{hold_s}",
                        info::rc_str(e.dyn_rc),
                        info::rc_str(e.hold_rc)
                    ),
                );
            }
            let copy_back = has(ty, mt::FROM) && (has(ty, mt::ALWAYS) || is_last) && size != 0;
            if copy_back {
                self.retrieve(dev, begin, tgt, size, args.name(i))?;
            }
            let delete = member_of(ty).is_none() || has(ty, mt::PTR_AND_OBJ);
            removals.push((key, copy_back, delete));
        }
        Ok(())
    }

    /// targetDataUpdate: `target update to/from`, contiguous or strided.
    pub fn data_update(&self, dev: &DeviceCtx, args: &mut MapArgs) -> Outcome {
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
                    info::error(format_args!(
                        "{}: a strided (non-contiguous) update with {} dimensions cannot be right (at most {MAX_DIMS}; the compiler may have passed a size instead): not updated",
                        described(args.name(i)),
                        args.sizes[i]
                    ));
                    return Err(Failed);
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
                    info::error(format_args!(
                        "{}: the compiler passed this strided section as {} contiguous bytes; updating them would overwrite the elements the stride skips: not updated",
                        described(args.name(i)),
                        args.sizes[i]
                    ));
                    return Err(Failed);
                }
                self.update_contiguous(dev, args.begins[i], args.sizes[i].max(0) as usize, ty, args.name(i))?;
            }
        }
        Ok(())
    }

    fn update_contiguous(&self, dev: &DeviceCtx, begin: usize, size: usize, ty: i64, name: usize) -> Outcome {
        let table = dev.lock_table();
        let Lookup::Contained(key) = table.lookup(begin, size) else {
            if has(ty, mt::PRESENT) {
                self.present_message(dev, &table, begin, size, name, true);
                return Err(Failed);
            }
            return Ok(());
        };
        let e = table.get(key).expect("key");
        let tgt = e.translate(begin);
        if has(ty, mt::TO) {
            self.submit(dev, tgt, begin, size, name)?;
            for s in &e.shadows {
                self.submit(dev, s.tgt_addr, &s.tgt_val as *const usize as usize, std::mem::size_of::<usize>(), 0)?;
            }
        }
        if has(ty, mt::FROM) {
            self.retrieve(dev, begin, tgt, size, name)?;
            for s in &e.shadows {
                host_memory::write_ptr(s.host_addr, s.host_val);
            }
        }
        Ok(())
    }

    /// Strided updates: `begin` points to `dims` descriptors of {offset, count, stride}.
    fn update_non_contiguous(
        &self,
        dev: &DeviceCtx,
        base: usize,
        descs: usize,
        dims: usize,
        ty: i64,
        name: usize,
    ) -> Outcome {
        if dims == 0 {
            return Ok(());
        }
        let dim: Vec<(u64, u64, u64)> = (0..dims)
            .map(|d| {
                let p = descs + d * 24;
                (host_memory::read_u64(p), host_memory::read_u64(p + 8), host_memory::read_u64(p + 16))
            })
            .collect();
        // Trailing dimensions that are contiguous with the one before merge into it.
        let mut last = dims - 1;
        while last > 0 && dim[last].1.wrapping_mul(dim[last].2) == dim[last - 1].2 {
            last -= 1;
        }
        let piece = (dim[last].1 * dim[last].2) as usize;
        let mut idx = vec![0u64; last + 1];
        loop {
            let off: u64 = (0..=last).map(|d| (dim[d].0 + if d == last { 0 } else { idx[d] }) * dim[d].2).sum();
            self.update_contiguous(dev, base + off as usize, piece, ty & !mt::NON_CONTIG, name)?;
            // Advance the odometer over all but the last (contiguous) dimension.
            let mut d = last;
            loop {
                if d == 0 {
                    return Ok(());
                }
                d -= 1;
                idx[d] += 1;
                if idx[d] < dim[d].1 {
                    break;
                }
                idx[d] = 0;
            }
        }
    }

    /// A data directive (`target data` begin/end, `enter`/`exit data`, `update`), including
    /// device selection, INFO output and the outcome policy.
    pub fn data_directive(&self, loc: Loc, device_id: i64, args: &mut MapArgs, which: Directive, nowait: bool) {
        let dev = match self.check_device(device_id, loc) {
            Ok(crate::Target::Device(d)) => d,
            Ok(crate::Target::Host) => return,
            Err(f) => return self.handle_outcome(Err(f), loc),
        };
        if self.config.info_on(info_bits::KERNEL_ARGS) {
            let region = match (which, nowait) {
                (Directive::Begin, false) => "Entering OpenMP data region with being_mapper",
                (Directive::Begin, true) => "Entering OpenMP data region with being_nowait_mapper",
                (Directive::End, false) => "Exiting OpenMP data region with end_mapper",
                (Directive::End, true) => "Exiting OpenMP data region with end_nowait_mapper",
                (Directive::Update, false) => "Updating data within the OpenMP data region with update_mapper",
                (Directive::Update, true) => "Updating data within the OpenMP data region with update_nowait_mapper",
            };
            self.print_args(dev.id, region, loc, args);
        }
        let kind = match which {
            Directive::Begin => TargetKind::EnterData,
            Directive::End => TargetKind::ExitData,
            Directive::Update => TargetKind::Update,
        };
        let outcome = self.construct(kind, dev.id, loc, || match which {
            Directive::Begin => self.data_begin(&dev, args, false, &mut ConstructState::default()),
            Directive::End => self.data_end(&dev, args, false),
            Directive::Update => self.data_update(&dev, args),
        });
        if outcome.is_err() {
            let what = match which {
                Directive::Begin => "targetDataBegin",
                Directive::End => "targetDataEnd",
                Directive::Update => "targetDataUpdate",
            };
            info::error(format_args!("Call to {what} failed, abort target."));
        }
        self.after_construct(&dev, loc);
        self.handle_outcome(outcome, loc);
    }

    /// INFO 0x4: the table after every construct.
    pub(crate) fn after_construct(&self, _dev: &DeviceCtx, loc: Loc) {
        if self.config.info_on(info_bits::DUMP_TABLE) {
            let l = loc.parse();
            for d in self.devices() {
                d.dump_table(&l);
            }
        }
    }

    /// INFO 0x1: the construct's arguments.
    pub(crate) fn print_args(&self, device: i32, region: &str, loc: Loc, args: &MapArgs) {
        let l = loc.parse();
        let mut s = format!(
            "omptarget device {device} info: {region} at {}:{}:{} with {} arguments:\n",
            l.file_name(),
            l.line,
            l.column,
            args.len()
        );
        for i in 0..args.len() {
            let ty = args.types[i];
            s.push_str(&format!(
                "omptarget device {device} info: {}({})[{}] {}\n",
                mt::describe(ty, args.sizes[i]),
                info::var_name(args.name(i)),
                args.sizes[i],
                if has(ty, mt::IMPLICIT) { "(implicit)" } else { "" }
            ));
        }
        info::emit(&s);
    }
}

/// More dimensions than any array a program declares: a non-contiguous update's size beyond
/// this is not a dimension count.
const MAX_DIMS: i64 = 64;

/// Whether a map-name string's last array section has a stride other than 1
/// (`a.p[0:n:2]`): the name is the only trace of it when the compiler dropped the stride.
fn strided_name(name: usize) -> bool {
    let Some(s) = host_memory::c_str(name) else { return false };
    let expr = omp_format::SourceLocation::from_map_name(s).name;
    let Some(body) = expr.strip_suffix(']') else { return false };
    // The last section's bracket: scan back to the '[' that opens it.
    let mut depth = 0;
    let mut open = None;
    for (i, c) in body.char_indices().rev() {
        match c {
            ']' | ')' => depth += 1,
            '(' => depth -= 1,
            '[' if depth == 0 => {
                open = Some(i);
                break;
            }
            '[' => depth -= 1,
            _ => {}
        }
    }
    let Some(open) = open else { return false };
    let mut parts = Vec::new();
    let (mut depth, mut start) = (0, open + 1);
    for (i, c) in body[open + 1..].char_indices().map(|(i, c)| (i + open + 1, c)) {
        match c {
            '[' | '(' => depth += 1,
            ']' | ')' => depth -= 1,
            ':' if depth == 0 => {
                parts.push(&body[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&body[start..]);
    parts.len() == 3 && parts[2].trim() != "1"
}

/// No program memory lives in the first page (Linux's `mmap_min_addr` is at least this):
/// a section that begins there has a NULL base.
const NULL_PAGE: usize = 4096;

/// `'name' (file:line:col)` for a map-name string, for error messages.
fn described(name: usize) -> String {
    match host_memory::c_str(name).map(omp_format::SourceLocation::from_map_name) {
        Some(l) if l.is_known() => format!("'{}' ({l})", l.name),
        Some(l) => format!("'{}'", l.name),
        None => "a mapped variable (compile with -g for its name)".into(),
    }
}

fn null_reason(ty: i64) -> &'static str {
    if has(ty, mt::PRESENT) {
        "'present' map type modifier"
    } else {
        "device failure or illegal mapping"
    }
}
