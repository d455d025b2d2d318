//! LIBOMPTARGET_DEBUG as a trace: a small mapping program's run told line by line, any
//! non-zero level on, lines whole when two threads offload at once, and the trace in a file
//! (LIBOMPTARGET_DEBUG_FILE).

// Always compiled; run as tests once `make dist` has run, and always under CI (see build.rs).
#![cfg_attr(not(omp_e2e), allow(dead_code))]

use omp_e2e::{compile, dist_lib, program, run_with, scratch, Llvm};
use std::path::PathBuf;
use std::process::Output;

const PREFIX: &str = "omptarget --> ";

fn build(src: &str) -> PathBuf {
    // A directory per build: tests that build the same program run in parallel.
    static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = scratch(&format!("debug-trace-{src}-{n}"));
    let exe = dir.join("prog");
    compile(Llvm::V22, &[&program(&format!("debug/{src}"))], &exe, &[]);
    exe
}

fn err(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn out(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// Each of `steps` (substrings) on the line of the step before or a later one; panics
/// naming the first step not found, with the trace.
fn assert_in_order(trace: &str, steps: &[&str]) {
    let lines: Vec<&str> = trace.lines().collect();
    let mut at = 0;
    for step in steps {
        match lines[at..].iter().position(|l| l.contains(step)) {
            Some(i) => at += i,
            None => panic!("no {step:?} after line {at} of the trace:\n{trace}"),
        }
    }
}

/// Every line that carries the prefix starts with it and carries it once: no two lines were
/// written into each other.
fn assert_whole_lines(text: &str) -> usize {
    let mut n = 0;
    for l in text.lines().filter(|l| l.contains(" --> ")) {
        assert!(l.starts_with(PREFIX) && l.matches(" --> ").count() == 1, "a broken line: {l:?}");
        n += 1;
    }
    n
}

#[cfg_attr(omp_e2e, test)]
fn a_debug_run_of_a_mapping_program_tells_the_whole_story() {
    let exe = build("mapping.c");
    let plain = run_with(&exe, &dist_lib(), &[]);
    assert!(plain.status.success() && !err(&plain).contains(PREFIX), "{}", err(&plain));
    let o = run_with(&exe, &dist_lib(), &[("LIBOMPTARGET_DEBUG", "-1")]);
    let e = err(&o);
    assert!(o.status.success(), "{e}");
    assert_eq!(out(&o), out(&plain), "DEBUG changed the program's output");
    assert_eq!(out(&o), "256\n");
    assert_whole_lines(&e);
    assert!(
        e.lines().any(|l| l.contains("Size=1024: new; Creating new map entry")
            && l.ends_with("DynRefCount=0->1, HoldRefCount=0, Name=a[0:256]")),
        "{e}"
    );
    assert_in_order(
        &e,
        &[
            "omptarget --> registering binary 0x",
            "omptarget --> device 0 is device 0 of plugin",
            "omptarget --> device 0: plugin load_image(",
            "omptarget --> device 0: kernel __omp_offloading_",
            "omptarget --> device 0: loaded image of",
            // target enter data: a new entry, its memory, the copy in.
            "omptarget --> device 0: Entry  0: Size=1024, Type=0x1, Name=a[0:256]",
            "omptarget --> device 0: target enter data at mapping.c:9:1 begins",
            "memory manager miss: 1024 bytes",
            "omptarget --> device 0: plugin alloc(1024, Default) -> 0x",
            "omptarget --> device 0: allocated 1024 bytes at TgtPtr=0x",
            "Size=1024: new; Creating new map entry with HstPtrBase=0x",
            "omptarget --> device 0: Moving 1024 bytes (hst:0x",
            "omptarget --> device 0: plugin submit(tgt 0x",
            "omptarget --> device 0: target enter data at mapping.c:9:1 ends",
            // The region finds it mapped (1 -> 2), launches, releases it (2 -> 1).
            "omptarget --> device 0: Entry  0: Size=1024, Type=0x23, Name=a[0:256]",
            "omptarget --> device 0: target region at mapping.c:10:1 begins",
            "Size=1024: existing; Mapping exists with TgtPtrBegin=0x",
            "DynRefCount=1->2, HoldRefCount=0",
            "omptarget --> device 0: Launching kernel __omp_offloading_",
            "omptarget --> device 0: kernel argument 0: 0x",
            "omptarget --> device 0: plugin launch(",
            "DynRefCount=2->1, HoldRefCount=0",
            "omptarget --> device 0: target region at mapping.c:10:1 ends",
            // target exit data: the last reference, the copy out, the entry and memory go.
            "omptarget --> device 0: target exit data at mapping.c:13:1 begins",
            "DynRefCount=1->0, HoldRefCount=0",
            "omptarget --> device 0: Moving 1024 bytes (tgt:0x",
            "omptarget --> device 0: plugin retrieve(hst 0x",
            "omptarget --> device 0: Removing map entry with HstPtrBegin=0x",
            "omptarget --> device 0: memory manager keeps 1024 bytes at 0x",
            "omptarget --> device 0: freeing 1024 bytes at TgtPtr=0x",
            "omptarget --> device 0: target exit data at mapping.c:13:1 ends",
            "omptarget --> device 0: plugin unload_image(",
        ],
    );
}

#[cfg_attr(omp_e2e, test)]
fn every_non_zero_level_turns_the_trace_on_and_zero_turns_it_off() {
    let exe = build("mapping.c");
    for level in ["-1", "1", "0x10", "7"] {
        let e = err(&run_with(&exe, &dist_lib(), &[("LIBOMPTARGET_DEBUG", level)]));
        assert!(e.contains("omptarget --> device 0: Launching kernel"), "DEBUG={level}:\n{e}");
    }
    let e = err(&run_with(&exe, &dist_lib(), &[("LIBOMPTARGET_DEBUG", "0")]));
    assert!(!e.contains(PREFIX), "DEBUG=0:\n{e}");
}

#[cfg_attr(omp_e2e, test)]
fn two_threads_never_interleave_and_the_trace_can_go_to_a_file() {
    let exe = build("two_threads.c");
    let plain = out(&run_with(&exe, &dist_lib(), &[]));
    let o = run_with(&exe, &dist_lib(), &[("LIBOMPTARGET_DEBUG", "1")]);
    assert!(o.status.success(), "{}", err(&o));
    assert_eq!(out(&o), plain);
    let on_stderr = assert_whole_lines(&err(&o));
    assert!(on_stderr > 2 * 50 * 5, "{on_stderr} lines for 100 target regions");

    let file = exe.with_file_name("debug.log");
    let o = run_with(
        &exe,
        &dist_lib(),
        &[("LIBOMPTARGET_DEBUG", "1"), ("LIBOMPTARGET_DEBUG_FILE", file.to_str().unwrap())],
    );
    assert!(o.status.success(), "{}", err(&o));
    assert!(!err(&o).contains(PREFIX), "the trace went to the file, not stderr:\n{}", err(&o));
    let text = std::fs::read_to_string(&file).expect("the debug file was written");
    assert!(text.lines().all(|l| l.starts_with(PREFIX)), "{text}");
    let in_file = assert_whole_lines(&text);
    assert!(in_file > 2 * 50 * 5, "{in_file} lines in the file for 100 target regions");
}

#[cfg_attr(omp_e2e, test)]
fn a_debug_file_that_cannot_be_opened_is_named_and_the_trace_stays_on_stderr() {
    let exe = build("mapping.c");
    let o = run_with(
        &exe,
        &dist_lib(),
        &[("LIBOMPTARGET_DEBUG", "1"), ("LIBOMPTARGET_DEBUG_FILE", "/nonexistent-dir/debug.log")],
    );
    let e = err(&o);
    assert!(o.status.success(), "{e}");
    assert!(
        e.lines().next().is_some_and(|l| l
            .starts_with("omptarget warning: ignoring LIBOMPTARGET_DEBUG_FILE='/nonexistent-dir/debug.log': ")
            && l.ends_with("; debug output goes to stderr")),
        "{e}"
    );
    assert!(e.contains("omptarget --> device 0: Launching kernel"), "{e}");
}
