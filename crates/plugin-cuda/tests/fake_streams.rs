//! Streams, events, memset and peer copies against the fake CUDA driver, whose streams run
//! their work only when something waits for them: a write queued on one stream is seen by
//! work on another only if the plugin ordered them with an event.

mod common;

use common::{child_with_fake_driver, cubin, environment};
use omp_plugin::{AllocKind, Device, LaunchConfig, Peer, Plugin, QueueId};
use omp_plugin_cuda::CudaPlugin;

fn read(dev: &dyn Device, tgt: usize, len: usize) -> Vec<u8> {
    let mut out = vec![0u8; len];
    // SAFETY: `out` is `len` writable bytes; `tgt` a `len`-byte range of the device (the caller's).
    unsafe { dev.retrieve(out.as_mut_ptr() as usize, tgt, len) }.unwrap();
    out
}

#[test]
fn queued_writes_are_waited_for_by_other_streams_on_the_device() {
    let Some(_log) = child_with_fake_driver("queued_writes_are_waited_for_by_other_streams_on_the_device", &[]) else {
        return;
    };
    let plugin = CudaPlugin::new(|_| None);
    let dev = plugin.open_device(0).unwrap();
    let image = cubin(90, &[("spmd", 2, &[0u8; 16]), ("spmd_kernel_environment", 1, &environment(2, (0, 0)))]);
    let img = dev.load_image(&image).unwrap();
    let kernel = dev.kernel(img, c"spmd").unwrap();
    let (a, b) = (dev.alloc(64, AllocKind::Device).unwrap(), dev.alloc(64, AllocKind::Device).unwrap());
    let (zeros, ones, twos) = ([0u8; 64], [1u8; 64], [2u8; 64]);
    // SAFETY: the host arrays outlive every queue's synchronisation (here and below); `a`
    // and `b` are 64-byte allocations of this device; the fake runs no kernel.
    unsafe {
        dev.submit(a, zeros.as_ptr() as usize, 64).unwrap();
        dev.submit(b, zeros.as_ptr() as usize, 64).unwrap();
    }

    // A copy queued and never synchronised is still seen by the synchronous stream.
    let q1 = dev.create_queue().unwrap();
    // SAFETY: as above.
    unsafe { dev.submit_async(a, ones.as_ptr() as usize, 64, q1) }.unwrap();
    assert_eq!(read(&*dev, a, 64), ones, "the synchronous read waited for q1's copy");

    // Several queues in flight: q3's kernel and read wait for q2's copy, and synchronising q3
    // alone is enough to see it.
    let (q2, q3) = (dev.create_queue().unwrap(), dev.create_queue().unwrap());
    assert!(q1 != q2 && q2 != q3 && q3 != QueueId::SYNC);
    let mut seen = [0u8; 64];
    let config = LaunchConfig { tripcount: 64, with_dyn_ptr: true, ..LaunchConfig::default() };
    // SAFETY: as above; `seen` outlives q3's synchronisation.
    unsafe {
        dev.submit_async(b, twos.as_ptr() as usize, 64, q2).unwrap();
        dev.launch_async(kernel, &[b], &config, q3).unwrap();
        dev.retrieve_async(seen.as_mut_ptr() as usize, b, 64, q3).unwrap();
    }
    dev.synchronize(q3).unwrap();
    assert_eq!(seen, twos, "q3 waited for q2's copy on the device");

    // A kernel is a write to anything: a copy queued elsewhere after it waits for it; an
    // untouched range of q2 does not order q1 (nothing to assert but that it completes).
    // SAFETY: as above.
    unsafe { dev.launch_async(kernel, &[a], &config, q1) }.unwrap();
    // SAFETY: as above.
    unsafe { dev.submit_async(a, twos.as_ptr() as usize, 64, q2) }.unwrap();
    for q in [q1, q2, q3] {
        dev.synchronize(q).unwrap();
    }
    assert_eq!(read(&*dev, a, 64), twos);
    dev.free(a, AllocKind::Device).unwrap();
    dev.free(b, AllocKind::Device).unwrap();
}

#[test]
fn memset_runs_on_the_device_and_gpus_copy_to_each_other_directly() {
    let Some(log) = child_with_fake_driver(
        "memset_runs_on_the_device_and_gpus_copy_to_each_other_directly",
        &[("FAKE_CUDA_DEVICES", "2")],
    ) else {
        return;
    };
    let plugin = CudaPlugin::new(|_| None);
    let (d0, d1) = (plugin.open_device(0).unwrap(), plugin.open_device(1).unwrap());
    let a = d0.alloc(4096, AllocKind::Device).unwrap();
    // SAFETY: `a` is a 4096-byte allocation of d0.
    unsafe { d0.fill(a, 0xab, 4096) }.unwrap();
    assert!(read(&*d0, a, 4096).iter().all(|&b| b == 0xab));
    let log_text = std::fs::read_to_string(&log).unwrap();
    assert!(log_text.contains(&format!("memset 0x{a:x} 4096\n")), "one cuMemsetD8 on the device: {log_text}");

    let b = d1.alloc(4096, AllocKind::Device).unwrap();
    let to = d1.peer().expect("a CUDA device is a peer of the others");
    assert_ne!(Some(to), d0.peer(), "each device its own context");
    // SAFETY: `a` is d0's and `b` d1's, both 4096 bytes, both devices open.
    unsafe { d0.copy_to_peer(to, b, a, 4096) }.expect("a CUDA device copies to a CUDA peer").unwrap();
    assert!(read(&*d1, b, 4096).iter().all(|&b| b == 0xab));
    let log_text = std::fs::read_to_string(&log).unwrap();
    assert!(log_text.contains("peer copy 4096 from context 0x1000 to context 0x1001\n"), "{log_text}");
    let host = Peer { backend: "x86_64", handle: 1 };
    // SAFETY: nothing is copied: the destination is not a CUDA device.
    assert!(unsafe { d0.copy_to_peer(host, b, a, 8) }.is_none(), "another backend goes through the host");
}

#[test]
fn with_the_profile_copies_and_kernels_are_timed_on_the_device() {
    let Some(_log) = child_with_fake_driver(
        "with_the_profile_copies_and_kernels_are_timed_on_the_device",
        &[("FAKE_CUDA_OP_US", "1500")],
    ) else {
        return;
    };
    let quiet = CudaPlugin::new(|_| None);
    let profiled = CudaPlugin::new(|k| (k == "LIBOMPTARGET_PROFILE").then(|| "trace.json".into()));
    let (plain, dev) = (quiet.open_device(0).unwrap(), profiled.open_device(0).unwrap());
    let img = dev.load_image(&cubin(90, &[("k", 2, &[0u8; 16])])).unwrap();
    let kernel = dev.kernel(img, c"k").unwrap();
    let a = dev.alloc(64, AllocKind::Device).unwrap();
    let bytes = [7u8; 64];
    // SAFETY: `bytes` is 64 readable bytes and `a` a 64-byte allocation; the fake runs no kernel.
    unsafe { dev.submit(a, bytes.as_ptr() as usize, 64) }.unwrap();
    // One operation between the events: the fake's 1.5 ms, not the host's time.
    assert_eq!(dev.device_time(), Some(std::time::Duration::from_micros(1500)));
    assert_eq!(dev.device_time(), None, "read once");
    // SAFETY: as above.
    unsafe { dev.launch(kernel, &[a], &LaunchConfig::default()) }.unwrap();
    assert_eq!(dev.device_time(), Some(std::time::Duration::from_micros(1500)));
    // Without the profile nothing is measured on the device; another device's measure is not ours.
    let b = plain.alloc(64, AllocKind::Device).unwrap();
    // SAFETY: as above, on the other device.
    unsafe { plain.submit(b, bytes.as_ptr() as usize, 64) }.unwrap();
    assert_eq!(plain.device_time(), None);
    // SAFETY: as above.
    unsafe { dev.submit(a, bytes.as_ptr() as usize, 64) }.unwrap();
    assert_eq!(plain.device_time(), None, "the last measure was the other device's");
}
