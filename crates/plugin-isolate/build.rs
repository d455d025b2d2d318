//! The worker exports its `pthread_create` (src/bin/offload-worker.rs), so that the threads
//! libomp starts for a kernel's teams and parallel regions go through it too.

fn main() {
    println!("cargo:rustc-link-arg-bin=offload-worker=-Wl,--export-dynamic-symbol=pthread_create");
}
