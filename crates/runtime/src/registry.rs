//! Registered binaries (`__tgt_register_lib`): their device images and offload entries.

use crate::error::{diagnostic_display, report, Diagnostic, Lines};
use crate::{info, MapName, Runtime};
use omp_format::{EntryLayout, OffloadBinary, OffloadEntry};
use std::fmt;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// What went wrong while binaries were registered and devices opened. Registration goes
/// on (the binary or device is left out), so each is reported where it is met.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RegistryError {
    /// `__tgt_register_lib` was given a descriptor that cannot be read.
    MalformedDescriptor { why: String },
    /// A plugin could not open one of its devices.
    OpenDevice { index: usize, plugin: String, source: omp_plugin::PluginError },
    /// `requires unified_shared_memory`, and these devices of a plugin cannot honour it.
    UsmRefused { devices: Vec<i32>, plugin: String },
}

impl Diagnostic for RegistryError {
    fn write_lines(&self, out: &mut Lines<'_>) -> fmt::Result {
        match self {
            RegistryError::MalformedDescriptor { why } => {
                out.error(format_args!("__tgt_register_lib: ignoring a malformed binary descriptor: {why}"))
            }
            RegistryError::OpenDevice { index, plugin, source } => {
                out.error(format_args!("Failed to open device {index} of plugin {plugin}: {source}"))
            }
            RegistryError::UsmRefused { devices, plugin } => {
                let ids: Vec<String> = devices.iter().map(i32::to_string).collect();
                out.error(format_args!(
                    "{} {} ({plugin}) cannot honour '#pragma omp requires unified_shared_memory': their kernels run in an \
                     address space of their own (an isolated device, LIBOMPTARGET_ISOLATE=1, or a remote one), as on a \
                     GPU without unified memory; they will not be used",
                    if ids.len() == 1 { "device" } else { "devices" },
                    ids.join(", "),
                ))
            }
        }
    }
}

diagnostic_display!(RegistryError);

/// One device image as the program embedded it (a copy the runtime owns).
#[derive(Debug, Clone)]
pub struct BinaryImage {
    pub bytes: Arc<[u8]>,
}

/// A `__tgt_bin_desc`, unpacked by the ABI layer.
#[derive(Debug, Clone)]
pub struct Descriptor {
    /// The descriptor's address: identifies it again at unregistration.
    pub key: usize,
    pub images: Vec<BinaryImage>,
    pub entries: Vec<OffloadEntry>,
    /// The entry-table layout: tells clang 19 binaries from clang 20+ ones.
    pub layout: EntryLayout,
}

/// An image unwrapped from its container, with the plugin that can run it.
#[derive(Debug, Clone)]
pub struct LoadableImage {
    /// The whole embedded image (OffloadBinary or bare ELF)...
    data: Arc<[u8]>,
    /// ...and where the loadable image lies in it.
    range: std::ops::Range<usize>,
    pub triple: String,
    /// Every plugin that can run the image (the host CPU and a remote server may both).
    pub plugins: Vec<usize>,
}

#[derive(Debug)]
pub struct RegisteredDesc {
    pub key: usize,
    pub serial: u64,
    pub images: Vec<LoadableImage>,
    pub entries: Arc<Vec<OffloadEntry>>,
}

#[derive(Debug, Default)]
pub struct Registry {
    pub descs: Vec<RegisteredDesc>,
    next_serial: u64,
    /// The `requires` flags of the first registered binary that had them.
    pub requires: Option<u64>,
    /// Whether each binary ever registered used clang 19's entry layout.
    legacy_layout: Vec<bool>,
    /// Region ids of kernels whose binary was unregistered (until registered again): a
    /// launch of one is a task still pending at exit or at `dlclose`, not a bad id.
    pub retired: std::collections::HashSet<usize>,
}

impl LoadableImage {
    /// The image a plugin loads.
    pub fn bytes(&self) -> &[u8] {
        &self.data[self.range.clone()]
    }
}

impl Registry {
    pub fn image_count(&self) -> usize {
        self.descs.iter().map(|d| d.images.len()).sum()
    }
    pub fn image_triples(&self) -> Vec<String> {
        self.descs
            .iter()
            .flat_map(|d| {
                d.images.iter().map(|i| if i.triple.is_empty() { "unknown".to_string() } else { i.triple.clone() })
            })
            .collect()
    }
}

/// `requires` bits carried in the requires entry.
pub mod requires {
    pub const REVERSE_OFFLOAD: u64 = 0x2;
    pub const UNIFIED_ADDRESS: u64 = 0x4;
    pub const UNIFIED_SHARED_MEMORY: u64 = 0x8;
    pub const DYNAMIC_ALLOCATORS: u64 = 0x10;
}

/// Where `inner` (a slice borrowed from `outer`) lies in `outer`.
fn subslice_range(outer: &[u8], inner: &[u8]) -> std::ops::Range<usize> {
    let start = (inner.as_ptr() as usize).wrapping_sub(outer.as_ptr() as usize);
    if start > outer.len() || inner.len() > outer.len() - start {
        return 0..outer.len();
    }
    start..start + inner.len()
}

fn requires_clause(bit: u64) -> &'static str {
    match bit {
        requires::REVERSE_OFFLOAD => "reverse_offload",
        requires::UNIFIED_ADDRESS => "unified_address",
        requires::UNIFIED_SHARED_MEMORY => "unified_shared_memory",
        _ => "dynamic_allocators",
    }
}

impl Runtime {
    /// `__tgt_register_lib`: records the binary and opens every device that can run one of
    /// its images. Images load on a device at its first use.
    ///
    /// # Safety
    /// Each entry's address and size name the binary's kernel stub or global, and its name
    /// is a NUL-terminated constant of the binary; all stay mapped until
    /// [`Runtime::unregister_lib`] with the same key.
    pub unsafe fn register_lib(&self, desc: Descriptor) {
        let start = self.start_timer();
        self.register_lib_now(desc);
        if self.observing() {
            self.emit(&crate::trace::Event::BinaryRegistered { time: Self::stop_timer(start) });
        }
    }

    fn register_lib_now(&self, desc: Descriptor) {
        crate::debug!(
            "omptarget",
            "registering binary {:#x}: {} image(s), {} entries ({:?} layout)",
            desc.key,
            desc.images.len(),
            desc.entries.len(),
            desc.layout
        );
        let mut images = Vec::new();
        for img in &desc.images {
            let (range, triple) = match OffloadBinary::parse(&img.bytes) {
                Ok(bin) => (subslice_range(&img.bytes, bin.image), bin.triple().to_string()),
                Err(_) => (0..img.bytes.len(), String::new()),
            };
            let bytes = &img.bytes[range.clone()];
            let triple_opt = (!triple.is_empty()).then_some(triple.as_str());
            let plugins: Vec<usize> = self
                .plugins
                .iter()
                .enumerate()
                .filter(|(_, p)| p.is_compatible(bytes, triple_opt))
                .map(|(i, _)| i)
                .collect();
            let mut triple = triple;
            if plugins.is_empty() {
                // Named by its OffloadBinary, else by its ELF header (a descriptor points at
                // the device library itself); reported once, at registration.
                let (from_elf, arch) = omp_format::elf::target_of(bytes).unwrap_or(("", String::new()));
                if triple.is_empty() {
                    triple = from_elf.to_string();
                }
                let arch = OffloadBinary::parse(&img.bytes).map(|b| b.arch().to_string()).unwrap_or(arch);
                if self.config.debug != 0 || self.config.info() != 0 {
                    let what = match (triple.as_str(), arch.as_str()) {
                        ("", _) => "not an image of a known target".to_string(),
                        (t, "") => format!("triple {t}"),
                        (t, a) => format!("triple {t}, arch {a}"),
                    };
                    info::emit(&format!(
                        "omptarget {}: image of {} bytes ({what}) suits no plugin: no device here runs it\n",
                        if self.config.debug != 0 { "debug" } else { "info" },
                        bytes.len()
                    ));
                }
            }
            images.push(LoadableImage { data: img.bytes.clone(), range, triple, plugins });
        }
        // Devices open before the registry is locked: opening is a backend call (a
        // connection, for a remote server) and must not stall other threads' lookups.
        for plugin in images.iter().flat_map(|i| i.plugins.iter().copied()).collect::<std::collections::BTreeSet<_>>() {
            self.open_plugin_devices(plugin);
        }
        let mut reg = self.registry.write();
        if reg.descs.iter().any(|d| d.key == desc.key) {
            return;
        }
        for e in desc.entries.iter().filter(|e| e.is_kernel()) {
            reg.retired.remove(&(e.addr as usize));
        }
        for e in desc.entries.iter().filter(|e| e.is_requires()) {
            match reg.requires {
                None => reg.requires = Some(e.data),
                Some(prev) => {
                    for bit in [
                        requires::REVERSE_OFFLOAD,
                        requires::UNIFIED_ADDRESS,
                        requires::UNIFIED_SHARED_MEMORY,
                        requires::DYNAMIC_ALLOCATORS,
                    ] {
                        if (prev & bit) != (e.data & bit) {
                            info::emit(&format!(
                                "omptarget fatal error 2: '#pragma omp requires {}' not used consistently!\n",
                                requires_clause(bit)
                            ));
                            drop(reg);
                            self.finish();
                            std::process::abort();
                        }
                    }
                }
            }
        }
        let serial = reg.next_serial;
        reg.next_serial += 1;
        reg.descs.push(RegisteredDesc { key: desc.key, serial, images, entries: Arc::new(desc.entries) });
        let usm = reg.requires.is_some_and(|r| r & requires::UNIFIED_SHARED_MEMORY != 0);
        self.usm.store(usm, Ordering::Relaxed);
        reg.legacy_layout.push(desc.layout == EntryLayout::Legacy);
        self.legacy_only.store(reg.legacy_layout.iter().all(|&l| l), Ordering::Relaxed);
        drop(reg);
        if usm {
            self.refuse_usm_where_memory_is_not_shared();
        }
        self.generation.fetch_add(1, Ordering::AcqRel);
    }

    /// `__tgt_register_lib` with a descriptor that cannot be read: reported, and fatal under
    /// `OMP_TARGET_OFFLOAD=MANDATORY`, where running the binary's regions on the host would
    /// hide the failure.
    pub fn register_failed(&self, why: &str) {
        report(&RegistryError::MalformedDescriptor { why: why.to_string() });
        if self.host().target_offload() == 2 {
            info::emit("omptarget fatal error 1: a binary could not be registered while offloading is mandatory\n");
            self.finish();
            std::process::abort();
        }
    }

    /// `requires unified_shared_memory` on a device whose kernels cannot reach the
    /// program's memory (an isolated or remote device): said once, and the device is not
    /// used (constructs on it then follow OMP_TARGET_OFFLOAD).
    fn refuse_usm_where_memory_is_not_shared(&self) {
        let probe = 0u8;
        let here = &probe as *const u8 as usize;
        let mut refused: Vec<(i32, usize)> = Vec::new();
        for dev in self.devices() {
            if !dev.is_accessible(here, 1)
                && dev.mark_unusable("it cannot honour '#pragma omp requires unified_shared_memory'")
            {
                refused.push((dev.id, dev.plugin));
            }
        }
        let mut plugins: Vec<usize> = refused.iter().map(|r| r.1).collect();
        plugins.dedup();
        for plugin in plugins {
            let devices = refused.iter().filter(|r| r.1 == plugin).map(|r| r.0).collect();
            report(&RegistryError::UsmRefused { devices, plugin: self.plugins[plugin].name().to_string() });
        }
    }

    /// `__tgt_unregister_lib`: forgets the binary's kernels. At the last unregistration the
    /// mapping tables are dumped when INFO asks for it.
    pub fn unregister_lib(&self, key: usize) {
        let mut reg = self.registry.write();
        let Some(pos) = reg.descs.iter().position(|d| d.key == key) else { return };
        let desc = reg.descs.remove(pos);
        let last = reg.descs.is_empty();
        reg.retired.extend(desc.entries.iter().filter(|e| e.is_kernel()).map(|e| e.addr as usize));
        drop(reg);
        for dev in self.devices() {
            if let Some(image) = dev.forget_desc(&desc) {
                self.in_flight.unload_when_idle(dev, image);
            }
        }
        self.generation.fetch_add(1, Ordering::AcqRel);
        if last {
            self.observers.finish(crate::trace::End::LastUnregistration);
            static LOC: &std::ffi::CStr = c";libomptarget;libomptarget;0;0;;";
            self.announce_tables(crate::Loc::from_static(LOC), true);
        }
    }

    /// Opens all devices of a plugin once, appending them to the user numbering.
    fn open_plugin_devices(&self, plugin: usize) {
        // Serialises openings only; the device list is locked just to append.
        let _opening = self.opening.lock();
        if self.devices.read().iter().any(|d| d.plugin == plugin) {
            return;
        }
        let p = &self.plugins[plugin];
        let mut opened = Vec::new();
        for index in 0..p.device_count() {
            match p.open_device(index) {
                Ok(dev) => opened.push((index, dev)),
                Err(source) => report(&RegistryError::OpenDevice { index, plugin: p.name().to_string(), source }),
            }
        }
        // Only this function appends, under `opening`: the numbers are known before the
        // list is locked, and observers wrap each device (a checker's decorator) unlocked.
        let first = self.devices.read().len();
        let opened: Vec<_> = opened
            .into_iter()
            .enumerate()
            .map(|(k, (index, dev))| {
                let id = (first + k) as i32;
                (id, index, self.observers.wrap_device(id, dev))
            })
            .collect();
        let mut ids = Vec::new();
        let mut devices = self.devices.write();
        for (id, index, dev) in opened {
            debug_assert_eq!(devices.len() as i32, id);
            devices.push(Arc::new(crate::DeviceCtx::new(
                id,
                plugin,
                dev,
                crate::memory_manager::MemoryManager::for_device(&self.config, id),
            )));
            ids.push((id, index));
        }
        self.num_devices.store(devices.len(), Ordering::Release);
        drop(devices);
        for (id, index) in ids {
            self.emit(&crate::trace::Event::DeviceInit { device: id });
            crate::debug!("omptarget", "device {id} is device {index} of plugin {}", p.name());
        }
    }

    /// True when every registered binary uses clang 19's entry layout: unmapped
    /// `use_device_ptr` then yields NULL, and messages take LLVM 19's forms.
    #[inline]
    pub(crate) fn clang19_programs_only(&self) -> bool {
        self.legacy_only.load(Ordering::Relaxed)
    }

    #[inline]
    pub(crate) fn requires_usm(&self) -> bool {
        self.usm.load(Ordering::Relaxed)
    }
}

/// The name of a registered binary's entry.
pub(crate) fn entry_name(e: &OffloadEntry) -> MapName {
    // SAFETY: `Runtime::register_lib`'s promise: entry names are constants of the binary,
    // and the runtime reads them only while it is registered.
    unsafe { MapName::from_raw(e.name as usize) }
}
