//! MPI devices (docs/cluster.md): a job started as
//! `mpirun -np 1 ./program : -np K offload-mpi-device` gives the program, after its local
//! devices, every device of every device rank, numbered rank by rank.
//!
//! The system's MPI is loaded at run time ([`omp_mpi`]), and only by a program that an MPI
//! launcher started (its environment says so: `OMPI_COMM_WORLD_SIZE`, `PMI_RANK`, …): any
//! other program never loads `libmpi` and pays nothing. A program that links MPI itself is
//! left alone (its own `MPI_Init` must be the only one): it runs unchanged, without MPI
//! devices, and says why under `LIBOMPTARGET_INFO`.
//!
//! A device rank runs [`serve::main`]: it relays requests to an `offload-worker` of its
//! node, the worker that isolated and remote devices use, so images, allocations, copies,
//! launches and kernel output behave as they do there; or, with `--in-process`, it runs the
//! worker's request handling itself (`backend`).

mod backend;
mod device;
pub mod direct;
mod keep;
pub mod link;
mod peer;
pub mod proto;
pub mod serve;
mod slice;

pub use device::MpiDevice;

use link::{Link, Rank};
use omp_plugin::{Device, Plugin, PluginError, Result};
use omp_plugin_host::HostPlugin;
use proto::{Hello, ROLE_DEVICE, ROLE_PROGRAM};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

/// Variables an MPI launcher sets in every process it starts (Open MPI, PMI-1/2 of MPICH's
/// Hydra and Slurm, PMIx).
pub const LAUNCHER_VARS: [&str; 4] = ["OMPI_COMM_WORLD_SIZE", "PMI_RANK", "PMI_SIZE", "PMIX_RANK"];

/// How long the program's rank waits for every rank of the job to introduce itself.
const JOIN_LIMIT: Duration = Duration::from_secs(60);

/// The plugin: the devices of every device rank of the job.
pub struct MpiPlugin {
    launched: bool,
    /// `LIBOMPTARGET_INFO` has the data-transfer bit (0x20).
    info: bool,
    /// The MPI whose launcher started the program, tried first.
    flavor: omp_mpi::Flavor,
    state: OnceLock<State>,
}

enum State {
    /// No MPI devices, and why (`None`: not started under MPI, nothing to say).
    Off(Option<String>),
    On {
        link: Arc<Link>,
        devices: Vec<(usize, u32)>,
    },
}

/// The link, for the exit handler.
static LINK: OnceLock<Arc<Link>> = OnceLock::new();

extern "C" fn shutdown_at_exit() {
    if let Some(link) = LINK.get() {
        let _ = std::panic::catch_unwind(|| link.shutdown());
    }
}

impl MpiPlugin {
    /// Reads the launcher's variables through `get` (the process environment);
    /// `LIBOMPTARGET_MPI=0` turns MPI devices off.
    pub fn from_env(get: impl Fn(&str) -> Option<String>) -> Self {
        let off = get("LIBOMPTARGET_MPI").is_some_and(|v| v == "0");
        let launched = !off && LAUNCHER_VARS.iter().any(|k| get(k).is_some());
        let info =
            get("LIBOMPTARGET_INFO").and_then(|v| info_bits(&v)).is_some_and(|bits| bits & INFO_DATA_TRANSFER != 0);
        MpiPlugin { launched, info, flavor: omp_mpi::Mpi::launcher(&get), state: OnceLock::new() }
    }

    fn state(&self) -> &State {
        self.state.get_or_init(|| if self.launched { start(self.flavor, self.info) } else { State::Off(None) })
    }
}

/// `LIBOMPTARGET_INFO`'s data-transfer bit.
const INFO_DATA_TRANSFER: u64 = 0x20;

/// `LIBOMPTARGET_INFO` as the runtime reads it: decimal, `0x` hexadecimal, or negative (`-1`:
/// every bit).
fn info_bits(v: &str) -> Option<u64> {
    let v = v.trim();
    if let Some(hex) = v.strip_prefix("0x").or_else(|| v.strip_prefix("0X")) {
        return u64::from_str_radix(hex, 16).ok();
    }
    v.parse::<i64>().ok().map(|n| n as u64)
}

/// Starts MPI in the program's rank and learns the job's device ranks.
fn start(flavor: omp_mpi::Flavor, info: bool) -> State {
    if omp_mpi::already_loaded() {
        return State::Off(Some(
            "this program uses MPI itself: MPI devices are off (its MPI_Init must be the only one; docs/cluster.md)"
                .into(),
        ));
    }
    let mpi = match omp_mpi::Mpi::load(flavor) {
        Ok(m) => m,
        Err(e) => return State::Off(Some(format!("started under MPI, but {e}"))),
    };
    // Open MPI would install handlers for SIGSEGV, SIGABRT, ... in the program, which never
    // asked for MPI: a failed assert would print Open MPI's backtrace. (Set before MPI_Init,
    // while the runtime starts; a value the user set is kept.)
    if mpi.flavor() == omp_mpi::Flavor::OpenMpi && std::env::var_os("OMPI_MCA_opal_signal").is_none() {
        std::env::set_var("OMPI_MCA_opal_signal", "");
    }
    if let Err(e) = mpi.init() {
        return State::Off(Some(e));
    }
    let me = mpi.rank().unwrap_or(-1);
    let hellos = match proto::exchange(&mpi, &Hello::me(ROLE_PROGRAM, 0), JOIN_LIMIT) {
        Ok(h) => h,
        Err(e) => {
            let m = format!("{e}: no MPI devices (are the other ranks offload-mpi-device?)");
            eprintln!("omptarget warning: {m}");
            return State::Off(Some(m));
        }
    };
    let programs = hellos.iter().filter(|h| h.as_ref().is_some_and(|h| h.role == ROLE_PROGRAM)).count();
    let mut ranks = Vec::new();
    let mut why = None;
    for (r, h) in hellos.iter().enumerate() {
        let Some(h) = h.as_ref().filter(|h| h.role == ROLE_DEVICE) else { continue };
        if !h.matches_us() {
            let m = format!(
                "MPI device rank {r} on {} runs offload-mpi-device {} (protocol {}), this runtime is {} (protocol \
                 {}): they must be the same build; rank {r} offers no devices",
                h.host,
                h.version,
                h.protocol,
                proto::VERSION,
                proto::PROTOCOL
            );
            eprintln!("omptarget warning: {m}");
            why = Some(m);
            continue;
        }
        ranks.push(Rank { rank: r as i32, host: h.host.clone(), devices: h.devices });
    }
    // Where the device ranks on this machine run: a bound caller may keep its CPU while it
    // waits for them when none of them runs there (keep.rs).
    let me_index = usize::try_from(me).unwrap_or(usize::MAX);
    keep::set_peer_cpus(proto::cpus_here(&hellos, me_index, |h| h.role == ROLE_DEVICE));
    let every_device_rank: Vec<i32> = (0..hellos.len())
        .filter(|&r| hellos[r].as_ref().is_some_and(|h| h.role == ROLE_DEVICE))
        .map(|r| r as i32)
        .collect();
    if programs != 1 {
        let m = format!(
            "this job has {programs} program ranks; MPI devices need exactly one: `mpirun -np 1 ./program : -np K \
             offload-mpi-device` (docs/cluster.md)"
        );
        if me == 0 {
            eprintln!("omptarget warning: {m}");
        }
        ranks.clear();
        why = Some(m);
    } else if every_device_rank.is_empty() {
        let m = format!(
            "this program runs under MPI ({} rank{}) but no rank runs offload-mpi-device: no MPI devices (start them \
             as `mpirun -np 1 ./program : -np K offload-mpi-device`, docs/cluster.md)",
            hellos.len(),
            if hellos.len() == 1 { "" } else { "s" }
        );
        eprintln!("omptarget warning: {m}");
        why = Some(m);
    }
    // Every device rank hears the shutdown (and MPI is finalised) at exit, also those
    // that offer nothing.
    let link = match Link::start(mpi, ranks.clone(), every_device_rank, info) {
        Ok(l) => Arc::new(l),
        Err(e) => return State::Off(Some(format!("cannot start the MPI thread: {e}"))),
    };
    if LINK.set(link.clone()).is_ok() {
        // SAFETY: atexit takes a plain `extern "C" fn()` that lives as long as the program.
        unsafe { libc::atexit(shutdown_at_exit) };
    }
    let devices: Vec<(usize, u32)> =
        ranks.iter().enumerate().flat_map(|(i, r)| (0..r.devices).map(move |d| (i, d))).collect();
    if devices.is_empty() {
        return State::Off(why);
    }
    State::On { link, devices }
}

impl Plugin for MpiPlugin {
    fn name(&self) -> &str {
        "x86_64 (MPI)"
    }
    fn device_count(&self) -> usize {
        match self.state() {
            State::On { devices, .. } => devices.len(),
            State::Off(_) => 0,
        }
    }
    fn is_compatible(&self, image: &[u8], triple: Option<&str>) -> bool {
        self.launched && HostPlugin.is_compatible(image, triple)
    }
    fn open_device(&self, index: usize) -> Result<Box<dyn Device>> {
        match self.state() {
            State::On { link, devices } => {
                let &(rank, local) =
                    devices.get(index).ok_or_else(|| PluginError::failed(format!("no MPI device {index}")))?;
                Ok(Box::new(MpiDevice { link: link.clone(), rank: link.ranks[rank].clone(), index: local }))
            }
            State::Off(_) => Err(PluginError::failed(format!("no MPI device {index}"))),
        }
    }
    fn unavailable(&self) -> Option<String> {
        match self.state() {
            State::Off(why) => why.clone(),
            State::On { .. } => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_program_not_started_under_mpi_loads_nothing() {
        let p = MpiPlugin::from_env(|_| None);
        assert_eq!(p.device_count(), 0);
        assert_eq!(p.unavailable(), None);
        assert!(!omp_mpi::already_loaded());
        assert!(!p.is_compatible(b"\x7fELF", None));
        let off = MpiPlugin::from_env(|k| match k {
            "OMPI_COMM_WORLD_SIZE" => Some("2".into()),
            "LIBOMPTARGET_MPI" => Some("0".into()),
            _ => None,
        });
        assert_eq!(off.device_count(), 0);
        assert!(!omp_mpi::already_loaded());
    }

    #[test]
    fn the_info_data_transfer_bit_is_read_as_the_runtime_reads_it() {
        let info = |v: &'static str| MpiPlugin::from_env(move |k| (k == "LIBOMPTARGET_INFO").then(|| v.into())).info;
        assert!(info("0x20") && info("32") && info("-1") && info("63"));
        assert!(!info("0x1f") && !info("16") && !info("0"));
    }
}
