//! `make install` into a temporary prefix: a program built with only that prefix's `ompcc` on
//! PATH runs on the installed runtime; the runtime's sonames are LLVM's, so a program linked
//! with `-L PREFIX/lib` also runs on LLVM's runtime directory; `make uninstall` removes exactly
//! what was installed, also from a prefix with spaces in its name.

// Always compiled; run as tests once `make dist` has run, and always under CI (see build.rs).
#![cfg_attr(not(omp_e2e), allow(dead_code))]

use omp_e2e::{program, repo_root, scratch, Llvm};
use std::collections::BTreeSet;
use std::path::Path;
use std::process::{Command, Output};

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn must(o: Output, what: &str) -> Output {
    assert!(o.status.success(), "{what} failed:\nstdout:\n{}\nstderr:\n{}", text(&o.stdout), text(&o.stderr));
    o
}

/// The dynamic section's entries of one kind (`SONAME`, `NEEDED`, `RUNPATH`).
fn dynamic(file: &Path, kind: &str) -> Vec<String> {
    let o = must(Command::new("readelf").arg("-d").arg(file).output().unwrap(), "readelf -d");
    text(&o.stdout)
        .lines()
        .filter(|l| l.contains(&format!("({kind})")))
        .filter_map(|l| Some(l.split_once('[')?.1.trim_end_matches(']').to_string()))
        .collect()
}

fn make(args: &[&str]) -> Output {
    must(Command::new("make").current_dir(repo_root()).arg("-s").args(args).output().unwrap(), "make")
}

#[cfg_attr(omp_e2e, test)]
fn install_build_run_and_uninstall() {
    let dir = scratch("install");
    let prefix = dir.join("prefix");
    let p = prefix.to_str().unwrap();
    // Something of the user's that must survive the uninstall.
    std::fs::create_dir_all(prefix.join("bin")).unwrap();
    std::fs::write(prefix.join("bin/mine"), "keep").unwrap();
    make(&["install", &format!("PREFIX={p}")]);
    for f in [
        "bin/ompcc",
        "bin/offload-server",
        "bin/offload-mpi-device",
        "bin/omp-replay",
        "lib/libomptarget.so.19.1",
        "lib/libomptarget.so.22.1",
        "lib/libomptarget.so",
        "lib/libomptarget.devicertl.a",
        "lib/libomptarget.devicertl.bc",
        "lib/offload-worker",
        "share/man/man1/ompcc.1",
        "share/man/man1/offload-server.1",
        "share/man/man1/omp-replay.1",
        "share/doc/omprs/README.md",
        "share/doc/omprs/ompcc.md",
    ] {
        assert!(prefix.join(f).exists(), "{f} not installed");
    }
    // Each man page is its binary's --help.
    for (bin, opt) in
        [("ompcc", "--offload-list"), ("offload-server", "--max-session-memory"), ("omp-replay", "--verify")]
    {
        let page = std::fs::read_to_string(prefix.join(format!("share/man/man1/{bin}.1"))).unwrap();
        let help = must(Command::new(prefix.join("bin").join(bin)).arg("--help").output().unwrap(), "--help");
        assert!(page.contains(opt) && text(&help.stdout).contains(opt), "{bin}.1");
        assert_eq!(page.matches("\n.SH ").count(), 3, "{bin}.1: NAME, DESCRIPTION, SEE ALSO");
    }

    // Build with the installed ompcc alone (no dist/, no OMPCC_RUNTIME_DIR), through a symlink
    // elsewhere too, and run with nothing on LD_LIBRARY_PATH.
    std::fs::create_dir_all(dir.join("elsewhere")).unwrap();
    std::os::unix::fs::symlink(prefix.join("bin/ompcc"), dir.join("elsewhere/ompcc")).unwrap();
    let src = program("driver/saxpy.c");
    for (bindir, exe) in [(prefix.join("bin"), "app"), (dir.join("elsewhere"), "app2")] {
        let o = Command::new("ompcc")
            .current_dir(&dir)
            .env("PATH", format!("{}:/usr/bin:/bin", bindir.display()))
            .env_remove("OMPCC_RUNTIME_DIR")
            .args(["-fopenmp", "-O1"])
            .arg(&src)
            .args(["-o", exe])
            .output()
            .unwrap();
        must(o, "installed ompcc");
        let exe = dir.join(exe);
        assert_eq!(dynamic(&exe, "RUNPATH"), [format!("{p}/lib")]);
        assert!(dynamic(&exe, "NEEDED").contains(&"libomptarget.so.22.1".to_string()));
        let o = Command::new(&exe).env_remove("LD_LIBRARY_PATH").env("OMP_TARGET_OFFLOAD", "MANDATORY").output();
        assert_eq!(text(&must(o.unwrap(), "installed program").stdout).trim(), "saxpy sum=100000000 on_device=1");
    }

    // Uninstall: every installed file goes, the user's stays.
    make(&["uninstall", &format!("PREFIX={p}")]);
    let left: Vec<_> = walk(&prefix).into_iter().filter(|f| !f.ends_with("bin/mine")).collect();
    assert!(left.is_empty(), "left behind: {left:?}");
    assert!(prefix.join("bin/mine").exists());
}

/// What `make install` puts under its root, relative to it: every file of the Makefile's
/// INSTALL_* lists, the development link and each page of docs/.
fn installed_files() -> BTreeSet<String> {
    let mut files: BTreeSet<String> = [
        "bin/ompcc",
        "bin/offload-server",
        "bin/offload-mpi-device",
        "bin/omp-replay",
        "lib/libomptarget.so",
        "lib/libomptarget.so.19.1",
        "lib/libomptarget.so.22.1",
        "lib/libomptarget.devicertl.a",
        "lib/libomptarget.devicertl.bc",
        "lib/libomptarget.devicertl.llvm19.bc",
        "lib/offload-worker",
        "share/man/man1/ompcc.1",
        "share/man/man1/offload-server.1",
        "share/man/man1/omp-replay.1",
        "share/doc/omprs/README.md",
    ]
    .into_iter()
    .map(String::from)
    .collect();
    for doc in std::fs::read_dir(repo_root().join("docs")).unwrap() {
        let name = doc.unwrap().file_name().into_string().unwrap();
        if name.ends_with(".md") {
            files.insert(format!("share/doc/omprs/{name}"));
        }
    }
    files
}

/// The files under `root`, relative to it.
fn files_under(root: &Path) -> BTreeSet<String> {
    let prefix = format!("{}/", root.display());
    walk(root).iter().map(|f| f.strip_prefix(&prefix).unwrap_or(f).to_string()).collect()
}

/// The names in `dir`.
fn names_in(dir: &Path) -> BTreeSet<String> {
    std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect()
}

/// Issue 24: a root with a space (or a quote) in its name stays one word in every recipe.
/// Unquoted, `make uninstall PREFIX="…/x/precious dir"` removed the file `…/x/precious`, and
/// `make install` made directories named after the pieces.
#[cfg_attr(omp_e2e, test)]
fn install_and_uninstall_with_spaces_in_prefix_and_destdir() {
    let x = scratch("install-spaces").join("x");
    std::fs::create_dir_all(&x).unwrap();
    let precious = x.join("precious");
    std::fs::write(&precious, "keep").unwrap();
    let prefix = x.join("precious dir");
    let destdir = x.join("precious stage's");
    for (vars, root) in [
        (vec![format!("PREFIX={}", prefix.display())], prefix.clone()),
        (vec![format!("DESTDIR={}", destdir.display()), "PREFIX=/opt/omp rs".to_string()], destdir.join("opt/omp rs")),
    ] {
        let vars: Vec<&str> = vars.iter().map(String::as_str).collect();
        make(&[&["install"], &vars[..]].concat());
        assert_eq!(files_under(&root), installed_files(), "make install {vars:?}");
        make(&[&["uninstall"], &vars[..]].concat());
        assert_eq!(files_under(&root), BTreeSet::new(), "left behind by make uninstall {vars:?}");
        assert_eq!(std::fs::read_to_string(&precious).unwrap(), "keep", "make uninstall {vars:?}");
    }
    // Nothing was made from the pieces of a split name: not next to the roots, nor in the
    // checkout, where make runs.
    let expected: BTreeSet<String> = ["precious", "precious dir", "precious stage's"].map(String::from).into();
    assert_eq!(names_in(&x), expected);
    for piece in ["dir", "stage's", "rs"] {
        assert!(!repo_root().join(piece).exists(), "make made {piece} in the checkout");
    }
}

fn walk(d: &Path) -> Vec<String> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(d).into_iter().flatten().flatten() {
        let p = e.path();
        if p.is_dir() && !p.is_symlink() {
            out.extend(walk(&p));
        } else {
            out.push(p.to_string_lossy().into_owned());
        }
    }
    out
}

#[cfg_attr(omp_e2e, test)]
fn sonames_are_llvms_so_linked_programs_run_on_llvms_runtime() {
    let lib = omp_e2e::dist_lib();
    // The development link (what -lomptarget finds) and both versioned files.
    assert_eq!(dynamic(&lib.join("libomptarget.so"), "SONAME"), ["libomptarget.so.19.1"]);
    for llvm in omp_e2e::ALL {
        let name = format!("libomptarget.so.{}.1", llvm.major());
        assert_eq!(dynamic(&lib.join(&name), "SONAME"), std::slice::from_ref(&name));
        assert!(llvm.llvm_lib().join(&name).exists(), "{name} is not in LLVM {}'s installation", llvm.major());
    }
    // As docs/devicertl.md tells flang-19 users: -L dist/lib (here with clang 19, same link).
    let dir = scratch("install-soname");
    let llvm = Llvm::V19;
    let exe = dir.join("app");
    let o = Command::new(llvm.clang())
        .args(["-fopenmp", "-fopenmp-targets=x86_64-pc-linux-gnu", "-O1"])
        .arg(format!("-L{}", lib.display()))
        .args(llvm.link_flags())
        .arg(program("driver/saxpy.c"))
        .arg("-o")
        .arg(&exe)
        .output()
        .unwrap();
    must(o, "clang-19 -L dist/lib");
    assert!(dynamic(&exe, "NEEDED").contains(&"libomptarget.so.19.1".to_string()));
    for runtime in [lib.clone(), llvm.llvm_lib()] {
        let o = omp_e2e::run_with(&exe, &runtime, &[("OMP_TARGET_OFFLOAD", "MANDATORY")]);
        assert_eq!(text(&must(o, "run").stdout).trim(), "saxpy sum=100000000 on_device=1", "{}", runtime.display());
    }
}
