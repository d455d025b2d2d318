//! The worker exports its `pthread_create` (src/bin/offload-worker.rs), so that the threads
//! libomp starts for a kernel's teams and parallel regions go through it too; its `malloc`
//! family, so that kernels' allocations can be counted (`LIBOMPTARGET_CHECK=gpu`); and its
//! `ompt_start_tool`, which libomp looks up when it starts.

fn main() {
    for symbol in ["pthread_create", "malloc", "calloc", "realloc", "free", "ompt_start_tool"] {
        println!("cargo:rustc-link-arg-bin=offload-worker=-Wl,--export-dynamic-symbol={symbol}");
    }
}
