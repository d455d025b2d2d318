//! Finding clang and flang: `--clang=`/`--flang=`, `OMPCC_CLANG`/`OMPCC_FLANG`, else the
//! newest of versions 22 and 19 on this machine.

use crate::bail;
use crate::error::{Error, Result};
use std::path::{Path, PathBuf};
use std::process::Command;

/// LLVM versions ompcc knows, newest first.
pub const VERSIONS: [u32; 2] = [22, 19];

/// Offload targets ompcc knows.
pub const TRIPLES: [&str; 3] = ["x86_64-pc-linux-gnu", "nvptx64-nvidia-cuda", "amdgcn-amd-amdhsa"];

/// A compiler and its LLVM major version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tool {
    pub path: PathBuf,
    pub major: u32,
}

/// The compilers a build uses.
#[derive(Debug, Clone)]
pub struct Toolchain {
    pub clang: Tool,
    flang: std::result::Result<Tool, String>,
}

impl Toolchain {
    /// Finds clang now and flang too (but reports a missing flang only when Fortran needs it).
    pub fn find(clang: Option<&str>, flang: Option<&str>) -> Result<Toolchain> {
        let env_clang = std::env::var("OMPCC_CLANG").ok().filter(|s| !s.is_empty());
        let env_flang = std::env::var("OMPCC_FLANG").ok().filter(|s| !s.is_empty());
        let clang = match clang.map(str::to_string).or(env_clang) {
            Some(p) => explicit(&p, "clang")?,
            None => newest(&["clang-{}"], None, "/usr/lib/llvm-{}/bin/clang").ok_or_else(|| {
                Error::new(
                    "no clang found: install clang-22 or clang-19 (apt-get install clang-22), or pass --clang=PATH",
                )
            })?,
        };
        let flang = match flang.map(str::to_string).or(env_flang) {
            Some(p) => explicit(&p, "flang").map_err(|e| e.0),
            None => newest(&["flang-new-{}", "flang-{}"], Some(clang.major), "/usr/lib/llvm-{}/bin/flang").ok_or_else(
                || {
                    "no flang found: install flang-22 or flang-19 (apt-get install flang-22), or pass --flang=PATH"
                        .into()
                },
            ),
        };
        Ok(Toolchain { clang, flang })
    }

    /// The compilers given, found by nobody: for planning a build (or testing a phase) without
    /// looking for compilers on this machine.
    pub fn of(clang: Tool, flang: Option<Tool>) -> Toolchain {
        Toolchain { clang, flang: flang.ok_or_else(|| "no flang given".to_string()) }
    }

    /// flang, or why it is missing.
    pub fn flang(&self) -> Result<&Tool> {
        self.flang.as_ref().map_err(|e| Error::new(e.clone()))
    }
}

/// Checks that `triple` is an offload target ompcc supports.
pub fn check_triple(triple: &str) -> Result<()> {
    if TRIPLES.contains(&triple) {
        return Ok(());
    }
    bail!("unsupported offload target '{triple}' (supported: {})", TRIPLES.join(", "))
}

/// True for targets that run on the host CPU (device code is a shared library).
pub fn is_cpu_target(triple: &str) -> bool {
    triple.starts_with("x86_64")
}

fn explicit(p: &str, what: &str) -> Result<Tool> {
    let path = if p.contains('/') { Some(PathBuf::from(p)).filter(|p| p.is_file()) } else { which(p) };
    let Some(path) = path else {
        bail!(
            "{what} '{p}' not found: install {what}-22 or {what}-19, or fix --{what}= / OMPCC_{}",
            what.to_uppercase()
        )
    };
    let major = version_from_name(&path).or_else(|| version_from_run(&path)).ok_or_else(|| {
        Error::new(format!("cannot tell the LLVM version of {what} '{}' (its --version did not say)", path.display()))
    })?;
    Ok(Tool { path, major })
}

fn newest(patterns: &[&str], prefer: Option<u32>, fallback: &str) -> Option<Tool> {
    let mut order: Vec<u32> = prefer.into_iter().collect();
    order.extend(VERSIONS.iter().copied().filter(|v| Some(*v) != prefer));
    for v in order {
        for pat in patterns {
            if let Some(path) = which(&pat.replace("{}", &v.to_string())) {
                return Some(Tool { path, major: v });
            }
        }
        for suffix in ["", "-new"] {
            let p = PathBuf::from(format!("{}{suffix}", fallback.replace("{}", &v.to_string())));
            if p.is_file() {
                return Some(Tool { path: p, major: v });
            }
        }
    }
    None
}

/// `clang-22` → 22.
fn version_from_name(path: &Path) -> Option<u32> {
    let name = path.file_name()?.to_str()?;
    let (_, v) = name.rsplit_once('-')?;
    v.parse().ok().filter(|v| *v >= 10)
}

/// Runs `tool --version` and reads "version NN." from it.
fn version_from_run(path: &Path) -> Option<u32> {
    let out = Command::new(path).arg("--version").output().ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    let rest = text.split("version ").nth(1)?;
    rest.split('.').next()?.trim().parse().ok()
}

/// The first `name` on PATH.
pub fn which(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).map(|d| d.join(name)).find(|p| p.is_file())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_from_names() {
        assert_eq!(version_from_name(Path::new("/usr/bin/clang-22")), Some(22));
        assert_eq!(version_from_name(Path::new("flang-new-19")), Some(19));
        assert_eq!(version_from_name(Path::new("clang")), None);
    }

    #[test]
    fn triples() {
        assert!(check_triple("x86_64-pc-linux-gnu").is_ok());
        let e = check_triple("sparc-sun-solaris").unwrap_err();
        assert!(e.0.contains("x86_64-pc-linux-gnu"), "{e}");
    }
}
