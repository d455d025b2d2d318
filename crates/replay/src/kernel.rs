//! The recorded kernel, loaded from the record's image file and called in this process (so
//! that a debugger sees a real file with its debug information and can stop on the kernel's
//! source lines). Calls follow the host device's convention: `void(dyn_ptr, args…)`, every
//! parameter pointer-sized.

use crate::ReplayError;
use std::ffi::{CStr, CString};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// The host device's `dyn_ptr` (no launch environment on a CPU device).
const DYN_PTR: usize = usize::MAX;

/// Most parameters a replayed kernel may take (`dyn_ptr` included).
pub const MAX_PARAMS: usize = 32;

type Entry32 = unsafe extern "C" fn(
    usize,
    usize,
    usize,
    usize,
    usize,
    usize,
    usize,
    usize,
    usize,
    usize,
    usize,
    usize,
    usize,
    usize,
    usize,
    usize,
    usize,
    usize,
    usize,
    usize,
    usize,
    usize,
    usize,
    usize,
    usize,
    usize,
    usize,
    usize,
    usize,
    usize,
    usize,
    usize,
);

/// A kernel of an image loaded for the life of the process.
pub struct Kernel {
    /// The image's loader handle (kept open for the process's life).
    handle: usize,
    entry: Entry32,
    params: Vec<usize>,
}

fn dl_error() -> String {
    // SAFETY: dlerror returns NULL or a NUL-terminated message valid until the next dl call.
    let e = unsafe { libc::dlerror() };
    if e.is_null() {
        "unknown error".into()
    } else {
        // SAFETY: non-NULL: a NUL-terminated string from the loader.
        unsafe { CStr::from_ptr(e) }.to_string_lossy().into_owned()
    }
}

fn c_path(p: &Path) -> Result<CString, ReplayError> {
    CString::new(p.as_os_str().as_bytes()).map_err(|_| ReplayError::new(format!("{} holds a NUL byte", p.display())))
}

/// Loads `libraries` (the ones the recording program's images bound to: its libomp and
/// runtime), so that the image binds to the same ones; one that is gone is skipped (the
/// image's own dependencies are then looked for as usual).
pub fn preload(libraries: &[PathBuf]) {
    for lib in libraries.iter().filter(|l| l.is_file()) {
        let Ok(c) = c_path(lib) else { continue };
        // SAFETY: dlopen of a NUL-terminated path; the handle is kept for the process's life.
        unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_GLOBAL) };
    }
}

impl Kernel {
    /// Loads `image` and finds kernel `name`; `args` are its arguments after `dyn_ptr`.
    pub fn load(image: &Path, name: &str, with_dyn_ptr: bool, args: &[usize]) -> Result<Kernel, ReplayError> {
        let mut params = Vec::with_capacity(args.len() + 1);
        if with_dyn_ptr {
            params.push(DYN_PTR);
        }
        params.extend_from_slice(args);
        if params.len() > MAX_PARAMS {
            return Err(ReplayError::new(format!(
                "kernel {name} takes {} parameters; omp-replay calls kernels of up to {MAX_PARAMS}",
                params.len()
            )));
        }
        let path = c_path(&std::path::absolute(image).unwrap_or_else(|_| image.to_path_buf()))?;
        // SAFETY: dlopen of a NUL-terminated path to the recorded image (an ELF shared object
        // the recording program loaded the same way); the handle lives as long as the process.
        let handle = unsafe { libc::dlopen(path.as_ptr(), libc::RTLD_NOW) };
        if handle.is_null() {
            return Err(ReplayError::new(format!("cannot load the device image {}: {}", image.display(), dl_error())));
        }
        let cname = CString::new(name).map_err(|_| ReplayError::new("the kernel name holds a NUL byte"))?;
        // SAFETY: dlsym on a live handle with a NUL-terminated name; NULL when absent.
        let sym = unsafe { libc::dlsym(handle, cname.as_ptr()) };
        if sym.is_null() {
            return Err(ReplayError::new(format!("the device image {} has no kernel {name}", image.display())));
        }
        // SAFETY: an offload kernel of the host device is `void(ptr…)`: every parameter is
        // pointer-sized and passed in integer registers or on the stack (System V); calling it
        // with more integer arguments than it declares leaves the extra ones unread, as the
        // host device's own trampoline does.
        let entry = unsafe { std::mem::transmute::<*mut libc::c_void, Entry32>(sym) };
        Ok(Kernel { handle: handle as usize, entry, params })
    }

    /// The address and size (from the image's symbol table) of the image's own data symbol
    /// `name` (a `declare target` variable), if it defines one.
    pub fn variable(&self, name: &str) -> Option<(usize, usize)> {
        /// glibc's `dladdr1` request for the symbol's ELF entry.
        const RTLD_DL_SYMENT: libc::c_int = 1;
        let cname = CString::new(name).ok()?;
        // SAFETY: dlsym on the live handle with a NUL-terminated name; NULL when absent.
        let addr = unsafe { libc::dlsym(self.handle as *mut libc::c_void, cname.as_ptr()) };
        if addr.is_null() {
            return None;
        }
        // SAFETY: zeroed Dl_info is valid; dladdr1 fills it and points `sym` at the ELF symbol
        // entry of a loaded object (valid while the object stays loaded: for the process's life).
        unsafe {
            let mut info: libc::Dl_info = std::mem::zeroed();
            let mut sym: *mut libc::c_void = std::ptr::null_mut();
            if libc::dladdr1(addr, &mut info, &mut sym, RTLD_DL_SYMENT) == 0 || sym.is_null() {
                return None;
            }
            // Only a symbol this image defines (dlsym also searches its dependencies).
            let own = libc::dlsym(self.handle as *mut libc::c_void, cname.as_ptr());
            let size = (*sym.cast::<libc::Elf64_Sym>()).st_size as usize;
            (own == addr).then_some((addr as usize, size))
        }
    }

    /// Calls the kernel once.
    ///
    /// # Safety
    /// The recorded device memory must be mapped and restored: the kernel reads and writes it
    /// through its arguments and through the pointers stored in it.
    pub unsafe fn run(&self) {
        let mut p = [0usize; MAX_PARAMS];
        p[..self.params.len()].copy_from_slice(&self.params);
        // SAFETY: the kernel's contract (see `load`) and the caller's promise about memory.
        unsafe {
            (self.entry)(
                p[0], p[1], p[2], p[3], p[4], p[5], p[6], p[7], p[8], p[9], p[10], p[11], p[12], p[13], p[14], p[15],
                p[16], p[17], p[18], p[19], p[20], p[21], p[22], p[23], p[24], p[25], p[26], p[27], p[28], p[29],
                p[30], p[31],
            )
        };
    }
}
