//! The plugin's device operations against the fake CUDA driver (`tests/fake-cuda/libcuda.c`),
//! without a GPU: memory kinds, copies, globals, kernels, queues, the launch environment,
//! out of memory and a sticky fault. The library path is read at process start, so the test
//! builds the fake and runs itself again as a child with the fake first on LD_LIBRARY_PATH.

use omp_plugin::{AllocKind, Device, ErrorKind, LaunchConfig, Plugin, QueueId};
use omp_plugin_cuda::CudaPlugin;
use std::path::{Path, PathBuf};
use std::process::Command;

const CHILD: &str = "OMP_PLUGIN_CUDA_FAKE_CHILD";
const EM_CUDA: u16 = 190;

/// A minimal cubin: sections null, .data (every symbol's bytes), .symtab, .strtab.
/// `symbols` are (name, ELF symbol type: 1 object, 2 function, bytes).
fn cubin(sm: u32, symbols: &[(&str, u8, &[u8])]) -> Vec<u8> {
    let (mut data, mut strtab, mut symtab) = (Vec::new(), vec![0u8], vec![0u8; 24]);
    for (name, kind, bytes) in symbols {
        let name_off = strtab.len() as u32;
        strtab.extend_from_slice(name.as_bytes());
        strtab.push(0);
        symtab.extend_from_slice(&name_off.to_le_bytes());
        symtab.extend_from_slice(&[0x10 | kind, 0]);
        symtab.extend_from_slice(&1u16.to_le_bytes());
        symtab.extend_from_slice(&(data.len() as u64).to_le_bytes());
        symtab.extend_from_slice(&(bytes.len() as u64).to_le_bytes());
        data.extend_from_slice(bytes);
    }
    let symtab_off = 64 + data.len() as u64;
    let strtab_off = symtab_off + symtab.len() as u64;
    let shoff = strtab_off + strtab.len() as u64;
    let mut f = vec![0u8; 64];
    f[..4].copy_from_slice(b"\x7fELF");
    (f[4], f[5], f[6], f[8]) = (2, 1, 1, 8);
    f[16..18].copy_from_slice(&2u16.to_le_bytes());
    f[18..20].copy_from_slice(&EM_CUDA.to_le_bytes());
    f[0x28..0x30].copy_from_slice(&shoff.to_le_bytes());
    f[48..52].copy_from_slice(&(sm << 8).to_le_bytes());
    f[0x3a..0x3c].copy_from_slice(&64u16.to_le_bytes());
    f[0x3c..0x3e].copy_from_slice(&4u16.to_le_bytes());
    f.extend_from_slice(&data);
    f.extend_from_slice(&symtab);
    f.extend_from_slice(&strtab);
    let mut header = |kind: u32, off: u64, size: u64, link: u32, entsize: u64| {
        let mut h = [0u8; 64];
        h[4..8].copy_from_slice(&kind.to_le_bytes());
        h[0x18..0x20].copy_from_slice(&off.to_le_bytes());
        h[0x20..0x28].copy_from_slice(&size.to_le_bytes());
        h[0x28..0x2c].copy_from_slice(&link.to_le_bytes());
        h[0x38..0x40].copy_from_slice(&entsize.to_le_bytes());
        f.extend_from_slice(&h);
    };
    header(0, 0, 0, 0, 0);
    header(1, 64, data.len() as u64, 0, 0);
    header(2, symtab_off, symtab.len() as u64, 3, 24);
    header(3, strtab_off, strtab.len() as u64, 0, 0);
    f
}

/// A kernel environment: mode flags and a teams reduction of `reduction` (bytes, slots).
fn environment(mode: u8, reduction: (i32, i32)) -> Vec<u8> {
    let mut b = vec![0u8; 48];
    b[2] = mode;
    for at in [4, 8, 12, 16] {
        b[at..at + 4].copy_from_slice(&(-1i32).to_le_bytes());
    }
    b[20..24].copy_from_slice(&reduction.0.to_le_bytes());
    b[24..28].copy_from_slice(&reduction.1.to_le_bytes());
    b
}

fn build_fake(dir: &Path) {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fake-cuda/libcuda.c");
    let o = Command::new("cc")
        .args(["-shared", "-fPIC", "-O1", "-Wall", "-Werror", "-o"])
        .arg(dir.join("libcuda.so.1"))
        .arg(&src)
        .output()
        .expect("cc builds the fake driver");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

#[test]
fn device_operations_through_the_fake_driver() {
    if std::env::var_os(CHILD).is_none() {
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("fake-cuda-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        build_fake(&dir);
        let log = dir.join("launches.log");
        let o = Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "device_operations_through_the_fake_driver", "--nocapture", "--test-threads=1"])
            .env(CHILD, &log)
            .env("LD_LIBRARY_PATH", &dir)
            .env("FAKE_CUDA_DEVICES", "2")
            .env("FAKE_CUDA_LOG", &log)
            .env("FAKE_CUDA_MEM_LIMIT", (1 << 20).to_string())
            .env("FAKE_CUDA_FAIL_LAUNCH", "3")
            .env_remove("CUDA_VISIBLE_DEVICES")
            .output()
            .unwrap();
        let (out, err) = (String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
        assert!(o.status.success() && out.contains("1 passed"), "the child run failed:\n{out}\n{err}");
        let _ = std::fs::remove_dir_all(&dir);
        return;
    }
    let log = PathBuf::from(std::env::var_os(CHILD).unwrap());
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
