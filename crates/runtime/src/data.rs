//! Data motion for `target data`, `enter data`, `exit data`, `update`, and the map clauses
//! of `target`: LLVM's targetDataBegin / targetDataEnd / targetDataUpdate semantics.

use crate::map_type::{self as mt, has, member_of};

use crate::table::{Lookup, MapEntry, MappingTable, ShadowPtr};
use crate::trace::{Direction, Event, RcChange};
use crate::{info, DeviceCtx, Failed, Outcome, Runtime};
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
    /// Host-to-device copies decided under the table lock, done after it is released.
    copies: Vec<PendingCopy>,
    /// Entries this construct marked as being mapped; cleared once its copies are done.
    busy: Vec<usize>,
    /// Events decided under the table lock, emitted after it is released.
    events: Vec<Event<'static>>,
}

impl ConstructState {
    /// Forgets everything, keeping the buffers (a construct's state reused by the next).
    pub(crate) fn clear(&mut self) {
        self.new_entries.clear();
        self.attaches.clear();
        self.copies.clear();
        self.busy.clear();
        self.events.clear();
    }

    /// Whether anything decided under the table lock waits for it to be released.
    fn pending(&self) -> bool {
        !self.copies.is_empty() || !self.busy.is_empty() || !self.events.is_empty()
    }
}

/// A copy to the device, decided while the table was locked.
enum PendingCopy {
    /// Program memory named by a map clause.
    Data { tgt: usize, host: usize, size: usize, name: usize },
    /// A device pointer value (an attached pointer) to store at `tgt`.
    Pointer { tgt: usize, value: usize, name: usize },
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
        let var = match info::map_name(name).map(omp_format::SourceLocation::from_map_name) {
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
                self.queue(st, || Event::MapUsm { device: dev.id, begin: r.begin, size: r.size });
            }
            return Ok(tp);
        } else if has(r.ty, mt::PRESENT) {
            self.present_message(dev, t, r.begin, r.size, r.name, false);
            return Ok(tp);
        } else if r.size > 0 {
            let bytes = r.size + r.padding;
            let start = self.start_timer();
            let alloc = dev.alloc(bytes, AllocKind::Default).map_err(|e| {
                info::error(format_args!("Failed to allocate {} bytes on device {}: {e}", r.size + r.padding, dev.id));
                dev.note_failure(&e, "allocating memory");
                Failed
            })?;
            let tgt_begin = alloc + r.padding;
            let time = Self::stop_timer(start);
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
                    st.copies.push(PendingCopy::Pointer { tgt: s.tgt_addr, value: s.tgt_val, name: 0 });
                }
            }
        }
        Ok(tp)
    }

    /// Queues an event decided under the table lock, to be emitted after it is released; it
    /// is only built when someone observes (no allocation on an unobserved construct).
    #[inline]
    fn queue(&self, st: &mut ConstructState, event: impl FnOnce() -> Event<'static>) {
        if self.observing() {
            st.events.push(event());
        }
    }

    /// Waits until no entry that one of `ranges` falls in is being mapped by another thread,
    /// and returns the table locked.
    /// `held` is the table's guard when the caller still holds it.
    fn lock_idle<'d>(
        &self,
        dev: &'d DeviceCtx,
        held: Option<omp_sync::MutexGuard<'d, MappingTable>>,
        ranges: &[(usize, usize)],
    ) -> omp_sync::MutexGuard<'d, MappingTable> {
        let mut table = held.unwrap_or_else(|| dev.lock_table());
        while ranges.iter().any(|&(hp, size)| table.is_busy(hp, size)) {
            table.waiters += 1;
            table = dev.mapped.wait(table);
            table.waiters -= 1;
        }
        table
    }

    /// Performs the copies a construct queued under the table lock, then tells waiting
    /// threads that the entries it was mapping are ready (also when a copy failed).
    fn flush(&self, dev: &DeviceCtx, st: &mut ConstructState) -> Outcome {
        for ev in std::mem::take(&mut st.events) {
            self.emit(&ev);
        }
        let mut result = Ok(());
        for copy in st.copies.drain(..) {
            if result.is_err() {
                continue;
            }
            result = match copy {
                // SAFETY: queued from a map clause's (begin, size): program memory that the
                // construct names and that stays alive while it runs.
                PendingCopy::Data { tgt, host, size, name } => unsafe { self.submit(dev, tgt, host, size, name) },
                PendingCopy::Pointer { tgt, value, name } => {
                    // SAFETY: `value` is a local of this frame, 8 readable bytes.
                    unsafe {
                        self.submit(dev, tgt, &value as *const usize as usize, std::mem::size_of::<usize>(), name)
                    }
                }
            };
        }
        if !st.busy.is_empty() {
            let mut table = dev.lock_table();
            for key in st.busy.drain(..) {
                table.clear_busy(key);
            }
            let waiters = table.waiters;
            drop(table);
            if waiters > 0 {
                dev.mapped.notify_all();
            }
        }
        result
    }

    /// Host→device copy with INFO 0x20 reporting.
    ///
    /// # Safety
    /// `[host, host+size)` must be readable program memory for the duration of the call.
    pub(crate) unsafe fn submit(&self, dev: &DeviceCtx, tgt: usize, host: usize, size: usize, name: usize) -> Outcome {
        self.transfer(dev, Direction::ToDevice, host, tgt, size, name, || {
            // SAFETY: the caller's promise.
            unsafe { dev.dev.submit(tgt, host, size) }
        })
        .map_err(|e| {
            info::error(format_args!("Copying data to device failed: {e}"));
            dev.note_failure(&e, "copying data to it");
            Failed
        })
    }

    /// A copy between the event that announces it and the one that reports it done.
    #[allow(clippy::too_many_arguments)]
    fn transfer<R>(
        &self,
        dev: &DeviceCtx,
        dir: Direction,
        host: usize,
        tgt: usize,
        bytes: usize,
        name: usize,
        copy: impl FnOnce() -> R,
    ) -> R {
        if !self.observing() {
            return copy();
        }
        let ev = |done| Event::Transfer { device: dev.id, dir, host, tgt, bytes, name, done };
        self.emit(&ev(None));
        let start = self.start_timer();
        let r = copy();
        if let Some(t) = Self::stop_timer(start) {
            self.emit(&ev(Some(t)));
        }
        r
    }

    /// Device→host copy with INFO 0x20 reporting.
    ///
    /// # Safety
    /// `[host, host+size)` must be writable program memory for the duration of the call.
    pub(crate) unsafe fn retrieve(
        &self,
        dev: &DeviceCtx,
        host: usize,
        tgt: usize,
        size: usize,
        name: usize,
    ) -> Outcome {
        self.transfer(dev, Direction::FromDevice, host, tgt, size, name, || {
            // SAFETY: the caller's promise.
            unsafe { dev.dev.retrieve(host, tgt, size) }
        })
        .map_err(|e| {
            info::error(format_args!("Copying data from device failed: {e}"));
            dev.note_failure(&e, "copying data from it");
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
            let ptr_and_obj = has(ty, mt::PTR_AND_OBJ);
            let outcome = (|| -> Outcome {
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
                    let p = self.get_target_pointer(dev, &mut table, &req, st)?;
                    if !p.present() {
                        info::error(format_args!(
                            "Call to getTargetPointer returned null pointer ({}).",
                            null_reason(ty)
                        ));
                        return Err(Failed);
                    }
                    pointer = Some(p);
                    // SAFETY: a PTR_AND_OBJ entry's base is the address of the program's pointer
                    // variable, which the map clause names and which is alive for the construct.
                    base = unsafe { host_memory::read_ptr(args.bases[i]) };
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
                if !obj.present() && !has(ty, mt::IMPLICIT) && member_of(ty).is_none() && ty != 0 {
                    self.queue(st, || Event::NoCounterpart { device: dev.id, name });
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

    /// Records a shadow pointer on the entry holding the pointer and writes the device value
    /// when it is new or changed.
    fn attach(&self, table: &mut MappingTable, key: Option<usize>, shadow: ShadowPtr, st: &mut ConstructState) {
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
        st.copies.push(PendingCopy::Pointer { tgt: shadow.tgt_addr, value: shadow.tgt_val, name });
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
            // SAFETY: an ATTACH entry's base is the address of the program's pointer variable,
            // mapped by this construct and alive for it.
            let host_val = unsafe { host_memory::read_ptr(ptr_addr) };
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
            st.copies.push(PendingCopy::Pointer { tgt: tgt_addr, value: expected, name });
        }
        drop(table);
        self.flush(dev, st)
    }

    /// targetDataEnd: release every entry, in reverse order; copy back on the last
    /// reference (or `always`); free storage once the whole construct is done.
    pub fn data_end(&self, dev: &DeviceCtx, args: &mut MapArgs, from_mapper: bool) -> Outcome {
        let mut removals: Vec<(usize, bool, bool)> = Vec::new();
        let result = self.data_end_entries(dev, args, from_mapper, &mut removals);
        if removals.is_empty() {
            return result;
        }
        let mut removed = Vec::new();
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
    fn release_entry(&self, dev: &DeviceCtx, e: &MapEntry) {
        self.emit(&Event::MapRemoved {
            device: dev.id,
            begin: e.begin,
            tgt_begin: e.tgt_begin,
            size: e.size(),
            name: e.name,
        });
        if e.owns_memory {
            let allocated = e.size() + (e.tgt_begin - e.tgt_alloc);
            let start = self.start_timer();
            let freed = dev.free_sized(e.tgt_alloc, allocated, AllocKind::Default);
            let time = Self::stop_timer(start);
            self.emit(&Event::Free { device: dev.id, tgt: e.tgt_alloc, bytes: e.size(), name: e.name, time });
            if let Err(err) = freed {
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
            let table = held.get_or_insert_with(|| dev.lock_table());
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
                    self.present_message(dev, table, begin, size, args.name(i), false);
                    return Err(Failed);
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
        let table = self.lock_idle(dev, None, &[(begin, size)]);
        let Lookup::Contained(key) = table.lookup(begin, size) else {
            if has(ty, mt::PRESENT) {
                self.present_message(dev, &table, begin, size, name, true);
                return Err(Failed);
            }
            return Ok(());
        };
        let e = table.get(key).expect("key");
        let tgt = e.translate(begin);
        let shadows = e.shadows.clone();
        drop(table);
        if has(ty, mt::TO) {
            // SAFETY: (begin, size) is the `update to` section: program memory it names.
            unsafe { self.submit(dev, tgt, begin, size, name) }?;
            for s in &shadows {
                // SAFETY: `s.tgt_val` is a field of a local copy, 8 readable bytes.
                unsafe {
                    self.submit(dev, s.tgt_addr, &s.tgt_val as *const usize as usize, std::mem::size_of::<usize>(), 0)
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
                // SAFETY: for a NON_CONTIG entry the compiler passes, as `begin`, an array of
                // `dims` {offset, count, stride} descriptors of 24 bytes each.
                unsafe { (host_memory::read_u64(p), host_memory::read_u64(p + 8), host_memory::read_u64(p + 16)) }
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
}

/// More dimensions than any array a program declares: a non-contiguous update's size beyond
/// this is not a dimension count.
const MAX_DIMS: i64 = 64;

/// Whether a map-name string's last array section has a stride other than 1
/// (`a.p[0:n:2]`): the name is the only trace of it when the compiler dropped the stride.
fn strided_name(name: usize) -> bool {
    let Some(s) = info::map_name(name) else { return false };
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
    match info::map_name(name).map(omp_format::SourceLocation::from_map_name) {
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
