//! End-to-end tests of the CPU device runtime: real Fortran programs compiled with flang-new-19
//! and flang-new-22 for `-fopenmp-targets=x86_64-pc-linux-gnu`, each built twice:
//! * with the native archive `dist/lib/libomptarget.devicertl.a`, by flang's own driver, the way
//!   docs/devicertl.md tells users to;
//! * with the runtime's bitcode (`libomptarget.devicertl.bc` / `.llvm19.bc`) by `ompcc`'s device
//!   LTO, where the loop entry points and bodies are inlined into one another.
//!
//! Both run on LLVM's libomptarget 19/22 and on ours, with 1 and 2 OpenMP threads. Each program prints `key=value` pairs; the expected values
//! are computed here from the same formulas, independently of the program, and the two builds
//! must print exactly the same pairs (every checked value is an integer or logical, so no
//! rounding tolerance applies).

// Always compiled; run as tests once `make dist` has run, and always under CI (see build.rs).
#![cfg_attr(not(omp_e2e), allow(dead_code))]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use omp_e2e::{program, repo_root, run_ours, run_with, scratch, Llvm, ALL};

/// How the device runtime gets into the device image.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Rtl {
    /// The native archive, by flang's (or clang's) own driver.
    Archive,
    /// The bitcode, by ompcc's device LTO.
    Bitcode,
}

/// Thread counts every program is run with.
const THREADS: [u32; 2] = [1, 2];

/// The device runtime under test, as `make dist` installs it.
fn devicertl() -> PathBuf {
    let a = repo_root().join("dist/lib/libomptarget.devicertl.a");
    assert!(a.exists(), "{} is missing: run `make dist` first", a.display());
    a
}

/// A directory holding only `libomptarget.devicertl.a` (a link to ours). flang-19's driver links
/// `-lomptarget.devicertl` into the device image; putting this directory first on `-L` makes that
/// ours rather than LLVM's GPU-only archive, without changing which libomptarget.so is linked.
fn devicertl_dir(dir: &Path) -> PathBuf {
    let d = dir.join("devrtl");
    std::fs::create_dir_all(&d).unwrap();
    let link = d.join("libomptarget.devicertl.a");
    let _ = std::fs::remove_file(&link);
    std::os::unix::fs::symlink(devicertl(), &link).unwrap();
    d
}

/// Why a compile did not produce a program.
enum BuildError {
    /// The compiler does not implement a construct the program uses (flang 19's known gaps).
    Unsupported(String),
    Failed(String),
}

/// Compiles `src` for x86_64 offloading with `llvm`'s compiler and our device runtime: with the
/// archive, the way docs/devicertl.md tells users to (`-L <dir>` for LLVM 19,
/// `-Xoffload-linker-x86_64-pc-linux-gnu <archive>` for LLVM 22); with the bitcode, through ompcc.
fn build(llvm: Llvm, rtl: Rtl, src: &Path, out: &Path) -> Result<(), BuildError> {
    let fortran = src.extension().is_some_and(|e| e == "f90");
    let driver = if fortran { llvm.flang() } else { llvm.clang() };
    let mut cmd = match rtl {
        Rtl::Archive => Command::new(&driver),
        Rtl::Bitcode => {
            let mut c = Command::new(repo_root().join("dist/bin/ompcc"));
            c.arg(format!("--clang={}", llvm.clang())).arg(format!("--flang={}", llvm.flang())).arg("-v");
            c
        }
    };
    cmd.current_dir(out.parent().unwrap());
    cmd.args(["-fopenmp", "-fopenmp-targets=x86_64-pc-linux-gnu", "-g", "-O1"]);
    if fortran && llvm == Llvm::V22 {
        // flang 22 checks OpenMP 3.1 by default; `device_type` needs 5.2.
        cmd.arg("-fopenmp-version=52");
    }
    match (llvm, rtl) {
        (Llvm::V19, Rtl::Archive) => {
            cmd.arg(format!("-L{}", devicertl_dir(out.parent().unwrap()).display()));
            cmd.args(llvm.link_flags());
        }
        (Llvm::V22, Rtl::Archive) => {
            cmd.args(llvm.link_flags());
            cmd.arg("-Xoffload-linker-x86_64-pc-linux-gnu").arg(devicertl());
        }
        (_, Rtl::Bitcode) => {
            cmd.args(llvm.link_flags());
        }
    }
    cmd.arg(src).arg("-o").arg(out);
    let o = cmd.output().unwrap_or_else(|e| panic!("cannot run {driver}: {e}"));
    let stderr = String::from_utf8_lossy(&o.stderr).into_owned();
    if o.status.success() {
        if rtl == Rtl::Bitcode {
            let want = if llvm == Llvm::V22 { "libomptarget.devicertl.bc" } else { "libomptarget.devicertl.llvm19.bc" };
            assert!(
                stderr.lines().any(|l| l.contains("llvm-link") && l.contains(want)),
                "ompcc did not link {} through device LTO with {want}:\n{stderr}",
                src.display()
            );
        }
        return Ok(());
    }
    let gap = ["not yet implemented", "unsupported OpenMP operation"];
    if gap.iter().any(|g| stderr.contains(g)) {
        let line = stderr.lines().find(|l| gap.iter().any(|g| l.contains(g))).unwrap_or("");
        Err(BuildError::Unsupported(line.trim().to_string()))
    } else {
        Err(BuildError::Failed(format!("{cmd:?}\n{stderr}")))
    }
}

/// The `key=value` pairs a program printed.
fn parse(stdout: &str) -> BTreeMap<String, String> {
    stdout.split_whitespace().filter_map(|w| w.split_once('=')).map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

/// What a program printed, by runtime and thread count.
type Outputs = Vec<(String, u32, BTreeMap<String, String>)>;

/// Runs `exe` on LLVM's runtime and on ours, with each thread count, compares
/// what it printed with `expected(threads)`, and returns what it printed.
fn run_and_check(llvm: Llvm, exe: &Path, expected: &dyn Fn(u32) -> Vec<(&'static str, String)>) -> Outputs {
    let mut printed = Vec::new();
    for threads in THREADS {
        let n = threads.to_string();
        let env = [("OMP_TARGET_OFFLOAD", "MANDATORY"), ("OMP_NUM_THREADS", n.as_str())];
        let o = run_with(exe, &llvm.llvm_lib(), &env);
        let stdout = String::from_utf8_lossy(&o.stdout).into_owned();
        assert!(
            o.status.success(),
            "{} on LLVM {} runtime, OMP_NUM_THREADS={threads} failed ({}):\n{stdout}\n{}",
            exe.display(),
            llvm.major(),
            o.status,
            String::from_utf8_lossy(&o.stderr)
        );
        let outputs = [
            (format!("LLVM {} libomptarget", llvm.major()), stdout),
            ("our libomptarget".to_string(), run_ours(exe, &env)),
        ];
        for (runtime, stdout) in outputs {
            let got = parse(&stdout);
            for (key, want) in expected(threads) {
                assert_eq!(
                    got.get(key),
                    Some(&want),
                    "{}: `{key}` on {runtime}, OMP_NUM_THREADS={threads}; output:\n{stdout}",
                    exe.display()
                );
            }
            printed.push((runtime, threads, got));
        }
    }
    printed
}

/// Builds `tests/programs/<rel>` with every LLVM version, with the archive and (Fortran) with the
/// bitcode, checks the output of each, and that both builds print the same. `flang19_gap` names
/// the construct flang 19 cannot compile, if any: that build must fail with flang's "not yet
/// implemented" (and is then reported and skipped), so a fixed compiler is noticed.
fn check(rel: &str, flang19_gap: Option<&str>, expected: &dyn Fn(u32) -> Vec<(&'static str, String)>) {
    let src = program(rel);
    let stem = src.file_stem().unwrap().to_string_lossy().into_owned();
    let fortran = src.extension().is_some_and(|e| e == "f90");
    let rtls: &[Rtl] = if fortran { &[Rtl::Archive, Rtl::Bitcode] } else { &[Rtl::Archive] };
    let mut ran = 0;
    for llvm in ALL {
        let mut first: Option<Outputs> = None;
        for &rtl in rtls {
            // A directory per build: flang writes module files (`test_0.mod`) where it runs.
            let dir = scratch(&format!("devicertl-{stem}-{}-{rtl:?}", llvm.major()));
            let exe = dir.join(&stem);
            match (build(llvm, rtl, &src, &exe), llvm, flang19_gap) {
                (Ok(()), _, _) => {
                    let printed = run_and_check(llvm, &exe, expected);
                    match &first {
                        None => first = Some(printed),
                        Some(archive) => assert_eq!(
                            archive,
                            &printed,
                            "{rel} with LLVM {}: the archive and bitcode builds printed different values",
                            llvm.major()
                        ),
                    }
                    ran += 1;
                }
                (Err(BuildError::Unsupported(msg)), Llvm::V19, Some(construct)) => {
                    eprintln!("skipped: flang-new-19 cannot compile {construct} ({rel}, {rtl:?}): {msg}");
                }
                (Err(BuildError::Unsupported(msg) | BuildError::Failed(msg)), _, _) => {
                    panic!("building {rel} with LLVM {} ({rtl:?}) failed:\n{msg}", llvm.major())
                }
            }
        }
    }
    assert!(ran > 0, "{rel} ran with no compiler");
}

fn s(v: impl ToString) -> String {
    v.to_string()
}

#[cfg_attr(omp_e2e, test)]
fn declare_target_link_variable() {
    check("fortran/declare_link.f90", None, &|_| vec![("sp", s(1))]);
}

#[cfg_attr(omp_e2e, test)]
fn nohost_function_called_from_target() {
    let f = |x: i64| x * x + 3;
    check("fortran/nohost_func.f90", None, &|_| vec![("f", s(f(7))), ("g", s((1..=10).map(f).sum::<i64>()))]);
}

#[cfg_attr(omp_e2e, test)]
fn target_teams_distribute_parallel_do_reduction() {
    let n: i64 = 100_000;
    check("fortran/tdpd_reduction.f90", Some("composite DISTRIBUTE PARALLEL DO / teams reduction"), &|_| {
        vec![("n", s(n)), ("sum", s(n * (n + 1) / 2)), ("count", s(n)), ("maxval", s(n))]
    });
}

#[cfg_attr(omp_e2e, test)]
fn target_teams_distribute_reduction() {
    let n: i64 = 5000;
    check("fortran/teams_distribute.f90", Some("standalone DISTRIBUTE / teams reduction"), &|_| {
        vec![("sum", s(n * (n + 1) / 2)), ("count", s(n))]
    });
}

#[cfg_attr(omp_e2e, test)]
fn target_parallel_do_uses_every_thread() {
    let n = 10_000;
    check("fortran/target_parallel_do.f90", None, &|threads| {
        vec![("n", s(n)), ("bad", s(0)), ("count", s(n)), ("threads", s(threads))]
    });
}

#[cfg_attr(omp_e2e, test)]
fn target_parallel_do_integer8() {
    let n: i64 = 50_000;
    check("fortran/int8_loop.f90", None, &|_| vec![("sum", s(n * (n + 1) / 2)), ("count", s(n))]);
}

#[cfg_attr(omp_e2e, test)]
fn worksharing_loops_end_with_a_barrier() {
    check("fortran/loop_barrier.f90", None, &|_| vec![("wrong", s(0))]);
}

#[cfg_attr(omp_e2e, test)]
fn target_data_enter_exit_update() {
    let n: i64 = 1000;
    let base = n * (n + 1) / 2;
    check("fortran/target_data.f90", None, &|_| {
        vec![
            ("data", s(2 * base)),
            ("enter", s(base + 10 * n)),
            ("update", s(2 * (base + 10 * n) + n)),
            ("host_copy_untouched", s("T")),
        ]
    });
}

#[cfg_attr(omp_e2e, test)]
fn declare_target_to_module_array() {
    let squares: i64 = (1..=100).map(|i: i64| i * i).sum();
    check("fortran/declare_to_array.f90", None, &|_| vec![("dev_sum", s(squares)), ("after", s(squares + 5 * 100))]);
}

#[cfg_attr(omp_e2e, test)]
fn omp_queries_inside_target_regions() {
    check("fortran/api_queries.f90", None, &|threads| {
        vec![
            ("host_initial", s("T")),
            ("dev_initial", s("F")),
            ("tnum", s(0)),
            ("nteams", s(1)),
            ("par_initial_count", s(0)),
            ("par_threads", s(threads)),
        ]
    });
}

#[cfg_attr(omp_e2e, test)]
fn c_program_still_works_with_the_devicertl() {
    let n: i64 = 100_000;
    check("fortran/c_offload.c", None, &|_| {
        vec![("sum", s(n * (n + 1) / 2)), ("initial", s(0)), ("host_initial", s(1)), ("team_ok", s(1)), ("count", s(n))]
    });
}

/// `ompcc -c` (flang 22) writes fat objects: native device code that flang's own driver links
/// with the archive, plus bitcode that ompcc's link takes for device LTO. Both programs print
/// the same.
#[cfg_attr(omp_e2e, test)]
fn separately_compiled_fortran_links_both_ways() {
    let llvm = Llvm::V22;
    let src = program("fortran/target_parallel_do.f90");
    let dir = scratch("devicertl-separate-22");
    let ompcc = |args: &[&str]| {
        let mut c = Command::new(repo_root().join("dist/bin/ompcc"));
        c.current_dir(&dir).arg(format!("--clang={}", llvm.clang())).arg(format!("--flang={}", llvm.flang()));
        c.args(["-fopenmp", "-fopenmp-targets=x86_64-pc-linux-gnu", "-O2"]).args(llvm.link_flags()).args(args);
        let o = c.output().expect("run ompcc");
        let stderr = String::from_utf8_lossy(&o.stderr).into_owned();
        assert!(o.status.success(), "{c:?} failed:\n{stderr}");
        stderr
    };
    ompcc(&["-c", src.to_str().unwrap(), "-o", "prog.o"]);
    let linked = ompcc(&["--driver-mode=flang", "-v", "prog.o", "-o", "lto"]);
    assert!(
        linked.lines().any(|l| l.contains("--dump-section") && l.contains(".llvm.lto="))
            && linked.lines().any(|l| l.contains("llvm-link") && l.contains("libomptarget.devicertl.bc")),
        "ompcc did not take the bitcode of the fat object:\n{linked}"
    );
    let mut flang = Command::new(llvm.flang());
    flang.current_dir(&dir).args(["-fopenmp", "-fopenmp-targets=x86_64-pc-linux-gnu"]).args(llvm.link_flags());
    flang.arg("-Xoffload-linker-x86_64-pc-linux-gnu").arg(devicertl()).args(["prog.o", "-o", "archive"]);
    let o = flang.output().expect("run flang");
    assert!(o.status.success(), "{flang:?} failed:\n{}", String::from_utf8_lossy(&o.stderr));
    let n = 10_000;
    let expected = |threads: u32| vec![("n", s(n)), ("bad", s(0)), ("count", s(n)), ("threads", s(threads))];
    let a = run_and_check(llvm, &dir.join("lto"), &expected);
    let b = run_and_check(llvm, &dir.join("archive"), &expected);
    assert_eq!(a, b, "the device-LTO and archive links printed different values");
}
