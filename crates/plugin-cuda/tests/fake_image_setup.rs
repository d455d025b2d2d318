//! What an image gets at load and unload, against the fake CUDA driver: the device runtime's
//! indirect-call table in its environment, and the global constructors and destructors run
//! by the `nvptx$device$init` / `nvptx$device$fini` kernels on one thread.

mod common;

use common::{child_with_fake_driver, cubin};
use omp_plugin::{AllocKind, Device, Plugin};
use omp_plugin_cuda::CudaPlugin;

fn read_u64s(dev: &dyn Device, tgt: usize, count: usize) -> Vec<u64> {
    let mut out = vec![0u64; count];
    // SAFETY: `out` is `count * 8` writable bytes; the device range is the test's.
    unsafe { dev.retrieve(out.as_mut_ptr() as usize, tgt, count * 8) }.unwrap();
    out
}

#[test]
fn an_image_gets_its_indirect_call_table_and_its_constructors_and_destructors_run() {
    let Some(log) =
        child_with_fake_driver("an_image_gets_its_indirect_call_table_and_its_constructors_and_destructors_run", &[])
    else {
        return;
    };
    let plugin = CudaPlugin::new(|_| None);
    let dev = plugin.open_device(0).unwrap();
    let code = [0u8; 16];
    let image = cubin(
        90,
        &[
            ("__omp_rtl_device_environment", 1, &[0u8; 48]),
            ("nvptx$device$init", 2, &code),
            ("nvptx$device$fini", 2, &code),
            ("__init_array_object_late_200", 1, &0x2222u64.to_le_bytes()),
            ("__init_array_object_early_101", 1, &0x1111u64.to_le_bytes()),
            ("__init_array_start", 1, &[0u8; 8]),
            ("__init_array_end", 1, &[0u8; 8]),
            ("__fini_array_start", 1, &[0u8; 8]),
            ("__fini_array_end", 1, &[0u8; 8]),
        ],
    );
    let img = dev.load_image(&image).unwrap();
    let launches = std::fs::read_to_string(&log).unwrap();
    assert_eq!(
        launches, "launch nvptx$device$init grid=1,1,1 block=1,1,1 shared=0 arg0=0x0\n",
        "the constructors ran once, on one thread, at load"
    );
    let bound = |name: &std::ffi::CStr| read_u64s(&*dev, dev.global(img, name).unwrap().addr, 1)[0];
    let (start, end) = (bound(c"__init_array_start"), bound(c"__init_array_end"));
    assert!(start != 0 && end - start == 16, "two constructors between start and end: {start:#x}..{end:#x}");
    assert_eq!(bound(c"__fini_array_start"), 0, "no destructors yet");

    // Indirect functions: sorted by host address, the table named and counted in the environment.
    dev.bind_indirect_functions(img, &[(0x3000, 0xd3), (0x1000, 0xd1), (0x2000, 0xd2)]).unwrap();
    let env = dev.global(img, c"__omp_rtl_device_environment").unwrap();
    let fields = read_u64s(&*dev, env.addr + 24, 2);
    assert_eq!(fields[1], 3, "IndirectCallTableSize counts pairs");
    assert_eq!(read_u64s(&*dev, fields[0] as usize, 6), [0x1000, 0xd1, 0x2000, 0xd2, 0x3000, 0xd3]);

    dev.unload_image(img).unwrap();
    let launches = std::fs::read_to_string(&log).unwrap();
    assert!(
        launches.ends_with("launch nvptx$device$fini grid=1,1,1 block=1,1,1 shared=0 arg0=0x0\n"),
        "the destructors ran at unload: {launches}"
    );

    // An image without the kernels runs nothing and has no table to fill.
    let plain = cubin(90, &[("k", 2, &code)]);
    let plain = dev.load_image(&plain).unwrap();
    dev.bind_indirect_functions(plain, &[(0x1000, 0xd1)]).unwrap();
    dev.unload_image(plain).unwrap();
    assert_eq!(std::fs::read_to_string(&log).unwrap().lines().count(), 2, "no launch for the plain image");
    let leftover = dev.alloc(8, AllocKind::Device).unwrap();
    dev.free(leftover, AllocKind::Device).unwrap();
}
