//! Unit tests of [`super`] (the recorder), kept apart for the size of the file.

use super::*;

fn no_globals(_: usize, _: &mut [u8]) -> Result<()> {
    panic!("no globals were resolved")
}

#[test]
fn sizes() {
    assert_eq!(parse_bytes("1048576"), Some(1 << 20));
    assert_eq!(parse_bytes("64M"), Some(64 << 20));
    assert_eq!(parse_bytes("2g"), Some(2 << 30));
    assert_eq!(parse_bytes("x"), None);
    assert_eq!(parse_bytes(""), None);
    assert_eq!(parse_bytes("99999999999999999999G"), None);
}

#[test]
fn only_failures_unless_asked_and_a_bad_max_falls_back() {
    assert!(Recorder::from_vars(|_| None).is_some_and(|r| !r.choosing));
    let r = Recorder::from_vars(|k| match k {
        "LIBOMPTARGET_RECORD" => Some("/tmp/x".into()),
        "LIBOMPTARGET_RECORD_MAX" => Some("lots".into()),
        _ => None,
    })
    .unwrap();
    assert_eq!(r.max_bytes, DEFAULT_MAX_BYTES);
}

#[test]
fn records_the_first_launch_of_each_configuration_with_its_memory() {
    let dir = std::env::temp_dir().join(format!("omp-record-test-{}", std::process::id()));
    let rec =
        Recorder::from_vars(|k| (k == "LIBOMPTARGET_RECORD").then(|| dir.to_string_lossy().into_owned())).unwrap();
    let arena = Arena::create(1 << 24).unwrap();
    let a = arena.alloc(16).unwrap();
    rec.allocated(a, 16);
    rec.image_loaded(0, 0, b"IMAGE");
    rec.kernel_resolved(0, 7, 0, "k");
    let config = LaunchConfig { with_dyn_ptr: true, ..LaunchConfig::default() };
    let run = || {
        // SAFETY: `a` is a 16-byte arena allocation, mapped read-write here.
        unsafe { std::ptr::write_bytes(a as *mut u8, 0xab, 16) };
        Ok(())
    };
    rec.around_launch((0, 7), &[a + 4, 3], &config, Some(&arena), &no_globals, run).unwrap();
    let input = std::fs::read(dir.join("k.record_input")).unwrap();
    let output = std::fs::read(dir.join("k.record_output")).unwrap();
    assert_eq!((input, output), (vec![0; 16], vec![0xab; 16]));
    assert_eq!(std::fs::read(dir.join("k.image")).unwrap(), b"IMAGE");
    let json = std::fs::read_to_string(dir.join("k.json")).unwrap();
    assert!(json.contains(&format!("{{ \"Value\": \"0x{:x}\", \"Allocation\": 0, \"Offset\": 4 }}", a + 4)), "{json}");
    assert!(json.contains("{ \"Value\": \"0x3\" }"), "{json}");
    // The same configuration again: not recorded (the output stays what it was).
    std::fs::remove_file(dir.join("k.json")).unwrap();
    rec.around_launch((0, 7), &[a], &config, Some(&arena), &no_globals, || Ok(())).unwrap();
    assert!(!dir.join("k.json").exists());
    // Another configuration: a second record.
    let other = LaunchConfig { num_teams: [4, 0, 0], ..config };
    rec.around_launch((0, 7), &[a], &other, Some(&arena), &no_globals, || Ok(())).unwrap();
    assert!(dir.join("k-2.json").exists());
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn over_the_limit_nothing_is_written() {
    let dir = std::env::temp_dir().join(format!("omp-record-max-{}", std::process::id()));
    let d = dir.to_string_lossy().into_owned();
    let rec = Recorder::from_vars(|k| match k {
        "LIBOMPTARGET_RECORD" => Some(d.clone()),
        "LIBOMPTARGET_RECORD_MAX" => Some("1K".into()),
        _ => None,
    })
    .unwrap();
    let arena = Arena::create(1 << 24).unwrap();
    let a = arena.alloc(1 << 20).unwrap();
    rec.allocated(a, 1 << 20);
    rec.image_loaded(0, 0, b"IMAGE");
    rec.kernel_resolved(0, 1, 0, "big");
    let mut ran = false;
    rec.around_launch((0, 1), &[a], &LaunchConfig::default(), Some(&arena), &no_globals, || {
        ran = true;
        Ok(())
    })
    .unwrap();
    assert!(ran, "the launch still runs");
    assert!(!dir.exists() || std::fs::read_dir(&dir).unwrap().next().is_none());
    assert!(rec.state.lock().stopped);
}

#[test]
fn a_full_disk_stops_recording_and_leaves_no_partial_record() {
    let dir = std::env::temp_dir().join(format!("omp-record-full-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    // Every write to /dev/full fails with ENOSPC, as on a full disk.
    std::os::unix::fs::symlink("/dev/full", dir.join("k.record_input")).unwrap();
    let rec =
        Recorder::from_vars(|k| (k == "LIBOMPTARGET_RECORD").then(|| dir.to_string_lossy().into_owned())).unwrap();
    let arena = Arena::create(1 << 24).unwrap();
    let a = arena.alloc(64).unwrap();
    rec.allocated(a, 64);
    rec.image_loaded(0, 0, b"IMAGE");
    rec.kernel_resolved(0, 1, 0, "k");
    rec.kernel_resolved(0, 2, 0, "other");
    rec.around_launch((0, 1), &[a], &LaunchConfig::default(), Some(&arena), &no_globals, || Ok(())).unwrap();
    assert!(rec.state.lock().stopped);
    rec.around_launch((0, 2), &[a], &LaunchConfig::default(), Some(&arena), &no_globals, || Ok(())).unwrap();
    let left: Vec<_> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert!(left.is_empty(), "{left:?}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn kernel_and_launch_choose_what_is_recorded() {
    let dir = std::env::temp_dir().join(format!("omp-record-choose-{}", std::process::id()));
    let d = dir.to_string_lossy().into_owned();
    let rec = Recorder::from_vars(|k| match k {
        "LIBOMPTARGET_RECORD" => Some(d.clone()),
        "LIBOMPTARGET_RECORD_KERNEL" => Some("_l1[0-9]$".into()),
        "LIBOMPTARGET_RECORD_LAUNCH" => Some("2".into()),
        _ => None,
    })
    .unwrap();
    let arena = Arena::create(1 << 24).unwrap();
    let a = arena.alloc(8).unwrap();
    rec.allocated(a, 8);
    rec.image_loaded(0, 0, b"IMAGE");
    rec.kernel_resolved(0, 1, 0, "main_l5");
    rec.kernel_resolved(0, 2, 0, "main_l14");
    let config = LaunchConfig::default();
    for (kernel, value) in [(1, 1u8), (2, 2), (1, 3), (2, 4), (2, 5)] {
        let run = || {
            // SAFETY: `a` is an 8-byte arena allocation, mapped read-write here.
            unsafe { std::ptr::write_bytes(a as *mut u8, value, 8) };
            Ok(())
        };
        rec.around_launch((0, kernel), &[a], &config, Some(&arena), &no_globals, run).unwrap();
    }
    // main_l5 never matches; the second launch of main_l14 (the fourth in all) is the one,
    // with the memory the third left.
    let names: Vec<_> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(names.len(), 4, "{names:?}");
    assert_eq!(std::fs::read(dir.join("main_l14.record_input")).unwrap(), vec![3; 8]);
    assert_eq!(std::fs::read(dir.join("main_l14.record_output")).unwrap(), vec![4; 8]);
    std::fs::remove_dir_all(&dir).unwrap();
    let bad = |k: &'static str, v: &'static str| {
        Recorder::from_vars(|x| match x {
            "LIBOMPTARGET_RECORD" => Some("/tmp/x".into()),
            x if x == k => Some(v.into()),
            _ => None,
        })
    };
    assert!(bad("LIBOMPTARGET_RECORD_KERNEL", "(").is_none());
    assert!(bad("LIBOMPTARGET_RECORD_LAUNCH", "0").is_none());
    assert!(bad("LIBOMPTARGET_RECORD_LAUNCH", "x").is_none());
    assert_eq!(bad("LIBOMPTARGET_RECORD_LAUNCH", " all").map(|r| r.launch), Some(Launches::All));
}

fn lost() -> PluginError {
    PluginError::lost("the isolated device's worker (pid 1) ended: killed by signal 11 (SIGSEGV)")
}

#[test]
fn without_record_only_the_launch_that_fails_is_recorded_with_the_memory_it_left() {
    let mut rec = Recorder::from_vars(|_| None).expect("on whenever the isolated device is");
    assert!(!rec.choosing);
    assert!(rec.dir.ends_with(format!("omp-records-{}", std::process::id())), "{}", rec.dir.display());
    let dir = std::env::temp_dir().join(format!("omp-record-fault-{}", std::process::id()));
    rec.dir = dir.clone();
    let arena = Arena::create(1 << 24).unwrap();
    let a = arena.alloc(16).unwrap();
    rec.allocated(a, 16);
    rec.image_loaded(0, 0, b"IMAGE");
    rec.kernel_resolved(0, 7, 0, "k");
    let config = LaunchConfig { with_dyn_ptr: true, ..LaunchConfig::default() };
    rec.around_launch((0, 7), &[a], &config, Some(&arena), &no_globals, || Ok(())).unwrap();
    assert!(!dir.exists(), "a launch that works is not recorded");
    // Not a lost device: the device still works, nothing is recorded.
    let e = rec
        .around_launch((0, 7), &[a], &config, Some(&arena), &no_globals, || Err(PluginError::failed("no")))
        .unwrap_err();
    assert_eq!(e, PluginError::failed("no"));
    assert!(!dir.exists());
    let faulting = || {
        // SAFETY: `a` is a 16-byte arena allocation, mapped read-write here.
        unsafe { std::ptr::write_bytes(a as *mut u8, 0xab, 16) };
        Err(lost())
    };
    let e = rec.around_launch((0, 7), &[a, 5], &config, Some(&arena), &no_globals, faulting).unwrap_err();
    assert!(e.is_lost());
    let want = format!(
        "{}; the launch is recorded in {}: replay it with omp-replay",
        lost().reason,
        dir.join("k.json").display()
    );
    assert_eq!(e.reason, want);
    assert_eq!(std::fs::read(dir.join("k.record_input")).unwrap(), vec![0xab; 16], "the memory as the fault left it");
    assert!(!dir.join("k.record_output").exists());
    assert_eq!(std::fs::read(dir.join("k.image")).unwrap(), b"IMAGE");
    let json = std::fs::read_to_string(dir.join("k.json")).unwrap();
    assert!(json.contains("\"InputAfterFault\": true"), "{json}");
    assert!(
        json.contains("\"Fault\": \"the isolated device's worker (pid 1) ended: killed by signal 11 (SIGSEGV)\""),
        "{json}"
    );
    assert!(!json.contains("\"Output\""), "{json}");
    // The worker is gone: later launches fail the same way and are not recorded again.
    let again = rec.around_launch((0, 7), &[a], &config, Some(&arena), &no_globals, || Err(lost())).unwrap_err();
    assert_eq!(again, lost());
    std::fs::remove_dir_all(&dir).unwrap();
    // LIBOMPTARGET_RECORD_MAX=0: nothing is recorded, not even a failure.
    assert!(Recorder::from_vars(|k| (k == "LIBOMPTARGET_RECORD_MAX").then(|| "0".to_string())).is_none());
}

#[test]
fn a_chosen_launch_that_fails_keeps_the_memory_from_before_it() {
    let dir = std::env::temp_dir().join(format!("omp-record-chosen-fault-{}", std::process::id()));
    let rec =
        Recorder::from_vars(|k| (k == "LIBOMPTARGET_RECORD").then(|| dir.to_string_lossy().into_owned())).unwrap();
    let arena = Arena::create(1 << 24).unwrap();
    let a = arena.alloc(8).unwrap();
    rec.allocated(a, 8);
    rec.image_loaded(0, 0, b"IMAGE");
    rec.kernel_resolved(0, 1, 0, "k");
    let faulting = || {
        // SAFETY: `a` is an 8-byte arena allocation, mapped read-write here.
        unsafe { std::ptr::write_bytes(a as *mut u8, 7, 8) };
        Err(lost())
    };
    let e = rec.around_launch((0, 1), &[a], &LaunchConfig::default(), Some(&arena), &no_globals, faulting).unwrap_err();
    assert!(
        e.reason.ends_with(&format!("recorded in {}: replay it with omp-replay", dir.join("k.json").display())),
        "{e}"
    );
    assert_eq!(std::fs::read(dir.join("k.record_input")).unwrap(), vec![0; 8], "written before the launch");
    assert!(!dir.join("k.record_output").exists());
    let json = std::fs::read_to_string(dir.join("k.json")).unwrap();
    assert!(json.contains("\"InputAfterFault\": false"), "{json}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn launch_all_records_every_launch() {
    let dir = std::env::temp_dir().join(format!("omp-record-all-{}", std::process::id()));
    let d = dir.to_string_lossy().into_owned();
    let rec = Recorder::from_vars(|k| match k {
        "LIBOMPTARGET_RECORD" => Some(d.clone()),
        "LIBOMPTARGET_RECORD_LAUNCH" => Some("all".into()),
        _ => None,
    })
    .unwrap();
    let arena = Arena::create(1 << 24).unwrap();
    let a = arena.alloc(8).unwrap();
    rec.allocated(a, 8);
    rec.image_loaded(0, 0, b"IMAGE");
    rec.kernel_resolved(0, 1, 0, "k");
    for value in 1..=3u8 {
        let run = || {
            // SAFETY: `a` is an 8-byte arena allocation, mapped read-write here.
            unsafe { std::ptr::write_bytes(a as *mut u8, value, 8) };
            Ok(())
        };
        rec.around_launch((0, 1), &[a], &LaunchConfig::default(), Some(&arena), &no_globals, run).unwrap();
    }
    assert_eq!(std::fs::read(dir.join("k.record_output")).unwrap(), vec![1; 8]);
    assert_eq!(std::fs::read(dir.join("k-2.record_input")).unwrap(), vec![1; 8]);
    assert_eq!(std::fs::read(dir.join("k-3.record_output")).unwrap(), vec![3; 8]);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_chosen_launch_records_its_images_globals_before_it_runs() {
    let dir = std::env::temp_dir().join(format!("omp-record-globals-{}", std::process::id()));
    let rec =
        Recorder::from_vars(|k| (k == "LIBOMPTARGET_RECORD").then(|| dir.to_string_lossy().into_owned())).unwrap();
    let arena = Arena::create(1 << 24).unwrap();
    rec.image_loaded(0, 0, b"IMAGE");
    rec.kernel_resolved(0, 1, 0, "k");
    rec.global_resolved((0, 0), ("scale", 0x5000, 8), Some(&arena));
    rec.global_resolved((0, 0), ("flag", 0x6000, 4), Some(&arena));
    rec.global_resolved((0, 0), ("unsized", 0x7000, 0), Some(&arena));
    let worker_memory = |addr: usize, buf: &mut [u8]| {
        buf.fill((addr >> 12) as u8);
        Ok(())
    };
    rec.around_launch((0, 1), &[], &LaunchConfig::default(), Some(&arena), &worker_memory, || Ok(())).unwrap();
    assert_eq!(std::fs::read(dir.join("k.globals")).unwrap(), [vec![5; 8], vec![6; 4]].concat());
    let json = std::fs::read_to_string(dir.join("k.json")).unwrap();
    assert!(json.contains("\"Globals\": \"k.globals\""), "{json}");
    assert!(json.contains("{ \"Name\": \"flag\", \"Addr\": \"0x6000\", \"Size\": 4, \"FileOffset\": 8 }"), "{json}");
    assert!(!json.contains("unsized"), "a global of unknown size is not recorded: {json}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_failed_launch_records_the_globals_its_dying_worker_saved() {
    let dir = std::env::temp_dir().join(format!("omp-record-fault-globals-{}", std::process::id()));
    let rec =
        Recorder::from_vars(|k| (k == "LIBOMPTARGET_RECORD").then(|| dir.to_string_lossy().into_owned())).unwrap();
    let arena = Arena::create(1 << 24).unwrap();
    rec.image_loaded(0, 0, b"IMAGE");
    rec.kernel_resolved(0, 1, 0, "k");
    // This process plays the worker: its "globals" are these two values.
    let scale = 4.0f64;
    let flag = 7u32;
    rec.global_resolved((0, 0), ("scale", &scale as *const f64 as usize, 8), Some(&arena));
    rec.global_resolved((0, 0), ("flag", &flag as *const u32 as usize, 4), Some(&arena));
    // Not chosen (another kernel's): only its failure records it, with what the worker saved.
    let chosen_none = Recorder { kernels: Some(regex::Regex::new("^nothing$").unwrap()), ..rec };
    let dying = || {
        // SAFETY: the arena is mapped read-write in this process for the whole test.
        unsafe { crate::record_globals::save_in_test(arena.base(), arena.size()) };
        Err(lost())
    };
    let e =
        chosen_none.around_launch((0, 1), &[], &LaunchConfig::default(), Some(&arena), &no_globals, dying).unwrap_err();
    assert!(e.reason.ends_with("replay it with omp-replay"), "{e}");
    let saved = std::fs::read(dir.join("k.globals")).unwrap();
    assert_eq!(saved, [scale.to_le_bytes().as_slice(), flag.to_le_bytes().as_slice()].concat());
    let json = std::fs::read_to_string(dir.join("k.json")).unwrap();
    assert!(json.contains("\"InputAfterFault\": true"), "{json}");
    assert!(json.contains("{ \"Name\": \"flag\", \"Addr\": \"0x"), "{json}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn the_default_directory_is_made_private_and_a_planted_one_is_refused() {
    let mut rec = Recorder::from_vars(|_| None).unwrap();
    let root = std::env::temp_dir().join(format!("omp-record-private-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    std::fs::create_dir_all(&root).unwrap();
    use std::os::unix::fs::PermissionsExt;
    // Made here: mode 0700; found again: accepted.
    rec.dir = root.join("made");
    rec.make_dir().unwrap();
    assert_eq!(std::fs::metadata(&rec.dir).unwrap().permissions().mode() & 0o777, 0o700);
    rec.make_dir().unwrap();
    // A link placed at the name (to a directory the links inside would write through): refused.
    std::fs::create_dir(root.join("elsewhere")).unwrap();
    std::os::unix::fs::symlink(root.join("elsewhere"), root.join("link")).unwrap();
    rec.dir = root.join("link");
    assert!(rec.make_dir().is_err());
    // A directory others can write: refused.
    rec.dir = root.join("open");
    std::fs::create_dir(&rec.dir).unwrap();
    std::fs::set_permissions(&rec.dir, std::fs::Permissions::from_mode(0o777)).unwrap();
    assert!(rec.make_dir().is_err());
    // A file: refused.
    rec.dir = root.join("file");
    std::fs::write(&rec.dir, b"").unwrap();
    assert!(rec.make_dir().is_err());
    // The user's own LIBOMPTARGET_RECORD directory is made as asked.
    let mut chosen = Recorder::from_vars(|k| (k == "LIBOMPTARGET_RECORD").then(|| "x".into())).unwrap();
    chosen.dir = root.join("open");
    chosen.make_dir().unwrap();
    std::fs::remove_dir_all(&root).unwrap();
}
