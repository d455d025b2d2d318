//! Makes the end-to-end tests tests (`cfg(omp_e2e)`, which each `#[cfg_attr(omp_e2e, test)]`
//! reads) only where they can run: once `make dist` has made `dist/` (as `make e2e` and
//! `make test` do), or under CI, where a missing `dist/` must fail them. Elsewhere
//! (`cargo test --workspace` on a fresh clone) the test files still compile, so `cargo check` and
//! clippy see them, but hold no tests, and this says once, in one line, how to run them.

#[path = "src/ci.rs"]
mod ci;

use std::path::PathBuf;

fn main() {
    println!("cargo::rustc-check-cfg=cfg(omp_e2e)");
    println!("cargo::rerun-if-changed=build.rs");
    println!("cargo::rerun-if-changed=src/ci.rs");
    println!("cargo::rerun-if-env-changed=CI");
    let manifest = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"));
    // What `omp_e2e::dist_lib` requires; watched, so the tests are built once `make dist` made it.
    let runtime = manifest.join("../../dist/lib/libomptarget.so.19.1");
    println!("cargo::rerun-if-changed={}", runtime.display());
    if runtime.exists() || ci::in_ci() {
        println!("cargo::rustc-cfg=omp_e2e");
    } else {
        println!("cargo::warning=end-to-end tests not run: dist/ is missing; run `make e2e`");
    }
}
