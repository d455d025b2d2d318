//! Images loaded at a device's first use: kernels resolved, declare-target globals bound.

use super::*;
use crate::error::{report, Diagnostic, Lines};
use crate::MapName;
use omp_plugin::PluginError;
use std::fmt;

/// Why a device's images could not be loaded and bound (`Failed to init globals`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LoadError {
    /// The backend refused the image.
    Image(PluginError),
    /// The device address of an indirect function could not be read.
    IndirectFunction(String),
    /// A declare-target global could not be copied (`requires unified_shared_memory`).
    Global(PluginError),
}

impl fmt::Display for LoadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LoadError::Image(e) => write!(f, "Failed to load image: {e}"),
            LoadError::IndirectFunction(name) => write!(f, "cannot read indirect function {name}"),
            LoadError::Global(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for LoadError {}

/// An entry of a loaded image that could not be bound: its kernel or global is left out and
/// the image stays loaded, so this is reported where it is met.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unbound {
    /// The image lacks the kernel an entry names.
    Kernel { name: String, source: PluginError },
    /// The image lacks the global an entry names.
    Global { name: String },
}

impl Diagnostic for Unbound {
    fn write_lines(&self, out: &mut Lines<'_>) -> fmt::Result {
        match self {
            Unbound::Kernel { name, source } => out.error(format_args!("Failed to load kernel {name}: {source}")),
            Unbound::Global { name } => out.error(format_args!("Failed to load symbol {name}")),
        }
    }
}

impl Runtime {
    /// Loads, on first use of the device, every registered image it can run, binds
    /// declare-target globals and resolves kernels.
    ///
    /// No lock is held while an image loads: loading runs the image's constructors through
    /// the system loader, whose own lock another thread may hold while it registers a
    /// library (its constructor calls `__tgt_register_lib`). Threads that need an image
    /// another thread is loading wait for it.
    #[link_section = ".text.hot.omp_launch"]
    pub fn ensure_loaded(&self, dev: &DeviceCtx) -> Result<(), LoadError> {
        let generation = self.generation.load(Ordering::Acquire);
        if dev.loaded_generation.load(Ordering::Acquire) == generation {
            return Ok(());
        }
        while let Some(job) = self.next_load_job(dev) {
            let result = self.load_one(dev, &job);
            let mut loaded = dev.loaded.lock();
            loaded.loading.remove(&job.serial);
            if let Ok(image) = result {
                loaded.images.insert(job.serial, image);
            }
            drop(loaded);
            dev.load_done.notify_all();
            result?;
        }
        dev.loaded_generation.store(generation, Ordering::Release);
        Ok(())
    }

    /// The next registered image this device still lacks, claimed for loading; waits while
    /// other threads load the only ones left.
    fn next_load_job(&self, dev: &DeviceCtx) -> Option<LoadJob> {
        let mut loaded = dev.loaded.lock();
        loop {
            let job = {
                let reg = self.registry.read();
                reg.descs
                    .iter()
                    .filter(|d| !loaded.images.contains_key(&d.serial) && !loaded.loading.contains(&d.serial))
                    .find_map(|desc| {
                        // The last compatible image of a descriptor wins, as in LLVM.
                        let image = desc.images.iter().rev().find(|i| i.plugins.contains(&dev.plugin))?;
                        Some(LoadJob { serial: desc.serial, image: image.clone(), entries: desc.entries.clone() })
                    })
            };
            if let Some(job) = job {
                loaded.loading.insert(job.serial);
                return Some(job);
            }
            if loaded.loading.is_empty() {
                return None;
            }
            loaded = dev.load_done.wait(loaded);
        }
    }

    fn load_one(&self, dev: &DeviceCtx, job: &LoadJob) -> Result<ImageId, LoadError> {
        let image = &job.image;
        let start = self.start_timer();
        let loaded = dev.backend.load_image(image.bytes());
        crate::debug!("omptarget", "device {}: plugin load_image({} bytes) -> {loaded:?}", dev.id, image.bytes().len());
        let image_id = loaded.map_err(LoadError::Image)?;
        let bound = self.bind_entries(dev, image_id, &job.entries);
        self.emit(&crate::trace::Event::ImageLoaded {
            device: dev.id,
            image: image.bytes(),
            module_id: image_id.0 as u64,
            triple: &image.triple,
            entries: job.entries.len(),
            time: Self::stop_timer(start),
        });
        crate::debug!(
            "omptarget",
            "device {}: loaded image of {} bytes, {} entries",
            dev.id,
            image.bytes().len(),
            job.entries.len()
        );
        bound.map(|_| image_id)
    }

    /// Resolves every kernel and global of a freshly loaded image (backend calls, no lock
    /// held), then records them in the kernel map and the mapping table.
    fn bind_entries(
        &self,
        dev: &DeviceCtx,
        image: ImageId,
        entries: &[omp_format::OffloadEntry],
    ) -> Result<(), LoadError> {
        let usm = self.requires_usm();
        let mut kernels = Vec::new();
        let mut globals = Vec::new();
        let mut indirect = Vec::new();
        for e in entries {
            if e.is_requires() || e.addr == 0 {
                continue;
            }
            let Some(name) = info::map_name(crate::registry::entry_name(e)) else { continue };
            let Ok(cname) = CString::new(name) else { continue };
            if e.size == 0 {
                let found = dev.backend.kernel(image, &cname);
                crate::debug!("omptarget", "device {}: kernel {name} (host 0x{:016x}) -> {found:?}", dev.id, e.addr);
                match found {
                    Ok(k) => kernels.push((e.addr as usize, k)),
                    Err(source) => report(&Unbound::Kernel { name: name.to_string(), source }),
                }
                continue;
            }
            let found = dev.backend.global(image, &cname);
            crate::debug!(
                "omptarget",
                "device {}: global {name} (host 0x{:016x}, {} bytes) -> {found:x?}",
                dev.id,
                e.addr,
                e.size
            );
            let tgt = match found {
                Ok(g) => g.addr,
                Err(_) => {
                    report(&Unbound::Global { name: name.to_string() });
                    continue;
                }
            };
            let host = e.addr as usize;
            let size = e.size as usize;
            let tgt = if e.is_indirect() {
                // The device global holds the device function's address.
                let mut fnaddr = 0usize;
                // SAFETY: `fnaddr` is a local, 8 writable bytes.
                unsafe { self.retrieve(dev, &mut fnaddr as *mut usize as usize, tgt, 8, MapName::NONE) }
                    .map_err(|_| LoadError::IndirectFunction(name.to_string()))?;
                indirect.push((host, fnaddr));
                fnaddr
            } else {
                tgt
            };
            if usm && !e.is_indirect() {
                // SAFETY: a declare-target entry's address and size describe the program's
                // global, alive while its binary is registered.
                unsafe { dev.backend.submit(tgt, host, size) }.map_err(LoadError::Global)?;
            }
            globals.push((host, size, tgt, crate::registry::entry_name(e)));
        }
        if !indirect.is_empty() {
            let r = dev.backend.bind_indirect_functions(image, &indirect);
            crate::debug!("omptarget", "device {}: {} indirect function(s) bound -> {r:?}", dev.id, indirect.len());
            r.map_err(LoadError::Global)?;
        }
        dev.kernels.write().extend(kernels);
        let mut table = dev.lock_table();
        for (host, size, tgt, name) in globals {
            if table.lookup(host, size).key().is_some() {
                continue; // Fortran may emit the same global twice.
            }
            table.insert(MapEntry {
                base: host,
                begin: host,
                end: host + size,
                tgt_alloc: tgt,
                tgt_begin: tgt,
                dyn_rc: INF,
                hold_rc: 0,
                name,
                shadows: Vec::new(),
                owns_memory: false,
            });
        }
        Ok(())
    }
}
