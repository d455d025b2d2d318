//! `ompcc` for GPU targets: amdgcn fat binaries equivalent to clang 19's own (same OffloadBinary
//! kind/triple/arch, the same kernels, kernel descriptors and declare-target globals in the
//! AMDGPU code object), the clear errors where a GPU runtime or toolkit is missing, several
//! targets in one build, how our runtime reports an image no device runs, and the
//! declare-target explanation of a failed device link.
//!
//! No GPU here: the AMDGPU back end and ld.lld build the code objects; the runtime side is
//! checked on the host devices.

// Always compiled; run as tests once `make dist` has run, and always under CI (see build.rs).
#![cfg_attr(not(omp_e2e), allow(dead_code))]

use omp_e2e::{program, repo_root, run_with, scratch, Llvm};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn ompcc() -> PathBuf {
    let p = repo_root().join("dist/bin/ompcc");
    assert!(p.exists(), "{} is missing: run `make dist` first", p.display());
    p
}

fn src(name: &str) -> String {
    program(&format!("driver/{name}")).to_string_lossy().into_owned()
}

/// LLVM 19's GPU device runtime, privately extracted by scripts/setup.sh.
fn llvm19_lib() -> PathBuf {
    repo_root().join(".deps/libomp-19-dev/usr/lib/llvm-19/lib")
}

/// ompcc in `dir` with clang `llvm`, its include/link flags, and no GPU paths from the caller's
/// environment.
fn ompcc_in(dir: &Path, llvm: Llvm, args: &[&str]) -> Output {
    let mut cmd = Command::new(ompcc());
    cmd.current_dir(dir).env_remove("OMPCC_GPU_DEVICERTL").env_remove("OMPCC_CUDA_PATH");
    cmd.arg(format!("--clang={}", llvm.clang())).arg(format!("--flang={}", llvm.flang()));
    cmd.args(llvm.link_flags());
    cmd.args(args);
    cmd.output().expect("run ompcc")
}

fn text(o: &Output) -> (String, String) {
    (String::from_utf8_lossy(&o.stdout).into_owned(), String::from_utf8_lossy(&o.stderr).into_owned())
}

fn must(o: Output, what: &str) -> Output {
    assert!(o.status.success(), "{what} failed:\n{}\n{}", text(&o).0, text(&o).1);
    o
}

fn tool(name: &str, args: &[&str]) -> String {
    let o = Command::new(name).args(args).output().unwrap_or_else(|e| panic!("cannot run {name}: {e}"));
    assert!(o.status.success(), "{name} {args:?}: {}", text(&o).1);
    text(&o).0
}

/// clang 19's (flang 19's) own driver building `source` for gfx90a, as the issue gives it.
fn clang19_gfx90a(dir: &Path, source: &str, out: &str) {
    let cc = if source.ends_with(".cpp") {
        "clang++-19"
    } else if source.ends_with(".f90") {
        "flang-new-19"
    } else {
        "clang-19"
    };
    let rtl = llvm19_lib().join("libomptarget.devicertl.a");
    let mut cmd = Command::new(cc);
    cmd.current_dir(dir).args(["-fopenmp", "--offload-arch=gfx90a"]);
    if cc != "flang-new-19" {
        cmd.arg("-nogpulib");
    }
    cmd.args(Llvm::V19.link_flags()).arg(source).arg(&rtl).args(["-o", out]);
    must(cmd.output().unwrap(), &format!("{cc} --offload-arch=gfx90a"));
}

/// `llvm-objdump --offloading`: the image lines, without the file name line.
fn offloading(exe: &Path) -> Vec<String> {
    let out = tool("llvm-objdump-19", &["--offloading", exe.to_str().unwrap()]);
    out.lines()
        .filter(|l| {
            l.starts_with("kind") || l.starts_with("arch") || l.starts_with("triple") || l.starts_with("producer")
        })
        .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
        .collect()
}

/// The one device image of `exe`, extracted by `ompcc --offload-extract` into `dir`.
fn the_image(exe: &Path, dir: &Path) -> PathBuf {
    let _ = std::fs::remove_dir_all(dir);
    let out =
        tool(ompcc().to_str().unwrap(), &["--offload-extract", exe.to_str().unwrap(), "-o", dir.to_str().unwrap()]);
    let files: Vec<&str> = out.lines().collect();
    assert_eq!(files.len(), 1, "{out}");
    PathBuf::from(files[0])
}

/// The dynamic symbols of a code object: (name, type, bind, visibility), sorted.
fn dyn_symbols(image: &Path) -> Vec<(String, String, String, String)> {
    let out = tool("llvm-readelf-19", &["--dyn-symbols", image.to_str().unwrap()]);
    let mut v: Vec<_> = out
        .lines()
        .filter_map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            (w.len() == 8 && w[0].ends_with(':') && w[7] != "UND")
                .then(|| (w[7].to_string(), w[3].to_string(), w[4].to_string(), w[5].to_string()))
        })
        .collect();
    v.sort();
    v
}

/// Builds `source` for gfx90a with ompcc (every spelling in `spellings`) and with clang 19;
/// the fat binaries must carry the same image, and the code objects the same symbols.
fn same_amdgcn_image_as_clang(name: &str, source: &str, spellings: &[&[&str]], globals: &[&str]) {
    let dir = scratch(&format!("gpu-{name}"));
    let s = src(source);
    clang19_gfx90a(&dir, &s, "ref");
    let ref_exe = dir.join("ref");
    let want = offloading(&ref_exe);
    assert_eq!(want, ["kind elf", "arch gfx90a", "triple amdgcn-amd-amdhsa", "producer openmp"], "clang's own output");
    let ref_syms = dyn_symbols(&the_image(&ref_exe, &dir.join("ref.images")));
    let kernels: Vec<&String> = ref_syms
        .iter()
        .map(|s| &s.0)
        .filter(|n| n.starts_with("__omp_offloading_") && !n.contains("_environment"))
        .collect();
    assert!(kernels.len() >= 2, "{ref_syms:?}");
    for g in globals {
        assert!(ref_syms.iter().any(|s| s.0 == *g && s.1 == "OBJECT"), "clang's image lacks {g}: {ref_syms:?}");
    }
    for (i, spelling) in spellings.iter().enumerate() {
        let exe = format!("app{i}");
        let mut args: Vec<&str> = vec!["-fopenmp"];
        args.extend_from_slice(spelling);
        args.extend_from_slice(&[s.as_str(), "-o", exe.as_str()]);
        must(ompcc_in(&dir, Llvm::V19, &args), &format!("ompcc {spelling:?}"));
        let exe = dir.join(&exe);
        assert_eq!(offloading(&exe), want, "ompcc {spelling:?}: OffloadBinary differs from clang's");
        let image = the_image(&exe, &dir.join(format!("app{i}.images")));
        let header = tool("llvm-readelf-19", &["--file-header", image.to_str().unwrap()]);
        assert!(header.contains("AMDGPU") && header.contains("gfx90a"), "not a gfx90a code object:\n{header}");
        let syms = dyn_symbols(&image);
        assert_eq!(syms, ref_syms, "ompcc {spelling:?}: code object symbols differ from clang's");
        for k in &kernels {
            if !k.ends_with(".kd") {
                assert!(syms.iter().any(|s| s.0 == format!("{k}.kd")), "kernel {k} has no descriptor: {syms:?}");
            }
        }
    }
}

#[cfg_attr(omp_e2e, test)]
fn amdgcn_c_image_matches_clang19s_in_every_spelling() {
    same_amdgcn_image_as_clang(
        "c",
        "gpu_kernels.c",
        &[
            &["--offload-arch=gfx90a"],
            &["--target-offload=amdgcn", "-march=gfx90a"],
            &["-fopenmp-targets=amdgcn-amd-amdhsa", "-Xopenmp-target", "-march=gfx90a"],
        ],
        &["scale", "table"],
    );
}

#[cfg_attr(omp_e2e, test)]
fn amdgcn_cxx_image_matches_clang19s() {
    same_amdgcn_image_as_clang(
        "cxx",
        "gpu_kernels.cpp",
        &[&["--target-offload=amdgcn-amd-amdhsa", "-march=gfx90a"]],
        &["g_scaler"],
    );
}

/// flang 19 compiles for amdgcn too (though flang 19 itself lacks some GPU constructs, e.g.
/// `distribute parallel do`): the same image as flang's own driver.
#[cfg_attr(omp_e2e, test)]
fn amdgcn_fortran_image_matches_flang19s() {
    same_amdgcn_image_as_clang("f90", "gpu_kernels.f90", &[&["--offload-arch=gfx90a"]], &["_QMgpu_dataEweights"]);
}

#[cfg_attr(omp_e2e, test)]
fn clang22_without_a_gpu_device_runtime_is_one_clear_error() {
    let dir = scratch("gpu-clang22-no-rtl");
    let s = src("gpu_kernels.c");
    let o = ompcc_in(&dir, Llvm::V22, &["-fopenmp", "--offload-arch=gfx90a", &s, "-o", "app"]);
    let (_, err) = text(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.starts_with("ompcc: error: no LLVM 22 GPU device runtime for amdgcn-amd-amdhsa (gfx90a)"), "{err}");
    assert!(err.contains("libomptarget-amdgpu-gfx90a.bc"), "{err}");
    assert!(err.contains("--libomptarget-amdgpu-bc-path=") && err.contains("OMPCC_GPU_DEVICERTL"), "{err}");
    assert!(std::fs::read_dir(&dir).unwrap().next().is_none(), "something was written");

    // A runtime pointed at that is not there is named as such.
    let o = ompcc_in(
        &dir,
        Llvm::V22,
        &["-fopenmp", "--offload-arch=gfx90a", "--libomptarget-amdgpu-bc-path=/nonexistent/rtl.bc", &s, "-o", "app"],
    );
    let (_, err) = text(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("/nonexistent/rtl.bc not found"), "{err}");
}

#[cfg_attr(omp_e2e, test)]
fn nvptx_without_cuda_is_one_clear_error() {
    let dir = scratch("gpu-nvptx-no-cuda");
    let s = src("gpu_kernels.c");
    for extra in [&[][..], &["--cuda-path=/nonexistent/cuda"][..]] {
        let mut args = vec!["-fopenmp", "--target-offload=nvptx64", "-march=sm_80"];
        args.extend_from_slice(extra);
        args.extend_from_slice(&[&s, "-o", "app"]);
        let o = ompcc_in(&dir, Llvm::V19, &args);
        let (_, err) = text(&o);
        assert_eq!(o.status.code(), Some(1), "{err}");
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.contains("--cuda-path=") && err.contains("OMPCC_CUDA_PATH"), "{err}");
        assert!(err.contains("ptxas"), "{err}");
        assert!(std::fs::read_dir(&dir).unwrap().next().is_none(), "something was written");
    }
}

/// Issue 24 item 3: clang 22 without a CUDA installation asks for PTX 4.2, which its NVPTX back
/// end refuses for sm_80 (a crash even for bitcode); ompcc's `-c` needs no CUDA.
#[cfg_attr(omp_e2e, test)]
fn nvptx_compile_with_clang22_needs_no_cuda() {
    let dir = scratch("gpu-nvptx-clang22-c");
    let s = src("gpu_kernels.c");
    let o = must(ompcc_in(&dir, Llvm::V22, &["-fopenmp", "--offload-arch=sm_80", "-c", &s, "-o", "k.o"]), "ompcc -c");
    let (_, err) = text(&o);
    assert!(!err.contains("PTX version"), "{err}");
    // Nor does -fsyntax-only (no CUDA or ROCm bitcode library is linked, as for -c).
    must(ompcc_in(&dir, Llvm::V22, &["-fopenmp", "--offload-arch=sm_80,gfx90a", "-fsyntax-only", &s]), "-fsyntax-only");
    let list = tool(ompcc().to_str().unwrap(), &["--offload-list", dir.join("k.o").to_str().unwrap()]);
    assert!(list.contains("triple=nvptx64-nvidia-cuda arch=sm_80 kind=openmp image=bc"), "{list}");
    // The device bitcode leaves the PTX version to LLVM's NVPTX back end, which picks one
    // sm_80 supports.
    let images = dir.join("images");
    let k = dir.join("k.o");
    let extracted =
        tool(ompcc().to_str().unwrap(), &["--offload-extract", k.to_str().unwrap(), "-o", images.to_str().unwrap()]);
    let bc = PathBuf::from(extracted.lines().find(|l| l.contains("nvptx64")).unwrap_or_else(|| panic!("{extracted}")));
    let ir = tool("llvm-dis-22", &[bc.to_str().unwrap(), "-o", "-"]);
    assert!(
        ir.contains("+sm_80") && !ir.contains("+ptx42"),
        "{}",
        ir.lines().filter(|l| l.contains("target-features")).collect::<Vec<_>>().join("\n")
    );
    let ptx = tool("llc-22", &["-mtriple=nvptx64-nvidia-cuda", "-mcpu=sm_80", bc.to_str().unwrap(), "-o", "-"]);
    assert!(ptx.lines().any(|l| l.trim() == ".version 7.0"), "{}", ptx.lines().take(20).collect::<Vec<_>>().join("\n"));
}

#[cfg_attr(omp_e2e, test)]
fn three_targets_each_get_an_image_and_the_host_part_runs() {
    let dir = scratch("gpu-three-targets");
    let s = src("gpu_kernels.c");
    let three = [
        "-fopenmp",
        "--target-offload=x86_64-pc-linux-gnu",
        "--target-offload=amdgcn-amd-amdhsa",
        "-march=gfx90a",
        "--target-offload=nvptx64-nvidia-cuda",
        "-march=sm_80",
        "--host",
    ];
    // Compiling needs no CUDA: the object carries all three device images, as clang's -c does.
    let mut args = three.to_vec();
    args.extend_from_slice(&["-c", &s, "-o", "k.o"]);
    must(ompcc_in(&dir, Llvm::V19, &args), "ompcc -c for three targets");
    let list = text(&must(
        Command::new(ompcc()).args(["--offload-list", dir.join("k.o").to_str().unwrap()]).output().unwrap(),
        "list",
    ))
    .0;
    assert_eq!(list.lines().count(), 3, "{list}");
    assert!(list.contains("triple=x86_64-pc-linux-gnu") && list.contains("image=elf"), "{list}");
    assert!(list.contains("triple=amdgcn-amd-amdhsa arch=gfx90a kind=openmp image=bc"), "{list}");
    assert!(list.contains("triple=nvptx64-nvidia-cuda arch=sm_80 kind=openmp image=bc"), "{list}");

    // Linking for nvptx needs ptxas: the clear error, and no program.
    let o = ompcc_in(&dir, Llvm::V19, &["-fopenmp", "k.o", "-o", "app3"]);
    let (_, err) = text(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("nvptx64-nvidia-cuda needs a CUDA toolkit") && err.contains("--cuda-path"), "{err}");
    assert!(!dir.join("app3").exists());

    // With a CUDA toolkit the nvptx device link is an LTO link (clang-nvlink-wrapper's own, so no
    // `-flto`: with it clang passes the wrapper a gold plugin) with LLVM 19's sm_80 runtime.
    let cuda = dir.join("cuda");
    std::fs::create_dir_all(cuda.join("bin")).unwrap();
    for t in ["ptxas", "nvlink"] {
        std::fs::write(cuda.join("bin").join(t), "#!/bin/sh\nexit 1\n").unwrap();
    }
    let mut args = three.to_vec();
    let cuda_opt = format!("--cuda-path={}", cuda.display());
    args.extend_from_slice(&["-###", &cuda_opt, &s, "-o", "app3"]);
    let (_, plan) = text(&must(ompcc_in(&dir, Llvm::V19, &args), "ompcc -### for three targets"));
    let nv_link = plan
        .lines()
        .find(|l| l.contains("--target=nvptx64-nvidia-cuda") && l.contains("-Xlinker"))
        .unwrap_or_else(|| panic!("{plan}"));
    assert!(
        !nv_link.contains("-flto")
            && nv_link.contains("-march=sm_80")
            && nv_link.contains("libomptarget-nvptx-sm_80.bc")
            && nv_link.contains(&cuda_opt),
        "{nv_link}"
    );

    // x86_64 + amdgcn: both images, and the x86_64 part runs on our runtime (offloading mandatory).
    let mut args = three[..4].to_vec();
    args.extend_from_slice(&["--host", &s, "-o", "app2"]);
    must(ompcc_in(&dir, Llvm::V19, &args), "ompcc x86_64 + amdgcn");
    let exe = dir.join("app2");
    let list =
        text(&must(Command::new(ompcc()).args(["--offload-list", exe.to_str().unwrap()]).output().unwrap(), "list")).0;
    assert_eq!(list.lines().count(), 2, "{list}");
    assert!(list.contains("triple=amdgcn-amd-amdhsa arch=gfx90a kind=openmp image=elf"), "{list}");
    let o = run_with(
        &exe,
        &repo_root().join("dist/lib"),
        &[("OMP_TARGET_OFFLOAD", "MANDATORY"), ("LIBOMPTARGET_INFO", "1")],
    );
    let (out, err) = text(&o);
    assert!(o.status.success(), "{out}\n{err}");
    assert_eq!(out.trim(), "gpu_kernels sum=195840 s=10.0");
    let unserved: Vec<&str> = err.lines().filter(|l| l.contains("suits no plugin")).collect();
    assert_eq!(unserved.len(), 1, "{err}");
    assert!(unserved[0].contains("(triple amdgcn-amd-amdhsa, arch gfx90a)"), "{}", unserved[0]);
}

#[cfg_attr(omp_e2e, test)]
fn an_image_no_device_runs_is_reported_once_and_offload_policy_decides() {
    let dir = scratch("gpu-unserved");
    let s = src("gpu_kernels.c");
    must(ompcc_in(&dir, Llvm::V19, &["-fopenmp", "--offload-arch=gfx90a", &s, "-o", "ours"]), "ompcc gfx90a");
    clang19_gfx90a(&dir, &s, "theirs");
    let lib = repo_root().join("dist/lib");
    for exe in ["ours", "theirs"] {
        let exe = dir.join(exe);
        for env in [("LIBOMPTARGET_INFO", "1"), ("LIBOMPTARGET_DEBUG", "1")] {
            let o = run_with(&exe, &lib, &[env]);
            let (out, err) = text(&o);
            assert!(o.status.success(), "{}: {out}\n{err}", exe.display());
            assert_eq!(out.trim(), "gpu_kernels sum=195840 s=10.0", "host fallback");
            let lines: Vec<&str> = err.lines().filter(|l| l.contains("suits no plugin")).collect();
            assert_eq!(lines.len(), 1, "{env:?}:\n{err}");
            assert!(lines[0].contains("triple amdgcn-amd-amdhsa, arch gfx90a"), "{}", lines[0]);
            assert!(!err.contains("no triple"), "{err}");
        }
        let o = run_with(&exe, &lib, &[("OMP_TARGET_OFFLOAD", "MANDATORY")]);
        let (out, err) = text(&o);
        assert!(!o.status.success(), "mandatory offloading without a device ran: {out}");
        assert!(err.contains("Found 1 image(s): (amdgcn-amd-amdhsa)"), "{err}");
        let o = run_with(&exe, &lib, &[("OMP_TARGET_OFFLOAD", "DISABLED"), ("LIBOMPTARGET_INFO", "1")]);
        assert!(o.status.success() && text(&o).0.contains("sum=195840"), "{}", text(&o).1);
    }
}

#[cfg_attr(omp_e2e, test)]
fn a_failed_device_link_explains_the_missing_declare_target() {
    let dt = |f: &str| program(&format!("declare_target/{f}")).to_string_lossy().into_owned();
    for llvm in [Llvm::V19, Llvm::V22] {
        let dir = scratch(&format!("gpu-dt-explain-{}", llvm.major()));
        let o = ompcc_in(&dir, llvm, &["-fopenmp", "-DUSE_PLAIN", &dt("caller.c"), &dt("callees.c"), "-o", "app"]);
        let (_, err) = text(&o);
        assert_eq!(o.status.code(), Some(1), "{err}");
        let line = err
            .lines()
            .find(|l| l.contains("'ext_plain' is called from device code"))
            .unwrap_or_else(|| panic!("no explanation:\n{err}"));
        assert!(line.starts_with("ompcc: error: ") && line.contains("callees.c:6"), "{line}");
        assert!(
            line.contains("target region in main (") && line.contains("caller.c:10) -> ext_plain (call at "),
            "{line}"
        );
        assert!(line.contains("add '#pragma omp declare target'"), "{line}");
        assert!(!dir.join("app").exists());
        // The good program builds and runs without any analysis output.
        let o =
            must(ompcc_in(&dir, llvm, &["-fopenmp", &dt("caller.c"), &dt("callees.c"), "-o", "good"]), "good build");
        assert!(!text(&o).1.contains("declare target"), "{}", text(&o).1);
    }
}

#[cfg_attr(omp_e2e, test)]
fn a_missing_rocm_device_library_is_one_clear_error() {
    let dir = scratch("gpu-no-rocm");
    let s = src("gpu_kernels.c");
    for (opt, shown) in [
        ("--rocm-path=/nonexistent/rocm", "/nonexistent/rocm/amdgcn/bitcode"),
        ("--rocm-device-lib-path=/nonexistent/bitcode", "/nonexistent/bitcode"),
    ] {
        for mode in [&["-o", "app"][..], &["-c", "-o", "k.o"][..]] {
            let mut args = vec!["-fopenmp", "--offload-arch=gfx90a", opt, &s];
            args.extend_from_slice(mode);
            let o = ompcc_in(&dir, Llvm::V19, &args);
            let (_, err) = text(&o);
            assert_eq!(o.status.code(), Some(1), "{err}");
            assert_eq!(err.lines().count(), 1, "{err}");
            assert!(err.contains(&format!("no ROCm device library in {shown} (ocml.bc not found")), "{err}");
            assert!(std::fs::read_dir(&dir).unwrap().next().is_none(), "something was written");
        }
    }
}

#[cfg_attr(omp_e2e, test)]
fn amdgcn_objects_link_both_ways_with_clang19() {
    let dir = scratch("gpu-objects");
    let s = src("gpu_kernels.c");
    let rtl = llvm19_lib().join("libomptarget.devicertl.a");
    // ompcc -c, linked by clang's driver.
    must(ompcc_in(&dir, Llvm::V19, &["-fopenmp", "--offload-arch=gfx90a", "-c", &s, "-o", "ours.o"]), "ompcc -c");
    let mut cmd = Command::new("clang-19");
    cmd.current_dir(&dir).args(["-fopenmp", "--offload-arch=gfx90a", "-nogpulib"]).args(Llvm::V19.link_flags());
    must(cmd.arg("ours.o").arg(&rtl).args(["-o", "by_clang"]).output().unwrap(), "clang-19 links ompcc's object");
    // clang -c, linked by ompcc.
    let mut cmd = Command::new("clang-19");
    cmd.current_dir(&dir).args(["-fopenmp", "--offload-arch=gfx90a", "-nogpulib"]).args(Llvm::V19.link_flags());
    must(cmd.args(["-c", &s, "-o", "theirs.o"]).output().unwrap(), "clang-19 -c");
    must(ompcc_in(&dir, Llvm::V19, &["-fopenmp", "theirs.o", "-o", "by_ompcc"]), "ompcc links clang's object");
    let want = ["kind elf", "arch gfx90a", "triple amdgcn-amd-amdhsa", "producer openmp"];
    for exe in ["by_clang", "by_ompcc"] {
        assert_eq!(offloading(&dir.join(exe)), want, "{exe}");
        let o = run_with(&dir.join(exe), &repo_root().join("dist/lib"), &[]);
        assert!(o.status.success() && text(&o).0.contains("sum=195840"), "{exe}: {}", text(&o).1);
    }
}
