//! `offload-mpi-device`: a device rank of an MPI job. Started by the MPI launcher next to
//! the program, never alone: `mpirun -np 1 ./program : -np K offload-mpi-device [--devices N]`.
//! It offers N devices of this node (default: the host plugin's count), run in an
//! `offload-worker` found next to it or in `../lib`, or with `--in-process` in the rank's
//! own process (docs/cluster.md).

use omp_plugin_mpi::serve::Serving;
use std::path::PathBuf;

const USAGE: &str = "usage: mpirun -np 1 ./program : -np K offload-mpi-device [--devices N] [--in-process] \
(a device rank of an MPI job, offering N devices of its node to the program; docs/cluster.md)";

fn main() {
    let mut devices = omp_plugin_host::NUM_DEVICES as u32;
    let mut in_process = false;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--in-process" if !in_process => in_process = true,
            "--devices" => match args.next().map(|n| n.parse::<u32>()) {
                Some(Ok(n)) if (1..=64).contains(&n) => devices = n,
                _ => usage(),
            },
            _ => usage(),
        }
    }
    if !omp_plugin_mpi::LAUNCHER_VARS.iter().any(|k| std::env::var_os(k).is_some()) {
        eprintln!("offload-mpi-device: not started by an MPI launcher\n{USAGE}");
        std::process::exit(2);
    }
    let serving = if in_process {
        // Kernel images that load the OpenMP runtime must not start MPI devices in the rank
        // (as every worker runs). Set before any thread starts.
        std::env::set_var("LIBOMPTARGET_MPI", "0");
        Serving::InProcess
    } else {
        match find_worker() {
            Some(w) => Serving::Worker(w),
            None => {
                eprintln!("offload-mpi-device: offload-worker is neither next to this program nor in ../lib");
                std::process::exit(1);
            }
        }
    };
    std::process::exit(omp_plugin_mpi::serve::main(devices, serving));
}

fn find_worker() -> Option<PathBuf> {
    let me = std::env::current_exe().ok()?;
    let dir = me.parent()?;
    [dir.join("offload-worker"), dir.join("../lib/offload-worker")].into_iter().find(|p| p.is_file())
}

fn usage() -> ! {
    eprintln!("{USAGE}");
    std::process::exit(2);
}
