//! Where libomptarget (and the CPU device runtime) come from: `--runtime-dir=` or
//! `OMPCC_RUNTIME_DIR`, else `../lib` next to the ompcc binary (our runtime), else LLVM's.

use crate::bail;
use crate::error::Result;
use std::path::{Path, PathBuf};

/// The runtime a host link uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Runtime {
    /// The directory holding libomptarget (goes to `-L` and the run path).
    pub dir: PathBuf,
    /// The file to link, by name (`libomptarget.so.22.1`): its name is the soname the program
    /// asks for, so `LD_LIBRARY_PATH` can swap runtimes of the same ABI.
    pub lib: String,
}

/// Finds libomptarget for the offload-entry ABI of LLVM `abi_major` (19 or 22).
pub fn find(explicit: Option<&str>, abi_major: u32, clang: &Path) -> Result<Runtime> {
    let versioned = format!("libomptarget.so.{abi_major}.1");
    let env = std::env::var("OMPCC_RUNTIME_DIR").ok().filter(|s| !s.is_empty());
    if let Some(dir) = explicit.map(str::to_string).or(env) {
        let dir = PathBuf::from(dir);
        for lib in [versioned.as_str(), "libomptarget.so"] {
            if dir.join(lib).exists() {
                return Ok(Runtime { dir, lib: lib.to_string() });
            }
        }
        bail!("runtime directory {} holds neither {versioned} nor libomptarget.so", dir.display());
    }
    if let Some(dir) = own_lib_dir() {
        if dir.join(&versioned).exists() {
            return Ok(Runtime { dir, lib: versioned });
        }
    }
    let llvm_lib = llvm_lib_dir(clang);
    let candidates = [llvm_lib, Some(PathBuf::from(format!("/usr/lib/llvm-{abi_major}/lib")))];
    for dir in candidates.into_iter().flatten() {
        if dir.join(&versioned).exists() {
            return Ok(Runtime { dir, lib: versioned });
        }
    }
    bail!(
        "libomptarget for LLVM {abi_major} not found: install {} or set OMPCC_RUNTIME_DIR",
        if abi_major >= 20 { format!("liboffload-{abi_major}") } else { format!("libomp5-{abi_major}") }
    )
}

/// The CPU device runtime (`libomptarget.devicertl.a`) next to ours, or in the chosen runtime
/// directory, linked into x86_64 device links when present.
pub fn cpu_devicertl(explicit: Option<&str>) -> Option<PathBuf> {
    let env = std::env::var("OMPCC_RUNTIME_DIR").ok().filter(|s| !s.is_empty());
    let dirs = [explicit.map(PathBuf::from).or(env.map(PathBuf::from)), own_lib_dir()];
    dirs.into_iter().flatten().map(|d| d.join("libomptarget.devicertl.a")).find(|p| p.is_file() && !is_gpu_only(p))
}

/// The CPU device runtime as bitcode (`name`, see [`crate::lto::runtime_name`]), found like the
/// archive: flang's device code is linked with it in one LTO module (see [`crate::lto`]).
pub fn cpu_devicertl_bitcode(explicit: Option<&str>, name: &str) -> Option<PathBuf> {
    let env = std::env::var("OMPCC_RUNTIME_DIR").ok().filter(|s| !s.is_empty());
    let dirs = [explicit.map(PathBuf::from).or(env.map(PathBuf::from)), own_lib_dir()];
    dirs.into_iter().flatten().map(|d| d.join(name)).find(|p| p.is_file())
}

/// LLVM's own devicertl archive (clang 19) only holds GPU bitcode; it is no use to a CPU link.
fn is_gpu_only(p: &Path) -> bool {
    std::fs::read(p).map(|d| d.windows(16).any(|w| w == b"devicertl-amdgpu")).unwrap_or(false)
}

/// How a link names the runtime: by its path when the file carries its own name as SONAME (ours
/// and LLVM's do), so the program records that name and CMake's FindOpenMP, which reads the
/// link line of `-v`, finds the library (it cannot resolve `-l:NAME`); else by `-l:NAME`, which
/// records the name without the directory.
pub fn link_args(rt: &Runtime) -> Vec<String> {
    let path = rt.dir.join(&rt.lib);
    if has_soname(&path, &rt.lib) {
        vec![format!("-L{}", rt.dir.display()), path.to_string_lossy().into_owned()]
    } else {
        vec![format!("-L{}", rt.dir.display()), format!("-l:{}", rt.lib)]
    }
}

/// True when `name` followed by NUL is among the first 1 MiB of `path` (where `.dynstr`, which
/// holds the SONAME, lies in a shared library).
fn has_soname(path: &Path, name: &str) -> bool {
    let mut head = Vec::new();
    let Ok(f) = std::fs::File::open(path) else { return false };
    if std::io::Read::read_to_end(&mut std::io::Read::take(f, 1 << 20), &mut head).is_err() {
        return false;
    }
    let needle = format!("{name}\0");
    head.windows(needle.len()).any(|w| w == needle.as_bytes())
}

/// `<dir of ompcc>/../lib`.
fn own_lib_dir() -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    Some(exe.parent()?.parent()?.join("lib"))
}

/// `/usr/lib/llvm-NN/lib` for `/usr/bin/clang-NN` (following symlinks).
fn llvm_lib_dir(clang: &Path) -> Option<PathBuf> {
    let real = std::fs::canonicalize(clang).ok()?;
    Some(real.parent()?.parent()?.join("lib"))
}
