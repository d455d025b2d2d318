//! `LIBOMPTARGET_CHECK=gpu` (and `1`): what a kernel did on the isolated device that a GPU
//! would refuse at run time (tests/programs/check/gpu_*): a 64 KiB array on a kernel's
//! stack, 100 MiB from malloc in device code, each said once per kernel, naming the kernel,
//! its place, the measured value, the GPU's default and what to do; and silence on kernels
//! that would run on a GPU as they are. Needs `make dist`.

// Always compiled; run as tests once `make dist` has run, and always under CI (see build.rs).
#![cfg_attr(not(omp_e2e), allow(dead_code))]

use omp_e2e::{compile, dist_lib, ompcc_fortran, program, scratch, Llvm, ALL};
use std::path::{Path, PathBuf};
use std::process::Output;
use std::sync::atomic::{AtomicUsize, Ordering};

fn build(llvm: Llvm, rel: &str) -> PathBuf {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let dir = scratch(&format!("check-gpu-{}-{}", rel.replace('/', "-"), NEXT.fetch_add(1, Ordering::Relaxed)));
    let exe = dir.join("prog");
    if rel.ends_with(".f90") {
        ompcc_fortran(&program(rel), &exe);
    } else {
        compile(llvm, &[&program(rel)], &exe, &[]);
    }
    exe
}

fn run(exe: &Path, args: &[&str], check: &str) -> Output {
    let mut cmd = std::process::Command::new(exe);
    cmd.args(args).env("LD_LIBRARY_PATH", dist_lib()).env("LIBOMPTARGET_CHECK", check);
    let o = cmd.output().expect("run");
    assert!(o.status.success(), "{exe:?} {args:?}: {}", text(&o.stderr));
    o
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// The `omptarget check:` lines a run printed.
fn findings(o: &Output) -> Vec<String> {
    text(&o.stderr).lines().filter(|l| l.starts_with("omptarget check:")).map(str::to_string).collect()
}

/// The one finding of a run, which must contain each of `want`.
fn one_finding(o: &Output, want: &[&str]) -> String {
    let f = findings(o);
    assert_eq!(f.len(), 1, "expected one finding:\n{}", text(&o.stderr));
    for w in want {
        assert!(f[0].contains(w), "finding lacks {w:?}:\n{}", f[0]);
    }
    f[0].clone()
}

/// The KiB a finding says were used (`used 65.4 KiB`).
fn kib_used(finding: &str) -> f64 {
    let after = finding.split(" used ").nth(1).expect("used");
    after.split(" KiB").next().and_then(|n| n.parse().ok()).unwrap_or_else(|| panic!("no KiB in {finding}"))
}

#[cfg_attr(omp_e2e, test)]
fn a_64_kib_local_array_is_said_once_per_kernel_with_the_stack_to_ask_for() {
    for llvm in ALL {
        let exe = build(llvm, "check/gpu_stack.c");
        // The kernel's own thread, then the threads of a team's parallel region.
        for (args, kernel) in [(&[][..], "_main_l20"), (&["parallel"][..], "_main_l13")] {
            for check in ["gpu", "1", "bugs"] {
                let o = run(&exe, args, check);
                let f = one_finding(
                    &o,
                    &[
                        "omptarget check: GPU stack: kernel __omp_offloading_",
                        kernel,
                        "at gpu_stack.c:",
                        "of stack on one of its threads; a GPU thread has 1 KiB by default",
                        "LIBOMPTARGET_STACK_SIZE=",
                        "keep large arrays out of the kernel's local variables",
                    ],
                );
                let used = kib_used(&f);
                assert!((64.0..80.0).contains(&used), "{llvm:?} {args:?}: {f}");
                assert!(text(&o.stdout).starts_with("s="), "{}", text(&o.stdout));
            }
            // The advisor alone says nothing of it.
            assert!(findings(&run(&exe, args, "perf")).is_empty());
        }
    }
}

#[cfg_attr(omp_e2e, test)]
fn a_100_mib_malloc_in_device_code_is_said_once_per_kernel_with_the_heap_to_ask_for() {
    for llvm in ALL {
        let exe = build(llvm, "check/gpu_heap.c");
        for check in ["gpu", "1"] {
            let f = one_finding(
                &run(&exe, &[], check),
                &[
                    "omptarget check: GPU heap: kernel __omp_offloading_",
                    "_main_l11 at gpu_heap.c:11:",
                    "held 100.0 MiB from malloc at once; a GPU's device malloc heap is 8 MiB by default",
                    "LIBOMPTARGET_HEAP_SIZE=105906176 or more",
                    "allocate the memory before the kernel",
                ],
            );
            assert!(!f.contains("GPU stack"), "{f}");
        }
    }
}

#[cfg_attr(omp_e2e, test)]
fn kernels_that_would_run_on_a_gpu_are_silent() {
    for llvm in ALL {
        let exe = build(llvm, "check/gpu_silent.c");
        for check in ["gpu", "1"] {
            let o = run(&exe, &[], check);
            assert!(findings(&o).is_empty(), "{llvm:?} {check}: {}", text(&o.stderr));
            assert_eq!(text(&o.stdout), "s=6.58022e+06 m=192\n");
        }
    }
}

#[cfg_attr(omp_e2e, test)]
fn a_fortran_kernels_large_local_array_is_said_and_a_small_one_is_not() {
    let exe = build(Llvm::V22, "check/gpu_stack.f90");
    let o = run(&exe, &[], "gpu");
    one_finding(
        &o,
        &["GPU stack: kernel __omp_offloading_", "_QQmain_l30 at gpu_stack.f90:30", "LIBOMPTARGET_STACK_SIZE="],
    );
    let o = run(&exe, &["small"], "gpu");
    assert!(findings(&o).is_empty(), "{}", text(&o.stderr));
}
