//! What the runtime asks of libomp (found with dlsym, as libomp finds us) and of the
//! program (calling its mapper functions).

use crate::entry_data::ComponentVec;
use omp_runtime::{MapperComponents, OpenMpHost};
use std::ffi::{c_void, CStr};

type GetInt = unsafe extern "C" fn() -> i32;
type Mapper = unsafe extern "C" fn(*mut c_void, *mut c_void, *mut c_void, i64, i64, *mut c_void);

/// libomp's entry points, when libomp is in the process.
pub struct Libomp {
    target_offload: Option<GetInt>,
    default_device: Option<GetInt>,
    offload_fallback: i32,
}

fn lookup(name: &CStr) -> Option<usize> {
    // SAFETY: dlsym with RTLD_DEFAULT and a NUL-terminated name; NULL when absent.
    let p = unsafe { libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr()) };
    (!p.is_null()).then_some(p as usize)
}

impl Libomp {
    /// Finds libomp's functions; `offload_fallback` is `OMP_TARGET_OFFLOAD` as the runtime's
    /// configuration read it, for a libomp that does not export its own reading.
    pub fn load(offload_fallback: i32) -> Self {
        // SAFETY: both symbols, when libomp exports them, are `int f(void)`.
        let as_fn = |p: usize| unsafe { std::mem::transmute::<usize, GetInt>(p) };
        Self {
            target_offload: lookup(c"__kmpc_get_target_offload").map(as_fn),
            default_device: lookup(c"omp_get_default_device").map(as_fn),
            offload_fallback,
        }
    }
}

type WaitDeps = unsafe extern "C" fn(*const c_void, i32, i32, *mut c_void, i32, *mut c_void);

/// libomp's `__kmpc_omp_wait_deps`: blocks the encountering thread until the sibling tasks
/// that `deps` (`ndeps` `kmp_depend_info_t`s) depends on have completed. Constructs that
/// run here, synchronously, honour their `depend` clauses this way (as LLVM's interop
/// entry points do when not `nowait`).
///
/// # Safety
/// `loc`, `gtid`, `ndeps` and `deps` are as the compiler passed them to the entry point.
pub unsafe fn wait_deps(loc: *const c_void, gtid: i32, ndeps: i32, deps: *mut c_void) {
    if ndeps <= 0 || deps.is_null() {
        return;
    }
    static WAIT: std::sync::OnceLock<Option<usize>> = std::sync::OnceLock::new();
    let Some(f) = *WAIT.get_or_init(|| lookup(c"__kmpc_omp_wait_deps")) else { return };
    // SAFETY: libomp exports `__kmpc_omp_wait_deps` with this signature (ident_t *, kmp_int32
    // gtid, kmp_int32 ndeps, kmp_depend_info_t *, kmp_int32 ndeps_noalias, kmp_depend_info_t *).
    let wait = unsafe { std::mem::transmute::<usize, WaitDeps>(f) };
    // SAFETY: the compiler's own dependence list, passed through unchanged.
    unsafe { wait(loc, gtid, ndeps, deps, 0, std::ptr::null_mut()) };
}

impl OpenMpHost for Libomp {
    fn target_offload(&self) -> i32 {
        match self.target_offload {
            // SAFETY: libomp's function takes no arguments and runs its own init if needed.
            Some(f) => unsafe { f() },
            None => self.offload_fallback,
        }
    }

    fn default_device(&self) -> i32 {
        match self.default_device {
            // SAFETY: as above.
            Some(f) => unsafe { f() },
            None => 0,
        }
    }

    fn call_mapper(
        &self,
        mapper: usize,
        base: usize,
        begin: usize,
        size: i64,
        ty: i64,
        name: usize,
    ) -> MapperComponents {
        // SAFETY: `mapper` is a compiler-generated `.omp_mapper.*` function taken from the
        // program's ArgMappers array; its signature is fixed by clang (abi.md §3.8).
        let f = unsafe { std::mem::transmute::<usize, Mapper>(mapper) };
        let mut handle = ComponentVec::new();
        // SAFETY: the handle outlives the call; the mapper only passes it back to
        // `__tgt_push_mapper_component` / `__tgt_mapper_num_components`.
        unsafe {
            f(
                (&mut handle as *mut ComponentVec).cast(),
                base as *mut c_void,
                begin as *mut c_void,
                size,
                ty,
                name as *mut c_void,
            )
        };
        let mut out = MapperComponents::default();
        for c in handle.as_slice() {
            // SAFETY: the mapper pushed this component for the running construct's entry,
            // which is what a map clause's entry is.
            unsafe { out.push(c.base as usize, c.begin as usize, c.size, c.ty, c.name as usize) };
        }
        handle.release();
        out
    }
}
