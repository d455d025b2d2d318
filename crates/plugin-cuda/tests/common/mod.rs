//! What the fake-driver tests share: the fake built as `libcuda.so.1`, a test run again as a
//! child process with it first on LD_LIBRARY_PATH (the library path is read at process
//! start), and minimal cubins.
#![allow(dead_code)] // each test binary uses its own part

use std::path::{Path, PathBuf};
use std::process::Command;

pub const CHILD: &str = "OMP_PLUGIN_CUDA_FAKE_CHILD";
pub const EM_CUDA: u16 = 190;

/// A minimal cubin: sections null, .data (every symbol's bytes), .symtab, .strtab.
/// `symbols` are (name, ELF symbol type: 1 object, 2 function, bytes).
pub fn cubin(sm: u32, symbols: &[(&str, u8, &[u8])]) -> Vec<u8> {
    let (mut data, mut strtab, mut symtab) = (Vec::new(), vec![0u8], vec![0u8; 24]);
    for (name, kind, bytes) in symbols {
        let name_off = strtab.len() as u32;
        strtab.extend_from_slice(name.as_bytes());
        strtab.push(0);
        symtab.extend_from_slice(&name_off.to_le_bytes());
        symtab.extend_from_slice(&[0x10 | kind, 0]);
        symtab.extend_from_slice(&1u16.to_le_bytes());
        symtab.extend_from_slice(&(data.len() as u64).to_le_bytes());
        symtab.extend_from_slice(&(bytes.len() as u64).to_le_bytes());
        data.extend_from_slice(bytes);
    }
    let symtab_off = 64 + data.len() as u64;
    let strtab_off = symtab_off + symtab.len() as u64;
    let shoff = strtab_off + strtab.len() as u64;
    let mut f = vec![0u8; 64];
    f[..4].copy_from_slice(b"\x7fELF");
    (f[4], f[5], f[6], f[8]) = (2, 1, 1, 8);
    f[16..18].copy_from_slice(&2u16.to_le_bytes());
    f[18..20].copy_from_slice(&EM_CUDA.to_le_bytes());
    f[0x28..0x30].copy_from_slice(&shoff.to_le_bytes());
    f[48..52].copy_from_slice(&(sm << 8).to_le_bytes());
    f[0x3a..0x3c].copy_from_slice(&64u16.to_le_bytes());
    f[0x3c..0x3e].copy_from_slice(&4u16.to_le_bytes());
    f.extend_from_slice(&data);
    f.extend_from_slice(&symtab);
    f.extend_from_slice(&strtab);
    let mut header = |kind: u32, off: u64, size: u64, link: u32, entsize: u64| {
        let mut h = [0u8; 64];
        h[4..8].copy_from_slice(&kind.to_le_bytes());
        h[0x18..0x20].copy_from_slice(&off.to_le_bytes());
        h[0x20..0x28].copy_from_slice(&size.to_le_bytes());
        h[0x28..0x2c].copy_from_slice(&link.to_le_bytes());
        h[0x38..0x40].copy_from_slice(&entsize.to_le_bytes());
        f.extend_from_slice(&h);
    };
    header(0, 0, 0, 0, 0);
    header(1, 64, data.len() as u64, 0, 0);
    header(2, symtab_off, symtab.len() as u64, 3, 24);
    header(3, strtab_off, strtab.len() as u64, 0, 0);
    f
}

/// A kernel environment: mode flags and a teams reduction of `reduction` (bytes, slots).
pub fn environment(mode: u8, reduction: (i32, i32)) -> Vec<u8> {
    let mut b = vec![0u8; 48];
    b[2] = mode;
    for at in [4, 8, 12, 16] {
        b[at..at + 4].copy_from_slice(&(-1i32).to_le_bytes());
    }
    b[20..24].copy_from_slice(&reduction.0.to_le_bytes());
    b[24..28].copy_from_slice(&reduction.1.to_le_bytes());
    b
}

pub fn build_fake(dir: &Path) {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fake-cuda/libcuda.c");
    let o = Command::new("cc")
        .args(["-shared", "-fPIC", "-O1", "-Wall", "-Werror", "-o"])
        .arg(dir.join("libcuda.so.1"))
        .arg(&src)
        .output()
        .expect("cc builds the fake driver");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

/// In the test process: builds the fake, runs the test `name` again as a child with the fake
/// driver and `env`, and returns `None` once the child passed. In the child: the path of the
/// fake's log.
pub fn child_with_fake_driver(name: &str, env: &[(&str, &str)]) -> Option<PathBuf> {
    if let Some(log) = std::env::var_os(CHILD) {
        return Some(PathBuf::from(log));
    }
    run_child(name, env);
    None
}

/// Runs the test `name` again as a child with the fake driver and `env`, checks that it
/// passed, and returns what it wrote to stderr.
pub fn run_child(name: &str, env: &[(&str, &str)]) -> String {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("fake-cuda-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    build_fake(&dir);
    let log = dir.join("driver.log");
    let o = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", name, "--nocapture", "--test-threads=1"])
        .env(CHILD, &log)
        .env("LD_LIBRARY_PATH", &dir)
        .env("FAKE_CUDA_LOG", &log)
        .env_remove("CUDA_VISIBLE_DEVICES")
        .envs(env.iter().copied())
        .output()
        .unwrap();
    let (out, err) = (String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    assert!(o.status.success() && out.contains("1 passed"), "the child run failed:\n{out}\n{err}");
    let _ = std::fs::remove_dir_all(&dir);
    err.into_owned()
}

/// Whether this process is the child a test started with the fake driver.
pub fn in_child() -> bool {
    std::env::var_os(CHILD).is_some()
}
