//! Our libomptarget exports every function LLVM 19's and LLVM 22's export, each with the
//! symbol version VERS1.0 that clang-linked programs import.

// Always compiled; run as tests once `make dist` has run, and always under CI (see build.rs).
#![cfg_attr(not(omp_e2e), allow(dead_code))]

use std::collections::BTreeSet;
use std::process::Command;

fn exports(lib: &str) -> BTreeSet<(String, String)> {
    let o = Command::new("objdump").args(["-T", lib]).output().expect("objdump");
    assert!(o.status.success(), "objdump -T {lib}");
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .filter(|l| l.contains(" DF .text") || l.contains(" DO .") || l.contains(" g    D"))
        .filter_map(|l| {
            let mut f = l.split_whitespace().rev();
            let name = f.next()?.to_string();
            let version = f.next()?.trim_matches(|c| c == '(' || c == ')').to_string();
            Some((name, version))
        })
        .filter(|(n, _)| !n.starts_with("_Z"))
        .collect()
}

#[cfg_attr(omp_e2e, test)]
fn every_llvm_export_with_version_vers1_0() {
    let ours = exports(omp_e2e::dist_lib().join("libomptarget.so").to_str().unwrap());
    let ours_names: BTreeSet<&str> = ours.iter().map(|(n, _)| n.as_str()).collect();
    for (v, lib) in
        [(19, "/usr/lib/llvm-19/lib/libomptarget.so.19.1"), (22, "/usr/lib/llvm-22/lib/libomptarget.so.22.1")]
    {
        let theirs = exports(lib);
        assert!(theirs.len() > 60, "LLVM {v}: only {} exports read", theirs.len());
        let missing: Vec<&str> = theirs.iter().map(|(n, _)| n.as_str()).filter(|n| !ours_names.contains(n)).collect();
        assert!(missing.is_empty(), "missing LLVM {v} exports: {missing:?}");
    }
    let unversioned: Vec<_> = ours.iter().filter(|(_, ver)| ver != "VERS1.0").collect();
    assert!(unversioned.is_empty(), "exports without VERS1.0: {unversioned:?}");
}
