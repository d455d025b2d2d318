//! Command-line parsing: driver options, input files, host options and per-target groups.
//!
//! Grouping rule: `--target-offload=T` opens a group; every *option* after it, up to the next
//! `--target-offload=`, or `--host`, goes to T's toolchain only. Input files (any argument that
//! is not an option or an option's value) always belong to the whole build, wherever they
//! appear. Driver options (`-o -c -S -E -v -### --save-temps --clang= …`) are global wherever
//! they appear.

use crate::bail;
use crate::error::Result;

/// The source languages ompcc compiles, chosen by extension (or `-x`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lang {
    C,
    Cxx,
    Fortran,
    /// Assembly (`.s`): assembled by clang, with no OpenMP phases (as clang does).
    Asm,
    /// Assembly to preprocess (`.S`, `.sx`).
    AsmCpp,
    /// LLVM IR, text (`.ll`) or bitcode (`.bc`): compiled by clang for the host only.
    Ir,
}

impl Lang {
    /// True for inputs clang compiles for the host alone (assembly, LLVM IR): no device phases.
    pub fn host_only(self) -> bool {
        matches!(self, Lang::Asm | Lang::AsmCpp | Lang::Ir)
    }

    /// The language of a source file name, or `None` for a linker input.
    pub fn from_path(path: &str) -> Option<Lang> {
        let ext = path.rsplit_once('.').map(|(_, e)| e)?;
        match ext {
            "c" | "i" => Some(Lang::C),
            "cpp" | "cc" | "cxx" | "c++" | "C" | "cp" | "CPP" | "ii" => Some(Lang::Cxx),
            "f" | "F" | "f90" | "F90" | "f95" | "F95" | "f03" | "F03" | "f08" | "F08" | "for" | "FOR" | "ftn" => {
                Some(Lang::Fortran)
            }
            "s" => Some(Lang::Asm),
            "S" | "sx" => Some(Lang::AsmCpp),
            "ll" | "bc" => Some(Lang::Ir),
            _ => None,
        }
    }

    /// The language named by `-x NAME`; `None` for `-x none` and for linker inputs.
    pub fn from_x(name: &str) -> Option<Lang> {
        match name {
            "c" | "cpp-output" | "c-header" => Some(Lang::C),
            "c++" | "c++-cpp-output" | "c++-header" => Some(Lang::Cxx),
            "f95" | "f95-cpp-input" | "f90" | "fortran" => Some(Lang::Fortran),
            "assembler" => Some(Lang::Asm),
            "assembler-with-cpp" => Some(Lang::AsmCpp),
            "ir" => Some(Lang::Ir),
            _ => None,
        }
    }
}

/// How far the build goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Preprocess,
    /// `-fsyntax-only`: check the sources, for the host and every target; write nothing.
    SyntaxOnly,
    Assemble,
    Compile,
    Link,
}

/// One input file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Input {
    pub path: String,
    /// `Some` for a source file; `None` for objects, archives and other linker inputs.
    pub lang: Option<Lang>,
    /// The `-x` name in force for this file, passed on to the compiler.
    pub x: Option<String>,
}

/// A command-line item in its original order (link order matters).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Item {
    /// An option with its separate value, if it takes one.
    Opt(Vec<String>),
    /// The input at this index of [`Args::inputs`].
    Input(usize),
}

/// The options given to one offload target.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TargetGroup {
    pub triple: String,
    pub opts: Vec<Vec<String>>,
    /// Opened by `--target-offload=` (a second one for the triple is merged, with a warning).
    pub explicit_group: bool,
}

/// What ompcc was asked to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    Build,
    List(String),
    Extract(String),
    Help,
    Version,
}

/// The parsed command line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Args {
    pub action: Action,
    pub mode: Mode,
    pub output: Option<String>,
    pub inputs: Vec<Input>,
    /// Host (common) options and inputs, in order.
    pub items: Vec<Item>,
    pub targets: Vec<TargetGroup>,
    pub openmp: bool,
    pub dry_run: bool,
    pub verbose: bool,
    pub save_temps: bool,
    pub clang: Option<String>,
    pub flang: Option<String>,
    pub runtime_dir: Option<String>,
    /// Link as this language (`--driver-mode=`, or the program name `ompc++`/`ompfort`).
    pub link_lang: Option<Lang>,
    /// `--declare-target-report[=FILE]`, `--declare-target-check`, `--declare-target-filter`.
    pub declare_target: crate::declare_target::Options,
    /// `--gpu-check[=ARCH]`: also report what would not link or run on that GPU.
    pub gpu_check: Option<crate::gpu_check::Target>,
    /// `--fortran-section-check=fix|warn|off` (docs/ompcc.md, "Fortran array sections").
    pub fortran_sections: crate::fortran_sections::Mode,
    /// Indexes into [`Args::items`] of the options given after `--host`: the host's alone.
    pub host_only: Vec<usize>,
    /// Warnings about the command line, printed before the build.
    pub warnings: Vec<String>,
    /// GPU toolkit paths in clang's spelling (`--cuda-path=`, `--libomptarget-*-bc-path=`), see [`crate::gpu`].
    pub gpu_opts: Vec<String>,
}

/// Options whose value is the next argument.
const SEPARATE: &[&str] = &[
    "-I",
    "-D",
    "-U",
    "-L",
    "-l",
    "-include",
    "-imacros",
    "-isystem",
    "-idirafter",
    "-iquote",
    "-iprefix",
    "-isysroot",
    "-MF",
    "-MT",
    "-MQ",
    "-Xlinker",
    "-Xclang",
    "-Xflang",
    "-Xassembler",
    "-Xpreprocessor",
    "-u",
    "-z",
    "-T",
    "-target",
    "--sysroot",
    "-module-dir",
    "-J",
    "-arch",
    "-e",
];

/// The host triple, which is also the default offload target.
pub const HOST_TRIPLE: &str = "x86_64-pc-linux-gnu";

fn take_value(argv: &[String], i: &mut usize, opt: &str) -> Result<String> {
    *i += 1;
    match argv.get(*i) {
        Some(v) => Ok(v.clone()),
        None => bail!("argument to '{opt}' is missing (expected 1 value)"),
    }
}

fn group_index(targets: &mut Vec<TargetGroup>, triple: &str) -> Result<usize> {
    let triple = crate::gpu::canonical_triple(triple);
    if triple.is_empty() {
        bail!("empty offload target triple");
    }
    let triple = canonical_triple(triple);
    let triple = triple.as_str();
    if let Some(i) = targets.iter().position(|t| t.triple == triple) {
        return Ok(i);
    }
    targets.push(TargetGroup { triple: triple.to_string(), opts: Vec::new(), explicit_group: false });
    Ok(targets.len() - 1)
}

/// Parses `argv` (without the program name). `prog` is the name ompcc was called by.
pub fn parse(prog: &str, argv: &[String]) -> Result<Args> {
    let mut a = Args {
        action: Action::Build,
        mode: Mode::Link,
        output: None,
        inputs: Vec::new(),
        items: Vec::new(),
        targets: Vec::new(),
        openmp: false,
        dry_run: false,
        verbose: false,
        save_temps: false,
        clang: None,
        flang: None,
        runtime_dir: None,
        link_lang: link_lang_from_prog(prog),
        declare_target: Default::default(),
        gpu_check: None,
        fortran_sections: Default::default(),
        host_only: Vec::new(),
        warnings: Vec::new(),
        gpu_opts: Vec::new(),
    };
    let mut group: Option<usize> = None;
    let mut after_host = false;
    let mut syntax_only = false;
    let mut x: Option<String> = None;
    let mut untargeted_x: Vec<String> = Vec::new();
    let (mut c, mut s, mut e) = (false, false, false);
    let mut i = 0;
    while i < argv.len() {
        let arg = &argv[i];
        let key = arg.split_once('=').map_or(arg.as_str(), |(k, _)| k);
        let val = arg.split_once('=').map(|(_, v)| v.to_string());
        match (key, val) {
            ("-o", None) => a.output = Some(take_value(argv, &mut i, "-o")?),
            ("-c", None) => c = true,
            ("-S", None) => s = true,
            ("-E", None) => e = true,
            ("-v", None) => a.verbose = true,
            ("-###", None) => a.dry_run = true,
            ("--help" | "-help", None) => a.action = Action::Help,
            ("--version", None) => a.action = Action::Version,
            ("-save-temps" | "--save-temps", _) => a.save_temps = true,
            ("--clang", Some(v)) => a.clang = Some(v),
            ("--flang", Some(v)) => a.flang = Some(v),
            ("--runtime-dir", Some(v)) => a.runtime_dir = Some(v),
            ("--declare-target-report", v) => a.declare_target.report = Some(v.unwrap_or_else(|| "-".to_string())),
            ("--declare-target-check", None) => a.declare_target.check = true,
            ("--declare-target-filter", None) => a.declare_target.filter = true,
            ("--gpu-check", v) => a.gpu_check = Some(crate::gpu_check::Target::parse(v.as_deref())?),
            ("--fortran-section-check", Some(v)) => {
                a.fortran_sections = match crate::fortran_sections::Mode::parse(&v) {
                    Some(m) => m,
                    None => bail!("unknown --fortran-section-check '{v}' (expected fix, warn or off)"),
                }
            }
            ("--driver-mode", Some(v)) => {
                a.link_lang = match v.as_str() {
                    "gcc" | "cc" | "c" => Some(Lang::C),
                    "g++" | "c++" => Some(Lang::Cxx),
                    "flang" | "fortran" => Some(Lang::Fortran),
                    _ => bail!("unknown --driver-mode '{v}' (expected gcc, g++ or flang)"),
                }
            }
            ("--offload-list", v) => {
                let f = match v {
                    Some(v) => v,
                    None => take_value(argv, &mut i, "--offload-list")?,
                };
                a.action = Action::List(f);
            }
            ("--offload-extract", v) => {
                let f = match v {
                    Some(v) => v,
                    None => take_value(argv, &mut i, "--offload-extract")?,
                };
                a.action = Action::Extract(f);
            }
            ("--target-offload", Some(t)) => {
                let known = a.targets.len();
                let g = group_index(&mut a.targets, &t)?;
                if g < known && a.targets[g].explicit_group {
                    a.warnings.push(format!(
                        "'--target-offload={t}' opens a second option group for offload target {}: its options are added to the first group's",
                        a.targets[g].triple
                    ));
                }
                a.targets[g].explicit_group = true;
                group = Some(g);
                after_host = false;
                a.openmp = true;
            }
            ("--host", None) => {
                group = None;
                after_host = true;
            }
            ("-fsyntax-only", None) => syntax_only = true,
            ("-M" | "-MM", None) => {
                e = true;
                a.items.push(Item::Opt(vec![arg.clone()]));
            }
            // clang's `--offload-arch=gfx90a,sm_80`: the target follows from the architecture.
            ("--offload-arch", Some(list)) => {
                for arch in list.split(',').filter(|t| !t.is_empty()) {
                    let g = group_index(&mut a.targets, crate::gpu::triple_for_arch(arch)?)?;
                    a.targets[g].opts.push(vec![format!("-march={arch}")]);
                }
                a.openmp = true;
            }
            (k, Some(_)) if crate::gpu::GPU_PATH_OPTS.contains(&k) => a.gpu_opts.push(arg.clone()),
            ("-fopenmp", _) => a.openmp = true,
            ("-fopenmp-targets", Some(list)) => {
                for t in list.split(',').filter(|t| !t.is_empty()) {
                    group_index(&mut a.targets, t)?;
                }
                a.openmp = true;
            }
            ("-Xopenmp-target", Some(t)) => {
                let v = take_value(argv, &mut i, "-Xopenmp-target")?;
                let g = group_index(&mut a.targets, &t)?;
                a.targets[g].opts.push(vec![v]);
            }
            ("-Xopenmp-target", None) => untargeted_x.push(take_value(argv, &mut i, "-Xopenmp-target")?),
            ("-x", None) => {
                let v = take_value(argv, &mut i, "-x")?;
                x = if v == "none" { None } else { Some(v) };
            }
            _ if arg.starts_with("-o") && arg.len() > 2 && !arg.starts_with("-open") => {
                a.output = Some(arg[2..].to_string())
            }
            _ if arg.starts_with('-') && arg.len() > 1 => {
                let mut opt = vec![arg.clone()];
                if SEPARATE.contains(&arg.as_str()) {
                    opt.push(take_value(argv, &mut i, arg)?);
                }
                match group {
                    Some(g) => a.targets[g].opts.push(opt),
                    None => {
                        if after_host {
                            a.host_only.push(a.items.len());
                        }
                        a.items.push(Item::Opt(opt))
                    }
                }
            }
            _ => {
                let lang = match &x {
                    Some(name) => Lang::from_x(name),
                    None => Lang::from_path(arg),
                };
                a.items.push(Item::Input(a.inputs.len()));
                a.inputs.push(Input { path: arg.clone(), lang, x: x.clone() });
            }
        }
        i += 1;
    }
    a.mode = if e {
        Mode::Preprocess
    } else if syntax_only {
        Mode::SyntaxOnly
    } else if s {
        Mode::Assemble
    } else if c {
        Mode::Compile
    } else {
        Mode::Link
    };
    if !untargeted_x.is_empty() {
        if a.targets.len() != 1 {
            bail!("'-Xopenmp-target' without '=<triple>' needs exactly one offload target (found {})", a.targets.len());
        }
        a.targets[0].opts.extend(untargeted_x.into_iter().map(|v| vec![v]));
    }
    if a.openmp && a.targets.is_empty() {
        a.targets.push(TargetGroup { triple: HOST_TRIPLE.to_string(), opts: Vec::new(), explicit_group: false });
    }
    Ok(a)
}

/// The spellings of the x86_64 Linux triple that clang accepts, as the one ompcc uses.
pub fn canonical_triple(t: &str) -> String {
    match t {
        "x86_64" | "x86_64-unknown-linux-gnu" | "x86_64-linux-gnu" | "x86_64-linux" | "x86_64-pc-linux" => {
            HOST_TRIPLE.to_string()
        }
        _ => t.to_string(),
    }
}

/// `--target=T` / `-target T`: names the host's triple, never a device's.
pub fn is_host_target(opt: &[String]) -> bool {
    opt[0].starts_with("--target=") || opt[0] == "-target"
}

/// `ompc++` links as C++, `ompfort`/`ompf90` as Fortran; anything else decides from the sources.
fn link_lang_from_prog(prog: &str) -> Option<Lang> {
    let name = prog.rsplit('/').next().unwrap_or(prog);
    if name.contains("++") || name.contains("cxx") {
        Some(Lang::Cxx)
    } else if name.starts_with("ompf") {
        Some(Lang::Fortran)
    } else {
        None
    }
}

impl Args {
    /// The host options, without inputs, in order.
    pub fn host_opts(&self) -> impl Iterator<Item = &Vec<String>> {
        self.items.iter().filter_map(|it| match it {
            Item::Opt(o) => Some(o),
            Item::Input(_) => None,
        })
    }

    /// The host options that also reach device compiles: not those after `--host`, nor the
    /// host's own `--target=`/`-target`.
    pub fn shared_opts(&self) -> impl Iterator<Item = &Vec<String>> {
        self.items.iter().enumerate().filter_map(|(i, it)| match it {
            Item::Opt(o) if !self.host_only.contains(&i) && !is_host_target(o) => Some(o),
            _ => None,
        })
    }

    /// The host's triple: `--target=`/`-target` among the host options, else x86_64 Linux.
    pub fn host_triple(&self) -> String {
        self.host_opts()
            .filter_map(|o| match o[0].strip_prefix("--target=") {
                Some(t) => Some(t.to_string()),
                None if o[0] == "-target" => o.get(1).cloned(),
                None => None,
            })
            .last()
            .unwrap_or_else(|| HOST_TRIPLE.to_string())
    }

    /// True when offloading is on for this build.
    pub fn offloading(&self) -> bool {
        self.openmp && !self.targets.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(args: &str) -> Args {
        let v: Vec<String> = args.split_whitespace().map(String::from).collect();
        parse("ompcc", &v).unwrap()
    }

    #[test]
    fn groups_take_options_until_next_group_or_host() {
        let a = p("-fopenmp -O2 --target-offload=x86_64-pc-linux-gnu -DDEV a.c --target-offload=nvptx64-nvidia-cuda -march=sm_80 --host -DHOST b.c -o app");
        assert_eq!(a.targets.len(), 2);
        assert_eq!(a.targets[0].opts, vec![vec!["-DDEV".to_string()]]);
        assert_eq!(a.targets[1].opts, vec![vec!["-march=sm_80".to_string()]]);
        let host: Vec<_> = a.host_opts().cloned().collect();
        assert_eq!(host, vec![vec!["-O2".to_string()], vec!["-DHOST".to_string()]]);
        assert_eq!(a.inputs.iter().map(|i| i.path.as_str()).collect::<Vec<_>>(), ["a.c", "b.c"]);
        assert_eq!(a.output.as_deref(), Some("app"));
        assert_eq!(a.mode, Mode::Link);
    }

    #[test]
    fn clang_style_targets_and_xopenmp_target() {
        let a = p("-fopenmp -fopenmp-targets=x86_64-pc-linux-gnu,nvptx64-nvidia-cuda -Xopenmp-target=nvptx64-nvidia-cuda -march=sm_70 -c a.c");
        assert_eq!(a.targets.len(), 2);
        assert!(a.targets[0].opts.is_empty());
        assert_eq!(a.targets[1].opts, vec![vec!["-march=sm_70".to_string()]]);
        assert_eq!(a.mode, Mode::Compile);
    }

    #[test]
    fn untargeted_xopenmp_target_needs_one_target() {
        let a = p("-fopenmp -fopenmp-targets=x86_64-pc-linux-gnu -Xopenmp-target -O3 a.c");
        assert_eq!(a.targets[0].opts, vec![vec!["-O3".to_string()]]);
        let v: Vec<String> =
            "-fopenmp-targets=a,b -Xopenmp-target -O3 a.c".split_whitespace().map(String::from).collect();
        assert!(parse("ompcc", &v).is_err());
    }

    #[test]
    fn separate_values_and_languages() {
        let a = p("-I inc -o out -l m -x c++ x.h -x none f.f90 lib.a");
        assert_eq!(
            a.host_opts().cloned().collect::<Vec<_>>(),
            vec![vec!["-I".to_string(), "inc".to_string()], vec!["-l".to_string(), "m".to_string()]]
        );
        assert_eq!(a.inputs[0].lang, Some(Lang::Cxx));
        assert_eq!(a.inputs[1].lang, Some(Lang::Fortran));
        assert_eq!(a.inputs[2].lang, None);
        assert!(!a.openmp);
    }

    #[test]
    fn fopenmp_alone_targets_the_host() {
        let a = p("-fopenmp a.c");
        assert_eq!(a.targets.len(), 1);
        assert_eq!(a.targets[0].triple, HOST_TRIPLE);
    }

    #[test]
    fn program_name_sets_link_language() {
        assert_eq!(link_lang_from_prog("/x/bin/ompc++"), Some(Lang::Cxx));
        assert_eq!(link_lang_from_prog("ompfort"), Some(Lang::Fortran));
        assert_eq!(link_lang_from_prog("ompcc"), None);
    }

    #[test]
    fn declare_target_flags() {
        let a = p("-fopenmp --declare-target-report a.c");
        assert_eq!(a.declare_target.report.as_deref(), Some("-"));
        assert!(a.declare_target.enabled());
        let a = p("-fopenmp --declare-target-report=r.txt --declare-target-filter a.c");
        assert_eq!(a.declare_target.report.as_deref(), Some("r.txt"));
        assert!(a.declare_target.filter && !a.declare_target.check);
        assert!(!p("-fopenmp a.c").declare_target.enabled());
        assert!(p("--declare-target-check a.c").declare_target.check);
        assert!(
            p("--declare-target-check a.c").items.is_empty()
                || p("--declare-target-check a.c").host_opts().count() == 0
        );
    }

    #[test]
    fn gpu_check_flag() {
        assert_eq!(p("-fopenmp a.c").gpu_check, None);
        let a = p("-fopenmp --gpu-check a.c");
        assert_eq!(a.gpu_check.as_ref().map(|t| t.arch.as_str()), Some("sm_90"));
        assert_eq!(a.host_opts().count(), 0, "not passed on to clang");
        assert_eq!(p("-fopenmp --gpu-check=gfx942 a.c").gpu_check.map(|t| t.triple()), Some("amdgcn-amd-amdhsa"));
        assert!(parse("ompcc", &["--gpu-check=x86_64".to_string(), "a.c".to_string()]).is_err());
    }

    #[test]
    fn mode_precedence_and_missing_values() {
        assert_eq!(p("-c -S a.c").mode, Mode::Assemble);
        assert_eq!(p("-c -E a.c").mode, Mode::Preprocess);
        let v = vec!["-o".to_string()];
        assert!(parse("ompcc", &v).unwrap_err().0.contains("-o"));
    }
}
