//! Compiles that are one clang (or flang) command, as clang's own driver runs them:
//!
//! * assembly (`.s`, `.S`) and LLVM IR (`.ll`, `.bc`): clang runs no offload phase for them, it
//!   compiles them for the host. A file written by an offloading compile (`-S`, `-c -emit-llvm`)
//!   carries its device images in a `.llvm.offloading` section; the object made from it keeps
//!   that section, so the link finds them as in any other object. A clang-offload-bundler bundle
//!   (clang's old offload driver) is refused: its device parts would be lost;
//! * `-fsyntax-only`: the compiler checks the source for the host, then for each offload target
//!   (one command each, so a failure names its target); each target gets its group's options
//!   through `-Xopenmp-target=T` (clang only).

use crate::args::{Input, Lang};
use crate::bail;
use crate::classify::{classify, Class};
use crate::error::Result;
use crate::exec::Cmd;
use crate::pipeline::{Compiled, Ctx, Emit};
use crate::temps::stem;
use std::io::Read;
use std::path::{Path, PathBuf};

/// Runs the one command for `input`; `out` is the final file for `-E/-S/-c`.
pub fn compile(ctx: &Ctx, input: &Input, lang: Lang, emit: Emit, out: Option<&Path>) -> Result<Compiled> {
    let tool = ctx.tool(lang)?;
    let name = &input.path;
    if lang.host_only() {
        refuse_old_bundle(name)?;
    }
    if emit == Emit::SyntaxOnly && !lang.host_only() && ctx.args.offloading() {
        return syntax_check(ctx, input, lang);
    }
    let mut c = Cmd::new(tool.path.to_string_lossy(), format!("{name}: compile"));
    if ctx.args.openmp && !lang.host_only() {
        c.arg("-fopenmp");
    }
    for o in ctx.args.host_opts().filter(|o| !matches!(classify(o), Class::Link | Class::Deps)) {
        c.args(o.iter().cloned());
    }
    c.args(crate::depfile::host_args(ctx.args, input));
    if ctx.args.verbose {
        c.arg("-v");
    }
    let host: Option<PathBuf> = match emit {
        Emit::SyntaxOnly => {
            c.arg("-fsyntax-only");
            None
        }
        Emit::Preprocessed => {
            c.arg("-E");
            out.map(Path::to_path_buf)
        }
        Emit::Assembly => {
            c.arg("-S");
            Some(out.map_or_else(|| ctx.temps.path(&stem(name), "s"), Path::to_path_buf))
        }
        Emit::Object | Emit::ForLink => {
            c.arg("-c");
            Some(out.map_or_else(|| ctx.temps.path(&stem(name), "o"), Path::to_path_buf))
        }
    };
    if let Some(x) = &input.x {
        c.arg("-x").arg(x.clone());
    }
    c.arg(name.clone());
    if let Some(h) = &host {
        c.arg("-o").arg(h.to_string_lossy());
    }
    ctx.runner.run(&c)?;
    Ok(Compiled { host: host.unwrap_or_default(), devices: Vec::new(), dt: None, gpu: None })
}

/// `-fsyntax-only` of an offloading build: the compiler checks the source for the host first
/// (`--offload-host-only`), then for each offload target (`--offload-device-only`, side by
/// side), so a failure names its target as `-c` does ("a.c: compile for offload target T
/// failed") and an error in code both compile is reported once. Each target gets its group's
/// options (`-Xopenmp-target=T`, clang only: flang has none).
fn syntax_check(ctx: &Ctx, input: &Input, lang: Lang) -> Result<Compiled> {
    let (host, devices) = syntax_commands(ctx, input, lang)?;
    ctx.runner.run(&host)?;
    crate::pipeline::run_all(ctx.runner, devices.iter())?;
    Ok(Compiled { host: PathBuf::new(), devices: Vec::new(), dt: None, gpu: None })
}

/// The commands of [`syntax_check`]: the host's, then one per offload target.
fn syntax_commands(ctx: &Ctx, input: &Input, lang: Lang) -> Result<(Cmd, Vec<Cmd>)> {
    let tool = ctx.tool(lang)?;
    let name = &input.path;
    let all: Vec<&str> = ctx.args.targets.iter().map(|t| t.triple.as_str()).collect();
    let command = |what: String, triples: &[&str], which: &str, extra: Vec<String>, deps: bool| {
        let mut c = Cmd::new(tool.path.to_string_lossy(), what);
        c.arg("-fopenmp").arg(format!("-fopenmp-targets={}", triples.join(","))).arg(which);
        c.args(extra);
        for o in ctx.args.host_opts().filter(|o| !matches!(classify(o), Class::Link | Class::Deps)) {
            c.args(o.iter().cloned());
        }
        if deps {
            c.args(crate::depfile::host_args(ctx.args, input));
        }
        if ctx.args.verbose {
            c.arg("-v");
        }
        c.arg("-fsyntax-only");
        if let Some(x) = &input.x {
            c.arg("-x").arg(x.clone());
        }
        c.arg(name.clone());
        c
    };
    let host = command(format!("{name}: host compile"), &all, "--offload-host-only", Vec::new(), true);
    let mut devices = Vec::new();
    for t in &ctx.args.targets {
        let mut group = Vec::new();
        if lang != Lang::Fortran && crate::gpu::is_gpu(&t.triple) {
            // As the device compile of -c: no CUDA or ROCm bitcode libraries (nothing is linked).
            match crate::gpu::rocm_device_libs(ctx.args)? {
                Some(rocm) if t.triple.starts_with("amdgcn") => group.push(rocm),
                _ => group.push("-nogpulib".to_string()),
            }
        }
        for o in t.opts.iter().filter(|o| lang != Lang::Fortran && !matches!(classify(o), Class::Link | Class::Deps)) {
            for a in joined(o) {
                group.extend([format!("-Xopenmp-target={}", t.triple), a]);
            }
        }
        let what = format!("{name}: compile for offload target {}", t.triple);
        devices.push(command(what, &[t.triple.as_str()], "--offload-device-only", group, false));
    }
    Ok((host, devices))
}

/// `-I dir` → `-Idir`: `-Xopenmp-target=T` passes one argument.
fn joined(o: &[String]) -> Vec<String> {
    match o {
        [flag, value] if matches!(flag.as_str(), "-I" | "-D" | "-U" | "-L" | "-l") => vec![format!("{flag}{value}")],
        _ => o.to_vec(),
    }
}

/// clang's old offload driver wrote bundles (`__CLANG_OFFLOAD_BUNDLE__` markers near the start of
/// the file); compiling one for the host would drop its device code without a word.
fn refuse_old_bundle(path: &str) -> Result<()> {
    let mut head = Vec::with_capacity(4096);
    if let Ok(f) = std::fs::File::open(path) {
        let _ = f.take(4096).read_to_end(&mut head);
    }
    if head.windows(24).any(|w| w == b"__CLANG_OFFLOAD_BUNDLE__") {
        bail!(
            "{path}: a clang-offload-bundler bundle (clang's old offload driver, --no-offload-new-driver): ompcc would lose its device code; rebuild it with ompcc, or with clang's default (new) offload driver"
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exec::Runner;
    use crate::temps::Temps;
    use crate::toolchain::{Tool, Toolchain};

    #[test]
    fn syntax_only_checks_the_host_then_each_target_by_name() {
        let line = "-fopenmp -O1 --target-offload=x86_64-pc-linux-gnu -DDEV --target-offload=nvptx64 -march=sm_80 --host -fsyntax-only a.c";
        let v: Vec<String> = line.split_whitespace().map(String::from).collect();
        let args = crate::args::parse("ompcc", &v).unwrap();
        let tc = Toolchain::of(Tool { path: "/usr/bin/clang-22".into(), major: 22 }, None);
        let temps = Temps::new(false, true).unwrap();
        let ctx = Ctx { args: &args, tc: &tc, temps: &temps, runner: Runner { dry_run: true, verbose: false } };
        let (host, devices) = syntax_commands(&ctx, &args.inputs[0], Lang::C).unwrap();
        assert_eq!(host.what, "a.c: host compile");
        assert_eq!(
            host.args,
            [
                "-fopenmp",
                "-fopenmp-targets=x86_64-pc-linux-gnu,nvptx64-nvidia-cuda",
                "--offload-host-only",
                "-O1",
                "-fsyntax-only",
                "a.c"
            ]
        );
        let whats: Vec<&str> = devices.iter().map(|c| c.what.as_str()).collect();
        assert_eq!(
            whats,
            [
                "a.c: compile for offload target x86_64-pc-linux-gnu",
                "a.c: compile for offload target nvptx64-nvidia-cuda"
            ]
        );
        assert_eq!(
            devices[0].args,
            [
                "-fopenmp",
                "-fopenmp-targets=x86_64-pc-linux-gnu",
                "--offload-device-only",
                "-Xopenmp-target=x86_64-pc-linux-gnu",
                "-DDEV",
                "-O1",
                "-fsyntax-only",
                "a.c"
            ]
        );
        let gpu = devices[1].args.join(" ");
        assert!(
            gpu.contains("--offload-device-only -nogpulib -Xopenmp-target=nvptx64-nvidia-cuda -march=sm_80"),
            "{gpu}"
        );
        assert!(!gpu.contains("DDEV") && !host.args.join(" ").contains("DDEV"), "a group's option is its target's");
    }
}
