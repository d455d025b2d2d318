//! What a GPU device library provides to OpenMP device code, as data: a function the device
//! code of a program calls and nothing here (nor the program itself) defines does not link for
//! that GPU.
//!
//! The table is the set of symbols that clang's and flang's device code (LLVM 19 and 22) may be
//! left calling after their front ends, and who resolves each at the GPU's device link:
//!
//! * **LLVM's OpenMP device runtime** (`libomptarget-{nvptx,amdgpu}-<arch>.bc` of
//!   Debian's libomp-19-dev; `libompdevice.a` from LLVM 20 on). `llvm-nm-19 --defined-only` of
//!   `libomptarget-nvptx-sm_90.bc` and `libomptarget-amdgpu-gfx90a.bc`: the `omp_*` API,
//!   `ompx_*`, `__kmpc_*`, `__llvm_omp_*` (`__llvm_omp_vprintf`, which clang 19 makes of
//!   `printf`; the `declare target indirect` lookup), `llvm_omp_*`, `__assert_fail`, `memcmp`,
//!   and on AMD GPUs `malloc` and `free`. From LLVM 20 its `LibC.cpp` also defines `printf`
//!   and `memset`.
//! * **The vendor's device libraries, which clang's OpenMP math wrappers call**: `math.h` and
//!   `<cmath>` become `__nv_*` (CUDA's libdevice) or `__ocml_*`/`__ockl_*` (ROCm's device
//!   libraries); `vprintf`, `malloc` and `free` on NVIDIA GPUs are CUDA's device runtime (the
//!   OpenMP runtime's are weak references to them).
//! * **LLVM itself**: `llvm.*` intrinsics (`memcpy`, `memset`, `memmove` become these, and the
//!   back end expands them), and the `__builtin_*` functions, which never reach a link.
//!
//! Not provided, because no Debian package ships them for the GPU (LLVM's GPU libc, flang's
//! GPU runtime): the rest of the C library (`fopen`, `strlen`, `abort`, `exit`, …), the C++
//! library (`std::string`, iostreams, … but not plain `operator new` and `delete`, which
//! clang's OpenMP device headers define: `cpu_calls.rs`) and flang's runtime (`_FortranA*`:
//! I/O statements, many intrinsics).

#![forbid(unsafe_code)]

mod advice;
mod cpu_calls;

pub use advice::{short_cxx_name, what_to_do};
pub use cpu_calls::no_gpu_provides;

/// A GPU family, whose device libraries differ.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Family {
    /// `nvptx64-nvidia-cuda` (`sm_*`).
    Nvptx,
    /// `amdgcn-amd-amdhsa` (`gfx*`).
    Amdgpu,
}

impl Family {
    /// The family of a GPU architecture name (`sm_90`, `gfx90a`), if it names one.
    pub fn of_arch(arch: &str) -> Option<Family> {
        let digits = |s: &str| !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric());
        if let Some(n) = arch.strip_prefix("sm_") {
            (digits(n) && n.starts_with(|c: char| c.is_ascii_digit())).then_some(Family::Nvptx)
        } else if let Some(n) = arch.strip_prefix("gfx") {
            (digits(n) && n.starts_with(|c: char| c.is_ascii_digit())).then_some(Family::Amdgpu)
        } else {
            None
        }
    }

    /// The target triple.
    pub fn triple(self) -> &'static str {
        match self {
            Family::Nvptx => "nvptx64-nvidia-cuda",
            Family::Amdgpu => "amdgcn-amd-amdhsa",
        }
    }

    /// The short name of the target (`nvptx64`, `amdgcn`).
    pub fn name(self) -> &'static str {
        match self {
            Family::Nvptx => "nvptx64",
            Family::Amdgpu => "amdgcn",
        }
    }

    /// The stack a GPU thread of an OpenMP kernel gets when `LIBOMPTARGET_STACK_SIZE` does not
    /// set it, in bytes. NVIDIA: CUDA's default per-thread stack limit (`CU_LIMIT_STACK_SIZE`,
    /// 1 KiB), which LLVM's CUDA plugin changes only when the variable is set. AMD: LLVM's AMD GPU
    /// plugin gives a kernel the private segment its code object asks for, and a kernel whose
    /// stack the back end could not bound (recursion, calls through pointers or into code it
    /// did not see) its stack size, 16 KiB unless the variable sets it (ROCm's build of the
    /// plugin: 1 KiB).
    pub fn default_stack_size(self) -> u64 {
        match self {
            Family::Nvptx => 1024,
            Family::Amdgpu => 16 * 1024,
        }
    }
}

/// How a table row matches a symbol.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Match {
    /// The whole name.
    Exact(&'static str),
    /// Names that start with it.
    Prefix(&'static str),
}

/// One row: symbols that a device library provides, for which GPUs, and which library.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Provided {
    pub symbols: Match,
    pub nvptx: bool,
    pub amdgpu: bool,
    /// The library that defines them.
    pub library: &'static str,
}

const fn both(symbols: Match, library: &'static str) -> Provided {
    Provided { symbols, nvptx: true, amdgpu: true, library }
}

const fn only(family: Family, symbols: Match, library: &'static str) -> Provided {
    Provided { symbols, nvptx: matches!(family, Family::Nvptx), amdgpu: matches!(family, Family::Amdgpu), library }
}

const RTL: &str = "LLVM's OpenMP device runtime";
const CUDA: &str = "CUDA's device runtime";
const LIBDEVICE: &str = "CUDA's libdevice";
const ROCM: &str = "ROCm's device libraries";
const LLVM: &str = "LLVM (an intrinsic the back end expands)";

/// What the GPU device libraries provide (see the crate documentation for where each row
/// comes from).
pub const PROVIDED: &[Provided] = &[
    both(Match::Prefix("llvm."), LLVM),
    both(Match::Prefix("__builtin_"), LLVM),
    both(Match::Prefix("omp_"), RTL),
    both(Match::Prefix("ompx_"), RTL),
    both(Match::Prefix("__kmpc_"), RTL),
    both(Match::Prefix("__llvm_omp_"), RTL),
    both(Match::Prefix("llvm_omp_"), RTL),
    both(Match::Prefix("__omp_rtl_"), RTL),
    both(Match::Exact("__assert_fail"), RTL),
    both(Match::Exact("memcmp"), RTL),
    both(Match::Exact("memset"), RTL),
    both(Match::Exact("memcpy"), LLVM),
    both(Match::Exact("memmove"), LLVM),
    both(Match::Exact("printf"), RTL),
    only(Family::Amdgpu, Match::Exact("malloc"), RTL),
    only(Family::Amdgpu, Match::Exact("free"), RTL),
    only(Family::Nvptx, Match::Exact("malloc"), CUDA),
    only(Family::Nvptx, Match::Exact("free"), CUDA),
    only(Family::Nvptx, Match::Exact("vprintf"), CUDA),
    only(Family::Nvptx, Match::Exact("__assertfail"), CUDA),
    only(Family::Nvptx, Match::Prefix("__nv_"), LIBDEVICE),
    only(Family::Nvptx, Match::Prefix("__nvvm_"), LLVM),
    only(Family::Amdgpu, Match::Prefix("__ocml_"), ROCM),
    only(Family::Amdgpu, Match::Prefix("__ockl_"), ROCM),
    only(Family::Amdgpu, Match::Prefix("__oclc_"), ROCM),
];

/// The row that provides `symbol` on `family`, if any.
pub fn provider(family: Family, symbol: &str) -> Option<&'static Provided> {
    PROVIDED.iter().find(|p| {
        let on = match family {
            Family::Nvptx => p.nvptx,
            Family::Amdgpu => p.amdgpu,
        };
        on && match p.symbols {
            Match::Exact(s) => symbol == s,
            Match::Prefix(s) => symbol.starts_with(s),
        }
    })
}

/// True when a device library provides `symbol` on `family`.
pub fn provides(family: Family, symbol: &str) -> bool {
    provider(family, symbol).is_some()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn architectures_name_their_family() {
        assert_eq!(Family::of_arch("sm_90"), Some(Family::Nvptx));
        assert_eq!(Family::of_arch("sm_90a"), Some(Family::Nvptx));
        assert_eq!(Family::of_arch("gfx90a"), Some(Family::Amdgpu));
        assert_eq!(Family::of_arch("gfx1100"), Some(Family::Amdgpu));
        for bad in ["", "sm_", "gfx", "sm90", "x86_64", "sm_9-0", "gfxabc", "SM_90"] {
            assert_eq!(Family::of_arch(bad), None, "{bad}");
        }
        assert_eq!(Family::Nvptx.triple(), "nvptx64-nvidia-cuda");
        assert_eq!(Family::Amdgpu.name(), "amdgcn");
    }

    #[test]
    fn the_device_runtime_and_math_libraries_are_provided() {
        for f in [Family::Nvptx, Family::Amdgpu] {
            for s in ["omp_get_thread_num", "__kmpc_target_init", "llvm.memcpy.p0.p0.i64", "printf", "malloc", "free"] {
                assert!(provides(f, s), "{s} on {f:?}");
            }
        }
        assert!(provides(Family::Nvptx, "__nv_sin") && !provides(Family::Amdgpu, "__nv_sin"));
        assert!(provides(Family::Amdgpu, "__ocml_sin_f64") && !provides(Family::Nvptx, "__ocml_sin_f64"));
        assert_eq!(provider(Family::Amdgpu, "malloc").map(|p| p.library), Some(RTL));
        assert_eq!(provider(Family::Nvptx, "malloc").map(|p| p.library), Some(CUDA));
    }

    #[test]
    fn the_host_library_is_not() {
        for f in [Family::Nvptx, Family::Amdgpu] {
            for s in ["fopen", "strlen", "abort", "exit", "_Znwm", "_FortranAioBeginExternalListOutput", "sin", "omp"] {
                assert!(!provides(f, s), "{s} on {f:?}");
            }
        }
        assert!(!provides(Family::Amdgpu, "vprintf"), "AMD's device runtime has no vprintf without LLVM's GPU libc");
    }
}
