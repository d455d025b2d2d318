#![allow(clippy::missing_safety_doc)]
//! `libomptarget.so`: the C ABI of LLVM's offloading runtime, for programs built by clang
//! 19 and 22. Each function here only unpacks its C arguments and calls `omp-runtime`; no
//! OpenMP decision is made in this crate. No panic crosses `extern "C"`: every entry point
//! runs inside [`guard`].

mod abi;
mod entry_api;
mod entry_data;
mod entry_kernel;
mod entry_misc;
mod host;
mod ompt;

use omp_runtime::{Config, Runtime};
use std::sync::OnceLock;

static RUNTIME: OnceLock<Runtime> = OnceLock::new();

/// The runtime, created on first use from the environment.
pub(crate) fn rt() -> &'static Runtime {
    let rt = RUNTIME.get_or_init(|| {
        let config = Config::from_process_env();
        let plugins = omp_runtime::compose::plugins(&config);
        let host = host::Libomp::load(config.target_offload.unwrap_or(1));
        Runtime::new(config, Box::new(host), plugins)
    });
    // Connecting to an OMPT tool goes through libomp, which may call back into us (for
    // `omp_get_num_devices`): do it after the runtime exists, once.
    static CONNECT: std::sync::Once = std::sync::Once::new();
    if !CONNECT.is_completed() && !CONNECTING.with(|c| c.replace(true)) {
        CONNECT.call_once(|| {
            // The composition's observers, after INFO output and the profile: an OMPT tool,
            // then the mapping checker (LIBOMPTARGET_CHECK), which wraps each device as it
            // opens (devices open at the first registration, which comes through here).
            let observers = ompt::connect().into_iter().chain(omp_check::observer(rt.config.check)).collect();
            rt.set_observers(observers);
            if rt.finishes_at_exit() {
                // Registered after the program's own unregistration handler, so it runs
                // after it: the profile then holds everything.
                // SAFETY: atexit takes a plain `extern "C" fn()`.
                unsafe { libc::atexit(finish_profile) };
            }
        });
        CONNECTING.with(|c| c.set(false));
    }
    rt
}

thread_local! {
    static CONNECTING: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Runs `f`, turning a panic into an error message and `fallback`.
#[inline]
pub(crate) fn guard<R>(name: &str, fallback: R, f: impl FnOnce() -> R) -> R {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
        Ok(r) => r,
        Err(p) => {
            let msg = p
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| p.downcast_ref::<String>().cloned())
                .unwrap_or_default();
            omp_runtime::info::error(format_args!("internal error in {name}: {msg}"));
            fallback
        }
    }
}

extern "C" fn finish_profile() {
    guard("LIBOMPTARGET_PROFILE", (), || rt().finish());
}
