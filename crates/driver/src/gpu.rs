//! GPU offload targets (`amdgcn-amd-amdhsa`, `nvptx64-nvidia-cuda`), built as clang's own driver
//! builds them: the device compile gets the include paths clang's offload toolchain uses (asked
//! of clang once per language and target, `-###`), emits bitcode, and the device link is a
//! full-LTO link of that bitcode with the GPU device runtime of the same LLVM version
//! (`libomptarget-amdgpu-<arch>.bc`, `libomptarget-nvptx-<arch>.bc`), by `ld.lld` for AMDGPU and
//! by `clang-nvlink-wrapper` (`ptxas`, `nvlink`: a CUDA toolkit) for NVPTX.
//!
//! Everything a GPU link needs is checked before anything is compiled ([`preflight`]), so a
//! missing piece is one error and no half-written output.

use crate::args::{Args, Lang, Mode};
use crate::bail;
use crate::error::{Error, Result};
use crate::exec::Cmd;
use crate::toolchain::{Tool, Toolchain};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex, OnceLock};

/// True for the GPU targets (device code is a GPU code object, not a host shared library).
pub fn is_gpu(triple: &str) -> bool {
    triple.starts_with("amdgcn") || triple.starts_with("nvptx")
}

fn is_amdgpu(triple: &str) -> bool {
    triple.starts_with("amdgcn")
}

/// The full triple for the short spellings LLVM's documentation uses (`amdgcn`, `nvptx64`).
pub fn canonical_triple(t: &str) -> &str {
    match t {
        "amdgcn" | "amdgcn-amd" | "amdgcn-amdhsa" => "amdgcn-amd-amdhsa",
        "nvptx64" | "nvptx64-nvidia" | "nvptx64-cuda" => "nvptx64-nvidia-cuda",
        other => other,
    }
}

/// The target of a GPU architecture name (`--offload-arch=gfx90a` → amdgcn, `sm_80` → nvptx64).
pub fn triple_for_arch(arch: &str) -> Result<&'static str> {
    if arch.starts_with("gfx") {
        Ok("amdgcn-amd-amdhsa")
    } else if arch.starts_with("sm_") {
        Ok("nvptx64-nvidia-cuda")
    } else {
        bail!("unknown offload architecture '{arch}' (expected gfx… for AMD GPUs or sm_… for NVIDIA GPUs)")
    }
}

/// Options only GPU builds use; they are taken out of the host options (clang's spellings).
pub const GPU_PATH_OPTS: [&str; 5] = [
    "--cuda-path",
    "--libomptarget-amdgpu-bc-path",
    "--libomptarget-nvptx-bc-path",
    "--rocm-path",
    "--rocm-device-lib-path",
];

/// The ROCm device libraries (`ocml.bc`, `ockl.bc`, …) when the user asks for them
/// (`--rocm-path=DIR`, `--rocm-device-lib-path=DIR`): the option for clang's AMDGPU device
/// compile, which then links them in instead of `-nogpulib`. `None` when not asked for; an
/// error naming the directory when they are not there.
pub fn rocm_device_libs(args: &Args) -> Result<Option<String>> {
    for (opt, sub) in [("--rocm-device-lib-path", ""), ("--rocm-path", "amdgcn/bitcode")] {
        if let Some(dir) = path_opt(args, opt, "") {
            let libs = if sub.is_empty() { dir.clone() } else { dir.join(sub) };
            if !libs.join("ocml.bc").is_file() {
                bail!(
                    "no ROCm device library in {} (ocml.bc not found there; given by {opt}=): install ROCm's device libraries (rocm-device-libs) or fix {opt}=",
                    libs.display()
                );
            }
            return Ok(Some(format!("{opt}={}", dir.display())));
        }
    }
    Ok(None)
}

/// The value of a GPU path option given on the command line, or of its environment variable.
pub(crate) fn path_opt(args: &Args, name: &str, env: &str) -> Option<PathBuf> {
    let from_args = args.gpu_opts.iter().rev().find_map(|o| o.strip_prefix(name)?.strip_prefix('=').map(PathBuf::from));
    from_args.or_else(|| {
        (!env.is_empty()).then(|| std::env::var_os(env)).flatten().filter(|v| !v.is_empty()).map(PathBuf::from)
    })
}

/// The architecture a GPU target was given, or an error saying how to give one.
pub fn require_arch(triple: &str, arch: &str) -> Result<()> {
    if arch.is_empty() {
        let example = if is_amdgpu(triple) { "gfx90a" } else { "sm_80" };
        bail!(
            "offload target {triple} needs a GPU architecture: add -march={example} to its group (--target-offload={triple} -march={example}), or --offload-arch={example}"
        );
    }
    Ok(())
}

/// The directory of the LLVM installation `clang` belongs to (`/usr/lib/llvm-19`).
fn llvm_root(clang: &Path) -> Option<PathBuf> {
    let real = std::fs::canonicalize(clang).ok()?;
    Some(real.parent()?.parent()?.to_path_buf())
}

/// The GPU device runtime for `triple`/`arch` (LLVM `major`'s), or an error that says what is
/// missing and how to point at one.
pub fn devicertl(args: &Args, clang: &Tool, triple: &str, arch: &str) -> Result<PathBuf> {
    let (opt, family) = if is_amdgpu(triple) {
        ("--libomptarget-amdgpu-bc-path", "amdgpu")
    } else {
        ("--libomptarget-nvptx-bc-path", "nvptx")
    };
    let file = format!("libomptarget-{family}-{arch}.bc");
    // LLVM 20 and later install one archive of bitcode per target instead.
    let per_triple = Path::new(triple).join("libompdevice.a");
    if let Some(p) = path_opt(args, opt, "OMPCC_GPU_DEVICERTL") {
        let p = if p.is_dir() {
            [p.join(&file), p.join(&per_triple), p.join("libompdevice.a")]
                .into_iter()
                .find(|f| f.is_file())
                .unwrap_or_else(|| p.join(&file))
        } else {
            p
        };
        if p.is_file() {
            return Ok(p);
        }
        bail!("GPU device runtime {} not found (given by {opt}= or OMPCC_GPU_DEVICERTL)", p.display());
    }
    let mut dirs: Vec<PathBuf> = Vec::new();
    if let Some(root) = llvm_root(&clang.path) {
        dirs.push(root.join("lib"));
    }
    dirs.push(PathBuf::from(format!("/usr/lib/llvm-{}/lib", clang.major)));
    if clang.major == 19 {
        // A source checkout: scripts/setup.sh extracts libomp-19-dev (it conflicts with
        // libomp-22-dev) into .deps/, next to dist/.
        if let Some(top) =
            std::env::current_exe().ok().and_then(|e| Some(e.parent()?.parent()?.parent()?.to_path_buf()))
        {
            dirs.push(top.join(".deps/libomp-19-dev/usr/lib/llvm-19/lib"));
        }
    }
    dirs.dedup();
    if let Some(p) = dirs.iter().map(|d| d.join(&file)).find(|p| p.is_file()) {
        return Ok(p);
    }
    if clang.major >= 20 {
        if let Some(p) = dirs.iter().map(|d| d.join(&per_triple)).find(|p| p.is_file()) {
            return Ok(p);
        }
    }
    let pkg = if clang.major == 19 { "libomp-19-dev ships it" } else { "Debian ships none for this LLVM version" };
    bail!(
        "no LLVM {} GPU device runtime for {triple} ({arch}): {file}{} is not in {} ({pkg}); point at one with {opt}=FILE|DIR or OMPCC_GPU_DEVICERTL=FILE|DIR{}",
        clang.major,
        if clang.major >= 20 { format!(" (or {})", per_triple.display()) } else { String::new() },
        dirs.iter().map(|d| d.display().to_string()).collect::<Vec<_>>().join(", "),
        if clang.major == 19 { "" } else { ", or build with --clang=clang-19 (libomp-19-dev has LLVM 19's)" }
    )
}

/// The CUDA toolkit an NVPTX device link needs (`ptxas`, `nvlink`).
pub fn cuda_path(args: &Args) -> Result<PathBuf> {
    let given = path_opt(args, "--cuda-path", "OMPCC_CUDA_PATH");
    let has = |d: &Path| d.join("bin/ptxas").is_file() && d.join("bin/nvlink").is_file();
    if let Some(d) = given {
        if has(&d) {
            return Ok(d);
        }
        bail!(
            "no CUDA toolkit at {} (given by --cuda-path= or OMPCC_CUDA_PATH): bin/ptxas and bin/nvlink are needed to link for nvptx64-nvidia-cuda",
            d.display()
        );
    }
    let mut dirs = vec![PathBuf::from("/usr/local/cuda"), PathBuf::from("/usr/lib/cuda")];
    if let Some(d) = crate::toolchain::which("ptxas").and_then(|p| Some(p.parent()?.parent()?.to_path_buf())) {
        dirs.insert(0, d);
    }
    if let Some(d) = dirs.iter().find(|d| has(d)) {
        return Ok(d.clone());
    }
    bail!(
        "offload target nvptx64-nvidia-cuda needs a CUDA toolkit (ptxas and nvlink) to link, and none was found (not on PATH, not in /usr/local/cuda or /usr/lib/cuda); point at one with --cuda-path=DIR or OMPCC_CUDA_PATH=DIR"
    )
}

/// `ld.lld` for an AMDGPU link with `clang`: next to it, or on PATH.
fn check_lld(clang: &Tool) -> Result<()> {
    let next = llvm_root(&clang.path).map(|r| r.join("bin/ld.lld"));
    if next.is_some_and(|p| p.is_file()) || crate::toolchain::which("ld.lld").is_some() {
        return Ok(());
    }
    bail!(
        "linking for amdgcn-amd-amdhsa needs ld.lld, which clang {} does not have: install lld-{} (apt-get install lld-{})",
        clang.major,
        clang.major,
        clang.major
    )
}

/// Checks, before anything is compiled, that every GPU target of a build has an architecture
/// and (when the build links) its device runtime, linker and toolkit.
pub fn preflight(args: &Args, tc: &Toolchain, arch_of: impl Fn(&str) -> String) -> Result<()> {
    for t in args.targets.iter().filter(|t| is_gpu(&t.triple)) {
        let arch = arch_of(&t.triple);
        require_arch(&t.triple, &arch)?;
        if is_amdgpu(&t.triple) {
            rocm_device_libs(args)?;
        }
        if args.mode == Mode::Link && !args.dry_run {
            check_link(args, &tc.clang, &t.triple, &arch)?;
        }
    }
    Ok(())
}

/// What a device link for a GPU target needs, present or one error.
pub fn check_link(args: &Args, clang: &Tool, triple: &str, arch: &str) -> Result<()> {
    require_arch(triple, arch)?;
    devicertl(args, clang, triple, arch)?;
    if is_amdgpu(triple) {
        check_lld(clang)
    } else {
        cuda_path(args).map(|_| ())
    }
}

type IncludeKey = (PathBuf, bool, String, String);
type IncludeCell = Arc<OnceLock<Result<Vec<String>>>>;
static INCLUDES: Mutex<Option<HashMap<IncludeKey, IncludeCell>>> = Mutex::new(None);

/// What clang's own offload device compile for `triple`/`arch` has that a plain
/// `clang --target=<triple>` lacks, as options for the latter: its include paths (the OpenMP
/// wrapper headers, clang's own headers, the host's system headers, in clang's order:
/// `-nostdinc` and `-Xclang` pairs) and, for NVPTX without a CUDA installation, a PTX version
/// the architecture accepts (`ptx_version`). Asked of clang (`--offload-device-only -###`)
/// once per compiler, language and target; sources compiled in parallel wait for the one
/// answer.
pub fn device_options(clang: &Tool, lang: Lang, triple: &str, arch: &str) -> Result<Vec<String>> {
    let cxx = lang == Lang::Cxx;
    let key: IncludeKey = (clang.path.clone(), cxx, triple.to_string(), arch.to_string());
    let cell = {
        let mut m = INCLUDES.lock().map_err(|_| Error::new("internal error: a job panicked"))?;
        m.get_or_insert_with(HashMap::new).entry(key).or_default().clone()
    };
    cell.get_or_init(|| ask_includes(clang, cxx, triple, arch)).clone()
}

fn ask_includes(clang: &Tool, cxx: bool, triple: &str, arch: &str) -> Result<Vec<String>> {
    let out = Command::new(&clang.path)
        .args(["-fopenmp", &format!("--offload-arch={arch}"), "--offload-device-only", "-nogpulib", "-###"])
        .args(["-x", if cxx { "c++" } else { "c" }, "-c", "/dev/null", "-o", "/dev/null"])
        .output()
        .map_err(|e| Error::new(format!("cannot run {}: {e}", clang.path.display())))?;
    let text = String::from_utf8_lossy(&out.stderr);
    let want = format!("\"-triple\" \"{triple}\"");
    let Some(line) = text.lines().find(|l| l.contains("\"-cc1\"") && l.contains(&want)) else {
        bail!(
            "{} does not say how it compiles for {triple} ({arch}): {}",
            clang.path.display(),
            text.lines().find(|l| l.contains("error")).unwrap_or("no device compile in its -### output")
        );
    };
    let words = split_quoted(line);
    let mut v = vec!["-nostdinc".to_string()];
    v.extend(ptx_version(triple, &words));
    let mut i = 0;
    while i + 1 < words.len() {
        if matches!(words[i].as_str(), "-internal-isystem" | "-internal-externc-isystem" | "-include") {
            v.extend(["-Xclang".to_string(), words[i].clone(), "-Xclang".to_string(), words[i + 1].clone()]);
            i += 2;
        } else {
            i += 1;
        }
    }
    Ok(v)
}

/// Without a CUDA installation clang (19 to 22) asks for PTX 4.2 (`+ptx42`), which LLVM 22's
/// NVPTX back end refuses for sm_60 and later ("PTX version 4.2 does not support target
/// 'sm_80'", a crash even under `-emit-llvm`). `--cuda-feature=` (empty) takes
/// clang's choice away, and the back end then uses the lowest PTX version the architecture
/// supports (7.0 for sm_80, 7.8 for sm_90). With a CUDA installation, clang's choice (that
/// CUDA's PTX version) stays.
fn ptx_version(triple: &str, device_cc1: &[String]) -> Option<String> {
    let no_cuda = device_cc1.windows(2).any(|w| w[0] == "-target-feature" && w[1] == "+ptx42");
    (triple.starts_with("nvptx") && no_cuda).then(|| "--cuda-feature=".to_string())
}

/// The words of one line of clang's `-###` output (each in double quotes, `\` escapes).
fn split_quoted(line: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut cur: Option<String> = None;
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match (c, cur.as_mut()) {
            ('"', None) => cur = Some(String::new()),
            ('"', Some(_)) => words.extend(cur.take()),
            ('\\', Some(w)) => w.extend(chars.next()),
            (c, Some(w)) => w.push(c),
            _ => {}
        }
    }
    words
}

/// The device link of a GPU target: full LTO of the device bitcode with the device runtime
/// (taken like an archive member: only what the device code needs), into one code object.
pub fn link_command(args: &Args, clang: &Tool, triple: &str, arch: &str, objs: &[String], out: &Path) -> Result<Cmd> {
    // `-###` shows the plan even where a piece is missing (named in the command and a note).
    let missing = |e: Error, what: &str| -> Result<PathBuf> {
        if !args.dry_run {
            return Err(e);
        }
        crate::diag::line(&format!("# ompcc: a real build would stop here: {e}"));
        Ok(PathBuf::from(format!("<{what} not found>")))
    };
    if let Err(e) = require_arch(triple, arch) {
        missing(e, "arch")?;
    }
    let rtl = devicertl(args, clang, triple, arch).or_else(|e| missing(e, "GPU device runtime"))?;
    if is_amdgpu(triple) {
        if let Err(e) = check_lld(clang) {
            missing(e, "ld.lld")?;
        }
    }
    let mut c = Cmd::new(clang.path.to_string_lossy(), format!("device link for offload target {triple}"));
    c.note = Some(format!("link: pipeline for offload target {triple}"));
    c.arg(format!("--target={triple}")).arg(format!("-march={arch}"));
    let opt = args.host_opts().filter(|o| o[0].starts_with("-O")).last().map_or("-O2".to_string(), |o| o[0].clone());
    c.arg(opt);
    if args.host_opts().any(|o| o[0].starts_with("-g") && o[0] != "-g0") {
        c.arg("-g");
    }
    // AMDGPU: ld.lld does the LTO when asked. NVPTX: clang-nvlink-wrapper always runs LTO on
    // bitcode inputs, and `-flto` would make clang's driver hand it a gold `-plugin` argument
    // that it takes for an input file ("Unsupported file type").
    if is_amdgpu(triple) {
        c.arg("-flto");
    }
    if args.verbose {
        c.arg("-v");
    }
    // The bitcode goes to the linker as it is (`-Xlinker`): given as plain inputs, clang's
    // driver would first run the optimisation pipeline over each file again, the device runtime
    // included (4× the time of the whole link). The linker's LTO is the only optimisation, as in
    // clang's linker wrapper.
    for o in objs {
        c.args(["-Xlinker", o]);
    }
    if is_amdgpu(triple) {
        c.arg("-Wl,--no-undefined");
        c.args(["-Xlinker", "--start-lib", "-Xlinker"]).arg(rtl.to_string_lossy()).args(["-Xlinker", "--end-lib"]);
    } else {
        c.arg(format!("--cuda-path={}", cuda_path(args).or_else(|e| missing(e, "CUDA toolkit"))?.display()));
        c.arg("-Xlinker").arg(rtl.to_string_lossy());
    }
    if let Some(g) = args.targets.iter().find(|t| t.triple == triple) {
        for o in &g.opts {
            if o[0].starts_with("-Wl,") || o[0] == "-Xlinker" {
                c.args(o.iter().cloned());
            }
        }
    }
    c.arg("-o").arg(out.to_string_lossy());
    Ok(c)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_triples_and_arches() {
        assert_eq!(canonical_triple("amdgcn"), "amdgcn-amd-amdhsa");
        assert_eq!(canonical_triple("nvptx64"), "nvptx64-nvidia-cuda");
        assert_eq!(canonical_triple("x86_64-pc-linux-gnu"), "x86_64-pc-linux-gnu");
        assert_eq!(triple_for_arch("gfx90a").unwrap(), "amdgcn-amd-amdhsa");
        assert_eq!(triple_for_arch("sm_80").unwrap(), "nvptx64-nvidia-cuda");
        assert!(triple_for_arch("znver4").unwrap_err().0.contains("gfx"));
        assert!(is_gpu("amdgcn-amd-amdhsa") && is_gpu("nvptx64-nvidia-cuda") && !is_gpu("x86_64-pc-linux-gnu"));
    }

    #[test]
    fn clang_spellings_make_gpu_groups() {
        let p = |s: &str| {
            let v: Vec<String> = s.split_whitespace().map(String::from).collect();
            crate::args::parse("ompcc", &v).unwrap()
        };
        let a = p("-fopenmp --offload-arch=gfx90a,sm_80 --cuda-path=/c a.c");
        assert_eq!(a.targets.len(), 2);
        assert_eq!(a.targets[0].triple, "amdgcn-amd-amdhsa");
        assert_eq!(a.targets[0].opts, vec![vec!["-march=gfx90a".to_string()]]);
        assert_eq!(a.targets[1].triple, "nvptx64-nvidia-cuda");
        assert_eq!(a.gpu_opts, ["--cuda-path=/c"]);
        assert_eq!(a.host_opts().count(), 0);
        let a = p("-fopenmp-targets=x86_64-pc-linux-gnu,amdgcn -Xopenmp-target=amdgcn-amd-amdhsa -march=gfx90a a.c");
        assert_eq!(a.targets[1].triple, "amdgcn-amd-amdhsa");
        assert_eq!(a.targets[1].opts, vec![vec!["-march=gfx90a".to_string()]]);
        let a = p("--target-offload=nvptx64 -march=sm_80 --target-offload=nvptx64-nvidia-cuda -O3 a.c");
        assert_eq!(a.targets.len(), 1);
    }

    #[test]
    fn quoted_words() {
        let w = split_quoted(r#" "/usr/bin/clang" "-cc1" "-internal-isystem" "/a b/\"c\"" "-include" "x.h""#);
        assert_eq!(w, ["/usr/bin/clang", "-cc1", "-internal-isystem", "/a b/\"c\"", "-include", "x.h"]);
    }

    #[test]
    fn nvptx_without_cuda_lets_the_back_end_pick_the_ptx_version() {
        let cc1 = |feature: &str| -> Vec<String> {
            let line = format!(
                r#" "/usr/bin/clang-22" "-cc1" "-triple" "nvptx64-nvidia-cuda" "-target-cpu" "sm_80" "-target-feature" "{feature}" "-target-feature" "+sm_80""#
            );
            split_quoted(&line)
        };
        assert_eq!(ptx_version("nvptx64-nvidia-cuda", &cc1("+ptx42")).as_deref(), Some("--cuda-feature="));
        // A CUDA installation's PTX version is clang's to keep.
        assert_eq!(ptx_version("nvptx64-nvidia-cuda", &cc1("+ptx84")), None);
        assert_eq!(ptx_version("amdgcn-amd-amdhsa", &cc1("+ptx42")), None);
    }

    #[test]
    fn missing_arch_says_how() {
        let e = require_arch("amdgcn-amd-amdhsa", "").unwrap_err();
        assert!(e.0.contains("-march=gfx90a") && e.0.contains("--offload-arch"), "{e}");
        assert!(require_arch("nvptx64-nvidia-cuda", "sm_80").is_ok());
    }
}
