//! The isolated device and its transport against a real `offload-worker` (built by cargo for
//! these tests): copies in and out of the worker, relayed in pieces or direct, and the
//! access-tracking capability that check mode adds.

use omp_plugin::{AllocKind, Device, Plugin};
use omp_plugin_isolate::IsolatePlugin;
use omp_worker::client::RELAY_CHUNK;
use omp_worker::{Request, Response, SpawnOptions, Worker};
use std::path::PathBuf;
use std::process::Command;

fn worker_exe() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_offload-worker"))
}

/// A worker with one host device and no shared arena: its memory is reached only through
/// `Worker::write` and `Worker::read_into`.
fn spawn(direct_copies: bool) -> Worker {
    let mut cmd = Command::new(worker_exe());
    cmd.arg("--worker").arg("1").arg(std::process::id().to_string());
    Worker::spawn(cmd, SpawnOptions { direct_copies, ..Default::default() }).unwrap()
}

fn pattern(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i % 251) as u8).collect()
}

/// A copy larger than one relayed piece arrives whole and in order, relayed or direct, and
/// reads back the same either way.
#[test]
fn copies_larger_than_a_relayed_piece_round_trip() {
    let len = RELAY_CHUNK + 4096 + 3;
    let data = pattern(len);
    for direct in [false, true] {
        let w = spawn(direct);
        let addr = match w.call(&Request::Alloc { device: 0, size: len as u64 }) {
            Ok(Response::Addr(a)) => a,
            r => panic!("{r:?}"),
        };
        w.write(0, addr, &data).unwrap();
        let mut back = vec![0u8; len];
        w.read_into(0, addr, &mut back).unwrap();
        assert!(back == data, "direct={direct}: read_into differs");
        // The tail alone, through the piece boundary.
        let at = RELAY_CHUNK - 5;
        assert_eq!(w.read(0, addr + at as u64, 10).unwrap(), data[at..at + 10], "direct={direct}");
        w.stop();
    }
}

/// The isolated device copies through the same transport; in check mode it offers access
/// tracking once its worker runs with the shared arena, and never otherwise.
#[test]
fn the_isolated_device_copies_and_tracks_only_in_check_mode() {
    for check in [false, true] {
        let plugin = IsolatePlugin::with_worker(worker_exe());
        let plugin = if check { plugin.checking() } else { plugin };
        let dev = plugin.open_device(0).unwrap();
        let len = 3 * 4096 + 17;
        let a = dev.alloc(len, AllocKind::Device).unwrap();
        let b = dev.alloc(len, AllocKind::Device).unwrap();
        let data = pattern(len);
        let mut back = vec![0u8; len];
        // SAFETY: `data` and `back` are ours, `len` bytes each; `a` and `b` are allocations
        // of `len` bytes on this device.
        unsafe {
            dev.submit(a, data.as_ptr() as usize, len).unwrap();
            dev.copy_within(b, a, len).unwrap();
            dev.retrieve(back.as_mut_ptr() as usize, b, len).unwrap();
        }
        assert!(back == data, "check={check}");
        let shared_arena = dev.info().iter().any(|(k, v)| k == "Worker" && v.contains("device memory shared"));
        assert_eq!(dev.access_tracking().is_some(), check, "check={check}");
        if check {
            let why = dev.access_tracking().and_then(|t| t.watching_less());
            assert_eq!(why.is_some(), !shared_arena, "a device that cannot watch says why: {why:?}");
        }
        dev.free(a, AllocKind::Device).unwrap();
        assert!(dev.free(a, AllocKind::Device).is_err(), "a second free is an error, check={check}");
        dev.free(b, AllocKind::Device).unwrap();
    }
}
