//! Issue 12 (hardening): nothing the runtime or an environment variable does may destroy
//! data, hang, or hide a failure. Programs under `tests/programs/hardening` and
//! `tests/programs/runtime`, built by clang 19 and 22 and run on our runtime (and, where the
//! answer must match, on LLVM's).

// Always compiled; run as tests once `make dist` has run, and always under CI (see build.rs).
#![cfg_attr(not(omp_e2e), allow(dead_code))]

use omp_e2e::{compile, dist_lib, program, run_with, scratch, Llvm, ALL};
use serde_json::Value;
use std::path::PathBuf;
use std::process::Output;

fn build_in(llvm: Llvm, rel: &str, tag: &str, extra: &[&str]) -> PathBuf {
    let dir = scratch(&format!("hardening-{}-{tag}", llvm.major()));
    let exe = dir.join("prog");
    compile(llvm, &[&program(rel)], &exe, extra);
    exe
}

fn build(llvm: Llvm, src: &str) -> PathBuf {
    build_in(llvm, &format!("hardening/{src}"), src, &[])
}

fn out(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn err(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn kernels_in(text: &str) -> usize {
    let json: Value = serde_json::from_str(text).unwrap_or_else(|e| panic!("not JSON: {e}\n{text}"));
    json["traceEvents"].as_array().unwrap().iter().filter(|e| e["cat"] == "kernel").count()
}

/// Item 1: `LIBOMPTARGET_PROFILE` writes into the path it names, whatever it is.
#[cfg_attr(omp_e2e, test)]
fn profile_path_is_written_into_not_replaced() {
    let exe = build_in(Llvm::V22, "runtime/data_regions.c", "profile-paths", &[]);
    let dir = exe.parent().unwrap().to_path_buf();
    let no_tmp = || {
        let left: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .filter_map(|e| e.ok())
            .filter(|e| e.file_name().to_string_lossy().contains(".tmp"))
            .collect();
        assert!(left.is_empty(), "temporary files left: {left:?}");
    };
    // A symlink stays a symlink; its target receives the trace.
    let target = dir.join("real.json");
    let link = dir.join("link.json");
    std::fs::write(&target, "old contents that are longer than nothing").unwrap();
    std::os::unix::fs::symlink(&target, &link).unwrap();
    let o = run_with(&exe, &dist_lib(), &[("LIBOMPTARGET_PROFILE", link.to_str().unwrap())]);
    assert!(o.status.success(), "{}", err(&o));
    assert!(std::fs::symlink_metadata(&link).unwrap().file_type().is_symlink(), "the symlink was replaced");
    assert!(kernels_in(&std::fs::read_to_string(&target).unwrap()) >= 6);
    no_tmp();
    // A FIFO stays a FIFO; a reader gets the trace.
    let fifo = dir.join("trace.fifo");
    assert!(std::process::Command::new("mkfifo").arg(&fifo).status().unwrap().success());
    let reader = {
        let fifo = fifo.clone();
        std::thread::spawn(move || std::fs::read_to_string(fifo).unwrap())
    };
    let o = run_with(&exe, &dist_lib(), &[("LIBOMPTARGET_PROFILE", fifo.to_str().unwrap())]);
    assert!(o.status.success(), "{}", err(&o));
    assert!(kernels_in(&reader.join().unwrap()) >= 6);
    use std::os::unix::fs::FileTypeExt as _;
    assert!(std::fs::symlink_metadata(&fifo).unwrap().file_type().is_fifo(), "the FIFO was replaced");
    no_tmp();
    // /dev/stderr: the trace follows the program's own stderr; stdout is untouched.
    let plain = run_with(&exe, &dist_lib(), &[]);
    let o = run_with(&exe, &dist_lib(), &[("LIBOMPTARGET_PROFILE", "/dev/stderr")]);
    assert!(o.status.success(), "{}", err(&o));
    assert_eq!(out(&o), out(&plain));
    let e = err(&o);
    let start = e.find("{\"displayTimeUnit\"").unwrap_or_else(|| panic!("no trace on stderr: {e}"));
    assert!(kernels_in(&e[start..]) >= 6);
    // /dev/stdout redirected to a file: the program's output is kept, the trace follows it.
    let file = dir.join("stdout.txt");
    let o = std::process::Command::new(&exe)
        .env("LD_LIBRARY_PATH", dist_lib())
        .env("LIBOMPTARGET_PROFILE", "/dev/stdout")
        .stdout(std::fs::File::create(&file).unwrap())
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", err(&o));
    let text = std::fs::read_to_string(&file).unwrap();
    let start = text.find("{\"displayTimeUnit\"").unwrap_or_else(|| panic!("no trace in stdout: {text}"));
    let end = start + text[start..].find("\n]}\n").expect("the trace ends") + 4;
    assert!(kernels_in(&text[start..end]) >= 6);
    let rest = format!("{}{}", &text[..start], &text[end..]);
    assert_eq!(rest, out(&plain), "the program's output was clobbered:\n{text}");
}

/// Item 2: a library with target regions, `dlopen`ed, launched and `dlclose`d 5,000 times
/// under a 256-descriptor limit: each unregistration gives back its image's memfd.
#[cfg_attr(omp_e2e, test)]
fn dlopen_launch_dlclose_cycles_do_not_leak_descriptors() {
    for llvm in ALL {
        let dir = scratch(&format!("hardening-{}-dlopen", llvm.major()));
        let lib = dir.join("libcycle.so");
        compile(llvm, &[&program("hardening/dlopen_lib.c")], &lib, &["-shared", "-fPIC"]);
        let exe = dir.join("prog");
        compile(llvm, &[&program("hardening/dlopen_cycle.c")], &exe, &["-ldl"]);
        let o =
            std::process::Command::new(&exe).arg(&lib).arg("5000").env("LD_LIBRARY_PATH", dist_lib()).output().unwrap();
        assert!(o.status.success(), "clang {}: {}\n{}", llvm.major(), out(&o), err(&o));
        assert!(out(&o).contains("5000 cycles ok x=1"), "{}", out(&o));
    }
}

/// Item 4: `omp_target_memset`/`_async` and `omp_target_memcpy` with a length far beyond
/// the allocation: an error naming the call, no allocation sized by the user, no abort.
#[cfg_attr(omp_e2e, test)]
fn huge_lengths_are_refused_not_fatal() {
    for llvm in ALL {
        let exe = build(llvm, "huge_lengths.c");
        let o = run_with(&exe, &dist_lib(), &[]);
        let (so, se) = (out(&o), err(&o));
        assert!(o.status.success(), "clang {}: {so}\n{se}", llvm.major());
        for line in [
            "memset huge -> p",
            "memcpy d1<-d0 huge rc=-1",
            "memcpy d0<-d0 huge rc=-1",
            "memcpy host<-d0 huge rc=-1",
            "memcpy d0<-host huge rc=-1",
            "memcpy offset past end rc=-1",
            "memcpy d1<-d0 rc=0",
            "contents kept: 1",
            "survived",
        ] {
            assert!(so.contains(line), "clang {}: missing {line:?} in\n{so}\n{se}", llvm.major());
        }
        assert!(
            se.contains("omp_target_memset: 4611686018427387904 bytes at 0x")
                && se.contains("on device 0 run past the end of its allocation (64 bytes left)"),
            "{se}"
        );
        assert!(se.contains("on the host device run past the end of its allocation (64 bytes left)"), "{se}");
        assert!(se.contains("omp_target_memcpy: 16 bytes at 0x"), "{se}");
        assert!(se.contains("(8 bytes left)"), "{se}");
    }
}

/// Item 5: `omp_target_free` twice, of a stack address, or on the wrong device: a bad-free
/// message, no `free(): double free` abort.
#[cfg_attr(omp_e2e, test)]
fn bad_frees_are_reported_not_fatal() {
    for llvm in ALL {
        let exe = build(llvm, "bad_free.c");
        let o = run_with(&exe, &dist_lib(), &[]);
        let (so, se) = (out(&o), err(&o));
        assert!(o.status.success(), "clang {}: {so}\n{se}", llvm.major());
        assert!(so.contains("host device: survived\ndevice 0: survived\ndone"), "{so}\n{se}");
        let bad = |on: &str| {
            se.lines()
                .filter(|l| {
                    l.contains("omp_target_free: bad free of 0x") && l.contains(&format!("not allocated on {on} "))
                })
                .count()
        };
        assert_eq!(bad("the host device"), 2, "{se}");
        assert_eq!(bad("device 1"), 1, "{se}");
        assert_eq!(bad("device 0"), 2, "{se}");
    }
}

/// Items 6 and 26: under `OMP_TARGET_OFFLOAD=DISABLED` clang 22 programs see no device and
/// the initial device 0 (LLVM 22, the specification); clang 19 programs keep LLVM 19's
/// answer. Both as LLVM's runtime of the same version answers.
#[cfg_attr(omp_e2e, test)]
fn offload_disabled_hides_devices_from_clang22_programs() {
    for llvm in ALL {
        let exe = build(llvm, "disabled.c");
        let env = [("OMP_TARGET_OFFLOAD", "DISABLED")];
        let ours = run_with(&exe, &dist_lib(), &env);
        let theirs = run_with(&exe, &llvm.llvm_lib(), &env);
        assert!(ours.status.success() && theirs.status.success(), "{}\n{}", err(&ours), err(&theirs));
        assert_eq!(out(&ours), out(&theirs), "clang {}", llvm.major());
        let expect = if llvm == Llvm::V22 {
            "num_devices=0 initial_device=0 on_host=1"
        } else {
            "num_devices=4 initial_device=4 on_host=1"
        };
        assert!(out(&ours).contains(expect), "clang {}: {}", llvm.major(), out(&ours));
        assert!(out(&ours).contains("default_device=0 on_host=1"), "{}", out(&ours));
        // Without the variable, the devices are there.
        let o = run_with(&exe, &dist_lib(), &[]);
        assert!(out(&o).contains("num_devices=4 initial_device=4 on_host=0"), "{}", out(&o));
    }
}

/// Runs a program expected to stop at a mandatory-offload failure: abort(), not a crash,
/// not a silent success; returns its stderr.
fn fails_at_construct(llvm: Llvm, src: &str, args: &[&str]) -> String {
    let exe = build(llvm, src);
    let o = std::process::Command::new(&exe).args(args).env("LD_LIBRARY_PATH", dist_lib()).output().unwrap();
    let e = err(&o);
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(o.status.signal(), Some(6), "clang {}: {src} must abort: {}\n{e}", llvm.major(), out(&o));
    assert!(!out(&o).contains("not reached"), "{}", out(&o));
    e
}

/// Item 7: `map(tofrom: a[0:n])` with `n < 0` is an error at the construct, fatal under
/// mandatory offloading (LLVM fails its allocation; we say why).
#[cfg_attr(omp_e2e, test)]
fn a_negative_section_length_is_an_error_at_the_construct() {
    for llvm in ALL {
        let e = fails_at_construct(llvm, "negative_length.c", &[]);
        assert!(
            e.contains("'a[0:n]' (negative_length.c:7:7) has a negative length (-16 bytes): cannot map it on device 0"),
            "{e}"
        );
        assert!(e.contains("negative_length.c:9:1: omptarget fatal error 1"), "{e}");
    }
}

/// Item 10: `map(to: p[0:4])` with `p == NULL` is an error naming the variable, not a
/// segmentation fault in the copy (LLVM crashes).
#[cfg_attr(omp_e2e, test)]
fn a_null_base_with_a_section_is_an_error_naming_the_variable() {
    for llvm in ALL {
        let e = fails_at_construct(llvm, "null_section.c", &[]);
        assert!(
            e.contains(
                "'p[0:4]' (null_section.c:7:8) maps 16 bytes at host address 0x0000000000000000: its base pointer is NULL"
            ),
            "{e}"
        );
        assert!(e.contains("null_section.c:8:1: omptarget fatal error 1"), "{e}");
    }
}

/// Item 23 (LLVM 22's offloading/requires.c): a hand-built table of two 56-byte `requires`
/// entries (version 0) is read; an inconsistent `reverse_offload` is fatal error 2 as in
/// LLVM; an unreadable table is reported, and fatal under MANDATORY.
#[cfg_attr(omp_e2e, test)]
fn requires_entries_are_read_and_checked_for_consistency() {
    let llvm = Llvm::V22;
    let good = build_in(llvm, "hardening/requires_reg.c", "requires-good", &["-DREQ=1"]);
    let o = run_with(&good, &dist_lib(), &[]);
    assert!(o.status.success(), "{}", err(&o));
    assert_eq!(out(&o), "registered\non_host=0\n");
    assert!(!err(&o).contains("malformed"), "{}", err(&o));
    let bad = build_in(llvm, "hardening/requires_reg.c", "requires-bad", &["-DREQ=2"]);
    for env in [&[][..], &[("OMP_TARGET_OFFLOAD", "MANDATORY")][..]] {
        for lib in [dist_lib(), llvm.llvm_lib()] {
            let o = run_with(&bad, &lib, env);
            use std::os::unix::process::ExitStatusExt;
            assert_eq!(o.status.signal(), Some(6), "{lib:?}: {}", err(&o));
            assert!(
                err(&o)
                    .contains("omptarget fatal error 2: '#pragma omp requires reverse_offload' not used consistently!"),
                "{lib:?}: {}",
                err(&o)
            );
            assert!(!out(&o).contains("registered"));
        }
    }
    let ragged = build_in(llvm, "hardening/requires_reg.c", "requires-ragged", &["-DBAD_TABLE"]);
    let o = run_with(&ragged, &dist_lib(), &[]);
    assert!(o.status.success(), "{}", err(&o));
    assert!(err(&o).contains("ignoring a malformed binary descriptor: offload entry table: 76 bytes"), "{}", err(&o));
    let o = run_with(&ragged, &dist_lib(), &[("OMP_TARGET_OFFLOAD", "MANDATORY")]);
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(o.status.signal(), Some(6), "{}", err(&o));
    assert!(
        err(&o).contains("omptarget fatal error 1: a binary could not be registered while offloading is mandatory"),
        "{}",
        err(&o)
    );
    assert!(!out(&o).contains("on_host"), "{}", out(&o));
}

/// Item 24 (LLVM 22's ctor_dtor_api.cpp, ctor_dtor_lazy.cpp): `omp_get_mapped_ptr` and
/// `omp_target_is_present` on declare-target globals before any kernel ran load the image
/// first (its constructors run) for clang 22 programs; clang 19 programs keep LLVM 19's
/// answer. Both as LLVM's runtime of the same version answers.
#[cfg_attr(omp_e2e, test)]
fn api_calls_on_declare_target_globals_load_the_image_first() {
    for llvm in ALL {
        let exe = build(llvm, "mapped_global.cpp");
        let ours = run_with(&exe, &dist_lib(), &[]);
        let theirs = run_with(&exe, &llvm.llvm_lib(), &[]);
        assert!(ours.status.success() && theirs.status.success(), "{}\n{}", err(&ours), err(&theirs));
        assert_eq!(out(&ours), out(&theirs), "clang {}", llvm.major());
        let expect = if llvm == Llvm::V22 {
            "present=1\nmapped: s device copy, g device copy\ndevice s.v=42 g=7\nkernel k=49\n"
        } else {
            "present=0\nmapped: s none, g none\ndevice s.v=-1 g=-1\nkernel k=49\n"
        };
        assert_eq!(out(&ours), expect, "clang {}", llvm.major());
    }
}

/// Item 25 (LLVM 22's mapping/is_accessible.cpp): `omp_target_is_accessible(host_ptr)` on
/// the host offload device is false for clang 22 programs, with or without `requires
/// unified_shared_memory`, as LLVM 22's runtime answers; true on the initial device.
#[cfg_attr(omp_e2e, test)]
fn is_accessible_answers_as_llvm22() {
    let llvm = Llvm::V22;
    for (tag, extra) in [("accessible", &[][..]), ("accessible-usm", &["-DUSM"][..])] {
        let exe = build_in(llvm, "hardening/accessible.c", tag, extra);
        let ours = run_with(&exe, &dist_lib(), &[]);
        let theirs = run_with(&exe, &llvm.llvm_lib(), &[]);
        assert!(ours.status.success() && theirs.status.success(), "{}\n{}", err(&ours), err(&theirs));
        assert_eq!(out(&ours), out(&theirs), "{tag}");
        assert!(out(&ours).contains("device 0: 0\ninitial device: 1\n"), "{tag}: {}", out(&ours));
    }
}

/// Item 9: `omp_target_disassociate_ptr(p, 99)` says the device number is bad, once, and
/// not also that no association is possible on the host.
#[cfg_attr(omp_e2e, test)]
fn a_bad_device_number_gets_one_message() {
    for llvm in ALL {
        let exe = build(llvm, "messages.c");
        let o = run_with(&exe, &dist_lib(), &[]);
        let (so, se) = (out(&o), err(&o));
        assert!(o.status.success(), "{se}");
        assert!(so.contains("disassociate on device 99 rc=-1\nassociate on device 99 rc=-1"), "{so}");
        assert_eq!(se.lines().count(), 2, "{se}");
        assert!(se.contains("omp_target_disassociate_ptr: device number 99 is not valid"), "{se}");
        assert!(se.contains("omp_target_associate_ptr: device number 99 is not valid"), "{se}");
        assert!(!se.contains("on the host"), "{se}");
    }
}

/// Item 8: `main` returns while `target nowait` tasks are pending. Tasks that run after the
/// program's binary was unregistered are skipped with a plain message (LLVM segfaults or
/// reports a missing target pointer); images are not unloaded under running kernels.
#[cfg_attr(omp_e2e, test)]
fn returning_from_main_with_nowait_tasks_in_flight_is_plain() {
    for llvm in ALL {
        let exe = build(llvm, "nowait_exit.c");
        for _ in 0..3 {
            let o = run_with(&exe, &dist_lib(), &[]);
            let e = err(&o);
            assert!(o.status.success(), "clang {}: {}\n{e}", llvm.major(), o.status);
            assert_eq!(out(&o), "main returns\n");
            assert!(!e.contains("does not have a matching target pointer"), "{e}");
            if !e.is_empty() {
                assert!(e.contains("target region at nowait_exit.c:15:1 skipped: its binary was unregistered (the program is exiting or its library was closed)"), "{e}");
                assert!(e.lines().all(|l| l.contains("skipped: its binary was unregistered")), "{e}");
            }
        }
    }
}

/// Item 20: `interop init/use/destroy ... depend(...)` wait for the `target nowait` tasks
/// they depend on (through libomp's `__kmpc_omp_wait_deps`).
#[cfg_attr(omp_e2e, test)]
fn interop_constructs_honour_their_depend_clauses() {
    for llvm in ALL {
        let exe = build(llvm, "interop_depend.c");
        let o = run_with(&exe, &dist_lib(), &[]);
        assert!(o.status.success(), "clang {}: {}", llvm.major(), err(&o));
        assert_eq!(out(&o), "init waited: yes\nuse waited: yes\ndestroy waited: yes\n", "{}", err(&o));
        assert!(err(&o).is_empty(), "{}", err(&o));
    }
}

/// Item 22: strided `target update to(...)`. Where the compiler passes the stride (clang 22,
/// a local array) exactly the named elements move, as on LLVM 22; where it does not (clang
/// 19 drops it and asks for the whole span; clang 22 passes a pointer member's section with
/// a byte size for its dimension count, on which LLVM 22 crashes) the update is refused
/// with a message, never silently overwriting the skipped elements.
#[cfg_attr(omp_e2e, test)]
fn strided_updates_are_exact_or_refused() {
    let exe = build(Llvm::V22, "strided_update.c");
    let ours = run_with(&exe, &dist_lib(), &[]);
    let theirs = run_with(&exe, &Llvm::V22.llvm_lib(), &[]);
    assert!(ours.status.success(), "{}", err(&ours));
    assert_eq!(out(&ours), "array section: 0 wrong\n");
    assert_eq!(out(&ours), out(&theirs));
    let e = fails_at_construct(Llvm::V22, "strided_update.c", &["member"]);
    assert!(
        e.contains("'s.data[0:s.len / 2:2]' (strided_update.c:18:11): a strided (non-contiguous) update with 4096 dimensions cannot be right"),
        "{e}"
    );
    for args in [&[][..], &["member"][..]] {
        let e = fails_at_construct(Llvm::V19, "strided_update.c", args);
        assert!(
            e.contains("the compiler passed this strided section as 4096 contiguous bytes; updating them would overwrite the elements the stride skips: not updated"),
            "{e}"
        );
        assert!(e.contains("Call to targetDataUpdate failed, abort target."), "{e}");
    }
}
