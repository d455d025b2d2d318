//! The runtime's seams on a mock device: copies outside the table lock (two threads overlap,
//! the same data is copied once), structured events in order, a lost device.

use omp_plugin::mock::MockDevice;
use omp_runtime::api::MemoryApiError;
use omp_runtime::data::ConstructState;
use omp_runtime::map_type::*;
use omp_runtime::trace::{Event, EventCx, Interest, Kinds, Observer};
use omp_runtime::{Config, Loc, MapArgs, Runtime};
use std::sync::{Arc, Mutex};

mod common;

fn runtime(config: Config) -> (Arc<Runtime>, Arc<MockDevice>) {
    let (rt, dev) = common::runtime_with(config);
    (Arc::new(rt), dev)
}

/// Maps `[p, p+len)` with `ty` through data-begin on device 0.
///
/// # Safety
/// `[p, p+len)` is memory of the calling test, alive and not borrowed while it is mapped.
unsafe fn map(rt: &Runtime, p: usize, len: usize, ty: i64) -> Result<(), omp_runtime::data::MapError> {
    let (mut bases, begins, sizes, types) = (vec![p], vec![p], vec![len as i64], vec![ty]);
    // SAFETY: the caller's promise.
    let mut args = unsafe { MapArgs::new(&mut bases, &begins, &sizes, &types, None, None) };
    let dev = rt.device(0).expect("device 0");
    rt.data_begin(&dev, &mut args, false, &mut ConstructState::default())
}

#[test]
fn two_threads_copy_different_data_at_the_same_time() {
    let (rt, dev) = runtime(Config::default());
    dev.expect_overlap(2);
    let bufs: Vec<Vec<u8>> = (0..2).map(|i| vec![i as u8 + 1; 1 << 16]).collect();
    std::thread::scope(|s| {
        for b in &bufs {
            let rt = rt.clone();
            let p = b.as_ptr() as usize;
            // SAFETY: `p` is one of `bufs`, alive until the scope ends.
            s.spawn(move || unsafe { map(&rt, p, 1 << 16, TO) }.expect("mapped"));
        }
    });
    assert!(dev.rendezvous_met(), "the second thread's copy had to wait for the first one's: a lock is held across it");
    for b in &bufs {
        let t = rt.mapped_ptr(b.as_ptr() as usize, 0).expect("device 0 exists");
        assert_eq!(dev.read(t, 4), b[..4], "each thread's data arrived");
    }
}

#[test]
fn the_same_data_is_copied_once_and_nobody_sees_it_early() {
    let (rt, dev) = runtime(Config::default());
    dev.set_copy_delay(std::time::Duration::from_millis(50));
    let data = vec![7u8; 4096];
    let p = data.as_ptr() as usize;
    let seen: Vec<Vec<u8>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..4)
            .map(|_| {
                let (rt, dev) = (rt.clone(), dev.clone());
                s.spawn(move || {
                    // SAFETY: `p` is 4096 bytes of this test's, alive until the scope ends.
                    unsafe { map(&rt, p, 4096, TO) }.expect("mapped");
                    // Once data-begin returns, the device copy must be complete.
                    dev.read(rt.mapped_ptr(p, 0).expect("device 0 exists"), 4096)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().expect("thread")).collect()
    });
    assert_eq!(dev.submits(), 1, "one copy for one mapping, however many threads map it");
    for s in seen {
        assert!(s.iter().all(|&b| b == 7), "a thread used the mapping before its data arrived");
    }
}

#[derive(Default)]
struct Recorder(Mutex<Vec<String>>);

impl Observer for Recorder {
    fn interest(&self) -> Interest {
        Interest { kinds: Kinds::ALL, ..Interest::NONE }
    }

    fn event(&self, ev: &Event, _cx: &EventCx) {
        let name = match ev {
            Event::Construct { begin: true, .. } => "construct-begin",
            Event::Construct { begin: false, .. } => "construct-end",
            Event::Arguments { .. } => "arguments",
            Event::Alloc { .. } => "alloc",
            Event::MapCreated { .. } => "created",
            Event::MapReused { .. } => "reused",
            Event::MapReleased { .. } => "released",
            Event::MapRemoved { .. } => "removed",
            Event::Transfer { done: None, .. } => "transfer",
            Event::Free { .. } => "free",
            Event::MappingTables { .. } => "tables",
            _ => return,
        };
        self.0.lock().unwrap().push(name.to_string());
    }
}

struct Shared(Arc<Recorder>);

impl Observer for Shared {
    fn interest(&self) -> Interest {
        self.0.interest()
    }

    fn event(&self, ev: &Event, cx: &EventCx) {
        self.0.event(ev, cx)
    }
}

#[test]
fn a_construct_reports_its_mapping_decisions_in_order() {
    let (rt, _dev) = runtime(Config::default());
    let rec = Arc::new(Recorder::default());
    rt.set_observers(vec![Box::new(Shared(rec.clone()))]);
    let data = [1u32; 16];
    let p = data.as_ptr() as usize;
    let (mut bases, begins, sizes, types) = (vec![p], vec![p], vec![64i64], vec![TO | FROM]);
    // SAFETY: `data` is this test's, 64 bytes, alive through both constructs.
    let mut args = unsafe { MapArgs::new(&mut bases, &begins, &sizes, &types, None, None) };
    rt.data_directive(Loc::NONE, 0, &mut args, omp_runtime::data::Directive::Begin, false);
    rt.data_directive(Loc::NONE, 0, &mut args, omp_runtime::data::Directive::End, false);
    let got = rec.0.lock().unwrap().clone();
    let want = [
        "arguments",
        "construct-begin",
        "alloc",
        "created",
        "transfer",
        "construct-end",
        "tables",
        "arguments",
        "construct-begin",
        "released",
        "transfer",
        "removed",
        "free",
        "construct-end",
        "tables",
    ];
    assert_eq!(got, want);
}

/// What an observer heard: the event, the target id it names (begin events), and the
/// construct and return address its context gives.
type Heard = Vec<(&'static str, u64, u64, usize)>;

struct Contexts(Arc<Mutex<Heard>>);

impl Observer for Contexts {
    fn interest(&self) -> Interest {
        Interest { kinds: Kinds::ALL, ..Interest::NONE }
    }

    fn event(&self, ev: &Event, cx: &EventCx) {
        let (name, id) = match *ev {
            Event::Construct { begin: true, target_id, .. } => ("begin", target_id),
            Event::Transfer { done: None, .. } => ("transfer", 0),
            Event::MappingTables { .. } => ("tables", 0),
            _ => return,
        };
        self.0.lock().unwrap().push((name, id, cx.construct(), cx.codeptr()));
    }
}

/// Each event's context names the construct it belongs to and where the program entered it
/// (what OMPT's data-op and submit callbacks report); after the construct, nothing.
#[test]
fn an_events_context_names_its_construct_and_the_programs_return_address() {
    let (rt, _dev) = runtime(Config::default());
    let heard = Arc::new(Mutex::new(Heard::new()));
    rt.set_observers(vec![Box::new(Contexts(heard.clone()))]);
    omp_runtime::trace::set_return_address(0x4000_1234);
    let data = [1u32; 16];
    let p = data.as_ptr() as usize;
    let (mut bases, begins, sizes, types) = (vec![p], vec![p], vec![64i64], vec![TO]);
    // SAFETY: `data` is this test's, 64 bytes, alive through the construct.
    let mut args = unsafe { MapArgs::new(&mut bases, &begins, &sizes, &types, None, None) };
    rt.data_directive(Loc::NONE, 0, &mut args, omp_runtime::data::Directive::Begin, false);
    let heard = heard.lock().unwrap().clone();
    let id = heard[0].1;
    assert_ne!(id, 0);
    assert_eq!(heard, [("begin", id, id, 0x4000_1234), ("transfer", 0, id, 0x4000_1234), ("tables", 0, 0, 0)]);
}

#[test]
fn a_lost_device_is_reported_once_and_not_used_again() {
    let (rt, dev) = runtime(Config::default());
    let data = [0u8; 64];
    let p = data.as_ptr() as usize;
    // SAFETY: `data` is this test's, 64 bytes, alive to the end.
    unsafe { map(&rt, p, 64, TO) }.expect("a live device maps");
    dev.lose("worker process exited (signal 9)");
    let other = [0u8; 64];
    // SAFETY: `other` is this test's, 64 bytes, alive to the end.
    assert!(unsafe { map(&rt, other.as_ptr() as usize, 64, TO) }.is_err());
    let d = rt.device(0).expect("device 0");
    assert_eq!(d.lost(), Some("worker process exited (signal 9)"));
    assert!(
        matches!(rt.check_device(0, Loc::NONE), Err(omp_runtime::SelectError::Lost { device: 0 })),
        "a lost device runs no further construct"
    );
    assert_eq!(
        rt.target_alloc(64, 0, omp_plugin::AllocKind::Default, "omp_target_alloc"),
        Err(MemoryApiError::LostDevice),
        "nor API call, with no second message"
    );
}

#[test]
fn a_device_memory_api_call_that_meets_a_lost_device_marks_it_lost() {
    let (rt, dev) = runtime(Config::default());
    let p =
        rt.target_alloc(64, 0, omp_plugin::AllocKind::Default, "omp_target_alloc").expect("a live device allocates");
    assert_ne!(p, 0);
    dev.lose("worker process exited (signal 9)");
    let src = [1u8; 64];
    let host = rt.initial_device();
    // SAFETY: the host side is `src`, 64 readable bytes of this test's.
    let copied = unsafe { rt.memcpy(p, src.as_ptr() as usize, 64, 0, 0, 0, host) };
    let Err(MemoryApiError::Memcpy(e)) = copied else { panic!("the copy fails on the device: {copied:?}") };
    assert!(e.is_lost());
    assert_eq!(
        e.to_string(),
        "worker process exited (signal 9)",
        "the backend's reason, which the error's line quotes"
    );
    assert_eq!(
        MemoryApiError::Memcpy(e).to_string(),
        "omp_target_memcpy failed: worker process exited (signal 9)\n\
         device 0 was lost while copying data to it: worker process exited (signal 9); it will not be used again"
    );
    assert_eq!(rt.device(0).expect("device 0").lost(), Some("worker process exited (signal 9)"));
    assert!(
        matches!(rt.check_device(0, Loc::NONE), Err(omp_runtime::SelectError::Lost { device: 0 })),
        "a lost device runs no further construct"
    );
}

#[test]
fn an_indirect_function_that_cannot_be_read_is_a_load_error_value() {
    use omp_format::{entries::FLAG_INDIRECT, EntryLayout, OffloadEntry};
    use omp_plugin::mock::{MockPlugin, SharedMock};
    use omp_runtime::device::LoadError;
    use omp_runtime::{BinaryImage, Descriptor};

    static NAME: &std::ffi::CStr = c"fp";
    static HOST_FP: u64 = 0;
    let mock = SharedMock::default();
    mock.0.add_global("fp", 8);
    let rt = Runtime::new(Config::default(), Box::new(common::Host), vec![Box::new(MockPlugin(mock.clone()))]);
    let entry = OffloadEntry {
        addr: &HOST_FP as *const u64 as u64,
        name: NAME.as_ptr() as u64,
        size: 8,
        flags: FLAG_INDIRECT,
        data: 0,
        kind: 1,
    };
    // SAFETY: the entry's address and name are statics of this test.
    unsafe {
        rt.register_lib(Descriptor {
            key: 1,
            images: vec![BinaryImage { bytes: b"MOCK image".as_slice().into() }],
            entries: vec![entry],
            layout: EntryLayout::V1,
        })
    };
    mock.0.lose("worker process exited (signal 9)");
    let dev = rt.device(0).expect("device 0");
    let loaded = rt.ensure_loaded(&dev);
    assert_eq!(loaded, Err(LoadError::IndirectFunction("fp".into())));
    // A construct gives the failure its device and the line users know.
    let refused = omp_runtime::SelectError::Load { device: 0, error: loaded.unwrap_err() };
    assert_eq!(refused.to_string(), "Failed to init globals on device 0: cannot read indirect function fp");
    assert_eq!(dev.lost(), Some("worker process exited (signal 9)"), "the failed read found the device lost");
}

#[test]
fn a_construct_that_names_no_device_gets_the_reason_as_a_value() {
    let (rt, _dev) = runtime(Config::default());
    let e = match rt.check_device(5, Loc::NONE) {
        Err(e) => e,
        Ok(_) => panic!("device 5 does not exist"),
    };
    assert_eq!(e, omp_runtime::SelectError::OutOfRange { id: 5, devices: 1, loc: None });
    assert_eq!(
        e.to_string(),
        "Device number '5' out of range, only 1 devices available (valid numbers are 0..0, and 1 for the host)"
    );
    assert!(matches!(rt.check_device(1, Loc::NONE), Ok(omp_runtime::Target::Host)), "1 is the host");
}
