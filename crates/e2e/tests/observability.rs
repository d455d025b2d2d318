//! LIBOMPTARGET_INFO, _DEBUG, _PROFILE and the error messages, on programs built by clang 19
//! and clang 22 and run on our runtime.

// Always compiled; run as tests once `make dist` has run, and always under CI (see build.rs).
#![cfg_attr(not(omp_e2e), allow(dead_code))]

use omp_e2e::{compile, dist_lib, program, run_with, scratch, Llvm, ALL};
use serde_json::Value;
use std::path::PathBuf;
use std::process::Output;

fn build(llvm: Llvm, src: &str) -> PathBuf {
    // A directory per build: tests that build the same program run in parallel.
    static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = scratch(&format!("observe-{}-{src}-{n}", llvm.major()));
    let exe = dir.join("prog");
    compile(llvm, &[&program(&format!("runtime/{src}"))], &exe, &[]);
    exe
}

fn out(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn err(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[cfg_attr(omp_e2e, test)]
fn info_bits_print_llvm_lines_and_leave_stdout_alone() {
    for llvm in ALL {
        let exe = build(llvm, "data_regions.c");
        let plain = run_with(&exe, &dist_lib(), &[]);
        assert!(plain.status.success());
        for (value, must) in [
            (
                "-1",
                vec![
                    "Entering OpenMP kernel at data_regions.c:14:5 with",
                    "Launching kernel __omp_offloading_",
                    "Creating new map entry",
                ],
            ),
            (
                "4",
                vec![
                    "OpenMP Host-Device pointer mappings after block at data_regions.c:",
                    "Host Ptr           Target Ptr         Size (B) DynRefCount HoldRefCount Declaration",
                    "c[0:1000] at data_regions.c:24:",
                ],
            ),
            (
                "0x20",
                vec![
                    "Copying data from host to device, HstPtr=0x",
                    "Size=4000, Name=a[0:1000]",
                    "Copying data from device to host",
                ],
            ),
            ("32", vec!["Copying data from device to host, TgtPtr=0x"]),
        ] {
            let o = run_with(&exe, &dist_lib(), &[("LIBOMPTARGET_INFO", value)]);
            let e = err(&o);
            assert!(o.status.success(), "INFO={value}: {e}");
            assert_eq!(out(&o), out(&plain), "INFO={value} changed the program's output");
            for m in must {
                assert!(e.contains(m), "INFO={value} (clang {}): missing {m:?} in\n{e}", llvm.major());
            }
        }
        // Each program gets its own LLVM version's launch line.
        let e = err(&run_with(&exe, &dist_lib(), &[("LIBOMPTARGET_INFO", "0x10")]));
        let shape =
            if llvm == Llvm::V22 { "with [1,1,1] blocks and [1,1,1] threads" } else { "with 1 blocks and 1 threads" };
        assert!(e.contains(shape), "clang {}: {e}", llvm.major());
        // 0x20 alone prints no table and no launch lines.
        let e = err(&run_with(&exe, &dist_lib(), &[("LIBOMPTARGET_INFO", "0x20")]));
        assert!(!e.contains("Launching kernel") && !e.contains("Host Ptr"), "{e}");
    }
}

#[cfg_attr(omp_e2e, test)]
fn a_bad_info_value_warns_instead_of_aborting() {
    let exe = build(Llvm::V22, "policy.c");
    let o = run_with(&exe, &dist_lib(), &[("LIBOMPTARGET_INFO", "verbose")]);
    assert!(o.status.success(), "{}", err(&o));
    assert!(err(&o).contains("ignoring LIBOMPTARGET_INFO='verbose'"), "{}", err(&o));
    assert!(out(&o).contains("on_host=0"));
}

#[cfg_attr(omp_e2e, test)]
fn debug_lines_have_a_component_prefix_and_do_not_touch_stdout_or_info() {
    let exe = build(Llvm::V19, "declare_target.c");
    let plain = run_with(&exe, &dist_lib(), &[]);
    let o = run_with(&exe, &dist_lib(), &[("LIBOMPTARGET_DEBUG", "1"), ("LIBOMPTARGET_INFO", "0x10")]);
    let e = err(&o);
    assert_eq!(out(&o), out(&plain));
    assert!(e.contains("omptarget --> registering binary"), "{e}");
    assert!(e.contains("omptarget --> device 0: loaded image of"), "{e}");
    // LLVM 19 silences INFO when DEBUG is set; we do not.
    assert!(e.contains("Launching kernel"), "{e}");
}

fn profile_of(exe: &std::path::Path, name: &str, extra: &[(&str, &str)]) -> (Output, Value) {
    let path = exe.with_file_name(name);
    let _ = std::fs::remove_file(&path);
    let mut env = vec![("LIBOMPTARGET_PROFILE", path.to_str().unwrap())];
    env.extend_from_slice(extra);
    let o = run_with(exe, &dist_lib(), &env);
    let text =
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("no profile at {}: {e}\n{}", path.display(), err(&o)));
    let json: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("profile is not JSON: {e}\n{text}"));
    (o, json)
}

fn events<'a>(json: &'a Value, cat: &str) -> Vec<&'a Value> {
    json["traceEvents"].as_array().unwrap().iter().filter(|e| e["cat"] == cat).collect()
}

#[cfg_attr(omp_e2e, test)]
fn profile_has_kernels_copies_regions_with_durations_and_bytes() {
    for llvm in ALL {
        let exe = build(llvm, "data_regions.c");
        let (o, json) = profile_of(&exe, "profile.json", &[("LIBOMPTARGET_PROFILE_SUMMARY", "1")]);
        assert!(o.status.success());
        let kernels = events(&json, "kernel");
        assert!(kernels.len() >= 6, "{} kernels", kernels.len());
        assert!(kernels
            .iter()
            .all(|k| k["name"].as_str().unwrap().starts_with("__omp_offloading_") && k["dur"].is_number()));
        assert!(
            kernels.iter().any(|k| k["args"]["location"].as_str().unwrap().starts_with("data_regions.c:")),
            "{kernels:?}"
        );
        let h2d = events(&json, "HostToDevice");
        assert!(h2d.iter().any(|c| c["args"]["bytes"] == 4000 && c["name"] == "a[0:1000]"), "{h2d:?}");
        assert!(!events(&json, "DeviceToHost").is_empty());
        assert!(!events(&json, "alloc").is_empty() && !events(&json, "free").is_empty());
        assert!(events(&json, "region").iter().any(|r| r["name"] == "target data begin"));
        assert!(!events(&json, "image").is_empty() && !events(&json, "init").is_empty());
        let e = err(&o);
        assert!(e.contains("omptarget profile summary:") && e.contains("HostToDevice") && e.contains("GB/s"), "{e}");
    }
}

#[cfg_attr(omp_e2e, test)]
fn profile_is_complete_after_exit_and_after_a_mandatory_failure() {
    let exe = build(Llvm::V22, "exit_midway.c");
    let (o, json) = profile_of(&exe, "exit.json", &[]);
    assert_eq!(o.status.code(), Some(3));
    assert_eq!(events(&json, "kernel").len(), 1);
    let exe = build(Llvm::V19, "present_fail.c");
    let (o, json) = profile_of(&exe, "fail.json", &[]);
    assert!(!o.status.success());
    assert!(!events(&json, "region").is_empty());
}

#[cfg_attr(omp_e2e, test)]
fn the_documentations_sum_example_names_the_construct() {
    for llvm in ALL {
        let exe = build(llvm, "sum_unmapped.c");
        let o = run_with(&exe, &dist_lib(), &[("LIBOMPTARGET_INFO", "0x40")]);
        assert!(out(&o).contains("sum=1024.0"));
        let e = err(&o);
        assert!(e.contains("sum_unmapped.c:8:3: pointer A passed to kernel __omp_offloading_"), "{e}");
        assert!(e.contains("which is not mapped on device 0"), "{e}");
    }
}

#[cfg_attr(omp_e2e, test)]
fn present_failure_names_variable_range_and_nearest_mapping() {
    for llvm in ALL {
        let exe = build(llvm, "present_fail.c");
        let e = err(&run_with(&exe, &dist_lib(), &[]));
        assert!(e.contains("'a' (present_fail.c:"), "{e}");
        assert!(e.contains("which is not mapped; nothing is mapped on device 0"), "{e}");
        assert!(e.contains("target region at present_fail.c:8:3 (kernel __omp_offloading_"), "{e}");
        assert!(e.contains("failed while mapping its data before the launch"), "{e}");
    }
}
