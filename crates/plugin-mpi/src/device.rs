//! One MPI device: device `index` of the worker of device rank `rank`, reached through the
//! program's MPI link. Its addresses are the device rank's worker's: a kernel there never
//! reaches the program's memory.

use crate::link::{CopyFailure, Link, Place, Rank};
use omp_plugin::{AllocKind, Device, GlobalSymbol, ImageId, KernelId, LaunchConfig, Peer, PluginError, Result};
use omp_sync::Mutex;
use omp_worker::{with_launch_request, CallError, Request, RequestPeer, Response};
use std::ffi::CStr;
use std::sync::Arc;

pub struct MpiDevice {
    pub(crate) link: Arc<Link>,
    pub(crate) rank: Rank,
    pub(crate) index: u32,
}

/// The backend a [`Peer`] of an MPI device names (its handle: the rank and the device there).
const PEER_BACKEND: &str = "x86_64 (MPI)";

impl MpiDevice {
    /// A call's failure as the plugin contract's error, naming the rank and its host.
    fn error(&self, e: CallError) -> PluginError {
        match e {
            CallError::Failed(m) => PluginError::failed(m),
            // `how` is the rank's own account ("its device worker (pid N) ended: ...").
            CallError::Died(how) => PluginError::lost(lost_line(&self.rank, self.index, &how)),
        }
    }

    fn place(&self, addr: usize) -> Place {
        Place { rank: self.rank.rank, device: self.index, addr: addr as u64 }
    }
}

/// Which device of which rank ended, and how (the rank's own account).
fn lost_line(rank: &Rank, index: u32, how: &str) -> String {
    format!("MPI device rank {} on {} (its device {index}): {how}", rank.rank, rank.host)
}

impl RequestPeer for MpiDevice {
    fn device_index(&self) -> u32 {
        self.index
    }

    fn peer_name(&self) -> &str {
        "an MPI device rank"
    }

    fn request(&self, req: &Request) -> Result<Response> {
        self.link.call(self.rank.rank, req).map_err(|e| self.error(e))
    }
}

impl Device for MpiDevice {
    fn load_image(&self, image: &[u8]) -> Result<ImageId> {
        if image.len() > crate::proto::MAX_REQUEST - 64 {
            return Err(PluginError::failed(format!(
                "an image of {} bytes is too large for an MPI device",
                image.len()
            )));
        }
        self.load_request(image)
    }

    fn kernel(&self, image: ImageId, name: &CStr) -> Result<KernelId> {
        self.kernel_request(image, name)
    }

    fn global(&self, image: ImageId, name: &CStr) -> Result<GlobalSymbol> {
        self.global_request(image, name)
    }

    /// Host memory (`llvm_omp_target_alloc_host`) is the program's, which the program reads
    /// and writes and mappings copy; every other kind is the rank's memory: no kernel there
    /// reaches the program's.
    fn alloc(&self, size: usize, kind: AllocKind) -> Result<usize> {
        if kind == AllocKind::Host {
            return match self.link.host_blocks.alloc(size) {
                0 => Err(PluginError::out_of_memory(format!("{size} bytes of host memory"))),
                ptr => Ok(ptr),
            };
        }
        self.alloc_request(size)
    }

    fn free(&self, ptr: usize, _kind: AllocKind) -> Result<()> {
        if self.link.host_blocks.free(ptr) {
            return Ok(());
        }
        self.free_request(ptr)
    }

    unsafe fn submit(&self, tgt: usize, host: usize, size: usize) -> Result<()> {
        if size == 0 {
            return Ok(());
        }
        // SAFETY: the caller vouches that `[host, host+size)` is readable for this call.
        unsafe { self.link.write(self.rank.rank, self.index, tgt as u64, host, size) }.map_err(|e| self.error(e))
    }

    unsafe fn retrieve(&self, host: usize, tgt: usize, size: usize) -> Result<()> {
        if size == 0 {
            return Ok(());
        }
        // SAFETY: the caller vouches that `[host, host+size)` is writable and unused by
        // anything else during this call.
        unsafe { self.link.read(self.rank.rank, self.index, tgt as u64, host, size) }.map_err(|e| self.error(e))
    }

    unsafe fn copy_within(&self, dst: usize, src: usize, size: usize) -> Result<()> {
        self.copy_request(dst, src, size)
    }

    fn peer(&self) -> Option<Peer> {
        Some(Peer { backend: PEER_BACKEND, handle: (self.rank.rank as usize) << 32 | self.index as usize })
    }

    /// To another MPI device: between two ranks, the bytes go from this rank straight to
    /// the other; inside one rank, that rank copies. Never through the program's rank.
    unsafe fn copy_to_peer(&self, peer: Peer, dst: usize, src: usize, size: usize) -> Option<Result<()>> {
        if peer.backend != PEER_BACKEND {
            return None;
        }
        let (rank, index) = ((peer.handle >> 32) as i32, peer.handle as u32);
        let to_rank = self.link.ranks.iter().find(|r| r.rank == rank)?;
        if size == 0 {
            return Some(Ok(()));
        }
        if self.link.info {
            let how = if rank == self.rank.rank { "within the rank" } else { "direct" };
            eprintln!(
                "omptarget info: Copying data from device to device, MPI rank {} -> rank {rank}, {how}, from its device \
                 {} to its device {index}, SrcPtr=0x{src:016x}, DstPtr=0x{dst:016x}, Size={size}",
                self.rank.rank, self.index
            );
        }
        let to = Place { rank, device: index, addr: dst as u64 };
        Some(self.link.copy_between(self.place(src), to, size).map_err(|e| match e {
            CopyFailure::Source(e) => self.error(e),
            // The destination's rank is marked lost by the link: its next call says so.
            CopyFailure::Destination(CallError::Died(how)) => {
                PluginError::failed(format!("the copy's destination was lost: {}", lost_line(to_rank, index, &how)))
            }
            CopyFailure::Destination(CallError::Failed(m)) => PluginError::failed(m),
        }))
    }

    unsafe fn launch(&self, kernel: KernelId, args: &[usize], config: &LaunchConfig) -> Result<()> {
        with_launch_request(self.index, kernel, args, config, |req| self.request(req)).map(|_| ())
    }

    fn info(&self) -> Vec<(String, String)> {
        vec![
            ("Device Type".into(), "Generic-elf-64bit (MPI device rank)".into()),
            ("MPI rank".into(), format!("{} on {}", self.rank.rank, self.rank.host)),
            ("Device on the rank".into(), self.index.to_string()),
        ]
    }

    /// The rank's memory is never the program's.
    fn is_accessible(&self, _ptr: usize, _size: usize) -> bool {
        false
    }
}

/// Blocks of the program's memory given out as a device's host memory, as a GPU's pinned
/// memory is the host's: the program reads and writes them, mappings copy them.
#[derive(Default)]
pub struct HostBlocks(Mutex<std::collections::HashSet<usize>>);

impl HostBlocks {
    /// A block of `size` bytes; 0 when there is none.
    pub fn alloc(&self, size: usize) -> usize {
        let ptr = omp_plugin::host_memory::malloc(size);
        if ptr != 0 {
            self.0.lock().insert(ptr);
        }
        ptr
    }

    /// Frees `ptr` when [`HostBlocks::alloc`] gave it out and it was not freed since; false
    /// for any other address (the rank's memory).
    pub fn free(&self, ptr: usize) -> bool {
        if !self.0.lock().remove(&ptr) {
            return false;
        }
        // SAFETY: `alloc` returned `ptr` from `host_memory::malloc`, and removing it from the
        // set above makes this the only free of it.
        unsafe { omp_plugin::host_memory::free(ptr) };
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_blocks_are_the_programs_memory_and_freed_once() {
        let blocks = HostBlocks::default();
        let p = blocks.alloc(64);
        assert_ne!(p, 0);
        // SAFETY: `p` is a live block of 64 bytes of this process.
        unsafe { std::ptr::write_bytes(p as *mut u8, 7, 64) };
        assert!(!blocks.free(p + 8), "an address inside is not a block");
        assert!(!blocks.free(0x1000), "a rank's address is not one");
        assert!(blocks.free(p));
        assert!(!blocks.free(p), "a second free goes to the rank (which refuses it)");
    }
}
