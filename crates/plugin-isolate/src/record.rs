//! Kernel record (`LIBOMPTARGET_RECORD=DIR`): the first launch of each kernel and launch
//! configuration is written to `DIR` as what `omp-replay` needs to run it again alone
//! (docs/replay.md): `NAME.json` (the description), `NAME.record_input` and
//! `NAME.record_output` (the arena's live allocations before and after the launch, one after
//! the other in address order) and `NAME.image` (the device image).
//! `LIBOMPTARGET_RECORD_KERNEL=REGEX` limits it to the kernels whose name matches, and
//! `LIBOMPTARGET_RECORD_LAUNCH=N` to the N-th launch of those.
//!
//! All device memory of an isolated device is the arena, so the live allocations are every
//! byte a launch can reach through device memory; replaying at the same addresses makes every
//! pointer in it (arguments, and pointers stored in device memory) valid again. Recording
//! never makes a launch fail: a record over `LIBOMPTARGET_RECORD_MAX` or a write error is one
//! `omptarget warning:` line, and nothing more is recorded.

use crate::arena::Arena;
use omp_plugin::{LaunchConfig, Result};
use omp_sync::Mutex;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt::Write as _;
use std::fs::File;
use std::io::{self, Write as _};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The description's format (`FormatVersion`); `omp-replay` refuses any other.
pub const FORMAT_VERSION: u32 = 1;

/// Most bytes written by default (`LIBOMPTARGET_RECORD_MAX` changes it).
pub const DEFAULT_MAX_BYTES: u64 = 1 << 30;

/// What one launch configuration is recorded under: kernel name, teams, threads, `dyn_ptr`.
type ConfigKey = (String, u32, u32, bool);

/// The recorder of one plugin (all its devices share one arena).
pub(crate) struct Recorder {
    dir: PathBuf,
    max_bytes: u64,
    /// `LIBOMPTARGET_RECORD_KERNEL`: only kernels whose name this matches (a search, as grep).
    kernels: Option<regex::Regex>,
    /// `LIBOMPTARGET_RECORD_LAUNCH`: only this launch (1-based, of the kernels chosen),
    /// instead of the first of each configuration.
    launch: Option<u64>,
    state: Mutex<RecordState>,
}

#[derive(Default)]
struct RecordState {
    /// Each loaded image's bytes, by (device, image id).
    images: HashMap<(u32, usize), Arc<[u8]>>,
    /// Each resolved kernel's image and name, by (device, kernel handle).
    kernels: HashMap<(u32, usize), (usize, String)>,
    /// Live arena allocations: address -> size asked for.
    live: BTreeMap<usize, usize>,
    /// Launch configurations already recorded (or refused).
    recorded: HashSet<ConfigKey>,
    /// Records per kernel name, for the file names of later configurations.
    per_kernel: HashMap<String, u32>,
    /// Launches of the chosen kernels so far (for `LIBOMPTARGET_RECORD_LAUNCH`).
    launches: u64,
    written: u64,
    /// After the one warning, nothing more is recorded.
    stopped: bool,
}

/// One launch being recorded: its files' common path (without extension) and allocations.
struct Pending {
    base: PathBuf,
    name: String,
    key: ConfigKey,
    allocations: Vec<(usize, usize)>,
    image: Arc<[u8]>,
}

impl Recorder {
    /// The recorder `LIBOMPTARGET_RECORD` and `LIBOMPTARGET_RECORD_MAX` ask for, if any.
    pub(crate) fn from_vars(var: impl Fn(&str) -> Option<String>) -> Option<Recorder> {
        let dir = var("LIBOMPTARGET_RECORD").filter(|d| !d.is_empty())?;
        let max_bytes = match var("LIBOMPTARGET_RECORD_MAX") {
            None => DEFAULT_MAX_BYTES,
            Some(v) => match parse_bytes(&v) {
                Some(n) => n,
                None => {
                    eprintln!(
                        "omptarget warning: LIBOMPTARGET_RECORD_MAX={v} is not a size in bytes (e.g. 1048576, 512M, \
                         2G); the default ({DEFAULT_MAX_BYTES} bytes) is used"
                    );
                    DEFAULT_MAX_BYTES
                }
            },
        };
        let kernels = match var("LIBOMPTARGET_RECORD_KERNEL").filter(|k| !k.is_empty()) {
            None => None,
            Some(k) => match regex::Regex::new(&k) {
                Ok(re) => Some(re),
                Err(e) => {
                    let why = e.to_string().lines().last().unwrap_or_default().trim().to_string();
                    eprintln!(
                        "omptarget warning: LIBOMPTARGET_RECORD_KERNEL={k} is not a regular expression ({why}); \
                         nothing is recorded"
                    );
                    return None;
                }
            },
        };
        let launch = match var("LIBOMPTARGET_RECORD_LAUNCH") {
            None => None,
            Some(n) => match n.trim().parse::<u64>() {
                Ok(n) if n > 0 => Some(n),
                _ => {
                    eprintln!(
                        "omptarget warning: LIBOMPTARGET_RECORD_LAUNCH={n} is not a launch number (1 is the first); \
                         nothing is recorded"
                    );
                    return None;
                }
            },
        };
        Some(Recorder {
            dir: PathBuf::from(dir),
            max_bytes,
            kernels,
            launch,
            state: Mutex::new(RecordState::default()),
        })
    }

    pub(crate) fn image_loaded(&self, device: u32, image: usize, bytes: &[u8]) {
        self.state.lock().images.insert((device, image), Arc::from(bytes));
    }

    pub(crate) fn kernel_resolved(&self, device: u32, kernel: usize, image: usize, name: &str) {
        self.state.lock().kernels.insert((device, kernel), (image, name.to_string()));
    }

    pub(crate) fn allocated(&self, addr: usize, size: usize) {
        self.state.lock().live.insert(addr, size);
    }

    pub(crate) fn freed(&self, addr: usize) {
        self.state.lock().live.remove(&addr);
    }

    /// Runs `launch`, recording it when it is the first of its kernel and configuration. No
    /// lock is held while the kernel runs (it may wait for another thread's launch).
    pub(crate) fn around_launch(
        &self,
        device: u32,
        kernel: usize,
        args: &[usize],
        config: &LaunchConfig,
        arena: Option<&Arena>,
        launch: impl FnOnce() -> Result<()>,
    ) -> Result<()> {
        let Some(pending) = self.begin(device, kernel, config, arena) else { return launch() };
        let Some(arena) = arena else { return launch() };
        let input = self.write_memory(&pending, "record_input", arena);
        let outcome = launch();
        // A launch that failed (its worker died) leaves no output to verify against.
        let written = match (&outcome, input) {
            (Ok(()), Ok(n)) => self
                .write_memory(&pending, "record_output", arena)
                .and_then(|m| write_file(&pending.base, "image", &pending.image).map(|()| n + m))
                .and_then(|n| {
                    let json = describe(&pending, device, args, config, arena);
                    write_file(&pending.base, "json", json.as_bytes()).map(|()| n + json.len() as u64)
                }),
            (Err(_), _) => Err(io::Error::other("the launch failed")),
            (_, Err(e)) => Err(e),
        };
        match written {
            Ok(n) => self.state.lock().written += n,
            Err(e) => {
                for ext in ["record_input", "record_output", "image", "json"] {
                    let _ = std::fs::remove_file(pending.base.with_extension(ext));
                }
                if outcome.is_ok() {
                    self.stop(&format!("cannot write {}: {e}", pending.base.display()), &pending.name);
                } else {
                    // Let a later launch of this configuration be recorded.
                    self.state.lock().recorded.remove(&pending.key);
                }
            }
        }
        outcome
    }

    /// Decides whether this launch is recorded; when it is, reserves its bytes and names it.
    fn begin(&self, device: u32, kernel: usize, config: &LaunchConfig, arena: Option<&Arena>) -> Option<Pending> {
        let mut st = self.state.lock();
        if st.stopped {
            return None;
        }
        let (image, name) = st.kernels.get(&(device, kernel)).cloned()?;
        if self.kernels.as_ref().is_some_and(|re| !re.is_match(&name)) {
            return None;
        }
        let key = (name.clone(), config.num_teams[0], config.thread_limit[0], config.with_dyn_ptr);
        match self.launch {
            Some(n) => {
                st.launches += 1;
                if st.launches != n {
                    return None;
                }
                st.recorded.insert(key.clone());
            }
            None if !st.recorded.insert(key.clone()) => return None,
            None => {}
        }
        let image = st.images.get(&(device, image)).cloned()?;
        if arena.is_none() {
            drop(st);
            self.stop(
                "the isolated device's memory could not be shared with its worker (`ulimit -v`?), so launches cannot \
                 be snapshotted",
                &name,
            );
            return None;
        }
        let allocations: Vec<(usize, usize)> = st.live.iter().map(|(&a, &s)| (a, s)).collect();
        let memory: u64 = allocations.iter().map(|&(_, s)| s as u64).sum();
        let need = 2 * memory + image.len() as u64 + 4096 + 64 * allocations.len() as u64;
        if st.written.saturating_add(need) > self.max_bytes {
            drop(st);
            self.stop(
                &format!(
                    "recording it would write about {need} bytes, over LIBOMPTARGET_RECORD_MAX ({} bytes)",
                    self.max_bytes
                ),
                &name,
            );
            return None;
        }
        let n = st.per_kernel.entry(name.clone()).or_insert(0);
        *n += 1;
        let file = if *n == 1 { file_name(&name) } else { format!("{}-{n}", file_name(&name)) };
        drop(st);
        if let Err(e) = std::fs::create_dir_all(&self.dir) {
            self.stop(&format!("cannot create {}: {e}", self.dir.display()), &name);
            return None;
        }
        Some(Pending { base: self.dir.join(file), name, key, allocations, image })
    }

    /// The one warning: nothing more is recorded.
    fn stop(&self, why: &str, kernel: &str) {
        let mut st = self.state.lock();
        if !std::mem::replace(&mut st.stopped, true) {
            eprintln!("omptarget warning: LIBOMPTARGET_RECORD: kernel {kernel} is not recorded: {why}; nothing more is recorded");
        }
    }

    /// Writes the allocations' bytes, in address order, to `base.ext`.
    fn write_memory(&self, p: &Pending, ext: &str, arena: &Arena) -> io::Result<u64> {
        let file = File::create(p.base.with_extension(ext))?;
        let mut total = 0u64;
        for &(addr, size) in &p.allocations {
            if !arena.contains(addr, size) {
                return Err(io::Error::other(format!("allocation 0x{addr:x} is outside the device memory")));
            }
            // SAFETY: `[addr, addr+size)` lies in the arena (checked above), mapped read-write
            // in this process for its whole life; the bytes go to the kernel by address
            // (write(2)), never through a Rust reference, as kernels may write them meanwhile.
            unsafe { write_raw(&file, addr, size) }?;
            total += size as u64;
        }
        Ok(total)
    }
}

/// Writes `[addr, addr+len)` of this process's memory to `file`.
///
/// # Safety
/// The range must be mapped and readable for the whole call.
unsafe fn write_raw(file: &File, mut addr: usize, mut len: usize) -> io::Result<()> {
    while len > 0 {
        // SAFETY: the caller's promise: the range is readable; write(2) only reads it.
        let n = unsafe { libc::write(file.as_raw_fd(), addr as *const libc::c_void, len.min(1 << 30)) };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        if n == 0 {
            return Err(io::Error::from(io::ErrorKind::WriteZero));
        }
        addr += n as usize;
        len -= n as usize;
    }
    Ok(())
}

fn write_file(base: &Path, ext: &str, bytes: &[u8]) -> io::Result<()> {
    let mut f = File::create(base.with_extension(ext))?;
    f.write_all(bytes)?;
    f.flush()
}

/// A kernel name as a file name: letters, digits and `_` kept, the rest `_` (no `.`: the
/// record's files are this name with an extension each, so a dot would cut the name short).
fn file_name(kernel: &str) -> String {
    let s: String = kernel.chars().map(|c| if c.is_ascii_alphanumeric() || c == '_' { c } else { '_' }).collect();
    if s.is_empty() {
        "kernel".to_string()
    } else {
        s
    }
}

/// The libraries the worker's images bind to (this runtime and libomp), which a replay
/// loads before the image so that it binds to the same ones.
fn image_libraries() -> Vec<PathBuf> {
    let mut libs: Vec<PathBuf> = Vec::new();
    for lib in [crate::spawn::object_providing(c"__kmpc_fork_call"), crate::spawn::own_object()].into_iter().flatten() {
        if !libs.contains(&lib) {
            libs.push(lib);
        }
    }
    libs
}

/// `1048576`, `512K`, `64M`, `2G` (powers of 1024).
fn parse_bytes(v: &str) -> Option<u64> {
    let v = v.trim();
    let (digits, shift) = match v.as_bytes().last()? {
        b'k' | b'K' => (&v[..v.len() - 1], 10),
        b'm' | b'M' => (&v[..v.len() - 1], 20),
        b'g' | b'G' => (&v[..v.len() - 1], 30),
        _ => (v, 0),
    };
    digits.parse::<u64>().ok()?.checked_mul(1 << shift)
}

fn json_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// The description (`NAME.json`). Addresses and argument values are hexadecimal strings (a
/// JSON number cannot hold every 64-bit value exactly); sizes and counts are numbers.
fn describe(p: &Pending, device: u32, args: &[usize], config: &LaunchConfig, arena: &Arena) -> String {
    let file = |ext: &str| {
        json_string(
            &p.base.with_extension(ext).file_name().map(|f| f.to_string_lossy().into_owned()).unwrap_or_default(),
        )
    };
    let mut j = String::new();
    let _ = writeln!(j, "{{");
    let _ = writeln!(j, "  \"FormatVersion\": {FORMAT_VERSION},");
    let _ = writeln!(j, "  \"Producer\": {},", json_string(&format!("omprs {}", env!("CARGO_PKG_VERSION"))));
    let _ = writeln!(j, "  \"Name\": {},", json_string(&p.name));
    let _ = writeln!(j, "  \"DeviceId\": {device},");
    let _ = writeln!(j, "  \"Image\": {},", file("image"));
    let _ = writeln!(j, "  \"ImageSize\": {},", p.image.len());
    let _ = writeln!(j, "  \"NumTeams\": {},", config.num_teams[0]);
    let _ = writeln!(j, "  \"NumThreads\": {},", config.thread_limit[0]);
    let _ = writeln!(j, "  \"LoopTripCount\": {},", config.tripcount);
    let _ = writeln!(j, "  \"SharedMemorySize\": {},", config.dyn_group_mem);
    let _ = writeln!(j, "  \"WithDynPtr\": {},", config.with_dyn_ptr);
    let _ = writeln!(j, "  \"VAllocAddr\": \"0x{:x}\",", arena.base());
    let _ = writeln!(j, "  \"VAllocSize\": {},", arena.size());
    let libs: Vec<String> = image_libraries().iter().map(|l| json_string(&l.to_string_lossy())).collect();
    let _ = writeln!(j, "  \"Libraries\": [{}],", libs.join(", "));
    let _ = writeln!(j, "  \"NumArgs\": {},", args.len());
    let _ = writeln!(j, "  \"Args\": [");
    for (i, &a) in args.iter().enumerate() {
        let into = p.allocations.iter().position(|&(addr, size)| a >= addr && a < addr + size);
        let comma = if i + 1 < args.len() { "," } else { "" };
        match into {
            Some(k) => {
                let _ = writeln!(
                    j,
                    "    {{ \"Value\": \"0x{a:x}\", \"Allocation\": {k}, \"Offset\": {} }}{comma}",
                    a - p.allocations[k].0
                );
            }
            None => {
                let _ = writeln!(j, "    {{ \"Value\": \"0x{a:x}\" }}{comma}");
            }
        }
    }
    let _ = writeln!(j, "  ],");
    let memory: usize = p.allocations.iter().map(|a| a.1).sum();
    let _ = writeln!(j, "  \"Input\": {},", file("record_input"));
    let _ = writeln!(j, "  \"Output\": {},", file("record_output"));
    let _ = writeln!(j, "  \"MemorySize\": {memory},");
    let _ = writeln!(j, "  \"Allocations\": [");
    let mut offset = 0usize;
    for (i, &(addr, size)) in p.allocations.iter().enumerate() {
        let comma = if i + 1 < p.allocations.len() { "," } else { "" };
        let _ = writeln!(j, "    {{ \"Addr\": \"0x{addr:x}\", \"Size\": {size}, \"FileOffset\": {offset} }}{comma}");
        offset += size;
    }
    let _ = writeln!(j, "  ]");
    let _ = writeln!(j, "}}");
    j
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_and_names() {
        assert_eq!(parse_bytes("1048576"), Some(1 << 20));
        assert_eq!(parse_bytes("64M"), Some(64 << 20));
        assert_eq!(parse_bytes("2g"), Some(2 << 30));
        assert_eq!(parse_bytes("x"), None);
        assert_eq!(parse_bytes(""), None);
        assert_eq!(parse_bytes("99999999999999999999G"), None);
        assert_eq!(file_name("__omp_offloading_10303_2a1c3b1_sum_l5"), "__omp_offloading_10303_2a1c3b1_sum_l5");
        assert_eq!(file_name("a/../b"), "a____b");
        assert_eq!(file_name(".x"), "_x");
        assert_eq!(file_name("k.a"), "k_a", "a dot would be taken for the start of an extension");
        assert_eq!(file_name(""), "kernel");
        assert_eq!(json_string("a\"b\\\n"), "\"a\\\"b\\\\\\u000a\"");
    }

    #[test]
    fn off_unless_asked_and_a_bad_max_falls_back() {
        assert!(Recorder::from_vars(|_| None).is_none());
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
        rec.around_launch(0, 7, &[a + 4, 3], &config, Some(&arena), run).unwrap();
        let input = std::fs::read(dir.join("k.record_input")).unwrap();
        let output = std::fs::read(dir.join("k.record_output")).unwrap();
        assert_eq!((input, output), (vec![0; 16], vec![0xab; 16]));
        assert_eq!(std::fs::read(dir.join("k.image")).unwrap(), b"IMAGE");
        let json = std::fs::read_to_string(dir.join("k.json")).unwrap();
        assert!(
            json.contains(&format!("{{ \"Value\": \"0x{:x}\", \"Allocation\": 0, \"Offset\": 4 }}", a + 4)),
            "{json}"
        );
        assert!(json.contains("{ \"Value\": \"0x3\" }"), "{json}");
        // The same configuration again: not recorded (the output stays what it was).
        std::fs::remove_file(dir.join("k.json")).unwrap();
        rec.around_launch(0, 7, &[a], &config, Some(&arena), || Ok(())).unwrap();
        assert!(!dir.join("k.json").exists());
        // Another configuration: a second record.
        let other = LaunchConfig { num_teams: [4, 0, 0], ..config };
        rec.around_launch(0, 7, &[a], &other, Some(&arena), || Ok(())).unwrap();
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
        rec.around_launch(0, 1, &[a], &LaunchConfig::default(), Some(&arena), || {
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
        rec.around_launch(0, 1, &[a], &LaunchConfig::default(), Some(&arena), || Ok(())).unwrap();
        assert!(rec.state.lock().stopped);
        rec.around_launch(0, 2, &[a], &LaunchConfig::default(), Some(&arena), || Ok(())).unwrap();
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
            rec.around_launch(0, kernel, &[a], &config, Some(&arena), run).unwrap();
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
    }
}
