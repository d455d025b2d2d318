//! The mapping checker (`LIBOMPTARGET_CHECK`): each finding from a real C and Fortran
//! program with the bug (tests/programs/check/), silence on correct programs, the checks
//! that still run without isolation, and the data-movement advice. Needs `make dist`.

// Always compiled; run as tests once `make dist` has run, and always under CI (see build.rs).
#![cfg_attr(not(omp_e2e), allow(dead_code))]

use omp_e2e::{compile, dist_lib, ompcc_fortran, program, run_with, scratch, Llvm, ALL};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicUsize, Ordering};

fn dir_for(what: &str) -> PathBuf {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    scratch(&format!("check-{}-{}", what.replace('/', "-"), NEXT.fetch_add(1, Ordering::Relaxed)))
}

fn build(llvm: Llvm, rel: &str, extra: &[&str]) -> PathBuf {
    let exe = dir_for(rel).join("prog");
    compile(llvm, &[&program(rel)], &exe, extra);
    exe
}

/// Fortran through ompcc (flang 22 and the bitcode device runtime), as users build it.
fn build_fortran(rel: &str) -> PathBuf {
    let exe = dir_for(rel).join("prog");
    ompcc_fortran(&program(rel), &exe);
    exe
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn run(exe: &Path, env: &[(&str, &str)]) -> Output {
    run_with(exe, &dist_lib(), env)
}

/// The `omptarget check:` lines a run printed.
fn findings(o: &Output) -> Vec<String> {
    text(&o.stderr).lines().filter(|l| l.starts_with("omptarget check:")).map(str::to_string).collect()
}

/// Exactly one finding, containing every one of `want`.
fn one_finding(o: &Output, want: &[&str]) -> String {
    let f = findings(o);
    assert_eq!(f.len(), 1, "expected one finding, got:\n{}", text(&o.stderr));
    for w in want {
        assert!(f[0].contains(w), "finding lacks {w:?}:\n{}", f[0]);
    }
    f[0].clone()
}

const CHECK: (&str, &str) = ("LIBOMPTARGET_CHECK", "1");

#[cfg_attr(omp_e2e, test)]
fn the_documented_sum_example_names_a_its_place_and_the_fix() {
    for llvm in ALL {
        let exe = build(llvm, "check/sum.cpp", &[]);
        // On the shared host device the missing map goes unnoticed.
        assert!(run(&exe, &[]).status.success());
        let o = run(&exe, &[CHECK]);
        one_finding(
            &o,
            &[
                "unmapped access",
                "`A`",
                "implicit zero-length map at sum.cpp:5:1",
                "sum.cpp:5",
                "map(to: A[0:N])",
                "_Z3sumPdm_l5",
                "read host memory",
            ],
        );
        // The program then follows OMP_TARGET_OFFLOAD, as for any device failure.
        assert!(!o.status.success());
    }
    // The same in C (`map(tofrom: sum)` only; A is malloc'ed).
    let exe = build(Llvm::V22, "isolate/sum.c", &[]);
    one_finding(&run(&exe, &[CHECK]), &["unmapped access", "`A`", "sum.c:5:1", "map(to: A[0:N])"]);
}

#[cfg_attr(omp_e2e, test)]
fn without_debug_information_the_finding_says_how_to_get_names() {
    let exe = build(Llvm::V22, "check/sum.cpp", &["-g0"]);
    let f = one_finding(&run(&exe, &[CHECK]), &["unmapped access", "build with -g or -gline-tables-only"]);
    assert!(f.contains("_Z3sumPdm_l5"), "{f}");
}

/// (program, finding, what the line must name) for each bug class in C.
const C_BUGS: [(&str, &[&str]); 5] = [
    (
        "check/stale.c",
        &[
            "stale device data",
            "`a[0:4096]`",
            "stale.c:12:1",
            "stale.c:10:1",
            "#pragma omp target update to(a[0:4096])",
        ],
    ),
    (
        "check/discarded.c",
        &["discarded device results", "`b[0:4096]`", "discarded.c:8:1", "map(tofrom: b[0:4096])", "target update from"],
    ),
    ("check/uninit.c", &["uninitialized device memory", "`c[0:4096]`", "uninit.c:8:1", "map(tofrom: c[0:4096])"]),
    ("check/bounds.c", &["out of bounds", "wrote just past the end of `a[0:1024]`", "bounds.c:8:1"]),
    ("check/leak.c", &["leak", "`d[0:4096]`", "leak.c:8:1", "#pragma omp target exit data map(release: d[0:4096])"]),
];

#[cfg_attr(omp_e2e, test)]
fn each_finding_in_c() {
    for (rel, want) in C_BUGS {
        let exe = build(Llvm::V22, rel, &[]);
        let plain = run(&exe, &[]);
        assert!(findings(&plain).is_empty(), "{rel}: findings without LIBOMPTARGET_CHECK");
        one_finding(&run(&exe, &[CHECK]), want);
    }
}

#[cfg_attr(omp_e2e, test)]
fn a_bug_met_in_every_iteration_is_said_once_and_counted() {
    let exe = build(Llvm::V22, "check/uninit_loop.c", &[]);
    let o = run(&exe, &[CHECK]);
    let f = findings(&o);
    assert_eq!(f.len(), 2, "{}", text(&o.stderr));
    assert!(f[0].contains("uninitialized device memory") && f[0].contains("uninit_loop.c:11:1"), "{}", f[0]);
    assert_eq!(f[1], "omptarget check: 63 more findings like the ones above not printed (each kind is said once per variable and construct)");
}

#[cfg_attr(omp_e2e, test)]
fn each_finding_in_fortran() {
    let cases: [(&str, &[&str]); 5] = [
        ("check/stale.f90", &["stale device data", "`a`", "stale.f90:11", "stale.f90:9", "!$omp target update to(a)"]),
        ("check/discarded.f90", &["discarded device results", "`b`", "discarded.f90:9", "!$omp target update from(b)"]),
        ("check/uninit.f90", &["uninitialized device memory", "`c`", "uninit.f90:8", "map(tofrom: c)"]),
        ("check/bounds.f90", &["out of bounds", "just past the end of `a(1:1024)`", "bounds.f90:9", "a(1:m)"]),
        ("check/leak.f90", &["leak", "`d`", "leak.f90:9", "!$omp target exit data map(release: d)"]),
    ];
    for (rel, want) in cases {
        let exe = build_fortran(rel);
        one_finding(&run(&exe, &[CHECK]), want);
    }
}

/// Correct programs: no finding, and the same output as without the checker.
/// (tests/programs/check/*.c below adds the classes of false alarms found on validation
/// suites: firstprivate arrays, explicit deletes, `to` scratch, defaultmap scalars.)
#[cfg_attr(omp_e2e, test)]
fn correct_programs_are_silent() {
    let mut exes: Vec<(String, PathBuf)> = Vec::new();
    for llvm in ALL {
        exes.push((format!("check/correct.c ({})", llvm.major()), build(llvm, "check/correct.c", &[])));
    }
    for rel in ["isolate/correct.c", "runtime/threads.c", "runtime/nowait_depend.c", "check/advice.c"] {
        exes.push((rel.to_string(), build(Llvm::V22, rel, &[])));
    }
    for rel in ["fortran/target_data.f90", "fortran/tdpd_reduction.f90", "fortran/declare_to_array.f90"] {
        exes.push((rel.to_string(), build_fortran(rel)));
    }
    for (name, exe) in exes {
        let plain = run(&exe, &[]);
        assert!(plain.status.success(), "{name}: {}", text(&plain.stderr));
        let checked = run(&exe, &[("LIBOMPTARGET_CHECK", "bugs")]);
        assert!(checked.status.success(), "{name}: {}", text(&checked.stderr));
        assert!(findings(&checked).is_empty(), "{name}: false alarm:\n{}", text(&checked.stderr));
        assert_eq!(text(&checked.stdout), text(&plain.stdout), "{name}");
    }
}

/// On a device that shares the program's memory, the checks that need isolation are
/// skipped and the others still run.
#[cfg_attr(omp_e2e, test)]
fn without_isolation_only_the_checks_that_need_it_are_skipped() {
    let not_isolated = [CHECK, ("LIBOMPTARGET_ISOLATE", "0")];
    let discarded = build(Llvm::V22, "check/discarded.c", &[]);
    one_finding(&run(&discarded, &not_isolated), &["discarded device results", "`b[0:4096]`"]);
    let leak = build(Llvm::V22, "check/leak.c", &[]);
    one_finding(&run(&leak, &not_isolated), &["leak", "`d[0:4096]`"]);
    let stale = build(Llvm::V22, "check/stale.c", &[]);
    let o = run(&stale, &not_isolated);
    assert!(o.status.success() && findings(&o).is_empty(), "{}", text(&o.stderr));
}

/// On large mappings the checker compares only the pages the system says the program wrote:
/// a change among them is found, a write that changed nothing and the pages left alone are
/// silent, and an update ends it.
#[cfg_attr(omp_e2e, test)]
fn stale_data_in_large_mappings_is_found_among_the_pages_written() {
    let exe = build(Llvm::V22, "check/stale_large.c", &[]);
    let o = run(&exe, &[CHECK]);
    assert_eq!(text(&o.stdout), "s=1312768\n", "{}", text(&o.stderr));
    one_finding(
        &o,
        &["stale device data", "`b[0:(1 << 17)]`", "stale_large.c:22:1", "target update to(b[0:(1 << 17)])"],
    );
}

#[cfg_attr(omp_e2e, test)]
fn the_advisor_sums_avoidable_transfers_and_allocations() {
    let exe = build(Llvm::V22, "check/advice.c", &[]);
    let o = run(&exe, &[("LIBOMPTARGET_CHECK", "perf")]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert_eq!(text(&o.stdout), "s=1999980\n");
    let err = text(&o.stderr);
    assert!(findings(&o).is_empty(), "{err}");
    assert!(err.starts_with("omptarget advice: data movement that could be avoided"), "{err}");
    let line = |what: &str| {
        err.lines().find(|l| l.contains(what)).unwrap_or_else(|| panic!("no {what:?}:\n{err}")).to_string()
    };
    let back = line("copied back from the device although no kernel changed it");
    assert!(
        back.contains("a[0:100000] at advice.c:11:1") && back.contains("10 times") && back.contains("7812.5 KiB"),
        "{back}"
    );
    let alloc = line("r[0:100000] at advice.c:11:1: allocated and freed on the device again and again");
    assert!(alloc.contains("10 times"), "{alloc}");
    let resent = line("copied to the device again with the same contents");
    assert!(resent.contains("a[0:100000]") && resent.contains("9 times"), "{resent}");
}

/// The advice lines (`omptarget advice:`) of a run.
fn advice(o: &Output) -> Vec<String> {
    text(&o.stderr).lines().filter(|l| l.starts_with("omptarget advice:")).map(str::to_string).collect()
}

/// Bytes a run copied between host and device, both ways, from the profile's summary.
fn bytes_moved(exe: &Path) -> u64 {
    let profile = exe.with_file_name("profile.json");
    let o = run(exe, &[("LIBOMPTARGET_PROFILE", profile.to_str().unwrap()), ("LIBOMPTARGET_PROFILE_SUMMARY", "1")]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let err = text(&o.stderr);
    let copies: Vec<u64> = err
        .lines()
        .filter(|l| matches!(l.split_whitespace().next(), Some("HostToDevice" | "DeviceToHost")))
        .map(|l| {
            let cols: Vec<&str> = l.split_whitespace().collect();
            cols[cols.len() - 2].parse().unwrap_or_else(|e| panic!("bytes in {l:?}: {e}"))
        })
        .collect();
    assert!(!copies.is_empty(), "no copies in the profile summary:\n{err}");
    copies.iter().sum()
}

/// The variable and the waste an advice line names (`a[0:N]`, `copied back …`); `None` for
/// the header and the summary lines.
fn what(line: &str) -> Option<(String, String)> {
    let rest = line.strip_prefix("omptarget advice:   ")?;
    let (var, rest) = rest.split_once(" at ")?;
    let (_, rest) = rest.split_once(": ")?;
    let (says, _) = rest.split_once(" (")?;
    Some((var.to_string(), says.to_string()))
}

/// The test that matters: each advice program, and a variant of it written by hand that
/// follows the advice, print the same and the variant moves fewer bytes; the variant draws
/// no advice of the kinds it followed.
#[cfg_attr(omp_e2e, test)]
fn following_the_advice_keeps_the_output_and_moves_fewer_bytes() {
    let cases = [
        ("check/advice.c", "check/advice_followed.c", "s=1999980\n"),
        ("check/advice_unread.c", "check/advice_unread_followed.c", ""),
    ];
    for (rel, followed_rel, want) in cases {
        let exe = build(Llvm::V22, rel, &[]);
        let followed = build(Llvm::V22, followed_rel, &[]);
        let advised = run(&exe, &[("LIBOMPTARGET_CHECK", "perf")]);
        assert!(!advice(&advised).is_empty(), "{rel}: no advice:\n{}", text(&advised.stderr));
        let plain = run(&exe, &[]);
        assert!(plain.status.success(), "{rel}: {}", text(&plain.stderr));
        if !want.is_empty() {
            assert_eq!(text(&plain.stdout), want, "{rel}");
        }
        for env in [&[][..], &[CHECK][..]] {
            let o = run(&followed, env);
            assert!(o.status.success() && findings(&o).is_empty(), "{followed_rel}: {}", text(&o.stderr));
            assert_eq!(text(&o.stdout), text(&plain.stdout), "{followed_rel} prints what {rel} prints");
        }
        let (before, after) = (bytes_moved(&exe), bytes_moved(&followed));
        assert!(after < before, "{followed_rel} moves {after} bytes, {rel} {before}");
        eprintln!("{rel}: {before} bytes moved; followed: {after}");
        // What was followed is not advised again (the variant may draw advice of its own).
        let again: Vec<_> =
            advice(&run(&followed, &[("LIBOMPTARGET_CHECK", "perf")])).iter().filter_map(|l| what(l)).collect();
        for done in advice(&advised).iter().filter_map(|l| what(l)) {
            assert!(!again.contains(&done), "{followed_rel} still draws {done:?}: {again:?}");
        }
    }
}

/// A `map(from:)` array every kernel writes, peeked at with a partial `target update from`:
/// its copy back is needed and no advice says otherwise.
#[cfg_attr(omp_e2e, test)]
fn a_partial_update_does_not_make_a_mapping_in_sync() {
    let exe = build(Llvm::V22, "check/advice_partial.c", &[]);
    let o = run(&exe, &[CHECK]);
    assert!(o.status.success() && findings(&o).is_empty(), "{}", text(&o.stderr));
    assert_eq!(text(&o.stdout), "step 0: e[0]=1\nstep 1: e[0]=1\nstep 2: e[0]=1\ns=8390656\n");
    let back: Vec<String> =
        advice(&o).into_iter().filter(|l| l.contains("e[0:N]") || l.contains("copied back")).collect();
    assert!(back.is_empty(), "advice that would break the program:\n{}", back.join("\n"));
}

/// A table read at a few random places is read, though most of its pages are untouched; 80
/// bytes no kernel reads are said as 80 bytes, with the clause that sent them, in the
/// summary line of small advice.
#[cfg_attr(omp_e2e, test)]
fn never_read_means_no_byte_read_and_small_advice_is_one_line() {
    let exe = build(Llvm::V22, "check/advice_unread.c", &[]);
    let o = run(&exe, &[("LIBOMPTARGET_CHECK", "perf")]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let lines = advice(&o);
    assert!(!lines.iter().any(|l| l.contains("table")), "the table is read:\n{}", lines.join("\n"));
    assert_eq!(
        lines,
        [
            "omptarget advice: data movement that could be avoided (80 bytes in 1 place):",
            "omptarget advice:   and 1 smaller place (80 bytes in all; each under 1 MiB and under 1% of the run's \
             transfer time)"
        ],
        "{}",
        text(&o.stderr)
    );
}

/// Three arrays allocated once by one `enter data`, and 512 distinct sections each mapped
/// once, are not "allocated again and again", named or unnamed (built without -g).
#[cfg_attr(omp_e2e, test)]
fn distinct_mappings_are_never_merged() {
    for flags in [&[][..], &["-g0"][..]] {
        let exe = build(Llvm::V22, "check/advice_distinct.c", flags);
        let o = run(&exe, &[CHECK]);
        assert!(o.status.success() && findings(&o).is_empty(), "{flags:?}: {}", text(&o.stderr));
        let again: Vec<String> = advice(&o).into_iter().filter(|l| l.contains("again")).collect();
        assert!(again.is_empty(), "{flags:?}:\n{}", again.join("\n"));
    }
}

/// Correct programs of the classes that raised false alarms on a validation suite
/// (issue 20): silent under the checker, with the output and exit status of a run without
/// it, on both LLVMs.
#[cfg_attr(omp_e2e, test)]
fn validation_suite_patterns_are_silent() {
    for llvm in ALL {
        for rel in ["check/firstprivate.c", "check/delete.c", "check/scratch.c", "check/defaultmap.c"] {
            let exe = build(llvm, rel, &[]);
            let name = format!("{rel} ({})", llvm.major());
            let plain = run(&exe, &[]);
            assert!(plain.status.success(), "{name}: {}", text(&plain.stderr));
            for mode in ["1", "bugs"] {
                let checked = run(&exe, &[("LIBOMPTARGET_CHECK", mode)]);
                assert!(findings(&checked).is_empty(), "{name}: false alarm:\n{}", text(&checked.stderr));
                assert_eq!(checked.status.code(), plain.status.code(), "{name}: {}", text(&checked.stderr));
                assert_eq!(text(&checked.stdout), text(&plain.stdout), "{name}");
            }
        }
    }
}

/// A device pointer used after its mapping was deleted: the finding names that mapping and
/// the construct that ended it, not a neighbour.
#[cfg_attr(omp_e2e, test)]
fn a_use_after_unmap_names_the_mapping_and_where_it_ended() {
    let exe = build(Llvm::V22, "check/use_after_delete.c", &[]);
    let f = one_finding(&run(&exe, &[CHECK]), &["use after unmap", "`a[0:4096]`", "use_after_delete.c:12:1"]);
    assert!(!f.contains("`s`"), "{f}");
}

/// A kernel's own `raise(SIGSEGV)` / `raise(SIGBUS)` ends its construct on the isolated
/// device as on the host device (the device is lost; mandatory offload stops the program),
/// and the checker blames no mapping for it.
#[cfg_attr(omp_e2e, test)]
fn a_kernels_own_signal_ends_its_construct() {
    let exe = build(Llvm::V22, "check/raise.c", &[]);
    for arg in ["segv", "bus"] {
        let mut cmd = omp_e2e::program_command(&exe);
        cmd.arg(arg).env("LD_LIBRARY_PATH", dist_lib());
        let host = cmd.output().expect("run");
        assert!(!host.status.success() && !text(&host.stdout).contains("after"), "host device: {}", text(&host.stderr));
        for env in [("LIBOMPTARGET_ISOLATE", "1"), CHECK] {
            let o = cmd.env(env.0, env.1).output().expect("run");
            assert!(!o.status.success(), "{arg} {env:?}: exit {}", o.status);
            assert!(!text(&o.stdout).contains("after"), "{arg} {env:?}: {}", text(&o.stdout));
            assert!(text(&o.stderr).contains("was lost"), "{arg} {env:?}: {}", text(&o.stderr));
            assert!(findings(&o).is_empty(), "{arg} {env:?}: {}", text(&o.stderr));
        }
    }
}

/// A fault no mapping explains is said to be one, with the address and the nearest
/// mappings; no variable is guessed.
#[cfg_attr(omp_e2e, test)]
fn a_fault_nothing_explains_is_said_so_without_a_guessed_variable() {
    let exe = build(Llvm::V22, "check/unexplained.c", &[]);
    let f = one_finding(
        &run(&exe, &[CHECK]),
        &["unmapped access", "memory at 0x10000", "no mapping or pointer argument explains", "nearest mappings: `"],
    );
    assert!(!f.contains("map that data") && !f.contains("through `"), "{f}");
}

/// flang gives target regions no line: a kernel's error lines take the construct's place
/// from the kernel's name and the map names, as the finding does (not `unknown:0:0`).
#[cfg_attr(omp_e2e, test)]
fn kernel_errors_carry_the_place_the_finding_names() {
    let exe = build_fortran("check/bounds.f90");
    let o = run(&exe, &[CHECK]);
    one_finding(&o, &["out of bounds", "bounds.f90:9"]);
    let stderr = text(&o.stderr);
    let errors: Vec<&str> = stderr.lines().filter(|l| l.contains("__QQmain_l9 at ")).collect();
    assert!(errors.len() >= 3, "{stderr}");
    for l in errors {
        assert!(l.contains("__QQmain_l9 at bounds.f90:9") && !l.contains("unknown:0:0"), "{l}");
    }
}

/// The `omptarget check: note:` lines a run printed: what the checker stopped checking.
fn notes(o: &Output) -> Vec<String> {
    findings(o).into_iter().filter(|l| l.starts_with("omptarget check: note: ")).collect()
}

/// Exactly one note, which says what stopped being checked, why and how to lift it.
fn one_note(o: &Output, why: &str, lift: &str) {
    let n = notes(o);
    assert_eq!(n.len(), 1, "expected one note:\n{}", text(&o.stderr));
    for w in ["are not checked", why, lift] {
        assert!(n[0].contains(w), "note lacks {w:?}: {}", n[0]);
    }
}

/// A kernel that writes one double in every other page of a 300 MiB mapping (38,400 pages
/// watched one by one: up to 76,800 memory regions, more than vm.max_map_count's 65,530):
/// the program runs as without the checker, and one note says what went unwatched. A
/// later kernel is watched again.
#[cfg_attr(omp_e2e, test)]
fn a_sparse_kernel_over_a_large_mapping_never_kills_the_program_and_is_said_once() {
    let exe = build(Llvm::V22, "check/sparse.c", &[]);
    let plain = run(&exe, &[]);
    assert!(plain.status.success(), "{}", text(&plain.stderr));
    let o = run(&exe, &[CHECK]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert_eq!(text(&o.stdout), text(&plain.stdout));
    one_note(&o, "vm.max_map_count", "sysctl -w vm.max_map_count=");
    assert_eq!(findings(&o).len(), 1, "the note only:\n{}", text(&o.stderr));
    let mut cmd = omp_e2e::program_command(&exe);
    let later = cmd.arg("later").env("LD_LIBRARY_PATH", dist_lib()).env(CHECK.0, CHECK.1).output().expect("run");
    assert!(later.status.success(), "{}", text(&later.stderr));
    assert_eq!(notes(&later).len(), 1, "{}", text(&later.stderr));
    let f = findings(&later);
    assert!(f.iter().any(|l| l.contains("uninitialized device memory") && l.contains("`u[0:1024]`")), "{f:?}");
}

/// More live mappings than vm.max_map_count allows guard pages for: the checks that need
/// them stop, and a note says so once.
#[cfg_attr(omp_e2e, test)]
fn past_the_map_count_the_checker_says_what_it_stopped_checking() {
    let exe = build(Llvm::V22, "check/many_mappings.c", &[]);
    let plain = run(&exe, &[]);
    assert!(plain.status.success(), "{}", text(&plain.stderr));
    let o = run(&exe, &[("LIBOMPTARGET_CHECK", "bugs")]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert_eq!(text(&o.stdout), text(&plain.stdout));
    one_note(&o, "vm.max_map_count", "sysctl -w vm.max_map_count=");
    assert_eq!(findings(&o).len(), 1, "the note only:\n{}", text(&o.stderr));
}

/// Under an address-space limit below the machine's memory, device memory cannot be shared
/// with the worker: a note says which checks are off and how to lift the limit.
#[cfg_attr(omp_e2e, test)]
fn under_an_address_space_limit_the_checker_says_what_it_stopped_checking() {
    let exe = build(Llvm::V22, "check/correct.c", &[]);
    let meminfo = std::fs::read_to_string("/proc/meminfo").expect("/proc/meminfo");
    let total_kib: u64 = meminfo
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("MemTotal");
    let limit = (total_kib / 2).max(4 << 20);
    let o = Command::new("sh")
        .arg("-c")
        .arg(format!("ulimit -v {limit}; exec \"$0\"",))
        .arg(&exe)
        .env("LD_LIBRARY_PATH", dist_lib())
        .env(CHECK.0, CHECK.1)
        .output()
        .expect("run sh");
    assert!(o.status.success(), "{}", text(&o.stderr));
    one_note(&o, "ulimit -v", "ulimit -v unlimited");
    assert_eq!(findings(&o).len(), 1, "the note only:\n{}", text(&o.stderr));
}

/// `omp_target_alloc` memory is checked like mapped memory: a kernel that reads a block
/// nothing wrote, and a block never freed, are findings; correct uses are silent.
#[cfg_attr(omp_e2e, test)]
fn omp_target_alloc_memory_is_checked_for_uninitialized_reads_and_leaks() {
    let exe = build(Llvm::V22, "check/target_alloc.c", &[]);
    let plain = run(&exe, &[]);
    assert!(plain.status.success(), "{}", text(&plain.stderr));
    let o = run(&exe, &[CHECK]);
    assert!(o.status.success() && findings(&o).is_empty(), "false alarm:\n{}", text(&o.stderr));
    assert_eq!(text(&o.stdout), text(&plain.stdout));
    let with = |bug: &str| {
        let o =
            omp_e2e::program_command(&exe).arg(bug).env("LD_LIBRARY_PATH", dist_lib()).env(CHECK.0, CHECK.1).output();
        o.expect("run")
    };
    let uninit = with("uninit");
    one_finding(&uninit, &["uninitialized device memory", "read the omp_target_alloc memory at 0x", "target_alloc.c:"]);
    let leak = with("leak");
    one_finding(&leak, &["leak: the omp_target_alloc memory at 0x", "(32.0 KiB on device 0) is never freed"]);
}

/// A kernel that overflows its stack on the isolated device is said to, with the stack its
/// threads had, how to raise it and what a GPU allows: not an abort, not a host pointer, and
/// no mapping is blamed.
#[cfg_attr(omp_e2e, test)]
fn a_kernels_stack_overflow_says_so_with_its_stack_and_how_to_raise_it() {
    let exe = build(Llvm::V22, "check/stack_overflow.c", &[]);
    let cases: [(&[(&str, &str)], &str); 3] = [
        (&[("LIBOMPTARGET_ISOLATE", "1")], "had 4096 KiB of stack; raise it with OMP_STACKSIZE=8M;"),
        (&[CHECK], "had 4096 KiB of stack; raise it with OMP_STACKSIZE=8M;"),
        (
            &[("LIBOMPTARGET_ISOLATE", "1"), ("OMP_STACKSIZE", "1M")],
            "had 1024 KiB of stack; raise it with OMP_STACKSIZE=2M;",
        ),
    ];
    // The first thread of the kernel (the worker's), then threads libomp started.
    for ((env, stack), arg) in cases.iter().flat_map(|c| [(c, None), (c, Some("parallel"))]) {
        let (env, stack) = (*env, *stack);
        let mut cmd = omp_e2e::program_command(&exe);
        cmd.args(arg).env("LD_LIBRARY_PATH", dist_lib()).envs(env.iter().copied());
        let o = cmd.output().expect("run");
        let err = text(&o.stderr);
        assert!(!o.status.success() && !text(&o.stdout).contains("after"), "{env:?} {arg:?}: {err}");
        assert!(err.contains("stack overflow in the kernel (the kernel's threads"), "{env:?} {arg:?}: {err}");
        assert!(err.contains(stack) && err.contains("a GPU thread has about 1 KiB by default"), "{env:?}: {err}");
        assert!(
            !err.contains("abort()") && !err.contains("host pointer") && !err.contains("overflowed"),
            "{env:?}: {err}"
        );
        assert!(findings(&o).is_empty(), "{env:?}: {err}");
    }
}

/// The fix for an access past a section keeps the map type the program wrote (a read past
/// a `tofrom` section stays `tofrom`) and the section's rank. (clang names a C section by
/// its first subscript, `a[0:n]`: its fix `a[0:M]` maps M whole planes of the array.) A
/// Fortran array of explicit shape draws no word of flang's section bug, which only arrays
/// reached through a descriptor meet.
#[cfg_attr(omp_e2e, test)]
fn a_fix_keeps_the_map_type_and_the_sections_rank() {
    for llvm in ALL {
        let c = one_finding(
            &run(&build(llvm, "check/bounds_rank3.c", &[]), &[CHECK]),
            &["out of bounds", "read just past the end of `a[0:n]`", "`map(tofrom: a[0:M])`"],
        );
        assert!(!c.contains("map(to:"), "{c}");
    }
    let f = one_finding(
        &run(&build_fortran("check/bounds_rank3.f90"), &[CHECK]),
        &["out of bounds", "read just past the end of `a(1:16,1:16,1:16)`", "`map(tofrom: a(1:16,1:16,1:m))`"],
    );
    assert!(!f.contains("map(to:") && !f.contains("flang started this section"), "{f}");
}

/// A Fortran allocatable's finding gives its data's size, not its descriptor's.
#[cfg_attr(omp_e2e, test)]
fn a_fortran_allocatables_leak_is_the_size_of_its_data() {
    let o = run(&build_fortran("check/leak_allocatable.f90"), &[CHECK]);
    let f = one_finding(&o, &["leak", "`d`", "(32.0 KiB on device 0)", "leak_allocatable.f90:12", "map(release: d)"]);
    assert!(!f.contains("48 bytes"), "{f}");
    assert_eq!(text(&o.stdout), "s=4096.\n");
}

/// A mapping whose kernels read only its first half: the advice names the other half
/// (bytes, elements) and the smaller section; the program that maps only that section
/// prints the same and moves fewer bytes.
#[cfg_attr(omp_e2e, test)]
fn the_part_of_a_mapping_no_kernel_read_is_named_and_leaving_it_out_keeps_the_output() {
    let exe = build(Llvm::V22, "check/advice_part.c", &[]);
    let followed = build(Llvm::V22, "check/advice_part_followed.c", &[]);
    let o = run(&exe, &[("LIBOMPTARGET_CHECK", "perf")]);
    let part: Vec<String> = advice(&o).into_iter().filter(|l| l.contains("a[0:1048576]")).collect();
    assert_eq!(part.len(), 1, "{}", text(&o.stderr));
    for want in [
        "copied to the device, but no kernel read its last 4096.0 KiB (bytes 4194304..8388608 of 8388608, elements \
         524288..1048576)",
        "map only `map(to: a[0:524288])`",
    ] {
        assert!(part[0].contains(want), "{want:?} not in {}", part[0]);
    }
    let plain = run(&exe, &[]);
    for env in [&[][..], &[CHECK][..]] {
        let f = run(&followed, env);
        assert!(f.status.success() && findings(&f).is_empty(), "{}", text(&f.stderr));
        assert_eq!(text(&f.stdout), text(&plain.stdout));
    }
    let checked = run(&followed, &[("LIBOMPTARGET_CHECK", "perf")]);
    assert!(advice(&checked).iter().all(|l| !l.contains("a[0:")), "{}", text(&checked.stderr));
    assert!(bytes_moved(&followed) < bytes_moved(&exe));
}

/// Arrays the kernels read in part: a stencil's edge rows and a table read at a few random
/// places draw no advice to map them `alloc` or to leave a part out.
#[cfg_attr(omp_e2e, test)]
fn a_stencils_edges_and_a_tables_unread_pages_draw_no_advice() {
    for (rel, vars) in [("check/advice_stencil.c", &["in[", "out["][..]), ("check/advice_unread.c", &["table["][..])] {
        let exe = build(Llvm::V22, rel, &[]);
        let o = run(&exe, &[CHECK]);
        assert!(o.status.success() && findings(&o).is_empty(), "{rel}: {}", text(&o.stderr));
        assert_eq!(text(&o.stdout), text(&run(&exe, &[]).stdout), "{rel}");
        let about: Vec<String> = advice(&o).into_iter().filter(|l| vars.iter().any(|v| l.contains(v))).collect();
        assert!(about.is_empty(), "{rel}: advice on arrays the kernels read:\n{}", about.join("\n"));
    }
}
