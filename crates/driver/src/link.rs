//! The link: device objects (from the sources just compiled, from the `.llvm.offloading`
//! sections of input objects, and from the archive members the host link pulls in) are linked
//! into one shared library per target, packed as OffloadBinaries and embedded in the host
//! program together with the code that registers them at start-up.

use crate::args::{Item, Lang};
use crate::bundle::{self, Container, EntryLayout};
use crate::classify::{classify, Class};
use crate::declare_target::graph::Unit as DtUnit;
use crate::embed::{registration_asm, Embedded};
use crate::error::{Error, Result};
use crate::exec::Cmd;
use crate::pipeline::{run_all, Compiled, Ctx, DeviceObj};
use crate::toolchain::is_cpu_target;
use crate::{bail, runtime};
use omp_format::{ImageKind, OffloadBinary, OffloadKind};
use std::path::{Path, PathBuf};

/// A host input file, with what was found in it.
struct Scanned {
    layout: Option<EntryLayout>,
    defines: Vec<String>,
    needs: Vec<String>,
}

/// Links the program. `compiled[i]` is the result for input `i` when it was a source.
pub fn link(ctx: &Ctx, compiled: &[Option<Compiled>], out: &str) -> Result<()> {
    let args = ctx.args;
    let mut lang = link_lang(ctx, compiled);

    // Host link arguments in their order, and the files to look into.
    let mut host_args: Vec<String> = Vec::new();
    let mut files: Vec<String> = Vec::new();
    let lib_dirs = lib_dirs(ctx);
    for item in &args.items {
        match item {
            Item::Opt(o) => {
                if matches!(classify(o), Class::Link | Class::Both) {
                    host_args.extend(o.iter().cloned());
                }
                if let Some(lib) = o[0].strip_prefix("-l").map(|l| {
                    if l.is_empty() {
                        o.get(1).cloned().unwrap_or_default()
                    } else {
                        l.to_string()
                    }
                }) {
                    if let Some(a) = find_static_lib(&lib, &lib_dirs) {
                        files.push(a.to_string_lossy().into_owned());
                    }
                }
            }
            Item::Input(i) => {
                let path = match &compiled[*i] {
                    Some(c) => c.host.to_string_lossy().into_owned(),
                    None => args.inputs[*i].path.clone(),
                };
                host_args.push(path.clone());
                files.push(path);
            }
        }
    }

    // Device objects: from compiled sources, then from input objects and archives.
    let mut devices: Vec<DeviceObj> = compiled.iter().flatten().flat_map(|c| c.devices.iter().cloned()).collect();
    let mut layout: Option<EntryLayout> = None;
    let mut note_layout = |l: Option<EntryLayout>, name: &str| -> Result<()> {
        match (layout, l) {
            (Some(a), Some(b)) if a != b => bail!(
                "{name}: objects from clang 19 and from clang 20 or later cannot be linked together (their offload entry tables differ)"
            ),
            (_, Some(b)) => layout = Some(b),
            _ => {}
        }
        Ok(())
    };
    let datas: Vec<(String, Vec<u8>)> =
        files.iter().filter_map(|f| std::fs::read(f).ok().map(|d| (f.clone(), d))).collect();
    let mut objects: Vec<Scanned> = Vec::new();
    let mut archive_members: Vec<(String, Scanned, Vec<OffloadBinary>, Vec<DtUnit>)> = Vec::new();
    // Declare-target facts that `ompcc -c` kept in objects (read only when the analysis is on).
    let dt_on = args.declare_target.enabled();
    let mut dt_units: Vec<DtUnit> = Vec::new();
    let mut dt_read = std::time::Duration::ZERO;
    let mut found: Vec<(String, OffloadBinary)> = Vec::new();
    for (name, data) in &datas {
        match bundle::container(data) {
            Container::Elf => {
                let info = bundle::read_elf(name, data, true)?;
                note_layout(info.layout, name)?;
                found.extend(info.images.into_iter().map(|b| (name.clone(), b)));
                objects.push(Scanned { layout: info.layout, defines: info.defines, needs: info.needs });
                if dt_on {
                    let t = std::time::Instant::now();
                    dt_units.extend(crate::declare_target::facts::read_object(name, data)?);
                    dt_read += t.elapsed();
                }
            }
            Container::Archive => {
                let members = bundle::archive_members(name, data)?;
                let any_offload = members.iter().any(|(_, m)| contains(m, bundle::SECTION.as_bytes()));
                if !any_offload {
                    continue;
                }
                for (member, bytes) in members {
                    if bundle::container(bytes) != Container::Elf {
                        continue;
                    }
                    let full = format!("{name}({member})");
                    let info = bundle::read_elf(&full, bytes, true)?;
                    let s = Scanned { layout: info.layout, defines: info.defines, needs: info.needs };
                    let t = std::time::Instant::now();
                    let facts =
                        if dt_on { crate::declare_target::facts::read_object(&full, bytes)? } else { Vec::new() };
                    dt_read += t.elapsed();
                    archive_members.push((full, s, info.images, facts));
                }
            }
            _ => {}
        }
    }
    if !archive_members.is_empty() {
        let objs: Vec<_> = objects.iter().map(|o| (o.defines.clone(), o.needs.clone())).collect();
        let mems: Vec<_> = archive_members.iter().map(|(_, s, _, _)| (s.defines.clone(), s.needs.clone())).collect();
        let taken = bundle::select_members(&objs, &mems);
        for ((name, s, images, facts), take) in archive_members.into_iter().zip(taken) {
            if take {
                note_layout(s.layout, &name)?;
                found.extend(images.into_iter().map(|b| (name.clone(), b)));
                dt_units.extend(facts);
            }
        }
    }
    for (i, (name, bin)) in found.iter().enumerate() {
        if bin.offload_kind != OffloadKind::OpenMp {
            continue;
        }
        let ext = match bin.image_kind {
            ImageKind::Object => "o",
            ImageKind::Bitcode => "bc",
            // `clang -S` (and `ompcc -S` of clang's `.s`) embeds the device's assembly, labelled
            // PTX whatever the target: for a CPU target the device link assembles it.
            ImageKind::Ptx if is_cpu_target(bin.triple()) => "s",
            other => bail!("{name}: device image of kind {} cannot be linked by ompcc", other.name()),
        };
        let path = ctx.temps.path(&format!("image{i}"), &format!("{}.{ext}", bin.triple()));
        if !ctx.runner.dry_run {
            std::fs::write(&path, bin.image)
                .map_err(|e| Error::new(format!("cannot write {}: {e}", path.display())))?;
        }
        devices.push(DeviceObj {
            triple: bin.triple().to_string(),
            arch: bin.arch().to_string(),
            path,
            bitcode: bin.image_kind == ImageKind::Bitcode,
        });
    }

    // The declare-target analysis of the whole program, before the device link can fail.
    if args.declare_target.enabled() && !ctx.runner.dry_run {
        let mut units: Vec<_> = compiled.iter().flatten().filter_map(|c| c.dt.clone()).collect();
        let from_objects = dt_units.len();
        units.append(&mut dt_units);
        let t = std::time::Instant::now();
        let analysis = crate::declare_target::check_program(&units);
        ctx.runner.note(&format!(
            "declare target analysis: {} nodes, {} edges, {:.3} ms (graph + phases); {from_objects} unit(s) read from objects in {:.3} ms",
            analysis.graph.nodes.len(),
            analysis.graph.edge_count(),
            t.elapsed().as_secs_f64() * 1e3,
            dt_read.as_secs_f64() * 1e3
        ));
        let removed = if args.declare_target.filter {
            let objs: Vec<(String, PathBuf)> = devices.iter().map(|d| (d.triple.clone(), d.path.clone())).collect();
            let objcopy = crate::declare_target::objcopy(&ctx.tc.clang);
            crate::declare_target::filter_objects(&analysis, &objs, &objcopy)?
        } else {
            Vec::new()
        };
        crate::declare_target::finish(&args.declare_target, &analysis, &units, &removed)?;
    }

    // Objects alone do not say their language; C++ runtime references do.
    if lang == Lang::C && args.link_lang.is_none() && objects.iter().any(|o| o.needs.iter().any(|n| is_cxx_runtime(n)))
    {
        lang = Lang::Cxx;
    }
    // Nor Fortran: flang's runtime references do (linking only flang objects needs flang's driver).
    if lang == Lang::C
        && args.link_lang.is_none()
        && objects.iter().any(|o| o.needs.iter().any(|n| n.starts_with("_FortranA")))
    {
        lang = Lang::Fortran;
    }
    let (prog, mode_flag) = match lang {
        Lang::Fortran => (ctx.tc.flang()?.path.to_string_lossy().into_owned(), None),
        Lang::Cxx => (ctx.tc.clang.path.to_string_lossy().into_owned(), Some("--driver-mode=g++")),
        _ => (ctx.tc.clang.path.to_string_lossy().into_owned(), None),
    };
    let mut host = Cmd::new(prog.clone(), "host link");
    host.args(mode_flag);
    host.args(host_args.iter().cloned());
    if args.verbose {
        host.arg("-v");
    }
    if devices.is_empty() {
        if args.openmp {
            host.arg("-fopenmp");
        }
        host.arg("-o").arg(out);
        return ctx.runner.run(&host);
    }

    let layout = layout.unwrap_or(if ctx.tc.clang.major >= 20 { EntryLayout::New } else { EntryLayout::Legacy });
    let rt = runtime::find(args.runtime_dir.as_deref(), layout.abi_major(), &ctx.tc.clang.path)?;
    let rt_dir = rt.dir.to_string_lossy().into_owned();
    let rt_libs = runtime::link_args(&rt);

    // One device library per target.
    let mut triples: Vec<String> = Vec::new();
    for d in &devices {
        if !triples.contains(&d.triple) {
            triples.push(d.triple.clone());
        }
    }
    let devicertl = runtime::cpu_devicertl(args.runtime_dir.as_deref());
    let mut dev_links = Vec::new();
    let mut libs = Vec::new();
    for triple in &triples {
        crate::toolchain::check_triple(triple)?;
        let objs: Vec<&DeviceObj> = devices.iter().filter(|d| &d.triple == triple).collect();
        let arch = objs.iter().map(|d| d.arch.clone()).find(|a| !a.is_empty()).unwrap_or_default();
        let lib = ctx.temps.path(&crate::temps::stem(out), &format!("{triple}.so"));
        if crate::gpu::is_gpu(triple) {
            let inputs: Vec<String> = objs.iter().map(|d| d.path.to_string_lossy().into_owned()).collect();
            dev_links.push(crate::gpu::link_command(args, &ctx.tc.clang, triple, &arch, &inputs, &lib)?);
            libs.push((triple.clone(), arch, lib));
            continue;
        }
        let mut c = Cmd::new(prog.clone(), format!("device link for offload target {triple}"));
        c.note = Some(format!("link: pipeline for offload target {triple}"));
        c.args(mode_flag);
        c.arg(format!("--target={triple}"));
        for o in args.host_opts() {
            if o[0].starts_with("-O") || o[0].starts_with("-g") {
                c.args(o.iter().cloned());
            }
        }
        if is_cpu_target(triple) {
            c.arg("-Wl,--no-undefined");
        } else if !arch.is_empty() {
            c.arg(format!("-march={arch}"));
        }
        // Device LTO (flang 22 and 19, CPU): the bitcode objects and the runtime's bitcode become
        // one optimised object, which replaces them and the runtime archive in the link.
        // Fat objects (`ompcc -c`) carry their bitcode in a `.llvm.lto` section.
        let lto = if is_cpu_target(triple) { device_lto(ctx, triple) } else { None };
        let mut fat: Vec<(usize, PathBuf)> = Vec::new();
        if let (Some(lto), false) = (&lto, ctx.runner.dry_run) {
            for (i, d) in objs.iter().enumerate() {
                if !d.is_bitcode() && std::fs::read(&d.path).is_ok_and(|b| crate::lto::may_be_fat(&b)) {
                    let bc = ctx.temps.path(&crate::temps::stem(out), &format!("{triple}.fat{i}.bc"));
                    ctx.runner.run(&crate::lto::extract_command(lto, &d.path, &bc))?;
                    fat.push((i, bc));
                }
            }
        }
        let is_bc = |i: usize, d: &DeviceObj| d.is_bitcode() || fat.iter().any(|(j, _)| *j == i);
        let mut bitcode: Vec<String> =
            objs.iter().filter(|d| d.is_bitcode()).map(|d| d.path.to_string_lossy().into_owned()).collect();
        bitcode.extend(fat.iter().map(|(_, bc)| bc.to_string_lossy().into_owned()));
        let lto = if bitcode.is_empty() { None } else { lto };
        let mut inputs: Vec<String> = Vec::new();
        if let Some(lto) = &lto {
            let merged = ctx.temps.path(&crate::temps::stem(out), &format!("{triple}.lto.bc"));
            let obj = ctx.temps.path(&crate::temps::stem(out), &format!("{triple}.lto.o"));
            let opts: Vec<String> = args
                .host_opts()
                .filter(|o| o[0].starts_with("-O") || o[0].starts_with("-g"))
                .flat_map(|o| o.iter().cloned())
                .collect();
            for cmd in crate::lto::commands(lto, triple, &bitcode, &opts, &merged, &obj) {
                ctx.runner.run(&cmd)?;
            }
            inputs.push(obj.to_string_lossy().into_owned());
            inputs.extend(
                objs.iter()
                    .enumerate()
                    .filter(|(i, d)| !is_bc(*i, d))
                    .map(|(_, d)| d.path.to_string_lossy().into_owned()),
            );
        } else {
            inputs.extend(objs.iter().map(|d| d.path.to_string_lossy().into_owned()));
        }
        c.args(inputs);
        if is_cpu_target(triple) {
            c.args(["-Wl,-Bsymbolic", "-shared"]);
            if let (Some(rtl), None) = (&devicertl, &lto) {
                c.arg(rtl.to_string_lossy());
            }
        }
        for o in args.host_opts() {
            if o[0].starts_with("-L") || o[0].starts_with("-l") {
                c.args(o.iter().cloned());
            }
        }
        if let Some(g) = args.targets.iter().find(|t| &t.triple == triple) {
            for o in &g.opts {
                if matches!(classify(o), Class::Link | Class::Both) && !o[0].starts_with("-march=") {
                    c.args(o.iter().cloned());
                }
            }
        }
        if is_cpu_target(triple) {
            c.args(rt_libs.iter().cloned()).arg("-lomp");
        }
        c.arg("-o").arg(lib.to_string_lossy());
        dev_links.push(c);
        libs.push((triple.clone(), arch, lib));
    }
    if let Err(e) = run_all(ctx.runner, dev_links.iter()) {
        return Err(crate::link_explain::explain(ctx, compiled, &datas, e));
    }

    // Pack each library and write the registration code.
    let mut embedded = Vec::new();
    for (triple, arch, lib) in &libs {
        let blob = ctx.temps.path(&crate::temps::stem(out), &format!("{triple}.offload"));
        ctx.runner.note(&format!(
            "pack {} as OffloadBinary (openmp, triple={triple}, arch={arch}) into {}",
            lib.display(),
            blob.display()
        ));
        embedded.push(if ctx.runner.dry_run {
            Embedded { blob, payload_offset: 0, payload_size: 0 }
        } else {
            pack_library(triple, arch, lib, &blob)?
        });
    }
    let asm = ctx.temps.path(&crate::temps::stem(out), "offload-wrapper.s");
    ctx.runner.note(&format!(
        "write registration code ({} image(s), {}) to {}",
        embedded.len(),
        layout.section(),
        asm.display()
    ));
    if !ctx.runner.dry_run {
        write(&asm, registration_asm(&embedded, layout).as_bytes())?;
    }
    let wrapper = if lang == Lang::Fortran {
        // flang does not assemble: let clang do it.
        let obj = asm.with_extension("o");
        let mut c = Cmd::new(ctx.tc.clang.path.to_string_lossy(), "assembling the offload registration code");
        c.arg("-c").arg(asm.to_string_lossy()).arg("-o").arg(obj.to_string_lossy());
        ctx.runner.run(&c)?;
        obj
    } else {
        asm
    };
    host.note = Some("link: host".into());
    host.arg(wrapper.to_string_lossy());
    host.arg("-fopenmp");
    host.args(rt_libs.iter().cloned());
    host.arg("-Wl,--enable-new-dtags").arg(format!("-Wl,-rpath,{rt_dir}"));
    host.arg("-o").arg(out);
    ctx.runner.run(&host)
}

/// The device LTO set-up for `triple`, for bitcode made by this build's flang (or clang when
/// there is no flang). None under `--declare-target-filter`, which edits the native device
/// code (the bitcode of a fat object would bring the removed functions back).
fn device_lto(ctx: &Ctx, triple: &str) -> Option<crate::lto::DeviceLto> {
    if ctx.args.declare_target.filter {
        return None;
    }
    let producer = ctx.tc.flang().unwrap_or(&ctx.tc.clang);
    crate::lto::for_target(producer, triple, ctx.args.runtime_dir.as_deref())
}

/// Writes `lib` as an OffloadBinary and says where its payload lies.
fn pack_library(triple: &str, arch: &str, lib: &Path, blob: &Path) -> Result<Embedded> {
    let image = std::fs::read(lib).map_err(|e| Error::new(format!("cannot read {}: {e}", lib.display())))?;
    let bytes = omp_format::offload_binary::write(
        ImageKind::Object,
        OffloadKind::OpenMp,
        &[("triple", triple), ("arch", arch)],
        &image,
    );
    let parsed = OffloadBinary::parse(&bytes).map_err(|e| Error::new(format!("internal error: {e}")))?;
    let payload_offset = (parsed.image.as_ptr() as usize - bytes.as_ptr() as usize) as u64;
    write(blob, &bytes)?;
    Ok(Embedded { blob: blob.to_path_buf(), payload_offset, payload_size: image.len() as u64 })
}

fn write(path: &Path, bytes: &[u8]) -> Result<()> {
    std::fs::write(path, bytes).map_err(|e| Error::new(format!("cannot write {}: {e}", path.display())))
}

/// The language the program links as: the program name or `--driver-mode=`, else Fortran if
/// any source is Fortran, else C++ if any is C++, else C.
fn link_lang(ctx: &Ctx, compiled: &[Option<Compiled>]) -> Lang {
    if let Some(l) = ctx.args.link_lang {
        return l;
    }
    let langs: Vec<Lang> = ctx.args.inputs.iter().zip(compiled).filter_map(|(i, _)| i.lang).collect();
    if langs.contains(&Lang::Fortran) {
        Lang::Fortran
    } else if langs.contains(&Lang::Cxx) {
        Lang::Cxx
    } else {
        Lang::C
    }
}

/// The `-L` directories of the host link.
fn lib_dirs(ctx: &Ctx) -> Vec<PathBuf> {
    ctx.args
        .host_opts()
        .filter_map(|o| match o[0].strip_prefix("-L") {
            Some("") => o.get(1).map(PathBuf::from),
            Some(d) => Some(PathBuf::from(d)),
            None => None,
        })
        .collect()
}

/// `-lNAME` resolved as the linker would, when it resolves to a static archive.
fn find_static_lib(name: &str, dirs: &[PathBuf]) -> Option<PathBuf> {
    if let Some(file) = name.strip_prefix(':') {
        return dirs.iter().map(|d| d.join(file)).find(|p| p.is_file() && file.ends_with(".a"));
    }
    for d in dirs {
        if d.join(format!("lib{name}.so")).exists() {
            return None;
        }
        let a = d.join(format!("lib{name}.a"));
        if a.is_file() {
            return Some(a);
        }
    }
    None
}

/// Symbols only C++ code needs from the C++ runtime.
fn is_cxx_runtime(sym: &str) -> bool {
    ["_ZSt", "_ZNSt", "_ZNKSt", "_Znw", "_Zna", "_Zdl", "_Zda", "__cxa_", "__gxx_personality"]
        .iter()
        .any(|p| sym.starts_with(p))
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}
