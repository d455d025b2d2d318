//! Device runtime for the x86_64 (CPU) offload target.
//!
//! Flang lowers every target region with the GPU-style OpenMPIRBuilder code path, even when the
//! device is the host CPU, so its x86_64 device code calls DeviceRTL entry points
//! (`__kmpc_target_init`, `__kmpc_parallel_51`, `__kmpc_for_static_loop_4u`, ...) that neither
//! libomp nor libomptarget provide. This static library provides them for the CPU; it is linked
//! into each device image (`libomptarget.devicertl.a`). Everything else flang's device code calls
//! (`__kmpc_barrier`, `__kmpc_reduce`, `omp_get_thread_num`, ...) is libomp's, which the
//! linker wrapper already links into the image, so parallel regions are forwarded to libomp and
//! run in real libomp teams.
//!
//! Layout: [`kernel`] (kernel start/end and the per-thread kernel context), [`parallel`]
//! (parallel regions), [`workshare`] (loop partitioning, the only pure logic, unit-tested) and
//! [`api`] (the `omp_*` queries whose libomp answer is wrong inside a target region).
//!
//! Why `no_std` with `extern crate std`: the code only needs `core` (no allocation, no I/O), and
//! keeping std out of the code keeps the device images small. std is still linked because the
//! workspace builds with `panic = "unwind"`, which a `no_std` staticlib cannot be built with on
//! stable Rust (it needs std's panic runtime), and for `thread_local!`. No entry point can panic
//! by construction; if one ever did, Rust aborts instead of unwinding out of `extern "C"`.
#![no_std]

extern crate std;

pub mod api;
mod ffi;
pub mod kernel;
pub mod parallel;
pub mod workshare;
