//! `omp_*` queries whose libomp answer is wrong inside a flang target region on the host device.
//!
//! The device image is linked `-Bsymbolic` with this archive, so these definitions win over
//! libomp's for calls from the image (flang's `omp_lib` binds to the C names). Outside a
//! runtime-managed kernel (e.g. clang-compiled code in the same image, whose teams are real libomp
//! teams) they return libomp's answer.

use crate::{ffi, kernel};

/// Defined only in this module's object file; `__kmpc_target_init` refers to it so that the
/// linker pulls these overrides into every device image that has a kernel.
pub(crate) static LINKED: u8 = 0;

/// 0 inside a target region: the region runs on the device, even when that device is the host.
/// (libomp alone answers 1; clang gets 0 through a `declare variant`, Fortran has no such variant.)
#[no_mangle]
pub extern "C" fn omp_is_initial_device() -> i32 {
    if kernel::current().active {
        0
    } else {
        // SAFETY: libomp query without preconditions.
        unsafe { ffi::omp_is_initial_device_() }
    }
}

/// The team of the running kernel (flang teams are not libomp teams).
#[no_mangle]
pub extern "C" fn omp_get_team_num() -> i32 {
    let ctx = kernel::current();
    if ctx.active {
        ctx.team_id
    } else {
        // SAFETY: libomp query without preconditions.
        unsafe { ffi::omp_get_team_num_() }
    }
}

/// The number of teams of the running kernel.
#[no_mangle]
pub extern "C" fn omp_get_num_teams() -> i32 {
    let ctx = kernel::current();
    if ctx.active {
        ctx.num_teams
    } else {
        // SAFETY: libomp query without preconditions.
        unsafe { ffi::omp_get_num_teams_() }
    }
}
