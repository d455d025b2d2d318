//! One offload device as the runtime sees it: the backend device, its mapping table, the
//! images loaded on it and the kernels they provide.
//!
//! This is the device layer, the only code that calls a backend (as LLVM's
//! `GenericDeviceTy::dataSubmit` wraps each plugin's `dataSubmitImpl`): the backend, the
//! table and the memory manager are private, and each operation (`ops.rs`: allocation,
//! copies, launches; `load.rs`: images and symbols) does its event, its timer and the
//! lost-device bookkeeping once. Callers get a [`DeviceError`] and say what failed.

mod load;
mod ops;

pub use load::{LoadError, Unbound};
pub(crate) use ops::Allocation;
pub use ops::{DeviceError, DeviceOp, LostWhile};

use crate::memory_manager::MemoryManager;
use crate::registry::RegisteredDesc;
use crate::table::{MapEntry, MappingTable, INF};
use crate::{info, Runtime};
use omp_format::SourceLocation;
use omp_plugin::{Device, ImageId, KernelId};
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
    /// The backend; only this layer calls it.
    backend: Box<dyn Device>,
    table: Mutex<MappingTable>,
    /// Notified when entries that were being mapped are ready (see `MappingTable::is_busy`).
    mapped: Signal,
    loaded: Mutex<Loaded>,
    /// Notified when a thread finishes loading an image (see `Loaded::loading`).
    load_done: Signal,
    /// The registry generation whose images are all loaded here.
    loaded_generation: AtomicU64,
    /// Kernel handles by host region-id address.
    kernels: RwLock<AddrMap<KernelId>>,
    mm: MemoryManager,
    /// Why the device was lost (a crashed worker, a closed connection), once it was.
    lost: std::sync::OnceLock<String>,
}

impl DeviceCtx {
    pub fn new(id: i32, plugin: usize, backend: Box<dyn Device>, mm: MemoryManager) -> Self {
        Self {
            id,
            plugin,
            backend,
            table: Mutex::new(MappingTable::new()),
            mapped: Signal::new(),
            loaded: Mutex::new(Loaded::default()),
            load_done: Signal::new(),
            loaded_generation: AtomicU64::new(u64::MAX),
            kernels: RwLock::new(AddrMap::default()),
            mm,
            lost: std::sync::OnceLock::new(),
        }
    }

    /// Why the device was lost, if it was: it is then not used again.
    pub fn lost(&self) -> Option<&str> {
        self.lost.get().map(String::as_str)
    }

    /// Marks the device as not to be used (as if lost), without a message; true the first
    /// time.
    pub fn mark_unusable(&self, why: &str) -> bool {
        self.lost.set(why.to_string()).is_ok()
    }

    pub fn lock_table(&self) -> MutexGuard<'_, MappingTable> {
        self.table.lock()
    }

    /// Waits, with the table locked, until a thread that was mapping entries says they are
    /// ready ([`DeviceCtx::notify_mapped`]); returns the table locked again.
    pub(crate) fn wait_mapped<'d>(&'d self, table: MutexGuard<'d, MappingTable>) -> MutexGuard<'d, MappingTable> {
        self.mapped.wait(table)
    }

    /// Wakes the threads waiting in [`DeviceCtx::wait_mapped`].
    pub(crate) fn notify_mapped(&self) {
        self.mapped.notify_all();
    }

    /// Marks entries as no longer busy (mapped, updated, or back from a spreading trip) and
    /// wakes the threads that wait for busy entries, if any do.
    #[link_section = ".text.hot.omp_launch"]
    pub(crate) fn clear_busy(&self, keys: &[usize]) {
        let mut table = self.lock_table();
        for &key in keys {
            table.clear_busy(key);
        }
        let waiters = table.waiters;
        drop(table);
        if waiters > 0 {
            self.notify_mapped();
        }
    }

    /// The kernel for a host region id, if an image on this device provides it.
    #[inline]
    pub fn kernel(&self, host_ptr: usize) -> Option<KernelId> {
        self.kernels.read().get(&host_ptr).copied()
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
