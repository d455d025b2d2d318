//! What a freshly loaded image needs before its kernels run, and at unload, as LLVM's CUDA
//! plugin does it: the device runtime's environment (`__omp_rtl_device_environment`), its
//! indirect-call table, and the image's global constructors and destructors (the
//! `nvptx$device$init` / `nvptx$device$fini` kernels the NVPTX backend makes, launched on one
//! thread over the `__init_array_*` / `__fini_array_*` function pointers).

use super::CudaDevice;
use crate::driver::*;
use crate::image;
use crate::streams::Touches;
use omp_plugin::{AllocKind, Device, ImageId, PluginError, QueueId, Result};
use std::ffi::CString;

/// `DeviceEnvironmentTy`: { u32 DebugKind, NumDevices, DeviceNum, DynamicMemSize;
/// u64 ClockFrequency; uintptr IndirectCallTable; u64 IndirectCallTableSize;
/// u64 HardwareParallelism }.
const ENVIRONMENT: &std::ffi::CStr = c"__omp_rtl_device_environment";
const ENVIRONMENT_SIZE: usize = 48;
const INDIRECT_TABLE_AT: usize = 24;

/// Which end of an image's life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Phase {
    Constructors,
    Destructors,
}

impl Phase {
    fn kernel(self) -> &'static std::ffi::CStr {
        match self {
            Phase::Constructors => c"nvptx$device$init",
            Phase::Destructors => c"nvptx$device$fini",
        }
    }
    /// The prefix of the symbols holding the functions, and the globals bounding their array.
    fn symbols(self) -> (&'static str, &'static std::ffi::CStr, &'static std::ffi::CStr) {
        match self {
            Phase::Constructors => ("__init_array_object_", c"__init_array_start", c"__init_array_end"),
            Phase::Destructors => ("__fini_array_object_", c"__fini_array_start", c"__fini_array_end"),
        }
    }
}

impl CudaDevice {
    /// Writes the device runtime's environment where the image has one: device number,
    /// count, dynamic memory size, clock, hardware parallelism (the indirect-call table comes
    /// later, [`CudaDevice::set_indirect_call_table`]). A missing one is not an error (LLVM
    /// only notes it in debug output).
    pub(super) fn write_device_environment(&self, image: ImageId) {
        let Ok(g) = self.global(image, ENVIRONMENT) else { return };
        let mut env = [0u8; ENVIRONMENT_SIZE];
        env[4..8].copy_from_slice(&(self.settings.num_devices as u32).to_le_bytes());
        env[8..12].copy_from_slice(&(self.ordinal as u32).to_le_bytes());
        env[12..16].copy_from_slice(&self.settings.shared_memory_size.to_le_bytes());
        env[16..24].copy_from_slice(&(self.props.clock_khz as u64 * 1000).to_le_bytes());
        let parallelism = self.props.multiprocessors as u64 * self.props.max_threads_per_multiprocessor as u64;
        env[40..48].copy_from_slice(&parallelism.to_le_bytes());
        let size = if g.size == 0 { env.len() } else { g.size.min(env.len()) };
        // SAFETY: `g` is the image's global of `g.size` bytes, and `env` is readable host memory.
        let _ = unsafe { self.submit(g.addr, env.as_ptr() as usize, size) };
    }

    /// The device runtime's table of `declare target indirect` functions: (host address,
    /// device address) pairs sorted by host address, in device memory, named by the
    /// environment's `IndirectCallTable` and counted by its `IndirectCallTableSize`, which
    /// `__llvm_omp_indirect_call_lookup` searches. An image without an environment gets none.
    pub(super) fn set_indirect_call_table(&self, image: ImageId, functions: &[(usize, usize)]) -> Result<()> {
        let Ok(env) = self.global(image, ENVIRONMENT) else { return Ok(()) };
        if functions.is_empty() || (env.size != 0 && env.size < INDIRECT_TABLE_AT + 16) {
            return Ok(());
        }
        let mut pairs = functions.to_vec();
        pairs.sort_unstable_by_key(|&(host, _)| host);
        pairs.dedup_by_key(|&mut (host, _)| host);
        let table: Vec<u8> =
            pairs.iter().flat_map(|&(h, d)| [(h as u64).to_le_bytes(), (d as u64).to_le_bytes()]).flatten().collect();
        let mut ptr: CuDevicePtr = 0;
        // SAFETY: writes one device pointer; the context is current.
        self.check(unsafe { (self.driver.mem_alloc)(&mut ptr, table.len()) }, "cuMemAlloc")?;
        let mut fields = [0u8; 16];
        fields[..8].copy_from_slice(&ptr.to_le_bytes());
        fields[8..].copy_from_slice(&(pairs.len() as u64).to_le_bytes());
        // SAFETY: `ptr` was just allocated with `table.len()` bytes; the environment global
        // holds the two fields at INDIRECT_TABLE_AT (its size checked above); both host
        // buffers are readable.
        let written = unsafe {
            self.submit(ptr as usize, table.as_ptr() as usize, table.len())
                .and_then(|_| self.submit(env.addr + INDIRECT_TABLE_AT, fields.as_ptr() as usize, 16))
        };
        let old = match (&written, self.modules.lock().get_mut(image.0).and_then(Option::as_mut)) {
            (Ok(()), Some(m)) => m.indirect_table.replace(ptr as usize),
            _ => Some(ptr as usize),
        };
        if let Some(old) = old {
            // SAFETY: a table of this module no kernel can use any more (replaced), or the
            // one just made that nothing refers to.
            unsafe { (self.driver.mem_free)(old as CuDevicePtr) };
        }
        written
    }

    /// Runs the image's global constructors (or destructors): where the image has the
    /// kernel, the functions' addresses, read from their `__init_array_object_*` globals in
    /// priority order, go into device memory bounded by `__init_array_start`/`_end`, and the
    /// kernel runs on one thread of one block. An image without the kernel has nothing to run.
    pub(super) fn run_global_ctors_dtors(&self, image: ImageId, phase: Phase) -> Result<()> {
        let module = self.module(image)?;
        let mut func: CuFunction = std::ptr::null_mut();
        // SAFETY: `module` is loaded and the name is NUL-terminated.
        let r = unsafe { (self.driver.module_get_function)(&mut func, module as CuModule, phase.kernel().as_ptr()) };
        if r == CUDA_ERROR_NOT_FOUND {
            return Ok(());
        }
        self.check(r, "cuModuleGetFunction")?;
        let (prefix, start, end) = phase.symbols();
        let names: Vec<String> = {
            let modules = self.modules.lock();
            let bytes = modules.get(image.0).and_then(Option::as_ref).map(|m| m.bytes.as_slice()).unwrap_or(&[]);
            let found = image::symbols_named_like(bytes, prefix);
            image::by_priority(&found).map_err(PluginError::failed)?.into_iter().map(String::from).collect()
        };
        let mut pointers = Vec::with_capacity(names.len() * 8);
        for name in &names {
            let cname = CString::new(name.as_str()).map_err(|e| PluginError::failed(e.to_string()))?;
            let g = self.global(image, &cname)?;
            let mut fnaddr = [0u8; 8];
            // SAFETY: 8 writable host bytes; the global holds one function pointer.
            unsafe { self.retrieve(fnaddr.as_mut_ptr() as usize, g.addr, 8) }?;
            pointers.extend_from_slice(&fnaddr);
        }
        let array = if pointers.is_empty() { 0 } else { self.alloc(pointers.len(), AllocKind::Device)? };
        let ran = self.fill_array_and_launch(image, func, array, &pointers, start, end);
        if array != 0 {
            self.free(array, AllocKind::Device)?;
        }
        ran
    }

    fn fill_array_and_launch(
        &self,
        image: ImageId,
        func: CuFunction,
        array: usize,
        pointers: &[u8],
        start: &std::ffi::CStr,
        end: &std::ffi::CStr,
    ) -> Result<()> {
        if array != 0 {
            // SAFETY: `array` was allocated with `pointers.len()` bytes.
            unsafe { self.submit(array, pointers.as_ptr() as usize, pointers.len()) }?;
        }
        for (name, value) in [(start, array), (end, array + pointers.len())] {
            if let Ok(g) = self.global(image, name) {
                let bytes = (value as u64).to_le_bytes();
                // SAFETY: the global holds one pointer; `bytes` is readable.
                unsafe { self.submit(g.addr, bytes.as_ptr() as usize, 8) }?;
            }
        }
        let stream = self.stream as CuStream;
        self.order_after_writes(QueueId::SYNC, stream, Touches::Everything)?;
        // SAFETY: `func` is the image's parameterless constructor (destructor) kernel; the
        // array it walks is in device memory until the stream is synchronised below.
        let r = unsafe {
            (self.driver.launch_kernel)(func, 1, 1, 1, 1, 1, 1, 0, stream, std::ptr::null_mut(), std::ptr::null_mut())
        };
        self.check(r, "cuLaunchKernel")?;
        self.sync_stream(stream, Vec::new())
    }
}
