//! A kernel fault on a GPU under `LIBOMPTARGET_CHECK`: one line names the kernel and sends
//! the user to the isolated CPU device, which can name the variable; without the checker,
//! nothing but the error itself.

mod common;

use common::{cubin, in_child, run_child};
use omp_plugin::{Device, ErrorKind, LaunchConfig, Plugin};
use omp_plugin_cuda::CudaPlugin;

/// In the child: launches `faulty` (the fake's first launch faults) and checks the error.
fn fault(check: Option<&str>) {
    let plugin = CudaPlugin::new(|k| (k == "LIBOMPTARGET_CHECK").then(|| check.map(String::from)).flatten());
    let dev = plugin.open_device(0).unwrap();
    let img = dev.load_image(&cubin(90, &[("faulty", 2, &[0u8; 16])])).unwrap();
    let kernel = dev.kernel(img, c"faulty").unwrap();
    // SAFETY: the fake driver runs no kernel.
    let err = unsafe { dev.launch(kernel, &[], &LaunchConfig::default()) }.unwrap_err();
    assert_eq!(err.kind, ErrorKind::DeviceLost);
    // A second failure on the lost device says nothing more.
    // SAFETY: as above.
    assert!(unsafe { dev.launch(kernel, &[], &LaunchConfig::default()) }.is_err());
}

#[test]
fn under_the_checker_a_gpu_fault_names_the_kernel_and_the_isolated_device() {
    const NAME: &str = "under_the_checker_a_gpu_fault_names_the_kernel_and_the_isolated_device";
    if in_child() {
        return fault(Some("1"));
    }
    let err = run_child(NAME, &[("FAKE_CUDA_FAIL_LAUNCH", "1")]);
    let hints: Vec<&str> = err.lines().filter(|l| l.starts_with("omptarget check:")).collect();
    assert_eq!(hints.len(), 1, "said once: {err}");
    assert!(
        hints[0].starts_with(
            "omptarget check: kernel faulty faulted on CUDA device 0 (CUDA error: an illegal memory access was \
             encountered (CUDA_ERROR_ILLEGAL_ADDRESS) in cuStreamSynchronize); a GPU cannot tell which variable: \
             run the same program with LIBOMPTARGET_CHECK=1 on the isolated CPU device, which names it"
        ),
        "{err}"
    );
}

#[test]
fn without_the_checker_a_gpu_fault_adds_no_hint() {
    if in_child() {
        return fault(Some("perf"));
    }
    let err = run_child("without_the_checker_a_gpu_fault_adds_no_hint", &[("FAKE_CUDA_FAIL_LAUNCH", "1")]);
    assert!(!err.contains("omptarget check:"), "{err}");
}
