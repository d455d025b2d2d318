//! The functions a kernel built for the CPU calls at run time, held against what a GPU build
//! of the same code would have: `LIBOMPTARGET_CHECK=gpu` sees the CPU build's calls (the
//! symbols its image binds), and a CPU build calls some functions under names a GPU build
//! never uses, for things the GPU's device libraries do provide.
//!
//! * **Math.** clang's OpenMP math wrappers (`__clang_cuda_math.h`, `__clang_hip_math.h`,
//!   included for the GPU compile of `math.h` and `<cmath>`) define `sin`, `expf`, … for the
//!   device in terms of `__nv_*` (NVIDIA) or `__ocml_*` (AMD); the CPU build calls libm's. Only
//!   the `double` and `float` forms: the GPUs have no `long double` (`sinl` stays a finding).
//!   flang lowers its intrinsics to the same device functions, and complex ones (`abs`, `exp`,
//!   … of a complex number) to the C library's `cabs`, `cexp`, … on the CPU.
//! * **Complex arithmetic.** clang's `__mulsc3`, `__divdc3`, … (compiler-rt on the CPU; the
//!   wrappers' `__clang_cuda_complex_builtins.h` on a GPU).
//! * **printf.** On the CPU, LLVM turns `printf("…\n")` into `puts` and `printf("%c")` into
//!   `putchar`; a GPU build rewrites `printf` into the device runtime's before that.
//! * **Fortified forms** (`_FORTIFY_SOURCE`): `__printf_chk`, `__memcpy_chk`, … are `printf`,
//!   `memcpy`, … with a size check.
//! * **The CPU loader and runtime's own**: `__tls_get_addr` (a `threadprivate` variable),
//!   `__cxa_finalize` (an image unloaded).
//! * **C++ `new` and `delete`.** clang's OpenMP device headers (`__clang_openmp_device_functions.h`,
//!   included in every GPU compile of C++, and its `new` wrapper) define the global
//!   `operator new`, `new[]`, `delete`, `delete[]`, their sized and `nothrow` forms in terms
//!   of the device's `malloc` and `free` (clang 19 and 22 alike); the CPU build calls the C++
//!   library's. The aligned forms (`std::align_val_t`) are not among them: still findings.
//! * **128-bit integer division**: `__divti3`, `__udivti3`, `__modti3`, `__umodti3` are
//!   compiler-rt's on the CPU; the NVIDIA and AMD back ends expand the division inline (checked
//!   with clang 19 and 22 for both).

use crate::Family;

/// Math functions (each also with an `f` suffix, its `float` form) that clang's OpenMP math
/// wrappers define for both GPU families.
const MATH: &[&str] = &[
    "acos",
    "acosh",
    "asin",
    "asinh",
    "atan",
    "atan2",
    "atanh",
    "cbrt",
    "ceil",
    "copysign",
    "cos",
    "cosh",
    "erf",
    "erfc",
    "exp",
    "exp10",
    "exp2",
    "expm1",
    "fabs",
    "fdim",
    "floor",
    "fma",
    "fmax",
    "fmin",
    "fmod",
    "frexp",
    "hypot",
    "ilogb",
    "ldexp",
    "lgamma",
    "llrint",
    "llround",
    "log",
    "log10",
    "log1p",
    "log2",
    "logb",
    "lrint",
    "lround",
    "modf",
    "nan",
    "nearbyint",
    "nextafter",
    "pow",
    "remainder",
    "remquo",
    "rint",
    "round",
    "scalbln",
    "scalbn",
    "sin",
    "sincos",
    "sinh",
    "sqrt",
    "tan",
    "tanh",
    "tgamma",
    "trunc",
    "j0",
    "j1",
    "jn",
    "y0",
    "y1",
    "yn",
    "cabs",
    "cexp",
    "clog",
    "csqrt",
    "cpow",
    "csin",
    "ccos",
    "ctan",
    "csinh",
    "ccosh",
    "ctanh",
];

/// Other names a CPU build calls for what a GPU build has (see the module documentation).
const CPU_FORMS: &[&str] = &[
    "abs",
    "labs",
    "llabs",
    "__mulsc3",
    "__muldc3",
    "__divsc3",
    "__divdc3",
    "__powisf2",
    "__powidf2",
    "puts",
    "putchar",
    "__printf_chk",
    "__memcpy_chk",
    "__memmove_chk",
    "__memset_chk",
    "__tls_get_addr",
    "__cxa_finalize",
    // operator new, new[], delete, delete[]: plain, sized (C++14) and nothrow.
    "_Znwm",
    "_Znam",
    "_ZdlPv",
    "_ZdaPv",
    "_ZdlPvm",
    "_ZdaPvm",
    "_ZnwmRKSt9nothrow_t",
    "_ZnamRKSt9nothrow_t",
    "_ZdlPvRKSt9nothrow_t",
    "_ZdaPvRKSt9nothrow_t",
    "__divti3",
    "__udivti3",
    "__modti3",
    "__umodti3",
];

/// True when a kernel of a CPU build that called `symbol` calls something no GPU's device
/// libraries provide (neither family's, under any name a GPU build would give it).
pub fn no_gpu_provides(symbol: &str) -> bool {
    let math = |s: &str| MATH.contains(&s) || s.strip_suffix('f').is_some_and(|d| MATH.contains(&d));
    ![Family::Nvptx, Family::Amdgpu].into_iter().any(|f| crate::provides(f, symbol))
        && !math(symbol)
        && !CPU_FORMS.contains(&symbol)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_only_functions_are_named() {
        for s in [
            "fopen",
            "strtok",
            "strlen",
            "abort",
            "exit",
            "sinl",
            "calloc",
            "_ZnwmSt11align_val_t",
            "_ZNSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEE9_M_createERmm",
            "__floattidf",
            "_FortranAioBeginOpenUnit",
        ] {
            assert!(no_gpu_provides(s), "{s}");
        }
    }

    #[test]
    fn what_a_gpu_has_under_another_name_is_not() {
        for s in [
            "sin",
            "sinf",
            "pow",
            "sqrt",
            "expf",
            "cabs",
            "__muldc3",
            "puts",
            "putchar",
            "printf",
            "memcpy",
            "malloc",
            "free",
            "__kmpc_fork_call",
            "omp_get_thread_num",
            "__tls_get_addr",
            "_Znwm",
            "_ZdlPvm",
            "_ZdaPv",
            "__udivti3",
            "__modti3",
        ] {
            assert!(!no_gpu_provides(s), "{s}");
        }
    }
}
