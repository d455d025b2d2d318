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

use omp_runtime::{Config, Runtime};
use std::sync::OnceLock;

static RUNTIME: OnceLock<Runtime> = OnceLock::new();

/// The runtime, created on first use from the environment.
pub(crate) fn rt() -> &'static Runtime {
    RUNTIME.get_or_init(|| {
        let config = Config::from_env(|k| std::env::var(k).ok());
        let plugins: Vec<Box<dyn omp_plugin::Plugin>> = vec![Box::new(omp_plugin_host::HostPlugin)];
        Runtime::new(config, Box::new(host::Libomp::load()), plugins)
    })
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
