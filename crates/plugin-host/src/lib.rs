//! The host (x86_64 CPU) offload device. Images are ELF shared objects loaded straight from
//! memory (memfd + dlopen, no file left behind); every device loads its own copy, so each has
//! independent globals, as with LLVM's host plugin. Memory is the process heap and copies are
//! `memcpy`: device pointers are host pointers.

mod trampoline;

use omp_format::elf;
use omp_plugin::{
    host_memory, AllocKind, Device, GlobalSymbol, ImageId, KernelId, LaunchConfig, Plugin, PluginError, Result,
};
use omp_sync::Mutex;
use std::collections::HashSet;
use std::ffi::{CStr, CString};

/// LLVM's host plugin offers four devices; programs and tests count on that number.
pub const NUM_DEVICES: usize = 4;

/// The launch-environment pointer host kernels receive: they have no reduction buffer, and
/// LLVM passes this sentinel.
const DYN_PTR_SENTINEL: usize = usize::MAX;

/// The plugin: a factory for host devices.
#[derive(Default)]
pub struct HostPlugin;

impl Plugin for HostPlugin {
    fn name(&self) -> &str {
        "x86_64"
    }
    fn device_count(&self) -> usize {
        NUM_DEVICES
    }
    fn is_compatible(&self, image: &[u8], triple: Option<&str>) -> bool {
        if let Some(t) = triple {
            if !t.is_empty() && !t.starts_with("x86_64") {
                return false;
            }
        }
        elf::header(image).map(|h| h.loadable_on_x86_64().is_ok()).unwrap_or(false)
    }
    fn open_device(&self, index: usize) -> Result<Box<dyn Device>> {
        Ok(Box::new(HostDevice { index, images: Mutex::new(Vec::new()), allocations: Mutex::new(HashSet::new()) }))
    }
}

/// One host device: the images it loaded (dlopen handles, never closed, like LLVM's, so
/// kernels' static destructors run at exit through the loader).
pub struct HostDevice {
    index: usize,
    images: Mutex<Vec<usize>>,
    /// Every live pointer `alloc` returned: `free` of anything else is an error, not a
    /// corrupted heap.
    allocations: Mutex<HashSet<usize>>,
}

/// glibc's `RTLD_DL_SYMENT`: `dladdr1` returns the symbol's ELF entry.
const RTLD_DL_SYMENT: libc::c_int = 1;

fn dl_error() -> String {
    // SAFETY: dlerror has no preconditions.
    let msg = unsafe { libc::dlerror() };
    if msg.is_null() {
        return "unknown dlopen error".into();
    }
    // SAFETY: a non-NULL dlerror result is a NUL-terminated string that stays valid until
    // the next dl* call on this thread; it is copied before any other call.
    unsafe { CStr::from_ptr(msg) }.to_string_lossy().into_owned()
}

/// Writes `image` to an anonymous in-memory file and dlopens it through /proc/self/fd.
fn load_from_memory(image: &[u8], index: usize) -> Result<usize> {
    let name = CString::new(format!("omp-device-{index}")).expect("no NUL in name");
    // SAFETY: memfd_create takes a NUL-terminated name and flags; it returns a new fd or -1.
    let fd = unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC) };
    if fd < 0 {
        return Err(PluginError::failed(format!("memfd_create failed: {}", std::io::Error::last_os_error())));
    }
    let result = (|| {
        let mut written = 0;
        while written < image.len() {
            // SAFETY: the pointer and length describe the unwritten tail of `image`.
            let n = unsafe { libc::write(fd, image[written..].as_ptr().cast(), image.len() - written) };
            if n <= 0 {
                return Err(PluginError::failed(format!(
                    "writing the image to memory failed: {}",
                    std::io::Error::last_os_error()
                )));
            }
            written += n as usize;
        }
        // The loader recognises already-loaded objects by path, and fd numbers are reused
        // after close: the fd stays open (like the image, which is never unloaded) so that
        // every image's path stays unique.
        let path = CString::new(format!("/proc/self/fd/{fd}")).expect("no NUL in path");
        // SAFETY: dlopen takes a NUL-terminated path; failure is reported through NULL.
        // RTLD_GLOBAL as LLVM does: a program's image may use symbols of a library's image.
        let handle = unsafe { libc::dlopen(path.as_ptr(), libc::RTLD_LAZY | libc::RTLD_GLOBAL) };
        if handle.is_null() {
            return Err(PluginError::failed(format!("failed to load the device image: {}", dl_error())));
        }
        Ok(handle as usize)
    })();
    if result.is_err() {
        // SAFETY: `fd` is ours and nothing was loaded from it.
        unsafe { libc::close(fd) };
    }
    result
}

impl HostDevice {
    fn symbol(&self, image: ImageId, name: &CStr) -> Option<usize> {
        let handle = *self.images.lock().get(image.0)?;
        // SAFETY: `handle` came from a successful dlopen of this device and is never closed;
        // `name` is NUL-terminated.
        let sym = unsafe { libc::dlsym(handle as *mut libc::c_void, name.as_ptr()) };
        (!sym.is_null()).then_some(sym as usize)
    }
}

impl Device for HostDevice {
    fn load_image(&self, image: &[u8]) -> Result<ImageId> {
        let header = elf::header(image)
            .map_err(|e| PluginError::failed(format!("a provided binary image is malformed: {e}")))?;
        header.loadable_on_x86_64().map_err(PluginError::failed)?;
        let handle = load_from_memory(image, self.index)?;
        let mut images = self.images.lock();
        images.push(handle);
        Ok(ImageId(images.len() - 1))
    }

    fn kernel(&self, image: ImageId, name: &CStr) -> Result<KernelId> {
        self.symbol(image, name)
            .map(KernelId)
            .ok_or_else(|| PluginError::failed(format!("failed to load kernel '{}'", name.to_string_lossy())))
    }

    fn global(&self, image: ImageId, name: &CStr) -> Result<GlobalSymbol> {
        let addr = self
            .symbol(image, name)
            .ok_or_else(|| PluginError::failed(format!("Failed to load global '{}'", name.to_string_lossy())))?;
        Ok(GlobalSymbol { addr, size: symbol_size(addr) })
    }

    fn alloc(&self, size: usize, _kind: AllocKind) -> Result<usize> {
        // SAFETY: malloc with any size; NULL signals failure.
        let p = unsafe { libc::malloc(size) };
        if p.is_null() {
            return Err(PluginError::out_of_memory(format!("out of memory allocating {size} bytes")));
        }
        self.allocations.lock().insert(p as usize);
        Ok(p as usize)
    }

    fn free(&self, ptr: usize, _kind: AllocKind) -> Result<()> {
        if !self.allocations.lock().remove(&ptr) {
            return Err(PluginError::failed(format!(
                "0x{ptr:016x} is not memory allocated on device {} (freed twice, or never allocated)",
                self.index
            )));
        }
        // SAFETY: `ptr` was returned by malloc in `alloc` and was live until the line above
        // removed it, so it is freed exactly once.
        unsafe { libc::free(ptr as *mut libc::c_void) };
        Ok(())
    }

    unsafe fn submit(&self, tgt: usize, host: usize, size: usize) -> Result<()> {
        // SAFETY: the host range is readable by the caller's promise; device memory is host
        // memory, and `tgt` is in an allocation of ours by the runtime's bookkeeping.
        unsafe { host_memory::copy(tgt, host, size) };
        Ok(())
    }

    unsafe fn retrieve(&self, host: usize, tgt: usize, size: usize) -> Result<()> {
        // SAFETY: as for `submit`, with the host range writable by the caller's promise.
        unsafe { host_memory::copy(host, tgt, size) };
        Ok(())
    }

    fn copy_within(&self, dst: usize, src: usize, size: usize) -> Result<()> {
        // SAFETY: both ranges are device memory, which on this device is host memory handed
        // out by `alloc` or bound by an image; the runtime checked them against its table.
        unsafe { host_memory::copy(dst, src, size) };
        Ok(())
    }

    fn launch(&self, kernel: KernelId, args: &[usize], config: &LaunchConfig) -> Result<()> {
        let total = args.len() + usize::from(config.with_dyn_ptr);
        let mut buf = [0usize; 16];
        let mut heap;
        let all: &[usize] = if config.with_dyn_ptr {
            if total <= buf.len() {
                buf[0] = DYN_PTR_SENTINEL;
                buf[1..total].copy_from_slice(args);
                &buf[..total]
            } else {
                heap = Vec::with_capacity(total);
                heap.push(DYN_PTR_SENTINEL);
                heap.extend_from_slice(args);
                &heap
            }
        } else {
            args
        };
        // SAFETY: `kernel.0` was resolved by name from an offload entry of an image loaded
        // here. clang emits offload kernels as `void(ptr dyn_ptr, ptr...)`: every parameter
        // is pointer-sized, and there is one per argument the compiler's map arrays pass,
        // which is what `args` holds. The arity itself cannot be read from the ELF; passing
        // more integer arguments than declared is harmless (System V), fewer would break
        // the compiler's own contract, as in LLVM's host plugin.
        unsafe { trampoline::call(kernel.0, all) };
        Ok(())
    }

    fn info(&self) -> Vec<(String, String)> {
        vec![("Device Type".into(), "Generic-elf-64bit".into()), ("UID".into(), format!("x86_64-{}", self.index))]
    }

    fn is_accessible(&self, _ptr: usize, _size: usize) -> bool {
        true
    }
}

/// The size of the ELF symbol at `addr`, from the loader's symbol table; 0 when unknown.
fn symbol_size(addr: usize) -> usize {
    // SAFETY: an all-zero Dl_info is a valid value of this plain C struct.
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    let mut sym: *mut libc::c_void = std::ptr::null_mut();
    // SAFETY: dladdr1 reads no memory at `addr` (it only compares it with loaded ranges) and
    // writes `info` and `sym`, both valid for writing.
    let found = unsafe { libc::dladdr1(addr as *const libc::c_void, &mut info, &mut sym, RTLD_DL_SYMENT) };
    if found == 0 || sym.is_null() {
        return 0;
    }
    // SAFETY: with RTLD_DL_SYMENT, a non-NULL `sym` points to the symbol's `Elf64_Sym` in the
    // loaded object's dynamic symbol table, which lives as long as the object.
    let sym = unsafe { &*(sym as *const libc::Elf64_Sym) };
    if sym.st_value as usize + info.dli_fbase as usize == addr {
        sym.st_size as usize
    } else {
        0
    }
}
