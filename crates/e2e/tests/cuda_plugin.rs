//! The CUDA plugin without a GPU: real x86_64 + nvptx64 fat binaries (ompcc with clang 19 and
//! the CUDA pieces in `.deps/cuda-13.0`) run on our runtime with a fake CUDA driver
//! (`tests/fake-cuda/libcuda.c`, built here as `libcuda.so.1` and put first on
//! LD_LIBRARY_PATH). The fake keeps device memory in host memory, does not run kernels, logs
//! each launch's grid and block, and fails on request. Checked: device numbering, silence
//! without a driver, LLVM's INFO lines and launch rules, the arch check, a corrupted cubin,
//! a faulting kernel (the device lost, reported once, OMP_TARGET_OFFLOAD followed), device
//! memory exhausted, and a program without an nvptx64 image left exactly as before.

// Always compiled; run as tests once `make dist` has run, and always under CI (see build.rs).
#![cfg_attr(not(omp_e2e), allow(dead_code))]

use omp_e2e::{dist_lib, must, program, repo_root, scratch, Llvm};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::{Mutex, OnceLock};

/// Our runtime's device number of the first GPU: after the host plugin's four devices.
const GPU: &str = "4";

/// The directory holding the fake `libcuda.so.1`, built once per test process.
fn fake_driver() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = scratch("cuda-plugin-fake-driver");
        let src = repo_root().join("tests/fake-cuda/libcuda.c");
        let cc = if Command::new("cc").arg("--version").output().is_ok() { "cc" } else { "clang-19" };
        must(
            Command::new(cc)
                .args(["-shared", "-fPIC", "-O1", "-Wall", "-Werror", "-o"])
                .arg(dir.join("libcuda.so.1"))
                .arg(&src),
            "building the fake CUDA driver",
        );
        dir
    })
}

/// `tests/programs/cuda/<name>.c` built by ompcc for x86_64 (+ nvptx64 sm_90), once.
fn build(name: &str, nvptx: bool) -> PathBuf {
    static BUILT: OnceLock<Mutex<HashMap<(String, bool), PathBuf>>> = OnceLock::new();
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    let dir = DIR.get_or_init(|| scratch("cuda-plugin-programs"));
    let mut built = BUILT.get_or_init(Default::default).lock().unwrap_or_else(|e| e.into_inner());
    if let Some(p) = built.get(&(name.to_string(), nvptx)) {
        return p.clone();
    }
    let ompcc = repo_root().join("dist/bin/ompcc");
    assert!(ompcc.exists(), "{} is missing: run `make dist` first", ompcc.display());
    let cuda = repo_root().join(".deps/cuda-13.0");
    assert!(cuda.join("bin/ptxas").is_file(), "{} is missing: run scripts/setup.sh", cuda.display());
    let out = dir.join(format!("{name}{}", if nvptx { "-nvptx" } else { "-x86" }));
    let mut cmd = Command::new(&ompcc);
    cmd.current_dir(dir).env_remove("OMPCC_GPU_DEVICERTL").env_remove("OMPCC_CUDA_PATH");
    // Include and link flags first: ompcc gives what follows a --target-offload to that target.
    cmd.args(["--clang=clang-19", "-fopenmp", "-g", "-O1"]).args(Llvm::V19.link_flags());
    cmd.arg("--target-offload=x86_64-pc-linux-gnu");
    if nvptx {
        cmd.arg(format!("--cuda-path={}", cuda.display()));
        cmd.args(["--target-offload=nvptx64-nvidia-cuda", "-march=sm_90"]);
    }
    cmd.arg(program(&format!("cuda/{name}.c"))).arg("-o").arg(&out);
    must(&mut cmd, &format!("ompcc {name}.c"));
    built.insert((name.to_string(), nvptx), out.clone());
    out
}

/// Runs `exe` on our runtime, with the fake driver first on the library path when `fake`.
fn run(exe: &Path, fake: bool, env: &[(&str, &str)]) -> Output {
    let libs = if fake {
        format!("{}:{}", fake_driver().display(), dist_lib().display())
    } else {
        dist_lib().display().to_string()
    };
    let mut cmd = Command::new(exe);
    cmd.env("LD_LIBRARY_PATH", libs);
    for k in
        ["OMP_TARGET_OFFLOAD", "OMP_DEFAULT_DEVICE", "LIBOMPTARGET_INFO", "LIBOMPTARGET_DEBUG", "CUDA_VISIBLE_DEVICES"]
    {
        cmd.env_remove(k);
    }
    cmd.envs(env.iter().copied());
    // A program this process just wrote (the corrupted copy) may still be open for writing in
    // a child another test thread is forking: exec says ETXTBSY until that child execs.
    for _ in 0..100 {
        match cmd.output() {
            Err(e) if e.raw_os_error() == Some(ETXTBSY) => std::thread::sleep(std::time::Duration::from_millis(20)),
            r => return r.expect("run the test program"),
        }
    }
    panic!("{} stayed busy", exe.display())
}

/// `ETXTBSY` on Linux: the executable is open for writing.
const ETXTBSY: i32 = 26;

/// What the runtime said: stderr without libomp's own warnings (a host device running
/// `num_teams(7)` on two cores gets "OMP: Warning #96").
fn runtime_lines(err: &str) -> String {
    err.lines().filter(|l| !l.starts_with("OMP: ")).map(|l| format!("{l}\n")).collect()
}

fn text(o: &Output) -> (String, String) {
    (String::from_utf8_lossy(&o.stdout).into_owned(), String::from_utf8_lossy(&o.stderr).into_owned())
}

/// A file name for the fake driver's launch log, new for each call.
fn launch_log(test: &str) -> PathBuf {
    let dir = scratch(&format!("cuda-plugin-{test}"));
    dir.join("launches.log")
}

#[cfg_attr(omp_e2e, test)]
fn each_fake_gpu_is_a_device_after_the_host_devices_and_none_is_silent() {
    let exe = build("launches", true);
    let (out, err) = text(&run(&exe, true, &[("FAKE_CUDA_DEVICES", "2"), ("OMP_DEFAULT_DEVICE", "5")]));
    assert_eq!(out, "devices=6\ndone sum=8128\n", "two GPUs after the four host devices; the second one ran:\n{err}");
    assert!(err.is_empty(), "a working driver says nothing: {err}");

    // No driver at all: the host devices, not a word.
    let o = run(&exe, false, &[]);
    let (out, err) = text(&o);
    assert!(o.status.success() && out.starts_with("devices=4\n"), "{out}{err}");
    assert!(runtime_lines(&err).is_empty(), "a machine without libcuda.so.1 sees no message: {err}");

    // CUDA_VISIBLE_DEVICES= (empty): the driver shows no device, and says so only when asked.
    let (out, err) = text(&run(&exe, true, &[("CUDA_VISIBLE_DEVICES", "")]));
    assert!(out.starts_with("devices=4\n") && runtime_lines(&err).is_empty(), "{out}{err}");
    let (_, err) = text(&run(&exe, true, &[("CUDA_VISIBLE_DEVICES", ""), ("LIBOMPTARGET_INFO", "1")]));
    assert!(err.contains("CUDA plugin: no devices: the CUDA driver found no device (CUDA_ERROR_NO_DEVICE)"), "{err}");
}

#[cfg_attr(omp_e2e, test)]
fn without_a_driver_the_reason_is_given_under_debug_only() {
    let exe = build("launches", true);
    let (_, err) = text(&run(&exe, false, &[("LIBOMPTARGET_DEBUG", "1")]));
    assert!(err.contains("CUDA plugin: no devices: cannot load libcuda.so.1"), "{err}");
}

/// An INFO launch line: kernel, blocks, threads, mode.
type InfoLaunch = (String, u32, u32, String);
/// A launch the fake driver logged: kernel, `grid=…`, `block=…`.
type LoggedLaunch = (String, String, String);

/// `(kernel, blocks, threads, mode)` of each INFO launch line, and `(kernel, grid, block)`
/// of each launch the fake driver logged.
fn launches(err: &str, log: &Path) -> (Vec<InfoLaunch>, Vec<LoggedLaunch>) {
    let info = err
        .lines()
        .filter_map(|l| l.strip_prefix(&format!("\"PluginInterface\" device {GPU} info: Launching kernel ")))
        .map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            // NAME with B blocks and T threads in MODE mode
            (w[0].to_string(), w[2].parse().unwrap(), w[5].parse().unwrap(), w[8].to_string())
        })
        .collect();
    let logged = std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            (w[1].to_string(), w[2].to_string(), w[3].to_string())
        })
        .collect();
    (info, logged)
}

#[cfg_attr(omp_e2e, test)]
fn launches_follow_llvms_rules_and_llvms_info_lines_say_so() {
    let exe = build("launches", true);
    let log = launch_log("launches");
    let o = run(
        &exe,
        true,
        &[("OMP_DEFAULT_DEVICE", GPU), ("LIBOMPTARGET_INFO", "16"), ("FAKE_CUDA_LOG", log.to_str().unwrap())],
    );
    let (out, err) = text(&o);
    assert!(o.status.success(), "{out}{err}");
    // Kernels do not run on the fake driver: the data went there and back unchanged.
    assert_eq!(out, "devices=5\ndone sum=8128\n");
    assert!(
        err.contains(
            "CUDA device 0 info: Device supports up to 65536 CUDA blocks and 1024 threads with a warp size of 32\n"
        ),
        "{err}"
    );
    let (info, logged) = launches(&err, &log);
    assert_eq!(info.len(), 3, "one INFO line per launch:\n{err}");
    assert_eq!(logged.len(), 3, "one driver launch per construct: {logged:?}");
    for ((name, blocks, threads, _), (lname, grid, block)) in info.iter().zip(&logged) {
        assert_eq!(name, lname, "the INFO line names the launched kernel");
        assert_eq!(grid, &format!("grid={blocks},1,1"), "{name}");
        assert_eq!(block, &format!("block={threads},1,1"), "{name}");
    }
    // 128 iterations, SPMD: LLVM's default_thread_limit.c expects 4 blocks of 32 threads.
    assert_eq!((info[0].1, info[0].2, info[0].3.as_str()), (4, 32, "SPMD"), "{err}");
    // num_teams(7) thread_limit(96).
    assert_eq!((info[1].1, info[1].2, info[1].3.as_str()), (7, 96, "SPMD"), "{err}");
    // num_teams(3) thread_limit(64): a generic kernel's main thread takes a warp of its own.
    let (_, blocks, threads, mode) = &info[2];
    match mode.as_str() {
        "Generic" => assert_eq!((*blocks, *threads), (3, 96), "{err}"),
        "Generic-SPMD" => assert_eq!((*blocks, *threads), (3, 64), "{err}"),
        other => panic!("a teams region with serial code runs in {other} mode:\n{err}"),
    }
}

#[cfg_attr(omp_e2e, test)]
fn a_faulting_kernel_loses_the_device_once_and_the_policy_ends_the_program() {
    let exe = build("fault", true);
    for policy in [Some("MANDATORY"), None] {
        let mut env = vec![("OMP_DEFAULT_DEVICE", GPU), ("FAKE_CUDA_FAIL_LAUNCH", "1")];
        if let Some(p) = policy {
            env.push(("OMP_TARGET_OFFLOAD", p));
        }
        let o = run(&exe, true, &env);
        let (out, err) = text(&o);
        assert!(
            !o.status.success(),
            "{policy:?}: a failed construct with devices present ends the program:\n{out}{err}"
        );
        assert_eq!(out, "devices=5\n", "{policy:?}: nothing after the faulting construct ran");
        let lost: Vec<&str> = err.lines().filter(|l| l.contains("was lost while")).collect();
        assert_eq!(lost.len(), 1, "{policy:?}: the loss is reported once:\n{err}");
        assert!(
            lost[0].contains("CUDA error: an illegal memory access was encountered (CUDA_ERROR_ILLEGAL_ADDRESS)"),
            "{policy:?}: {err}"
        );
        assert!(
            err.contains(
                "fault.c:10:1: omptarget fatal error 1: failure of target construct while offloading is mandatory"
            ),
            "{policy:?}: the construct's location:\n{err}"
        );
    }
}

#[cfg_attr(omp_e2e, test)]
fn an_image_for_another_sm_is_refused_with_both_names() {
    let exe = build("launches", true);
    let log = launch_log("arch");
    let o = run(
        &exe,
        true,
        &[
            ("OMP_DEFAULT_DEVICE", GPU),
            ("OMP_TARGET_OFFLOAD", "MANDATORY"),
            ("FAKE_CUDA_SM", "80"),
            ("FAKE_CUDA_LOG", log.to_str().unwrap()),
        ],
    );
    let (out, err) = text(&o);
    assert!(!o.status.success(), "{out}{err}");
    assert!(
        err.contains("the image was built for sm_90, but CUDA device 0 (Fake GPU 0 (tests/fake-cuda)) is sm_80"),
        "{err}"
    );
    assert!(!log.exists(), "nothing was launched");
}

#[cfg_attr(omp_e2e, test)]
fn a_corrupted_cubin_is_a_clear_error() {
    let exe = build("launches", true);
    let mut bytes = std::fs::read(&exe).unwrap();
    let cubins: Vec<usize> = (0..bytes.len().saturating_sub(64))
        .filter(|&i| bytes[i..i + 4] == *b"\x7fELF" && bytes[i + 4] == 2 && bytes[i + 18..i + 20] == [190, 0])
        .collect();
    assert!(!cubins.is_empty(), "no EM_CUDA image found in {}", exe.display());
    for i in cubins {
        // The section header table now lies far beyond the image.
        bytes[i + 0x28..i + 0x30].copy_from_slice(&0x7fff_ffff_ffffu64.to_le_bytes());
    }
    let bad = exe.with_file_name("launches-corrupt");
    std::fs::write(&bad, &bytes).unwrap();
    std::fs::set_permissions(&bad, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let o = run(&bad, true, &[("OMP_DEFAULT_DEVICE", GPU), ("OMP_TARGET_OFFLOAD", "MANDATORY")]);
    let (out, err) = text(&o);
    assert!(!o.status.success(), "{out}{err}");
    assert!(
        err.contains(
            "cannot load the image on CUDA device 0: CUDA error: device kernel image is invalid (CUDA_ERROR_INVALID_IMAGE) in cuModuleLoadDataEx"
        ),
        "{err}"
    );
}

#[cfg_attr(omp_e2e, test)]
fn exhausted_device_memory_is_reported_as_the_drivers_out_of_memory() {
    let exe = build("big", true);
    let o = run(
        &exe,
        true,
        &[("OMP_DEFAULT_DEVICE", GPU), ("OMP_TARGET_OFFLOAD", "MANDATORY"), ("FAKE_CUDA_MEM_LIMIT", "1048576")],
    );
    let (out, err) = text(&o);
    assert!(!o.status.success(), "{out}{err}");
    assert_eq!(out, "devices=5\n");
    assert!(err.contains("CUDA error: out of memory (CUDA_ERROR_OUT_OF_MEMORY) in cuMemAlloc"), "{err}");
    assert!(!err.contains("was lost"), "out of memory leaves the device usable:\n{err}");
}

#[cfg_attr(omp_e2e, test)]
fn a_program_without_an_nvptx64_image_is_untouched_by_the_driver() {
    let exe = build("launches", false);
    let log = launch_log("x86-only");
    let env = [("FAKE_CUDA_LOG", log.to_str().unwrap())];
    let without = run(&exe, false, &env);
    let with = run(&exe, true, &env);
    assert!(without.status.success() && with.status.success());
    assert_eq!(text(&with), text(&without), "the same output with the fake driver present");
    assert!(text(&with).0.starts_with("devices=4\ndone sum="), "{:?}", text(&with));
    assert!(!log.exists(), "no launch reached the driver");
    let (_, err) = text(&run(&exe, true, &[("LIBOMPTARGET_DEBUG", "1")]));
    assert!(!err.contains("CUDA plugin"), "the driver was not even loaded:\n{err}");
}

#[cfg_attr(omp_e2e, test)]
fn memset_peer_copies_and_a_nowait_depend_chain_run_on_fake_gpus() {
    let exe = build("memory_async", true);
    // The checker's device decorator hands fills and peer copies to the GPU as well (`bugs`:
    // findings without advice; the fake driver runs no kernel, so the advisor would rightly
    // say that none changed the data).
    for check in ["0", "bugs"] {
        let log = launch_log(&format!("memory-async-check{check}"));
        let log_path = log.display().to_string();
        let env = [
            ("FAKE_CUDA_DEVICES", "2"),
            ("OMP_DEFAULT_DEVICE", GPU),
            ("FAKE_CUDA_LOG", log_path.as_str()),
            ("LIBOMPTARGET_CHECK", check),
        ];
        let o = run(&exe, true, &env);
        let (out, err) = text(&o);
        assert!(o.status.success(), "CHECK={check}: {out}{err}");
        assert_eq!(
            out, "memset: 4046 set, 50 zero\ndevice to device rc=0: 4046 set, 50 zero\nnowait chain done x[5]=5\n",
            "CHECK={check}: {err}"
        );
        assert_eq!(runtime_lines(&err), "", "CHECK={check}");
        let driver = std::fs::read_to_string(&log).unwrap_or_default();
        let memsets = driver.lines().filter(|l| l.starts_with("memset ")).count();
        assert_eq!(memsets, 2, "CHECK={check}: two device memsets:\n{driver}");
        assert!(
            driver.contains("peer copy 4096 from context 0x1000 to context 0x1001\n"),
            "CHECK={check}: GPU to GPU without the host:\n{driver}"
        );
        let launches = driver.lines().filter(|l| l.starts_with("launch ")).count();
        assert_eq!(launches, 2, "CHECK={check}: both chained kernels:\n{driver}");
    }
}

#[cfg_attr(omp_e2e, test)]
fn under_the_checker_a_gpu_fault_names_the_kernel_and_points_to_the_isolated_device() {
    let exe = build("fault", true);
    let env = [("OMP_DEFAULT_DEVICE", GPU), ("FAKE_CUDA_FAIL_LAUNCH", "1"), ("LIBOMPTARGET_CHECK", "1")];
    let o = run(&exe, true, &env);
    let (out, err) = text(&o);
    assert!(!o.status.success(), "the policy ends the program:\n{out}{err}");
    let hints: Vec<&str> = err.lines().filter(|l| l.contains("faulted on CUDA device")).collect();
    assert_eq!(hints.len(), 1, "said once:\n{err}");
    assert!(
        hints[0].starts_with("omptarget check: kernel __omp_offloading_") && hints[0].contains("_main_l10 faulted"),
        "names the kernel:\n{err}"
    );
    assert!(hints[0].contains("on the isolated CPU device, which names it"), "{err}");
    assert_eq!(err.lines().filter(|l| l.contains("was lost while")).count(), 1, "{err}");
}

#[cfg_attr(omp_e2e, test)]
fn a_kernel_that_never_ends_is_ended_by_ctrl_c() {
    use std::os::unix::process::{CommandExt, ExitStatusExt};
    use std::time::{Duration, Instant};
    let exe = build("launches", true);
    let log = launch_log("never-ends");
    let libs = format!("{}:{}", fake_driver().display(), dist_lib().display());
    let mut command = Command::new(&exe);
    command
        .env("LD_LIBRARY_PATH", libs)
        .env("OMP_DEFAULT_DEVICE", GPU)
        .env("FAKE_CUDA_HANG_LAUNCH", "1")
        .env("FAKE_CUDA_LOG", &log)
        .env_remove("OMP_TARGET_OFFLOAD")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    // A program a shell starts in the background inherits SIGINT ignored (as this test does
    // under `make test &`); a user's Ctrl-C reaches a foreground program with the default action.
    // SAFETY: between fork and exec the closure only calls signal(2), which is async-signal-safe.
    unsafe {
        command.pre_exec(|| {
            libc::signal(libc::SIGINT, libc::SIG_DFL);
            Ok(())
        })
    };
    let mut child = command.spawn().expect("start the program");
    let started = Instant::now();
    while !std::fs::read_to_string(&log).unwrap_or_default().contains("launch ") {
        assert!(started.elapsed() < Duration::from_secs(60), "the kernel was never launched");
        assert!(child.try_wait().unwrap().is_none(), "the program ended before its kernel did");
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_millis(200));
    assert!(child.try_wait().unwrap().is_none(), "the kernel never ends: the program waits for it");
    // SAFETY: kill sends a signal to our own child, which has not been reaped (try_wait said so).
    assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGINT) }, 0);
    let interrupted = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if interrupted.elapsed() > Duration::from_secs(20) {
            let _ = child.kill();
            let _ = child.wait();
            panic!("Ctrl-C did not end a program waiting for a kernel that never ends");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(status.signal(), Some(libc::SIGINT), "ended by the interrupt: {status:?}");
}
