//! One MPI device: device `index` of the worker of device rank `rank`, reached through the
//! program's MPI link. Its addresses are the device rank's worker's: a kernel there never
//! reaches the program's memory.

use crate::link::{Link, Rank};
use omp_plugin::{AllocKind, Device, GlobalSymbol, ImageId, KernelId, LaunchConfig, PluginError, Result};
use omp_worker::{CallError, Request, Response};
use std::ffi::CStr;
use std::sync::Arc;

pub struct MpiDevice {
    pub(crate) link: Arc<Link>,
    pub(crate) rank: Rank,
    pub(crate) index: u32,
}

impl MpiDevice {
    /// A call's failure as the plugin contract's error, naming the rank and its host.
    fn error(&self, e: CallError) -> PluginError {
        match e {
            CallError::Failed(m) => PluginError::failed(m),
            // `how` is the rank's own account ("its device worker (pid N) ended: ...").
            CallError::Died(how) => PluginError::lost(format!(
                "MPI device rank {} on {} (its device {}): {how}",
                self.rank.rank, self.rank.host, self.index
            )),
        }
    }

    fn call(&self, req: &Request) -> Result<Response> {
        self.link.call(self.rank.rank, req).map_err(|e| self.error(e))
    }
}

fn unexpected(r: Response) -> PluginError {
    PluginError::failed(format!("unexpected reply from an MPI device rank: {r:?}"))
}

fn name_of(name: &CStr) -> Result<&str> {
    name.to_str().map_err(|_| PluginError::failed(format!("symbol name {name:?} is not UTF-8")))
}

impl Device for MpiDevice {
    fn load_image(&self, image: &[u8]) -> Result<ImageId> {
        if image.len() > crate::proto::MAX_REQUEST - 64 {
            return Err(PluginError::failed(format!(
                "an image of {} bytes is too large for an MPI device",
                image.len()
            )));
        }
        match self.call(&Request::Load { device: self.index, image })? {
            Response::Image(i) => Ok(ImageId(i as usize)),
            r => Err(unexpected(r)),
        }
    }

    fn kernel(&self, image: ImageId, name: &CStr) -> Result<KernelId> {
        match self.call(&Request::Kernel { device: self.index, image: image.0 as u64, name: name_of(name)? })? {
            Response::Kernel(k) => Ok(KernelId::new(k as usize)),
            r => Err(unexpected(r)),
        }
    }

    fn global(&self, image: ImageId, name: &CStr) -> Result<GlobalSymbol> {
        match self.call(&Request::Global { device: self.index, image: image.0 as u64, name: name_of(name)? })? {
            Response::Global { addr, size } => Ok(GlobalSymbol { addr: addr as usize, size: size as usize }),
            r => Err(unexpected(r)),
        }
    }

    fn alloc(&self, size: usize, _kind: AllocKind) -> Result<usize> {
        // Every kind is the rank's memory: no kernel there reaches the program's.
        match self.call(&Request::Alloc { device: self.index, size: size as u64 }) {
            Ok(Response::Addr(a)) => Ok(a as usize),
            Ok(r) => Err(unexpected(r)),
            Err(e) if e.kind == omp_plugin::ErrorKind::Failed && e.reason.contains("out of memory") => {
                Err(PluginError::out_of_memory(e.reason))
            }
            Err(e) => Err(e),
        }
    }

    fn free(&self, ptr: usize, _kind: AllocKind) -> Result<()> {
        self.call(&Request::Free { device: self.index, addr: ptr as u64 }).map(|_| ())
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
        self.call(&Request::Copy { device: self.index, dst: dst as u64, src: src as u64, len: size as u64 }).map(|_| ())
    }

    unsafe fn launch(&self, kernel: KernelId, args: &[usize], config: &LaunchConfig) -> Result<()> {
        let args: Vec<u64> = args.iter().map(|a| *a as u64).collect();
        // What the program printed so far goes out before what the kernel prints.
        // SAFETY: fflush(NULL) flushes every open output stream; it takes no pointer of ours.
        unsafe { libc::fflush(std::ptr::null_mut()) };
        let req = Request::Launch {
            device: self.index,
            kernel: kernel.raw() as u64,
            with_dyn_ptr: config.with_dyn_ptr,
            num_teams: config.num_teams[0],
            thread_limit: config.thread_limit[0],
            args: &args,
        };
        self.call(&req).map(|_| ())
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
