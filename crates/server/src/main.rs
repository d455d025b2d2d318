//! `offload-server`: options in `offload_server::config` (`--help`, `--man`), and docs/remote.md.

#![forbid(unsafe_code)]

use offload_server::config::{Parsed, ServerConfig};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("--worker") {
        let devices = args.get(1).and_then(|d| d.parse().ok()).unwrap_or(1);
        let parent = args.get(2).and_then(|p| p.parse().ok()).unwrap_or(0);
        std::process::exit(omp_worker::serve::main(&omp_plugin_host::HostPlugin, devices, parent));
    }
    let cfg = match ServerConfig::parse(&args, |k| std::env::var(k).ok()) {
        Ok(Parsed::Serve(c)) => c,
        Ok(Parsed::Print(text)) => {
            print!("{text}");
            return;
        }
        Err(e) => {
            eprint!("offload-server: {e}");
            if !e.ends_with('\n') {
                eprintln!();
            }
            std::process::exit(2);
        }
    };
    for w in &cfg.warnings {
        eprintln!("offload-server: warning: {w}");
    }
    // Device-to-host chunks are fresh 1 MiB buffers: keep them on the heap instead of a new
    // mmap (and page faults) per chunk. No other thread exists yet, so this applies.
    omp_worker::sys::keep_large_buffers_on_heap(64 << 20, 256 << 20);
    let rt = match tokio::runtime::Builder::new_multi_thread().worker_threads(4).enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("offload-server: cannot start: {e}");
            std::process::exit(1);
        }
    };
    if let Err(e) = rt.block_on(offload_server::serve(*cfg)) {
        eprintln!("offload-server: {e}");
        std::process::exit(1);
    }
}
