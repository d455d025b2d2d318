//! Isolated local devices (`LIBOMPTARGET_ISOLATE=1`): the host devices 0-3 with their
//! kernels in an `offload-worker` process (dist/lib/offload-worker, next to the runtime).
//! Programs under tests/programs/isolate/. Needs `make dist`.

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
    let mut cmd = Command::new(exe);
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
            if comm == "offload-worker" && start >= me && (ppid == 1 || state == 'Z') {
                found.push(p);
            }
        }
    }
    found
}

/// Runs `exe` isolated and checks that it left no worker behind (running or unreaped).
fn run_isolated(exe: &Path, env: &[(&str, &str)]) -> Output {
    let mut env = env.to_vec();
    env.push(ISOLATE);
    let out = run_bounded(exe, &dist_lib(), &env);
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

#[test]
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
#[test]
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
#[test]
fn a_static_destructor_can_still_offload() {
    let exe = build(Llvm::V22, "isolate/static_dtor.cpp");
    let o = run_isolated(&exe, &[]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert_eq!(text(&o.stdout), "main: y=1\ndestructor: x=42\n", "{}", text(&o.stderr));
}

#[test]
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

#[test]
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

#[test]
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

#[test]
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
