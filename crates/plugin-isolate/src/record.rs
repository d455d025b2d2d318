//! Kernel record (`LIBOMPTARGET_RECORD=DIR`): the first launch of each kernel and launch
//! configuration is written to `DIR` as what `omp-replay` needs to run it again alone
//! (docs/replay.md): `NAME.json` (the description), `NAME.record_input` and
//! `NAME.record_output` (the arena's live allocations before and after the launch, one after
//! the other in address order) and `NAME.image` (the device image).
//! `LIBOMPTARGET_RECORD_KERNEL=REGEX` limits it to the kernels whose name matches, and
//! `LIBOMPTARGET_RECORD_LAUNCH=N` to the N-th launch of those (`all`: every launch).
//!
//! Whenever the isolated device is on, with or without `LIBOMPTARGET_RECORD`, the launch that
//! fails (its worker dies: a fault, an abort, an exit) is recorded too, and its error names
//! the record. Its memory is the arena as the fault left it (the arena is shared memory: it
//! outlives the worker), and its globals are what the dying worker saved into the arena
//! ([`crate::record_globals`]), unless the launch was chosen for recording anyway, whose
//! memory and globals were written before it ran. Nothing is copied before a launch for
//! that: a launch costs one branch more, and only a failure pays.
//!
//! All device memory of an isolated device is the arena, so the live allocations are every
//! byte a launch can reach through device memory; replaying at the same addresses makes every
//! pointer in it (arguments, and pointers stored in device memory) valid again. Recording
//! never makes a launch fail: a record over `LIBOMPTARGET_RECORD_MAX` or a write error is one
//! `omptarget warning:` line, and nothing more is recorded.

use crate::arena::Arena;
use crate::record_desc::{describe, file_name, Faulted, Launched};
use crate::record_globals::FaultGlobals;
use omp_plugin::{LaunchConfig, PluginError, Result};
use omp_sync::Mutex;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::fs::File;
use std::io::{self, Write as _};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The description's format (`FormatVersion`); `omp-replay` refuses any other.
pub const FORMAT_VERSION: u32 = 1;

/// Most bytes written by default (`LIBOMPTARGET_RECORD_MAX` changes it).
pub const DEFAULT_MAX_BYTES: u64 = 1 << 30;

/// Which launches of the chosen kernels are recorded (`LIBOMPTARGET_RECORD_LAUNCH`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Launches {
    /// Unset: the first launch of each kernel and configuration (as LLVM).
    FirstOfEachConfiguration,
    /// `N`: only the N-th launch (1-based) of the kernels chosen, whatever its configuration.
    Nth(u64),
    /// `all`: every launch, each its own record (`NAME`, `NAME-2`, …).
    All,
}

/// What one launch configuration is recorded under: kernel name, teams, threads, `dyn_ptr`.
type ConfigKey = (String, u32, u32, bool);

/// The recorder of one plugin (all its devices share one arena).
pub(crate) struct Recorder {
    dir: PathBuf,
    /// `LIBOMPTARGET_RECORD` was given: launches are chosen for recording; otherwise only
    /// the launch that fails is recorded (in `$TMPDIR/omp-records-PID`).
    choosing: bool,
    max_bytes: u64,
    /// `LIBOMPTARGET_RECORD_KERNEL`: only kernels whose name this matches (a search, as grep).
    kernels: Option<regex::Regex>,
    /// `LIBOMPTARGET_RECORD_LAUNCH`: which launches of the kernels chosen.
    launch: Launches,
    state: Mutex<RecordState>,
}

#[derive(Default)]
struct RecordState {
    /// Each loaded image's bytes, by (device, image id).
    images: HashMap<(u32, usize), Arc<[u8]>>,
    /// Each image's globals as the runtime resolved them, by (device, image id).
    globals: HashMap<(u32, usize), Vec<Global>>,
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
    /// A failed launch was recorded (the worker is gone: later launches fail the same way).
    failure_recorded: bool,
    /// Where a dying worker saves the globals (for the record of the launch that failed).
    fault_globals: FaultGlobals,
}

/// Reads `buf.len()` bytes of a device global at an address of the worker.
pub(crate) type ReadGlobal<'a> = &'a dyn Fn(usize, &mut [u8]) -> Result<()>;

/// A device global (`declare target` variable) of an image: name, address in the worker, size.
pub(crate) type Global = (String, usize, usize);

/// One launch being recorded: its files' common path (without extension) and allocations.
pub(crate) struct Pending {
    pub(crate) base: PathBuf,
    pub(crate) name: String,
    key: ConfigKey,
    pub(crate) allocations: Vec<(usize, usize)>,
    pub(crate) image: Arc<[u8]>,
    /// The image's globals, recorded beside the memory (`.globals`) when the launch is chosen.
    pub(crate) globals: Vec<Global>,
}

/// Where the launch that fails is recorded when `LIBOMPTARGET_RECORD` is not set.
fn default_dir() -> PathBuf {
    std::env::temp_dir().join(format!("omp-records-{}", std::process::id()))
}

impl Recorder {
    /// The recorder `LIBOMPTARGET_RECORD` and `LIBOMPTARGET_RECORD_MAX` ask for: without
    /// `LIBOMPTARGET_RECORD`, one that records only the launch that fails; none when
    /// `LIBOMPTARGET_RECORD_MAX=0` (or when a choice of kernel or launch is not valid).
    pub(crate) fn from_vars(var: impl Fn(&str) -> Option<String>) -> Option<Recorder> {
        let dir = var("LIBOMPTARGET_RECORD").filter(|d| !d.is_empty());
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
        let Some(dir) = dir else {
            return (max_bytes > 0).then(|| Recorder {
                dir: default_dir(),
                choosing: false,
                max_bytes,
                kernels: None,
                launch: Launches::FirstOfEachConfiguration,
                state: Mutex::new(RecordState::default()),
            });
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
            None => Launches::FirstOfEachConfiguration,
            Some(n) if n.trim() == "all" => Launches::All,
            Some(n) => match n.trim().parse::<u64>() {
                Ok(n) if n > 0 => Launches::Nth(n),
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
            choosing: true,
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

    /// A global the runtime resolved: recorded with a chosen launch of its image, and given
    /// room in `arena` for a dying worker to save it (for the launch that fails).
    pub(crate) fn global_resolved(&self, at: (u32, usize), g: (&str, usize, usize), arena: Option<&Arena>) {
        let ((device, image), (name, addr, size)) = (at, g);
        if size == 0 {
            return;
        }
        let mut st = self.state.lock();
        st.globals.entry((device, image)).or_default().push((name.to_string(), addr, size));
        if let Some(arena) = arena {
            st.fault_globals.add(arena, self.max_bytes, (device, image, name, addr, size));
        }
    }

    pub(crate) fn allocated(&self, addr: usize, size: usize) {
        self.state.lock().live.insert(addr, size);
    }

    pub(crate) fn freed(&self, addr: usize) {
        self.state.lock().live.remove(&addr);
    }

    /// Runs `launch`, recording it when it is the first of its kernel and configuration, or
    /// when it fails (its worker dies: the error then names the record). No lock is held
    /// while the kernel runs (it may wait for another thread's launch).
    ///
    /// `at` is (device, kernel handle); `read_global` reads a device global's bytes from the
    /// worker (where the image's globals live), for a launch chosen for recording.
    pub(crate) fn around_launch(
        &self,
        at: (u32, usize),
        args: &[usize],
        config: &LaunchConfig,
        arena: Option<&Arena>,
        read_global: ReadGlobal,
        launch: impl FnOnce() -> Result<()>,
    ) -> Result<()> {
        let (device, kernel) = at;
        let pending = if self.choosing { self.begin(device, kernel, config, arena) } else { None };
        let Some(arena) = arena else { return launch() };
        let Some(pending) = pending else {
            // The launch path when nothing is chosen: only a failure does more.
            let launched = Launched { device, args, config, arena };
            return launch().map_err(|e| self.record_failure(kernel, &launched, e));
        };
        let input = self
            .write_memory(&pending, "record_input", arena)
            .and_then(|n| self.write_globals(&pending, read_global).map(|g| n + g));
        let outcome = launch();
        if let (Err(e), Ok(n)) = (&outcome, &input) {
            if e.is_lost() && !std::mem::replace(&mut self.state.lock().failure_recorded, true) {
                let launched = Launched { device, args, config, arena };
                return Err(self.finish_failure(&pending, &launched, e.clone(), None, Some(*n)));
            }
        }
        // A launch that failed otherwise leaves no output to verify against.
        let written = match (&outcome, input) {
            (Ok(()), Ok(n)) => self
                .write_memory(&pending, "record_output", arena)
                .and_then(|m| write_file(&pending.base, "image", &pending.image).map(|()| n + m))
                .and_then(|n| {
                    let json = describe(&pending, &Launched { device, args, config, arena }, None);
                    write_file(&pending.base, "json", json.as_bytes()).map(|()| n + json.len() as u64)
                }),
            (Err(_), _) => Err(io::Error::other("the launch failed")),
            (_, Err(e)) => Err(e),
        };
        match written {
            Ok(n) => self.state.lock().written += n,
            Err(e) => {
                remove_record(&pending.base);
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

    /// A launch that was not chosen failed: records it with the memory as the failure left
    /// it, once, and returns its error naming the record.
    #[cold]
    fn record_failure(&self, kernel: usize, l: &Launched, e: PluginError) -> PluginError {
        let (device, config) = (l.device, l.config);
        if !e.is_lost() {
            return e;
        }
        let mut st = self.state.lock();
        if st.stopped || st.failure_recorded {
            return e;
        }
        let Some((image_id, name)) = st.kernels.get(&(device, kernel)).cloned() else { return e };
        let Some(image) = st.images.get(&(device, image_id)).cloned() else { return e };
        st.failure_recorded = true;
        let allocations: Vec<(usize, usize)> = st.live.iter().map(|(&a, &s)| (a, s)).collect();
        let memory: u64 = allocations.iter().map(|&(_, s)| s as u64).sum();
        // The globals as the dying worker saved them (none when it could not).
        let (globals, global_bytes) = st.fault_globals.saved(l.arena, device, image_id).unwrap_or_default();
        let need = memory
            + image.len() as u64
            + 4096
            + 64 * allocations.len() as u64
            + global_bytes.len() as u64
            + 128 * globals.len() as u64;
        if st.written.saturating_add(need) > self.max_bytes {
            drop(st);
            let why = format!(
                "recording the launch that failed would write about {need} bytes, over LIBOMPTARGET_RECORD_MAX ({} \
                 bytes)",
                self.max_bytes
            );
            self.stop(&why, &name);
            return e;
        }
        let file = self.next_file_name(&mut st, &name);
        drop(st);
        if let Err(err) = self.make_dir() {
            self.stop(&format!("cannot create {}: {err}", self.dir.display()), &name);
            return e;
        }
        let key = (name.clone(), config.num_teams[0], config.thread_limit[0], config.with_dyn_ptr);
        let pending = Pending { base: self.dir.join(file), name, key, allocations, image, globals };
        self.finish_failure(&pending, l, e, Some(global_bytes.as_slice()).filter(|b| !b.is_empty()), None)
    }

    /// Writes a failed launch's record (its memory first, unless `input` says it was written
    /// before the launch, and `globals`, the bytes the dying worker saved) and returns `e`
    /// naming it; on a write error, `e` as it was and the one warning.
    fn finish_failure(
        &self,
        p: &Pending,
        l: &Launched,
        e: PluginError,
        globals: Option<&[u8]>,
        input: Option<u64>,
    ) -> PluginError {
        let fault = Faulted { reason: &e.reason, memory_before_launch: input.is_some() };
        let json = describe(p, l, Some(&fault));
        let written = match input {
            Some(n) => Ok(n),
            None => self.write_memory(p, "record_input", l.arena),
        }
        .and_then(|n| match globals {
            Some(bytes) => write_file(&p.base, "globals", bytes).map(|()| n + bytes.len() as u64),
            None => Ok(n),
        })
        .and_then(|n| write_file(&p.base, "image", &p.image).map(|()| n + p.image.len() as u64))
        .and_then(|n| write_file(&p.base, "json", json.as_bytes()).map(|()| n + json.len() as u64));
        match written {
            Ok(n) => {
                self.state.lock().written += n;
                let desc = p.base.with_extension("json");
                PluginError {
                    kind: e.kind,
                    reason: format!(
                        "{}; the launch is recorded in {}: replay it with omp-replay",
                        e.reason,
                        desc.display()
                    ),
                }
            }
            Err(err) => {
                remove_record(&p.base);
                self.stop(&format!("cannot write {}: {err}", p.base.display()), &p.name);
                e
            }
        }
    }

    /// The next record's file name (without extension) for kernel `name`.
    fn next_file_name(&self, st: &mut RecordState, name: &str) -> String {
        let n = st.per_kernel.entry(name.to_string()).or_insert(0);
        *n += 1;
        if *n == 1 {
            file_name(name)
        } else {
            format!("{}-{n}", file_name(name))
        }
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
            Launches::Nth(n) => {
                st.launches += 1;
                if st.launches != n {
                    return None;
                }
                st.recorded.insert(key.clone());
            }
            Launches::All => {}
            Launches::FirstOfEachConfiguration if !st.recorded.insert(key.clone()) => return None,
            Launches::FirstOfEachConfiguration => {}
        }
        let globals = st.globals.get(&(device, image)).cloned().unwrap_or_default();
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
        let global_bytes: u64 = globals.iter().map(|g| g.2 as u64 + 128).sum();
        let need = 2 * memory + image.len() as u64 + 4096 + 64 * allocations.len() as u64 + global_bytes;
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
        let file = self.next_file_name(&mut st, &name);
        drop(st);
        if let Err(e) = self.make_dir() {
            self.stop(&format!("cannot create {}: {e}", self.dir.display()), &name);
            return None;
        }
        Some(Pending { base: self.dir.join(file), name, key, allocations, image, globals })
    }

    /// Makes the directory records go to. The user's `LIBOMPTARGET_RECORD` is made as asked;
    /// the default one, at a name anyone can guess in a shared `$TMPDIR`, must be this
    /// user's own: made here with mode 0700, or found as a directory (not a link) of this
    /// user that nobody else can write, so that no one else can have placed links in it
    /// that a record's files would be written through.
    fn make_dir(&self) -> io::Result<()> {
        use std::os::unix::fs::{DirBuilderExt, MetadataExt};
        if self.choosing {
            return std::fs::create_dir_all(&self.dir);
        }
        match std::fs::DirBuilder::new().mode(0o700).create(&self.dir) {
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            other => return other,
        }
        let meta = std::fs::symlink_metadata(&self.dir)?;
        // SAFETY: geteuid has no preconditions and cannot fail.
        let me = unsafe { libc::geteuid() };
        if !meta.file_type().is_dir() || meta.uid() != me || meta.mode() & 0o022 != 0 {
            return Err(io::Error::other("it exists and is not a private directory of this user"));
        }
        Ok(())
    }

    /// The one warning: nothing more is recorded.
    fn stop(&self, why: &str, kernel: &str) {
        let mut st = self.state.lock();
        if !std::mem::replace(&mut st.stopped, true) {
            eprintln!("omptarget warning: LIBOMPTARGET_RECORD: kernel {kernel} is not recorded: {why}; nothing more is recorded");
        }
    }

    /// Writes the image's globals' bytes, one after the other, to `base.globals` (nothing
    /// when it has none).
    fn write_globals(&self, p: &Pending, read_global: ReadGlobal) -> io::Result<u64> {
        if p.globals.is_empty() {
            return Ok(0);
        }
        let mut bytes = Vec::new();
        for (name, addr, size) in &p.globals {
            let start = bytes.len();
            bytes.resize(start + size, 0);
            read_global(*addr, &mut bytes[start..])
                .map_err(|e| io::Error::other(format!("cannot read the device global {name}: {}", e.reason)))?;
        }
        write_file(&p.base, "globals", &bytes)?;
        Ok(bytes.len() as u64)
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

/// Removes whatever part of a record at `base` was written.
fn remove_record(base: &Path) {
    for ext in ["record_input", "record_output", "globals", "image", "json"] {
        let _ = std::fs::remove_file(base.with_extension(ext));
    }
}

fn write_file(base: &Path, ext: &str, bytes: &[u8]) -> io::Result<()> {
    let mut f = File::create(base.with_extension(ext))?;
    f.write_all(bytes)?;
    f.flush()
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

#[cfg(test)]
#[path = "record_tests.rs"]
mod tests;
