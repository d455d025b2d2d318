//! A launch as LLVM's CUDA plugin makes it: the launch environment of a kernel whose teams
//! reduce, the shape from the launch rules, dynamic shared memory, pointer-sized arguments.

use super::{CudaDevice, PendingFrees, DEFAULT_DYN_SHARED_LIMIT};
use crate::driver::*;
use crate::launch_rules::{self, Kernel};
use crate::streams::Touches;
use omp_plugin::{KernelId, LaunchConfig, QueueId, Result};
use std::ffi::c_void;

impl CudaDevice {
    /// The launch environment a kernel's first argument points to: `~0` when its teams do
    /// no reduction, else device memory with a reduction buffer (freed in `frees` after the
    /// launch), as LLVM's `getKernelLaunchEnvironment` makes it.
    fn launch_environment(&self, kernel: &Kernel, stream: CuStream, frees: &mut PendingFrees) -> Result<usize> {
        let Some(env) = kernel.env.filter(|e| e.reduction_data_size > 0 && e.reduction_buffer_length > 0) else {
            return Ok(usize::MAX);
        };
        let bytes = env.reduction_data_size as usize * env.reduction_buffer_length as usize;
        let mut buffer: CuDevicePtr = 0;
        // SAFETY: writes one device pointer; the context is current.
        self.check(unsafe { (self.driver.mem_alloc)(&mut buffer, bytes) }, "cuMemAlloc")?;
        frees.push(buffer as usize);
        let mut kle: CuDevicePtr = 0;
        // SAFETY: as above.
        self.check(unsafe { (self.driver.mem_alloc)(&mut kle, 16) }, "cuMemAlloc")?;
        frees.push(kle as usize);
        // KernelLaunchEnvironmentTy { uint32_t ReductionCnt, ReductionIterCnt; void *ReductionBuffer; }
        let mut host = [0u8; 16];
        host[8..].copy_from_slice(&buffer.to_le_bytes());
        // SAFETY: 16 readable host bytes to the 16-byte allocation just made; a copy from
        // pageable host memory is staged before the call returns, so `host` may go after it.
        let r = unsafe { (self.driver.memcpy_htod_async)(kle, host.as_ptr().cast(), 16, stream) };
        self.check(r, "cuMemcpyHtoDAsync")?;
        Ok(kle as usize)
    }

    /// Launches on `queue`'s stream, after the writes in flight on other queues; the caller
    /// synchronises it.
    ///
    /// # Safety
    /// As [`Device::launch`].
    pub(super) unsafe fn launch_on(
        &self,
        kernel: KernelId,
        args: &[usize],
        config: &LaunchConfig,
        queue: QueueId,
        frees: &mut PendingFrees,
    ) -> Result<()> {
        self.enter()?;
        let stream = self.stream_of(queue)?;
        let (func, k) = self.kernel_entry(kernel)?;
        if self.settings.check_findings {
            let name = self.kernels.lock().get(kernel.raw().wrapping_sub(1)).map(|e| e.name.clone());
            *self.last_kernel.lock() = name;
        }
        // The arguments may point anywhere in device memory.
        self.order_after_writes(queue, stream, Touches::Everything)?;
        let shape = launch_rules::shape(&k, &self.props.limits, config);
        let mut values = Vec::with_capacity(args.len() + 1);
        if config.with_dyn_ptr {
            values.push(self.launch_environment(&k, stream, frees)?);
        }
        values.extend_from_slice(args);
        // Each kernel parameter is pointer-sized (clang's nvptx kernels take `ptr`s):
        // cuLaunchKernel reads parameter i from `params[i]`.
        // A kernel without parameters gets NULL.
        let mut param_ptrs: Vec<*mut c_void> = values.iter_mut().map(|v| (v as *mut usize).cast()).collect();
        let params = if param_ptrs.is_empty() { std::ptr::null_mut() } else { param_ptrs.as_mut_ptr() };
        let shared = config.dyn_group_mem.max(self.settings.shared_memory_size);
        if shared > DEFAULT_DYN_SHARED_LIMIT {
            let attribute = CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES;
            // SAFETY: `func` is a function of a loaded module; the attribute takes a byte count.
            let r = unsafe { (self.driver.func_set_attribute)(func, attribute, shared as i32) };
            self.check(r, "cuFuncSetAttribute")?;
        }
        let ([bx, by, bz], [tx, ty, tz]) = (shape.blocks, shape.threads);
        // SAFETY: `func` was resolved by `kernel` from a module still loaded (the caller's
        // promise); `params` is NULL or holds one pointer per parameter, each to a live `usize` in
        // `values`, which outlive the call (the driver copies parameters at launch); the
        // arguments are device addresses valid for the kernel by the caller's promise.
        let r = unsafe {
            (self.driver.launch_kernel)(func, bx, by, bz, tx, ty, tz, shared, stream, params, std::ptr::null_mut())
        };
        self.check(r, "cuLaunchKernel")?;
        self.note_write(queue, stream, Touches::Everything)
    }
}
