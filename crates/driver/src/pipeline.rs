//! The per-source pipeline, as clang runs it: host front end to bitcode (with the offload
//! targets known), one device compile per target that reads the host bitcode, then the host
//! back end, which embeds the packaged device objects when the object is the output (`-c`).

use crate::args::{Args, Input, Lang};
use crate::classify::{classify, is_machine_specific, Class};
use crate::declare_target::graph::Compiler;
use crate::error::{Error, Result};
use crate::exec::{Cmd, Runner};
use crate::temps::{stem, Temps};
use crate::toolchain::{is_cpu_target, Tool, Toolchain};
use omp_format::{ImageKind, OffloadKind};
use std::path::{Path, PathBuf};

/// A device object made for one target.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceObj {
    pub triple: String,
    pub arch: String,
    pub path: PathBuf,
    /// LLVM bitcode rather than a native object (device LTO, see [`crate::lto`]).
    pub bitcode: bool,
}

impl DeviceObj {
    /// Bitcode, by what made it or (once it exists) by its contents.
    pub fn is_bitcode(&self) -> bool {
        self.bitcode
            || std::fs::File::open(&self.path)
                .and_then(|mut f| {
                    let mut magic = [0u8; 4];
                    std::io::Read::read_exact(&mut f, &mut magic).map(|()| magic)
                })
                .is_ok_and(|m| crate::lto::is_bitcode(&m))
    }
}

/// What compiling one source produced.
#[derive(Debug, Clone)]
pub struct Compiled {
    pub host: PathBuf,
    /// Device objects handed straight to the link (empty when they were embedded).
    pub devices: Vec<DeviceObj>,
    /// What the declare-target analysis read from the front end (when it runs).
    pub dt: Option<crate::declare_target::graph::Unit>,
    /// What `--gpu-check` got from the source's GPU device compile (when it runs).
    pub gpu: Option<(String, crate::gpu_check::Source)>,
}

/// Everything the phases need.
pub struct Ctx<'a> {
    pub args: &'a Args,
    pub tc: &'a Toolchain,
    pub temps: &'a Temps,
    pub runner: Runner,
}

/// The final step of a compile.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Emit {
    /// `-E`: preprocessed host source.
    Preprocessed,
    /// `-S`: host assembly with the device objects embedded.
    Assembly,
    /// `-c`: host object with the device objects embedded.
    Object,
    /// Host object for an immediate link; device objects are returned, not embedded.
    ForLink,
    /// `-fsyntax-only`: nothing written ([`crate::passthrough`]).
    SyntaxOnly,
}

impl Ctx<'_> {
    /// The compiler for a language.
    pub fn tool(&self, lang: Lang) -> Result<&Tool> {
        match lang {
            Lang::Fortran => self.tc.flang(),
            _ => Ok(&self.tc.clang),
        }
    }

    /// The device `arch` string: `-march=`/`--offload-arch=` from the target's options for
    /// GPUs; for CPU targets what clang records ("generic" from clang 20 on, "" before).
    pub fn arch(&self, triple: &str) -> String {
        let group = self.args.targets.iter().find(|t| t.triple == triple);
        let given = group.and_then(|g| {
            g.opts.iter().rev().find_map(|o| {
                o[0].strip_prefix("-march=").or_else(|| o[0].strip_prefix("--offload-arch=")).map(str::to_string)
            })
        });
        match given {
            Some(a) if !is_cpu_target(triple) => a,
            _ if is_cpu_target(triple) && self.tc.clang.major >= 20 => "generic".to_string(),
            _ => String::new(),
        }
    }

    /// Compiles one source; `out` is the final file for `-E/-S/-c`.
    pub fn compile(&self, input: &Input, emit: Emit, out: Option<&Path>) -> Result<Compiled> {
        let lang = input.lang.ok_or_else(|| Error::new(format!("{}: not a source file", input.path)))?;
        if lang.host_only() || emit == Emit::SyntaxOnly {
            return crate::passthrough::compile(self, input, lang, emit, out);
        }
        let tool = self.tool(lang)?;
        let fortran = lang == Lang::Fortran;
        let prog = tool.path.to_string_lossy().into_owned();
        let name = &input.path;
        let st = stem(name);
        let final_out =
            |ext: &str| -> PathBuf { out.map(Path::to_path_buf).unwrap_or_else(|| self.temps.path(&st, ext)) };
        let host_opts: Vec<&Vec<String>> = self.args.host_opts().collect();
        let offload = self.args.offloading();
        let triples: Vec<&str> = self.args.targets.iter().map(|t| t.triple.as_str()).collect();
        let offload_flags = |c: &mut Cmd| {
            if offload {
                c.arg("-fopenmp").arg(format!("-fopenmp-targets={}", triples.join(","))).arg("--offload-host-only");
            } else if self.args.openmp {
                c.arg("-fopenmp");
            }
        };
        let src = |c: &mut Cmd| {
            if let Some(x) = &input.x {
                c.arg("-x").arg(x.clone());
            }
            c.arg(name.clone());
        };
        let fe_opts = |c: &mut Cmd| {
            for o in &host_opts {
                if !matches!(classify(o), Class::Link | Class::Deps) {
                    c.args(o.iter().cloned());
                }
            }
            c.args(crate::depfile::host_args(self.args, input));
        };

        if emit == Emit::Preprocessed || !offload {
            // One host-only command does it all.
            let mut c = Cmd::new(prog, format!("{name}: compile"));
            offload_flags(&mut c);
            fe_opts(&mut c);
            if self.args.verbose {
                c.arg("-v");
            }
            let host = match emit {
                Emit::Preprocessed => {
                    c.arg("-E");
                    out.map(Path::to_path_buf)
                }
                Emit::Assembly => Some(final_out("s")),
                _ => Some(final_out("o")),
            };
            c.arg(if emit == Emit::Assembly {
                "-S"
            } else if emit == Emit::Preprocessed {
                "-E"
            } else {
                "-c"
            });
            src(&mut c);
            if let Some(h) = &host {
                c.arg("-o").arg(h.to_string_lossy());
            }
            self.runner.run(&c)?;
            return Ok(Compiled { host: host.unwrap_or_default(), devices: Vec::new(), dt: None, gpu: None });
        }

        // 1. Host front end: bitcode that the device compiles read.
        let bc = self.temps.path(&st, "host.bc");
        let mut fe = Cmd::new(prog.clone(), format!("{name}: host compile"));
        offload_flags(&mut fe);
        fe.arg("-emit-llvm").arg("-c");
        if !fortran {
            fe.args(["-Xclang", "-disable-llvm-passes"]);
        }
        fe_opts(&mut fe);
        if self.args.verbose {
            fe.arg("-v");
        }
        src(&mut fe);
        fe.arg("-o").arg(bc.to_string_lossy());
        // Fortran's host front end may be replaced by the map-section check's own.
        let run_fe = || -> Result<()> {
            if fortran && self.checked_fortran_front_end(tool, &fe, name, &st)? {
                return Ok(());
            }
            self.runner.run(&fe)
        };
        // GPU device compiles need options of clang's offload device compile (include paths,
        // the PTX version): asked of clang while the host front end runs.
        let gpu_options = |t: &crate::args::TargetGroup| -> Result<Vec<String>> {
            if fortran || !crate::gpu::is_gpu(&t.triple) {
                return Ok(Vec::new());
            }
            let arch = self.arch(&t.triple);
            crate::gpu::require_arch(&t.triple, &arch)?;
            crate::gpu::device_options(tool, lang, &t.triple, &arch)
        };
        let gpu_opts: Vec<Result<Vec<String>>> = if self.args.targets.iter().any(|t| crate::gpu::is_gpu(&t.triple)) {
            std::thread::scope(|s| {
                let h = s.spawn(|| self.args.targets.iter().map(gpu_options).collect::<Vec<_>>());
                let fe_result = run_fe();
                let inc = h.join().unwrap_or_else(|_| vec![Err(Error::new("internal error: a job panicked"))]);
                fe_result.map(|()| inc)
            })?
        } else {
            run_fe()?;
            Vec::new()
        };

        // The declare-target analysis (only when asked): its own front-end run, after the host
        // front end has reported any errors in the source.
        let dt_opts = &self.args.declare_target;
        let dt = if dt_opts.enabled() {
            let opts: Vec<String> = host_opts
                .iter()
                .filter(|o| classify(o) != Class::Link && classify(o) != Class::Deps)
                .flat_map(|o| o.iter().cloned())
                .collect();
            self.runner.note(&format!("{name}: declare target analysis"));
            let unit = crate::declare_target::collect(tool, lang, &opts, input, self.runner.dry_run)?;
            if let (Some(u), true) = (&unit, emit != Emit::ForLink) {
                crate::declare_target::check_unit(dt_opts, u)?;
            }
            unit
        } else {
            None
        };

        // 2. Device compiles; 3. host back end. For a link they are independent, so they run
        // side by side; for -c/-S the back end embeds the device objects and waits for them.
        let mut devices = Vec::new();
        let mut dev_cmds = Vec::new();
        // A device compile for `triple`, up to its output options; `inc`: a GPU's options
        // from clang's offload toolchain; `group`: the options of the target's group.
        let device_cmd = |triple: &str, inc: Option<&Vec<String>>, group: &[Vec<String>]| -> Result<Cmd> {
            let gpu = crate::gpu::is_gpu(triple);
            let mut c = Cmd::new(prog.clone(), format!("{name}: compile for offload target {triple}"));
            c.arg(format!("--target={triple}")).arg("-fopenmp");
            let x = if fortran { "-Xflang" } else { "-Xclang" };
            if is_cpu_target(triple) || gpu {
                // GPU code objects are position-independent too, as in clang's offload compile.
                c.arg("-fPIC");
            }
            if !fortran {
                c.arg("-fvisibility=protected");
                c.args([x, "-aux-triple", x]).arg(self.args.host_triple());
            }
            c.args([x, "-fopenmp-is-target-device", x, "-fopenmp-host-ir-file-path", x]);
            c.arg(bc.to_string_lossy());
            if gpu {
                // As clang's offload driver: its include paths, no ROCm/CUDA bitcode libraries
                // (the device link brings the device runtime), bitcode for the LTO device link.
                match crate::gpu::rocm_device_libs(self.args)? {
                    Some(rocm) if triple.starts_with("amdgcn") => c.arg(rocm),
                    _ if !fortran => c.arg("-nogpulib"),
                    _ => &mut c,
                };
                if let Some(inc) = inc {
                    c.args(inc.iter().cloned());
                }
                c.arg("-emit-llvm");
            }
            for o in self.args.shared_opts() {
                let class = classify(o);
                if class == Class::Link || class == Class::Deps {
                    continue;
                }
                if is_machine_specific(o) && !is_cpu_target(triple) {
                    continue;
                }
                c.args(o.iter().cloned());
            }
            for o in group {
                if !matches!(classify(o), Class::Link | Class::Deps) {
                    c.args(o.iter().cloned());
                }
            }
            Ok(c)
        };
        for (ti, t) in self.args.targets.iter().enumerate() {
            let triple = t.triple.as_str();
            let gpu = crate::gpu::is_gpu(triple);
            let dev = self.temps.path(&st, &format!("{triple}.{}", if gpu { "bc" } else { "o" }));
            let inc = match gpu_opts.get(ti) {
                Some(Ok(inc)) => Some(inc),
                Some(Err(e)) => return Err(e.clone()),
                None => None,
            };
            let mut c = device_cmd(triple, inc, &t.opts)?;
            // flang's CPU device code as bitcode, for the device LTO link with the runtime. For
            // `-c`, a fat object (native code plus bitcode): an object with a bitcode device image
            // could not be linked by flang's or clang's own driver.
            let lto = fortran
                && !dt_opts.filter
                && crate::lto::for_target(tool, triple, self.args.runtime_dir.as_deref()).is_some();
            let fat = lto && emit != Emit::ForLink;
            if lto && (!fat || crate::lto::fat_objects(tool)) {
                c.arg("-flto=full");
            }
            if fat && crate::lto::fat_objects(tool) {
                c.arg("-ffat-lto-objects");
            }
            let lto = lto && !fat;
            c.arg("-c");
            src(&mut c);
            c.arg("-o").arg(dev.to_string_lossy());
            c.note = Some(format!("{name}: pipeline for offload target {triple}"));
            dev_cmds.push(c);
            devices.push(DeviceObj {
                triple: triple.to_string(),
                arch: self.arch(triple),
                path: dev,
                bitcode: lto || gpu,
            });
        }

        // `--gpu-check`: the same device compile for that GPU, stopped at IR (no toolkit needed).
        let gpu = match &self.args.gpu_check {
            Some(t) => {
                let triple = t.triple();
                let inc =
                    if fortran { Ok(Vec::new()) } else { crate::gpu::device_options(tool, lang, triple, &t.arch) };
                let ll = self.temps.path(&st, &format!("gpu-check.{}.ll", t.arch));
                let checked = match inc {
                    Ok(inc) => {
                        let march = [vec![format!("-march={}", t.arch)]];
                        let mut c = device_cmd(triple, (!fortran).then_some(&inc), &march)?;
                        if fortran {
                            c.args(crate::gpu_check::flang_ptx_options(t));
                        }
                        c.args(crate::gpu_check::IR_OPTIONS);
                        src(&mut c);
                        c.arg("-o").arg(ll.to_string_lossy());
                        // When ompcc's pipeline cannot (flang 22 for amdgcn): the compiler's own
                        // offload driver, device part only.
                        let mut own = Cmd::new(prog.clone(), format!("{name}: --gpu-check"));
                        own.args([
                            "-fopenmp",
                            &format!("--offload-arch={}", t.arch),
                            "--offload-device-only",
                            "-nogpulib",
                        ]);
                        own.arg("-emit-llvm").args(crate::gpu_check::IR_OPTIONS);
                        fe_opts(&mut own);
                        src(&mut own);
                        own.arg("-o").arg(ll.to_string_lossy());
                        self.runner.note(&format!("{name}: --gpu-check for {} ({})", triple, t.arch));
                        if self.runner.dry_run || self.runner.verbose {
                            crate::diag::line(&format!(" {}", c.shell_line()));
                        }
                        (!self.runner.dry_run).then(|| {
                            let compiler = if fortran { Compiler::Flang } else { Compiler::Clang };
                            let ptxas = crate::gpu_check::frames::find_ptxas(self.args);
                            crate::gpu_check::collect(
                                &[c, own],
                                &ll,
                                name,
                                compiler,
                                &self.tc.clang,
                                t,
                                ptxas.as_deref(),
                            )
                        })
                    }
                    Err(e) => Some(crate::gpu_check::Source::Failed(e.to_string())),
                };
                checked.map(|s| (name.clone(), s))
            }
            None => None,
        };

        let host = final_out(if emit == Emit::Assembly { "s" } else { "o" });
        let mut be = Cmd::new(prog, format!("{name}: host compile"));
        offload_flags(&mut be);
        if !fortran {
            be.arg("-Qunused-arguments");
        }
        for o in &host_opts {
            if classify(o) == Class::Both {
                be.args(o.iter().cloned());
            }
        }
        be.arg(if emit == Emit::Assembly { "-S" } else { "-c" });

        if emit == Emit::ForLink {
            be.arg(bc.to_string_lossy()).arg("-o").arg(host.to_string_lossy());
            run_all(self.runner, dev_cmds.iter().chain(std::iter::once(&be)))?;
            return Ok(Compiled { host, devices, dt, gpu });
        }

        run_all(self.runner, dev_cmds.iter())?;
        let pack = self.temps.path(&st, "offload");
        self.runner.note(&format!("pack {} device object(s) into {}", devices.len(), pack.display()));
        if !self.runner.dry_run {
            pack_devices(&devices, &pack)?;
        }
        let x = if fortran { "-Xflang" } else { "-Xclang" };
        be.arg(x).arg(format!("-fembed-offload-object={}", pack.display()));
        be.arg(bc.to_string_lossy()).arg("-o").arg(host.to_string_lossy());
        self.runner.run(&be)?;
        if let Some(u) = &dt {
            // Kept in the output so a later link can analyse the whole program.
            let objcopy = crate::declare_target::objcopy(&self.tc.clang);
            let scratch = self.temps.path(&st, "declare-target");
            crate::declare_target::facts::keep(self.runner, &objcopy, u, &host, emit == Emit::Assembly, &scratch)?;
        }
        Ok(Compiled { host, devices: Vec::new(), dt: None, gpu })
    }
}

impl Ctx<'_> {
    /// The map-section check of a Fortran host front end ([`crate::fortran_sections`]): true
    /// when it wrote the host bitcode itself.
    fn checked_fortran_front_end(&self, tool: &crate::toolchain::Tool, fe: &Cmd, name: &str, st: &str) -> Result<bool> {
        let hlfir = self.temps.path(st, "hlfir.mlir");
        let corrected = self.temps.path(st, "corrected.mlir");
        crate::fortran_sections::host_front_end(&crate::fortran_sections::FrontEnd {
            runner: self.runner,
            mode: self.args.fortran_sections,
            tool,
            cmd: fe,
            src: name,
            hlfir: &hlfir,
            corrected: &corrected,
        })
    }
}

/// Writes the device objects as concatenated OffloadBinaries (OpenMP, IMG_Object).
fn pack_devices(devices: &[DeviceObj], out: &Path) -> Result<()> {
    let mut buf = Vec::new();
    for d in devices {
        let image = std::fs::read(&d.path).map_err(|e| Error::new(format!("cannot read {}: {e}", d.path.display())))?;
        let strings = [("triple", d.triple.as_str()), ("arch", d.arch.as_str())];
        let kind = if crate::lto::is_bitcode(&image) { ImageKind::Bitcode } else { ImageKind::Object };
        buf.extend(omp_format::offload_binary::write(kind, OffloadKind::OpenMp, &strings, &image));
    }
    std::fs::write(out, buf).map_err(|e| Error::new(format!("cannot write {}: {e}", out.display())))
}

/// Runs independent commands side by side (printing them in order under -v/-###).
pub fn run_all<'a>(runner: Runner, cmds: impl Iterator<Item = &'a Cmd>) -> Result<()> {
    let cmds: Vec<&Cmd> = cmds.collect();
    if cmds.len() <= 1 || runner.dry_run {
        return cmds.iter().try_for_each(|c| runner.run(c));
    }
    let results: Vec<Result<()>> = std::thread::scope(|s| {
        let handles: Vec<_> = cmds.iter().map(|c| s.spawn(move || runner.run(c))).collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|_| Err(Error::new("internal error: a job panicked"))))
            .collect()
    });
    results.into_iter().collect()
}
