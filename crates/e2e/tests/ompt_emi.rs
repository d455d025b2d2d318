//! OMPT's EMI callbacks: a tool of our own that registers only `target_emi`,
//! `target_data_op_emi` and `target_submit_emi` gets, from our runtime, the same callbacks in
//! the same order as from LLVM 22's, with its target_data and host_op_id handed back.

// Always compiled; run as tests once `make dist` has run, and always under CI (see build.rs).
#![cfg_attr(not(omp_e2e), allow(dead_code))]

use omp_e2e::{compile, dist_lib, program, run_with, scratch, Llvm};
use std::path::Path;
use std::process::Command;

/// The tool's lines ("EMI ..."), in order.
fn tool_lines(exe: &Path, libdir: &Path, tool: &Path) -> Vec<String> {
    let o = run_with(exe, libdir, &[("OMP_TOOL_LIBRARIES", tool.to_str().unwrap())]);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{} on {}: {stderr}", exe.display(), libdir.display());
    assert_eq!(String::from_utf8_lossy(&o.stdout), "10 20 30 40\n");
    stderr.lines().filter(|l| l.starts_with("EMI ")).map(str::to_string).collect()
}

#[cfg_attr(omp_e2e, test)]
fn emi_callbacks_match_llvm_22_in_count_order_and_data() {
    let dir = scratch("ompt-emi");
    let tool = dir.join("libemi_tool.so");
    let cc = Command::new(Llvm::V22.clang())
        .args(["-shared", "-fPIC", "-O1", "-o"])
        .arg(&tool)
        .arg(program("ompt/emi_tool.c"))
        .output()
        .expect("run clang-22");
    assert!(cc.status.success(), "{}", String::from_utf8_lossy(&cc.stderr));
    let exe = dir.join("prog");
    compile(Llvm::V22, &[&program("ompt/emi_program.c")], &exe, &[]);

    let llvm = tool_lines(&exe, &Llvm::V22.llvm_lib(), &tool);
    let ours = tool_lines(&exe, &dist_lib(), &tool);
    assert!(llvm.iter().all(|l| !l.starts_with("EMI BAD")), "LLVM 22:\n{llvm:#?}");
    assert!(ours.iter().all(|l| !l.starts_with("EMI BAD")), "ours:\n{ours:#?}");
    assert_eq!(llvm.last().map(String::as_str), Some("EMI counts target=2 data_op=8 submit=2"), "{llvm:#?}");
    assert_eq!(ours, llvm, "the same callbacks, endpoints and order as LLVM 22's runtime");
}
