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

/// A transparent huge page: allocations of at least this size ask for them.
const HUGE_PAGE: usize = 2 << 20;

/// Asks for transparent huge pages over the whole huge pages inside `[addr, addr+size)` (a
/// block `malloc` just returned): a large mapping's memory then faults in 2 MiB at a time and
/// copies miss the TLB less. Where the system refuses (`enabled` is `never`), nothing changes.
fn advise_huge_pages(addr: usize, size: usize) {
    let start = addr.next_multiple_of(HUGE_PAGE);
    let end = (addr + size) & !(HUGE_PAGE - 1);
    if end > start {
        // SAFETY: MADV_HUGEPAGE changes no contents and no protections; the range is whole
        // pages inside the live block `malloc` returned, and a refusal is harmless.
        unsafe { libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_HUGEPAGE) };
    }
}

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

/// One host device: the images it loaded (dlopen handle and the memfd it was loaded from).
/// Images stay loaded until their binary is unregistered (a `dlclose`d library); the
/// program's own stay until exit, like LLVM's, so their static destructors run through the
/// loader.
pub struct HostDevice {
    index: usize,
    images: Mutex<Vec<Option<Loaded>>>,
    /// Every live pointer `alloc` returned: `free` of anything else is an error, not a
    /// corrupted heap.
    allocations: Mutex<HashSet<usize>>,
}

/// A loaded image: its dlopen handle and the memfd whose path names it.
#[derive(Clone, Copy)]
struct Loaded {
    handle: usize,
    fd: i32,
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

/// `/proc/self/fd/<fd>`, moving `fd` to another number while that path names an object the
/// loader still holds (an unloaded image whose memfd had the same number).
fn unique_path(fd: &mut i32) -> Result<CString> {
    let mut avoided = Vec::new();
    let path = loop {
        let path = CString::new(format!("/proc/self/fd/{fd}")).expect("no NUL in path");
        // SAFETY: RTLD_NOLOAD only looks the path up among loaded objects; a handle it
        // returns holds one more reference, which the dlclose gives back.
        let held = unsafe { libc::dlopen(path.as_ptr(), libc::RTLD_LAZY | libc::RTLD_NOLOAD) };
        if held.is_null() {
            break Ok(path);
        }
        // SAFETY: `held` is the handle RTLD_NOLOAD just returned.
        unsafe { libc::dlclose(held) };
        if avoided.len() >= 64 {
            break Err(PluginError::failed("no free path for the device image under /proc/self/fd"));
        }
        // SAFETY: duplicates our open memfd onto the lowest free number above it.
        let moved = unsafe { libc::fcntl(*fd, libc::F_DUPFD_CLOEXEC, *fd + 1) };
        if moved < 0 {
            break Err(PluginError::failed(format!("cannot move the image's fd: {}", std::io::Error::last_os_error())));
        }
        avoided.push(std::mem::replace(fd, moved));
    };
    for old in avoided {
        // SAFETY: `old` is a duplicate of the memfd that we opened and nothing else uses.
        unsafe { libc::close(old) };
    }
    path
}

/// Writes `image` to a new file in the temporary directory, dlopens it and removes the file
/// (the loader keeps what it mapped). Each file has a name of its own, so the loader never
/// takes it for an object it already holds.
fn load_from_temp_file(image: &[u8], index: usize) -> Result<usize> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let path = std::env::temp_dir().join(format!("omp-device-{}-{index}-{n}.so", std::process::id()));
    let failed = |what: &str, e: std::io::Error| {
        PluginError::failed(format!("{what} {} (no /proc: images are loaded from files): {e}", path.display()))
    };
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o700)
        .open(&path)
        .map_err(|e| failed("cannot create", e))?;
    let written = f.write_all(image).map_err(|e| failed("cannot write", e));
    drop(f);
    let handle = written.and_then(|()| {
        let c = CString::new(path.as_os_str().as_encoded_bytes())
            .map_err(|_| PluginError::failed("the temporary directory's path contains a NUL byte"))?;
        // SAFETY: dlopen takes a NUL-terminated path; failure is reported through NULL.
        let h = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_LAZY | libc::RTLD_GLOBAL) };
        if h.is_null() {
            return Err(PluginError::failed(format!("failed to load the device image: {}", dl_error())));
        }
        Ok(h as usize)
    });
    let _ = std::fs::remove_file(&path);
    handle
}

/// Writes `image` to an anonymous in-memory file and dlopens it through /proc/self/fd.
fn load_from_memory(image: &[u8], index: usize) -> Result<Loaded> {
    let name = CString::new(format!("omp-device-{index}")).expect("no NUL in name");
    // SAFETY: memfd_create takes a NUL-terminated name and flags; it returns a new fd or -1.
    let mut fd = unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC) };
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
        // after close: the fd stays open as long as the image is loaded, and a number whose
        // path still names an unloaded image's object is not used.
        if !std::path::Path::new("/proc/self/fd").is_dir() {
            // No /proc (a chroot, a container without it): through a temporary file.
            return load_from_temp_file(image, index).map(|handle| Loaded { handle, fd });
        }
        let path = unique_path(&mut fd)?;
        // SAFETY: dlopen takes a NUL-terminated path; failure is reported through NULL.
        // RTLD_GLOBAL as LLVM does: a program's image may use symbols of a library's image.
        let handle = unsafe { libc::dlopen(path.as_ptr(), libc::RTLD_LAZY | libc::RTLD_GLOBAL) };
        if handle.is_null() {
            return Err(PluginError::failed(format!("failed to load the device image: {}", dl_error())));
        }
        Ok(Loaded { handle: handle as usize, fd })
    })();
    if result.is_err() {
        // SAFETY: `fd` is ours and nothing was loaded from it.
        unsafe { libc::close(fd) };
    }
    result
}

impl HostDevice {
    fn symbol(&self, image: ImageId, name: &CStr) -> Option<usize> {
        let handle = self.images.lock().get(image.0).copied().flatten()?.handle;
        // SAFETY: `handle` came from a successful dlopen; it is closed only by
        // `unload_image`, which removes it from `images` first.
        let sym = unsafe { libc::dlsym(handle as *mut libc::c_void, name.as_ptr()) };
        (!sym.is_null()).then_some(sym as usize)
    }
}

impl Device for HostDevice {
    fn load_image(&self, image: &[u8]) -> Result<ImageId> {
        let header = elf::header(image)
            .map_err(|e| PluginError::failed(format!("a provided binary image is malformed: {e}")))?;
        header.loadable_on_x86_64().map_err(PluginError::failed)?;
        let loaded = load_from_memory(image, self.index)?;
        let mut images = self.images.lock();
        images.push(Some(loaded));
        Ok(ImageId(images.len() - 1))
    }

    fn unload_image(&self, image: ImageId) -> Result<()> {
        let Some(Loaded { handle, fd }) = self.images.lock().get_mut(image.0).and_then(Option::take) else {
            return Ok(());
        };
        // SAFETY: `handle` came from a successful dlopen and was just taken out of `images`,
        // so it is closed once and no later lookup uses it.
        if unsafe { libc::dlclose(handle as *mut libc::c_void) } != 0 {
            return Err(PluginError::failed(format!("failed to unload the device image: {}", dl_error())));
        }
        // The loader may keep the object a while longer (inside the dlclose of the library
        // that unregisters it) or for good (a unique symbol): `unique_path` then avoids its
        // name when the fd number comes back.
        // SAFETY: `fd` is this image's memfd, taken out of `images`, and closed only here.
        unsafe { libc::close(fd) };
        Ok(())
    }

    fn kernel(&self, image: ImageId, name: &CStr) -> Result<KernelId> {
        self.symbol(image, name)
            .map(KernelId::new)
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
        if size >= HUGE_PAGE {
            advise_huge_pages(p as usize, size);
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
        // memory, and `[tgt, tgt+size)` lies in an allocation of ours by the same promise.
        unsafe { host_memory::copy(tgt, host, size) };
        Ok(())
    }

    unsafe fn retrieve(&self, host: usize, tgt: usize, size: usize) -> Result<()> {
        // SAFETY: as for `submit`, with the host range writable by the caller's promise.
        unsafe { host_memory::copy(host, tgt, size) };
        Ok(())
    }

    unsafe fn copy_within(&self, dst: usize, src: usize, size: usize) -> Result<()> {
        // SAFETY: both ranges lie in allocations or globals of this device by the caller's
        // promise; on this device those are host memory, handed out by `alloc` or bound by
        // an image.
        unsafe { host_memory::copy(dst, src, size) };
        Ok(())
    }

    #[link_section = ".text.hot.omp_launch"]
    unsafe fn launch(&self, kernel: KernelId, args: &[usize], config: &LaunchConfig) -> Result<()> {
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
        // SAFETY: by the caller's promise, `kernel` was resolved here by name from an offload
        // entry of an image still loaded, and the arguments are what it expects. clang emits offload kernels as `void(ptr dyn_ptr, ptr...)`: every parameter
        // is pointer-sized, and there is one per argument the compiler's map arrays pass,
        // which is what `args` holds. The arity itself cannot be read from the ELF; passing
        // more integer arguments than declared is harmless (System V), fewer would break
        // the compiler's own contract, as in LLVM's host plugin.
        unsafe { trampoline::call(kernel.raw(), all) };
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
