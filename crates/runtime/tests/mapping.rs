//! Mapping semantics on a mock device with its own address space: reference counts, hold
//! versus dynamic, extension, delayed deletion, attached pointers, `present`.

use omp_plugin::mock::MockDevice;
use omp_runtime::data::{Absent, ConstructState, Directive, MapError, NotPresent};
use omp_runtime::map_type::*;
use omp_runtime::MapName;
use omp_runtime::{Config, Loc, MapArgs, Runtime};
use std::sync::Arc;

mod common;

fn runtime() -> (Runtime, Arc<MockDevice>) {
    common::runtime_with(Config::default())
}

/// One map entry, in the compiler's arrays.
struct Maps {
    bases: Vec<usize>,
    begins: Vec<usize>,
    sizes: Vec<i64>,
    types: Vec<i64>,
}

impl Maps {
    /// # Safety
    /// Every entry added must name memory of the test that stays alive, and that the test
    /// does not hold borrowed, while constructs use these maps: the runtime reads and writes
    /// it by address.
    unsafe fn new() -> Self {
        Maps { bases: vec![], begins: vec![], sizes: vec![], types: vec![] }
    }
    fn add<T, U>(mut self, base: *const T, begin: *const U, size: usize, ty: i64) -> Self {
        self.bases.push(base as usize);
        self.begins.push(begin as usize);
        self.sizes.push(size as i64);
        self.types.push(ty);
        self
    }
    fn args(&mut self) -> MapArgs<'_> {
        // SAFETY: whoever made these maps vouched for every entry (`Maps::new`).
        unsafe { MapArgs::new(&mut self.bases, &self.begins, &self.sizes, &self.types, None, None) }
    }
}

fn enter(rt: &Runtime, m: &mut Maps) {
    rt.data_directive(Loc::NONE, 0, &mut m.args(), Directive::Begin, false);
}

fn exit(rt: &Runtime, m: &mut Maps) {
    rt.data_directive(Loc::NONE, 0, &mut m.args(), Directive::End, false);
}

fn tgt(rt: &Runtime, p: usize) -> usize {
    rt.mapped_ptr(p, 0).expect("device 0 exists")
}

#[test]
fn dynamic_count_copies_on_first_and_last_reference() {
    let (rt, dev) = runtime();
    let mut x = [1u32, 2, 3, 4];
    let px = x.as_mut_ptr();
    // SAFETY: the test's arrays named here outlive the constructs that map them.
    enter(&rt, &mut unsafe { Maps::new() }.add(px, px, 16, TO));
    let t = tgt(&rt, px as usize);
    assert_ne!(t, 0);
    assert_ne!(t, px as usize, "the mock device has its own address space");
    assert_eq!(dev.read(t, 4), 1u32.to_le_bytes());
    // A second enter does not copy again: change the host copy and check the device keeps 1.
    x[0] = 50;
    // SAFETY: the test's arrays named here outlive the constructs that map them.
    enter(&rt, &mut unsafe { Maps::new() }.add(px, px, 16, TO));
    assert_eq!(dev.read(t, 4), 1u32.to_le_bytes());
    dev.write(t, &9u32.to_le_bytes());
    // First exit: count 2 -> 1, nothing copied back, still present.
    // SAFETY: the test's arrays named here outlive the constructs that map them.
    exit(&rt, &mut unsafe { Maps::new() }.add(px, px, 16, FROM));
    assert_eq!(x[0], 50);
    assert_eq!(rt.is_present(px as usize, 0).unwrap(), 1);
    // Last exit copies back and frees.
    // SAFETY: the test's arrays named here outlive the constructs that map them.
    exit(&rt, &mut unsafe { Maps::new() }.add(px, px, 16, FROM));
    assert_eq!(x[0], 9);
    assert_eq!(rt.is_present(px as usize, 0).unwrap(), 0);
    assert_eq!(dev.live_allocations(), 1, "only the cached block in the memory manager remains");
}

#[test]
fn hold_count_keeps_data_after_dynamic_release_and_delete() {
    let (rt, _dev) = runtime();
    let x = [0u8; 32];
    let p = x.as_ptr();
    // SAFETY: the test's arrays named here outlive the constructs that map them.
    enter(&rt, &mut unsafe { Maps::new() }.add(p, p, 32, TO | OMPX_HOLD));
    // SAFETY: the test's arrays named here outlive the constructs that map them.
    enter(&rt, &mut unsafe { Maps::new() }.add(p, p, 32, TO));
    // SAFETY: the test's arrays named here outlive the constructs that map them.
    exit(&rt, &mut unsafe { Maps::new() }.add(p, p, 32, DELETE));
    assert_eq!(rt.is_present(p as usize, 0).unwrap(), 1, "delete does not override a hold reference");
    // SAFETY: the test's arrays named here outlive the constructs that map them.
    exit(&rt, &mut unsafe { Maps::new() }.add(p, p, 32, OMPX_HOLD));
    assert_eq!(rt.is_present(p as usize, 0).unwrap(), 0);
}

#[test]
fn explicit_extension_fails_implicit_extension_reuses() {
    let (rt, _dev) = runtime();
    let x = [0u8; 64];
    let p = x.as_ptr();
    // SAFETY: the test's arrays named here outlive the constructs that map them.
    let mut m = unsafe { Maps::new() }.add(p, p, 32, TO);
    let dev = rt.device(0).unwrap();
    rt.data_begin(&dev, &mut m.args(), false, &mut ConstructState::default()).unwrap();
    // [16, 48) extends the mapping [0, 32): an explicit map must fail…
    let q = p.wrapping_add(16);
    // SAFETY: the test's arrays named here outlive the constructs that map them.
    let mut bigger = unsafe { Maps::new() }.add(q, q, 32, TO);
    let refused = rt.data_begin(&dev, &mut bigger.args(), false, &mut ConstructState::default());
    let why = Absent::Extension { begin: q as usize, size: 32, mapped: (p as usize, 32), present: None };
    assert_eq!(refused, Err(MapError::NoTargetPointer { ty: TO, why: Some(Box::new(why)) }));
    assert_eq!(
        refused.unwrap_err().to_string(),
        format!(
            "explicit extension not allowed: host address specified is 0x{:016x} (32 bytes), but device allocation \
             maps to host at 0x{:016x} (32 bytes)\nCall to getTargetPointer returned null pointer (device failure or \
             illegal mapping).",
            q as usize, p as usize
        )
    );
    // …an implicit one reuses the existing entry.
    // SAFETY: the test's arrays named here outlive the constructs that map them.
    let mut implicit = unsafe { Maps::new() }.add(q, q, 32, TO | IMPLICIT);
    rt.data_begin(&dev, &mut implicit.args(), false, &mut ConstructState::default()).unwrap();
    assert_eq!(rt.mapped_ptr(q as usize, 0).unwrap(), rt.mapped_ptr(p as usize, 0).unwrap() + 16);
}

#[test]
fn present_modifier_fails_on_unmapped_data() {
    let (rt, _dev) = runtime();
    let x = [0u8; 8];
    let p = x.as_ptr();
    let dev = rt.device(0).unwrap();
    // SAFETY: the test's arrays named here outlive the constructs that map them.
    let mut m = unsafe { Maps::new() }.add(p, p, 8, TO | PRESENT);
    let refused = rt.data_begin(&dev, &mut m.args(), false, &mut ConstructState::default());
    let why = NotPresent { device: 0, begin: p as usize, size: 8, name: MapName::NONE, motion: false, nearest: None };
    assert_eq!(
        refused,
        Err(MapError::NoTargetPointer { ty: TO | PRESENT, why: Some(Box::new(Absent::NotPresent(why))) })
    );
    assert_eq!(rt.is_present(p as usize, 0).unwrap(), 0);
}

#[test]
fn an_update_of_unmapped_data_with_present_is_a_not_present_value() {
    let (rt, _dev) = runtime();
    let x = [0u8; 8];
    let y = [0u8; 16];
    let (p, q) = (x.as_ptr(), y.as_ptr());
    let dev = rt.device(0).unwrap();
    // SAFETY: the test's arrays named here outlive the constructs that map them.
    let mut mapped = unsafe { Maps::new() }.add(q, q, 16, TO);
    enter(&rt, &mut mapped);
    // SAFETY: as above.
    let mut update = unsafe { Maps::new() }.add(p, p, 8, TO | PRESENT);
    let refused = rt.data_update(&dev, &mut update.args());
    let Err(MapError::NotPresent(why)) = refused else { panic!("not present: {refused:?}") };
    let (q, p) = (q as usize, p as usize);
    assert_eq!(
        *why,
        NotPresent {
            device: 0,
            begin: p,
            size: 8,
            name: MapName::NONE,
            motion: true,
            nearest: Some((MapName::NONE, q, q + 16))
        }
    );
    assert_eq!(
        MapError::NotPresent(why).to_string(),
        format!(
            "device mapping required by 'present' motion modifier does not exist for host address 0x{p:016x} (8 \
             bytes)\nthe variable occupies 0x{p:016x}..0x{:016x}, which is not mapped; the nearest mapping on device 0 \
             is 'unknown' at 0x{q:016x}..0x{:016x} (16 bytes)",
            p + 8,
            q + 16
        )
    );
    // Without `present`, an update of unmapped data does nothing.
    // SAFETY: as above.
    let mut quiet = unsafe { Maps::new() }.add(p as *const u8, p as *const u8, 8, TO);
    assert_eq!(rt.data_update(&dev, &mut quiet.args()), Ok(()));
}

#[test]
fn an_invalid_device_number_in_the_memory_api_is_a_value() {
    use omp_runtime::api::{MemoryApiError, On};
    let (rt, _dev) = runtime();
    let refused = rt.target_alloc(64, 7, omp_plugin::AllocKind::Default, "omp_target_alloc");
    assert_eq!(refused, Err(MemoryApiError::InvalidDevice { call: "omp_target_alloc", id: 7, devices: 1, host: 1 }));
    assert_eq!(
        refused.unwrap_err().to_string(),
        "omp_target_alloc: device number 7 is not valid: 1 offload devices (0..0) and the host (1)"
    );
    // Two bad numbers in one copy are two errors, in order.
    let (a, b) = (0u8, 0u8);
    // SAFETY: neither side is used: both device numbers are refused first.
    let copied = unsafe { rt.memcpy(&a as *const u8 as usize, &b as *const u8 as usize, 1, 0, 0, 5, -3) };
    let Err(MemoryApiError::Devices(both)) = copied else { panic!("two refusals: {copied:?}") };
    assert!(matches!(both[0], MemoryApiError::InvalidDevice { id: 5, .. }));
    assert!(matches!(both[1], MemoryApiError::InvalidDevice { id: -3, .. }));
    // A free of what was never allocated names the device.
    assert_eq!(
        rt.target_free(0x1000, 0, omp_plugin::AllocKind::Default, "omp_target_free"),
        Err(MemoryApiError::BadFree { call: "omp_target_free", ptr: 0x1000, on: On::Device(0) })
    );
}

#[repr(C)]
struct Holder {
    n: u64,
    data: *mut u32,
}

#[test]
fn pointer_member_is_attached_and_restored() {
    let (rt, dev) = runtime();
    let mut buf = [7u32; 8];
    let bufp = buf.as_mut_ptr();
    let mut h = Holder { n: 8, data: bufp };
    let hp = std::ptr::addr_of_mut!(h);
    let member = std::ptr::addr_of_mut!(h.data);
    // clang 19: combined struct entry + MEMBER_OF(1) | PTR_AND_OBJ pointee.
    // SAFETY: the test's arrays named here outlive the constructs that map them.
    let mut m = unsafe { Maps::new() }.add(hp, hp, std::mem::size_of::<Holder>(), TO | FROM).add(
        member,
        bufp,
        32,
        TO | FROM | PTR_AND_OBJ | (1i64 << 48),
    );
    enter(&rt, &mut m);
    let dev_h = tgt(&rt, hp as usize);
    let dev_buf = tgt(&rt, bufp as usize);
    // The device struct's pointer holds the device buffer address, not the host one.
    let stored = usize::from_le_bytes(dev.read(dev_h + 8, 8).try_into().unwrap());
    assert_eq!(stored, dev_buf);
    dev.write(dev_buf, &99u32.to_le_bytes());
    exit(&rt, &mut m);
    assert_eq!(buf[0], 99);
    // Copying the struct back brought the device pointer; the shadow restored the host one.
    assert_eq!(h.data, bufp);
    assert_eq!(rt.is_present(hp as usize, 0).unwrap(), 0);
}

#[test]
fn attach_entries_of_clang_22() {
    let (rt, dev) = runtime();
    let buf = [5u32; 4];
    let ptr: *const u32 = buf.as_ptr();
    let pp = &ptr as *const *const u32;
    // Map the pointer variable itself and the pointee, then ATTACH (pointer storage -> pointee).
    // SAFETY: the test's arrays named here outlive the constructs that map them.
    let mut m = unsafe { Maps::new() }.add(pp, pp, 8, TO).add(ptr, ptr, 16, TO).add(pp, ptr, 8, ATTACH);
    enter(&rt, &mut m);
    let dev_ptr_storage = tgt(&rt, pp as usize);
    let stored = usize::from_le_bytes(dev.read(dev_ptr_storage, 8).try_into().unwrap());
    assert_eq!(stored, tgt(&rt, ptr as usize));
}

#[test]
fn deletion_waits_for_the_end_of_the_construct() {
    // Two entries of one exit construct name the same data: the first decrement to zero must
    // not free storage that the second entry still copies back from.
    let (rt, dev) = runtime();
    let mut x = [1u8; 16];
    let p = x.as_mut_ptr();
    // SAFETY: the test's arrays named here outlive the constructs that map them.
    enter(&rt, &mut unsafe { Maps::new() }.add(p, p, 16, TO));
    // SAFETY: the test's arrays named here outlive the constructs that map them.
    enter(&rt, &mut unsafe { Maps::new() }.add(p, p, 16, TO));
    let t = tgt(&rt, p as usize);
    dev.write(t, &[42u8; 16]);
    // SAFETY: the test's arrays named here outlive the constructs that map them.
    exit(&rt, &mut unsafe { Maps::new() }.add(p, p, 16, FROM).add(p, p, 16, FROM | ALWAYS));
    assert_eq!(x[0], 42);
    assert_eq!(rt.is_present(p as usize, 0).unwrap(), 0);
}

#[test]
fn update_moves_data_both_ways() {
    let (rt, dev) = runtime();
    let mut x = [3u16; 4];
    let p = x.as_mut_ptr();
    // SAFETY: the test's arrays named here outlive the constructs that map them.
    enter(&rt, &mut unsafe { Maps::new() }.add(p, p, 8, TO));
    let t = tgt(&rt, p as usize);
    x[0] = 11;
    // SAFETY: the test's arrays named here outlive the constructs that map them.
    rt.data_directive(Loc::NONE, 0, &mut unsafe { Maps::new() }.add(p, p, 8, TO).args(), Directive::Update, false);
    assert_eq!(dev.read(t, 2), 11u16.to_le_bytes());
    dev.write(t + 2, &12u16.to_le_bytes());
    // SAFETY: the test's arrays named here outlive the constructs that map them.
    rt.data_directive(Loc::NONE, 0, &mut unsafe { Maps::new() }.add(p, p, 8, FROM).args(), Directive::Update, false);
    assert_eq!(x[1], 12);
}
