//! `ompcc` for NVIDIA GPUs without a GPU: x86_64 + nvptx64 fat binaries built on this machine
//! with the CUDA compiler pieces `scripts/setup-cuda.sh` puts in `.deps/cuda-13.0` and LLVM 19's
//! nvptx device runtime. Each nvptx image must be a cubin for the architecture asked for (ELF
//! machine EM_CUDA, the SM in its flags) holding the same kernels and declare-target globals as
//! clang 19's (flang 19's) own build of the same source, and the x86_64 half of the same binary
//! must run on our host device. C, C++ and Fortran.

// Always compiled; run as tests once `make dist` has run, and always under CI (see build.rs).
#![cfg_attr(not(omp_e2e), allow(dead_code))]

use omp_e2e::{must, program, repo_root, run_ours, scratch, Llvm};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const SM: &str = "sm_90";

/// The CUDA compiler pieces (ptxas, nvlink, libdevice) that scripts/setup.sh installs.
fn cuda() -> PathBuf {
    let d = repo_root().join(".deps/cuda-13.0");
    assert!(d.join("bin/ptxas").is_file(), "{} is missing: run scripts/setup.sh", d.display());
    d
}

/// LLVM 19's nvptx device runtime for `SM`, from the private libomp-19-dev extract.
fn nvptx_devicertl() -> PathBuf {
    let f = repo_root().join(format!(".deps/libomp-19-dev/usr/lib/llvm-19/lib/libomptarget-nvptx-{SM}.bc"));
    assert!(f.is_file(), "{} is missing: run scripts/setup.sh", f.display());
    f
}

fn ompcc() -> PathBuf {
    let p = repo_root().join("dist/bin/ompcc");
    assert!(p.exists(), "{} is missing: run `make dist` first", p.display());
    p
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// clang 19's (flang 19's) own driver building `source` for `SM` with the same CUDA pieces.
fn reference_build(dir: &Path, source: &Path, out: &str) {
    let fortran = source.extension().is_some_and(|e| e == "f90");
    let cxx = source.extension().is_some_and(|e| e == "cpp");
    let cc = if fortran {
        "flang-new-19"
    } else if cxx {
        "clang++-19"
    } else {
        "clang-19"
    };
    let mut cmd = Command::new(cc);
    cmd.current_dir(dir).args(["-fopenmp", &format!("--offload-arch={SM}")]);
    if fortran {
        // flang 19 has no --cuda-path: it finds ptxas and nvlink on PATH.
        let path = format!("{}:{}", cuda().join("bin").display(), std::env::var("PATH").unwrap_or_default());
        cmd.env("PATH", path);
    } else {
        cmd.arg(format!("--cuda-path={}", cuda().display()));
        cmd.arg(format!("--libomptarget-nvptx-bc-path={}", nvptx_devicertl().display()));
    }
    cmd.args(Llvm::V19.link_flags()).arg(source).args(["-o", out]);
    must(&mut cmd, &format!("{cc} --offload-arch={SM}"));
}

/// ompcc building `source` with clang/flang 19 and the extra arguments of one spelling.
fn ompcc_build(dir: &Path, source: &Path, spelling: &[&str], out: &str) {
    let mut cmd = Command::new(ompcc());
    cmd.current_dir(dir).env_remove("OMPCC_GPU_DEVICERTL").env_remove("OMPCC_CUDA_PATH");
    cmd.args(["--clang=clang-19", "--flang=flang-new-19", "-fopenmp"]);
    cmd.arg(format!("--cuda-path={}", cuda().display()));
    cmd.args(Llvm::V19.link_flags()).args(spelling).arg(source).args(["-o", out]);
    must(&mut cmd, &format!("ompcc {spelling:?}"));
}

/// The device images of `exe` as `ompcc --offload-extract` writes them: (file, triple part).
fn images(exe: &Path, dir: &Path) -> Vec<PathBuf> {
    let _ = std::fs::remove_dir_all(dir);
    let o = must(Command::new(ompcc()).arg("--offload-extract").arg(exe).arg("-o").arg(dir), "ompcc --offload-extract");
    stdout(&o).lines().map(PathBuf::from).collect()
}

fn nvptx_image(exe: &Path, dir: &Path) -> PathBuf {
    let all = images(exe, dir);
    let nv: Vec<&PathBuf> = all.iter().filter(|p| p.to_string_lossy().contains("nvptx64-nvidia-cuda")).collect();
    assert_eq!(nv.len(), 1, "one nvptx64 image expected in {}: {all:?}", exe.display());
    nv[0].clone()
}

/// EM_CUDA, and the SM the cubin was built for (its place in `e_flags` moved in ABI version 8).
fn cubin_machine_and_sm(image: &Path) -> (u16, u32) {
    let b = std::fs::read(image).unwrap();
    assert!(b.len() > 64 && &b[..4] == b"\x7fELF" && b[4] == 2, "{} is not an ELF64 file", image.display());
    let machine = u16::from_le_bytes([b[18], b[19]]);
    let flags = u32::from_le_bytes([b[48], b[49], b[50], b[51]]);
    let sm = if b[8] >= 8 { (flags >> 8) & 0xff } else { flags & 0xff };
    (machine, sm)
}

/// The kernels (from their `_kernel_environment`) and the program's own globals of a cubin.
fn kernels_and_globals(image: &Path) -> (Vec<String>, Vec<String>) {
    let o = must(Command::new("llvm-readelf-19").arg("--symbols").arg(image), "llvm-readelf-19 --symbols");
    let (mut kernels, mut globals) = (Vec::new(), Vec::new());
    for line in stdout(&o).lines() {
        let w: Vec<&str> = line.split_whitespace().collect();
        if w.len() < 8 || !w[0].ends_with(':') || w[4] == "LOCAL" || w[3] != "OBJECT" {
            continue;
        }
        let name = w[w.len() - 1];
        if let Some(k) = name.strip_suffix("_kernel_environment") {
            kernels.push(k.to_string());
        } else if !name.starts_with("__omp_") && !name.starts_with('.') && !name.ends_with("_environment") {
            globals.push(name.to_string());
        }
    }
    kernels.sort();
    globals.sort();
    (kernels, globals)
}

/// Builds `source` for x86_64 + nvptx64 in each spelling and for nvptx64 alone with the
/// reference driver; compares the cubins; runs the x86_64 half on the host device.
fn nvptx_fat_binary_like_the_reference(name: &str, source: &str, globals: &[&str], expect: &str) {
    let dir = scratch(&format!("nvptx-{name}"));
    let s = program(source);
    reference_build(&dir, &s, "ref");
    let ref_image = nvptx_image(&dir.join("ref"), &dir.join("ref.images"));
    assert_eq!(cubin_machine_and_sm(&ref_image), (190, 90), "reference image");
    let (ref_kernels, ref_globals) = kernels_and_globals(&ref_image);
    assert!(!ref_kernels.is_empty(), "no kernel in the reference image");
    for g in globals {
        assert!(ref_globals.iter().any(|r| r == g), "reference lacks global {g}: {ref_globals:?}");
    }
    let spellings: [&[&str]; 2] = [
        &["--target-offload=x86_64-pc-linux-gnu", "--target-offload=nvptx64-nvidia-cuda", "-march=sm_90"],
        &[
            "-fopenmp-targets=x86_64-pc-linux-gnu,nvptx64-nvidia-cuda",
            "-Xopenmp-target=nvptx64-nvidia-cuda",
            "-march=sm_90",
        ],
    ];
    for (i, spelling) in spellings.iter().enumerate() {
        let exe = format!("app{i}");
        ompcc_build(&dir, &s, spelling, &exe);
        let exe = dir.join(exe);
        let all = images(&exe, &dir.join(format!("app{i}.images")));
        assert_eq!(all.len(), 2, "x86_64 and nvptx64 images expected: {all:?}");
        let image = nvptx_image(&exe, &dir.join(format!("app{i}.nv")));
        assert_eq!(cubin_machine_and_sm(&image), (190, 90), "ompcc {spelling:?}: not an {SM} cubin");
        assert_eq!(
            kernels_and_globals(&image),
            (ref_kernels.clone(), ref_globals.clone()),
            "ompcc {spelling:?}: kernels or globals differ from the reference build"
        );
        assert_eq!(run_ours(&exe, &[]).trim(), expect, "ompcc {spelling:?}: the x86_64 half on the host device");
    }
}

#[cfg_attr(omp_e2e, test)]
fn nvptx_c_fat_binary_matches_clang19s_cubin_and_runs_on_the_host_device() {
    nvptx_fat_binary_like_the_reference(
        "c",
        "driver/gpu_kernels.c",
        &["scale", "table"],
        "gpu_kernels sum=195840 s=10.0",
    );
}

#[cfg_attr(omp_e2e, test)]
fn nvptx_cxx_fat_binary_matches_clang19s_cubin_and_runs_on_the_host_device() {
    nvptx_fat_binary_like_the_reference(
        "cxx",
        "driver/gpu_kernels.cpp",
        &["g_scaler"],
        "gpu_kernels_cpp sd=650.0 si=700",
    );
}

#[cfg_attr(omp_e2e, test)]
fn nvptx_fortran_fat_binary_matches_flang19s_cubin_and_runs_on_the_host_device() {
    nvptx_fat_binary_like_the_reference(
        "f90",
        "driver/gpu_kernels.f90",
        &["_QMgpu_dataEweights"],
        "gpu_kernels_f sum= 10350.0",
    );
}

/// `clang-19 --offload-arch=sm_90` itself, with the pieces setup installs: the same CUDA
/// directory serves users who build with clang directly.
#[cfg_attr(omp_e2e, test)]
fn clang19_alone_builds_an_sm_90_fat_binary_with_the_installed_pieces() {
    let dir = scratch("nvptx-clang-alone");
    reference_build(&dir, &program("driver/saxpy.c"), "saxpy");
    let image = nvptx_image(&dir.join("saxpy"), &dir.join("images"));
    assert_eq!(cubin_machine_and_sm(&image), (190, 90));
}
