//! Device LTO for flang 22 on the CPU target: the device code is compiled to bitcode, merged with
//! the CPU device runtime's bitcode (`libomptarget.devicertl.bc`, built from the same Rust
//! sources as the archive by rustc's LLVM 22) and optimised as one module. Flang outlines each
//! loop body and hands it to `__kmpc_*_static_loop_*` as a callback; in one module LLVM inlines
//! the loop entry point into flang's code, the callback into the loop, and vectorises the loop,
//! as it does for a host `parallel do`.
//!
//! Only LLVM 22 reads the runtime's bitcode, so flang 19 (and builds without the bitcode or
//! without `llvm-link`) keep the native archive. `OMPCC_DEVICE_LTO=0` turns this off.

use crate::exec::Cmd;
use crate::toolchain::{is_cpu_target, which, Tool};
use std::path::{Path, PathBuf};

/// The LLVM major version the runtime bitcode is written by (rustc's LLVM); readers must be at
/// least this new.
pub const BITCODE_LLVM: u32 = 22;

/// What a device LTO link needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceLto {
    pub llvm_link: PathBuf,
    pub runtime: PathBuf,
}

/// Whether device code for `triple` compiled by `tool` goes through device LTO, and with what.
pub fn for_target(tool: &Tool, triple: &str, runtime_dir: Option<&str>) -> Option<DeviceLto> {
    if !is_cpu_target(triple) || tool.major < BITCODE_LLVM || disabled() {
        return None;
    }
    let runtime = crate::runtime::cpu_devicertl_bitcode(runtime_dir)?;
    Some(DeviceLto { llvm_link: llvm_link(tool)?, runtime })
}

/// `OMPCC_DEVICE_LTO=0` (or `off`/`no`): keep the archive.
fn disabled() -> bool {
    std::env::var("OMPCC_DEVICE_LTO").is_ok_and(|v| matches!(v.trim(), "0" | "off" | "no" | "false"))
}

/// `llvm-link` of the same LLVM as `tool`: next to its real path, else `llvm-link-NN` on PATH.
fn llvm_link(tool: &Tool) -> Option<PathBuf> {
    let real = std::fs::canonicalize(&tool.path).ok();
    let beside = real.as_deref().and_then(Path::parent).map(|d| d.join("llvm-link")).filter(|p| p.is_file());
    beside.or_else(|| which(&format!("llvm-link-{}", tool.major)))
}

/// True if `path` holds LLVM bitcode (raw or in the wrapper format).
pub fn is_bitcode(bytes: &[u8]) -> bool {
    bytes.starts_with(b"BC\xC0\xDE") || bytes.starts_with(&[0xDE, 0xC0, 0x17, 0x0B])
}

/// The two commands that turn the device bitcode `inputs` into one native object `out`:
/// `llvm-link` with the runtime, then `compiler -c` of the merged module with the link's
/// optimisation and debug options (`opts`).
pub fn commands(
    lto: &DeviceLto,
    compiler: &Tool,
    triple: &str,
    inputs: &[String],
    opts: &[String],
    merged: &Path,
    out: &Path,
) -> [Cmd; 2] {
    let mut link =
        Cmd::new(lto.llvm_link.to_string_lossy(), format!("device LTO: merging the device code for {triple}"));
    // The runtime's module says x86_64-unknown-linux-gnu (rustc's name for the same target).
    link.arg("--suppress-warnings");
    link.args(inputs.iter().cloned()).arg(lto.runtime.to_string_lossy());
    link.arg("-o").arg(merged.to_string_lossy());
    let mut cc =
        Cmd::new(compiler.path.to_string_lossy(), format!("device LTO: optimising the device code for {triple}"));
    cc.arg(format!("--target={triple}")).arg("-fPIC");
    cc.args(opts.iter().cloned());
    // LLVM's OpenMP optimisation pass (GPU-oriented) makes internal copies of the runtime's loop
    // entry points and propagates the callback into them; the body then has two users when the
    // inliner reaches it, loses the one-caller bonus, and bodies with inner loops stay calls.
    cc.args(["-mllvm", "-openmp-opt-disable"]);
    cc.arg("-c").arg(merged.to_string_lossy()).arg("-o").arg(out.to_string_lossy());
    [link, cc]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bitcode_magic() {
        assert!(is_bitcode(b"BC\xC0\xDE\x35\x14"));
        assert!(is_bitcode(&[0xDE, 0xC0, 0x17, 0x0B, 0, 0]));
        assert!(!is_bitcode(b"\x7fELF\x02\x01"));
        assert!(!is_bitcode(b"BC"));
    }

    #[test]
    fn only_cpu_targets_and_llvm_22() {
        let old = Tool { path: PathBuf::from("/nonexistent/flang-new-19"), major: 19 };
        assert_eq!(for_target(&old, "x86_64-pc-linux-gnu", None), None);
        let new = Tool { path: PathBuf::from("/nonexistent/flang-new-22"), major: 22 };
        assert_eq!(for_target(&new, "nvptx64-nvidia-cuda", None), None);
    }
}
