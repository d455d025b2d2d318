//! Isolated local devices (`LIBOMPTARGET_ISOLATE=1`): the host devices 0-3 with their
//! kernels in an `offload-worker` process (dist/lib/offload-worker, next to the runtime).
//! Programs under tests/programs/isolate/. Needs `make dist`.

// Always compiled; run as tests once `make dist` has run, and always under CI (see build.rs).
#![cfg_attr(not(omp_e2e), allow(dead_code))]

use omp_e2e::{compile, dist_lib, program, run_with, scratch, Llvm, ALL};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

const ISOLATE: (&str, &str) = ("LIBOMPTARGET_ISOLATE", "1");

fn build(llvm: Llvm, rel: &str) -> PathBuf {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let dir = scratch(&format!("isolate-{}-{}-{n}", llvm.major(), rel.replace('/', "-")));
    let exe = dir.join("prog");
    compile(llvm, &[&program(rel)], &exe, &[]);
    exe
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Runs `exe` with `libdir` as its library path; fails the test if it runs past a minute
/// (a hang), instead of hanging the suite.
fn run_bounded(exe: &Path, libdir: &Path, env: &[(&str, &str)]) -> Output {
    run_bounded_args(exe, libdir, env, &[])
}

fn run_bounded_args(exe: &Path, libdir: &Path, env: &[(&str, &str)], args: &[&str]) -> Output {
    let mut cmd = omp_e2e::program_command(exe);
    cmd.args(args);
    cmd.env("LD_LIBRARY_PATH", libdir).stdout(Stdio::piped()).stderr(Stdio::piped());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().expect("start test program");
    let start = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if start.elapsed() > Duration::from_secs(60) {
            let _ = child.kill();
            let o = child.wait_with_output().unwrap();
            panic!("{} hung:\nstdout:\n{}\nstderr:\n{}", exe.display(), text(&o.stdout), text(&o.stderr));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    child.wait_with_output().unwrap()
}

/// `/proc/<pid>/stat`: (comm, state, ppid, start time in clock ticks).
fn stat(pid: u32) -> Option<(String, char, u32, u64)> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (head, rest) = s.rsplit_once(')')?;
    let comm = head.split_once('(')?.1.to_string();
    let f: Vec<&str> = rest.split_whitespace().collect();
    // After the comm: state (field 3), ppid (4), ... starttime (22).
    Some((comm, f.first()?.chars().next()?, f.get(1)?.parse().ok()?, f.get(19)?.parse().ok()?))
}

/// Workers started since this test binary began that no program reaped: orphans (adopted
/// by init, which in a container may never reap them) or zombies.
fn unreaped_workers() -> Vec<u32> {
    let me = stat(std::process::id()).expect("own stat").3;
    let mut found = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(p) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else { continue };
        if let Some((comm, state, ppid, start)) = stat(p) {
            let orphan = ppid == 1 || ppid == std::process::id();
            if comm == "offload-worker" && start >= me && (orphan || state == 'Z') {
                found.push(p);
            }
        }
    }
    found
}

/// Makes this test process the reaper of orphaned descendants: a worker its program left
/// behind then shows up here as a child (a zombie once it ends) whatever init does.
fn adopt_orphans() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // SAFETY: prctl(PR_SET_CHILD_SUBREAPER) changes only this process's attributes.
        assert_eq!(unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1) }, 0);
    });
}

/// Runs `exe` isolated and checks that it left no worker behind (running or unreaped).
fn run_isolated(exe: &Path, env: &[(&str, &str)]) -> Output {
    run_isolated_in(exe, &dist_lib(), env, &[])
}

/// As [`run_isolated`], with the runtime from `libdir` and arguments.
fn run_isolated_in(exe: &Path, libdir: &Path, env: &[(&str, &str)], args: &[&str]) -> Output {
    adopt_orphans();
    let mut env = env.to_vec();
    env.push(ISOLATE);
    let out = run_bounded_args(exe, libdir, &env, args);
    // Other tests' programs may be between a worker's death and its reaping: allow that.
    let start = Instant::now();
    while !unreaped_workers().is_empty() {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "worker(s) {:?} left unreaped after {}",
            unreaped_workers(),
            exe.display()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    out
}

#[cfg_attr(omp_e2e, test)]
fn a_correct_program_gives_the_same_output_isolated() {
    for llvm in ALL {
        let exe = build(llvm, "isolate/correct.c");
        let plain = run_with(&exe, &dist_lib(), &[]);
        assert!(plain.status.success(), "{}", text(&plain.stderr));
        let iso = run_isolated(&exe, &[]);
        assert!(iso.status.success(), "{}", text(&iso.stderr));
        assert_eq!(text(&iso.stdout), text(&plain.stdout), "clang {}: {}", llvm.major(), text(&iso.stderr));
        let out = text(&iso.stdout);
        // The kernel's printf lands on the program's stdout, in order.
        assert!(out.starts_with("host: before the first kernel\nkernel: n=65536\nhost: b[n-1]=131070.0\n"), "{out}");
        assert!(out.contains("host: a[0..2]=-1.0 3.0 6.0"), "{out}");
        assert!(out.contains("back[63]=3972 devices=4"), "{out}");
        assert!(text(&iso.stderr).is_empty(), "{}", text(&iso.stderr));
    }
}

/// Runtime programs that exercise concurrency (host threads launching on all devices at
/// once, nowait/depend) and data regions: same stdout isolated.
#[cfg_attr(omp_e2e, test)]
fn runtime_programs_give_the_same_output_isolated() {
    for rel in ["runtime/threads.c", "runtime/nowait_depend.c", "runtime/data_regions.c"] {
        let exe = build(Llvm::V22, rel);
        let plain = run_with(&exe, &dist_lib(), &[]);
        assert!(plain.status.success(), "{rel}: {}", text(&plain.stderr));
        let iso = run_isolated(&exe, &[]);
        assert!(iso.status.success(), "{rel}: {}", text(&iso.stderr));
        assert_eq!(text(&iso.stdout), text(&plain.stdout), "{rel}: {}", text(&iso.stderr));
    }
}

/// The worker is stopped (and reaped) at exit only after static destructors that may still
/// run target regions.
#[cfg_attr(omp_e2e, test)]
fn a_static_destructor_can_still_offload() {
    let exe = build(Llvm::V22, "isolate/static_dtor.cpp");
    let o = run_isolated(&exe, &[]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert_eq!(text(&o.stdout), "main: y=1\ndestructor: x=42\n", "{}", text(&o.stderr));
}

#[cfg_attr(omp_e2e, test)]
fn the_documented_unmapped_sum_crashes_isolated_naming_kernel_and_location() {
    let exe = build(Llvm::V22, "isolate/sum.c");
    // On the shared host device the missing map goes unnoticed.
    let plain = run_with(&exe, &dist_lib(), &[]);
    assert!(text(&plain.stdout).contains("sum=1048576.0"), "{}", text(&plain.stderr));
    let o = run_isolated(&exe, &[]);
    let err = text(&o.stderr);
    assert!(!o.status.success(), "{err}");
    assert!(!text(&o.stdout).contains("sum="), "{}", text(&o.stdout));
    assert!(err.contains("Kernel __omp_offloading_") && err.contains("_sum_l5 at sum.c:5:1 failed"), "{err}");
    assert!(err.contains("SIGSEGV"), "{err}");
    assert!(err.contains("never mapped"), "{err}");
    // The device is lost, and the program follows OMP_TARGET_OFFLOAD (mandatory: it ends).
    assert!(err.contains("device 0 was lost while running kernel"), "{err}");
    assert!(err.contains("sum.c:5:1"), "{err}");
}

#[cfg_attr(omp_e2e, test)]
fn a_killed_worker_is_an_error_not_a_hang() {
    let exe = build(Llvm::V22, "isolate/killed.c");
    let o = run_isolated(&exe, &[]);
    let (out, err) = (text(&o.stdout), text(&o.stderr));
    assert!(out.contains("first=2\nkilled=1\n"), "{out}\n{err}");
    assert!(!out.contains("second="), "{out}");
    assert!(!o.status.success());
    assert!(err.contains("SIGKILL"), "{err}");
    assert!(err.contains("killed.c:33:1"), "{err}");
}

#[cfg_attr(omp_e2e, test)]
fn queries_answer_as_a_discrete_gpu_and_usm_is_refused() {
    // The shared host device answers as LLVM 22 does for a clang 22 program without
    // `requires unified_shared_memory` (not accessible; LLVM 19's runtime has no such query);
    // an isolated device never reaches host memory.
    let exe = build(Llvm::V22, "isolate/accessible.c");
    assert_eq!(text(&run_with(&exe, &dist_lib(), &[]).stdout), "accessible=0 devices=4\n");
    let o = run_isolated(&exe, &[]);
    assert_eq!(text(&o.stdout), "accessible=0 devices=4\n", "{}", text(&o.stderr));

    let exe = build(Llvm::V22, "isolate/usm.c");
    let plain = run_with(&exe, &dist_lib(), &[]);
    assert_eq!(text(&plain.stdout), "p[3]=3\n", "{}", text(&plain.stderr));
    let o = run_isolated(&exe, &[]);
    let err = text(&o.stderr);
    assert!(!o.status.success(), "{err}");
    assert!(
        err.contains(
            "devices 0, 1, 2, 3 (x86_64 (isolated)) cannot honour '#pragma omp requires unified_shared_memory'"
        ),
        "{err}"
    );
    // The program then follows OMP_TARGET_OFFLOAD: with DISABLED it runs on the host.
    let o = run_isolated(&exe, &[("OMP_TARGET_OFFLOAD", "DISABLED")]);
    assert_eq!(text(&o.stdout), "p[3]=3\n", "{}", text(&o.stderr));
}

#[cfg_attr(omp_e2e, test)]
fn a_missing_worker_is_a_clear_error_naming_the_path() {
    // The runtime alone, without offload-worker next to it.
    let dir = scratch("isolate-no-worker");
    for name in ["libomptarget.so.19.1", "libomptarget.so.22.1"] {
        std::fs::copy(dist_lib().join("libomptarget.so"), dir.join(name)).unwrap();
    }
    let exe = build(Llvm::V22, "isolate/accessible.c");
    let exe2 = build(Llvm::V22, "isolate/killed.c");
    // A query needs no worker.
    let o = run_bounded(&exe, &dir, &[ISOLATE]);
    assert_eq!(text(&o.stdout), "accessible=0 devices=4\n", "{}", text(&o.stderr));
    let o = run_bounded(&exe2, &dir, &[ISOLATE]);
    let err = text(&o.stderr);
    assert!(!o.status.success(), "{err}");
    let looked = dir.canonicalize().unwrap().join("offload-worker");
    assert!(err.contains(&format!("cannot start the isolated device's worker {}", looked.display())), "{err}");
    assert!(err.contains("killed.c:27:1"), "{err}");
}

/// What a failed construct must say on an isolated device: the kernel and its location, the
/// lost device, and (OMP_TARGET_OFFLOAD defaults to mandatory when devices exist) the fatal
/// error; the program does not go on.
fn assert_fatal_at(o: &Output, loc: &str, how: &str) {
    let (out, err) = (text(&o.stdout), text(&o.stderr));
    assert!(!o.status.success(), "{out}\n{err}");
    assert!(!out.contains("after="), "{out}");
    assert!(err.contains(&format!(" at {loc} failed: the isolated device's worker (pid ")), "{err}");
    assert!(err.contains(how), "{err}");
    assert!(err.contains("device 0 was lost while running kernel __omp_offloading_"), "{err}");
    assert!(err.contains(&format!("{loc}: omptarget fatal error 1")), "{err}");
}

/// exit() inside a region ends the worker (the region runs there), not the program: the
/// construct fails naming the kernel, its location and the exit status; what the kernel
/// printed before exiting is not lost.
#[cfg_attr(omp_e2e, test)]
fn exit_inside_a_region_is_a_lost_device_naming_the_kernel() {
    let exe = build(Llvm::V22, "isolate/exit_in_region.c");
    let o = run_isolated(&exe, &[]);
    assert_eq!(text(&o.stdout), "first=2\nkernel: exiting\n", "{}", text(&o.stderr));
    assert_fatal_at(&o, "exit_in_region.c:13:1", "ended: exited with status 3; code in the target region ended");
}

/// exec inside a region replaces the worker: the construct fails at once (not when the new
/// program ends), naming what replaced it; a program that keeps running is stopped.
#[cfg_attr(omp_e2e, test)]
fn exec_inside_a_region_is_a_lost_device_and_leaves_nothing_running() {
    let exe = build(Llvm::V22, "isolate/exec_in_region.c");
    let o_sleep = run_isolated_in(&exe, &dist_lib(), &[], &["sleep"]);
    assert_eq!(text(&o_sleep.stdout), "first=2\n", "{}", text(&o_sleep.stderr));
    assert_fatal_at(
        &o_sleep,
        "exec_in_region.c:15:1",
        "was replaced by the program 'sleep' (code in a target region called exec) and was stopped",
    );
    let o = run_isolated_in(&exe, &dist_lib(), &[], &["true"]);
    assert_fatal_at(
        &o,
        "exec_in_region.c:15:1",
        "was replaced by the program 'true' (code in a target region called exec), which exited with status 0",
    );
    // What the worker became is not left running: its pid is gone (reaped).
    let err = text(&o_sleep.stderr);
    let pid: u32 = err
        .split("worker (pid ")
        .nth(1)
        .and_then(|r| r.split(')').next())
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("no worker pid in {err}"));
    assert!(stat(pid).is_none_or(|(comm, ..)| comm != "sleep"), "pid {pid} still there: {:?}", stat(pid));
}

/// fork() inside a region forks the worker: a child that ends with _exit works as on the
/// host; one that returns from the region is ended with a warning and the region completes
/// once; system() works and its output reaches the program.
#[cfg_attr(omp_e2e, test)]
fn fork_inside_a_region_forks_the_worker_and_a_returning_child_is_ended() {
    let exe = build(Llvm::V22, "isolate/fork_in_region.c");
    let o = run_isolated(&exe, &[]);
    let (out, err) = (text(&o.stdout), text(&o.stderr));
    assert!(o.status.success(), "{out}\n{err}");
    assert_eq!(out, "child status=7\nx=1\nfrom-system\nsystem=0\n", "{err}");
    assert!(err.contains("omptarget warning: a process forked inside a target region on an isolated device"), "{err}");
    assert!(err.contains("returned from the region; it was ended"), "{err}");
}

/// The worker killed from outside (SIGKILL) while a long kernel runs: the construct fails at
/// once, naming the kernel and the signal, instead of waiting for the kernel.
#[cfg_attr(omp_e2e, test)]
fn a_worker_killed_during_a_kernel_fails_that_kernel_at_once() {
    let exe = build(Llvm::V22, "isolate/killed_running.c");
    let o = run_isolated(&exe, &[]);
    assert_eq!(text(&o.stdout), "first=2\n", "{}", text(&o.stderr));
    assert_fatal_at(&o, "killed_running.c:48:1", "ended: killed by signal 9 (SIGKILL)");
}

/// A program that aborts while its worker runs (a failed assert, a fatal runtime error)
/// leaves no zombie and no orphan: the worker is killed and reaped before the program dies.
#[cfg_attr(omp_e2e, test)]
fn an_abort_while_the_worker_runs_leaves_no_zombie() {
    let exe = build(Llvm::V22, "isolate/abort_after.c");
    // run_isolated fails if a worker is left unreaped (this process adopts orphans).
    let o = run_isolated(&exe, &[]);
    assert_eq!(text(&o.stdout), "x=2\n", "{}", text(&o.stderr));
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(o.status.signal(), Some(libc::SIGABRT), "{}", text(&o.stderr));
}

/// A worker that cannot start: not executable, or ending before it answers (as under a
/// process limit or a seccomp policy that kills it): a clear error naming the path, the
/// program follows OMP_TARGET_OFFLOAD (mandatory: it stops at the construct; DISABLED: it
/// runs on the host and never starts the worker).
#[cfg_attr(omp_e2e, test)]
fn a_worker_that_cannot_start_is_a_clear_error() {
    use std::os::unix::fs::PermissionsExt;
    let exe = build(Llvm::V22, "isolate/killed.c");
    for (case, worker) in [("noexec", None), ("dies", Some("#!/bin/sh\necho 'cannot start here' >&2\nexit 1\n"))] {
        let dir = scratch(&format!("isolate-worker-{case}"));
        for name in ["libomptarget.so.19.1", "libomptarget.so.22.1"] {
            std::fs::copy(dist_lib().join("libomptarget.so"), dir.join(name)).unwrap();
        }
        let path = dir.join("offload-worker");
        match worker {
            None => {
                std::fs::copy(dist_lib().join("offload-worker"), &path).unwrap();
                std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
            }
            Some(script) => {
                std::fs::write(&path, script).unwrap();
                std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
            }
        }
        let o = run_isolated_in(&exe, &dir, &[], &[]);
        let err = text(&o.stderr);
        assert!(!o.status.success(), "{case}: {err}");
        assert!(!text(&o.stdout).contains("first="), "{case}: {}", text(&o.stdout));
        let looked = dir.canonicalize().unwrap().join("offload-worker");
        assert!(
            err.contains(&format!("cannot start the isolated device's worker {}: ", looked.display())),
            "{case}: {err}"
        );
        match case {
            "noexec" => assert!(err.contains("Permission denied"), "{err}"),
            _ => assert!(
                err.contains("cannot start here") && err.contains("it ended before it answered: exited with status 1"),
                "{err}"
            ),
        }
        assert!(err.contains("killed.c:27:1"), "{case}: {err}");
        let o = run_isolated_in(&exe, &dir, &[("OMP_TARGET_OFFLOAD", "DISABLED")], &[]);
        assert!(text(&o.stdout).starts_with("first=2\n"), "{case}: {}", text(&o.stderr));
    }
}

/// Without /proc (a chroot or container that lacks it) the isolated device still works:
/// images are loaded from temporary files instead of /proc/self/fd. Needs `unshare -rm`
/// (user and mount namespaces); skipped where the system refuses them.
#[cfg_attr(omp_e2e, test)]
fn without_proc_the_isolated_device_still_works() {
    let probe = Command::new("unshare").args(["-rm", "true"]).stderr(Stdio::null()).status();
    if !probe.is_ok_and(|s| s.success()) {
        omp_e2e::skip_without(
            "without_proc_the_isolated_device_still_works",
            "`unshare -rm` (user and mount namespaces) is not available here",
        );
        return;
    }
    let exe = build(Llvm::V22, "isolate/correct.c");
    let plain = run_with(&exe, &dist_lib(), &[]);
    let mut cmd = Command::new("unshare");
    // A private /dev/shm too: libomp checks a stale registration file left there by a
    // process that had the same pid through /proc/self/maps, and asserts without /proc.
    let script = "mount -t tmpfs none /proc && mount -t tmpfs none /dev/shm && exec \"$0\"";
    cmd.args(["-rm", "sh", "-c", script]).arg(&exe);
    cmd.env("LD_LIBRARY_PATH", dist_lib()).env(ISOLATE.0, ISOLATE.1);
    let o = cmd.output().unwrap();
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert_eq!(text(&o.stdout), text(&plain.stdout), "{}", text(&o.stderr));
}

/// A long kernel does not hold up the requests behind it: a kernel waiting for a flag that a
/// later kernel (from another host thread, after a data region) sets finishes; run on the
/// isolated device and on the shared one, same output.
#[cfg_attr(omp_e2e, test)]
fn a_waiting_kernel_does_not_hold_up_other_launches() {
    let exe = build(Llvm::V22, "isolate/concurrent.c");
    let plain = run_with(&exe, &dist_lib(), &[]);
    assert_eq!(text(&plain.stdout), "waited=1 copied=10\n", "{}", text(&plain.stderr));
    let o = run_isolated(&exe, &[]);
    assert_eq!(text(&o.stdout), "waited=1 copied=10\n", "{}", text(&o.stderr));
}

/// `LIBOMPTARGET_ISOLATE_SLICE_US`: unset, the worker's threads keep the system's time slice;
/// set, the thread that reads the launch (the kernel's first thread) has that slice and the
/// threads the kernel starts keep the default (tests/programs/isolate/slice.c reads both from
/// /proc/thread-self/sched).
#[cfg_attr(omp_e2e, test)]
fn the_worker_takes_a_short_time_slice_only_when_asked() {
    let exe = build(Llvm::V22, "isolate/slice.c");
    // (first, other) from the program's `first=<ns> other=<ns>` line.
    let slices_of = |o: &Output| -> (i64, i64) {
        assert!(o.status.success(), "{}", text(&o.stderr));
        let out = text(&o.stdout);
        let field = |k: &str| out.split_whitespace().find_map(|w| w.strip_prefix(k)?.parse::<i64>().ok());
        (field("first=").unwrap_or_else(|| panic!("{out}")), field("other=").unwrap_or_else(|| panic!("{out}")))
    };
    let slices = |env: &[(&str, &str)]| slices_of(&run_isolated(&exe, env));
    let (host_first, host_other) = slices_of(&run_with(&exe, &dist_lib(), &[]));
    if !custom_slices() || host_first <= 250_000 {
        omp_e2e::skip_without(
            "the_worker_takes_a_short_time_slice_only_when_asked",
            "the kernel takes no time slice for a normal thread (Linux 6.12+), or its own is that short",
        );
        return;
    }
    assert_eq!(slices(&[]), (host_first, host_other), "unset: as on the host device");
    assert_eq!(slices(&[("LIBOMPTARGET_ISOLATE_SLICE_US", "0")]), (host_first, host_other));
    assert_eq!(
        slices(&[("LIBOMPTARGET_ISOLATE_SLICE_US", "250")]),
        (250_000, host_other),
        "the reading thread has the slice asked for, the kernel's other thread the default"
    );
}

/// Whether this kernel reports (and so takes) a normal thread's time slice through
/// `sched_getattr` (`sched_runtime`, Linux 6.12+).
fn custom_slices() -> bool {
    // struct sched_attr, SCHED_ATTR_SIZE_VER1 (56 bytes): sched_runtime is its fourth u64.
    let mut attr = [0u64; 7];
    // SAFETY: sched_getattr(0, attr, 56, 0) writes at most 56 bytes into `attr`, which has 56.
    let r = unsafe { libc::syscall(libc::SYS_sched_getattr, 0, attr.as_mut_ptr(), 56u32, 0) };
    r == 0 && attr[3] > 0
}
