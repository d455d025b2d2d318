//! The stack frame of each device function as the GPU back end lays it out, for the stack
//! part of `--gpu-check`.
//!
//! The IR the check reads is `-O0` (every call kept, for the chains), where clang moves a
//! device function's locals to the OpenMP runtime's shared-memory stack and nothing is
//! promoted to registers: its frames say little about a GPU build. So the same IR is compiled
//! once more, optimized (`-O2`, which turns those allocations back into stack slots as a GPU
//! build does) but with every function kept apart (`noinline` stays, only `optnone` goes), so
//! that each frame belongs to a function of the graph and a call tree's need is the sum along
//! its deepest chain:
//! - AMD GPUs: the back end's own frame sizes (`-fstack-usage`), no toolkit needed;
//! - NVIDIA GPUs: PTX from the back end, then `ptxas -v` (CUDA's assembler, relocatable: no
//!   link), which gives each function's frame with its spills. Without `ptxas` the frames are
//!   not sized (PTX has no frame sizes of its own that the GPU keeps).

use crate::toolchain::Tool;
use omp_gpu_libs::Family;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Each function's own frame in bytes, by symbol.
pub type FrameSizes = HashMap<String, u64>;

/// What the frame sizing of one source gave.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Frames {
    /// Not sized: nobody asked (the IR alone, as in unit tests).
    NotAsked,
    Sized(FrameSizes),
    /// NVIDIA GPU and no `ptxas`: not sized (said once for the whole command).
    NoPtxas,
    /// The back end or `ptxas` refused: why (one line).
    Failed(String),
}

/// The IR of `ll` without `optnone`: what an optimized build of the same functions gives,
/// each function still on its own (`noinline` is kept).
pub fn optimizable(ll: &str) -> String {
    let mut out = String::with_capacity(ll.len());
    for line in ll.lines() {
        if line.starts_with("attributes #") {
            out.push_str(&line.replace(" optnone", ""));
        } else {
            out.push_str(line);
        }
        out.push('\n');
    }
    out
}

/// Sizes the frames of the device code in `ll` (its text is `text`) for `arch`: files next to
/// `ll`, removed with the temporary directory.
pub fn size(clang: &Tool, family: Family, arch: &str, ll: &Path, text: &str, ptxas: Option<&Path>) -> Frames {
    if family == Family::Nvptx && ptxas.is_none() {
        return Frames::NoPtxas;
    }
    let input = sibling(ll, "frames.ll");
    if let Err(e) = std::fs::write(&input, optimizable(text)) {
        return Frames::Failed(format!("cannot write {}: {e}", input.display()));
    }
    let mut cmd = Command::new(&clang.path);
    cmd.args(["-O2", "-nogpulib", "-w", "-Wno-override-module"]);
    cmd.arg(format!("--target={}", family.triple())).arg(format!("-march={arch}"));
    match family {
        Family::Nvptx => {
            let ptx = sibling(ll, "frames.s");
            // The IR keeps the PTX version of a driver without CUDA (4.2); see flang_ptx_options.
            cmd.args(["-Xclang", "-target-feature", "-Xclang", "+ptx80", "-S", "-x", "ir"]).arg(&input);
            cmd.arg("-o").arg(&ptx);
            if let Err(why) = run(&mut cmd) {
                return Frames::Failed(why);
            }
            let Some(ptxas) = ptxas else { return Frames::NoPtxas };
            let mut asm = Command::new(ptxas);
            asm.arg(format!("-arch={arch}")).args(["-c", "-v"]).arg(&ptx).arg("-o").arg(sibling(ll, "frames.cubin"));
            match output(&mut asm) {
                Ok(o) if o.status.success() => Frames::Sized(from_ptxas(&String::from_utf8_lossy(&o.stderr))),
                Ok(o) => Frames::Failed(format!(
                    "ptxas refuses it, as the device link of a GPU build would: {}",
                    ptxas_error(&first_error(&o.stderr))
                )),
                Err(why) => Frames::Failed(why),
            }
        }
        Family::Amdgpu => {
            let obj = sibling(ll, "frames.o");
            cmd.args(["-fstack-usage", "-c", "-x", "ir"]).arg(&input).arg("-o").arg(&obj);
            if let Err(why) = run(&mut cmd) {
                return Frames::Failed(why);
            }
            match std::fs::read_to_string(obj.with_extension("su")) {
                Ok(su) => Frames::Sized(from_stack_usage(&su)),
                Err(e) => Frames::Failed(format!("no stack usage from the back end: {e}")),
            }
        }
    }
}

fn sibling(ll: &Path, suffix: &str) -> PathBuf {
    let stem = ll.file_stem().map_or_else(|| "gpu-check".into(), |s| s.to_string_lossy().into_owned());
    ll.with_file_name(format!("{stem}.{suffix}"))
}

/// How long one back-end or `ptxas` run of the sizing may take: LLVM's optimizer and AMD back end
/// can take minutes or more on some call graphs (a wide DAG of thousands of functions) that a
/// GPU build would hit as well; the CPU build must not wait for that.
pub const TIME_LIMIT: std::time::Duration = std::time::Duration::from_secs(20);

fn run(cmd: &mut Command) -> Result<(), String> {
    output(cmd).and_then(|o| if o.status.success() { Ok(()) } else { Err(first_error(&o.stderr)) })
}

/// Runs `cmd` to its end, or kills it after [`TIME_LIMIT`].
fn output(cmd: &mut Command) -> Result<std::process::Output, String> {
    use std::process::Stdio;
    let prog = cmd.get_program().to_string_lossy().into_owned();
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot run '{prog}': {e}"))?;
    // Read from another thread, so that a full pipe cannot stall the child.
    let mut stderr = child.stderr.take().expect("piped");
    let reader = std::thread::spawn(move || {
        let mut buf = Vec::new();
        std::io::Read::read_to_end(&mut stderr, &mut buf).map(|_| buf)
    });
    let start = std::time::Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if start.elapsed() < TIME_LIMIT => std::thread::sleep(std::time::Duration::from_millis(5)),
            Ok(None) => {
                let _ = child.kill();
                let _ = child.wait();
                let _ = reader.join();
                let name =
                    std::path::Path::new(&prog).file_name().map_or(prog.clone(), |n| n.to_string_lossy().into_owned());
                return Err(format!("{name} did not finish within {} s", TIME_LIMIT.as_secs()));
            }
            Err(e) => return Err(format!("cannot wait for '{prog}': {e}")),
        }
    };
    let stderr = reader.join().ok().and_then(Result::ok).unwrap_or_default();
    Ok(std::process::Output { status, stdout: Vec::new(), stderr })
}

fn first_error(stderr: &[u8]) -> String {
    let err = String::from_utf8_lossy(stderr);
    let line = err
        .lines()
        .find(|l| l.contains("error"))
        .or_else(|| err.lines().find(|l| !l.trim().is_empty()))
        .unwrap_or("no message");
    line.trim().to_string()
}

/// ptxas's message without the temporary file's name: `ptxas /tmp/…/a.s, line 104; fatal   :
/// Parsing error near …` → `Parsing error near …`.
fn ptxas_error(line: &str) -> &str {
    match line.find("fatal") {
        Some(at) => line[at + "fatal".len()..].trim_start_matches([' ', ':']),
        None => line,
    }
}

/// `ptxas -v`: `Function properties for NAME` and, on the next line, `N bytes stack frame, …`.
pub fn from_ptxas(stderr: &str) -> FrameSizes {
    let mut out = FrameSizes::new();
    let mut current: Option<&str> = None;
    for line in stderr.lines() {
        if let Some(at) = line.find("Function properties for ") {
            current = Some(line[at + "Function properties for ".len()..].trim());
        } else if let (Some(name), Some(at)) = (current, line.find(" bytes stack frame")) {
            if let Ok(n) = line[..at].trim().parse() {
                out.insert(name.to_string(), n);
            }
            current = None;
        }
    }
    out
}

/// `-fstack-usage` (`.su`): `file:line:NAME<TAB>BYTES<TAB>static` per function.
pub fn from_stack_usage(su: &str) -> FrameSizes {
    let mut out = FrameSizes::new();
    for line in su.lines() {
        let mut fields = line.split('\t');
        let (Some(place), Some(bytes)) = (fields.next(), fields.next()) else { continue };
        let name = place.rsplit_once(':').map_or(place, |(_, n)| n);
        if let Ok(n) = bytes.trim().parse() {
            out.insert(name.to_string(), n);
        }
    }
    out
}

/// The frame of `sym`: its own, or that of the copy an optimization made of it (OpenMP's
/// `NAME.internalized`).
pub fn frame_of(frames: &FrameSizes, sym: &str) -> Option<u64> {
    let own = frames.get(sym).copied();
    let copy = frames.get(&format!("{sym}.internalized")).copied();
    match (own, copy) {
        (Some(a), Some(b)) => Some(a.max(b)),
        (a, b) => a.or(b),
    }
}

/// `ptxas` for `--gpu-check`'s NVIDIA frames: in the CUDA toolkit `--cuda-path=`/`OMPCC_CUDA_PATH`
/// name, else on PATH, in /usr/local/cuda or /usr/lib/cuda, else in the `.deps/cuda-*` that
/// scripts/setup-cuda.sh fills next to `dist/` of a source checkout.
pub fn find_ptxas(args: &crate::args::Args) -> Option<PathBuf> {
    if let Some(dir) = crate::gpu::path_opt(args, "--cuda-path", "OMPCC_CUDA_PATH") {
        return Some(dir.join("bin/ptxas")).filter(|p| p.is_file());
    }
    if let Some(p) = crate::toolchain::which("ptxas") {
        return Some(p);
    }
    let mut dirs = vec![PathBuf::from("/usr/local/cuda"), PathBuf::from("/usr/lib/cuda")];
    if let Some(top) = std::env::current_exe().ok().and_then(|e| Some(e.parent()?.parent()?.parent()?.to_path_buf())) {
        if let Ok(entries) = std::fs::read_dir(top.join(".deps")) {
            let mut cuda: Vec<PathBuf> = entries
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.file_name().is_some_and(|n| n.to_string_lossy().starts_with("cuda-")))
                .collect();
            cuda.sort();
            dirs.extend(cuda.into_iter().rev());
        }
    }
    dirs.into_iter().map(|d| d.join("bin/ptxas")).find(|p| p.is_file())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ptxas_and_stack_usage_reports_are_read() {
        let ptxas = "ptxas info    : 126 bytes gmem
ptxas info    : Compiling entry function '__omp_offloading_fe00_98e317_main_l18' for 'sm_90'
ptxas info    : Function properties for __omp_offloading_fe00_98e317_main_l18
    24 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 24 registers, used 0 barriers
ptxas info    : Function properties for smooth
    65544 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Compile time = 2.943 ms
";
        let f = from_ptxas(ptxas);
        assert_eq!(f.len(), 2);
        assert_eq!((f["__omp_offloading_fe00_98e317_main_l18"], f["smooth"]), (24, 65544));
        let su = "chain.c:7:__omp_offloading_fe00_98e375_main_l7\t0\tstatic\nchain.c:2:mid\t208\tstatic\nleaf\t4016\tdynamic,bounded\ngarbage\n";
        let f = from_stack_usage(su);
        assert_eq!((f.len(), f["mid"], f["leaf"], f["__omp_offloading_fe00_98e375_main_l7"]), (3, 208, 4016, 0));
        let mut g = FrameSizes::new();
        g.insert("work.internalized".into(), 40);
        g.insert("work".into(), 8);
        assert_eq!((frame_of(&g, "work"), frame_of(&g, "none")), (Some(40), None));
        assert_eq!(
            ptxas_error(
                "ptxas /tmp/o/s.frames.s, line 104; fatal   : Parsing error near '.gomp_critical_user_': syntax error"
            ),
            "Parsing error near '.gomp_critical_user_': syntax error"
        );
    }

    #[test]
    fn only_optnone_goes() {
        let ll = "define void @f() #0 {\n  ret void\n}\nattributes #0 = { noinline nounwind optnone \"target-cpu\"=\"sm_90\" }\n";
        assert_eq!(
            optimizable(ll),
            "define void @f() #0 {\n  ret void\n}\nattributes #0 = { noinline nounwind \"target-cpu\"=\"sm_90\" }\n"
        );
    }
}
