//! End-to-end tests of ompcc's declare-target analysis (`--declare-target-report`, the errors
//! it gives instead of device-link failures or run-time crashes): C and Fortran programs under
//! `tests/programs/declare_target`, built with clang/flang 19 and 22 and run on our runtime.

// Always compiled; run as tests once `make dist` has run, and always under CI (see build.rs).
#![cfg_attr(not(omp_e2e), allow(dead_code))]

use omp_e2e::{program, repo_root, run_with, scratch, Llvm, ALL};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn ompcc() -> PathBuf {
    let p = repo_root().join("dist/bin/ompcc");
    assert!(p.exists(), "{} is missing: run `make dist` first", p.display());
    p
}

fn src(name: &str) -> String {
    program(&format!("declare_target/{name}")).display().to_string()
}

/// Runs ompcc in `dir` with `llvm`'s compilers, our runtime and `args`.
fn ompcc_in(dir: &Path, llvm: Llvm, args: &[&str]) -> Output {
    let mut cmd = Command::new(ompcc());
    cmd.current_dir(dir);
    cmd.arg(format!("--clang={}", llvm.clang())).arg(format!("--flang={}", llvm.flang()));
    cmd.arg(format!("--runtime-dir={}", repo_root().join("dist/lib").display()));
    cmd.args(llvm.link_flags());
    cmd.args(args);
    cmd.output().expect("run ompcc")
}

fn text(o: &Output) -> (String, String) {
    (String::from_utf8_lossy(&o.stdout).into_owned(), String::from_utf8_lossy(&o.stderr).into_owned())
}

fn must(o: &Output, what: &str) -> String {
    let (out, err) = text(o);
    assert!(o.status.success(), "{what} failed:\nstdout:\n{out}\nstderr:\n{err}");
    out
}

fn run(exe: &Path) -> String {
    let o = run_with(exe, &repo_root().join("dist/lib"), &[("OMP_TARGET_OFFLOAD", "MANDATORY")]);
    must(&o, &format!("running {}", exe.display()))
}

/// Runs a Fortran program, which needs the CPU device runtime `make dist` builds.
fn run_fortran(exe: &Path) -> String {
    let devicertl = repo_root().join("dist/lib/libomptarget.devicertl.a");
    assert!(devicertl.exists(), "{} is missing: run `make dist`", devicertl.display());
    run(exe)
}

/// The report line of a function: its columns after the name.
fn row<'a>(report: &'a str, name: &str) -> &'a str {
    report
        .lines()
        .find(|l| l.trim_start().starts_with(&format!("{name} ")))
        .unwrap_or_else(|| panic!("no row for {name} in:\n{report}"))
}

#[cfg_attr(omp_e2e, test)]
fn c_marks_chain_recursion_and_function_pointer() {
    for llvm in ALL {
        let dir = scratch(&format!("dt-marks-{}", llvm.major()));
        let o = ompcc_in(
            &dir,
            llvm,
            &["-fopenmp", "-fopenmp-offload-mandatory", "--declare-target-report", &src("marks.c"), "-o", "app"],
        );
        let report = must(&o, "ompcc marks.c");
        let words = |name: &str| row(&report, name).split_whitespace().skip(1).take(3).collect::<Vec<_>>().join(" ");
        assert_eq!(words("host_only"), "host to explicit");
        assert_eq!(words("any_fn"), "any to explicit");
        assert_eq!(words("nohost_fn"), "nohost to explicit");
        assert_eq!(words("linked"), "any link explicit");
        for f in ["top", "mid", "leaf", "rec_a", "rec_b", "apply", "add7"] {
            assert_eq!(words(f), "nohost to implicit", "{f}");
        }
        let leaf = row(&report, "leaf");
        assert!(
            leaf.contains("target region in main (")
                && leaf.contains("-> top (call at")
                && leaf.contains("-> mid (call at")
        );
        assert!(leaf.contains("marks.c:21)"), "leaf is called at line 21: {leaf}");
        assert!(row(&report, "add7").contains("address taken at"));
        assert!(report.contains("host only (not needed on the device):"));
        assert_eq!(run(&dir.join("app")).trim(), "chain=203 rec=22 ptr=8 any=12 link=5 host=2");
    }
}

#[cfg_attr(omp_e2e, test)]
fn c_host_only_function_reached_from_target_region_is_an_error() {
    for llvm in ALL {
        let dir = scratch(&format!("dt-hostonly-{}", llvm.major()));
        let o = ompcc_in(&dir, llvm, &["-fopenmp", "--declare-target-check", &src("host_only_called.c"), "-o", "app"]);
        let (_, err) = text(&o);
        assert!(!o.status.success());
        let line = err
            .lines()
            .find(|l| l.starts_with("ompcc: error:") && l.contains("'hostfn'"))
            .unwrap_or_else(|| panic!("{err}"));
        assert!(line.contains("host_only_called.c:3: 'hostfn' is device_type(host) (marked at"), "{line}");
        assert!(line.contains("host_only_called.c:2)"), "directive location: {line}");
        assert!(
            line.contains("target region in main (")
                && line.contains("-> mid (call at")
                && line.contains("-> hostfn (call at")
        );
        assert!(line.contains("host_only_called.c:6)"), "the call in mid: {line}");
        assert!(!err.contains("undefined reference"), "the analysis stops before the device link: {err}");
    }
}

#[cfg_attr(omp_e2e, test)]
fn c_callee_in_another_file() {
    for llvm in ALL {
        let dir = scratch(&format!("dt-xfile-{}", llvm.major()));
        let o = ompcc_in(
            &dir,
            llvm,
            &["-fopenmp", "--declare-target-report", &src("caller.c"), &src("callees.c"), "-o", "app"],
        );
        let report = must(&o, "ompcc caller.c callees.c");
        let r = row(&report, "ext_marked");
        assert!(r.contains("any") && r.contains("explicit") && r.contains("callees.c:3"), "{r}");
        assert_eq!(run(&dir.join("app")).trim(), "r=42");

        let o = ompcc_in(
            &dir,
            llvm,
            &["-fopenmp", "-DUSE_PLAIN", "--declare-target-check", &src("caller.c"), &src("callees.c"), "-o", "app2"],
        );
        let (_, err) = text(&o);
        assert!(!o.status.success());
        let line = err.lines().find(|l| l.contains("'ext_plain'")).unwrap_or_else(|| panic!("{err}"));
        assert!(
            line.starts_with("ompcc: error: ") && line.contains("callees.c:6: 'ext_plain' is called from device code"),
            "{line}"
        );
        assert!(line.contains("callees.c does not compile it for the device"), "{line}");
        assert!(line.contains("add '#pragma omp declare target'") && line.contains("caller.c:"), "{line}");

        // Compiled one file at a time: the call is deferred to the link.
        let o = ompcc_in(
            &dir,
            llvm,
            &["-fopenmp", "-DUSE_PLAIN", "--declare-target-report", "-c", &src("caller.c"), "-o", "caller.o"],
        );
        let report = must(&o, "ompcc -c caller.c");
        assert!(row(&report, "ext_plain").contains("implicit, deferred"), "{report}");
        assert!(report.contains("note: ") && report.contains("resolved at link"), "{report}");
    }
}

/// `ompcc -c` keeps each file's facts in its object: the link finds the same cross-file error
/// as one command given both sources, from objects and from a static archive, and the good
/// program links and runs.
#[cfg_attr(omp_e2e, test)]
fn c_callee_in_another_file_compiled_separately() {
    for llvm in ALL {
        let dir = scratch(&format!("dt-sep-{}", llvm.major()));
        let cc = |args: &[&str], what: &str| must(&ompcc_in(&dir, llvm, args), what);
        let check = "--declare-target-check";
        cc(&["-fopenmp", "-DUSE_PLAIN", check, "-c", &src("caller.c"), "-o", "caller_plain.o"], "ompcc -c caller.c");
        cc(&["-fopenmp", check, "-c", &src("caller.c"), "-o", "caller.o"], "ompcc -c caller.c");
        cc(&["-fopenmp", check, "-c", &src("callees.c"), "-o", "callees.o"], "ompcc -c callees.c");

        // The error of the single-command build, word for word.
        let one =
            ompcc_in(&dir, llvm, &["-fopenmp", "-DUSE_PLAIN", check, &src("caller.c"), &src("callees.c"), "-o", "x"]);
        let (_, one_err) = text(&one);
        let expected = one_err.lines().find(|l| l.contains("'ext_plain'")).unwrap_or_else(|| panic!("{one_err}"));
        let sep = ompcc_in(&dir, llvm, &["-fopenmp", check, "caller_plain.o", "callees.o", "-o", "app_bad"]);
        let (_, err) = text(&sep);
        assert!(!sep.status.success(), "{err}");
        let line = err.lines().find(|l| l.contains("'ext_plain'")).unwrap_or_else(|| panic!("{err}"));
        assert_eq!(line, expected);
        assert!(line.contains("callees.c:6: 'ext_plain' is called from device code"), "{line}");
        assert!(!err.contains("undefined reference"), "the analysis stops before the device link: {err}");

        // The callee in a static archive member.
        let ar = Command::new("ar").current_dir(&dir).args(["rcs", "libcallees.a", "callees.o"]).output();
        let ar = ar.expect("run llvm-ar");
        assert!(ar.status.success(), "{}", text(&ar).1);
        let o = ompcc_in(&dir, llvm, &["-fopenmp", check, "caller_plain.o", "-L.", "-lcallees", "-o", "app_bad2"]);
        let (_, err) = text(&o);
        assert!(!o.status.success(), "{err}");
        assert_eq!(err.lines().find(|l| l.contains("'ext_plain'")), Some(expected));

        // Without the analysis the objects link as before (and the device link finds the gap).
        let o = ompcc_in(&dir, llvm, &["-fopenmp", "caller_plain.o", "callees.o", "-o", "app_off"]);
        assert!(!o.status.success() && text(&o).1.contains("undefined reference"), "{}", text(&o).1);

        // The good program: the report resolves ext_marked to callees.c, and it runs.
        let report = cc(&["-fopenmp", "--declare-target-report", "caller.o", "callees.o", "-o", "app"], "link");
        let r = row(&report, "ext_marked");
        assert!(r.contains("any") && r.contains("explicit") && r.contains("callees.c:3"), "{r}");
        assert!(!report.contains("deferred"), "{report}");
        assert_eq!(run(&dir.join("app")).trim(), "r=42");
    }
}

#[cfg_attr(omp_e2e, test)]
fn fortran_module_function_chain_and_merge() {
    for llvm in ALL {
        let dir = scratch(&format!("dt-fmod-{}", llvm.major()));
        let o = ompcc_in(
            &dir,
            llvm,
            &["-fopenmp", "-fopenmp-version=52", "--declare-target-report", &src("modfunc.f90"), "-o", "app"],
        );
        let report = must(&o, "ompcc modfunc.f90");
        let (_, err) = text(&o);
        let words = |name: &str| row(&report, name).split_whitespace().skip(1).take(3).collect::<Vec<_>>().join(" ");
        assert_eq!(words("funcs::sq3"), "nohost to implicit");
        assert_eq!(words("top"), "nohost to implicit");
        assert_eq!(words("leaf"), "nohost to implicit");
        assert!(row(&report, "leaf").contains("-> top (call at") && row(&report, "leaf").contains("-> mid (call at"));
        assert_eq!(words("twice"), "any enter explicit");
        assert!(
            err.contains("ompcc: warning: ")
                && err.contains("'twice' is marked device_type(host) at")
                && err.contains("merged to device_type(any)"),
            "{err}"
        );
        assert_eq!(run_fortran(&dir.join("app")).trim(), "r=52 s=203 t=42");
    }
}

#[cfg_attr(omp_e2e, test)]
fn fortran_function_pointer_into_target_region() {
    for llvm in ALL {
        let dir = scratch(&format!("dt-fptr-{}", llvm.major()));
        let o = ompcc_in(&dir, llvm, &["-fopenmp", "--declare-target-check", &src("funptr.f90"), "-o", "bad"]);
        let (_, err) = text(&o);
        assert!(!o.status.success(), "flang would build a program that crashes: {err}");
        let line = err.lines().find(|l| l.contains("address of 'cb'")).unwrap_or_else(|| panic!("{err}"));
        assert!(line.starts_with("ompcc: error: ") && line.contains("funptr.f90:3:"), "{line}");
        assert!(line.contains("address becomes undef") && line.contains("cb (address taken at"), "{line}");
        assert!(line.contains("add '!$omp declare target' to the specification part of 'cb'"), "{line}");

        let o = ompcc_in(
            &dir,
            llvm,
            &["-fopenmp", "-cpp", "-DMARK", "--declare-target-report", &src("funptr.f90"), "-o", "good"],
        );
        let report = must(&o, "ompcc -DMARK funptr.f90");
        assert!(row(&report, "cb").contains("explicit"), "{report}");
        assert!(row(&report, "apply").contains("explicit"), "{report}");
        assert_eq!(run_fortran(&dir.join("good")).trim(), "x=111");
    }
}

#[cfg_attr(omp_e2e, test)]
fn analysis_is_off_by_default() {
    let dir = scratch("dt-off");
    let o = ompcc_in(&dir, Llvm::V22, &["-fopenmp", "-###", &src("host_only_called.c"), "-o", "app"]);
    let (_, err) = text(&o);
    assert!(!err.contains("-ast-dump"), "{err}");
    let o = ompcc_in(
        &dir,
        Llvm::V22,
        &["-fopenmp", "--declare-target-check", "-###", &src("host_only_called.c"), "-o", "app"],
    );
    assert!(text(&o).1.contains("-ast-dump"));
}
