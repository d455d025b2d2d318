//! Kernel record and replay (docs/replay.md): programs under tests/programs/replay/ run on
//! an isolated device with `LIBOMPTARGET_RECORD=DIR`, then `dist/bin/omp-replay` runs the
//! recorded kernel alone. Needs `make dist`.

// Always compiled; run as tests once `make dist` has run, and always under CI (see build.rs).
#![cfg_attr(not(omp_e2e), allow(dead_code))]

use omp_e2e::{compile, dist_lib, ompcc_fortran, program, repo_root, run_with, scratch, skip_without, Llvm, ALL};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicUsize, Ordering};

fn dir_for(what: &str) -> PathBuf {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    scratch(&format!("replay-{}-{}", what.replace('/', "-"), NEXT.fetch_add(1, Ordering::Relaxed)))
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Builds `rel` (C and C++ with `llvm`'s clang, Fortran through ompcc with flang 22).
fn build(llvm: Llvm, rel: &str) -> PathBuf {
    let exe = dir_for(rel).join("prog");
    if rel.ends_with(".f90") {
        ompcc_fortran(&program(rel), &exe);
    } else {
        compile(llvm, &[&program(rel)], &exe, &[]);
    }
    exe
}

/// Runs `exe` on an isolated device recording into `DIR/rec`; returns the run and that DIR.
fn record(exe: &Path, extra: &[(&str, &str)]) -> (Output, PathBuf) {
    let rec = exe.parent().unwrap().join("rec");
    let rec_s = rec.to_str().unwrap().to_string();
    let mut env = vec![("LIBOMPTARGET_ISOLATE", "1"), ("LIBOMPTARGET_RECORD", rec_s.as_str())];
    env.extend_from_slice(extra);
    (run_with(exe, &dist_lib(), &env), rec)
}

/// The descriptions in `rec`, sorted.
fn descriptions(rec: &Path) -> Vec<PathBuf> {
    let mut d: Vec<PathBuf> = match std::fs::read_dir(rec) {
        Ok(it) => it.map(|e| e.unwrap().path()).filter(|p| p.extension().is_some_and(|e| e == "json")).collect(),
        Err(_) => Vec::new(),
    };
    d.sort();
    d
}

/// `omp-replay ARGS`, with nothing on the library path: the record names what to load.
fn replay(args: &[&str]) -> Output {
    Command::new(repo_root().join("dist/bin/omp-replay"))
        .args(args)
        .env_remove("LD_LIBRARY_PATH")
        .output()
        .expect("run omp-replay")
}

fn recorded_one(rel: &str, llvm: Llvm, want: &str) -> PathBuf {
    let exe = build(llvm, rel);
    let (o, rec) = record(&exe, &[]);
    assert!(o.status.success(), "{rel}: {}\n{}", text(&o.stdout), text(&o.stderr));
    assert_eq!(text(&o.stdout).trim(), want, "{rel}");
    assert_eq!(text(&o.stderr), "", "{rel}: recording is silent");
    let descs = descriptions(&rec);
    assert_eq!(descs.len(), 1, "{rel}: one kernel and configuration, recorded once: {descs:?}");
    descs[0].clone()
}

fn json(desc: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(desc).unwrap()).unwrap()
}

#[cfg_attr(omp_e2e, test)]
fn kernels_from_c_cpp_and_fortran_replay_and_verify() {
    let cases: Vec<(&str, Llvm, &str)> = ALL
        .iter()
        .map(|&l| ("replay/saxpy.c", l, "saxpy sum=249985000.0"))
        .chain([
            ("replay/scale.cpp", Llvm::V22, "scale sum=8404992.0"),
            ("replay/axpy.f90", Llvm::V22, "axpy sum=25010000.0"),
        ])
        .collect();
    for (rel, llvm, want) in cases {
        let desc = recorded_one(rel, llvm, want);
        let j = json(&desc);
        assert!(j["Name"].as_str().unwrap().starts_with("__omp_offloading_"), "{rel}: {j}");
        assert_eq!(j["FormatVersion"], 1);
        let allocs = j["Allocations"].as_array().unwrap();
        assert!(!allocs.is_empty(), "{rel}: {j}");
        let pointing = j["Args"].as_array().unwrap().iter().filter(|a| a.get("Allocation").is_some()).count();
        assert!(pointing >= 1, "{rel}: the mapped arrays are arguments into the allocations: {j}");
        let o = replay(&[desc.to_str().unwrap(), "--verify"]);
        assert!(o.status.success(), "{rel}: {}\n{}", text(&o.stdout), text(&o.stderr));
        assert!(
            text(&o.stdout).contains("omp-replay: verified: the device memory after the kernel matches the recording"),
            "{rel}: {}",
            text(&o.stdout)
        );
    }
}

#[cfg_attr(omp_e2e, test)]
fn a_tampered_record_fails_cleanly() {
    let desc = recorded_one("replay/saxpy.c", Llvm::V22, "saxpy sum=249985000.0");
    let d = desc.to_str().unwrap();
    let j = json(&desc);
    // The last byte of the output is the last allocation's last byte.
    let allocs = j["Allocations"].as_array().unwrap();
    let last = allocs.len() - 1;
    let size = allocs[last]["Size"].as_u64().unwrap();
    let out = desc.with_extension("record_output");
    let mut bytes = std::fs::read(&out).unwrap();
    let end = bytes.len() - 1;
    bytes[end] ^= 0xff;
    std::fs::write(&out, &bytes).unwrap();
    let o = replay(&[d, "--verify"]);
    assert_eq!(o.status.code(), Some(1), "{}\n{}", text(&o.stdout), text(&o.stderr));
    let want = format!(
        "omp-replay: verification failed: allocation {last} ({}, {size} bytes) differs at offset {}",
        allocs[last]["Addr"].as_str().unwrap(),
        size - 1
    );
    assert!(text(&o.stdout).contains(&want), "want {want}\n{}", text(&o.stdout));

    // A truncated memory file: refused before anything is mapped or run.
    let input = desc.with_extension("record_input");
    let len = std::fs::metadata(&input).unwrap().len();
    std::fs::File::options().write(true).open(&input).unwrap().set_len(len - 1).unwrap();
    let o = replay(&[d]);
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o.stderr).contains("the record is truncated or not this description's"), "{}", text(&o.stderr));
    assert_eq!(text(&o.stdout), "", "nothing ran");

    // A description that lies about a size.
    let lying = std::fs::read_to_string(&desc).unwrap().replace("\"MemorySize\": ", "\"MemorySize\": 1");
    std::fs::write(&desc, lying).unwrap();
    let o = replay(&[d]);
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o.stderr).starts_with("omp-replay: error: "), "{}", text(&o.stderr));
    assert!(text(&o.stderr).contains("\"MemorySize\" is 1"), "{}", text(&o.stderr));

    let o = replay(&["/nonexistent/k.json"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o.stderr).contains("cannot read /nonexistent/k.json"), "{}", text(&o.stderr));
}

#[cfg_attr(omp_e2e, test)]
fn repeat_times_each_run_from_the_recorded_memory() {
    let desc = recorded_one("replay/saxpy.c", Llvm::V22, "saxpy sum=249985000.0");
    let o = replay(&[desc.to_str().unwrap(), "--repeat", "3", "--verify"]);
    assert!(o.status.success(), "{}\n{}", text(&o.stdout), text(&o.stderr));
    let s = text(&o.stdout);
    let runs: Vec<&str> = s.lines().filter(|l| l.starts_with("run ")).collect();
    assert_eq!(runs.len(), 3, "{s}");
    assert!(runs[2].starts_with("run 3: kernel ") && runs[2].contains(" ms (restore "), "{s}");
    // Each run starts from the recorded memory, so the third still verifies.
    assert!(s.contains("omp-replay: verified"), "{s}");
}

#[cfg_attr(omp_e2e, test)]
fn over_the_size_limit_one_warning_and_nothing_written() {
    let exe = build(Llvm::V22, "replay/saxpy.c");
    let (o, rec) = record(&exe, &[("LIBOMPTARGET_RECORD_MAX", "1K")]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert_eq!(text(&o.stdout).trim(), "saxpy sum=249985000.0");
    let err = text(&o.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.starts_with("omptarget warning: LIBOMPTARGET_RECORD: kernel __omp_offloading_"), "{err}");
    assert!(err.contains("over LIBOMPTARGET_RECORD_MAX (1024 bytes); nothing more is recorded"), "{err}");
    assert!(descriptions(&rec).is_empty());
}

#[cfg_attr(omp_e2e, test)]
fn a_replay_under_gdb_stops_at_the_kernels_line() {
    if gdb_missing("a_replay_under_gdb_stops_at_the_kernels_line") {
        return;
    }
    let desc = recorded_one("replay/saxpy.c", Llvm::V22, "saxpy sum=249985000.0");
    let o = Command::new("gdb")
        .args(["-nx", "-batch", "-ex", "set breakpoint pending on", "-ex", "break saxpy.c:16", "-ex", "run"])
        .args(["-ex", "info source", "-ex", "kill", "--args"])
        .arg(repo_root().join("dist/bin/omp-replay"))
        .arg(&desc)
        .env_remove("LD_LIBRARY_PATH")
        .output()
        .expect("run gdb");
    let s = text(&o.stdout);
    assert!(s.contains("Breakpoint 1, "), "{s}\n{}", text(&o.stderr));
    assert!(s.contains("saxpy.c:16"), "{s}");
}

#[cfg_attr(omp_e2e, test)]
fn record_kernel_and_launch_choose_the_launch() {
    let exe = build(Llvm::V22, "replay/saxpy.c");
    // No kernel matches: nothing recorded, nothing said.
    let (o, rec) = record(&exe, &[("LIBOMPTARGET_RECORD_KERNEL", "no_such_kernel")]);
    assert!(o.status.success() && text(&o.stderr).is_empty(), "{}", text(&o.stderr));
    assert!(descriptions(&rec).is_empty());
    // The second launch of main's kernel: its input is the first launch's output.
    let (o, rec) =
        record(&exe, &[("LIBOMPTARGET_RECORD_KERNEL", "_main_l1[0-9]$"), ("LIBOMPTARGET_RECORD_LAUNCH", "2")]);
    assert!(o.status.success() && text(&o.stderr).is_empty(), "{}", text(&o.stderr));
    let descs = descriptions(&rec);
    assert_eq!(descs.len(), 1, "{descs:?}");
    let j = json(&descs[0]);
    // y is the allocation the kernel writes (x is only read).
    let input = std::fs::read(descs[0].with_extension("record_input")).unwrap();
    let output = std::fs::read(descs[0].with_extension("record_output")).unwrap();
    let range = |a: &serde_json::Value| {
        let off = a["FileOffset"].as_u64().unwrap() as usize;
        off..off + a["Size"].as_u64().unwrap() as usize
    };
    let allocs = j["Allocations"].as_array().unwrap();
    let written: Vec<_> = allocs.iter().map(range).filter(|r| input[r.clone()] != output[r.clone()]).collect();
    assert_eq!(written.len(), 1, "{j}");
    let at = written[0].start + 8;
    let y1 = f64::from_le_bytes(input[at..at + 8].try_into().unwrap());
    assert_eq!(y1, 3.5, "y[1] after the first launch (1 + 2.5 * 1)");
    let o = replay(&[descs[0].to_str().unwrap(), "--verify"]);
    assert!(o.status.success(), "{}\n{}", text(&o.stdout), text(&o.stderr));
}

/// The description a failed launch's error names (`… recorded in PATH: replay it with omp-replay`).
fn named_record(stderr: &str) -> PathBuf {
    let after =
        stderr.split("; the launch is recorded in ").nth(1).unwrap_or_else(|| panic!("no record named:\n{stderr}"));
    PathBuf::from(after.split(": replay it with omp-replay").next().unwrap())
}

fn gdb_missing(test: &str) -> bool {
    let missing = Command::new("gdb").arg("--version").output().is_err();
    if missing {
        skip_without(test, "gdb is not installed (scripts/setup.sh installs it)");
    }
    missing
}

#[cfg_attr(omp_e2e, test)]
fn the_launch_that_faults_is_recorded_by_itself_and_replays_to_the_fault() {
    // isolate/sum.c reads a host array that was never mapped: on the isolated device its
    // kernel faults. No LIBOMPTARGET_RECORD: the record goes to $TMPDIR/omp-records-PID.
    let exe = build(Llvm::V22, "isolate/sum.c");
    let tmp = exe.parent().unwrap().join("tmp");
    std::fs::create_dir_all(&tmp).unwrap();
    let o = run_with(&exe, &dist_lib(), &[("LIBOMPTARGET_ISOLATE", "1"), ("TMPDIR", tmp.to_str().unwrap())]);
    assert!(!o.status.success());
    let err = text(&o.stderr);
    assert!(err.contains("ended: killed by signal 11 (SIGSEGV)"), "{err}");
    let desc = named_record(&err);
    assert_eq!(desc.parent().unwrap().parent(), Some(tmp.as_path()), "{}", desc.display());
    let dir_name = desc.parent().unwrap().file_name().unwrap().to_str().unwrap();
    let pid = dir_name.strip_prefix("omp-records-").unwrap_or_default();
    assert!(!pid.is_empty() && pid.bytes().all(|b| b.is_ascii_digit()), "$TMPDIR/omp-records-PID: {dir_name}");
    assert_eq!(descriptions(desc.parent().unwrap()), vec![desc.clone()], "the failed launch only");
    let j = json(&desc);
    assert!(j["Fault"].as_str().unwrap().contains("(SIGSEGV)"), "{j}");
    assert_eq!(j["InputAfterFault"], true, "{j}");
    assert!(j.get("Output").is_none(), "{j}");
    let d = desc.to_str().unwrap();

    // Nothing to verify against; --check names the unmapped read.
    let o = replay(&[d, "--verify"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o.stderr));
    assert!(text(&o.stderr).contains("no memory after the kernel to verify against"), "{}", text(&o.stderr));
    let o = replay(&[d, "--check"]);
    assert_eq!(o.status.code(), Some(1), "{}\n{}", text(&o.stdout), text(&o.stderr));
    assert!(text(&o.stdout).contains("omp-replay: the recorded launch failed ("), "{}", text(&o.stdout));
    let err = text(&o.stderr);
    assert!(err.starts_with("omp-replay: check: the kernel read 0x"), "{err}");
    assert!(err.contains(", no recorded device memory (a host pointer"), "{err}");

    if gdb_missing("the_launch_that_faults_is_recorded_by_itself_and_replays_to_the_fault") {
        return;
    }
    let o = Command::new("gdb")
        .args(["-nx", "-batch", "-ex", "run", "-ex", "kill", "--args"])
        .arg(repo_root().join("dist/bin/omp-replay"))
        .arg(&desc)
        .env_remove("LD_LIBRARY_PATH")
        .output()
        .expect("run gdb");
    let s = text(&o.stdout);
    assert!(s.contains("received signal SIGSEGV"), "{s}\n{}", text(&o.stderr));
    assert!(s.contains("sum.c:6"), "the kernel's line: {s}");
}

#[cfg_attr(omp_e2e, test)]
fn check_names_a_read_past_the_array() {
    // Recorded under the checker: the first launch is chosen, its memory written before it
    // ran; the read of x[n] faults on the page after x, so the launch fails and is kept.
    let exe = build(Llvm::V22, "replay/read_past.c");
    let (o, rec) = record(&exe, &[("LIBOMPTARGET_CHECK", "1")]);
    assert!(!o.status.success());
    let desc = named_record(&text(&o.stderr));
    assert_eq!(descriptions(&rec), vec![desc.clone()]);
    assert_eq!(json(&desc)["InputAfterFault"], false);
    let o = replay(&[desc.to_str().unwrap(), "--check"]);
    assert_eq!(o.status.code(), Some(1), "{}\n{}", text(&o.stdout), text(&o.stderr));
    let err = text(&o.stderr);
    assert!(err.starts_with("omp-replay: check: the kernel read 0x"), "{err}");
    assert!(err.contains(", 0 bytes past the end of allocation ") && err.contains(", 8000 bytes)"), "{err}");

    // A correct kernel: nothing to say.
    let desc = recorded_one("replay/saxpy.c", Llvm::V22, "saxpy sum=249985000.0");
    let o = replay(&[desc.to_str().unwrap(), "--check", "--verify"]);
    assert!(o.status.success(), "{}\n{}", text(&o.stdout), text(&o.stderr));
    assert!(text(&o.stdout).contains("omp-replay: check: no access outside the recorded allocations"));
}

#[cfg_attr(omp_e2e, test)]
fn teams_and_threads_replace_the_kernels_own_clauses() {
    // replay/shape.c's kernel has num_teams(1) thread_limit(2) and num_threads(2), and writes
    // the teams and threads it ran with into shape[0] and shape[1].
    let desc = recorded_one("replay/shape.c", Llvm::V22, "teams=1 threads=2");
    let d = desc.to_str().unwrap();
    let o = replay(&[d, "--verify"]);
    assert!(o.status.success(), "{}\n{}", text(&o.stdout), text(&o.stderr));
    let o = replay(&[d, "--verify", "--threads", "1"]);
    assert_eq!(o.status.code(), Some(1), "{}\n{}", text(&o.stdout), text(&o.stderr));
    assert!(text(&o.stdout).contains("differs at offset 4: recorded 0x02, replayed 0x01"), "{}", text(&o.stdout));
    let o = replay(&[d, "--verify", "--teams", "2", "--threads", "1"]);
    assert_eq!(o.status.code(), Some(1), "{}\n{}", text(&o.stdout), text(&o.stderr));
    assert!(text(&o.stdout).contains("differs at offset 0: recorded 0x01, replayed 0x02"), "{}", text(&o.stdout));
}

#[cfg_attr(omp_e2e, test)]
fn a_declare_target_global_set_by_the_host_is_restored() {
    // replay/globals.c sets `scale` (declare target, 1.0 in the image) to 3.0 on the device
    // before the launch: the replay verifies only if it sees 3.0 again.
    let desc = recorded_one("replay/globals.c", Llvm::V22, "y=3 6 9 12");
    let j = json(&desc);
    assert_eq!(j["GlobalVariables"][0]["Name"], "scale", "{j}");
    let globals = std::fs::read(desc.with_extension("globals")).unwrap();
    assert_eq!(globals, 3.0f64.to_le_bytes(), "the value the host set");
    let o = replay(&[desc.to_str().unwrap(), "--verify", "--repeat", "2"]);
    assert!(o.status.success(), "{}\n{}", text(&o.stdout), text(&o.stderr));
    // Without the recorded value the kernel multiplies by the image's 1.0.
    std::fs::write(desc.with_extension("globals"), 1.0f64.to_le_bytes()).unwrap();
    let o = replay(&[desc.to_str().unwrap(), "--verify"]);
    assert_eq!(o.status.code(), Some(1), "{}\n{}", text(&o.stdout), text(&o.stderr));
}

/// The value of a record's one global, `scale` (a double).
fn recorded_scale(desc: &Path) -> f64 {
    let j = json(desc);
    assert_eq!(j["GlobalVariables"][0]["Name"], "scale", "{j}");
    assert_eq!(j["GlobalVariables"][0]["Size"], 8, "{j}");
    let globals = std::fs::read(desc.with_extension("globals")).unwrap();
    f64::from_le_bytes(globals.try_into().unwrap())
}

#[cfg_attr(omp_e2e, test)]
fn the_record_of_a_failed_launch_holds_the_globals_as_the_failure_left_them() {
    // replay/fault_global.c: the host sets `scale` (1 in the image) to 3, the kernel adds 1,
    // prints it and fails in one of five ways. No LIBOMPTARGET_RECORD: the failure alone is
    // recorded, after the worker died, so its globals are what the dying worker saved.
    let exe = build(Llvm::V22, "replay/fault_global.c");
    let cases = [
        ("segv", "killed by signal 11 (SIGSEGV)", &[][..]),
        ("segv", "killed by signal 11 (SIGSEGV)", &[("LIBOMPTARGET_CHECK", "1")][..]),
        ("fpe", "killed by signal 8 (SIGFPE)", &[][..]),
        ("ill", "killed by signal 4 (SIGILL)", &[][..]),
        ("abort", "killed by signal 6 (SIGABRT)", &[][..]),
        ("exit", "exited with status 3", &[][..]),
    ];
    for (i, (how, ended, extra)) in cases.into_iter().enumerate() {
        let tmp = exe.parent().unwrap().join(format!("tmp{i}"));
        std::fs::create_dir_all(&tmp).unwrap();
        let mut env = vec![("LIBOMPTARGET_ISOLATE", "1"), ("TMPDIR", tmp.to_str().unwrap())];
        env.extend_from_slice(extra);
        let o = omp_e2e::program_command(&exe).arg(how).env("LD_LIBRARY_PATH", dist_lib()).envs(env).output().unwrap();
        let (out, err) = (text(&o.stdout), text(&o.stderr));
        assert!(!o.status.success(), "{how} {extra:?}: {out}\n{err}");
        assert!(err.contains(&format!("ended: {ended}")), "{how} {extra:?}: {err}");
        // What the kernel printed (and flushed) before it failed reaches the program, also
        // when the worker died before it forwarded it.
        assert!(out.contains("kernel: scale=4\n"), "{how} {extra:?}: {out}\n{err}");
        let desc = named_record(&err);
        assert_eq!(json(&desc)["InputAfterFault"], true, "{how} {extra:?}");
        // Not the image's 1, not the host's 3: the value the kernel left.
        assert_eq!(recorded_scale(&desc), 4.0, "{how} {extra:?}");
        if how != "segv" {
            continue;
        }
        // The replay restores 4: its kernel prints 5, and faults the same way.
        let o = replay(&[desc.to_str().unwrap()]);
        let out = text(&o.stdout);
        assert!(out.contains("kernel: scale=5"), "{extra:?}: {out}\n{}", text(&o.stderr));
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(o.status.signal(), Some(11), "{extra:?}: {out}\n{}", text(&o.stderr));
        // Without it, the image's 1: the kernel prints 2.
        std::fs::write(desc.with_extension("globals"), 1.0f64.to_le_bytes()).unwrap();
        let o = replay(&[desc.to_str().unwrap()]);
        assert!(text(&o.stdout).contains("kernel: scale=2"), "{extra:?}: {}", text(&o.stdout));
    }
}
