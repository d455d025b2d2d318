//! Fortran `map` sections of allocatable, pointer and assumed-shape arrays that flang 19–22
//! start at the wrong element (issue 12, item 21; docs/ompcc.md, "Fortran array sections").
//! Programs under `tests/programs/fortran_sections/` print `<case>=<wrong elements>`:
//! * built by ompcc with flang 22 they run right, on our runtime (checker on) and on LLVM's;
//! * built as flang lowers them (`--fortran-section-check=off`) the checker reports the kernel's
//!   out-of-bounds write, so what ompcc corrects is a real defect, not a false alarm;
//! * flang 19 cannot be corrected: ompcc refuses them, naming each clause;
//! * sections that are not contiguous in memory are refused (a warning where the array's extents
//!   are not known) with the section that covers them;
//! * sections flang lowers right build without a word with both flang versions.

// Always compiled; run as tests once `make dist` has run, and always under CI (see build.rs).
#![cfg_attr(not(omp_e2e), allow(dead_code))]

use omp_e2e::{program, repo_root, run_with, scratch, Llvm};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn src(name: &str) -> PathBuf {
    program(&format!("fortran_sections/{name}.f90"))
}

/// Builds `name` with ompcc and `llvm`'s flang (plus `extra`) into `dir/name-<major>`.
fn build(dir: &Path, llvm: Llvm, name: &str, extra: &[&str]) -> (PathBuf, Output) {
    let ompcc = repo_root().join("dist/bin/ompcc");
    assert!(ompcc.exists(), "{} is missing: run `make dist` first", ompcc.display());
    let exe = dir.join(format!("{name}-{}", llvm.major()));
    let mut cmd = Command::new(ompcc);
    cmd.current_dir(dir).arg(format!("--clang={}", llvm.clang())).arg(format!("--flang={}", llvm.flang()));
    cmd.args(llvm.link_flags()).args(["-fopenmp", "-O1"]).args(extra).arg(src(name)).arg("-o").arg(&exe);
    (exe, cmd.output().expect("run ompcc"))
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// ompcc's own lines (flang's "OpenMP support … incomplete" warnings are not ours).
fn ompcc_lines(o: &Output) -> Vec<String> {
    text(&o.stderr).lines().filter(|l| l.starts_with("ompcc:")).map(str::to_string).collect()
}

/// Runs `exe` on `lib` with offloading mandatory; asserts success, no checker finding, and that
/// every `case=count` printed is 0; returns how many cases it printed.
fn all_right(exe: &Path, lib: &Path, env: &[(&str, &str)]) -> usize {
    let mut env = env.to_vec();
    env.push(("OMP_TARGET_OFFLOAD", "MANDATORY"));
    let o = run_with(exe, lib, &env);
    let (out, err) = (text(&o.stdout), text(&o.stderr));
    assert!(o.status.success(), "{} on {}: {}\n{out}\n{err}", exe.display(), lib.display(), o.status);
    assert!(!err.contains("omptarget check:"), "false alarm on {}:\n{err}", exe.display());
    let cases: Vec<(&str, &str)> = out.split_whitespace().filter_map(|w| w.split_once('=')).collect();
    assert!(cases.iter().all(|(_, n)| *n == "0"), "{} on {}: wrong elements:\n{out}", exe.display(), lib.display());
    cases.len()
}

fn ours() -> PathBuf {
    let d = repo_root().join("dist/lib");
    assert!(d.join("libomptarget.so.22.1").exists(), "run `make dist` first");
    d
}

#[cfg_attr(omp_e2e, test)]
fn flang22_sections_are_corrected_and_run_right_on_both_runtimes() {
    let dir = scratch("fsec-fix");
    let (exe, o) = build(&dir, Llvm::V22, "sections", &["-v"]);
    assert!(o.status.success(), "ompcc failed:\n{}", text(&o.stderr));
    let err = text(&o.stderr);
    assert!(ompcc_lines(&o).is_empty(), "a correct program got messages:\n{err}");
    // Under -v, each corrected clause is named, and the host is compiled from the corrected HLFIR.
    for place in ["sections.f90:19:", "sections.f90:42:", "sections.f90:56:", "sections.f90:73:"] {
        assert!(err.lines().any(|l| l.contains(place) && l.contains("corrected flang 22")), "{place}:\n{err}");
    }
    assert!(err.contains("-x mlir"), "{err}");
    // Five cases, the last (`lbound0`) corrected without a word: its subscript `1` is not the
    // lower bound of an array allocated from 0.
    assert_eq!(all_right(&exe, &ours(), &[("LIBOMPTARGET_CHECK", "bugs")]), 5);
    assert_eq!(all_right(&exe, &Llvm::V22.llvm_lib(), &[]), 5);
}

#[cfg_attr(omp_e2e, test)]
fn uncorrected_flang22_sections_write_out_of_bounds_and_the_checker_says_so() {
    let dir = scratch("fsec-off");
    let (exe, o) = build(&dir, Llvm::V22, "sections", &["--fortran-section-check=off"]);
    assert!(o.status.success() && ompcc_lines(&o).is_empty(), "{}", text(&o.stderr));
    let r = run_with(&exe, &ours(), &[("LIBOMPTARGET_CHECK", "1")]);
    let err = text(&r.stderr);
    assert!(!r.status.success(), "flang's own lowering ran to the end:\n{}\n{err}", text(&r.stdout));
    let finding =
        err.lines().find(|l| l.starts_with("omptarget check: out of bounds:")).unwrap_or_else(|| panic!("{err}"));
    assert!(finding.contains("`a(3:10,i,j)`") && finding.contains("past the end"), "{finding}");
    assert!(
        finding.contains("flang started this section at the wrong element") && finding.contains("ompcc"),
        "{finding}"
    );
}

#[cfg_attr(omp_e2e, test)]
fn flang19_sections_are_refused_naming_each_clause() {
    let dir = scratch("fsec-19");
    let (_, o) = build(&dir, Llvm::V19, "sections", &[]);
    assert!(!o.status.success(), "ompcc built what flang 19 maps wrongly:\n{}", text(&o.stderr));
    let errors = ompcc_lines(&o);
    let lines: Vec<&str> = ["19:25", "20:20", "42:20", "56:20", "71:31", "73:27", "77:30", "90:18"].to_vec();
    assert_eq!(errors.len(), lines.len(), "{errors:#?}");
    for (e, at) in errors.iter().zip(&lines) {
        assert!(e.starts_with("ompcc: error: ") && e.contains(&format!("sections.f90:{at}: `")), "{e}");
        assert!(e.contains("flang 19 takes a section's first element from its first subscript alone"), "{e}");
    }
    assert!(errors[0].contains("`a(3:10,i,j)`") && errors[0].contains("`map(from: a)`"), "{}", errors[0]);
    assert!(errors[3].contains("`map(tofrom: p)`"), "{}", errors[3]);

    // Built anyway, what flang 19 made writes out of bounds: the refusal was no false alarm.
    let (exe, o) = build(&dir, Llvm::V19, "sections", &["--fortran-section-check=warn"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert!(ompcc_lines(&o).iter().all(|l| l.starts_with("ompcc: warning: ")) && ompcc_lines(&o).len() == 8);
    let r = run_with(&exe, &ours(), &[("LIBOMPTARGET_CHECK", "1")]);
    assert!(text(&r.stderr).contains("omptarget check: out of bounds:"), "{}", text(&r.stderr));
}

#[cfg_attr(omp_e2e, test)]
fn sections_flang_lowers_right_build_silently() {
    let dir = scratch("fsec-ok");
    for llvm in [Llvm::V19, Llvm::V22] {
        let (exe, o) = build(&dir, llvm, "sections_ok", &[]);
        assert!(o.status.success() && ompcc_lines(&o).is_empty(), "flang {}:\n{}", llvm.major(), text(&o.stderr));
        assert_eq!(all_right(&exe, &ours(), &[("LIBOMPTARGET_CHECK", "bugs")]), 5);
    }
    // The rewrite ompcc suggests is right by itself: no correction needed, none made.
    let (exe, o) = build(&dir, Llvm::V22, "sections_ranges", &["-v"]);
    assert!(o.status.success() && ompcc_lines(&o).is_empty(), "{}", text(&o.stderr));
    assert!(!text(&o.stderr).contains("corrected flang"), "{}", text(&o.stderr));
    assert_eq!(all_right(&exe, &ours(), &[("LIBOMPTARGET_CHECK", "bugs")]), 2);
    assert_eq!(all_right(&exe, &Llvm::V22.llvm_lib(), &[]), 2);

    // The advisor keeps quiet about the descriptor copies flang adds to every construct (the
    // program cannot avoid them), and about the sections: each of the 30 distinct sections
    // is mapped once, not "allocated again and again" (the Fortran spelling of its fixes is
    // unit-tested in crates/check).
    let r = run_with(&exe, &ours(), &[("LIBOMPTARGET_CHECK", "1")]);
    let advice = text(&r.stderr);
    assert!(r.status.success(), "{advice}");
    for noise in ["already held the same bytes", "again with the same contents", "#pragma", "again and again"] {
        assert!(!advice.contains(noise), "{noise}:\n{advice}");
    }
}

#[cfg_attr(omp_e2e, test)]
fn a_section_flang_cannot_read_back_is_refused_with_the_rewrite() {
    // flang 22 prints HLFIR for an assumed-shape array in a target region that it cannot parse:
    // no correction is possible, so the clause is refused with the form flang lowers right.
    let dir = scratch("fsec-dummy");
    let ompcc = repo_root().join("dist/bin/ompcc");
    let o = Command::new(ompcc)
        .current_dir(&dir)
        .arg(format!("--flang={}", Llvm::V22.flang()))
        .args(["-fopenmp", "-c"])
        .arg(src("sections_dummy"))
        .args(["-o", "d.o"])
        .output()
        .expect("run ompcc");
    assert!(!o.status.success(), "{}", text(&o.stderr));
    let errors = ompcc_lines(&o);
    assert!(!errors.is_empty(), "{}", text(&o.stderr));
    for e in &errors {
        assert!(e.contains("sections_dummy.f90:6:") || e.contains("sections_dummy.f90:7:"), "{e}");
        assert!(e.contains("`y(2:9,i,j)` would map the wrong elements: flang 22"), "{e}");
        assert!(e.contains("Write it `y(2:9,i:i,j)`"), "{e}");
    }
    assert!(!dir.join("d.o").exists());
}

#[cfg_attr(omp_e2e, test)]
fn sections_that_are_not_contiguous_are_refused_with_the_covering_section() {
    let dir = scratch("fsec-nc");
    for llvm in [Llvm::V19, Llvm::V22] {
        let (_, o) = build(&dir, llvm, "noncontiguous", &[]);
        assert!(!o.status.success(), "flang {}: built:\n{}", llvm.major(), text(&o.stderr));
        let lines = ompcc_lines(&o);
        assert_eq!(lines.len(), 2, "{lines:#?}");
        // The allocatable's extents are not known (a row of one element would be contiguous):
        // a warning. The explicit-shape array's are: an error.
        let cases = [("warning", "12:", "b(2,1:3)", "b(:,1:3)"), ("error", "15:", "e(2,1:3)", "e(:,1:3)")];
        for (l, (kind, at, name, cover)) in lines.iter().zip(cases) {
            assert!(l.starts_with(&format!("ompcc: {kind}: ")), "{l}");
            assert!(l.contains(&format!("noncontiguous.f90:{at}")), "{l}");
            assert!(l.contains(&format!("`{name}` is not contiguous in memory")), "{l}");
            assert!(l.contains(&format!("covers it (`{cover}`)")), "{l}");
        }
    }
    // Built anyway, the device writes past what was mapped: no false alarm.
    let (exe, o) = build(&dir, Llvm::V22, "noncontiguous", &["--fortran-section-check=warn"]);
    assert!(o.status.success() && ompcc_lines(&o).len() == 2, "{}", text(&o.stderr));
    let r = run_with(&exe, &ours(), &[("LIBOMPTARGET_CHECK", "1")]);
    assert!(text(&r.stderr).contains("omptarget check: out of bounds:"), "{}", text(&r.stderr));
}
