//! `LIBOMPTARGET_CHECK=gpu` (and `1`): what a kernel did on the isolated device that a GPU
//! would refuse at run time (tests/programs/check/gpu_*): a 64 KiB array on a kernel's
//! stack, 100 MiB from malloc in device code, each said once per kernel, naming the kernel,
//! its place, the measured value, the GPU's default and what to do; a call to a host function
//! no GPU provides, on a branch taken at run time (C, C++, Fortran); and silence on kernels
//! that would run on a GPU as they are, the e2e programs among them. Needs `make dist`.

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
    run_env(exe, args, check, &[])
}

fn run_env(exe: &Path, args: &[&str], check: &str, env: &[(&str, &str)]) -> Output {
    let mut cmd = omp_e2e::program_command(exe);
    cmd.args(args).env("LD_LIBRARY_PATH", dist_lib()).env("LIBOMPTARGET_CHECK", check).envs(env.iter().copied());
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

/// The `GPU host call` findings of a run: (kernel's place, function named), in order.
fn host_calls(o: &Output) -> Vec<(String, String)> {
    findings(o)
        .iter()
        .filter_map(|f| f.strip_prefix("omptarget check: GPU host call: kernel "))
        .map(|f| {
            let (place, rest) = f.split_once(" called ").expect("called");
            let name = rest.split(", a host function that no GPU's device libraries provide").next().unwrap();
            (place.split(" at ").nth(1).expect("at").to_string(), name.to_string())
        })
        .collect()
}

#[cfg_attr(omp_e2e, test)]
fn a_host_function_called_on_a_branch_taken_is_named_once_per_kernel_and_function() {
    for llvm in ALL {
        let exe = build(llvm, "check/gpu_host_call.c");
        for check in ["gpu", "1", "bugs"] {
            let o = run(&exe, &["verbose"], check);
            assert_eq!(text(&o.stdout), "sum=10.3748 logged=4\n");
            let calls = host_calls(&o);
            // Every finding is one; the kernel ran twice, each function is named once.
            assert_eq!(calls.len(), findings(&o).len(), "{}", text(&o.stderr));
            let mut names: Vec<&str> = calls.iter().map(|(_, n)| n.as_str()).collect();
            names.sort();
            let before = names.len();
            names.dedup();
            assert_eq!(names.len(), before, "named twice: {}", text(&o.stderr));
            for want in ["fopen", "fclose", "strtok"] {
                assert!(names.contains(&want), "{llvm:?} {check}: {want} not named:\n{}", text(&o.stderr));
            }
            assert!(calls.iter().all(|(at, _)| at.starts_with("gpu_host_call.c:14")), "{calls:?}");
            let f = findings(&o);
            let fopen = f.iter().find(|l| l.contains(" called fopen,")).unwrap();
            assert!(
                fopen.ends_with(
                    "called fopen, a host function that no GPU's device libraries provide, so the program does not \
                     link for a GPU (ompcc --gpu-check names the call and its chain); do the I/O on the host, after \
                     the target region (printf works on the device)"
                ),
                "{fopen}"
            );
            assert!(f.iter().any(|l| l.contains("called strtok,") && l.ends_with("inside 'declare target'")));
        }
        // The branch not taken: the same kernel calls nothing a GPU lacks.
        for check in ["gpu", "1"] {
            let o = run(&exe, &[], check);
            assert!(findings(&o).is_empty(), "{llvm:?} {check}: {}", text(&o.stderr));
            assert_eq!(text(&o.stdout), "sum=10.3748 logged=0\n");
        }
        assert!(findings(&run(&exe, &["verbose"], "perf")).is_empty());
    }
}

#[cfg_attr(omp_e2e, test)]
fn a_cxx_kernels_std_string_is_named_and_the_hosts_iostream_is_not() {
    for llvm in ALL {
        let exe = build(llvm, "check/gpu_host_call.cpp");
        let o = run(&exe, &["verbose"], "gpu");
        assert_eq!(text(&o.stdout), "n=40\n");
        let calls = host_calls(&o);
        // std::string's own code in the C++ library, but not operator delete, which the kernel
        // calls itself: clang's OpenMP device headers define it for a GPU.
        assert!(calls.iter().any(|(_, n)| n.starts_with("std::string::")), "{llvm:?}: {}", text(&o.stderr));
        assert!(!calls.iter().any(|(_, n)| n.starts_with("operator ")), "{llvm:?}: {}", text(&o.stderr));
        assert!(calls.iter().all(|(at, _)| at.starts_with("gpu_host_call.cpp:11")), "{calls:?}");
        assert!(findings(&o)
            .iter()
            .all(|f| f.ends_with("keep std:: types and streams out of device code (plain new and delete work there)")));
        let o = run(&exe, &[], "gpu");
        assert!(findings(&o).is_empty(), "{llvm:?}: {}", text(&o.stderr));
        assert_eq!(text(&o.stdout), "n=1\n");
    }
}

#[cfg_attr(omp_e2e, test)]
fn a_fortran_kernels_io_statements_are_said_as_flangs_runtime() {
    let exe = build(Llvm::V22, "check/gpu_host_call.f90");
    let o = run(&exe, &["verbose"], "gpu");
    assert_eq!(text(&o.stdout).trim(), "s=  5.1874");
    // flang's runtime is linked into the image: its calls to the C library are said as its,
    // in one finding.
    one_finding(
        &o,
        &[
            "omptarget check: GPU host call: kernel __omp_offloading_",
            "_QQmain_l11 at gpu_host_call.f90:11 called flang's runtime, which no GPU's device libraries provide, so \
             the program does not link for a GPU (ompcc --gpu-check names the call and its chain); the runtime called ",
            " here; do the I/O on the host, after the target region",
        ],
    );
    let o = run(&exe, &[], "gpu");
    assert!(findings(&o).is_empty(), "{}", text(&o.stderr));
}

#[cfg_attr(omp_e2e, test)]
fn calls_bound_when_the_image_is_loaded_are_said_unseen_once_never_named() {
    let exe = build(Llvm::V22, "check/gpu_host_call.c");
    let o = run_env(&exe, &["verbose"], "gpu", &[("LD_BIND_NOW", "1")]);
    assert_eq!(
        findings(&o),
        ["omptarget check: note: the GPU check cannot see which host functions kernels call: the loader bound a \
             device image's calls as it loaded it (as it does when LD_BIND_NOW is set); ompcc --gpu-check finds them \
             when the program is built"],
        "{}",
        text(&o.stderr)
    );
}

#[cfg_attr(omp_e2e, test)]
fn the_e2e_programs_call_nothing_a_gpu_lacks() {
    let programs = [
        "driver/saxpy.c",
        "driver/gpu_kernels.c",
        "runtime/data_regions.c",
        "runtime/structs.c",
        "runtime/declare_target.c",
        "runtime/mapper.c",
        "runtime/device_api.c",
        "isolate/correct.c",
        "check/gpu_silent.c",
        "driver/vector_sum.cpp",
        "driver/gpu_kernels.cpp",
        "runtime/cpp_features.cpp",
        "replay/scale.cpp",
        "driver/gpu_kernels.f90",
        "driver/doubles.f90",
        "fortran/teams_distribute.f90",
        "fortran/tdpd_reduction.f90",
        "fortran/target_parallel_do.f90",
        "fortran/api_queries.f90",
    ];
    for rel in programs {
        let exe = build(Llvm::V22, rel);
        let o = run_env(&exe, &[], "gpu", &[]);
        assert!(host_calls(&o).is_empty(), "{rel}: {}", text(&o.stderr));
    }
}
