//! The CUDA driver, loaded at run time: `dlopen("libcuda.so.1")` and one `dlsym` per entry
//! point into a table of function pointers, checked at load (a missing symbol is the same as
//! a missing library). The handle stays open for the life of the process; nothing of the
//! library is touched before the plugin is asked for its devices.
//!
//! Also here: the driver's result codes as errors ([`Driver::check`]): the CUDA error's name
//! and text, and which codes leave the context unusable (a lost device).

use omp_plugin::PluginError;
use std::ffi::{c_char, c_int, c_uint, c_void, CStr};

pub type CuResult = c_int;
pub type CuDevice = c_int;
pub type CuDevicePtr = u64;
pub type CuContext = *mut c_void;
pub type CuModule = *mut c_void;
pub type CuFunction = *mut c_void;
pub type CuStream = *mut c_void;
pub type CuEvent = *mut c_void;
/// `cuEventElapsedTime(float *ms, CUevent start, CUevent end)`.
pub type ElapsedTime = unsafe extern "C" fn(*mut f32, CuEvent, CuEvent) -> CuResult;

pub const CUDA_SUCCESS: CuResult = 0;
pub const CUDA_ERROR_OUT_OF_MEMORY: CuResult = 2;
pub const CUDA_ERROR_NO_DEVICE: CuResult = 100;
pub const CUDA_ERROR_NOT_FOUND: CuResult = 500;

/// `CUdevice_attribute` values this plugin reads.
pub mod attr {
    pub const MAX_THREADS_PER_BLOCK: i32 = 1;
    pub const MAX_BLOCK_DIM_X: i32 = 2;
    pub const MAX_GRID_DIM_X: i32 = 5;
    pub const MAX_SHARED_MEMORY_PER_BLOCK: i32 = 8;
    pub const WARP_SIZE: i32 = 10;
    pub const CLOCK_RATE: i32 = 13;
    pub const MULTIPROCESSOR_COUNT: i32 = 16;
    pub const MAX_THREADS_PER_MULTIPROCESSOR: i32 = 39;
    pub const COMPUTE_CAPABILITY_MAJOR: i32 = 75;
    pub const COMPUTE_CAPABILITY_MINOR: i32 = 76;
    pub const MAX_SHARED_MEMORY_PER_BLOCK_OPTIN: i32 = 97;
}

/// `CU_STREAM_NON_BLOCKING`: no implicit synchronisation with the legacy default stream.
pub const CU_STREAM_NON_BLOCKING: c_uint = 1;
/// `CU_EVENT_DISABLE_TIMING`: an event only for ordering (cheaper to record).
pub const CU_EVENT_DISABLE_TIMING: c_uint = 2;
/// `CU_MEM_ATTACH_GLOBAL`: managed memory any stream may use.
pub const CU_MEM_ATTACH_GLOBAL: c_uint = 1;
/// `CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES`.
pub const CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES: c_int = 8;
/// `CU_LIMIT_STACK_SIZE` and `CU_LIMIT_MALLOC_HEAP_SIZE`.
pub const CU_LIMIT_STACK_SIZE: c_int = 0;
pub const CU_LIMIT_MALLOC_HEAP_SIZE: c_int = 2;

/// Result codes after which the context can do nothing more (the driver's "sticky" errors):
/// the device is lost for this process.
const STICKY: [CuResult; 10] = [
    214, // CUDA_ERROR_ECC_UNCORRECTABLE
    700, // CUDA_ERROR_ILLEGAL_ADDRESS
    702, // CUDA_ERROR_LAUNCH_TIMEOUT
    710, // CUDA_ERROR_ASSERT
    714, // CUDA_ERROR_HARDWARE_STACK_ERROR
    715, // CUDA_ERROR_ILLEGAL_INSTRUCTION
    716, // CUDA_ERROR_MISALIGNED_ADDRESS
    717, // CUDA_ERROR_INVALID_ADDRESS_SPACE
    718, // CUDA_ERROR_INVALID_PC
    719, // CUDA_ERROR_LAUNCH_FAILED
];

/// Whether `code` leaves the context unusable.
pub fn is_sticky(code: CuResult) -> bool {
    STICKY.contains(&code)
}

/// Declares the table of entry points: field name, symbol looked up (the `_v2` name where
/// the driver has one), and C signature.
macro_rules! entry_points {
    ($($field:ident = $sym:literal : fn($($arg:ty),*);)*) => {
        /// The driver's entry points this plugin uses, resolved once.
        pub struct Driver {
            $(pub $field: unsafe extern "C" fn($($arg),*) -> CuResult,)*
            /// `cuEventElapsedTime` (`_v2` where the driver has it): optional, the profile
            /// falls back to host timing without it.
            pub event_elapsed_time: Option<ElapsedTime>,
        }

        /// Every symbol the plugin resolves, in table order.
        pub const SYMBOLS: &[&str] = &[$($sym),*];

        impl Driver {
            /// Resolves every entry point in `handle`; the first missing one is the error.
            ///
            /// # Safety
            /// `handle` is a live `dlopen` handle of a CUDA driver library, never closed.
            unsafe fn resolve(handle: *mut c_void) -> Result<Driver, String> {
                Ok(Driver {
                    $($field: {
                        let name = concat!($sym, "\0");
                        // SAFETY: `handle` is live (the caller's promise) and `name` is
                        // NUL-terminated.
                        let p = unsafe { libc::dlsym(handle, name.as_ptr().cast()) };
                        if p.is_null() {
                            return Err(format!("libcuda.so.1 has no {}", $sym));
                        }
                        // SAFETY: the CUDA driver exports this symbol with exactly this C
                        // signature (cuda.h); a function pointer and a data pointer have the
                        // same size on the platforms we build for.
                        unsafe { std::mem::transmute::<*mut c_void, unsafe extern "C" fn($($arg),*) -> CuResult>(p) }
                    },)*
                    event_elapsed_time: ["cuEventElapsedTime_v2\0", "cuEventElapsedTime\0"].iter().find_map(|name| {
                        // SAFETY: as above.
                        let p = unsafe { libc::dlsym(handle, name.as_ptr().cast()) };
                        // SAFETY: both names have this signature in cuda.h (milliseconds, start, end).
                        (!p.is_null()).then(|| unsafe { std::mem::transmute::<*mut c_void, ElapsedTime>(p) })
                    }),
                })
            }
        }
    };
}

entry_points! {
    init = "cuInit": fn(c_uint);
    driver_get_version = "cuDriverGetVersion": fn(*mut c_int);
    device_get_count = "cuDeviceGetCount": fn(*mut c_int);
    device_get = "cuDeviceGet": fn(*mut CuDevice, c_int);
    device_get_name = "cuDeviceGetName": fn(*mut c_char, c_int, CuDevice);
    device_get_attribute = "cuDeviceGetAttribute": fn(*mut c_int, c_int, CuDevice);
    device_total_mem = "cuDeviceTotalMem_v2": fn(*mut usize, CuDevice);
    primary_ctx_retain = "cuDevicePrimaryCtxRetain": fn(*mut CuContext, CuDevice);
    primary_ctx_release = "cuDevicePrimaryCtxRelease_v2": fn(CuDevice);
    ctx_set_current = "cuCtxSetCurrent": fn(CuContext);
    ctx_set_limit = "cuCtxSetLimit": fn(c_int, usize);
    get_error_name = "cuGetErrorName": fn(CuResult, *mut *const c_char);
    get_error_string = "cuGetErrorString": fn(CuResult, *mut *const c_char);
    mem_alloc = "cuMemAlloc_v2": fn(*mut CuDevicePtr, usize);
    mem_alloc_host = "cuMemAllocHost_v2": fn(*mut *mut c_void, usize);
    mem_alloc_managed = "cuMemAllocManaged": fn(*mut CuDevicePtr, usize, c_uint);
    mem_free = "cuMemFree_v2": fn(CuDevicePtr);
    mem_free_host = "cuMemFreeHost": fn(*mut c_void);
    memcpy_htod_async = "cuMemcpyHtoDAsync_v2": fn(CuDevicePtr, *const c_void, usize, CuStream);
    memcpy_dtoh_async = "cuMemcpyDtoHAsync_v2": fn(*mut c_void, CuDevicePtr, usize, CuStream);
    memcpy_dtod_async = "cuMemcpyDtoDAsync_v2": fn(CuDevicePtr, CuDevicePtr, usize, CuStream);
    module_load_data_ex = "cuModuleLoadDataEx": fn(*mut CuModule, *const c_void, c_uint, *mut c_int, *mut *mut c_void);
    module_unload = "cuModuleUnload": fn(CuModule);
    module_get_function = "cuModuleGetFunction": fn(*mut CuFunction, CuModule, *const c_char);
    module_get_global = "cuModuleGetGlobal_v2": fn(*mut CuDevicePtr, *mut usize, CuModule, *const c_char);
    func_set_attribute = "cuFuncSetAttribute": fn(CuFunction, c_int, c_int);
    launch_kernel = "cuLaunchKernel": fn(
        CuFunction, c_uint, c_uint, c_uint, c_uint, c_uint, c_uint, c_uint, CuStream, *mut *mut c_void, *mut *mut c_void
    );
    stream_create = "cuStreamCreate": fn(*mut CuStream, c_uint);
    stream_destroy = "cuStreamDestroy_v2": fn(CuStream);
    stream_synchronize = "cuStreamSynchronize": fn(CuStream);
    stream_wait_event = "cuStreamWaitEvent": fn(CuStream, CuEvent, c_uint);
    event_create = "cuEventCreate": fn(*mut CuEvent, c_uint);
    event_record = "cuEventRecord": fn(CuEvent, CuStream);
    event_synchronize = "cuEventSynchronize": fn(CuEvent);
    event_destroy = "cuEventDestroy_v2": fn(CuEvent);
    memset_d8_async = "cuMemsetD8Async": fn(CuDevicePtr, u8, usize, CuStream);
    memcpy_peer_async = "cuMemcpyPeerAsync": fn(CuDevicePtr, CuContext, CuDevicePtr, CuContext, usize, CuStream);
}

/// The library's versioned name: the development package's `libcuda.so` is not needed.
pub const LIBRARY: &str = "libcuda.so.1";

impl Driver {
    /// Loads the driver and initialises it (`cuInit(0)`). The error says why there are no
    /// CUDA devices: no library, a library without an entry point, or a failed `cuInit`.
    pub fn load() -> Result<Driver, String> {
        let name = std::ffi::CString::new(LIBRARY).expect("no NUL in the library name");
        // SAFETY: dlopen takes a NUL-terminated name; failure is reported through NULL.
        // RTLD_LOCAL: the driver's symbols stay out of the program's namespace.
        let handle = unsafe { libc::dlopen(name.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
        if handle.is_null() {
            return Err(format!("cannot load {LIBRARY}: {}", dl_error()));
        }
        // SAFETY: `handle` was just returned by dlopen and is never closed.
        let driver = unsafe { Driver::resolve(handle) }?;
        // SAFETY: cuInit takes flags (0 is the only valid value) and has no other precondition.
        let r = unsafe { (driver.init)(0) };
        if r == CUDA_ERROR_NO_DEVICE {
            return Err("the CUDA driver found no device (CUDA_ERROR_NO_DEVICE)".into());
        }
        if r != CUDA_SUCCESS {
            return Err(format!("cuInit failed: {}", driver.describe(r)));
        }
        Ok(driver)
    }

    /// The CUDA error's text and name: `an illegal memory access was encountered
    /// (CUDA_ERROR_ILLEGAL_ADDRESS)`.
    pub fn describe(&self, code: CuResult) -> String {
        let text = self.lookup(self.get_error_string, code).unwrap_or_else(|| "unknown error".into());
        let name = self.lookup(self.get_error_name, code).unwrap_or_else(|| format!("CUDA error {code}"));
        format!("{text} ({name})")
    }

    fn lookup(
        &self,
        f: unsafe extern "C" fn(CuResult, *mut *const c_char) -> CuResult,
        code: CuResult,
    ) -> Option<String> {
        let mut s: *const c_char = std::ptr::null();
        // SAFETY: cuGetErrorName/cuGetErrorString write a pointer to a static string (or
        // return an error for an unknown code) into the one pointer given.
        if unsafe { f(code, &mut s) } != CUDA_SUCCESS || s.is_null() {
            return None;
        }
        // SAFETY: a successful call points `s` at a NUL-terminated static string.
        Some(unsafe { CStr::from_ptr(s) }.to_string_lossy().into_owned())
    }

    /// `Ok` for success, else the error: `CUDA error: <text> (<NAME>) in <call>`. Out of
    /// memory is its own kind; a sticky error loses the device.
    pub fn check(&self, code: CuResult, call: &str) -> omp_plugin::Result<()> {
        if code == CUDA_SUCCESS {
            return Ok(());
        }
        let reason = format!("CUDA error: {} in {call}", self.describe(code));
        Err(if code == CUDA_ERROR_OUT_OF_MEMORY {
            PluginError::out_of_memory(reason)
        } else if is_sticky(code) {
            PluginError::lost(reason)
        } else {
            PluginError::failed(reason)
        })
    }
}

fn dl_error() -> String {
    // SAFETY: dlerror has no preconditions.
    let msg = unsafe { libc::dlerror() };
    if msg.is_null() {
        return "unknown dlopen error".into();
    }
    // SAFETY: a non-NULL dlerror result is a NUL-terminated string valid until the next dl*
    // call on this thread; it is copied at once.
    unsafe { CStr::from_ptr(msg) }.to_string_lossy().into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn illegal_address_and_launch_failure_lose_the_device_but_out_of_memory_does_not() {
        assert!(is_sticky(700) && is_sticky(719));
        assert!(!is_sticky(CUDA_ERROR_OUT_OF_MEMORY) && !is_sticky(200) && !is_sticky(CUDA_SUCCESS));
    }

    #[test]
    fn the_table_prefers_the_v2_entry_points() {
        for v2 in ["cuMemAlloc_v2", "cuMemFree_v2", "cuModuleGetGlobal_v2", "cuDevicePrimaryCtxRelease_v2"] {
            assert!(SYMBOLS.contains(&v2), "{v2}");
        }
        assert!(!SYMBOLS.contains(&"cuMemAlloc"));
    }
}
