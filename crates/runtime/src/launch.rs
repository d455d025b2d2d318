//! `#pragma omp target`: map the data, build the kernel's arguments, launch, unmap.

use crate::data::{ConstructState, MapArgs, MapError};
use crate::device::{DeviceError, LostWhile};
use crate::error::{diagnostic_display, report, Diagnostic, Lines};
use crate::map_type::{self as mt, has, member_of};
use crate::table::Lookup;
use crate::trace::Event;
use crate::{info, DeviceCtx, Loc, Runtime};
use omp_plugin::{AllocKind, ImageId, LaunchConfig};
use omp_sync::Mutex;
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

/// One kernel launch, unpacked from `KernelArgsTy`.
pub struct KernelLaunch<'a> {
    /// `KernelArgsTy::Version`; 3 and later pass the launch environment (`dyn_ptr`).
    pub version: u32,
    pub args: MapArgs<'a>,
    pub num_teams: u32,
    pub thread_limit: u32,
    pub tripcount: u64,
    /// A `nowait` construct (read by spreading only: `LIBOMPTARGET_SPREAD`).
    pub nowait: bool,
    /// The second and third dimensions of `num_teams` and `thread_limit` (0: unspecified).
    pub teams_yz: [u32; 2],
    pub threads_yz: [u32; 2],
    /// Dynamic group memory the construct asked for (`ompx_dyn_cgroup_mem`).
    pub dyn_group_mem: u32,
}

#[cfg(test)]
impl<'a> KernelLaunch<'a> {
    /// A blocking launch of one team of one thread over `args` (for tests).
    pub(crate) fn one_thread(args: MapArgs<'a>) -> Self {
        KernelLaunch {
            version: 3,
            args,
            num_teams: 1,
            thread_limit: 1,
            tripcount: 0,
            nowait: false,
            teams_yz: [0; 2],
            threads_yz: [0; 2],
            dyn_group_mem: 0,
        }
    }
}

/// What `__tgt_target_kernel` returns.
pub const OFFLOAD_SUCCESS: i32 = 0;
/// Tells the caller to run the host version of the region.
pub const OFFLOAD_FAIL: i32 = -1;

/// Why a `target` region failed on its device. Small: what only a failure needs (names,
/// places) is boxed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LaunchError {
    /// No image on the device provides the region's kernel (`host_ptr`: its region id).
    NoKernel { host_ptr: usize },
    /// Mapping the region's data before the launch failed.
    MapBefore { source: MapError, region: Box<FailedRegion> },
    /// Building the kernel's arguments failed (a firstprivate's or a member pointer's copy).
    Arguments(MapError),
    /// Device memory for a firstprivate could not be allocated.
    Firstprivate(Box<DeviceError>),
    /// The kernel failed.
    Kernel(Box<FailedKernel>),
    /// Copying the region's data back after the launch failed.
    MapAfter { source: MapError, region: Box<FailedRegion> },
}

/// Which region failed, where (`at`: `at file:line:col `, or empty when unknown).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FailedRegion {
    pub at: String,
    pub kernel: String,
    pub device: i32,
}

/// A kernel that failed, at `place` (`file:line:col`, or as near as is known).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FailedKernel {
    pub name: String,
    pub place: String,
    pub source: DeviceError,
}

impl From<MapError> for LaunchError {
    fn from(e: MapError) -> Self {
        LaunchError::Arguments(e)
    }
}

impl FailedRegion {
    fn write_lines(&self, out: &mut Lines<'_>, step: &str) -> fmt::Result {
        let FailedRegion { at, kernel, device } = self;
        out.error(format_args!("target region {at}(kernel {kernel}, device {device}) failed while {step}"))
    }
}

impl Diagnostic for LaunchError {
    fn write_lines(&self, out: &mut Lines<'_>) -> fmt::Result {
        match self {
            LaunchError::NoKernel { host_ptr } => {
                out.error(format_args!("Host ptr 0x{host_ptr:016x} does not have a matching target pointer."))
            }
            LaunchError::MapBefore { source, region } => {
                source.write_lines(out)?;
                out.error(format_args!("Call to targetDataBegin failed, abort target."))?;
                out.error(format_args!("Failed to process data before launching the kernel."))?;
                region.write_lines(out, "mapping its data before the launch")
            }
            LaunchError::Arguments(source) => source.write_lines(out),
            LaunchError::Firstprivate(source) => {
                out.error(format_args!("Data allocation for firstprivate failed: {source}"))?;
                source.write_lost_during_op(out)
            }
            LaunchError::Kernel(k) => {
                let FailedKernel { name, place, source } = &**k;
                out.error(format_args!("Kernel {name} at {place} failed: {source}"))?;
                source.write_lost(out, format_args!("running kernel {name} at {place}"))
            }
            LaunchError::MapAfter { source, region } => {
                source.write_lines(out)?;
                out.error(format_args!("Call to targetDataEnd failed, abort target."))?;
                out.error(format_args!("Failed to process data after launching the kernel."))?;
                region.write_lines(out, "copying its data back after the launch")
            }
        }
    }
}

/// A region of an unregistered binary, skipped (the program goes on): `first` adds why,
/// once per process.
struct SkippedRegion {
    loc: Loc,
    first: bool,
}

impl Diagnostic for SkippedRegion {
    fn write_lines(&self, out: &mut Lines<'_>) -> fmt::Result {
        let why = if self.first {
            " (the program is exiting or its library was closed) while the region was still pending; wait for nowait target tasks (taskwait) before returning from main or closing the library"
        } else {
            ""
        };
        out.error(format_args!("target region at {} skipped: its binary was unregistered{why}", self.loc.parse()))
    }
}

/// An image that could not be unloaded (the program goes on).
struct UnloadFailed(i32, DeviceError);

impl Diagnostic for UnloadFailed {
    fn write_lines(&self, out: &mut Lines<'_>) -> fmt::Result {
        out.error(format_args!("device {}: {}", self.0, self.1))?;
        self.1.write_lost_during_op(out)
    }
}

diagnostic_display!(LaunchError);

impl Runtime {
    /// A `target` region on a device: map, launch, unmap.
    #[link_section = ".text.hot.omp_launch"]
    pub(crate) fn target(
        &self,
        dev: &DeviceCtx,
        loc: Loc,
        host_ptr: usize,
        launch: &mut KernelLaunch,
    ) -> Result<(), LaunchError> {
        let _launching = self.in_flight.enter();
        let Some(kernel) = dev.kernel(host_ptr) else {
            if self.registry.read().retired.contains(&host_ptr) {
                static EXPLAINED: AtomicBool = AtomicBool::new(false);
                // Not a failure: the program goes on, so it is said here.
                report(&SkippedRegion { loc, first: !EXPLAINED.swap(true, Ordering::Relaxed) });
                return Ok(());
            }
            return Err(LaunchError::NoKernel { host_ptr });
        };
        let n = launch.args.len();
        let mut buffers = LaunchBuffers::take();
        let LaunchBuffers { tgt_args, privates, state } = &mut *buffers;
        // The host values behind the arguments are recorded only for observers (no
        // allocation on an unobserved launch).
        let mut host_args: Vec<usize> = Vec::new();
        let record_host = self.observing();
        let result = (|| -> Result<(), LaunchError> {
            if n > 0 {
                if let Err(source) = self.data_begin(dev, &mut launch.args, false, state) {
                    return Err(LaunchError::MapBefore { source, region: self.failed_region(dev, loc, host_ptr) });
                }
                self.kernel_arguments(
                    dev,
                    loc,
                    host_ptr,
                    &launch.args,
                    tgt_args,
                    record_host.then_some(&mut host_args),
                    privates,
                )?;
            }
            let config = LaunchConfig {
                num_teams: [launch.num_teams, launch.teams_yz[0], launch.teams_yz[1]],
                thread_limit: [launch.thread_limit, launch.threads_yz[0], launch.threads_yz[1]],
                tripcount: launch.tripcount,
                dyn_group_mem: launch.dyn_group_mem,
                with_dyn_ptr: launch.version >= 3,
            };
            let observing = self.observing();
            let name = if observing {
                self.kernel_name(host_ptr).unwrap_or_else(|| format!("0x{host_ptr:x}"))
            } else {
                String::new()
            };
            // A device that decides blocks and threads itself (a GPU) says what it will run.
            let shape = if observing { dev.launch_shape(kernel, &config) } else { None };
            let kernel_event = |done| Event::Kernel {
                device: dev.id,
                kernel: &name,
                loc,
                teams: shape.map_or(launch.num_teams, |s| s.blocks[0]),
                threads: shape.map_or(launch.thread_limit, |s| s.threads[0]),
                shape,
                args: tgt_args,
                host_args: &host_args,
                clang19: self.clang19_programs_only(),
                done,
            };
            // SAFETY: `kernel` was resolved on this device from the image's offload entry, and
            // `tgt_args` are what the compiler's argument arrays map to on this device.
            unsafe { dev.launch(self, kernel, tgt_args, &config, kernel_event) }.map_err(|source| {
                let name = self.kernel_name(host_ptr).unwrap_or_default();
                let place = construct_place(loc, &name, &launch.args);
                LaunchError::Kernel(Box::new(FailedKernel { name, place, source }))
            })?;
            if n > 0 {
                if let Err(source) = self.data_end(dev, &mut launch.args, false) {
                    return Err(LaunchError::MapAfter { source, region: self.failed_region(dev, loc, host_ptr) });
                }
            }
            Ok(())
        })();
        for p in privates.drain(..) {
            if let Err(e) = dev.free_sized(p.0, p.1, AllocKind::Default) {
                // The region's outcome does not change: a lost device is said here.
                report(&LostWhile(&e));
            }
        }
        buffers.give_back();
        result
    }

    /// A pointer argument that points nowhere on the device (the runtime documentation's
    /// `sum` example without `map(to: A[0:N])`); INFO 0x40 explains it.
    fn unmapped_pointer(&self, dev: &DeviceCtx, loc: Loc, host_ptr: usize, var: &str, addr: usize) {
        if !self.observing() {
            return;
        }
        let kernel = self.kernel_name(host_ptr).unwrap_or_default();
        self.emit(&Event::UnmappedPointer {
            device: dev.id,
            loc,
            kernel: &kernel,
            var,
            addr,
            accessible: dev.is_accessible(addr, 1),
        });
    }

    /// Which kernel failed, and where (for the line that names the failed step).
    fn failed_region(&self, dev: &DeviceCtx, loc: Loc, host_ptr: usize) -> Box<FailedRegion> {
        let kernel = self.kernel_name(host_ptr).unwrap_or_else(|| format!("0x{host_ptr:x}"));
        let l = loc.parse();
        let at = if l.is_known() { format!("at {l} ") } else { String::new() };
        Box::new(FailedRegion { at, kernel, device: dev.id })
    }

    /// Builds the kernel's argument vector from the TARGET_PARAM entries, and applies
    /// lambda-capture fix-ups.
    #[allow(clippy::too_many_arguments)]
    fn kernel_arguments(
        &self,
        dev: &DeviceCtx,
        loc: Loc,
        host_ptr: usize,
        args: &MapArgs,
        out: &mut Vec<usize>,
        mut host_out: Option<&mut Vec<usize>>,
        privates: &mut Vec<(usize, usize)>,
    ) -> Result<(), LaunchError> {
        let n = args.len();
        for i in 0..n {
            let ty = args.types[i];
            let begin = args.begins[i];
            let base = args.bases[i];
            if !has(ty, mt::TARGET_PARAM) {
                if has(ty, mt::LITERAL | mt::PTR_AND_OBJ | mt::IMPLICIT) {
                    if let Some(parent) = member_of(ty).filter(|&p| p < i && has(args.types[p], mt::TARGET_PARAM)) {
                        // The parent's argument value: every TARGET_PARAM entry before it
                        // pushed exactly one.
                        let parent_val =
                            out[args.types[..parent].iter().filter(|&&t| has(t, mt::TARGET_PARAM)).count()];
                        let field = parent_val + base.wrapping_sub(args.begins[parent]);
                        let table = dev.lock_table();
                        if let Some(k) = table.lookup(begin, args.sizes[i].max(0) as usize).key() {
                            let dev_ptr = table.get(k).expect("key").translate(begin);
                            drop(table);
                            // SAFETY: `dev_ptr` is a local, 8 readable bytes.
                            unsafe {
                                self.submit(
                                    dev,
                                    field,
                                    &dev_ptr as *const usize as usize,
                                    std::mem::size_of::<usize>(),
                                    crate::MapName::NONE,
                                )
                            }?;
                        }
                    }
                }
                continue;
            }
            let (value, host_value) = if has(ty, mt::LITERAL) {
                (base, base)
            } else if has(ty, mt::PRIVATE) {
                let size = args.sizes[i].max(0) as usize;
                let storage =
                    dev.alloc(size.max(1), AllocKind::Default).map_err(|e| LaunchError::Firstprivate(Box::new(e)))?;
                privates.push((storage, size.max(1)));
                if has(ty, mt::TO) && size > 0 {
                    // SAFETY: a firstprivate's (begin, size) is the program's variable, named
                    // by the construct and alive for it.
                    unsafe { self.submit(dev, storage, begin, size, args.name(i)) }?;
                }
                (storage.wrapping_add(base.wrapping_sub(begin)), base)
            } else {
                let hp_base = if has(ty, mt::PTR_AND_OBJ) {
                    // SAFETY: a PTR_AND_OBJ base is the address of the program's pointer
                    // variable, named by the map clause and alive for the construct.
                    unsafe { omp_plugin::host_memory::read_ptr(base) }
                } else {
                    base
                };
                let table = dev.lock_table();
                let found = match table.lookup(begin, args.sizes[i].max(0) as usize) {
                    Lookup::Contained(k) | Lookup::Extends(k) => Some(table.get(k).expect("key").translate(begin)),
                    Lookup::NotFound => None,
                };
                drop(table);
                if found.is_none() && begin != 0 {
                    self.unmapped_pointer(dev, loc, host_ptr, info::var_name(args.name(i)), begin);
                }
                (found.unwrap_or(begin).wrapping_add(hp_base.wrapping_sub(begin)), hp_base)
            };
            out.push(value);
            if let Some(h) = host_out.as_deref_mut() {
                h.push(host_value);
            }
        }
        Ok(())
    }

    /// The device symbol name of a kernel, from the registered entries.
    fn kernel_name(&self, host_ptr: usize) -> Option<String> {
        let reg = self.registry.read();
        reg.descs
            .iter()
            .flat_map(|d| d.entries.iter())
            .find(|e| e.addr as usize == host_ptr && e.size == 0)
            .and_then(|e| info::map_name(crate::registry::entry_name(e)))
            .map(str::to_string)
    }
}

/// `file:line:col` of a construct. Where the compiler recorded none (flang gives target
/// regions no line), `file:line` from the kernel's name (`…_l9`) and the source file its map
/// names mention, as the mapping checker says it; else the location as it is.
fn construct_place(loc: Loc, kernel: &str, args: &MapArgs) -> String {
    let l = loc.parse();
    if l.is_known() {
        return l.to_string();
    }
    let source = |f: &&str| {
        let f = f.to_ascii_lowercase();
        [".c", ".cc", ".cpp", ".cxx", ".f", ".f90", ".f95", ".f03", ".f08"].iter().any(|e| f.ends_with(e))
    };
    let line = kernel.rsplit_once("_l").and_then(|(_, n)| n.parse::<u32>().ok());
    let file = (0..args.len())
        .filter_map(|i| info::map_name(args.name(i)))
        .map(omp_format::SourceLocation::from_map_name)
        .flat_map(|m| [m.file, m.name])
        .find(source);
    match (line, file) {
        (Some(line), Some(f)) => format!("{}:{line}", f.rsplit('/').next().unwrap_or(f)),
        _ => l.to_string(),
    }
}

/// What a launch needs besides its arguments, kept per thread from one launch to the next so
/// that a launch allocates nothing once its thread has launched before.
#[derive(Default)]
struct LaunchBuffers {
    /// The kernel's arguments.
    tgt_args: Vec<usize>,
    /// Device copies of firstprivates (address, size), freed after the kernel.
    privates: Vec<(usize, usize)>,
    state: ConstructState,
}

std::thread_local! {
    static LAUNCH_BUFFERS: std::cell::Cell<Option<Box<LaunchBuffers>>> = const { std::cell::Cell::new(None) };
}

impl LaunchBuffers {
    /// This thread's buffers, or new ones (first launch, or a launch inside a launch).
    #[link_section = ".text.hot.omp_launch"]
    fn take() -> Box<Self> {
        LAUNCH_BUFFERS.try_with(std::cell::Cell::take).ok().flatten().unwrap_or_default()
    }

    /// Empties the buffers and keeps them for the thread's next launch (unless large).
    #[link_section = ".text.hot.omp_launch"]
    fn give_back(mut self: Box<Self>) {
        self.tgt_args.clear();
        self.privates.clear();
        self.state.clear();
        if self.tgt_args.capacity() <= 1024 && self.privates.capacity() <= 1024 {
            let _ = LAUNCH_BUFFERS.try_with(|b| b.set(Some(self)));
        }
    }
}

/// Kernel launches in progress, and the images of unregistered binaries whose unloading
/// waits for them to end (a nowait task may still run a kernel of a binary whose program is
/// exiting or whose library was closed). Nothing waits: the last launch to end unloads.
#[derive(Default)]
pub struct InFlight {
    launches: AtomicUsize,
    /// `deferred` is not empty (spares the lock at the end of every launch).
    pending: AtomicBool,
    deferred: Mutex<Vec<(Arc<DeviceCtx>, ImageId)>>,
}

/// One launch in progress; see [`InFlight::enter`].
pub(crate) struct Launching<'a>(&'a InFlight);

impl Drop for Launching<'_> {
    fn drop(&mut self) {
        if self.0.launches.fetch_sub(1, Ordering::SeqCst) == 1 && self.0.pending.load(Ordering::SeqCst) {
            self.0.unload_deferred();
        }
    }
}

impl InFlight {
    /// Counts a launch until the guard drops; taken before its kernel is looked up.
    pub(crate) fn enter(&self) -> Launching<'_> {
        self.launches.fetch_add(1, Ordering::SeqCst);
        Launching(self)
    }

    /// Unloads `image` now, or when the last launch in progress ends.
    pub(crate) fn unload_when_idle(&self, dev: Arc<DeviceCtx>, image: ImageId) {
        self.deferred.lock().push((dev, image));
        self.pending.store(true, Ordering::SeqCst);
        if self.launches.load(Ordering::SeqCst) == 0 {
            self.unload_deferred();
        }
    }

    fn unload_deferred(&self) {
        let images = {
            let mut deferred = self.deferred.lock();
            self.pending.store(false, Ordering::SeqCst);
            std::mem::take(&mut *deferred)
        };
        for (dev, image) in images {
            if let Err(e) = dev.unload_image(image) {
                report(&UnloadFailed(dev.id, e));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_host::Host;
    use crate::{Config, Descriptor};
    use omp_plugin::mock::{MockPlugin, SharedMock};

    #[test]
    fn a_region_whose_kernel_no_image_provides_is_a_no_kernel_value() {
        let rt = Runtime::new(Config::default(), Box::new(Host), vec![Box::new(MockPlugin(SharedMock::default()))]);
        // SAFETY: no entries, so nothing of the program's to vouch for.
        unsafe {
            rt.register_lib(Descriptor {
                key: 1,
                images: vec![crate::BinaryImage { bytes: b"MOCK image".as_slice().into() }],
                entries: Vec::new(),
                layout: omp_format::EntryLayout::V1,
            })
        };
        let dev = rt.device(0).expect("the mock device");
        let (mut bases, begins, sizes, types) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        // SAFETY: no entries.
        let args = unsafe { MapArgs::new(&mut bases, &begins, &sizes, &types, None, None) };
        let mut launch = KernelLaunch::one_thread(args);
        let launched = rt.target(&dev, Loc::NONE, 0x1234, &mut launch);
        assert_eq!(launched, Err(LaunchError::NoKernel { host_ptr: 0x1234 }));
        assert_eq!(
            launched.unwrap_err().to_string(),
            "Host ptr 0x0000000000001234 does not have a matching target pointer."
        );
        assert!(std::mem::size_of::<LaunchError>() <= 48, "a launch's error stays small");
    }
}
