//! Composition, decided in one place: which plugins this runtime has and in what order,
//! the names (UIDs) its devices go by, and which compiler's ABI a registered binary follows.
//! The ABI shim only calls in here.
//!
//! Plugins are linked in. One that needs a system library the machine may lack (a GPU
//! driver, an MPI library) `dlopen`s that library when it is asked for its devices and, when
//! the library is missing, has none and says why only under INFO/DEBUG
//! ([`omp_plugin::Plugin::unavailable`]): `libomptarget.so` gains no `DT_NEEDED`, and a
//! machine without the library pays nothing (docs/ARCHITECTURE.md, "Plugins").

use crate::config::{CheckMode, Config};
use crate::registry::BinaryImage;
use omp_format::{EntryLayout, OffloadEntry};
use omp_plugin::Plugin;

/// The plugins, in device-numbering order: the local devices first (the host's, or the
/// same in a worker process with `LIBOMPTARGET_ISOLATE=1` or `LIBOMPTARGET_CHECK`), then
/// the CUDA GPUs (for a program with an nvptx64 image; docs/cuda.md), then the devices of an
/// MPI job's device ranks (docs/cluster.md), then each server in `LIBOMPTARGET_RPC_ADDRESS`.
/// Plugins that need a system library come before remote ones (a machine without the library,
/// or a program not started under MPI, has none of their devices, so no existing
/// configuration's numbers move), and MPI devices are the job's own, which `OMP_DEFAULT_DEVICE`
/// and device numbers in code name the same way on every run. With
/// `LIBOMPTARGET_MPI_DEVICES_FIRST=1` the MPI devices come first instead, so that a program
/// that names no device runs its target regions on a device rank.
pub fn plugins(config: &Config) -> Vec<Box<dyn Plugin>> {
    let checking = config.check != CheckMode::Off;
    // LIBOMPTARGET_CHECK implies isolation (unless LIBOMPTARGET_ISOLATE=0), in check mode.
    let isolated = config.isolate.unwrap_or(checking);
    let local: Box<dyn Plugin> = if isolated && checking {
        let plugin = omp_plugin_isolate::IsolatePlugin::new().checking().recording(|k| config.var(k));
        Box::new(if config.check.gpu() { plugin.measuring_gpu_limits() } else { plugin })
    } else if isolated {
        Box::new(omp_plugin_isolate::IsolatePlugin::new().recording(|k| config.var(k)))
    } else {
        Box::new(omp_plugin_host::HostPlugin)
    };
    #[allow(unused_mut)]
    let mut plugins = vec![local];
    #[cfg(feature = "cuda")]
    plugins.push(Box::new(omp_plugin_cuda::CudaPlugin::new(|k| config.var(k))));
    // The launcher's variables (OMPI_COMM_WORLD_SIZE, PMI_RANK, ...) are not the runtime's
    // settings, and only say whether this process is an MPI rank.
    let mpi = omp_plugin_mpi::MpiPlugin::from_env(|k| config.var(k).or_else(|| std::env::var(k).ok()));
    if config.mpi_devices_first {
        plugins.insert(0, Box::new(mpi));
    } else {
        plugins.push(Box::new(mpi));
    }
    #[cfg(feature = "remote")]
    plugins.extend(omp_plugin_remote::plugins(|k| config.var(k)).into_iter().map(|p| Box::new(p) as Box<dyn Plugin>));
    plugins
}

/// The UID of offload device `id` (`omp_get_uid_from_device`), as LLVM 22 names the host
/// plugin's devices; the initial device is [`HOST_UID`].
pub fn device_uid(id: i32) -> String {
    format!("x86_64-{id}")
}

/// The UID of the initial device.
pub const HOST_UID: &str = "HOST";

/// The entry layout, and so the compiler (clang 19 or 22), a binary follows. Its entry table
/// says so; a program without kernels or globals has an empty table, which says nothing:
/// then its device image's dependency on `libomptarget.so.NN` tells.
pub fn entry_layout(table_layout: EntryLayout, entries: &[OffloadEntry], images: &[BinaryImage]) -> EntryLayout {
    if entries.is_empty() && images.iter().any(|i| contains(&i.bytes, b"libomptarget.so.19")) {
        EntryLayout::Legacy
    } else {
        table_layout
    }
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_table_takes_the_compiler_from_the_image() {
        let v19 = BinaryImage { bytes: b"\x7fELF...libomptarget.so.19\0".to_vec().into() };
        let v22 = BinaryImage { bytes: b"\x7fELF...libomptarget.so.22\0".to_vec().into() };
        assert_eq!(entry_layout(EntryLayout::V1, &[], std::slice::from_ref(&v19)), EntryLayout::Legacy);
        assert_eq!(entry_layout(EntryLayout::V1, &[], std::slice::from_ref(&v22)), EntryLayout::V1);
    }

    #[test]
    fn isolation_follows_the_checker_unless_asked() {
        let names = |c: &Config| plugins(c).iter().map(|p| p.name().to_string()).collect::<Vec<_>>();
        let plain = Config::from_env(|_| None);
        assert_eq!(names(&plain)[0], "x86_64");
        let checking = Config::from_env(|k| (k == "LIBOMPTARGET_CHECK").then(|| "1".to_string()));
        assert_ne!(names(&checking)[0], "x86_64");
        let not_isolated = Config::from_env(|k| match k {
            "LIBOMPTARGET_CHECK" => Some("1".into()),
            "LIBOMPTARGET_ISOLATE" => Some("0".into()),
            _ => None,
        });
        assert_eq!(names(&not_isolated)[0], "x86_64");
    }

    #[test]
    fn mpi_devices_come_first_only_when_asked() {
        let names = |c: &Config| plugins(c).iter().map(|p| p.name().to_string()).collect::<Vec<_>>();
        let plain = names(&Config::from_env(|_| None));
        let mpi = |n: &[String]| n.iter().position(|p| p == "x86_64 (MPI)");
        assert_eq!(plain[0], "x86_64");
        assert!(mpi(&plain) > Some(0));
        let first = names(&Config::from_env(|k| (k == "LIBOMPTARGET_MPI_DEVICES_FIRST").then(|| "1".to_string())));
        assert_eq!(first[..2], ["x86_64 (MPI)", "x86_64"][..]);
        assert_eq!(first.len(), plain.len());
    }
}
