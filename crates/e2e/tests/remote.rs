//! Remote devices: programs run with devices on an `offload-server` started on 127.0.0.1
//! (ephemeral port) by each test. Needs `make dist` (dist/lib/libomptarget.so with the
//! `remote` feature, dist/bin/offload-server); `OMP_REMOTE_DIST=<dir>` points the tests at
//! another directory with the same `lib/` and `bin/` layout.
//!
//! The host plugin offers devices 0-3, so a server's first device is number 4.

// Always compiled; run as tests once `make dist` has run, and always under CI (see build.rs).
#![cfg_attr(not(omp_e2e), allow(dead_code))]

use omp_e2e::{compile, program, repo_root, run_with, scratch, Llvm, ALL};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

const FIRST_REMOTE: &str = "4";

fn dist() -> PathBuf {
    std::env::var_os("OMP_REMOTE_DIST").map(PathBuf::from).unwrap_or_else(|| repo_root().join("dist"))
}

fn lib() -> PathBuf {
    let p = dist().join("lib");
    assert!(p.join("libomptarget.so.22.1").exists(), "{} is missing: run `make dist` first", p.display());
    p
}

/// A server on 127.0.0.1 with an ephemeral port, killed when dropped.
struct Server {
    child: Child,
    addr: String,
    log: PathBuf,
}

impl Server {
    fn start(name: &str, args: &[&str]) -> Server {
        let bin = dist().join("bin/offload-server");
        assert!(bin.exists(), "{} is missing: run `make dist` first", bin.display());
        let log = scratch(&format!("remote-server-{name}")).join("server.log");
        let mut child = Command::new(&bin)
            .args(["--listen", "127.0.0.1:0", "--library-path", lib().to_str().unwrap()])
            .args(args)
            .env_remove("OFFLOAD_SERVER_TOKEN")
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("start offload-server");
        let out = child.stdout.take().unwrap();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut line = String::new();
            let _ = BufReader::new(out).read_line(&mut line);
            let _ = tx.send(line);
        });
        let line = rx.recv_timeout(Duration::from_secs(20)).expect("offload-server did not report its address");
        let addr = line
            .trim()
            .strip_prefix("offload-server listening on ")
            .unwrap_or_else(|| panic!("unexpected first line {line:?}"));
        assert!(addr.starts_with("127.0.0.1:"), "{addr}");
        Server { addr: addr.to_string(), child, log }
    }

    fn insecure(name: &str) -> Server {
        Server::start(name, &["--insecure-loopback"])
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Waits (at most `limit`) until the log contains `needle`.
    fn wait_log(&self, needle: &str, limit: Duration) -> String {
        let start = Instant::now();
        loop {
            let log = self.log();
            if log.contains(needle) || start.elapsed() > limit {
                return log;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn env(&self) -> Vec<(&'static str, String)> {
        vec![("LIBOMPTARGET_RPC_ADDRESS", self.addr.clone()), ("OMP_DEFAULT_DEVICE", FIRST_REMOTE.to_string())]
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Compiles `tests/programs/<rel>` into a directory of its own (tests run in parallel and
/// may build the same program).
fn build(llvm: Llvm, rel: &str) -> PathBuf {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let dir = scratch(&format!("remote-{}-{}-{n}", llvm.major(), rel.replace('/', "-")));
    let exe = dir.join("prog");
    compile(llvm, &[&program(rel)], &exe, &[]);
    exe
}

fn run(exe: &Path, env: &[(&str, String)]) -> Output {
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    run_with(exe, &lib(), &env)
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn spawn(exe: &Path, args: &[&str], env: &[(&str, String)]) -> Child {
    let mut cmd = Command::new(exe);
    cmd.args(args).env("LD_LIBRARY_PATH", lib()).stdout(Stdio::piped()).stderr(Stdio::piped());
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.spawn().expect("start test program")
}

/// Waits at most `limit` for the child; kills it and fails the test when it takes longer.
fn wait_bounded(mut child: Child, limit: Duration) -> (Output, Duration) {
    let start = Instant::now();
    loop {
        if child.try_wait().unwrap().is_some() {
            return (child.wait_with_output().unwrap(), start.elapsed());
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let o = child.wait_with_output().unwrap();
            panic!("still running after {limit:?}:\nstdout:\n{}\nstderr:\n{}", text(&o.stdout), text(&o.stderr));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Reads the child's stdout until a line contains `needle` (at most `limit`).
fn wait_line(child: &mut Child, needle: &str, limit: Duration) {
    let out = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    let needle = needle.to_string();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            if line.contains(&needle) {
                let _ = tx.send(());
                return;
            }
        }
    });
    rx.recv_timeout(limit).expect("the program never printed the expected line");
}

/// Sends `sig` to `pid` through kill(1).
fn signal(pid: u32, sig: &str) {
    let ok = Command::new("kill").args([sig, &pid.to_string()]).status().unwrap().success();
    assert!(ok, "kill {sig} {pid}");
}

#[cfg_attr(omp_e2e, test)]
fn runtime_programs_give_the_same_output_on_a_loopback_server() {
    let server = Server::insecure("same-output");
    for llvm in ALL {
        let programs = [
            "data_regions.c",
            "structs.c",
            "declare_target.c",
            "device_api.c",
            "nowait_depend.c",
            "mapper.c",
            "threads.c",
        ];
        for src in programs {
            let exe = build(llvm, &format!("runtime/{src}"));
            // threads.c: 8 host threads offload at once.
            let threads = ("OMP_NUM_THREADS", "8".to_string());
            let local = run(&exe, std::slice::from_ref(&threads));
            let mut env = server.env();
            env.push(threads);
            let remote = run(&exe, &env);
            let what = format!("{src} (clang {})", llvm.major());
            assert!(local.status.success(), "{what} locally: {}", text(&local.stderr));
            assert!(
                remote.status.success(),
                "{what} on the server: {}\n{}",
                text(&remote.stdout),
                text(&remote.stderr)
            );
            // device_api.c prints the device count: 4 host devices, plus 4 on the server.
            let remote_out = text(&remote.stdout).replace("devices=8 initial=8", "devices=4 initial=4");
            assert_eq!(text(&local.stdout), remote_out, "{what}: remote output differs from local");
        }
    }
    // The programs really ran there: sessions with allocations were opened and freed.
    let log = server.wait_log("closed", Duration::from_secs(5));
    assert!(log.matches("opened for 127.0.0.1:").count() >= 14, "{log}");
    assert!(log.contains("allocations, 1 images"), "{log}");
}

#[cfg_attr(omp_e2e, test)]
fn info_names_the_server_of_a_device() {
    let server = Server::insecure("info");
    let exe = build(Llvm::V22, "runtime/data_regions.c");
    let mut env = server.env();
    env.push(("LIBOMPTARGET_INFO", "-1".into()));
    let o = run(&exe, &env);
    let err = text(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert!(err.contains(&format!("at {} (protocol 2) offers 4 devices", server.addr)), "{err}");
    assert!(err.contains(&format!("opened on offload-server {}", server.addr)), "{err}");
    assert!(err.contains("\"PluginInterface\" device 4 info: Launching kernel __omp_offloading_"), "{err}");
}

#[cfg_attr(omp_e2e, test)]
fn eight_clients_at_once_each_checksum_their_data() {
    let server = Server::insecure("eight");
    let exe = build(Llvm::V22, "remote/checksum.c");
    let children: Vec<(u64, Child)> = (0..8u64)
        .map(|seed| {
            let mut env = server.env();
            env[1].1 = (4 + seed % 4).to_string();
            (seed, spawn(&exe, &["16", &(seed + 11).to_string(), "3"], &env))
        })
        .collect();
    for (seed, child) in children {
        let (o, _) = wait_bounded(child, Duration::from_secs(180));
        let out = text(&o.stdout);
        assert!(o.status.success(), "client {seed}: {out}\n{}", text(&o.stderr));
        assert_eq!(out.matches("device sum ok, 0 bad words").count(), 3, "{out}");
        assert!(out.contains(&format!("checksum ok on device {}", 4 + seed % 4)), "{out}");
    }
    let log = server.wait_log("closed", Duration::from_secs(5));
    assert_eq!(log.matches("opened for").count(), 8, "{log}");
}

/// Parses "freed N bytes ... worker PID stopped" from the server's session-closed line.
fn closed_line(log: &str, reason: &str) -> Option<(u64, u32)> {
    let line = log.lines().find(|l| l.contains("closed (") && l.contains(reason))?;
    let freed = line.split("freed ").nth(1)?.split(' ').next()?.parse().ok()?;
    let pid = line.split("worker ").nth(1)?.split(' ').next()?.parse().ok()?;
    Some((freed, pid))
}

#[cfg_attr(omp_e2e, test)]
fn killed_client_frees_its_session_and_the_server_keeps_serving() {
    let server = Server::insecure("killed-client");
    let looper = build(Llvm::V22, "remote/transfer_loop.c");
    let mut child = spawn(&looper, &["64", "100000"], &server.env());
    wait_line(&mut child, "mapped", Duration::from_secs(60));
    std::thread::sleep(Duration::from_millis(300)); // well inside the update loop
    child.kill().unwrap();
    let _ = child.wait();
    let log = server.wait_log("closed (client disconnected", Duration::from_secs(10));
    let (freed, pid) =
        closed_line(&log, "client disconnected").unwrap_or_else(|| panic!("no session-closed line:\n{log}"));
    assert!(freed >= 64 << 20, "the 64 MiB mapping must be freed: {log}");
    let gone = (0..100).any(|_| {
        std::thread::sleep(Duration::from_millis(20));
        !Path::new(&format!("/proc/{pid}")).exists()
    });
    assert!(gone, "worker {pid} still runs");
    // The server goes on serving.
    let exe = build(Llvm::V22, "remote/checksum.c");
    let (o, _) = wait_bounded(spawn(&exe, &["8", "3", "2"], &server.env()), Duration::from_secs(60));
    assert!(o.status.success() && text(&o.stdout).contains("checksum ok on device 4"), "{}", text(&o.stderr));
}

#[cfg_attr(omp_e2e, test)]
fn dead_or_stalled_server_is_an_error_in_bounded_time() {
    let looper = build(Llvm::V22, "remote/transfer_loop.c");
    for how in ["-KILL", "-STOP"] {
        let mut server = Server::insecure(&format!("dies{how}"));
        let mut env = server.env();
        env.push(("LIBOMPTARGET_RPC_LATENCY", "1".into()));
        let mut child = spawn(&looper, &["16", "1000000"], &env);
        wait_line(&mut child, "mapped", Duration::from_secs(60));
        signal(server.child.id(), how);
        let (o, took) = wait_bounded(child, Duration::from_secs(30));
        let err = text(&o.stderr);
        assert!(!o.status.success(), "{how}: the program must fail: {err}");
        assert!(took < Duration::from_secs(15), "{how}: took {took:?}");
        assert!(err.contains(&server.addr), "{how}: the error names the server: {err}");
        if how == "-STOP" {
            signal(server.child.id(), "-CONT");
        }
        let _ = server.child.kill();
    }
}

#[cfg_attr(omp_e2e, test)]
fn tokens_are_required_and_checked() {
    let dir = scratch("remote-token");
    let file = dir.join("token");
    std::fs::write(&file, "correct-horse\n").unwrap();
    let server = Server::start("token", &["--token-file", file.to_str().unwrap()]);
    let exe = build(Llvm::V22, "runtime/data_regions.c");
    let cases = [
        (None, "this server requires a token"),
        (Some(("LIBOMPTARGET_RPC_TOKEN", "battery-staple".to_string())), "wrong token"),
    ];
    for (token, msg) in cases {
        let mut env = server.env();
        env.extend(token);
        let o = run(&exe, &env);
        let err = text(&o.stderr);
        // Without the server's devices, device 4 is the initial device: the program runs on
        // the host, and says why the server's devices are missing.
        assert!(err.contains(msg) && err.contains(&server.addr), "{err}");
    }
    assert!(!server.log().contains("opened for"), "no session without the right token: {}", server.log());
    let mut env = server.env();
    env.push(("LIBOMPTARGET_RPC_TOKEN_FILE", file.to_str().unwrap().to_string()));
    let o = run(&exe, &env);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert!(text(&o.stdout).contains("data region: sum(b)=1000000"), "{}", text(&o.stdout));
}

#[cfg_attr(omp_e2e, test)]
fn kernel_using_an_unmapped_pointer_fails_naming_it_and_the_server_survives() {
    let server = Server::insecure("unmapped");
    let exe = build(Llvm::V22, "remote/sum_unmapped.c");
    // On the host device the missing map goes unnoticed: one address space.
    let local = run(&exe, &[]);
    assert!(text(&local.stdout).contains("sum=4194304"), "{}", text(&local.stderr));
    let o = run(&exe, &server.env());
    let err = text(&o.stderr);
    assert!(!o.status.success(), "{err}");
    assert!(!text(&o.stdout).contains("sum="), "{}", text(&o.stdout));
    assert!(err.contains("kernel '__omp_offloading_") && err.contains("_main_l12' crashed the device worker"), "{err}");
    assert!(err.contains("SIGSEGV"), "{err}");
    assert!(err.contains("sum_unmapped.c:12:1"), "{err}");
    let checksum = build(Llvm::V22, "remote/checksum.c");
    let (o, _) = wait_bounded(spawn(&checksum, &["4", "9", "1"], &server.env()), Duration::from_secs(60));
    assert!(o.status.success(), "the server must keep serving: {}", text(&o.stderr));
    let log = server.log();
    assert!(log.contains("crashed the device worker"), "{log}");
}

#[cfg_attr(omp_e2e, test)]
fn no_remote_to_remote_offloading() {
    let server = Server::insecure("nested");
    let exe = build(Llvm::V22, "runtime/data_regions.c");
    let mut env = server.env();
    env.push(("OFFLOAD_SERVER_WORKER", "1".into()));
    let o = run(&exe, &env);
    assert!(text(&o.stderr).contains("remote-to-remote offloading is refused"), "{}", text(&o.stderr));
    assert!(!server.log().contains("opened for"), "{}", server.log());
}

#[cfg_attr(omp_e2e, test)]
fn copies_do_not_wait_for_a_long_kernel() {
    let server = Server::insecure("overlap");
    let exe = build(Llvm::V22, "remote/overlap.c");
    let o = run(&exe, &server.env());
    let out = text(&o.stdout);
    assert!(o.status.success(), "{out}\n{}", text(&o.stderr));
    assert!(out.contains("copies ok=1 equal=1"), "{out}");
    // 8 copies of 32 MiB while a 3 s kernel runs: they finish well before it does.
    assert!(out.contains("copies finished first=1"), "{out}");
}

#[cfg_attr(omp_e2e, test)]
fn each_server_adds_its_devices_after_the_local_ones() {
    let (a, b) = (Server::start("two-a", &["--insecure-loopback", "--devices", "2"]), Server::insecure("two-b"));
    let exe = build(Llvm::V22, "runtime/device_api.c");
    let addrs = format!("{},{}", a.addr, b.addr);
    // 4 host devices, 2 on the first server (4-5), 4 on the second (6-9). device_api.c
    // also uses the next device: 5 and 6 (both servers), then 6 and 7 (the second only).
    for dev in ["5", "6"] {
        let env = [("LIBOMPTARGET_RPC_ADDRESS", addrs.clone()), ("OMP_DEFAULT_DEVICE", dev.to_string())];
        let o = run(&exe, &env);
        let out = text(&o.stdout);
        assert!(o.status.success(), "{out}\n{}", text(&o.stderr));
        assert!(out.contains("devices=10 initial=10"), "{out}");
        assert!(out.contains("memcpy d->h rc=0 back[4]=17"), "{out}");
        assert!(out.contains("d2[0..2]=65 82 101"), "{out}");
    }
    let (la, lb) = (a.wait_log("closed", Duration::from_secs(5)), b.wait_log("closed", Duration::from_secs(5)));
    assert_eq!(la.matches("opened for").count(), 1, "{la}");
    assert_eq!(lb.matches("opened for").count(), 2, "{lb}");
}

/// SIGPIPE is the program's: with remote devices configured (a live server with a session
/// open, or no server at all) a program piped into a reader that stops still ends with
/// SIGPIPE instead of writing forever. The plugin confines SIGPIPE to its own threads.
#[cfg_attr(omp_e2e, test)]
fn sigpipe_stays_the_programs_own() {
    use std::os::unix::process::ExitStatusExt;
    let exe = build(Llvm::V22, "remote/yes.c");
    let server = Server::insecure("sigpipe");
    let dead = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().to_string();
    let cases = [("live server", server.env()), ("no server", vec![("LIBOMPTARGET_RPC_ADDRESS", dead)])];
    for (what, env) in cases {
        let mut child = spawn(&exe, &[], &env);
        wait_line(&mut child, "offloaded 1", Duration::from_secs(60));
        let (o, _) = wait_bounded(child, Duration::from_secs(30));
        assert_eq!(o.status.signal(), Some(13), "{what}: {:?} {}", o.status, text(&o.stderr));
    }
}

/// A program that ends normally closes its session: the server logs a normal close, not a
/// protocol error. An unreachable server's error says each cause once.
#[cfg_attr(omp_e2e, test)]
fn normal_exit_is_logged_as_normal() {
    let server = Server::insecure("normal-exit");
    let exe = build(Llvm::V22, "runtime/data_regions.c");
    let o = run(&exe, &server.env());
    assert!(o.status.success(), "{}", text(&o.stderr));
    let log = server.wait_log("closed (", Duration::from_secs(10));
    assert!(log.contains("closed (client closed the session)"), "{log}");
    assert!(!log.contains("protocol error"), "{log}");

    let dead = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().to_string();
    let o = run(&exe, &[("LIBOMPTARGET_RPC_ADDRESS", dead)]);
    let err = text(&o.stderr);
    assert!(err.contains("its devices are not available"), "{err}");
    assert!(!err.contains("tcp connect error: tcp connect error"), "{err}");
}

/// A kernel's printf on a remote device reaches the program's stdout (stderr for stderr), in
/// order with the program's own output, and not the server's log.
#[cfg_attr(omp_e2e, test)]
fn kernel_output_is_forwarded_in_order() {
    let server = Server::insecure("printf");
    let exe = build(Llvm::V22, "remote/kernel_printf.c");
    let o = run(&exe, &server.env());
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert_eq!(
        text(&o.stdout),
        "host before\nkernel line 1\nkernel partial host after\nkernel 0\nhost 0\nkernel 1\nhost 1\nkernel 2\nhost 2\n"
    );
    assert!(text(&o.stderr).contains("kernel to stderr\n"), "{}", text(&o.stderr));
    assert!(!server.log().contains("kernel"), "{}", server.log());
}

/// A lease shorter than the heartbeat floor is raised (and said), so a 3 s kernel on a server
/// started with `--lease 0.2` finishes instead of losing its session.
#[cfg_attr(omp_e2e, test)]
fn a_tiny_lease_does_not_kill_a_running_kernel() {
    let server = Server::start("tiny-lease", &["--insecure-loopback", "--lease", "0.2"]);
    let exe = build(Llvm::V22, "remote/overlap.c");
    let o = run(&exe, &server.env());
    let out = text(&o.stdout);
    assert!(o.status.success(), "{out}\n{}\n{}", text(&o.stderr), server.log());
    assert!(out.contains("copies ok=1 equal=1"), "{out}");
    assert!(server.log().contains("--lease 0.200s raised to 1s"), "{}", server.log());
}

/// Issue 12, item 16: a server that is down does not turn `OMP_DEFAULT_DEVICE=4` into the
/// host device under MANDATORY: the program fails, naming the server and why.
#[cfg_attr(omp_e2e, test)]
fn an_unavailable_remote_device_is_an_error_under_mandatory() {
    let exe = build(Llvm::V22, "runtime/data_regions.c");
    // Port 1 on loopback: nothing listens there, the connection is refused at once.
    let env = [
        ("LIBOMPTARGET_RPC_ADDRESS", "127.0.0.1:1".to_string()),
        ("OMP_DEFAULT_DEVICE", "4".to_string()),
        ("OMP_TARGET_OFFLOAD", "MANDATORY".to_string()),
    ];
    let o = run(&exe, &env);
    let err = text(&o.stderr);
    assert!(!o.status.success(), "the program must fail: {}\n{err}", text(&o.stdout));
    assert!(err.contains("Device number '4' is not available"), "{err}");
    assert!(err.contains("127.0.0.1:1"), "the error names the server: {err}");
    // Without MANDATORY, device 4 is the initial device, as in LLVM: the program runs.
    let o = run(&exe, &env[..2]);
    assert!(o.status.success(), "{}", text(&o.stderr));
}
