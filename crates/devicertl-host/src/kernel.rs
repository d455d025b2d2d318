//! Kernel start and end (`__kmpc_target_init` / `__kmpc_target_deinit`) and the per-thread kernel
//! context the other entry points read.
//!
//! A host-device kernel is one call from the plugin on one OS thread, which plays the initial
//! thread of one team: there are no GPU worker threads to park in a state machine, so
//! `__kmpc_target_init` always returns -1 ("you are the main thread, run the region").

use core::cell::Cell;
use core::ffi::c_void;
use core::sync::atomic::{AtomicBool, Ordering};

use crate::ffi;

/// `ConfigurationEnvironmentTy` from LLVM's `offload/include/Shared/Environment.h`.
#[repr(C)]
pub struct ConfigurationEnvironment {
    pub use_generic_state_machine: u8,
    pub may_use_nested_parallelism: u8,
    /// 1 = generic, 2 = SPMD (3 = generic-SPMD).
    pub exec_mode: u8,
    pub min_threads: i32,
    /// The `thread_limit` (flang 22 writes 256 when there is none; flang 19 writes 0).
    pub max_threads: i32,
    pub min_teams: i32,
    pub max_teams: i32,
    pub reduction_data_size: i32,
    pub reduction_buffer_length: i32,
}

/// `KernelEnvironmentTy`: the constant `<kernel>_kernel_environment` the compiler emits.
#[repr(C)]
pub struct KernelEnvironment {
    pub configuration: ConfigurationEnvironment,
    pub ident: *const c_void,
    pub dynamic_env: *const c_void,
}

/// What a thread running (part of) a flang kernel needs to know.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KernelCtx {
    /// True between `__kmpc_target_init` and `__kmpc_target_deinit`, and in the libomp threads of
    /// parallel regions started in between. Outside, the `omp_*` overrides defer to libomp.
    pub active: bool,
    pub team_id: i32,
    pub num_teams: i32,
    /// Upper bound for the size of parallel regions (`thread_limit`); 0 = none.
    pub thread_limit: i32,
    /// Whether this thread holds [`TEAMS_LOCK`] (only the thread that ran target_init).
    pub holds_teams_lock: bool,
}

impl KernelCtx {
    /// Not inside a runtime-managed kernel.
    pub const NONE: KernelCtx =
        KernelCtx { active: false, team_id: 0, num_teams: 1, thread_limit: 0, holds_teams_lock: false };
}

std::thread_local! {
    static CTX: Cell<KernelCtx> = const { Cell::new(KernelCtx::NONE) };
    /// Team (id, count) for the next kernel started on this thread, from [`__omp_devicertl_set_team`].
    static NEXT_TEAM: Cell<(i32, i32)> = const { Cell::new((0, 1)) };
}

/// The calling thread's kernel context.
pub fn current() -> KernelCtx {
    // A const-initialized Cell without destructor is always accessible; the fallback only
    // avoids a panic path.
    CTX.try_with(Cell::get).unwrap_or(KernelCtx::NONE)
}

/// Replaces the calling thread's kernel context and returns the previous one.
pub fn replace(ctx: KernelCtx) -> KernelCtx {
    CTX.try_with(|c| c.replace(ctx)).unwrap_or(KernelCtx::NONE)
}

/// Serializes the teams of one multi-team launch. Each team's final reduction step is a plain
/// read-modify-write of the mapped variable, done after a `__kmpc_reduce` that libomp treats as a
/// team-of-one (no lock), so teams that ran concurrently would race. Within a team, parallel
/// regions still use every core.
static TEAMS_LOCK: AtomicBool = AtomicBool::new(false);

fn lock_teams() {
    while TEAMS_LOCK.compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed).is_err() {
        // SAFETY: sched_yield has no preconditions.
        unsafe { ffi::sched_yield() };
    }
}

fn unlock_teams() {
    TEAMS_LOCK.store(false, Ordering::Release);
}

/// Tells the runtime which team the next kernel launched on this thread runs. LLVM's host plugin
/// runs one team per launch and never calls it; a plugin that honours `num_teams` calls the
/// kernel once per team, calling this (looked up in each image) before each call.
#[no_mangle]
pub extern "C" fn __omp_devicertl_set_team(team_id: i32, num_teams: i32) {
    let teams = if num_teams < 1 { 1 } else { num_teams };
    let id = if (0..teams).contains(&team_id) { team_id } else { 0 };
    let _ = NEXT_TEAM.try_with(|c| c.set((id, teams)));
}

/// Kernel start. Returns -1: the calling thread is the main thread and runs the kernel body.
///
/// # Safety
/// `kernel_env` is null or points to the compiler-emitted kernel environment.
/// `_launch_env` is never dereferenced (LLVM's host plugin passes `(void*)~0`).
#[no_mangle]
pub unsafe extern "C" fn __kmpc_target_init(kernel_env: *const KernelEnvironment, _launch_env: *mut c_void) -> i32 {
    keep_overrides();
    // SAFETY: per this function's contract, non-null means a valid kernel environment.
    let thread_limit = match unsafe { kernel_env.as_ref() } {
        Some(env) => env.configuration.max_threads.max(0),
        None => 0,
    };
    let (team_id, num_teams) = NEXT_TEAM.try_with(|c| c.replace((0, 1))).unwrap_or((0, 1));
    let holds_teams_lock = num_teams > 1;
    if holds_teams_lock {
        lock_teams();
    }
    replace(KernelCtx { active: true, team_id, num_teams, thread_limit, holds_teams_lock });
    -1
}

/// Kernel end: forgets the kernel context and lets the next team of the launch run.
#[no_mangle]
pub extern "C" fn __kmpc_target_deinit() {
    let ctx = replace(KernelCtx::NONE);
    if ctx.holds_teams_lock {
        unlock_teams();
    }
}

/// The `omp_*` overrides must be in the image whenever a kernel is, but the device link sees
/// libomp.so (which also defines them) before this archive, so the linker would only pull the
/// archive member that defines `__kmpc_target_init`. Referencing a symbol that only the
/// overrides' member defines pulls that member too.
#[inline(always)]
fn keep_overrides() {
    core::hint::black_box(&crate::api::LINKED);
}
