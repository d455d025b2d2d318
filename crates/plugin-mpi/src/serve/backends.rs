//! What serves a device rank's devices (an `offload-worker`, or the rank itself), and how
//! the rank's threads wait beside it.

use super::{bulk, Event, Serving};
use crate::backend::{Backend, InProcess};
use crate::direct::DeviceMemory;
use crate::keep;
use crate::proto::{self, Hello};
use omp_plugin_isolate::arena::{self, Arena};
use omp_worker::{SpawnOptions, Worker};
use std::process::Command;
use std::sync::mpsc::Sender;
use std::sync::Arc;

/// In process, the rank's threads bound to one CPU may keep it while they wait where no
/// other rank of this machine runs on it; a worker inherits the rank's binding and needs that
/// CPU, so beside one they never keep it (keep.rs).
pub(super) fn keep_cpus_beside(serving: &Serving, hellos: &[Option<Hello>], rank: i32) {
    if matches!(serving, Serving::InProcess) {
        let me = usize::try_from(rank).unwrap_or(usize::MAX);
        keep::set_peer_cpus(proto::cpus_here(hellos, me, |_| true));
    }
}

/// Starts what serves the devices, and the devices' memory MPI reaches directly (a worker's
/// shared arena, or in process the devices' own allocations).
pub(super) fn start(
    serving: &Serving,
    devices: u32,
    tx: Sender<Event>,
) -> std::io::Result<(Arc<dyn Backend>, Option<DeviceMemory>)> {
    match serving {
        Serving::Worker(exe) => {
            let (worker, arena) = spawn_worker(exe, devices, tx)?;
            let memory = bulk::shared_memory(&worker, arena, devices);
            Ok((Arc::new(worker), memory))
        }
        Serving::InProcess => {
            let output = move |is_err, b: &[u8]| drop(tx.send(Event::Output(is_err, b.to_vec())));
            let served = InProcess::start(&omp_plugin_host::HostPlugin, devices, output)?;
            let memory = DeviceMemory::in_process(served.devices());
            Ok((Arc::new(served), Some(memory)))
        }
    }
}

/// Whether this node has fewer CPUs than the busy threads a launch takes turns between: the
/// program's rank, and each device rank's MPI thread and worker (the MPI launcher's count of
/// ranks on this node, Open MPI's or MPICH's; unknown: not crowded). Then the looks of this
/// rank and its worker for each other's messages yield between glances
/// (`omp_worker::spin::always_yield`): one that kept its CPU would keep it from the very
/// process it waits for. With two device ranks and the program on this 2-core machine, an
/// empty target with a worker took 66-176 µs with looks that kept the CPU and 37-68 µs with
/// yielding ones.
fn crowded() -> bool {
    let local = ["OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS"]
        .iter()
        .find_map(|v| std::env::var(v).ok()?.trim().parse::<usize>().ok());
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    local.is_some_and(|ranks| ranks.saturating_mul(2) > cpus)
}

/// Starts the worker, with the devices' memory arena when one can be made.
fn spawn_worker(exe: &std::path::Path, devices: u32, tx: Sender<Event>) -> std::io::Result<(Worker, Option<Arena>)> {
    let mut cmd = Command::new(exe);
    cmd.args(["--worker", &devices.to_string(), &std::process::id().to_string()]);
    let arena = Arena::create(arena::machine_size()).ok();
    if let Some(a) = &arena {
        cmd.arg("--arena").arg(a.base().to_string()).arg(a.size().to_string());
        // The arena keeps its descriptor (at 10 or above) open until the spawn returns.
        omp_worker::client::pass_fds(&mut cmd, vec![(a.fd(), arena::ARENA_FD)]);
    }
    // Worker::spawn sets LIBOMPTARGET_MPI=0 (no MPI devices inside a worker).
    if crowded() {
        omp_worker::spin::always_yield();
        cmd.env(omp_worker::spin::YIELD_ENV, "1");
    }
    let out = tx.clone();
    let worker = Worker::spawn(
        cmd,
        SpawnOptions {
            direct_copies: true,
            on_output: Some(Box::new(move |is_err, b: &[u8]| {
                let _ = out.send(Event::Output(is_err, b.to_vec()));
            })),
            on_exit: None,
        },
    )?;
    Ok((worker, arena))
}
