//! Spreading `nowait` work over devices (`LIBOMPTARGET_SPREAD=1`, docs/cluster.md): a DAG of
//! `target nowait depend(…)` tasks (tests/programs/spread/dag.c) prints with spreading what
//! it prints without; its stencil tasks, and the chains of tasks that update arrays entered
//! on the default device (which go along with them), run on more than one device (the
//! profile's kernel spans say where). Among the tasks that use entered data are tasks that
//! write disjoint columns of one entered array, which a copy of the whole array run
//! elsewhere and copied back would undo: the output shows they did not. On the host plugin's
//! devices, on isolated devices, and on MPI device ranks under both launchers, where the
//! entered arrays go rank to rank. Needs `make dist`.

// Always compiled; run as tests once `make dist` has run, and always under CI (see build.rs).
#![cfg_attr(not(omp_e2e), allow(dead_code))]

use omp_e2e::{compile, dist_lib, ompcc_fortran, program, repo_root, run_with, scratch, Llvm, ALL};
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

/// The devices each kind of task's kernels ran on, from a profile.
struct Used {
    stencil: BTreeSet<i64>,
    /// The chains that update whole entered arrays.
    chains: BTreeSet<i64>,
}

fn devices_used(profile: &Path) -> Used {
    let raw = std::fs::read_to_string(profile).unwrap_or_else(|e| panic!("no profile {}: {e}", profile.display()));
    let json: Value = serde_json::from_str(&raw).expect("the profile is JSON");
    let kinds = [
        kernel_suffix("depend(in : l[0]"),
        kernel_suffix("map(tofrom : a[0 : N])"),
        kernel_suffix("map(to : table[0 : N])"),
        kernel_suffix("map(tofrom : cols)"),
    ];
    let mut used: [BTreeSet<i64>; 4] = Default::default();
    for e in json["traceEvents"].as_array().unwrap().iter().filter(|e| e["cat"] == "kernel") {
        let (name, device) = (e["name"].as_str().unwrap(), e["args"]["device"].as_i64().unwrap());
        if let Some(k) = kinds.iter().position(|suffix| name.ends_with(suffix)) {
            used[k].insert(device);
        }
    }
    assert!(used.iter().all(|u| !u.is_empty()), "no kernels of every kind in the profile:\n{raw}");
    let [stencil, chains, ..] = used;
    Used { stencil, chains }
}

/// The same output with spreading as without; the stencil and the chains over entered
/// arrays on several devices of the default device's kind.
fn check_spread(exe: &Path, env: &[(&str, &str)], kind: std::ops::RangeInclusive<i64>) {
    let plain = ok(&run_with(exe, &dist_lib(), env), "without spreading");
    assert_eq!(plain.lines().count(), 20, "{plain}");
    let profile = exe.with_file_name(format!("profile-{}.json", env.len()));
    let _ = std::fs::remove_file(&profile);
    let mut spread_env = env.to_vec();
    spread_env.extend([SPREAD, ("LIBOMPTARGET_PROFILE", profile.to_str().unwrap())]);
    let o = run_with(exe, &dist_lib(), &spread_env);
    assert_eq!(ok(&o, "with spreading"), plain, "spreading changed the output: {}", text(&o.stderr));
    let used = devices_used(&profile);
    for (what, devices) in [("stencil", &used.stencil), ("entered-array", &used.chains)] {
        assert!(devices.len() > 1, "the {what} tasks ran on {devices:?} only");
        assert!(
            devices.iter().all(|d| kind.contains(d)),
            "{what}: {devices:?}: only devices of the default device's kind"
        );
    }
}

#[cfg_attr(omp_e2e, test)]
fn a_dag_spreads_over_the_host_devices_with_the_output_it_has_without() {
    for llvm in ALL {
        let exe = build("host", llvm);
        check_spread(&exe, &[], 0..=3);
        // The default device moves with OMP_DEFAULT_DEVICE; it stays among its kind.
        check_spread(&exe, &[("OMP_DEFAULT_DEVICE", "2")], 0..=3);
    }
}

#[cfg_attr(omp_e2e, test)]
fn a_dag_spreads_over_isolated_devices() {
    let exe = build("isolated", Llvm::V22);
    check_spread(&exe, &[("LIBOMPTARGET_ISOLATE", "1")], 0..=3);
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
    for launcher in LAUNCHERS {
        let profile = exe.with_file_name(format!("profile-{launcher}.json"));
        let _ = std::fs::remove_file(&profile);
        let env = [("LIBOMPTARGET_PROFILE", profile.to_str().unwrap()), ("LIBOMPTARGET_INFO", "32")];
        let o = on_two_device_ranks(launcher, &exe, &env);
        assert_eq!(ok(&o, launcher), host, "{launcher}: {}", text(&o.stderr));
        let used = devices_used(&profile);
        assert_eq!(used.stencil, BTreeSet::from([4, 5]), "{launcher}: the stencil over both device ranks");
        assert_eq!(used.chains, BTreeSet::from([4, 5]), "{launcher}: the entered arrays' chains over both ranks");
        // The entered arrays went from rank 1 (device 4) to rank 2 and back, directly.
        let info = text(&o.stderr);
        for way in ["MPI rank 1 -> rank 2, direct", "MPI rank 2 -> rank 1, direct"] {
            assert!(
                info.contains(&format!("Copying data from device to device, {way}")),
                "{launcher}: no {way}:\n{info}"
            );
        }
        assert!(info.contains("none through the program's rank"), "{launcher}:\n{info}");
    }
}

/// Open MPI's and MPICH's launchers.
const LAUNCHERS: [&str; 2] = ["mpirun", "mpiexec.mpich"];

/// `<launcher> -np 1 exe : -np 2 offload-mpi-device --devices 1` (devices 4 and 5), with the
/// first MPI device as the default device, spreading on and `env` for every rank.
fn on_two_device_ranks(launcher: &str, exe: &Path, env: &[(&str, &str)]) -> Output {
    let device = repo_root().join("dist/bin/offload-mpi-device");
    assert!(device.exists(), "{} is missing: run `make dist` first", device.display());
    let mpich = launcher != "mpirun";
    let np = if mpich { "-n" } else { "-np" };
    let mut cmd = Command::new("timeout");
    cmd.args(["-k", "5", "120", launcher]);
    if !mpich {
        cmd.args(["--allow-run-as-root", "--oversubscribe"]);
    }
    let lib = dist_lib();
    let common = [("LD_LIBRARY_PATH", lib.to_str().unwrap()), ("OMP_DEFAULT_DEVICE", "4"), SPREAD];
    for (k, v) in common.iter().chain(env) {
        match mpich {
            false => cmd.arg("-x").arg(format!("{k}={v}")),
            true => cmd.arg("-genv").arg(k).arg(v),
        };
    }
    cmd.args([np, "1"]).arg(exe).args([":", np, "2"]).arg(&device).args(["--devices", "1"]);
    cmd.output().unwrap_or_else(|e| panic!("cannot run {launcher}: {e} (scripts/setup.sh installs it)"))
}

/// A Fortran program's entered data (tests/programs/spread/columns.f90: tasks that write
/// disjoint columns of one entered array, each naming all of it, and chains over columns
/// entered one by one): the same sums with spreading as without, the entered data going along
/// (the debug trace says so), on the host plugin's devices and on two MPI device ranks.
#[cfg_attr(omp_e2e, test)]
fn a_fortran_program_s_entered_data_goes_along_with_the_sums_it_has_without() {
    let exe = scratch("spread-fortran").join("columns");
    ompcc_fortran(&program("spread/columns.f90"), &exe);
    let plain = ok(&run_with(&exe, &dist_lib(), &[]), "without spreading");
    assert_eq!(plain.lines().count(), 7, "{plain}");
    let o = run_with(&exe, &dist_lib(), &[SPREAD, ("LIBOMPTARGET_DEBUG", "1")]);
    assert_eq!(ok(&o, "with spreading"), plain, "{}", text(&o.stderr));
    assert!(text(&o.stderr).contains("its entered data along"), "no region took its data along");
    let o = on_two_device_ranks(LAUNCHERS[0], &exe, &[("LIBOMPTARGET_DEBUG", "1")]);
    assert_eq!(ok(&o, "on MPI devices"), plain, "{}", text(&o.stderr));
    assert!(text(&o.stderr).contains("its entered data along"), "no region took its data along");
}
