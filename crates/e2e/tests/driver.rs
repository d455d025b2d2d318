//! End-to-end tests of `ompcc`, the fat-binary driver: real C, C++ and Fortran programs built
//! with it (and mixed with clang's own driver) run on LLVM's libomptarget 19 and 22, and on
//! ours.

// Always compiled; run as tests once `make dist` has run, and always under CI (see build.rs).
#![cfg_attr(not(omp_e2e), allow(dead_code))]

use omp_e2e::{program, repo_root, run_with, scratch, Llvm, ALL};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

const HOST: &str = "x86_64-pc-linux-gnu";

fn ompcc() -> PathBuf {
    let p = repo_root().join("dist/bin/ompcc");
    assert!(p.exists(), "{} is missing: run `make dist` first", p.display());
    p
}

fn driver(rel: &str) -> PathBuf {
    program(&format!("driver/{rel}"))
}

/// Runs ompcc in `dir` with `--clang`/`--flang` of `llvm` and its include/link flags.
fn ompcc_in(dir: &Path, llvm: Llvm, args: &[&str]) -> Output {
    let mut cmd = Command::new(ompcc());
    cmd.current_dir(dir);
    cmd.arg(format!("--clang={}", llvm.clang())).arg(format!("--flang={}", llvm.flang()));
    cmd.args(llvm.link_flags());
    cmd.args(args);
    cmd.output().expect("run ompcc")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn must(o: Output, what: &str) -> Output {
    assert!(
        o.status.success(),
        "{what} failed:\nstdout:\n{}\nstderr:\n{}",
        String::from_utf8_lossy(&o.stdout),
        stderr(&o)
    );
    o
}

/// Runs `exe` on `lib` with offloading mandatory, returning stdout.
fn run_on(exe: &Path, lib: &Path) -> String {
    let o = run_with(exe, lib, &[("OMP_TARGET_OFFLOAD", "MANDATORY")]);
    let o = must(o, &format!("running {} on {}", exe.display(), lib.display()));
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn has_devicertl() -> bool {
    repo_root().join("dist/lib/libomptarget.devicertl.a").exists()
}

/// Builds `src` with ompcc and with clang's own driver; both must print `expect` on LLVM's
/// runtime of that version, and on ours.
fn same_as_clang(name: &str, src: &str, expect: &str) {
    for llvm in ALL {
        let dir = scratch(&format!("driver-{name}-{}", llvm.major()));
        let srcp = driver(src);
        let exe = dir.join("app");
        must(ompcc_in(&dir, llvm, &["-fopenmp", "-O1", "-g", srcp.to_str().unwrap(), "-o", "app"]), "ompcc build");
        let ref_exe = dir.join("ref");
        omp_e2e::compile(llvm, &[&srcp], &ref_exe, &[]);
        let got = run_on(&exe, &llvm.llvm_lib());
        assert!(got.contains(expect), "{name} with LLVM {}: got {got:?}", llvm.major());
        assert_eq!(got, run_on(&ref_exe, &llvm.llvm_lib()), "ompcc and clang differ ({name}, LLVM {})", llvm.major());
        let ours = omp_e2e::dist_lib();
        assert_eq!(run_on(&exe, &ours), got, "{name}: our runtime differs from LLVM {}'s", llvm.major());
    }
}

#[cfg_attr(omp_e2e, test)]
fn c_program_runs_like_clangs() {
    same_as_clang("c", "saxpy.c", "saxpy sum=100000000 on_device=1");
}

#[cfg_attr(omp_e2e, test)]
fn cxx_program_runs_like_clangs() {
    same_as_clang("cxx", "vector_sum.cpp", "vector_sum s=3000.0 on_device=1");
}

#[cfg_attr(omp_e2e, test)]
fn fortran_program() {
    for llvm in ALL {
        let dir = scratch(&format!("driver-fortran-{}", llvm.major()));
        let src = driver("doubles.f90");
        let o = ompcc_in(&dir, llvm, &["-fopenmp", src.to_str().unwrap(), "-o", "app"]);
        if has_devicertl() {
            must(o, "ompcc Fortran build");
            let got = run_on(&dir.join("app"), &llvm.llvm_lib());
            assert_eq!(got.trim(), "doubles sum=10100");
        } else {
            // Without the CPU device runtime the device link cannot resolve flang's calls.
            assert!(!o.status.success());
            let err = stderr(&o);
            assert!(err.contains("ompcc: error: device link for offload target x86_64-pc-linux-gnu failed"), "{err}");
        }
    }
}

#[cfg_attr(omp_e2e, test)]
fn objects_mix_with_clangs_driver() {
    for llvm in ALL {
        let dir = scratch(&format!("driver-mixed-{}", llvm.major()));
        let main_c = driver("make/main.c");
        let sum_c = driver("make/sum.c");
        let scale_c = driver("make/scale.c");
        // clang -c objects linked by ompcc.
        let mut clang = Command::new(llvm.clang());
        clang.current_dir(&dir).args(["-fopenmp", &format!("-fopenmp-targets={HOST}"), "-c"]);
        clang.args(llvm.link_flags()).arg(&sum_c).arg(&scale_c);
        must(clang.output().unwrap(), "clang -c");
        must(
            ompcc_in(&dir, llvm, &["-fopenmp", main_c.to_str().unwrap(), "sum.o", "scale.o", "-o", "a1"]),
            "ompcc link",
        );
        let expect = "make project: sum=499500 scaled=14850\n";
        assert_eq!(run_on(&dir.join("a1"), &llvm.llvm_lib()), expect);
        // ompcc -c objects linked by clang.
        must(ompcc_in(&dir, llvm, &["-fopenmp", "-c", sum_c.to_str().unwrap(), scale_c.to_str().unwrap()]), "ompcc -c");
        let mut link = Command::new(llvm.clang());
        link.current_dir(&dir).args(["-fopenmp", &format!("-fopenmp-targets={HOST}")]);
        link.args(llvm.link_flags()).arg(&main_c).args(["sum.o", "scale.o", "-o", "a2"]);
        must(link.output().unwrap(), "clang link of ompcc objects");
        assert_eq!(run_on(&dir.join("a2"), &llvm.llvm_lib()), expect);
    }
}

#[cfg_attr(omp_e2e, test)]
fn static_library_of_offload_objects() {
    let llvm = Llvm::V22;
    let dir = scratch("driver-archive");
    let src = |f: &str| driver(&format!("make/{f}")).to_string_lossy().into_owned();
    must(ompcc_in(&dir, llvm, &["-fopenmp", "-O2", "-c", &src("sum.c"), &src("scale.c")]), "ompcc -c");
    must(Command::new("ar").current_dir(&dir).args(["rcs", "libwork.a", "sum.o", "scale.o"]).output().unwrap(), "ar");
    must(ompcc_in(&dir, llvm, &["-fopenmp", &src("main.c"), "-L.", "-lwork", "-o", "app"]), "link with -lwork");
    assert_eq!(run_on(&dir.join("app"), &llvm.llvm_lib()), "make project: sum=499500 scaled=14850\n");
    // The archive lists its members' images; the program holds one linked library.
    let list =
        must(Command::new(ompcc()).current_dir(&dir).args(["--offload-list", "libwork.a"]).output().unwrap(), "list");
    let text = String::from_utf8_lossy(&list.stdout);
    assert!(text.contains("libwork.a(sum.o): image 0: triple=x86_64-pc-linux-gnu"), "{text}");
    assert!(text.contains("libwork.a(scale.o)"), "{text}");
}

#[cfg_attr(omp_e2e, test)]
fn make_project_with_cc_ompcc() {
    let dir = scratch("driver-make");
    let src = driver("make");
    for f in ["Makefile", "main.c", "sum.c", "scale.c", "work.h"] {
        std::fs::copy(src.join(f), dir.join(f)).unwrap();
    }
    let o = Command::new("make").current_dir(&dir).arg(format!("CC={}", ompcc().display())).output().unwrap();
    must(o, "make CC=ompcc");
    let lib = Llvm::V22.llvm_lib();
    assert_eq!(run_on(&dir.join("app"), &lib), "make project: sum=499500 scaled=14850\n");
}

#[cfg_attr(omp_e2e, test)]
fn cmake_project_with_ompcc() {
    if Command::new("cmake").arg("--version").output().is_err() {
        omp_e2e::skip_without("cmake_project_with_ompcc", "cmake is not installed (scripts/setup.sh installs it)");
        return;
    }
    let dir = scratch("driver-cmake");
    let src = driver("cmake");
    let o = Command::new("cmake")
        .current_dir(&dir)
        .arg(format!("-DCMAKE_C_COMPILER={}", ompcc().display()))
        .arg("-S")
        .arg(&src)
        .arg("-B")
        .arg(&dir)
        .output()
        .unwrap();
    must(o, "cmake configure");
    must(Command::new("cmake").current_dir(&dir).args(["--build", "."]).output().unwrap(), "cmake --build");
    assert_eq!(run_on(&dir.join("app"), &Llvm::V22.llvm_lib()), "make project: sum=499500 scaled=14850\n");
}

#[cfg_attr(omp_e2e, test)]
fn dry_run_prints_one_pipeline_per_target_with_its_own_options() {
    let dir = scratch("driver-dry-run");
    let src = driver("saxpy.c");
    let o = ompcc_in(
        &dir,
        Llvm::V22,
        &[
            "-fopenmp",
            "-O2",
            "-DCOMMON",
            "--target-offload=x86_64-pc-linux-gnu",
            "-DONLY_X86",
            "--target-offload=nvptx64-nvidia-cuda",
            "-march=sm_80",
            "-DONLY_NVPTX",
            "--host",
            "-DHOST_TOO",
            src.to_str().unwrap(),
            "-o",
            "app",
            "-###",
        ],
    );
    let err = stderr(&must(o, "ompcc -###"));
    assert!(!dir.join("app").exists(), "-### must not run anything");
    let lines: Vec<&str> = err.lines().collect();
    let pipeline = |t: &str| lines.iter().filter(|l| l.contains(&format!("pipeline for offload target {t}"))).count();
    assert_eq!(pipeline("x86_64-pc-linux-gnu"), 2, "compile + link pipelines for x86_64:\n{err}");
    assert_eq!(pipeline("nvptx64-nvidia-cuda"), 2, "compile + link pipelines for nvptx64:\n{err}");
    let x86 = lines.iter().find(|l| l.contains("--target=x86_64-pc-linux-gnu") && l.contains(" -c ")).unwrap();
    let ptx = lines.iter().find(|l| l.contains("--target=nvptx64-nvidia-cuda") && l.contains(" -c ")).unwrap();
    assert!(x86.contains("-DONLY_X86") && !x86.contains("-DONLY_NVPTX") && x86.contains("-DCOMMON"), "{x86}");
    // Options after --host are the host's alone.
    assert!(!x86.contains("-DHOST_TOO") && !ptx.contains("-DHOST_TOO"), "host-only option on a device:\n{err}");
    assert!(ptx.contains("-DONLY_NVPTX") && ptx.contains("-march=sm_80") && !ptx.contains("-DONLY_X86"), "{ptx}");
    let host = lines.iter().find(|l| l.contains("--offload-host-only") && l.contains("-emit-llvm")).unwrap();
    assert!(!host.contains("ONLY_"), "group options leaked to the host: {host}");
    assert!(host.contains("-DHOST_TOO") && host.contains("-DCOMMON"), "{host}");
    assert!(host.contains("-fopenmp-targets=x86_64-pc-linux-gnu,nvptx64-nvidia-cuda"), "{host}");
}

#[cfg_attr(omp_e2e, test)]
fn clang_style_target_options() {
    let dir = scratch("driver-xopenmp");
    let src = driver("device_only_error.c");
    let o = ompcc_in(
        &dir,
        Llvm::V22,
        &[
            "-fopenmp",
            "-fopenmp-targets=x86_64-pc-linux-gnu",
            "-Xopenmp-target",
            "-DDEVICE_BREAK",
            src.to_str().unwrap(),
            "-###",
        ],
    );
    let err = stderr(&must(o, "ompcc -###"));
    let dev = err.lines().find(|l| l.contains("--target=x86_64") && l.contains(" -c ")).unwrap();
    assert!(dev.contains("-DDEVICE_BREAK"), "{dev}");
    let host = err.lines().find(|l| l.contains("-emit-llvm")).unwrap();
    assert!(!host.contains("-DDEVICE_BREAK"), "{host}");
}

#[cfg_attr(omp_e2e, test)]
fn source_failing_only_for_the_device_names_the_target() {
    let dir = scratch("driver-device-error");
    let src = driver("device_only_error.c");
    let s = src.to_str().unwrap();
    must(ompcc_in(&dir, Llvm::V22, &["-fopenmp", s, "-o", "ok"]), "the host-and-device build");
    // A link, -c and (issue 24 item 5) -fsyntax-only name the target alike.
    for mode in [&["-o", "bad"][..], &["-c", "-o", "bad.o"], &["-fsyntax-only"]] {
        let mut args = vec!["-fopenmp", "--target-offload=x86_64-pc-linux-gnu", "-DDEVICE_BREAK", "--host", s];
        args.extend_from_slice(mode);
        let o = ompcc_in(&dir, Llvm::V22, &args);
        assert!(!o.status.success(), "{mode:?}");
        let err = stderr(&o);
        let last = err.lines().last().unwrap_or_default();
        assert!(
            last.contains("ompcc: error:") && last.contains("compile for offload target x86_64-pc-linux-gnu failed"),
            "{mode:?}: {err}"
        );
        assert_eq!(err.matches("error: use of undeclared identifier 'no_such_variable'").count(), 1, "{mode:?}: {err}");
    }
    // An error both compiles see is the host's, said once, as -c says it.
    std::fs::write(dir.join("both.c"), "int main(void) { return nope; }\n").unwrap();
    for mode in ["-c", "-fsyntax-only"] {
        let o = ompcc_in(&dir, Llvm::V22, &["-fopenmp", mode, "both.c"]);
        let err = stderr(&o);
        assert_eq!(
            err.lines().last(),
            Some("ompcc: error: both.c: host compile failed (exit code 1)"),
            "{mode}: {err}"
        );
        assert_eq!(err.matches("undeclared identifier 'nope'").count(), 1, "{mode}: {err}");
    }
}

/// Issue 24 item 2: ompcc whose stderr cannot be written (`2>/dev/full`, a reader that went
/// away as in `2>&1 | head -1`) ends with status 1, never with a panic (101).
#[cfg_attr(omp_e2e, test)]
fn an_unwritable_stderr_is_status_1_not_a_panic() {
    use std::os::unix::process::ExitStatusExt;
    let dir = scratch("driver-unwritable-stderr");
    let src = driver("saxpy.c");
    let s = src.to_str().unwrap();
    let clang = format!("--clang={}", Llvm::V22.clang());
    let full = || Stdio::from(std::fs::OpenOptions::new().write(true).open("/dev/full").unwrap());
    // The write end of a pipe whose reader has exited: every write fails (EPIPE).
    let closed_pipe = || {
        let mut reader = Command::new("true").stdin(Stdio::piped()).spawn().unwrap();
        let w = reader.stdin.take().unwrap();
        reader.wait().unwrap();
        Stdio::from(w)
    };
    let cases: [(&str, Vec<&str>); 3] = [
        ("an error", vec!["--clang=/nonexistent", "-fopenmp", s]),
        ("-###", vec![&clang, "-###", "-fopenmp", s, "-o", "app"]),
        ("--offload-list of a missing file", vec!["--offload-list", "missing.o"]),
    ];
    for (what, args) in &cases {
        for (sink, make) in [("/dev/full", &full as &dyn Fn() -> Stdio), ("a closed pipe", &closed_pipe)] {
            let status =
                Command::new(ompcc()).current_dir(&dir).args(args).stdout(make()).stderr(make()).status().unwrap();
            assert!(
                status.code() == Some(1) || status.signal() == Some(libc::SIGPIPE),
                "{what}, stderr to {sink}: {status}"
            );
        }
    }
    // The same -### with a writable stderr succeeds: status 1 above came from the stderr alone.
    must(Command::new(ompcc()).current_dir(&dir).args(&cases[1].1).output().unwrap(), "ompcc -###");
    assert!(!dir.join("app").exists());
}

#[cfg_attr(omp_e2e, test)]
fn bad_requests_give_one_clear_line() {
    let dir = scratch("driver-bad-requests");
    let src = driver("saxpy.c");
    let s = src.to_str().unwrap();
    let o = ompcc_in(&dir, Llvm::V22, &["-fopenmp", "--target-offload=sparc-sun-solaris", s]);
    assert!(!o.status.success());
    assert_eq!(
        stderr(&o).trim(),
        "ompcc: error: unsupported offload target 'sparc-sun-solaris' (supported: x86_64-pc-linux-gnu, nvptx64-nvidia-cuda, amdgcn-amd-amdhsa)"
    );
    let o = Command::new(ompcc()).current_dir(&dir).args(["--clang=/nonexistent", "-fopenmp", s]).output().unwrap();
    assert!(!o.status.success());
    let err = stderr(&o);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.starts_with("ompcc: error: clang '/nonexistent' not found: install clang-22"), "{err}");
}

#[cfg_attr(omp_e2e, test)]
fn corrupt_bundled_object_is_reported() {
    let dir = scratch("driver-corrupt");
    let src = driver("make/sum.c");
    must(ompcc_in(&dir, Llvm::V22, &["-fopenmp", "-c", src.to_str().unwrap(), "-o", "good.o"]), "ompcc -c");
    // Same object, but the OffloadBinary's size field points past the section.
    let garbage: Vec<u8> = [&[0x10, 0xFF, 0x10, 0xAD, 1, 0, 0, 0][..], &[0xFF; 24]].concat();
    std::fs::write(dir.join("garbage.bin"), garbage).unwrap();
    let objcopy = "/usr/lib/llvm-22/bin/llvm-objcopy";
    let o = Command::new(objcopy)
        .current_dir(&dir)
        .args(["--remove-section=.llvm.offloading", "--add-section=.llvm.offloading=garbage.bin", "good.o", "bad.o"])
        .output()
        .unwrap();
    must(o, "llvm-objcopy");
    let main_c = driver("make/main.c");
    for args in [vec!["--offload-list", "bad.o"], vec![main_c.to_str().unwrap(), "bad.o", "-o", "app"]] {
        let o = ompcc_in(&dir, Llvm::V22, &args);
        assert!(!o.status.success());
        let err = stderr(&o);
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.starts_with("ompcc: error: bad.o: corrupt .llvm.offloading section: OffloadBinary size"), "{err}");
    }
    let o = ompcc_in(&dir, Llvm::V22, &["--offload-list", "garbage.bin"]);
    assert!(stderr(&o).starts_with("ompcc: error: garbage.bin: corrupt OffloadBinary"), "{}", stderr(&o));
}

#[cfg_attr(omp_e2e, test)]
fn offload_list_and_extract_read_ours_and_clangs() {
    let llvm = Llvm::V22;
    let dir = scratch("driver-inspect");
    let src = driver("saxpy.c");
    must(ompcc_in(&dir, llvm, &["-fopenmp", src.to_str().unwrap(), "-o", "ours"]), "ompcc build");
    omp_e2e::compile(llvm, &[&src], &dir.join("clangs"), &[]);
    for exe in ["ours", "clangs"] {
        let o = must(Command::new(ompcc()).current_dir(&dir).args(["--offload-list", exe]).output().unwrap(), "list");
        let text = String::from_utf8_lossy(&o.stdout).into_owned();
        assert_eq!(text.lines().count(), 1, "{text}");
        assert!(text.starts_with(&format!("{exe}: image 0: triple=x86_64-pc-linux-gnu")), "{text}");
        assert!(text.contains("kind=openmp") && text.contains("producer=\"Debian clang version 22"), "{text}");
        let out = dir.join(format!("x-{exe}"));
        let o =
            Command::new(ompcc()).current_dir(&dir).args(["--offload-extract", exe, "-o"]).arg(&out).output().unwrap();
        let o = must(o, "extract");
        let file = String::from_utf8_lossy(&o.stdout).trim().to_string();
        assert!(file.ends_with(".so"), "{file}");
        let bytes = std::fs::read(&file).unwrap();
        assert_eq!(&bytes[..4], b"\x7fELF");
        assert_eq!(u16::from_le_bytes([bytes[16], bytes[17]]), 3, "a shared library (ET_DYN)");
    }
}

#[cfg_attr(omp_e2e, test)]
fn cxx_objects_link_without_naming_the_language() {
    let llvm = Llvm::V22;
    let dir = scratch("driver-cxx-objects");
    let src = driver("vector_sum.cpp");
    must(ompcc_in(&dir, llvm, &["-fopenmp", "-c", src.to_str().unwrap(), "-o", "v.o"]), "ompcc -c");
    must(ompcc_in(&dir, llvm, &["v.o", "-o", "app"]), "ompcc link of C++ objects");
    assert_eq!(run_on(&dir.join("app"), &llvm.llvm_lib()), "vector_sum s=3000.0 on_device=1\n");
}
