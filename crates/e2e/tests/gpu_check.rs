//! `scripts/gpu-check.sh dry-run` on a small subset (docs/gpu-check.md): the GPU check builds
//! its bundle here (suite tests and e2e programs for sm_90, the benches), runs the run phase on
//! this machine's CPU, and checks what that wrote; `check` then finds a wrong output planted in
//! the brought-back files. No GPU needed; LLVM's runtime stays out of the bundle to keep it short.

// Always compiled; run as tests once `make dist` has run, and always under CI (see build.rs).
#![cfg_attr(not(omp_e2e), allow(dead_code))]

use omp_e2e::{dist_lib, repo_root, scratch};
use std::path::Path;
use std::process::{Command, Output};

const SUBSET: &str = "mapping/present/target_data_at_exit.c,api/omp_get_num_devices.c,runtime/structs.c";
const PROGRAM: &str = "e2e/clang/runtime/structs.c";

fn gpu_check(dir: &Path, args: &[&str]) -> Output {
    Command::new(repo_root().join("scripts/gpu-check.sh"))
        .args(args)
        .env("GPUCHECK_DIR", dir)
        .env("GPUCHECK_TESTS", SUBSET)
        .env("GPUCHECK_LLVM", "0")
        .output()
        .expect("run scripts/gpu-check.sh")
}

fn text(o: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

/// The results.tsv rows (id, runtime, status) the run phase wrote.
fn results(dir: &Path) -> Vec<(String, String, String)> {
    let tsv = std::fs::read_to_string(dir.join("results.tsv")).expect("results.tsv");
    tsv.lines()
        .skip(1)
        .map(|l| {
            let f: Vec<&str> = l.split('\t').collect();
            (f[0].to_string(), f[2].to_string(), f[3].to_string())
        })
        .collect()
}

#[cfg_attr(omp_e2e, test)]
fn dry_run_builds_runs_on_the_cpu_and_checks_a_small_subset() {
    dist_lib();
    let dir = scratch("gpu_check");
    let o = gpu_check(&dir, &["dry-run"]);
    let out = text(&o);
    assert!(o.status.success(), "dry run failed:\n{out}");
    assert!(out.contains("dry run: OK"), "{out}");
    assert!(out.contains(r#"run {"command": "scripts/gpu-check.sh run", "carry": ["#), "no device call:\n{out}");
    assert!(out.contains("2 suite tests and 2 e2e programs"), "subset not honoured:\n{out}");

    // What the run phase wrote: at most 8 files, the e2e program's x86_64 companion passed.
    let back = dir.join("dry-run");
    let files: Vec<_> = std::fs::read_dir(&back).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert!(files.len() <= 8, "{files:?}");
    let rows = results(&back);
    assert!(rows.iter().any(|r| r.0 == PROGRAM && r.1 == "ours" && r.2 == "ok"), "{rows:?}");
    assert_eq!(rows.iter().filter(|r| r.0.starts_with("suite/")).count(), 2, "{rows:?}");
    assert!(rows.iter().any(|r| r.0 == "bench/floor" && r.2 == "skip"), "the floor has no driver here: {rows:?}");
    let table = std::fs::read_to_string(back.join("table.txt")).unwrap();
    assert!(table.contains("DRY RUN on the CPU"), "{table}");

    // A wrong output in the brought-back files is a failure the check names.
    let tampered = dir.join("tampered");
    std::fs::create_dir_all(&tampered).unwrap();
    for f in ["results.tsv", "run.log"] {
        std::fs::copy(back.join(f), tampered.join(f)).unwrap();
    }
    let unpacked = dir.join("unpacked-copy");
    std::fs::create_dir_all(&unpacked).unwrap();
    let tar = |args: &[&str], cwd: &Path| {
        let s = Command::new("tar").args(args).current_dir(cwd).status().expect("tar");
        assert!(s.success(), "tar {args:?}");
    };
    tar(&["-xJf", back.join("outputs.tar.xz").to_str().unwrap()], &unpacked);
    let stdout = unpacked.join("outputs/ours/e2e_clang_runtime_structs.c/stdout");
    let good = std::fs::read_to_string(&stdout).expect("the program's stdout travelled");
    assert!(good.contains("nested: counts[0]="), "{good}");
    std::fs::write(&stdout, good.replace("nested: counts[0]=", "nested: counts[0]=9")).unwrap();
    tar(&["-cJf", tampered.join("outputs.tar.xz").to_str().unwrap(), "outputs"], &unpacked);
    let o = gpu_check(&dir, &["check", tampered.to_str().unwrap()]);
    let out = text(&o);
    assert!(out.contains(&format!("{PROGRAM} on ours: fail output differs")), "tampering not found:\n{out}");
}
