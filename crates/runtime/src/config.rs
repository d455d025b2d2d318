//! Environment configuration, read once at start-up into a typed struct.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

/// INFO bits (`LIBOMPTARGET_INFO`).
pub mod info_bits {
    pub const KERNEL_ARGS: u32 = 0x01;
    pub const MAPPING_EXISTS: u32 = 0x02;
    pub const DUMP_TABLE: u32 = 0x04;
    pub const MAPPING_CHANGED: u32 = 0x08;
    pub const PLUGIN_KERNEL: u32 = 0x10;
    pub const DATA_TRANSFER: u32 = 0x20;
    pub const EMPTY_MAPPING: u32 = 0x40;
}

/// `LIBOMPTARGET_CHECK`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CheckMode {
    Off,
    /// `1`: the mapping checker's findings and the data-movement advice.
    All,
    /// `perf`: the data-movement advice only.
    Perf,
    /// `bugs`: the findings only.
    Bugs,
    /// `gpu`: only what a kernel did that a GPU would refuse at run time (its threads'
    /// stack, its device `malloc`), measured on the isolated device; findings that `1` and
    /// `bugs` make too.
    Gpu,
}

impl CheckMode {
    /// Whether the isolated device measures what a GPU would refuse (`1`, `bugs`, `gpu`).
    pub fn gpu(self) -> bool {
        matches!(self, CheckMode::All | CheckMode::Bugs | CheckMode::Gpu)
    }
}

/// Settings taken from the environment.
#[derive(Debug)]
pub struct Config {
    /// Shared with the INFO observer, which reads it at each event.
    info: Arc<AtomicU32>,
    /// `LIBOMPTARGET_DEBUG` level: any non-zero value (-1 included) turns the trace on;
    /// never silences INFO.
    pub debug: u32,
    /// `LIBOMPTARGET_DEBUG_FILE`: where the trace goes instead of stderr.
    pub debug_file: Option<String>,
    /// `LIBOMPTARGET_TREAT_ATTACH_AUTO_AS_ALWAYS`.
    pub attach_always: bool,
    /// `LIBOMPTARGET_MEMORY_MANAGER_THRESHOLD`; 0 disables the memory manager.
    pub mm_threshold: usize,
    /// `LIBOMPTARGET_PROFILE`: where to write the Chrome trace.
    pub profile: Option<String>,
    /// `LIBOMPTARGET_PROFILE_SUMMARY`: print per-kernel and per-direction totals at exit.
    pub profile_summary: bool,
    /// `LIBOMPTARGET_CHECK`: the mapping checker and the data-movement advisor.
    pub check: CheckMode,
    /// `LIBOMPTARGET_ISOLATE`: kernels of the local devices in a worker process; `None`
    /// when unset (then the checker decides, see [`crate::compose::plugins`]).
    pub isolate: Option<bool>,
    /// `LIBOMPTARGET_SPREAD`: `nowait` regions that name no device and bring their own
    /// data run on the least loaded device of the default device's kind (`spread.rs`).
    pub spread: bool,
    /// `LIBOMPTARGET_MPI_DEVICES_FIRST=1`: an MPI job's devices come before the local ones, so
    /// device 0 (the default device) is on the first device rank (docs/cluster.md).
    pub mpi_devices_first: bool,
    /// `OMP_TARGET_OFFLOAD` (0 disabled, 1 default, 2 mandatory), for a libomp that does not
    /// export its own reading of it (`__kmpc_get_target_offload`).
    pub target_offload: Option<i32>,
    /// Every `LIBOMPTARGET_*`, `OMP_*` and `OFFLOAD_*` variable as the environment had it at
    /// start-up: plugins read their settings from here (see [`Config::var`]), so the
    /// environment is read once.
    vars: std::collections::BTreeMap<String, String>,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            info: Arc::new(AtomicU32::new(0)),
            debug: 0,
            debug_file: None,
            attach_always: false,
            mm_threshold: 8192,
            profile: None,
            profile_summary: false,
            check: CheckMode::Off,
            isolate: None,
            spread: false,
            mpi_devices_first: false,
            target_offload: None,
            vars: std::collections::BTreeMap::new(),
        }
    }
}

/// Parses an integer the way users write them: decimal, `0x` hex, or negative (-1 = all bits).
pub fn parse_int(s: &str) -> Option<i64> {
    let s = s.trim();
    let (neg, digits) = match s.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, s.strip_prefix('+').unwrap_or(s)),
    };
    let v = if let Some(hex) = digits.strip_prefix("0x").or_else(|| digits.strip_prefix("0X")) {
        i64::from_str_radix(hex, 16).ok()?
    } else {
        digits.parse::<i64>().ok()?
    };
    Some(if neg { -v } else { v })
}

fn parse_bool(s: &str) -> Option<bool> {
    match s.trim().to_ascii_lowercase().as_str() {
        "1" | "true" | "yes" | "on" => Some(true),
        "0" | "false" | "no" | "off" => Some(false),
        _ => None,
    }
}

impl Config {
    /// Reads the process environment, once: the runtime's settings, and a snapshot of the
    /// variables plugins read.
    pub fn from_process_env() -> Self {
        let vars: std::collections::BTreeMap<String, String> = std::env::vars_os()
            .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
            .filter(|(k, _)| ["LIBOMPTARGET_", "OMP_", "OFFLOAD_"].iter().any(|p| k.starts_with(p)))
            .collect();
        let mut c = Self::from_env(|k| vars.get(k).cloned());
        c.vars = vars;
        c
    }

    /// A variable as it was at start-up (for plugins' own settings).
    pub fn var(&self, name: &str) -> Option<String> {
        self.vars.get(name).cloned()
    }

    /// Reads the configuration through `get` (the process environment in production).
    pub fn from_env(get: impl Fn(&str) -> Option<String>) -> Self {
        let mut c = Config::default();
        let int_var = |name: &str| -> Option<i64> {
            let raw = get(name)?;
            let v = parse_int(&raw);
            if v.is_none() {
                eprintln!("omptarget warning: ignoring {name}='{raw}': not a number (use decimal, 0x-hex or -1)");
            }
            v
        };
        if let Some(v) = int_var("LIBOMPTARGET_INFO") {
            c.info = Arc::new(AtomicU32::new(v as u32));
        }
        if let Some(v) = int_var("LIBOMPTARGET_DEBUG") {
            c.debug = v as u32;
        }
        if let Some(v) = int_var("LIBOMPTARGET_MEMORY_MANAGER_THRESHOLD") {
            c.mm_threshold = v.max(0) as usize;
        }
        c.debug_file = get("LIBOMPTARGET_DEBUG_FILE");
        c.profile = get("LIBOMPTARGET_PROFILE").filter(|p| !p.is_empty());
        c.profile_summary = get("LIBOMPTARGET_PROFILE_SUMMARY").and_then(|v| parse_bool(&v)).unwrap_or(false);
        c.attach_always = get("LIBOMPTARGET_TREAT_ATTACH_AUTO_AS_ALWAYS").and_then(|v| parse_bool(&v)).unwrap_or(false);
        if let Some(v) = get("LIBOMPTARGET_CHECK") {
            c.check = match v.trim().to_ascii_lowercase().as_str() {
                "perf" => CheckMode::Perf,
                "bugs" => CheckMode::Bugs,
                "gpu" => CheckMode::Gpu,
                other => match parse_bool(other) {
                    Some(true) => CheckMode::All,
                    Some(false) => CheckMode::Off,
                    None => {
                        eprintln!("omptarget warning: ignoring LIBOMPTARGET_CHECK='{v}': use 1, 0, bugs, perf or gpu");
                        CheckMode::Off
                    }
                },
            };
            if c.check != CheckMode::Off {
                // Each mapping gets device memory of its own: a pooled block is larger than
                // its mapping, and what lies past the mapping must fault.
                c.mm_threshold = 0;
            }
        }
        c.isolate = get("LIBOMPTARGET_ISOLATE").map(|v| match v.trim() {
            "" => false,
            t => parse_bool(t).unwrap_or_else(|| {
                eprintln!("omptarget warning: ignoring LIBOMPTARGET_ISOLATE='{v}': use 1 or 0");
                false
            }),
        });
        c.spread = get("LIBOMPTARGET_SPREAD").is_some_and(|v| match v.trim() {
            "" => false,
            t => parse_bool(t).unwrap_or_else(|| {
                eprintln!("omptarget warning: ignoring LIBOMPTARGET_SPREAD='{v}': use 1 or 0");
                false
            }),
        });
        c.mpi_devices_first = get("LIBOMPTARGET_MPI_DEVICES_FIRST").and_then(|v| parse_bool(&v)).unwrap_or(false);
        c.target_offload = get("OMP_TARGET_OFFLOAD").map(|v| match v.trim().to_ascii_lowercase().as_str() {
            "disabled" => 0,
            "mandatory" => 2,
            _ => 1,
        });
        c
    }

    #[inline]
    pub fn info(&self) -> u32 {
        self.info.load(Ordering::Relaxed)
    }

    #[inline]
    pub fn info_on(&self, bit: u32) -> bool {
        self.info() & bit != 0
    }

    /// The INFO bits, shared (for the INFO observer).
    pub fn info_bits(&self) -> Arc<AtomicU32> {
        self.info.clone()
    }

    /// `__tgt_set_info_flag` (through [`crate::Runtime::set_info_flag`], which tells the
    /// observers).
    pub(crate) fn set_info(&self, v: u32) {
        self.info.store(v, Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integers_in_every_spelling() {
        assert_eq!(parse_int("0x20"), Some(32));
        assert_eq!(parse_int(" 4 "), Some(4));
        assert_eq!(parse_int("-1"), Some(-1));
        assert_eq!(parse_int("lots"), None);
    }

    #[test]
    fn info_all_bits_and_bad_values() {
        let c = Config::from_env(|k| (k == "LIBOMPTARGET_INFO").then(|| "-1".to_string()));
        assert_eq!(c.info(), u32::MAX);
        let c = Config::from_env(|k| (k == "LIBOMPTARGET_INFO").then(|| "verbose".to_string()));
        assert_eq!(c.info(), 0);
        let c = Config::from_env(|k| (k == "LIBOMPTARGET_MEMORY_MANAGER_THRESHOLD").then(|| "0".to_string()));
        assert_eq!(c.mm_threshold, 0);
    }

    #[test]
    fn debug_is_on_for_every_non_zero_level() {
        let debug = |v: &str| Config::from_env(|k| (k == "LIBOMPTARGET_DEBUG").then(|| v.to_string())).debug;
        assert_ne!(debug("-1"), 0, "-1 is all bits, as the docs say");
        assert_ne!(debug("1"), 0);
        assert_eq!(debug("0"), 0);
        assert_eq!(debug("lots"), 0);
    }

    #[test]
    fn isolate_on_off_and_bad_values_off() {
        let isolate = |v: &str| Config::from_env(|k| (k == "LIBOMPTARGET_ISOLATE").then(|| v.to_string())).isolate;
        assert_eq!(isolate("yes"), Some(true));
        assert_eq!(isolate("0"), Some(false));
        assert_eq!(isolate(""), Some(false));
        assert_eq!(isolate("2"), Some(false), "a bad value is warned about and means off");
        assert_eq!(Config::from_env(|_| None).isolate, None);
    }

    #[test]
    fn spread_on_off_and_bad_values_off() {
        let spread = |v: &str| Config::from_env(|k| (k == "LIBOMPTARGET_SPREAD").then(|| v.to_string())).spread;
        assert!(spread("1"));
        assert!(spread("on"));
        assert!(!spread("0"));
        assert!(!spread(""));
        assert!(!spread("all"), "a bad value is warned about and means off");
        assert!(!Config::from_env(|_| None).spread);
    }

    #[test]
    fn check_modes_and_which_measure_what_a_gpu_refuses() {
        let check = |v: &str| Config::from_env(|k| (k == "LIBOMPTARGET_CHECK").then(|| v.to_string())).check;
        let modes =
            [("1", CheckMode::All), ("bugs", CheckMode::Bugs), ("perf", CheckMode::Perf), ("GPU", CheckMode::Gpu)];
        for (v, mode) in modes {
            assert_eq!(check(v), mode, "{v}");
            assert_eq!(mode.gpu(), mode != CheckMode::Perf, "{v}");
        }
        assert_eq!(check("0"), CheckMode::Off);
        assert!(!CheckMode::Off.gpu());
    }
}
