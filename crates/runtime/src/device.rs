//! One offload device as the runtime sees it: the backend device, its mapping table, the
//! images loaded on it and the kernels they provide.

use crate::memory_manager::MemoryManager;
use crate::registry::RegisteredDesc;
use crate::table::{MapEntry, MappingTable, INF};
use crate::{info, Runtime};
use omp_format::SourceLocation;
use omp_plugin::{host_memory, AllocKind, Device, ImageId, KernelId, PluginError};
use std::collections::{HashMap, HashSet};
use std::ffi::CString;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, RwLock};

/// Hashes addresses: they are already well spread, so one multiply does.
#[derive(Default)]
pub struct AddrHasher(u64);

impl Hasher for AddrHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(*b)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }
    fn write_usize(&mut self, n: usize) {
        self.0 = (n as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15).rotate_left(29);
    }
}

type AddrMap<V> = HashMap<usize, V, BuildHasherDefault<AddrHasher>>;

/// Images and kernels loaded on the device.
#[derive(Default)]
struct Loaded {
    /// Serial numbers of descriptors whose image is loaded here.
    descs: HashSet<u64>,
    /// The backend's image for each of those descriptors, unloaded at unregistration.
    images: HashMap<u64, ImageId>,
}

pub struct DeviceCtx {
    /// User-visible device number.
    pub id: i32,
    /// Index of the plugin that owns the device.
    pub plugin: usize,
    pub dev: Box<dyn Device>,
    pub table: Mutex<MappingTable>,
    loaded: Mutex<Loaded>,
    /// The registry generation whose images are all loaded here.
    loaded_generation: AtomicU64,
    /// Kernel handles by host region-id address.
    kernels: RwLock<AddrMap<KernelId>>,
    pub mm: MemoryManager,
}

impl DeviceCtx {
    pub fn new(id: i32, plugin: usize, dev: Box<dyn Device>, mm_threshold: usize) -> Self {
        Self {
            id,
            plugin,
            dev,
            table: Mutex::new(MappingTable::new()),
            loaded: Mutex::new(Loaded::default()),
            loaded_generation: AtomicU64::new(u64::MAX),
            kernels: RwLock::new(AddrMap::default()),
            mm: MemoryManager::new(mm_threshold),
        }
    }

    pub fn lock_table(&self) -> MutexGuard<'_, MappingTable> {
        self.table.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The kernel for a host region id, if an image on this device provides it.
    #[inline]
    pub fn kernel(&self, host_ptr: usize) -> Option<KernelId> {
        self.kernels.read().unwrap().get(&host_ptr).copied()
    }

    /// Allocates device memory for the runtime's own use (mappings, private copies), through
    /// the memory manager when small. Free it with [`DeviceCtx::free_sized`].
    pub fn alloc(&self, size: usize, kind: AllocKind) -> Result<usize, PluginError> {
        if self.mm.manages(size) {
            if let Some(p) = self.mm.take(size) {
                return Ok(p);
            }
            return self.alloc_direct(MemoryManager::class(size).1, kind);
        }
        self.alloc_direct(size, kind)
    }

    /// Allocates straight from the device; on failure, releases the cache and retries once.
    pub fn alloc_direct(&self, size: usize, kind: AllocKind) -> Result<usize, PluginError> {
        self.dev.alloc(size, kind).or_else(|_| {
            for b in self.mm.drain_free() {
                let _ = self.dev.free(b, AllocKind::Default);
            }
            self.dev.alloc(size, kind)
        })
    }

    /// Frees memory from [`DeviceCtx::alloc`] of `size` bytes.
    pub fn free_sized(&self, ptr: usize, size: usize, kind: AllocKind) -> Result<(), PluginError> {
        if self.mm.manages(size) {
            self.mm.give_back(ptr, size);
            return Ok(());
        }
        self.dev.free(ptr, kind)
    }

    /// The mapping table as LLVM prints it.
    pub fn table_text(&self, loc: &SourceLocation) -> String {
        info::table_dump(self.id, loc, &self.lock_table())
    }

    pub fn dump_table(&self, loc: &SourceLocation) {
        info::emit(&self.table_text(loc));
    }

    /// Forgets an unregistered binary's kernels and globals; returns its image, for the
    /// caller to unload once no launch runs.
    pub(crate) fn forget_desc(&self, desc: &RegisteredDesc) -> Option<ImageId> {
        let mut loaded = self.loaded.lock().unwrap();
        if !loaded.descs.remove(&desc.serial) {
            return None;
        }
        let image = loaded.images.remove(&desc.serial);
        drop(loaded);
        {
            let mut kernels = self.kernels.write().unwrap();
            for e in desc.entries.iter().filter(|e| e.is_kernel()) {
                kernels.remove(&(e.addr as usize));
            }
        }
        // The binary's globals leave the table with its image: another library may be
        // loaded at the same host addresses later.
        {
            let mut table = self.lock_table();
            for e in desc.entries.iter().filter(|e| e.size > 0 && e.addr != 0 && !e.is_requires()) {
                let host = e.addr as usize;
                if table.get(host).is_some_and(|m| !m.owns_memory && m.dyn_rc == INF) {
                    table.remove(host);
                }
            }
        }
        image
    }
}

impl Runtime {
    /// Loads, on first use of the device, every registered image it can run, binds
    /// declare-target globals and resolves kernels.
    pub fn ensure_loaded(&self, dev: &DeviceCtx) -> Result<(), String> {
        let generation = self.generation.load(Ordering::Acquire);
        if dev.loaded_generation.load(Ordering::Acquire) == generation {
            return Ok(());
        }
        let mut loaded = dev.loaded.lock().unwrap();
        let reg = self.registry.read().unwrap();
        for desc in &reg.descs {
            if loaded.descs.contains(&desc.serial) {
                continue;
            }
            // The last compatible image of a descriptor wins, as in LLVM.
            let Some(image) = desc.images.iter().rev().find(|i| i.plugins.contains(&dev.plugin)) else { continue };
            let span = || crate::profile::Span {
                cat: crate::profile::Category::ImageLoad,
                name: format!("load image ({})", if image.triple.is_empty() { "unknown" } else { &image.triple }),
                device: dev.id,
                bytes: image.bytes.len() as u64,
                args: vec![("entries", desc.entries.len().to_string())],
            };
            let image_id = self.timed(span, || -> Result<ImageId, String> {
                let image_id = dev.dev.load_image(image.bytes).map_err(|e| format!("Failed to load image: {e}"))?;
                self.observe(|o| o.device_load(dev.id, image.bytes, image_id.0 as u64));
                crate::debug!(
                    self,
                    "omptarget",
                    "device {}: loaded image of {} bytes, {} entries",
                    dev.id,
                    image.bytes.len(),
                    desc.entries.len()
                );
                self.bind_entries(dev, image_id, desc).map(|_| image_id)
            })?;
            loaded.descs.insert(desc.serial);
            loaded.images.insert(desc.serial, image_id);
        }
        dev.loaded_generation.store(generation, Ordering::Release);
        Ok(())
    }

    fn bind_entries(&self, dev: &DeviceCtx, image: omp_plugin::ImageId, desc: &RegisteredDesc) -> Result<(), String> {
        let usm = self.requires_usm();
        let mut kernels = dev.kernels.write().unwrap();
        let mut table = dev.lock_table();
        for e in desc.entries.iter() {
            if e.is_requires() || e.addr == 0 {
                continue;
            }
            let Some(name) = host_memory::c_str(e.name as usize) else { continue };
            let Ok(cname) = CString::new(name) else { continue };
            if e.size == 0 {
                match dev.dev.kernel(image, &cname) {
                    Ok(k) => {
                        kernels.insert(e.addr as usize, k);
                    }
                    Err(err) => info::error(format_args!("Failed to load kernel {name}: {err}")),
                }
                continue;
            }
            let tgt = match dev.dev.global(image, &cname) {
                Ok(t) => t,
                Err(_) => {
                    info::error(format_args!("Failed to load symbol {name}"));
                    continue;
                }
            };
            let host = e.addr as usize;
            let size = e.size as usize;
            let tgt = if e.is_indirect() {
                // The device global holds the device function's address.
                let mut fnaddr = 0usize;
                self.retrieve(dev, &mut fnaddr as *mut usize as usize, tgt, 8, 0)
                    .map_err(|_| format!("cannot read indirect function {name}"))?;
                fnaddr
            } else {
                tgt
            };
            if usm && !e.is_indirect() {
                dev.dev.submit(tgt, host, size).map_err(|err| err.to_string())?;
            }
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
                name: e.name as usize,
                shadows: Vec::new(),
                owns_memory: false,
            });
        }
        Ok(())
    }
}
