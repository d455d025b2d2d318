//! End-to-end tests of `ompcc --gpu-check[=ARCH]`: the programs under `tests/programs/gpu_check`
//! build and run on the CPU devices, and the check names what would not link or run on an
//! NVIDIA (sm_90) or AMD (gfx90a) GPU, with its chain; it says nothing about the programs that
//! build for amdgcn today (the driver's GPU programs), the examples and a clean program that uses
//! what GPU device libraries provide. No GPU and no CUDA or ROCm toolkit is needed.

// Always compiled; run as tests once `make dist` has run, and always under CI (see build.rs).
#![cfg_attr(not(omp_e2e), allow(dead_code))]

use omp_e2e::{program, repo_root, scratch, Llvm, ALL};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn ompcc() -> PathBuf {
    let p = repo_root().join("dist/bin/ompcc");
    assert!(p.exists(), "{} is missing: run `make dist` first", p.display());
    p
}

/// A copy of `rel` (under tests/programs) in `dir`, so messages name it as a user would.
fn copy(dir: &Path, rel: &str) -> String {
    let name = Path::new(rel).file_name().unwrap().to_string_lossy().into_owned();
    std::fs::copy(program(rel), dir.join(&name)).unwrap_or_else(|e| panic!("copy {rel}: {e}"));
    name
}

/// ompcc in `dir` with `llvm`'s compilers, our runtime and `args`.
fn ompcc_in(dir: &Path, llvm: Llvm, args: &[&str]) -> Output {
    let mut cmd = Command::new(ompcc());
    cmd.current_dir(dir);
    cmd.arg(format!("--clang={}", llvm.clang())).arg(format!("--flang={}", llvm.flang()));
    cmd.arg(format!("--runtime-dir={}", repo_root().join("dist/lib").display()));
    cmd.args(llvm.link_flags());
    cmd.args(args);
    cmd.output().expect("run ompcc")
}

/// ompcc's own lines (`ompcc: …`) on stderr; a failed build fails the test.
fn ompcc_lines(o: &Output, what: &str) -> Vec<String> {
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{what} failed:\n{}\n{err}", String::from_utf8_lossy(&o.stdout));
    err.lines().filter(|l| l.starts_with("ompcc:")).map(str::to_string).collect()
}

/// Runs `exe` in `dir` (log_value.c writes `values.log` into the directory it runs in).
fn run(dir: &Path, exe: &str) -> String {
    let o = Command::new(dir.join(exe))
        .current_dir(dir)
        .env("LD_LIBRARY_PATH", repo_root().join("dist/lib"))
        .env("OMP_TARGET_OFFLOAD", "MANDATORY")
        .output()
        .expect("run test program");
    assert!(o.status.success(), "{exe} failed: {}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn family(arch: &str) -> &'static str {
    if arch.starts_with("sm_") {
        "nvptx64"
    } else {
        "amdgcn"
    }
}

fn summary(n: usize, arch: &str) -> String {
    let s = if n == 1 { "" } else { "s" };
    format!(
        "ompcc: warning: --gpu-check found {n} problem{s} for {} ({arch}); the build for the CPU devices is not affected (see docs/gpu-portability.md)",
        family(arch)
    )
}

const ARCHES: [&str; 2] = ["sm_90", "gfx90a"];

#[cfg_attr(omp_e2e, test)]
fn fopen_strlen_and_abort_in_device_code_are_named_with_their_chains() {
    for llvm in ALL {
        for arch in ARCHES {
            let dir = scratch(&format!("gpu_check_log_{}_{arch}", llvm.major()));
            let src = copy(&dir, "gpu_check/log_value.c");
            let flag = format!("--gpu-check={arch}");
            let lines =
                ompcc_lines(&ompcc_in(&dir, llvm, &["-fopenmp", &flag, &src, "-o", "app"]), "ompcc --gpu-check");
            let on = format!("{} ({arch})", family(arch));
            let chain = "target region in main (log_value.c:17) -> log_value (call at log_value.c:21)";
            let io = "do the I/O on the host, after the target region (printf works on the device)";
            assert_eq!(
                lines,
                [
                    format!("ompcc: warning: log_value.c:23: 'abort' is not available on {on}: target region in main (log_value.c:17) -> abort (call at log_value.c:23); a kernel cannot end the program: set a flag the host checks after the region (or __builtin_trap())"),
                    format!("ompcc: warning: log_value.c:8: 'fopen' is not available on {on}: {chain} -> fopen (call at log_value.c:8); {io}"),
                    format!("ompcc: warning: log_value.c:9: 'fprintf' is not available on {on}: {chain} -> fprintf (call at log_value.c:9); {io}"),
                    format!("ompcc: warning: log_value.c:9: 'strlen' is not available on {on}: {chain} -> strlen (call at log_value.c:9); call it on the host, or give the device its own definition inside 'declare target'"),
                    format!("ompcc: warning: log_value.c:10: 'fclose' is not available on {on}: {chain} -> fclose (call at log_value.c:10); {io}"),
                    summary(5, arch),
                ],
                "clang {}",
                llvm.major()
            );
            // The CPU build is the one without the flag: it runs on our host device.
            assert_eq!(run(&dir, "app"), "3.5\n");
        }
    }
}

#[cfg_attr(omp_e2e, test)]
fn host_function_pointers_and_recursion() {
    for llvm in ALL {
        let dir = scratch(&format!("gpu_check_ptr_rec_{}", llvm.major()));
        let ptr = copy(&dir, "gpu_check/host_pointer.c");
        let rec = copy(&dir, "gpu_check/recursion.c");
        let lines =
            ompcc_lines(&ompcc_in(&dir, llvm, &["-fopenmp", "--gpu-check", &ptr, "-o", "ptr"]), "host_pointer.c");
        assert_eq!(lines, [
            "ompcc: warning: host_pointer.c:12: device code calls through a function pointer that comes from the host, and a host function's address is not callable on nvptx64 (sm_90): target region in main (host_pointer.c:11); call the function directly, or mark the functions it may point to 'declare target indirect'".to_string(),
            summary(1, "sm_90"),
        ]);
        assert_eq!(run(&dir, "ptr"), "42\n");
        let lines =
            ompcc_lines(&ompcc_in(&dir, llvm, &["-fopenmp", "--gpu-check=gfx90a", &rec, "-o", "rec"]), "recursion.c");
        let stack = "a GPU thread's stack is small (about 16 KiB unless LIBOMPTARGET_STACK_SIZE raises it) and a recursion's depth is not known when the kernel is built: make it a loop, or bound its depth";
        assert_eq!(lines, [
            format!("ompcc: warning: recursion.c:5: 'fib' calls itself (at recursion.c:5): target region in main (recursion.c:14) -> fib (call at recursion.c:16); {stack}"),
            format!("ompcc: warning: recursion.c:7: 'is_even' and 'is_odd' call each other: target region in main (recursion.c:14) -> is_even (call at recursion.c:17); {stack}"),
            summary(2, "gfx90a"),
        ]);
        assert_eq!(run(&dir, "rec"), "6765 1\n");
    }
}

#[cfg_attr(omp_e2e, test)]
fn cxx_library_calls_are_one_line_per_caller() {
    for llvm in ALL {
        let dir = scratch(&format!("gpu_check_cxx_{}", llvm.major()));
        let src = copy(&dir, "gpu_check/strings.cpp");
        let lines = ompcc_lines(&ompcc_in(&dir, llvm, &["-fopenmp", "--gpu-check", &src, "-o", "app"]), "strings.cpp");
        let hint = "keep std:: types and streams out of device code (plain new and delete work there)";
        assert_eq!(lines.len(), 3, "{lines:#?}");
        assert!(
            lines[0].starts_with("ompcc: warning: strings.cpp:17: the C++ library is not available on nvptx64 (sm_90): 'std::ostream& std::operator<<")
                && lines[0].ends_with(&format!(" (call at strings.cpp:17); {hint}")),
            "{}",
            lines[0]
        );
        assert!(
            lines[1].starts_with("ompcc: warning: strings.cpp:7: the C++ library is not available on nvptx64 (sm_90): 'std::")
                && lines[1].contains(" more functions: target region in main (strings.cpp:14) -> label_length (call at strings.cpp:16) -> std::")
                && lines[1].ends_with(&format!(" (call at strings.cpp:7); {hint}")),
            "{}",
            lines[1]
        );
        assert_eq!(lines[2], summary(2, "sm_90"));
    }
}

#[cfg_attr(omp_e2e, test)]
fn fortran_io_and_recursion() {
    for llvm in ALL {
        let dir = scratch(&format!("gpu_check_f90_{}", llvm.major()));
        let src = copy(&dir, "gpu_check/write_file.f90");
        for arch in ARCHES {
            let flag = format!("--gpu-check={arch}");
            let lines = ompcc_lines(&ompcc_in(&dir, llvm, &["-fopenmp", &flag, &src, "-o", "app"]), "write_file.f90");
            // flang 19 gives the calls in a target region the region's line.
            let (open, call) = if llvm == Llvm::V19 { (18, 18) } else { (22, 20) };
            let on = format!("{} ({arch})", family(arch));
            // What a thread gets by default: CUDA's 1 KiB, LLVM's AMD plugin's 16 KiB.
            let kib = if family(arch) == "amdgcn" { 16 } else { 1 };
            assert_eq!(lines, [
                format!("ompcc: warning: write_file.f90:{open}: flang's I/O runtime is not available on {on}: '_FortranAioBeginOpenUnit' and 5 more functions: target region in the main program (write_file.f90:18) -> _FortranAioBeginOpenUnit (call at write_file.f90:{open}); do the I/O on the host, after the target region"),
                format!("ompcc: warning: write_file.f90:4: 'depth' calls itself (at write_file.f90:10): target region in the main program (write_file.f90:18) -> depth (call at write_file.f90:{call}); a GPU thread's stack is small (about {kib} KiB unless LIBOMPTARGET_STACK_SIZE raises it) and a recursion's depth is not known when the kernel is built: make it a loop, or bound its depth"),
                summary(2, arch),
            ], "flang {}", llvm.major());
        }
    }
}

/// The programs that build for amdgcn today (tests/programs/driver, with clang/flang 19), the
/// examples, a clean program and a call into another source of the command: no line at all.
#[cfg_attr(omp_e2e, test)]
fn silent_on_programs_a_gpu_builds() {
    let progs: [&[&str]; 8] = [
        &["gpu_check/clean.c"],
        &["driver/gpu_kernels.c"],
        &["driver/gpu_kernels.cpp"],
        &["driver/gpu_kernels.f90"],
        &["driver/saxpy.c"],
        &["driver/vector_sum.cpp"],
        &["declare_target/caller.c", "declare_target/callees.c"],
        &["../../examples/vector_add.c"],
    ];
    for llvm in ALL {
        for arch in ARCHES {
            let dir = scratch(&format!("gpu_check_silent_{}_{arch}", llvm.major()));
            let flag = format!("--gpu-check={arch}");
            for files in progs.iter().copied().chain([&["../../examples/saxpy.f90"][..]]) {
                let srcs: Vec<String> = files.iter().map(|f| copy(&dir, f)).collect();
                let mut args = vec!["-fopenmp", flag.as_str(), "-lm"];
                args.extend(srcs.iter().map(String::as_str));
                args.extend(["-o", "app"]);
                let lines = ompcc_lines(&ompcc_in(&dir, llvm, &args), &format!("{files:?} for {arch}"));
                if files == ["../../examples/saxpy.f90"] && llvm == Llvm::V19 && arch == "sm_90" {
                    // flang 19 names its reduction's lock `.gomp_critical_user_…`, which ptxas
                    // refuses: a GPU build's device link stops there too.
                    assert_eq!(lines, ["ompcc: warning: --gpu-check: the stack frames of saxpy.f90 were not sized for nvptx64 (sm_90): ptxas refuses it, as the device link of a GPU build would: Parsing error near '.gomp_critical_user_': syntax error"]);
                    continue;
                }
                if files == ["../../examples/saxpy.f90"] && llvm == Llvm::V19 && arch == "gfx90a" {
                    // flang 19 cannot compile its reduction for amdgcn at all (LLVM's verifier
                    // refuses its __kmpc_reduce call): a GPU build fails the same way.
                    assert_eq!(lines, ["ompcc: warning: --gpu-check: saxpy.f90 could not be compiled for amdgcn (gfx90a), so it is not checked: error: failed to create the LLVM module"]);
                    continue;
                }
                assert!(lines.is_empty(), "clang {} {arch} {files:?}:\n{}", llvm.major(), lines.join("\n"));
            }
        }
    }
}

/// ptxas, which sizes the frames for NVIDIA GPUs: scripts/setup.sh puts it into .deps/ (a test
/// that passed without it would check nothing for sm_90).
fn ptxas_of_setup() -> PathBuf {
    let p = repo_root().join(".deps/cuda-13.0/bin/ptxas");
    assert!(p.is_file(), "{} is missing: run scripts/setup-cuda.sh (part of scripts/setup.sh)", p.display());
    p
}

/// A 64 KiB local array in a function a target region calls: more stack than a GPU thread gets
/// by default, named with the chain and each frame; the same function with a small array fits.
#[cfg_attr(omp_e2e, test)]
fn a_stack_frame_beyond_the_gpu_default_is_named_with_its_chain() {
    ptxas_of_setup();
    for llvm in ALL {
        for arch in ARCHES {
            let dir = scratch(&format!("gpu_check_stack_{}_{arch}", llvm.major()));
            let src = copy(&dir, "gpu_check/big_frame.c");
            let flag = format!("--gpu-check={arch}");
            let lines = ompcc_lines(&ompcc_in(&dir, llvm, &["-fopenmp", &flag, &src, "-o", "app"]), "big_frame.c");
            // ptxas adds 8 bytes to the array, AMD's back end 16.
            let (bytes, limit) = if arch == "sm_90" { (65544, 1024) } else { (65552, 16384) };
            assert_eq!(lines, [
                format!("ompcc: warning: big_frame.c:10: the target region in main (big_frame.c:25) needs {bytes} bytes of stack per GPU thread on {} ({arch}), more than the {limit} bytes a thread gets by default: target region in main (big_frame.c:25, 0 bytes) -> smooth (call at big_frame.c:26, {bytes} bytes); run it with LIBOMPTARGET_STACK_SIZE=66560 or more, or give the large local variables of 'smooth' heap memory (malloc in the region) or mapped memory", family(arch)),
                summary(1, arch),
            ], "clang {}", llvm.major());
            assert_eq!(run(&dir, "app"), "30720\n");
            let small = ompcc_in(&dir, llvm, &["-fopenmp", &flag, "-DWORDS=16", &src, "-o", "small"]);
            assert!(ompcc_lines(&small, "big_frame.c -DWORDS=16").is_empty(), "clang {} {arch}", llvm.major());
            // -v gives each region's stack.
            let v = ompcc_in(&dir, llvm, &["-fopenmp", &flag, "-v", "-DWORDS=16", "-c", &src]);
            let err = String::from_utf8_lossy(&v.stderr);
            assert!(
                err.contains(&format!(
                    "# --gpu-check: stack per thread on {} ({arch}): target region in main (big_frame.c:25): ",
                    family(arch)
                )),
                "{err}"
            );
        }
    }
}

/// Without ptxas the NVIDIA frames are not sized, which is said once; the rest is checked.
#[cfg_attr(omp_e2e, test)]
fn without_ptxas_the_frames_are_not_sized_and_that_is_said_once() {
    let dir = scratch("gpu_check_no_ptxas");
    let src = copy(&dir, "gpu_check/big_frame.c");
    let rec = copy(&dir, "gpu_check/recursion.c");
    let empty = dir.join("no-cuda");
    std::fs::create_dir_all(&empty).unwrap();
    let mut cmd = Command::new(ompcc());
    cmd.current_dir(&dir).arg(format!("--clang={}", Llvm::V22.clang()));
    cmd.arg(format!("--runtime-dir={}", repo_root().join("dist/lib").display()));
    cmd.arg(format!("--cuda-path={}", empty.display()));
    cmd.args(["-fopenmp", "--gpu-check", "-c", &src, &rec]);
    let lines = ompcc_lines(&cmd.output().unwrap(), "ompcc --gpu-check without ptxas");
    assert_eq!(lines.len(), 4, "{lines:#?}");
    // The line names the toolkit the command named, not the places searched without one.
    let ptxas = empty.join("bin/ptxas");
    assert_eq!(lines[0], format!("ompcc: warning: --gpu-check: stack frames are not sized for nvptx64 (sm_90): that needs ptxas, CUDA's assembler, and the CUDA toolkit named by --cuda-path or OMPCC_CUDA_PATH has none ({} is not a file)", ptxas.display()));
    assert!(lines[1].contains("'fib' calls itself") && lines[2].contains("call each other"), "{lines:#?}");
    assert_eq!(lines[3], summary(2, "sm_90"));
}

/// A function defined in an object on the command line is not missing; one only declared is.
#[cfg_attr(omp_e2e, test)]
fn functions_of_objects_on_the_command_line_are_resolved() {
    let llvm = Llvm::V22;
    let dir = scratch("gpu_check_objects");
    let caller = copy(&dir, "declare_target/caller.c");
    let callees = copy(&dir, "declare_target/callees.c");
    let o = ompcc_in(&dir, llvm, &["-fopenmp", "--gpu-check", "-c", &callees, "-o", "callees.o"]);
    assert!(ompcc_lines(&o, "ompcc -c callees.c").is_empty());
    let o = ompcc_in(&dir, llvm, &["-fopenmp", "--gpu-check", &caller, "callees.o", "-o", "app"]);
    assert!(ompcc_lines(&o, "caller.c callees.o").is_empty());
    assert_eq!(run(&dir, "app"), "r=42\n");
    // Without the object (-c alone), the call is to a function nothing here defines.
    let o = ompcc_in(&dir, llvm, &["-fopenmp", "--gpu-check", "-c", &caller, "-o", "caller.o"]);
    assert_eq!(ompcc_lines(&o, "ompcc -c caller.c"), [
        "ompcc: warning: caller.c:12: 'ext_marked' is not available on nvptx64 (sm_90): target region in main (caller.c:10) -> ext_marked (call at caller.c:12); call it on the host, or give the device its own definition inside 'declare target'".to_string(),
        summary(1, "sm_90"),
    ]);
}

#[cfg_attr(omp_e2e, test)]
fn a_wrong_architecture_is_a_usage_error_and_a_missing_gpu_compiler_is_one_line() {
    let dir = scratch("gpu_check_usage");
    let src = copy(&dir, "gpu_check/log_value.c");
    let o = ompcc_in(&dir, Llvm::V22, &["-fopenmp", "--gpu-check=hopper", &src, "-o", "app"]);
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(
        String::from_utf8_lossy(&o.stderr),
        "ompcc: error: unknown GPU architecture 'hopper' for --gpu-check (expected sm_… for NVIDIA GPUs, e.g. sm_90, or gfx… for AMD GPUs, e.g. gfx90a)\n"
    );
    // A clang built without the NVPTX target: the CPU build goes on, the check is one line.
    let fake = dir.join("clang-no-nvptx");
    std::fs::write(
        &fake,
        "#!/bin/sh\nfor a in \"$@\"; do case \"$a\" in *nvptx*|*sm_90*) echo \"error: unable to create target: 'No available targets are compatible with triple \\\"nvptx64-nvidia-cuda\\\"'\" >&2; exit 1;; esac; done\nexec clang-22 \"$@\"\n",
    )
    .unwrap();
    std::fs::set_permissions(&fake, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let mut cmd = Command::new(ompcc());
    cmd.current_dir(&dir).arg(format!("--clang={}", fake.display()));
    cmd.arg(format!("--runtime-dir={}", repo_root().join("dist/lib").display()));
    cmd.args(Llvm::V22.link_flags()).args(["-fopenmp", "--gpu-check", &src, "-o", "app"]);
    let lines = ompcc_lines(&cmd.output().unwrap(), "ompcc with a clang without nvptx");
    assert_eq!(lines.len(), 1, "{lines:#?}");
    assert!(
        lines[0].starts_with("ompcc: warning: --gpu-check: log_value.c could not be compiled for nvptx64 (sm_90), so it is not checked: ")
            && lines[0].contains("No available targets are compatible with triple"),
        "{}",
        lines[0]
    );
    assert_eq!(run(&dir, "app"), "3.5\n");
    // -### shows the check's compile without running anything.
    let o = ompcc_in(&dir, Llvm::V22, &["-fopenmp", "--gpu-check=gfx90a", "-###", &src, "-o", "app"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("# log_value.c: --gpu-check for amdgcn-amd-amdhsa (gfx90a)"), "{err}");
    assert!(
        err.contains("--target=amdgcn-amd-amdhsa") && err.contains("-march=gfx90a -S -gline-tables-only -O0 -w"),
        "{err}"
    );
}
