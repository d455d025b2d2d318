//! `LIBOMPTARGET_CHECK=gpu` (and `1`): what a kernel did on the isolated device that a GPU
//! would refuse at run time, measured by the device per kernel ([`omp_plugin::GpuUse`]) and
//! said once per kernel.
//!
//! The limits are CUDA's defaults, which LLVM's CUDA plugin keeps unless told otherwise:
//! 1 KiB of stack per thread (`CU_LIMIT_STACK_SIZE`; `LIBOMPTARGET_STACK_SIZE` sets it) and
//! an 8 MiB device `malloc` heap (`CU_LIMIT_MALLOC_HEAP_SIZE`, "the device heap has a
//! default size of 8 megabytes" in the CUDA C++ Programming Guide; `LIBOMPTARGET_HEAP_SIZE`
//! sets it). A call to a function that no GPU's device libraries provide
//! ([`omp_gpu_libs::no_gpu_provides`]) does not link for a GPU at all.

use super::*;
use omp_plugin::{CallsUnseen, GpuUse};

/// A GPU thread's stack by default, in bytes.
pub(crate) const GPU_STACK: usize = 1 << 10;
/// A GPU's device `malloc` heap by default, in bytes.
pub(crate) const GPU_HEAP: usize = 8 << 20;
/// The two, in words.
const GPU_STACK_SAID: &str = "1 KiB";
const GPU_HEAP_SAID: &str = "8 MiB";
/// Stack the CPU's OpenMP runtime takes on a kernel's threads beyond what a GPU's takes (its
/// fork, barrier and worksharing code runs in the measured scopes, and the measuring counts
/// no use under its own margin): use up to the GPU's stack plus this is not said.
pub(crate) const CPU_RUNTIME_STACK: usize = 7 << 10;

/// Finding kinds, for saying each once per kernel.
const STACK: u8 = 0;
const HEAP: u8 = 1;
const HOST_CALL: u8 = 2;
const FLANG_RUNTIME: u8 = 4;
/// Said once per program (its kernel name empty).
const UNSEEN: u8 = 3;

impl Checker {
    pub(crate) fn gpu(&self) -> bool {
        self.mode.gpu()
    }

    /// The kernel `construct` launched used `used`: what a GPU would refuse, said once per
    /// kernel.
    pub(crate) fn gpu_use(&self, used: GpuUse, construct: u64) {
        if omp_runtime::debug::on() {
            let (kernel, _) = self.kernel_of(construct);
            omp_runtime::debug!(
                "omptarget",
                "Kernel {kernel} used {} bytes of stack on one thread and {} bytes from malloc at once",
                used.stack,
                used.heap
            );
        }
        if let Some(why) = used.calls_unseen {
            self.calls_unseen(why);
        }
        let over_stack = used.stack > GPU_STACK + CPU_RUNTIME_STACK;
        let over_heap = used.heap > GPU_HEAP;
        if !over_stack && !over_heap && used.host_calls.is_empty() && used.flang_runtime_calls.is_empty() {
            return;
        }
        let (kernel, loc) = self.kernel_of(construct);
        // flang names no file for a target region: its map names do.
        let names: Vec<MapName> =
            self.with_ctx(construct, |c| c.map(|c| c.args.iter().map(|a| a.0).collect())).unwrap_or_default();
        let at = report::place_in(loc, report::file_of(&names), Some(&kernel));
        let mut said = self.gpu_said.lock();
        if over_stack && said.len() < MAX_REPORTED && said.insert((kernel.clone(), STACK)) {
            report::finding(
                "GPU stack",
                format_args!(
                    "kernel {kernel} at {at} used {} of stack on one of its threads; a GPU thread has {} by default, so on \
                     a GPU run it with LIBOMPTARGET_STACK_SIZE={} or more, or keep large arrays out of the kernel's local \
                     variables (map them, or allocate them with omp_target_alloc)",
                    report::bytes(used.stack),
                    GPU_STACK_SAID,
                    used.stack.next_multiple_of(1 << 10),
                ),
            );
        }
        if over_heap && said.len() < MAX_REPORTED && said.insert((kernel.clone(), HEAP)) {
            report::finding(
                "GPU heap",
                format_args!(
                    "kernel {kernel} at {at} held {} from malloc at once; a GPU's device malloc heap is {} by default, so \
                     on a GPU run it with LIBOMPTARGET_HEAP_SIZE={} or more, or allocate the memory before the kernel \
                     (map it, or use omp_target_alloc)",
                    report::bytes(used.heap),
                    GPU_HEAP_SAID,
                    used.heap.next_multiple_of(1 << 20),
                ),
            );
        }
        for (symbol, name) in &used.host_calls {
            if said.len() < MAX_REPORTED && said.insert((format!("{kernel}\n{symbol}"), HOST_CALL)) {
                report::finding(
                    "GPU host call",
                    format_args!(
                        "kernel {kernel} at {at} called {}, a host function that no GPU's device libraries provide, so \
                         the program does not link for a GPU (ompcc --gpu-check names the call and its chain); {}",
                        name.as_deref().unwrap_or(symbol),
                        omp_gpu_libs::what_to_do(symbol),
                    ),
                );
            }
        }
        if !used.flang_runtime_calls.is_empty()
            && said.len() < MAX_REPORTED
            && said.insert((kernel.clone(), FLANG_RUNTIME))
        {
            let calls = &used.flang_runtime_calls;
            let more = match calls.len() {
                1..=3 => String::new(),
                n => format!(" and {} more", n - 3),
            };
            const IO: &[&str] = &["open", "openat", "close", "read", "write", "isatty", "fstat", "lseek"];
            let hint = omp_gpu_libs::what_to_do(if calls.iter().any(|c| IO.contains(&c.as_str())) {
                "_FortranAio"
            } else {
                "_FortranA"
            });
            report::finding(
                "GPU host call",
                format_args!(
                    "kernel {kernel} at {at} called flang's runtime, which no GPU's device libraries provide, so the \
                     program does not link for a GPU (ompcc --gpu-check names the call and its chain); the runtime \
                     called {}{more} here; {hint}",
                    calls.iter().take(3).map(String::as_str).collect::<Vec<_>>().join(", "),
                ),
            );
        }
    }

    /// The device could not see which functions kernels called: said once.
    fn calls_unseen(&self, why: CallsUnseen) {
        if !self.gpu_said.lock().insert((String::new(), UNSEEN)) {
            return;
        }
        let why = match why {
            CallsUnseen::LinkedNow => {
                "a device image was linked with -z now, so the loader bound its calls as it loaded it"
            }
            CallsUnseen::BoundAtLoad => {
                "the loader bound a device image's calls as it loaded it (as it does when LD_BIND_NOW is set)"
            }
        };
        report::finding(
            "note",
            format_args!(
                "the GPU check cannot see which host functions kernels call: {why}; ompcc --gpu-check finds them when \
                 the program is built"
            ),
        );
    }
}
