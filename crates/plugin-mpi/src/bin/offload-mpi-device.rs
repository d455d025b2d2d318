//! `offload-mpi-device`: a device rank of an MPI job. Started by the MPI launcher next to
//! the program, never alone: `mpirun -np 1 ./program : -np K offload-mpi-device [--devices N]`.
//! It offers N devices of this node (default: the host plugin's count), run in an
//! `offload-worker` found next to it or in `../lib` (docs/cluster.md).

use std::path::PathBuf;

const USAGE: &str = "usage: mpirun -np 1 ./program : -np K offload-mpi-device [--devices N] \
(a device rank of an MPI job, offering N devices of its node to the program; docs/cluster.md)";

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let devices = match args.as_slice() {
        [] => omp_plugin_host::NUM_DEVICES as u32,
        [flag, n] if flag == "--devices" => match n.parse::<u32>() {
            Ok(n) if (1..=64).contains(&n) => n,
            _ => usage(),
        },
        _ => usage(),
    };
    if !omp_plugin_mpi::LAUNCHER_VARS.iter().any(|k| std::env::var_os(k).is_some()) {
        eprintln!("offload-mpi-device: not started by an MPI launcher\n{USAGE}");
        std::process::exit(2);
    }
    let Some(worker) = find_worker() else {
        eprintln!("offload-mpi-device: offload-worker is neither next to this program nor in ../lib");
        std::process::exit(1);
    };
    std::process::exit(omp_plugin_mpi::serve::main(devices, worker));
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
