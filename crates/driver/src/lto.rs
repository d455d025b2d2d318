//! Device LTO for flang 22 on the CPU target: the device code is compiled to bitcode, merged with
//! the CPU device runtime's bitcode (`libomptarget.devicertl.bc`, built from the same Rust
//! sources as the archive by rustc's LLVM 22) and optimised as one module. Flang outlines each
//! loop body and hands it to `__kmpc_*_static_loop_*` as a callback; in one module LLVM inlines
//! the loop entry point into flang's code, the callback into the loop, and vectorises the loop,
//! as it does for a host `parallel do`.
//!
//! The runtime's bitcode is written by LLVM 22, which reads the bitcode of older LLVMs but not the
//! other way round: the merge and the optimisation always run with LLVM 22 tools (`llvm-link`
//! and the compiler next to flang 22, or `llvm-link-22`/`clang-22` for flang 19). Two bitcode
//! files exist because the loop entry points' signatures changed in LLVM 22 (a trailing `i8`),
//! and LLVM only inlines a call whose type matches the definition: `libomptarget.devicertl.bc`
//! for LLVM 22 code, `libomptarget.devicertl.llvm19.bc` for older. Without the LLVM 22 tools or
//! the bitcode, the native archive is linked as before. `OMPCC_DEVICE_LTO=0` turns this off.

use crate::exec::Cmd;
use crate::toolchain::{is_cpu_target, which, Tool};
use std::path::{Path, PathBuf};

/// The LLVM major version the runtime bitcode is written by (rustc's LLVM): the tools that read
/// it must be at least this new.
pub const BITCODE_LLVM: u32 = 22;

/// What a device LTO link needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceLto {
    pub llvm_link: PathBuf,
    /// `llvm-objcopy` of the same LLVM (takes the bitcode out of fat objects).
    pub objcopy: PathBuf,
    /// An LLVM 22 (or later) compiler driver that turns the merged module into an object.
    pub compiler: PathBuf,
    pub runtime: PathBuf,
}

/// The runtime bitcode file for device code made by LLVM `major`.
pub fn runtime_name(major: u32) -> &'static str {
    if major >= 22 {
        "libomptarget.devicertl.bc"
    } else {
        "libomptarget.devicertl.llvm19.bc"
    }
}

/// Whether device code for `triple` made by `producer` goes through device LTO, and with what.
pub fn for_target(producer: &Tool, triple: &str, runtime_dir: Option<&str>) -> Option<DeviceLto> {
    if !is_cpu_target(triple) || producer.major < 19 || disabled() {
        return None;
    }
    let runtime = crate::runtime::cpu_devicertl_bitcode(runtime_dir, runtime_name(producer.major))?;
    let (llvm_link, compiler) = if producer.major >= BITCODE_LLVM {
        (
            beside(&producer.path, "llvm-link").or_else(|| which(&format!("llvm-link-{}", producer.major)))?,
            producer.path.clone(),
        )
    } else {
        newest_llvm_tools()?
    };
    let name = llvm_link.file_name()?.to_str()?.replace("llvm-link", "llvm-objcopy");
    let objcopy = llvm_link.with_file_name(name);
    Some(DeviceLto { llvm_link, objcopy, compiler, runtime })
}

/// `OMPCC_DEVICE_LTO=0` (or `off`/`no`/`false`): keep the archive.
fn disabled() -> bool {
    std::env::var("OMPCC_DEVICE_LTO").is_ok_and(|v| matches!(v.trim(), "0" | "off" | "no" | "false"))
}

/// `name` in the directory of `tool`'s real path (`/usr/bin/flang-new-22` -> `/usr/lib/llvm-22/bin`).
fn beside(tool: &Path, name: &str) -> Option<PathBuf> {
    let real = std::fs::canonicalize(tool).ok()?;
    Some(real.parent()?.join(name)).filter(|p| p.is_file())
}

/// `llvm-link` and `clang` of LLVM 22 (the only version ompcc knows that reads the bitcode).
fn newest_llvm_tools() -> Option<(PathBuf, PathBuf)> {
    let v = BITCODE_LLVM;
    let dir = PathBuf::from(format!("/usr/lib/llvm-{v}/bin"));
    let link = which(&format!("llvm-link-{v}")).or_else(|| Some(dir.join("llvm-link")).filter(|p| p.is_file()))?;
    let clang = which(&format!("clang-{v}")).or_else(|| Some(dir.join("clang")).filter(|p| p.is_file()))?;
    Some((link, clang))
}

/// Whether `producer` can write fat LTO objects (a native object that also carries its bitcode in
/// a `.llvm.lto` section), which `ompcc -c` uses for device code: any linker can link the native
/// code, and ompcc's link takes the bitcode for device LTO. flang 19 has no fat LTO objects.
pub fn fat_objects(producer: &Tool) -> bool {
    producer.major >= BITCODE_LLVM
}

/// True if `bytes` (an ELF object) may carry a `.llvm.lto` section (fat LTO object): its name
/// is in the section-name table. A cheap filter before asking objcopy for the section.
pub fn may_be_fat(bytes: &[u8]) -> bool {
    bytes.starts_with(b"\x7fELF") && bytes.windows(9).any(|w| w == b".llvm.lto")
}

/// The command that writes the `.llvm.lto` section of the fat object `obj` to `out`.
pub fn extract_command(lto: &DeviceLto, obj: &Path, out: &Path) -> Cmd {
    let mut c =
        Cmd::new(lto.objcopy.to_string_lossy(), format!("device LTO: reading the bitcode of {}", obj.display()));
    c.arg("--dump-section").arg(format!(".llvm.lto={}", out.display())).arg(obj.to_string_lossy());
    c
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
        Cmd::new(lto.compiler.to_string_lossy(), format!("device LTO: optimising the device code for {triple}"));
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
    fn cpu_targets_only_and_bitcode_per_abi() {
        let new = Tool { path: PathBuf::from("/nonexistent/flang-new-22"), major: 22 };
        assert_eq!(for_target(&new, "nvptx64-nvidia-cuda", None), None);
        assert_eq!(runtime_name(22), "libomptarget.devicertl.bc");
        assert_eq!(runtime_name(19), "libomptarget.devicertl.llvm19.bc");
    }
}
