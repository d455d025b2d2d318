//! One offload device as the runtime sees it: the backend device, its mapping table, the
//! images loaded on it and the kernels they provide.

use crate::memory_manager::MemoryManager;
use crate::registry::RegisteredDesc;
use crate::table::{MapEntry, MappingTable, INF};
use crate::{info, Runtime};
use omp_format::SourceLocation;
use omp_plugin::{AllocKind, Device, ImageId, KernelId, PluginError};
use omp_sync::{Mutex, MutexGuard, RwLock, Signal};
use std::collections::{HashMap, HashSet};
use std::ffi::CString;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};

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

/// Which registered binaries have their image loaded on the device.
#[derive(Default)]
struct Loaded {
    /// Serial numbers of descriptors whose image a thread is loading right now.
    loading: HashSet<u64>,
    /// The backend's image for each descriptor loaded here (by serial number), unloaded at
    /// unregistration.
    images: HashMap<u64, ImageId>,
}

/// One image to load, taken from the registry so that no lock is held while loading.
struct LoadJob {
    serial: u64,
    image: crate::registry::LoadableImage,
    entries: std::sync::Arc<Vec<omp_format::OffloadEntry>>,
}

pub struct DeviceCtx {
    /// User-visible device number.
    pub id: i32,
    /// Index of the plugin that owns the device.
    pub plugin: usize,
    pub dev: Box<dyn Device>,
    pub table: Mutex<MappingTable>,
    /// Notified when entries that were being mapped are ready (see `MappingTable::is_busy`).
    pub mapped: Signal,
    loaded: Mutex<Loaded>,
    /// Notified when a thread finishes loading an image (see `Loaded::loading`).
    load_done: Signal,
    /// The registry generation whose images are all loaded here.
    loaded_generation: AtomicU64,
    /// Kernel handles by host region-id address.
    kernels: RwLock<AddrMap<KernelId>>,
    pub mm: MemoryManager,
    /// Why the device was lost (a crashed worker, a closed connection), once it was.
    lost: std::sync::OnceLock<String>,
}

impl DeviceCtx {
    pub fn new(id: i32, plugin: usize, dev: Box<dyn Device>, mm_threshold: usize) -> Self {
        Self {
            id,
            plugin,
            dev,
            table: Mutex::new(MappingTable::new()),
            mapped: Signal::new(),
            loaded: Mutex::new(Loaded::default()),
            load_done: Signal::new(),
            loaded_generation: AtomicU64::new(u64::MAX),
            kernels: RwLock::new(AddrMap::default()),
            mm: MemoryManager::new(mm_threshold),
            lost: std::sync::OnceLock::new(),
        }
    }

    /// Why the device was lost, if it was: it is then not used again.
    pub fn lost(&self) -> Option<&str> {
        self.lost.get().map(String::as_str)
    }

    /// Records a backend failure: a lost device is reported once, with what it was doing,
    /// and marked so that no later construct or API call uses it.
    pub fn note_failure(&self, err: &PluginError, during: &str) {
        if err.is_lost() && self.lost.set(err.reason.clone()).is_ok() {
            info::error(format_args!(
                "device {} was lost while {during}: {}; it will not be used again",
                self.id, err.reason
            ));
        }
    }

    /// Marks the device as not to be used (as if lost), without a message; true the first
    /// time.
    pub fn mark_unusable(&self, why: &str) -> bool {
        self.lost.set(why.to_string()).is_ok()
    }

    pub fn lock_table(&self) -> MutexGuard<'_, MappingTable> {
        self.table.lock()
    }

    /// The kernel for a host region id, if an image on this device provides it.
    #[inline]
    pub fn kernel(&self, host_ptr: usize) -> Option<KernelId> {
        self.kernels.read().get(&host_ptr).copied()
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
        let mut loaded = self.loaded.lock();
        let image = loaded.images.remove(&desc.serial)?;
        drop(loaded);
        {
            let mut kernels = self.kernels.write();
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
        Some(image)
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
    pub fn ensure_loaded(&self, dev: &DeviceCtx) -> Result<(), String> {
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

    fn load_one(&self, dev: &DeviceCtx, job: &LoadJob) -> Result<ImageId, String> {
        let image = &job.image;
        let start = self.start_timer();
        let image_id = dev.dev.load_image(image.bytes()).map_err(|e| format!("Failed to load image: {e}"))?;
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
            self,
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
    ) -> Result<(), String> {
        let usm = self.requires_usm();
        let mut kernels = Vec::new();
        let mut globals = Vec::new();
        for e in entries {
            if e.is_requires() || e.addr == 0 {
                continue;
            }
            let Some(name) = info::map_name(e.name as usize) else { continue };
            let Ok(cname) = CString::new(name) else { continue };
            if e.size == 0 {
                match dev.dev.kernel(image, &cname) {
                    Ok(k) => kernels.push((e.addr as usize, k)),
                    Err(err) => info::error(format_args!("Failed to load kernel {name}: {err}")),
                }
                continue;
            }
            let tgt = match dev.dev.global(image, &cname) {
                Ok(g) => g.addr,
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
                // SAFETY: `fnaddr` is a local, 8 writable bytes.
                unsafe { self.retrieve(dev, &mut fnaddr as *mut usize as usize, tgt, 8, 0) }
                    .map_err(|_| format!("cannot read indirect function {name}"))?;
                fnaddr
            } else {
                tgt
            };
            if usm && !e.is_indirect() {
                // SAFETY: a declare-target entry's address and size describe the program's
                // global, alive while its binary is registered.
                unsafe { dev.dev.submit(tgt, host, size) }.map_err(|err| err.to_string())?;
            }
            globals.push((host, size, tgt, e.name as usize));
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
