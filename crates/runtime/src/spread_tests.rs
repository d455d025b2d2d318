//! Placement under `LIBOMPTARGET_SPREAD`, on three mock devices of one plugin.

use super::*;
use crate::data::Directive;
use crate::test_host::Host;
use crate::{Config, Descriptor};
use omp_format::OffloadEntry;
use omp_plugin::mock::{MockDevice, SharedMock};
use omp_plugin::{AllocKind, Device, Plugin};
use std::sync::atomic::AtomicU64;

/// One plugin with three mock devices: devices of one kind.
struct ThreeMocks([SharedMock; 3]);

impl Plugin for ThreeMocks {
    fn name(&self) -> &str {
        "three mocks"
    }
    fn device_count(&self) -> usize {
        3
    }
    fn is_compatible(&self, image: &[u8], _triple: Option<&str>) -> bool {
        image.starts_with(b"MOCK")
    }
    fn open_device(&self, index: usize) -> omp_plugin::Result<Box<dyn Device>> {
        Ok(Box::new(self.0[index].0.clone()))
    }
}

/// The region id of the test kernel, and its name.
static REGION: u8 = 0;
const KERNEL: &std::ffi::CStr = c"k";
const VARIABLE: &std::ffi::CStr = c"g";
static GLOBAL: [u8; 8] = [0; 8];

pub(crate) fn region() -> usize {
    &REGION as *const u8 as usize
}

/// A runtime with spreading on over three mock devices that have the kernel; `variable`
/// adds a declare-target variable to the binary.
pub(crate) fn runtime(variable: bool) -> Runtime {
    counting_runtime(variable).0
}

/// The three mock devices of the last [`counting_runtime`] made on this thread.
pub(crate) fn last_mocks() -> [SharedMock; 3] {
    MOCKS.with(|m| m.borrow().clone())
}

thread_local! {
    static MOCKS: std::cell::RefCell<[SharedMock; 3]> = Default::default();
}

/// [`runtime`], with each device's count of kernel runs. The kernel adds one to each of the
/// four `u64`s its first argument points to (tests that launch pass such an array).
pub(crate) fn counting_runtime(variable: bool) -> (Runtime, Arc<[AtomicU64; 3]>) {
    let mocks: [SharedMock; 3] = Default::default();
    let runs: Arc<[AtomicU64; 3]> = Arc::default();
    for (id, m) in mocks.iter().enumerate() {
        let count = runs.clone();
        m.0.add_kernel(
            "k",
            Box::new(move |d: &MockDevice, args: &[usize]| {
                count[id].fetch_add(1, Ordering::Relaxed);
                for k in 0..4 {
                    let at = args[0] + 8 * k;
                    let v = u64::from_ne_bytes(d.read(at, 8).try_into().expect("8 bytes"));
                    d.write(at, &(v + 1).to_ne_bytes());
                }
            }),
        );
        m.0.add_global("g", GLOBAL.len());
    }
    MOCKS.with(|m| *m.borrow_mut() = mocks.clone());
    let config = Config::from_env(|k| (k == "LIBOMPTARGET_SPREAD").then(|| "1".to_string()));
    let rt = Runtime::new(config, Box::new(Host), vec![Box::new(ThreeMocks(mocks))]);
    let entry = |addr: usize, name: &std::ffi::CStr, size: u64| OffloadEntry {
        addr: addr as u64,
        name: name.as_ptr() as u64,
        size,
        flags: 0,
        data: 0,
        kind: 1,
    };
    let mut entries = vec![entry(region(), KERNEL, 0)];
    if variable {
        entries.push(entry(GLOBAL.as_ptr() as usize, VARIABLE, GLOBAL.len() as u64));
    }
    // SAFETY: the entries name statics of this test and C string constants.
    unsafe {
        rt.register_lib(Descriptor {
            key: 1,
            images: vec![crate::BinaryImage { bytes: b"MOCK image".as_slice().into() }],
            entries,
            layout: omp_format::EntryLayout::V1,
        })
    };
    (rt, runs)
}

/// The map arrays of one entry.
pub(crate) struct Arrays {
    pub(crate) bases: Vec<usize>,
    begins: Vec<usize>,
    sizes: Vec<i64>,
    types: Vec<i64>,
}

impl Arrays {
    pub(crate) fn new(entries: &[(usize, i64, i64)]) -> Self {
        Arrays {
            bases: entries.iter().map(|e| e.0).collect(),
            begins: entries.iter().map(|e| e.0).collect(),
            sizes: entries.iter().map(|e| e.1).collect(),
            types: entries.iter().map(|e| e.2).collect(),
        }
    }
    pub(crate) fn args(&mut self) -> MapArgs<'_> {
        // SAFETY: each entry is a live buffer of the test (or a by-value scalar), as long as
        // the arrays.
        unsafe { MapArgs::new(&mut self.bases, &self.begins, &self.sizes, &self.types, None, None) }
    }
}

pub(crate) const TOFROM: i64 = mt::TO | mt::FROM | mt::TARGET_PARAM;
pub(crate) const BY_VALUE: i64 = mt::LITERAL | mt::TARGET_PARAM;

#[test]
fn map_types_that_need_the_default_device_keep_a_region_there() {
    for (ty, movable) in [
        (TOFROM, true),
        (BY_VALUE, true),
        (mt::ATTACH, true),
        (TOFROM | mt::IMPLICIT | mt::CLOSE, true),
        (TOFROM | mt::PRESENT, false),
        (mt::TARGET_PARAM | mt::RETURN_PARAM, false),
        (mt::TO | mt::NON_CONTIG, false),
    ] {
        let mut a = Arrays::new(&[(0x1000, 8, BY_VALUE), (0x2000, 8, ty)]);
        let got = movable_map_types(&a.args());
        assert_eq!(got.is_ok(), movable, "map type {ty:#x}: {got:?}");
        if !movable {
            assert_eq!(got, Err(Stay::MapType(1)));
        }
    }
}

#[test]
fn regions_in_flight_go_to_the_least_loaded_devices_and_leave_them_when_done() {
    let rt = runtime(false);
    let spread = rt.spread.as_deref().expect("spreading is on");
    let data: Vec<[u64; 4]> = vec![[1; 4]; 4];
    let mut arrays: Vec<Arrays> =
        data.iter().map(|d| Arrays::new(&[(d.as_ptr() as usize, 32, TOFROM), (7, 4, BY_VALUE)])).collect();
    let mut args: Vec<MapArgs> = arrays.iter_mut().map(Arrays::args).collect();
    let mut placed = Vec::new();
    for a in &args[..3] {
        placed.push(rt.place(spread, Loc::NONE, region(), a).expect("placed"));
    }
    let mut ids: Vec<i32> = placed.iter().map(|p| p.device.id).collect();
    ids.sort();
    assert_eq!(ids, [0, 1, 2], "three regions in flight, one on each device");
    assert_eq!(spread.in_flight(), [1, 1, 1]);
    let freed = placed.remove(1).device.id;
    let next = rt.place(spread, Loc::NONE, region(), &args[3]).expect("placed");
    assert_eq!(next.device.id, freed, "the device whose region ended is the least loaded");
    drop((next, placed));
    assert_eq!(spread.in_flight(), [0, 0, 0]);
    args.clear();
}

#[test]
fn data_entered_on_another_device_keeps_the_region_off_that_one() {
    let rt = runtime(false);
    let spread = rt.spread.as_deref().expect("spreading is on");
    let entered = [5u64; 4];
    let mut enter = Arrays::new(&[(entered.as_ptr() as usize, 32, mt::TO)]);
    rt.data_directive(Loc::NONE, 1, &mut enter.args(), Directive::Begin, false);
    let mut region_args = Arrays::new(&[(entered.as_ptr() as usize, 32, TOFROM)]);
    let args = region_args.args();
    let placed: Vec<_> = (0..4).map(|_| rt.place(spread, Loc::NONE, region(), &args).expect("placed")).collect();
    assert!(placed.iter().all(|p| p.device.id != 1), "{:?}", spread.in_flight());
}

#[test]
fn data_that_a_movable_region_in_flight_mapped_is_its_own_not_entered_data() {
    let rt = runtime(false);
    let spread = rt.spread.as_deref().expect("spreading is on");
    let shared = [3u64; 4];
    let mut a = Arrays::new(&[(shared.as_ptr() as usize, 32, mt::TO | mt::TARGET_PARAM)]);
    let args = a.args();
    let first = rt.place(spread, Loc::NONE, region(), &args).expect("placed");
    let dev = first.device.clone();
    // The region maps its data on its device, as its launch does.
    let mut enter = Arrays::new(&[(shared.as_ptr() as usize, 32, mt::TO)]);
    rt.data_directive(Loc::NONE, dev.id.into(), &mut enter.args(), Directive::Begin, false);
    assert_eq!(
        all_new_but(&dev.lock_table(), &[], &args, &[]),
        Err(Stay::Present(0)),
        "without the region, entered data"
    );
    assert_eq!(
        all_new_but(&dev.lock_table(), &spread.own(dev.id), &args, &[]),
        Ok(()),
        "the region in flight's own data"
    );
    let second = rt.place(spread, Loc::NONE, region(), &args).expect("placed");
    assert_ne!(second.device.id, dev.id, "a second reader goes to a less loaded device");
    drop((first, second));
    assert!(spread.own(dev.id).is_empty(), "a region's data is its own only while it runs");
    assert_eq!(all_new_but(&dev.lock_table(), &spread.own(dev.id), &args, &[]), Err(Stay::Present(0)));
}

#[test]
fn a_device_address_passed_by_value_keeps_the_region_on_the_default_device() {
    let rt = runtime(false);
    let spread = rt.spread.as_deref().expect("spreading is on");
    let block = rt.target_alloc(64, 0, AllocKind::Default, "omp_target_alloc").expect("allocated");
    let mut a = Arrays::new(&[(block + 8, 8, BY_VALUE)]);
    let args = a.args();
    assert_eq!(rt.movable(spread, &rt.device(0).unwrap(), &args), Err(Stay::DeviceAddress(0)));
    let placed: Vec<_> = (0..3).map(|_| rt.place(spread, Loc::NONE, region(), &args).expect("placed")).collect();
    assert!(placed.iter().all(|p| p.device.id == 0));
}

#[test]
fn a_binary_with_declare_target_variables_keeps_its_regions_on_the_default_device() {
    let rt = runtime(true);
    let spread = rt.spread.as_deref().expect("spreading is on");
    let mut a = Arrays::new(&[(7, 4, BY_VALUE)]);
    let args = a.args();
    assert_eq!(rt.movable(spread, &rt.device(0).unwrap(), &args), Err(Stay::DeclareTargetData));
    let placed: Vec<_> = (0..3).map(|_| rt.place(spread, Loc::NONE, region(), &args).expect("placed")).collect();
    assert!(placed.iter().all(|p| p.device.id == 0));
}

#[test]
fn spreading_off_is_no_state_at_all() {
    let rt = Runtime::new(Config::default(), Box::new(Host), Vec::new());
    assert!(rt.spread.is_none());
}
