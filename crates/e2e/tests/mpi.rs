//! MPI devices (docs/cluster.md): programs run as `mpirun -np 1 ./p : -np K offload-mpi-device`
//! with Open MPI's `mpirun` (as root in CI: `--allow-run-as-root`; on this 2-core machine:
//! `--oversubscribe`) and with MPICH's `mpiexec.mpich` (scripts/setup.sh installs both).
//! Needs `make dist` (dist/bin/offload-mpi-device, dist/lib/offload-worker).
//!
//! The host plugin offers devices 0-3; device rank r (1, 2, …) offers 4 devices from
//! 4 × r on, so the first device of the first rank is 4.
//!
//! Tests marked so also run the device ranks as `offload-mpi-device --in-process` (kernels in
//! the rank's own process, [`IN_PROCESS`]).

// Always compiled; run as tests once `make dist` has run, and always under CI (see build.rs).
#![cfg_attr(not(omp_e2e), allow(dead_code))]

use omp_e2e::{compile, dist_lib, program, repo_root, run_ours, scratch, Llvm};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

fn device_program() -> PathBuf {
    let p = repo_root().join("dist/bin/offload-mpi-device");
    assert!(p.exists(), "{} is missing: run `make dist` first", p.display());
    p
}

/// The two MPI families, by their launchers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Launcher {
    OpenMpi,
    Mpich,
}

use Launcher::{Mpich, OpenMpi};

const LAUNCHERS: [Launcher; 2] = [OpenMpi, Mpich];

/// The device program's flag that serves requests in the rank's own process.
const IN_PROCESS: &str = "--in-process";

impl Launcher {
    fn exe(self) -> &'static str {
        match self {
            OpenMpi => "mpirun",
            Mpich => "mpiexec.mpich",
        }
    }

    fn exists(self) {
        let ok = Command::new(self.exe()).arg("--version").output().is_ok_and(|o| o.status.success());
        assert!(ok, "{} is missing: run scripts/setup.sh (it installs Open MPI and MPICH)", self.exe());
    }

    /// Passes `k=v` to the program's rank (the variables are the program's: Open MPI's `-x`
    /// before the first app context reaches that context only, MPICH's `-genv` every rank),
    /// then the count flag.
    fn args(self, cmd: &mut Command, env: &[(&str, String)]) -> &'static str {
        for (k, v) in env {
            match self {
                OpenMpi => cmd.arg("-x").arg(format!("{k}={v}")),
                Mpich => cmd.arg("-genv").arg(k).arg(v),
            };
        }
        match self {
            OpenMpi => "-np",
            Mpich => "-n",
        }
    }
}

/// Compiles a program of tests/programs with clang/flang 22 (Fortran with our device runtime),
/// in a directory of the calling test's own (`test`: tests run in parallel).
fn build(test: &str, rel: &str) -> PathBuf {
    let src = program(rel);
    let name = Path::new(rel).file_stem().unwrap().to_str().unwrap().to_string();
    let exe = scratch(&format!("mpi-{test}-{name}")).join(&name);
    let devicertl = dist_lib().join("libomptarget.devicertl.a");
    let fortran: Vec<&str> = if rel.ends_with(".f90") {
        vec!["-fopenmp-version=52", "-Xoffload-linker-x86_64-pc-linux-gnu", devicertl.to_str().unwrap()]
    } else {
        Vec::new()
    };
    compile(Llvm::V22, &[&src], &exe, &fortran);
    exe
}

/// `mpirun … -np 1 <program args> : -np <ranks> offload-mpi-device <device_args>`, ended
/// after 60 s at most; returns the output and how long it took.
fn mpirun(
    l: Launcher,
    program: &[&str],
    ranks: usize,
    device_args: &[&str],
    env: &[(&str, &str)],
) -> (Output, Duration) {
    l.exists();
    let mut cmd = Command::new("timeout");
    cmd.args(["-k", "5", "60", l.exe()]);
    if l == OpenMpi {
        cmd.args(["--allow-run-as-root", "--oversubscribe"]);
    }
    let mut vars = vec![("LD_LIBRARY_PATH", dist_lib().display().to_string())];
    vars.extend(env.iter().map(|(k, v)| (*k, v.to_string())));
    let np = l.args(&mut cmd, &vars);
    cmd.arg(np).arg("1").args(program);
    if ranks > 0 {
        cmd.arg(":").arg(np).arg(ranks.to_string()).arg(device_program()).args(device_args);
    }
    let start = Instant::now();
    let o = cmd.output().expect("run mpirun");
    (o, start.elapsed())
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn hostname() -> String {
    let mut b = [0u8; 256];
    // SAFETY: gethostname writes at most `b.len()` bytes into our buffer.
    assert_eq!(unsafe { libc::gethostname(b.as_mut_ptr().cast(), b.len()) }, 0);
    text(&b[..b.iter().position(|&c| c == 0).unwrap()])
}

/// C, C++ and Fortran programs print on the first device of the last device rank what they
/// print on the host device, with one and with two device ranks, and with ranks that serve
/// in process (two ranks under Open MPI, one under MPICH).
#[cfg_attr(omp_e2e, test)]
fn programs_give_the_host_devices_answers_on_one_and_two_device_ranks() {
    for rel in [
        "runtime/data_regions.c",
        "runtime/mapper.c",
        "runtime/declare_target.c",
        "runtime/cpp_features.cpp",
        "fortran/tdpd_reduction.f90",
        "fortran/target_data.f90",
    ] {
        let exe = build("programs", rel);
        let host = run_ours(&exe, &[]);
        assert!(!host.is_empty(), "{rel} printed nothing");
        for (l, ranks) in LAUNCHERS.iter().flat_map(|l| [(*l, 1), (*l, 2)]) {
            let device = (4 * ranks).to_string();
            let (o, _) = mpirun(l, &[exe.to_str().unwrap()], ranks, &[], &[("OMP_DEFAULT_DEVICE", &device)]);
            assert!(o.status.success(), "{l:?}: {rel} on device {device}: {}\n{}", o.status, text(&o.stderr));
            assert_eq!(text(&o.stdout), host, "{l:?}: {rel} on device {device} of {ranks} ranks: {}", text(&o.stderr));
        }
        for (l, ranks) in [(OpenMpi, 2), (Mpich, 1)] {
            let device = (4 * ranks).to_string();
            let (o, _) = mpirun(l, &[exe.to_str().unwrap()], ranks, &[IN_PROCESS], &[("OMP_DEFAULT_DEVICE", &device)]);
            let err = text(&o.stderr);
            assert!(o.status.success(), "{l:?}: {rel} on device {device}, in process: {}\n{err}", o.status);
            assert_eq!(text(&o.stdout), host, "{l:?}: {rel} on device {device} of {ranks} ranks, in process: {err}");
        }
    }
}

/// Every device of every rank, after the local ones, rank by rank; kernels' output arrives
/// in order with the program's (also from ranks that serve in process).
#[cfg_attr(omp_e2e, test)]
fn every_device_of_every_rank_is_numbered_after_the_local_ones() {
    let exe = build("numbering", "mpi/every_device.c");
    let mut want = String::from("devices=8\n");
    for d in 0..8 {
        let sum: i64 = (0..64).map(|i| i * 2 + d).sum();
        want += &format!("kernel on device {d}\ndevice {d}: sum={sum} initial=0\n");
    }
    for (l, mode) in LAUNCHERS.iter().flat_map(|l| [(*l, None), (*l, Some(IN_PROCESS))]) {
        let args: Vec<&str> = ["--devices", "2"].into_iter().chain(mode).collect();
        let (o, _) = mpirun(l, &[exe.to_str().unwrap()], 2, &args, &[]);
        assert!(o.status.success(), "{l:?} {mode:?}: {}\n{}", o.status, text(&o.stderr));
        assert_eq!(text(&o.stdout), want, "{l:?} {mode:?}: {}", text(&o.stderr));
    }
}

/// A program not started under MPI never loads libmpi; under mpirun it does (so the check
/// can tell).
#[cfg_attr(omp_e2e, test)]
fn a_program_not_started_under_mpi_loads_no_libmpi() {
    let exe = build("maps", "mpi/mpi_maps.c");
    assert_eq!(run_ours(&exe, &[]), "devices=4 sum=4 libmpi=absent\n");
    for l in LAUNCHERS {
        let (o, _) = mpirun(l, &[exe.to_str().unwrap()], 1, &[], &[]);
        assert_eq!(text(&o.stdout), "devices=8 sum=8 libmpi=loaded\n", "{l:?}: {}", text(&o.stderr));
    }
}

/// The program's rank, waiting for a 2-second kernel on a device rank, uses at most 10% of
/// a core (getrusage over all its threads).
#[cfg_attr(omp_e2e, test)]
fn waiting_for_a_long_kernel_uses_little_cpu() {
    let exe = build("waiting", "mpi/long_kernel.c");
    for l in LAUNCHERS {
        let (o, _) = mpirun(l, &[exe.to_str().unwrap()], 1, &[], &[]);
        let err = text(&o.stderr);
        assert!(o.status.success() && text(&o.stdout) == "x=2\n", "{l:?}: {}\n{err}", o.status);
        let pct: f64 = err
            .lines()
            .find_map(|l| l.strip_prefix("waited ")?.split("cpu ").nth(1)?.strip_suffix("% of a core")?.parse().ok())
            .unwrap_or_else(|| panic!("{l:?}: no measurement in {err}"));
        assert!(pct <= 10.0, "{l:?}: the program used {pct}% of a core while it waited: {err}");
    }
}

/// The worker of a device rank dies inside a kernel: within 10 s the construct fails under
/// OMP_TARGET_OFFLOAD's default (mandatory once devices exist), naming the device, the
/// rank, its host, the kernel's place and the signal.
#[cfg_attr(omp_e2e, test)]
fn a_device_that_dies_mid_kernel_is_named_with_its_rank_and_host() {
    let exe = build("worker-dies", "mpi/rank_dies.c");
    for l in LAUNCHERS {
        let (o, took) = mpirun(l, &[exe.to_str().unwrap(), "worker"], 1, &[], &[]);
        let err = text(&o.stderr);
        assert!(took < Duration::from_secs(10), "{l:?}: took {took:?}: {err}");
        assert!(!o.status.success());
        // (Hydra writes its banner about the program's abort to stdout.)
        let out = text(&o.stdout);
        assert!(out.starts_with("first=2\n") && !out.contains("after="), "{l:?}: {out}\n{err}");
        let lost = err.lines().find(|l| l.contains("device 7 was lost")).unwrap_or_else(|| panic!("{l:?}: {err}"));
        for part in [
            "rank_dies.c:16:1".to_string(),
            format!("MPI device rank 1 on {} (its device 3)", hostname()),
            "killed by signal 9 (SIGKILL)".into(),
        ] {
            assert!(lost.contains(&part), "{l:?}: {part:?} missing from {lost}");
        }
        assert_eq!(err.matches("was lost").count(), 1, "{l:?}: {err}");
    }
}

/// A device rank that dies (the kernel kills the rank itself; or, in a rank that serves in
/// process, the kernel's own process, which is the rank): the launcher ends the job within
/// 10 s, naming the process (Open MPI: its rank) and its host; nothing hangs.
#[cfg_attr(omp_e2e, test)]
fn a_device_rank_that_dies_ends_the_job_within_10_s() {
    let exe = build("rank-dies", "mpi/rank_dies.c");
    let cases = LAUNCHERS.iter().flat_map(|l| [(*l, "rank", None), (*l, "worker", Some(IN_PROCESS))]);
    for (l, kills, mode) in cases {
        let (o, took) = mpirun(l, &[exe.to_str().unwrap(), kills], 1, &Vec::from_iter(mode), &[]);
        let out = text(&o.stdout) + &text(&o.stderr);
        assert!(took < Duration::from_secs(10), "{l:?} {mode:?}: took {took:?}: {out}");
        assert!(!o.status.success());
        assert!(text(&o.stdout).starts_with("first=2\n") && !out.contains("after="), "{l:?} {mode:?}: {out}");
        let named = match l {
            OpenMpi => out.contains("process rank 1"),
            Mpich => out.contains("BAD TERMINATION") && out.contains("Killed (signal 9)"),
        };
        assert!(named && out.contains(&hostname()), "{l:?} {mode:?}: {out}");
    }
}

/// Jobs set up wrongly are clear errors: the device program outside a launcher, a job with
/// no program rank, and a program under MPI with no device rank (it runs on its local devices).
#[cfg_attr(omp_e2e, test)]
fn bad_starts_are_clear_errors() {
    let o = Command::new(device_program()).env_remove("OMPI_COMM_WORLD_SIZE").output().unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o.stderr).contains("not started by an MPI launcher"), "{}", text(&o.stderr));

    let exe = build("bad-starts", "mpi/mpi_maps.c");
    for l in LAUNCHERS {
        let (o, took) = mpirun(l, &[device_program().to_str().unwrap()], 0, &[], &[]);
        assert!(!o.status.success() && took < Duration::from_secs(30));
        let err = text(&o.stderr);
        assert_eq!(err.matches("this job has 0 program ranks").count(), 1, "{l:?}: {err}");

        let (o, _) = mpirun(l, &[exe.to_str().unwrap()], 0, &[], &[]);
        assert!(o.status.success(), "{l:?}: {}", text(&o.stderr));
        assert_eq!(text(&o.stdout), "devices=4 sum=4 libmpi=loaded\n");
        assert!(text(&o.stderr).contains("no rank runs offload-mpi-device"), "{l:?}: {}", text(&o.stderr));
    }
}

/// Copies to and from an MPI device while a long kernel runs on it finish before the kernel:
/// several calls are in flight on one device of one rank, none waits for another (also in a
/// rank that serves in process: the kernel runs on a thread of its own).
#[cfg_attr(omp_e2e, test)]
fn copies_do_not_wait_for_a_running_kernel() {
    let exe = build("overlap", "remote/overlap.c");
    for (l, mode) in LAUNCHERS.iter().flat_map(|l| [(*l, None), (*l, Some(IN_PROCESS))]) {
        let args = Vec::from_iter(mode);
        let (o, _) = mpirun(l, &[exe.to_str().unwrap(), "2"], 1, &args, &[("OMP_DEFAULT_DEVICE", "4")]);
        let out = text(&o.stdout);
        assert!(o.status.success(), "{l:?} {mode:?}: {}\n{}", o.status, text(&o.stderr));
        assert!(
            out.contains("copies ok=1 equal=1\n") && out.contains("copies finished first=1"),
            "{l:?} {mode:?}: {out}"
        );
    }
}

/// A program that uses MPI itself runs unchanged (Open MPI): its `MPI_Init` is the only one,
/// its world holds its own ranks, its target regions run on its local devices, and it has no
/// MPI devices.
#[cfg_attr(omp_e2e, test)]
fn a_program_that_uses_mpi_itself_runs_unchanged() {
    OpenMpi.exists();
    let flags = |what: &str| -> Vec<String> {
        let o = Command::new("mpicc.openmpi").arg(format!("--showme:{what}")).output().expect("mpicc.openmpi");
        text(&o.stdout).split_whitespace().map(String::from).collect()
    };
    let (compile_flags, link_flags) = (flags("compile"), flags("link"));
    let extra: Vec<&str> = compile_flags.iter().chain(&link_flags).map(String::as_str).collect();
    let exe = scratch("mpi-uses-mpi").join("uses_mpi");
    compile(Llvm::V22, &[&program("mpi/uses_mpi.c")], &exe, &extra);
    // Two ranks of the program: `-np 1 ./p : -np 1 ./p`.
    let (o, _) = mpirun(OpenMpi, &[exe.to_str().unwrap(), ":", "-np", "1", exe.to_str().unwrap()], 0, &[], &[]);
    assert!(o.status.success(), "{}\n{}", o.status, text(&o.stderr));
    assert_eq!(text(&o.stdout), "size=2 devices=4 sum=42\n", "{}", text(&o.stderr));
}

/// `omp_target_memcpy` and `omp_target_memcpy_rect` between devices of two ranks move the
/// bytes from rank to rank, and between two devices of one rank inside that rank: the data
/// arrives, INFO's data-transfer bit names each direct copy, and the program's rank moved only
/// the kernels' counts (its summary at exit).
#[cfg_attr(omp_e2e, test)]
fn copies_between_devices_of_ranks_skip_the_program() {
    let exe = build("peer", "mpi/peer_copy.c");
    let want = "rank to rank: rc=0 differ=0\nwithin a rank: rc=0 differ=0\nrect rank to rank: rc=0 differ=0\n";
    for l in LAUNCHERS {
        let (o, _) = mpirun(l, &[exe.to_str().unwrap()], 2, &[], &[]);
        assert!(o.status.success(), "{l:?}: {}\n{}", o.status, text(&o.stderr));
        assert_eq!(text(&o.stdout), want, "{l:?}: {}", text(&o.stderr));

        let (o, _) = mpirun(l, &[exe.to_str().unwrap()], 2, &[], &[("LIBOMPTARGET_INFO", "0x20")]);
        let err = text(&o.stderr);
        assert!(o.status.success() && text(&o.stdout) == want, "{l:?}: {}\n{err}", o.status);
        let direct =
            err.lines().filter(|l| l.contains("MPI rank 1 -> rank 2, direct, from its device 0 to its device 0"));
        // The whole copy, then the rectangle's 16 rows.
        let sizes: Vec<&str> = direct.map(|l| l.rsplit("Size=").next().unwrap()).collect();
        assert_eq!(sizes.len(), 17, "{l:?}: {err}");
        assert_eq!((sizes[0], sizes[1]), ("20971532", "400"), "{l:?}: {err}");
        assert_eq!(err.matches("MPI rank 1 -> rank 1, within the rank, from its device 0 to its device 1").count(), 1);
        let summary =
            err.lines().find(|l| l.contains("MPI devices: the program's rank sent")).unwrap_or_else(|| panic!("{err}"));
        let numbers: Vec<u64> = summary.split(|c: char| !c.is_ascii_digit()).filter_map(|w| w.parse().ok()).collect();
        // sent, received (the three counts: 12 bytes), copies and bytes rank to rank, within.
        assert_eq!(numbers, [0, 12, 17, 20971532 + 16 * 400, 1, 20971532], "{l:?}: {summary}");
    }
}

/// A side of a rank-to-rank copy dies mid-copy: the source's worker (the source device is
/// lost), the destination's worker (the copy fails, naming the destination), or the
/// destination's device rank itself (the launcher ends the job). Each ends within 10 s with
/// its cause named.
#[cfg_attr(omp_e2e, test)]
fn a_side_of_a_rank_to_rank_copy_that_dies_is_named_within_10_s() {
    let exe = build("peer-dies", "mpi/peer_dies.c");
    let host = hostname();
    for l in LAUNCHERS {
        for what in ["source", "destination", "rank"] {
            let (o, took) = mpirun(l, &[exe.to_str().unwrap(), what], 2, &[], &[]);
            let (out, err) = (text(&o.stdout), text(&o.stderr));
            assert!(took < Duration::from_secs(10), "{l:?} {what}: took {took:?}: {out}\n{err}");
            assert!(out.starts_with("copying\n"), "{l:?} {what}: {out}\n{err}");
            let named = match what {
                "source" => format!("MPI device rank 1 on {host} (its device 0): its device worker"),
                "destination" => format!(
                    "omp_target_memcpy failed: the copy's destination was lost: MPI device rank 2 on {host} (its device 0): its device worker"
                ),
                _ => {
                    let all = out.clone() + &err;
                    let named = match l {
                        OpenMpi => all.contains("process rank 2"),
                        Mpich => all.contains("BAD TERMINATION") && all.contains("Killed (signal 9)"),
                    };
                    assert!(named && all.contains(&host) && !o.status.success(), "{l:?} {what}: {all}");
                    continue;
                }
            };
            let line = err.lines().find(|line| line.contains(&named)).unwrap_or_else(|| panic!("{l:?} {what}: {err}"));
            assert!(line.contains("killed by signal 9 (SIGKILL)"), "{l:?} {what}: {line}");
            assert!(out.contains("copy failed\n"), "{l:?} {what}: {out}\n{err}");
        }
    }
}

/// Copies of 48 MiB and an odd tail arrive byte for byte: from the program to a device, from
/// there to a device of another rank and to another device of the same rank, and back; parts at
/// odd offsets that end at their allocation's last byte; a mapped array; a declare-target array
/// (not an allocation: it goes through the request handling). With a worker and in process
/// (where device memory is the rank's own, which MPI also reaches directly).
#[cfg_attr(omp_e2e, test)]
fn large_copies_arrive_byte_for_byte_both_ways_and_rank_to_rank() {
    let exe = build("big", "mpi/big_copies.c");
    let want = "to device: rc=0 differ=0\nrank to rank: rc=0 differ=0\nwithin a rank: rc=0 differ=0\n\
                from device: rc=0 differ=0\nparts: rc=0,0,0 differ=0,0,0\nmapped: differ=0\nglobal: differ=0,0\n";
    for l in LAUNCHERS {
        for device_args in [&[][..], &[IN_PROCESS]] {
            let (o, _) = mpirun(l, &[exe.to_str().unwrap()], 2, device_args, &[]);
            assert!(o.status.success(), "{l:?} {device_args:?}: {}\n{}", o.status, text(&o.stderr));
            assert_eq!(text(&o.stdout), want, "{l:?} {device_args:?}: {}", text(&o.stderr));
        }
    }
}
