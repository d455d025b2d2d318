//! `ompcc` with every input and option a build system hands a C compiler: assembly and LLVM IR,
//! `-fsyntax-only`, dependency files, a host `--target=`, triple spellings, Fortran modules.
//! Real programs built with clang/flang 22 (and compared with clang's own driver where it has
//! an answer).

// Always compiled; run as tests once `make dist` has run, and always under CI (see build.rs).
#![cfg_attr(not(omp_e2e), allow(dead_code))]

use omp_e2e::{program, repo_root, run_with, scratch, Llvm};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const HOST: &str = "x86_64-pc-linux-gnu";
const LLVM: Llvm = Llvm::V22;

fn ompcc() -> PathBuf {
    let p = repo_root().join("dist/bin/ompcc");
    assert!(p.exists(), "{} is missing: run `make dist` first", p.display());
    p
}

fn ompcc_in(dir: &Path, args: &[&str]) -> Output {
    let mut cmd = Command::new(ompcc());
    cmd.current_dir(dir).arg(format!("--clang={}", LLVM.clang())).arg(format!("--flang={}", LLVM.flang()));
    cmd.args(LLVM.link_flags()).args(args);
    cmd.output().expect("run ompcc")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn must(o: Output, what: &str) -> Output {
    assert!(o.status.success(), "{what} failed:\nstdout:\n{}\nstderr:\n{}", text(&o.stdout), text(&o.stderr));
    o
}

fn clang_in(dir: &Path, args: &[&str]) -> Output {
    Command::new(LLVM.clang()).current_dir(dir).args(LLVM.link_flags()).args(args).output().expect("run clang")
}

/// Runs `exe` on LLVM 22's runtime with offloading mandatory.
fn run(exe: &Path) -> String {
    let o = run_with(exe, &LLVM.llvm_lib(), &[("OMP_TARGET_OFFLOAD", "MANDATORY")]);
    text(&must(o, &format!("running {}", exe.display())).stdout)
}

fn src(rel: &str) -> String {
    program(&format!("driver/{rel}")).to_string_lossy().into_owned()
}

const SAXPY: &str = "saxpy sum=100000000 on_device=1";

#[cfg_attr(omp_e2e, test)]
fn assembly_and_ir_inputs_compile_to_objects() {
    let dir = scratch("inputs-asm-ir");
    std::fs::write(dir.join("f.c"), "int f(void) { return VALUE; }\n").unwrap();
    must(clang_in(&dir, &["-DVALUE=1", "-S", "f.c", "-o", "f.s"]), "clang -S");
    std::fs::copy(dir.join("f.s"), dir.join("g.S")).unwrap();
    std::fs::write(dir.join("h.S"), "#ifndef SYM\n#error SYM not defined\n#endif\n.globl SYM\nSYM:\n ret\n").unwrap();
    must(clang_in(&dir, &["-DVALUE=1", "-S", "-emit-llvm", "f.c", "-o", "l.ll"]), "clang -S -emit-llvm");
    must(clang_in(&dir, &["-DVALUE=1", "-c", "-emit-llvm", "f.c", "-o", "b.bc"]), "clang -c -emit-llvm");
    // One command, as a CMake C+ASM project runs it: each input gives its object.
    must(ompcc_in(&dir, &["-fopenmp", "-O2", "-DSYM=hsym", "-c", "f.s", "g.S", "h.S", "l.ll", "b.bc"]), "ompcc -c");
    for (obj, sym) in [("f.o", "f"), ("g.o", "f"), ("h.o", "hsym"), ("l.o", "f"), ("b.o", "f")] {
        let o = must(Command::new("nm").arg(dir.join(obj)).output().unwrap(), "nm");
        assert!(text(&o.stdout).contains(&format!(" T {sym}\n")), "{obj}: {}", text(&o.stdout));
    }
    // -o names the object; -S of IR writes assembly.
    must(ompcc_in(&dir, &["-c", "l.ll", "-o", "named.o"]), "ompcc -c -o");
    must(ompcc_in(&dir, &["-S", "b.bc", "-o", "b.s"]), "ompcc -S of bitcode");
    assert!(dir.join("named.o").is_file() && std::fs::read_to_string(dir.join("b.s")).unwrap().contains("f:"));
    // clang's old offload driver's bundles would lose their device code: refused.
    std::fs::write(dir.join("old.bc"), b"__CLANG_OFFLOAD_BUNDLE____START__ host-x86_64").unwrap();
    let o = ompcc_in(&dir, &["-c", "old.bc"]);
    assert!(!o.status.success() && text(&o.stderr).contains("clang-offload-bundler bundle"), "{}", text(&o.stderr));
}

#[cfg_attr(omp_e2e, test)]
fn assembly_and_bitcode_with_device_code_keep_it_through_the_link() {
    let dir = scratch("inputs-bundled");
    let s = src("saxpy.c");
    let targets = format!("-fopenmp-targets={HOST}");
    // Written by ompcc and by clang's own driver (which embeds the device's assembly for -S).
    must(ompcc_in(&dir, &["-fopenmp", "-O1", "-S", &s, "-o", "ours.s"]), "ompcc -S");
    must(ompcc_in(&dir, &["-fopenmp", "-O1", "-c", "-emit-llvm", &s, "-o", "ours.bc"]), "ompcc -c -emit-llvm");
    must(clang_in(&dir, &["-fopenmp", &targets, "-O1", "-S", &s, "-o", "clangs.s"]), "clang -S");
    must(clang_in(&dir, &["-fopenmp", &targets, "-O1", "-c", "-emit-llvm", &s, "-o", "clangs.bc"]), "clang -emit-llvm");
    for input in ["ours.s", "ours.bc", "clangs.s", "clangs.bc"] {
        let exe = format!("app-{input}");
        must(ompcc_in(&dir, &["-fopenmp", input, "-o", &exe]), &format!("ompcc link of {input}"));
        assert_eq!(run(&dir.join(&exe)).trim(), SAXPY, "{input}");
        // The same through an object made by `ompcc -c`.
        let obj = format!("{input}.o");
        must(ompcc_in(&dir, &["-fopenmp", "-c", input, "-o", &obj]), "ompcc -c");
        must(ompcc_in(&dir, &["-fopenmp", &obj, "-o", &exe]), "ompcc link of the object");
        assert_eq!(run(&dir.join(&exe)).trim(), SAXPY, "{obj}");
    }
}

#[cfg_attr(omp_e2e, test)]
fn syntax_only_checks_host_and_device_and_writes_nothing() {
    let dir = scratch("inputs-syntax-only");
    let bad = src("device_only_error.c");
    must(ompcc_in(&dir, &["-fopenmp", "-fsyntax-only", &bad, &src("saxpy.c")]), "ompcc -fsyntax-only");
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0, "-fsyntax-only wrote files");
    // The error only the device compile sees is found.
    let group = format!("--target-offload={HOST}");
    let o = ompcc_in(&dir, &["-fopenmp", &group, "-DDEVICE_BREAK", "--host", "-fsyntax-only", &bad]);
    assert!(!o.status.success() && text(&o.stderr).contains("no_such_variable"), "{}", text(&o.stderr));
}

#[cfg_attr(omp_e2e, test)]
fn dependency_files_as_clang_writes_them() {
    let dir = scratch("inputs-deps");
    std::fs::create_dir_all(dir.join("obj")).unwrap();
    std::fs::write(dir.join("h.h"), "#define N 4\n").unwrap();
    std::fs::write(
        dir.join("d.c"),
        "#include \"h.h\"\n#include <stdio.h>\nint main(void) { int x = 0;\n#pragma omp target map(tofrom: x)\n x = N;\n printf(\"%d\\n\", x); return 0; }\n",
    )
    .unwrap();
    let targets = format!("-fopenmp-targets={HOST}");
    // -M / -MM print what clang prints, and build nothing.
    for flag in ["-M", "-MM"] {
        let ours = must(ompcc_in(&dir, &["-fopenmp", flag, "d.c"]), "ompcc -M");
        let clangs = must(clang_in(&dir, &["-fopenmp", &targets, flag, "d.c"]), "clang -M");
        assert_eq!(text(&ours.stdout), text(&clangs.stdout), "{flag}");
        assert!(text(&ours.stdout).starts_with("d.o: d.c h.h"), "{}", text(&ours.stdout));
    }
    must(ompcc_in(&dir, &["-fopenmp", "-MM", "-MF", "mm.d", "-MT", "tgt", "d.c"]), "ompcc -MM -MF -MT");
    assert_eq!(std::fs::read_to_string(dir.join("mm.d")).unwrap(), "tgt: d.c h.h\n");
    // -MD / -MMD beside the object (named after -o), or after the output of a link.
    must(ompcc_in(&dir, &["-fopenmp", "-MMD", "-c", "d.c", "-o", "obj/d.o"]), "ompcc -MMD -c");
    assert_eq!(std::fs::read_to_string(dir.join("obj/d.d")).unwrap(), "obj/d.o: d.c h.h\n");
    must(ompcc_in(&dir, &["-fopenmp", "-MD", "-c", "d.c"]), "ompcc -MD -c");
    let md = std::fs::read_to_string(dir.join("d.d")).unwrap();
    assert!(md.starts_with("d.o: d.c h.h") && md.contains("stdio.h"), "{md}");
    must(ompcc_in(&dir, &["-fopenmp", "-MMD", "d.c", "-o", "app"]), "ompcc -MMD link");
    assert_eq!(std::fs::read_to_string(dir.join("app.d")).unwrap(), "app: d.c h.h\n");
    assert_eq!(run(&dir.join("app")).trim(), "4");
}

#[cfg_attr(omp_e2e, test)]
fn host_target_stays_on_the_host() {
    // The design's own example: a PowerPC host with an x86_64 device (no host headers needed).
    let dir = scratch("inputs-host-target");
    std::fs::write(
        dir.join("k.c"),
        "int scale(int *v, int n) {\n#pragma omp target teams distribute parallel for map(tofrom: v[0:n])\n  for (int i = 0; i < n; i++) v[i] *= 2;\n  return n;\n}\n",
    )
    .unwrap();
    let args = ["--target=powerpc64le-linux-gnu", "-fopenmp", "--target-offload=x86_64", "-c", "k.c"];
    must(ompcc_in(&dir, &args), "ompcc -c for a PowerPC host");
    let obj = std::fs::read(dir.join("k.o")).unwrap();
    assert_eq!(u16::from_le_bytes([obj[18], obj[19]]), 21, "host object is PowerPC 64 (EM_PPC64)");
    let list = must(Command::new(ompcc()).current_dir(&dir).args(["--offload-list", "k.o"]).output().unwrap(), "list");
    assert!(text(&list.stdout).contains(&format!("triple={HOST}")), "{}", text(&list.stdout));
    let dry = text(&must(ompcc_in(&dir, &[&args[..], &["-###"]].concat()), "-###").stderr);
    let dev = dry.lines().find(|l| l.contains(&format!("--target={HOST}"))).unwrap();
    assert!(!dev.contains("--target=powerpc") && dev.contains("-aux-triple -Xclang powerpc64le-linux-gnu"), "{dev}");
}

#[cfg_attr(omp_e2e, test)]
fn triple_spellings_and_repeated_groups() {
    let dir = scratch("inputs-triples");
    let s = src("saxpy.c");
    let o = ompcc_in(
        &dir,
        &[
            "--target-offload=x86_64",
            "-DFIRST",
            "--target-offload=x86_64-linux-gnu",
            "-DSECOND",
            "-fopenmp-targets=x86_64-unknown-linux-gnu",
            "--host",
            &s,
            "-o",
            "app",
            "-###",
        ],
    );
    let err = text(&must(o, "ompcc -###").stderr);
    let devices: Vec<&str> = err.lines().filter(|l| l.contains(" --target=") && l.contains(" -c ")).collect();
    assert_eq!(devices.len(), 1, "one device compile:\n{err}");
    assert!(devices[0].contains(&format!("--target={HOST}")) && devices[0].contains("-DFIRST -DSECOND"), "{err}");
    let warning = "ompcc: warning: '--target-offload=x86_64-linux-gnu' opens a second option group for offload target x86_64-pc-linux-gnu";
    assert_eq!(err.matches(warning).count(), 1, "{err}");
}

#[cfg_attr(omp_e2e, test)]
fn offload_list_of_several_files_and_a_closed_stdout() {
    let dir = scratch("inputs-list");
    let make = |f: &str| src(&format!("make/{f}"));
    must(ompcc_in(&dir, &["-fopenmp", "-c", &make("sum.c"), &make("scale.c")]), "ompcc -c");
    let o = must(
        Command::new(ompcc()).current_dir(&dir).args(["--offload-list", "sum.o", "scale.o"]).output().unwrap(),
        "list",
    );
    let out = text(&o.stdout);
    assert!(
        out.lines().count() == 2 && out.starts_with("sum.o: image 0") && out.contains("\nscale.o: image 0"),
        "{out}"
    );
    // A reader that stops early is no panic.
    let many = vec!["sum.o"; 2000].join(" ");
    let sh = format!("{} --offload-list {many} | head -1; echo status=${{PIPESTATUS[0]}} >&2", ompcc().display());
    let o = Command::new("bash").current_dir(&dir).args(["-c", &sh]).output().unwrap();
    let err = text(&o.stderr);
    assert!(err.contains("status=0") && !err.contains("panicked"), "{err}");
    assert_eq!(text(&o.stdout).lines().count(), 1);
}

#[cfg_attr(omp_e2e, test)]
fn fortran_objects_link_with_flangs_runtime() {
    assert!(repo_root().join("dist/lib/libomptarget.devicertl.a").exists(), "run `make dist` first");
    let dir = scratch("inputs-fortran-objects");
    must(ompcc_in(&dir, &["-fopenmp", "-c", &src("doubles.f90"), "-o", "d.o"]), "ompcc -c");
    must(ompcc_in(&dir, &["d.o", "-o", "app"]), "ompcc link of Fortran objects");
    assert_eq!(run(&dir.join("app")).trim(), "doubles sum=10100");
}

#[cfg_attr(omp_e2e, test)]
fn fortran_modules_compile_in_dependency_order() {
    // BabelStream's layout: the program first, the modules it uses last (the order that failed).
    let dir = scratch("inputs-fortran-modules");
    let m = |f: &str| src(&format!("modules/{f}"));
    let files = [m("main.F90"), m("StreamImpl.F90"), m("Stream.F90"), m("Types.F90")];
    let mut args: Vec<&str> = vec!["-fopenmp", "-O1"];
    args.extend(files.iter().map(String::as_str));
    args.extend(["-o", "stream"]);
    must(ompcc_in(&dir, &args), "ompcc with Fortran modules");
    assert_eq!(run(&dir.join("stream")).trim(), "stream triad sum=7168.0");
}

#[cfg_attr(omp_e2e, test)]
fn messages_of_parallel_compiles_stay_whole_lines() {
    let dir = scratch("inputs-messages");
    let body: String = (0..150).map(|i| format!("  int unused_variable_number_{i};\n")).collect();
    for f in ["w1", "w2", "w3", "w4"] {
        std::fs::write(dir.join(format!("{f}.c")), format!("void {f}(void) {{\n{body}}}\n")).unwrap();
    }
    let o = must(ompcc_in(&dir, &["-fopenmp", "-Wall", "-c", "w1.c", "w2.c", "w3.c", "w4.c"]), "ompcc -c");
    let err = text(&o.stderr);
    let warnings: Vec<&str> = err.lines().filter(|l| l.contains("warning:")).collect();
    assert!(warnings.len() >= 4 * 150, "{} warnings", warnings.len());
    for l in warnings {
        assert!(
            l.starts_with('w') && l.matches("warning:").count() == 1 && l.ends_with("[-Wunused-variable]"),
            "{l:?}"
        );
    }
}

#[cfg_attr(omp_e2e, test)]
fn cmake_c_and_asm_project_with_find_openmp() {
    // scripts/setup.sh installs cmake.
    assert!(Command::new("cmake").arg("--version").output().is_ok(), "cmake is missing: run scripts/setup.sh");
    let dir = scratch("inputs-cmake-asm");
    let cc = ompcc();
    let o = Command::new("cmake")
        .current_dir(&dir)
        .arg(format!("-DCMAKE_C_COMPILER={}", cc.display()))
        .arg(format!("-DCMAKE_ASM_COMPILER={}", cc.display()))
        .arg("-S")
        .arg(program("driver/cmake-asm"))
        .arg("-B")
        .arg(&dir)
        .output()
        .unwrap();
    let o = must(o, "cmake configure");
    assert!(text(&o.stdout).contains("Found OpenMP: TRUE"), "{}", text(&o.stdout));
    must(Command::new("cmake").current_dir(&dir).args(["--build", "."]).output().unwrap(), "cmake --build");
    assert_eq!(run(&dir.join("app")), "c+asm: 42\n");
}
