//! The plugin's device operations against the fake CUDA driver (`tests/fake-cuda/libcuda.c`),
//! without a GPU: memory kinds, copies, globals, kernels, queues, the launch environment,
//! out of memory and a sticky fault. The library path is read at process start, so the test
//! builds the fake and runs itself again as a child with the fake first on LD_LIBRARY_PATH.

mod common;

use common::{child_with_fake_driver, cubin, environment};
use omp_plugin::{AllocKind, Device, ErrorKind, LaunchConfig, Plugin, QueueId};
use omp_plugin_cuda::CudaPlugin;

#[test]
fn device_operations_through_the_fake_driver() {
    let env = [("FAKE_CUDA_DEVICES", "2"), ("FAKE_CUDA_MEM_LIMIT", "1048576"), ("FAKE_CUDA_FAIL_LAUNCH", "3")];
    let Some(log) = child_with_fake_driver("device_operations_through_the_fake_driver", &env) else { return };
    let plugin = CudaPlugin::new(|_| None);
    assert_eq!(plugin.device_count(), 2);
    assert_eq!(plugin.unavailable(), None);
    let dev = plugin.open_device(1).expect("device 1 opens");
    let info = dev.info();
    let has = |k: &str, v: &str| info.iter().any(|(a, b)| a == k && b == v);
    assert!(has("Compute Capabilities", "sm_90") && has("Warp Size", "32") && has("CUDA OpenMP Device Number", "1"));

    let code = [0u8; 16];
    let global = [1u8, 2, 3, 4, 5, 6, 7, 8];
    let image = cubin(
        90,
        &[
            ("spmd", 2, &code),
            ("spmd_kernel_environment", 1, &environment(2, (0, 0))),
            ("reducing", 2, &code),
            ("reducing_kernel_environment", 1, &environment(1, (8, 1024))),
            ("table", 1, &global),
        ],
    );
    assert!(plugin.is_compatible(&image, None));
    let img = dev.load_image(&image).expect("the cubin loads");

    // A global: its address and size, initialised from the image.
    let g = dev.global(img, c"table").unwrap();
    assert_eq!(g.size, 8);
    let mut back = [0u8; 8];
    // SAFETY: `back` is 8 writable bytes; `g` is an 8-byte global of this device.
    unsafe { dev.retrieve(back.as_mut_ptr() as usize, g.addr, 8) }.unwrap();
    assert_eq!(back, global);
    let missing = dev.kernel(img, c"nope").unwrap_err();
    assert!(missing.reason.contains("failed to load kernel 'nope'") && missing.reason.contains("CUDA_ERROR_NOT_FOUND"));

    // Memory: copies there, within and back; kinds; a bad free.
    let a = dev.alloc(64, AllocKind::Device).unwrap();
    let b = dev.alloc(64, AllocKind::Default).unwrap();
    let src: Vec<u8> = (0..64).collect();
    let mut dst = vec![0u8; 64];
    // SAFETY: `src`/`dst` are 64 host bytes; `a` and `b` 64-byte allocations of this device.
    unsafe {
        dev.submit(a, src.as_ptr() as usize, 64).unwrap();
        dev.copy_within(b, a, 64).unwrap();
        dev.retrieve(dst.as_mut_ptr() as usize, b, 64).unwrap();
    }
    assert_eq!(dst, src);
    let pinned = dev.alloc(32, AllocKind::Host).unwrap();
    assert!(dev.is_accessible(pinned, 32) && !dev.is_accessible(a, 8) && !dev.is_accessible(pinned, 64));
    dev.free(pinned, AllocKind::Host).unwrap();
    dev.free(b, AllocKind::Default).unwrap();
    assert!(dev.free(b, AllocKind::Default).is_err(), "a second free is an error");
    let oom = dev.alloc(2 << 20, AllocKind::Device).unwrap_err();
    assert_eq!(oom.kind, ErrorKind::OutOfMemory, "{oom}");
    assert!(oom.reason.contains("out of memory (CUDA_ERROR_OUT_OF_MEMORY) in cuMemAlloc"), "{oom}");

    // Launches: the shape the device reports is the one it launches; a teams reduction gets
    // a launch environment in device memory, other kernels ~0.
    let spmd = dev.kernel(img, c"spmd").unwrap();
    let reducing = dev.kernel(img, c"reducing").unwrap();
    let config = LaunchConfig { tripcount: 128, with_dyn_ptr: true, ..LaunchConfig::default() };
    let shape = dev.launch_shape(spmd, &config).unwrap();
    assert_eq!((shape.blocks, shape.threads, shape.mode), ([4, 1, 1], [32, 1, 1], "SPMD"));
    // SAFETY: the fake driver runs no kernel; `a` is a live allocation.
    unsafe { dev.launch(spmd, &[a], &config) }.unwrap();
    let queue = dev.create_queue().unwrap();
    assert_ne!(queue, QueueId::SYNC);
    let generic = LaunchConfig { num_teams: [2, 0, 0], thread_limit: [64, 0, 0], with_dyn_ptr: true, ..config };
    // SAFETY: as above; `src` outlives the synchronisation below.
    unsafe {
        dev.submit_async(a, src.as_ptr() as usize, 64, queue).unwrap();
        dev.launch_async(reducing, &[a], &generic, queue).unwrap();
    }
    dev.synchronize(queue).unwrap();
    let lines: Vec<String> = std::fs::read_to_string(&log).unwrap().lines().map(String::from).collect();
    assert_eq!(lines.len(), 2, "{lines:?}");
    assert!(lines[0].starts_with("launch spmd grid=4,1,1 block=32,1,1 shared=0 arg0=0xffffffffffffffff"), "{lines:?}");
    assert!(lines[1].starts_with("launch reducing grid=2,1,1 block=96,1,1 shared=0 arg0=0x"), "{lines:?}");
    assert!(!lines[1].ends_with("arg0=0xffffffffffffffff"), "a reduction gets a launch environment: {lines:?}");

    // The third launch faults (FAKE_CUDA_FAIL_LAUNCH=3): the device is lost for good.
    // SAFETY: as above.
    let fault = unsafe { dev.launch(spmd, &[a], &config) }.unwrap_err();
    assert_eq!(fault.kind, ErrorKind::DeviceLost);
    assert_eq!(
        fault.reason,
        "CUDA error: an illegal memory access was encountered (CUDA_ERROR_ILLEGAL_ADDRESS) in cuStreamSynchronize"
    );
    assert_eq!(dev.alloc(8, AllocKind::Device).unwrap_err().kind, ErrorKind::DeviceLost);
}
