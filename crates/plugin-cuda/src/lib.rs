//! NVIDIA GPUs through the CUDA driver API (docs/cuda.md).
//!
//! The driver is `dlopen`ed at run time (`libcuda.so.1`), the first time the runtime asks
//! for this plugin's devices, which it does only for a program that carries an nvptx64
//! image: `libomptarget.so` has no link-time dependency on it, and a machine without it has
//! no CUDA devices and sees no message (the reason is [`Plugin::unavailable`], printed under
//! `LIBOMPTARGET_INFO`/`LIBOMPTARGET_DEBUG`).
//!
//! - [`driver`]: loading the library, the entry-point table, CUDA errors as plugin errors;
//! - [`device`]: one GPU (primary context, streams, modules, memory, launches);
//! - [`image`]: the cubin's SM and the kernels' environments, read from the image;
//! - [`launch_rules`]: blocks and threads of a launch, as LLVM decides them.

pub mod device;
pub mod driver;
pub mod image;
pub mod launch_rules;
pub mod streams;

use driver::Driver;
use omp_plugin::{Device, Plugin, Result};
use std::io::Write as _;
use std::sync::OnceLock;

/// The settings the plugin takes from the environment (read once by the runtime).
#[derive(Debug, Clone, Copy, Default)]
pub struct Settings {
    /// `LIBOMPTARGET_INFO` has the plugin-kernel bit (0x10): device limits at open.
    pub info_kernel: bool,
    /// `LIBOMPTARGET_INFO` or `LIBOMPTARGET_DEBUG` is set: say why there are no devices.
    pub verbose: bool,
    /// `LIBOMPTARGET_DEBUG` is set: say how many devices there are, too.
    pub debug: bool,
    /// `OMP_NUM_TEAMS` and `OMP_TEAMS_THREAD_LIMIT` cap blocks and threads per launch.
    pub num_teams: Option<u32>,
    pub teams_thread_limit: Option<u32>,
    /// `LIBOMPTARGET_MIN_THREADS_FOR_LOW_TRIP_COUNT`.
    pub min_threads_for_low_trip_count: Option<u32>,
    /// `LIBOMPTARGET_SHARED_MEMORY_SIZE`: dynamic shared memory every launch gets at least.
    pub shared_memory_size: u32,
    /// `LIBOMPTARGET_HEAP_SIZE` and `LIBOMPTARGET_STACK_SIZE` (device `malloc` heap, per-thread stack).
    pub heap_size: Option<usize>,
    pub stack_size: Option<usize>,
    /// How many CUDA devices there are (for the device runtime's environment).
    pub num_devices: usize,
    /// `LIBOMPTARGET_CHECK` asks for findings (`1` or `bugs`): a kernel fault names the
    /// kernel and sends the user to the isolated CPU device, which can name the variable.
    pub check_findings: bool,
    /// `LIBOMPTARGET_PROFILE` is set: copies and kernels are timed on the device (CUDA events).
    pub profile: bool,
}

impl Settings {
    /// Reads the settings through `var` (the runtime's snapshot of the environment).
    pub fn from_vars(var: impl Fn(&str) -> Option<String>) -> Settings {
        let int = |k: &str| var(k).and_then(|v| parse_int(&v));
        let positive = |k: &str| int(k).filter(|&v| v > 0).map(|v| v.min(u64::from(u32::MAX)) as u32);
        let info = int("LIBOMPTARGET_INFO").unwrap_or(0);
        let debug = int("LIBOMPTARGET_DEBUG").unwrap_or(0) != 0;
        Settings {
            info_kernel: info & 0x10 != 0,
            verbose: info != 0 || debug,
            debug,
            num_teams: positive("OMP_NUM_TEAMS"),
            teams_thread_limit: positive("OMP_TEAMS_THREAD_LIMIT"),
            min_threads_for_low_trip_count: positive("LIBOMPTARGET_MIN_THREADS_FOR_LOW_TRIP_COUNT"),
            shared_memory_size: positive("LIBOMPTARGET_SHARED_MEMORY_SIZE").unwrap_or(0),
            heap_size: int("LIBOMPTARGET_HEAP_SIZE").map(|v| v as usize),
            stack_size: int("LIBOMPTARGET_STACK_SIZE").map(|v| v as usize),
            num_devices: 0,
            profile: var("LIBOMPTARGET_PROFILE").is_some_and(|v| !v.is_empty()),
            check_findings: var("LIBOMPTARGET_CHECK").is_some_and(|v| {
                matches!(v.trim().to_ascii_lowercase().as_str(), "1" | "true" | "yes" | "on" | "bugs")
            }),
        }
    }
}

/// Decimal or `0x` hexadecimal; a negative number (`-1`: every INFO bit) as all bits.
fn parse_int(s: &str) -> Option<u64> {
    let s = s.trim();
    if let Some(hex) = s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        return u64::from_str_radix(hex, 16).ok();
    }
    s.parse::<u64>().ok().or_else(|| s.parse::<i64>().ok().map(|v| v as u64))
}

/// Writes one whole line to stderr at once.
pub(crate) fn emit(text: &str) {
    let _ = std::io::stderr().lock().write_all(text.as_bytes());
}

/// The driver and its device count, or why there are none.
struct Loaded {
    driver: std::result::Result<&'static Driver, String>,
    count: usize,
}

/// The CUDA plugin: one device per GPU the driver shows (`CUDA_VISIBLE_DEVICES` applies).
pub struct CudaPlugin {
    settings: Settings,
    loaded: OnceLock<Loaded>,
}

impl CudaPlugin {
    /// A plugin that will load the driver when first asked for its devices.
    pub fn new(var: impl Fn(&str) -> Option<String>) -> CudaPlugin {
        CudaPlugin { settings: Settings::from_vars(var), loaded: OnceLock::new() }
    }

    fn loaded(&self) -> &Loaded {
        self.loaded.get_or_init(|| {
            let driver = Driver::load().map(|d| &*Box::leak(Box::new(d)));
            let count = match &driver {
                Ok(d) => {
                    let mut n = 0;
                    // SAFETY: writes one int; the driver is initialised.
                    let r = unsafe { (d.device_get_count)(&mut n) };
                    if r == driver::CUDA_SUCCESS {
                        n.max(0) as usize
                    } else {
                        0
                    }
                }
                Err(_) => 0,
            };
            match &driver {
                Err(why) if self.settings.verbose => emit(&format!("omptarget info: CUDA plugin: no devices: {why}\n")),
                Ok(_) if self.settings.debug => emit(&format!("CUDA plugin --> {count} device(s)\n")),
                _ => {}
            }
            Loaded { driver, count }
        })
    }
}

impl Plugin for CudaPlugin {
    fn name(&self) -> &str {
        "cuda"
    }

    fn device_count(&self) -> usize {
        self.loaded().count
    }

    fn is_compatible(&self, image: &[u8], triple: Option<&str>) -> bool {
        // Decided from the image alone: the driver is not loaded for a program without an
        // nvptx64 image. A cubin for another SM is accepted here and refused at load, with
        // a message that names both.
        if let Some(t) = triple.filter(|t| !t.is_empty()) {
            return t.starts_with("nvptx64");
        }
        image::cubin_sm(image).is_some()
    }

    fn open_device(&self, index: usize) -> Result<Box<dyn Device>> {
        let loaded = self.loaded();
        let driver = loaded.driver.as_ref().map_err(|e| omp_plugin::PluginError::failed(e.clone()))?;
        let settings = Settings { num_devices: loaded.count, ..self.settings };
        Ok(Box::new(device::CudaDevice::open(driver, index, settings)?))
    }

    fn unavailable(&self) -> Option<String> {
        // Only once the driver was looked for (a program with an nvptx64 image).
        let loaded = self.loaded.get()?;
        match &loaded.driver {
            Err(why) => Some(format!("no CUDA devices: {why}")),
            Ok(_) if loaded.count == 0 => {
                Some("no CUDA devices: the CUDA driver shows none (CUDA_VISIBLE_DEVICES?)".into())
            }
            Ok(_) => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_come_from_the_runtimes_variables() {
        let s = Settings::from_vars(|k| match k {
            "LIBOMPTARGET_INFO" => Some("0x10".into()),
            "OMP_NUM_TEAMS" => Some("8".into()),
            "LIBOMPTARGET_HEAP_SIZE" => Some("1048576".into()),
            _ => None,
        });
        assert!(s.info_kernel && s.verbose);
        assert_eq!((s.num_teams, s.teams_thread_limit, s.heap_size), (Some(8), None, Some(1 << 20)));
        let quiet = Settings::from_vars(|_| None);
        assert!(!quiet.info_kernel && !quiet.verbose && !quiet.check_findings);
        for (value, findings) in [("1", true), ("bugs", true), ("perf", false), ("0", false)] {
            let s = Settings::from_vars(|k| (k == "LIBOMPTARGET_CHECK").then(|| value.into()));
            assert_eq!(s.check_findings, findings, "LIBOMPTARGET_CHECK={value}");
        }
        assert!(Settings::from_vars(|k| (k == "LIBOMPTARGET_INFO").then(|| "-1".into())).info_kernel);
    }

    #[test]
    fn only_nvptx64_images_are_ours_and_deciding_that_loads_no_driver() {
        let p = CudaPlugin::new(|_| None);
        assert!(p.is_compatible(b"whatever", Some("nvptx64-nvidia-cuda")));
        assert!(!p.is_compatible(b"\x7fELF", Some("x86_64-pc-linux-gnu")));
        let mut x86 = vec![0u8; 64];
        x86[..4].copy_from_slice(b"\x7fELF");
        x86[4] = 2;
        x86[5] = 1;
        x86[18] = 62;
        assert!(!p.is_compatible(&x86, None));
        assert!(p.loaded.get().is_none(), "the driver is looked for only when devices are asked for");
        assert_eq!(p.unavailable(), None, "nothing to explain before that");
    }
}
