//! Spreading `nowait` work over devices (`LIBOMPTARGET_SPREAD=1`, docs/cluster.md): a DAG of
//! `target nowait depend(…)` tasks (tests/programs/spread/dag.c) prints with spreading what
//! it prints without, its stencil tasks run on more than one device (the profile's kernel
//! spans say where), and the tasks that use data entered on the default device stay there
//! (among them tasks that write disjoint columns of one entered array, which a copy of the
//! whole array run elsewhere would undo).
//! On the host plugin's devices, on isolated devices, and on MPI device ranks under both
//! launchers. Needs `make dist`.

// Always compiled; run as tests once `make dist` has run, and always under CI (see build.rs).
#![cfg_attr(not(omp_e2e), allow(dead_code))]

use omp_e2e::{compile, dist_lib, program, repo_root, run_with, scratch, Llvm, ALL};
use serde_json::Value;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const SPREAD: (&str, &str) = ("LIBOMPTARGET_SPREAD", "1");

fn build(test: &str, llvm: Llvm) -> PathBuf {
    let exe = scratch(&format!("spread-{test}-{}", llvm.major())).join("dag");
    compile(llvm, &[&program("spread/dag.c")], &exe, &[]);
    exe
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn ok(o: &Output, what: &str) -> String {
    assert!(o.status.success(), "{what}: {}\n{}\n{}", o.status, text(&o.stdout), text(&o.stderr));
    text(&o.stdout)
}

/// The line of the first `#pragma` in dag.c that contains `clause` (kernel names end in
/// `_l<line>`).
fn kernel_suffix(clause: &str) -> String {
    let src = std::fs::read_to_string(program("spread/dag.c")).unwrap();
    let line = src.lines().position(|l| l.starts_with("#pragma omp target nowait") && l.contains(clause)).unwrap();
    format!("_l{}", line + 1)
}

/// The devices each kind of task's kernels ran on, from a profile: (stencil, the tasks that
/// use entered data).
fn devices_used(profile: &Path) -> (BTreeSet<i64>, BTreeSet<i64>) {
    let raw = std::fs::read_to_string(profile).unwrap_or_else(|e| panic!("no profile {}: {e}", profile.display()));
    let json: Value = serde_json::from_str(&raw).expect("the profile is JSON");
    let stencil = kernel_suffix("depend(in :");
    let entered = [kernel_suffix("map(to : table[0 : N])"), kernel_suffix("map(tofrom : cols)")];
    let mut used = (BTreeSet::new(), BTreeSet::new());
    let mut seen = [false; 2];
    for e in json["traceEvents"].as_array().unwrap().iter().filter(|e| e["cat"] == "kernel") {
        let (name, device) = (e["name"].as_str().unwrap(), e["args"]["device"].as_i64().unwrap());
        if name.ends_with(&stencil) {
            used.0.insert(device);
        } else if let Some(k) = entered.iter().position(|s| name.ends_with(s)) {
            seen[k] = true;
            used.1.insert(device);
        }
    }
    assert!(!used.0.is_empty() && seen == [true, true], "no kernels of every kind in the profile:\n{raw}");
    used
}

/// The same output with spreading as without; the stencil on several devices of the
/// default device's kind, the tasks that use entered data on the default device only.
fn check_spread(exe: &Path, env: &[(&str, &str)], default: i64, kind: std::ops::RangeInclusive<i64>) {
    let plain = ok(&run_with(exe, &dist_lib(), env), "without spreading");
    assert_eq!(plain.lines().count(), 12, "{plain}");
    let profile = exe.with_file_name(format!("profile-{}.json", env.len()));
    let _ = std::fs::remove_file(&profile);
    let mut spread_env = env.to_vec();
    spread_env.extend([SPREAD, ("LIBOMPTARGET_PROFILE", profile.to_str().unwrap())]);
    let o = run_with(exe, &dist_lib(), &spread_env);
    assert_eq!(ok(&o, "with spreading"), plain, "spreading changed the output: {}", text(&o.stderr));
    let (stencil, table) = devices_used(&profile);
    assert!(stencil.len() > 1, "the stencil tasks ran on {stencil:?} only");
    assert!(stencil.iter().all(|d| kind.contains(d)), "{stencil:?}: only devices of the default device's kind");
    assert_eq!(table, BTreeSet::from([default]), "tasks that use entered data stay on the default device");
}

#[cfg_attr(omp_e2e, test)]
fn a_dag_spreads_over_the_host_devices_with_the_output_it_has_without() {
    for llvm in ALL {
        let exe = build("host", llvm);
        check_spread(&exe, &[], 0, 0..=3);
        // The default device moves with OMP_DEFAULT_DEVICE; it stays among its kind.
        check_spread(&exe, &[("OMP_DEFAULT_DEVICE", "2")], 2, 0..=3);
    }
}

#[cfg_attr(omp_e2e, test)]
fn a_dag_spreads_over_isolated_devices() {
    let exe = build("isolated", Llvm::V22);
    check_spread(&exe, &[("LIBOMPTARGET_ISOLATE", "1")], 0, 0..=3);
}

#[cfg_attr(omp_e2e, test)]
fn a_bad_value_is_warned_about_and_means_off() {
    let exe = build("bad", Llvm::V22);
    let plain = ok(&run_with(&exe, &dist_lib(), &[]), "without spreading");
    let o = run_with(&exe, &dist_lib(), &[("LIBOMPTARGET_SPREAD", "maybe")]);
    assert_eq!(ok(&o, "with a bad value"), plain);
    assert_eq!(text(&o.stderr), "omptarget warning: ignoring LIBOMPTARGET_SPREAD='maybe': use 1 or 0\n");
}

/// `mpirun -np 1 dag : -np 2 offload-mpi-device --devices 1` (devices 4 and 5), with the
/// first MPI device as the default device, under Open MPI and MPICH.
#[cfg_attr(omp_e2e, test)]
fn a_dag_spreads_over_mpi_device_ranks_under_both_launchers() {
    let exe = build("mpi", Llvm::V22);
    let host = ok(&run_with(&exe, &dist_lib(), &[]), "on the host device");
    let device = repo_root().join("dist/bin/offload-mpi-device");
    assert!(device.exists(), "{} is missing: run `make dist` first", device.display());
    for (launcher, np, env_flag) in [("mpirun", "-np", "-x"), ("mpiexec.mpich", "-n", "-genv")] {
        let profile = exe.with_file_name(format!("profile-{launcher}.json"));
        let _ = std::fs::remove_file(&profile);
        let mut cmd = Command::new("timeout");
        cmd.args(["-k", "5", "120", launcher]);
        if launcher == "mpirun" {
            cmd.args(["--allow-run-as-root", "--oversubscribe"]);
        }
        for (k, v) in [
            ("LD_LIBRARY_PATH", dist_lib().to_str().unwrap()),
            ("OMP_DEFAULT_DEVICE", "4"),
            SPREAD,
            ("LIBOMPTARGET_PROFILE", profile.to_str().unwrap()),
        ] {
            match env_flag {
                "-x" => cmd.arg("-x").arg(format!("{k}={v}")),
                _ => cmd.arg("-genv").arg(k).arg(v),
            };
        }
        cmd.args([np, "1"]).arg(&exe).args([":", np, "2"]).arg(&device).args(["--devices", "1"]);
        let o = cmd.output().unwrap_or_else(|e| panic!("cannot run {launcher}: {e} (scripts/setup.sh installs it)"));
        assert_eq!(ok(&o, launcher), host, "{launcher}: {}", text(&o.stderr));
        let (stencil, table) = devices_used(&profile);
        assert_eq!(stencil, BTreeSet::from([4, 5]), "{launcher}: the stencil over both device ranks");
        assert_eq!(table, BTreeSet::from([4]), "{launcher}: tasks that use entered data stay on device 4");
    }
}

/// The initial device as the default device (`omp_set_default_device(-1)`): a nowait region
/// that names no device runs as it does without spreading (it once sent spreading back to
/// itself until the stack ran out).
#[cfg_attr(omp_e2e, test)]
fn the_initial_device_as_the_default_device_runs_as_without_spreading() {
    for llvm in ALL {
        let exe = scratch(&format!("spread-initial-{}", llvm.major())).join("initial_default");
        compile(llvm, &[&program("spread/initial_default.c")], &exe, &[]);
        let plain = run_with(&exe, &dist_lib(), &[]);
        let spread = run_with(&exe, &dist_lib(), &[SPREAD]);
        // Without spreading the runtime says the device number is out of range (as for any
        // number it has no device for); with it, exactly the same, never a crash.
        assert!(text(&plain.stderr).contains("Device number '-1' out of range"), "{}", text(&plain.stderr));
        assert_eq!(text(&spread.stderr), text(&plain.stderr));
        assert_eq!(text(&spread.stdout), text(&plain.stdout));
        assert_eq!(spread.status.code(), plain.status.code(), "{:?}", spread.status);
    }
}
