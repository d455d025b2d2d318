//! `#pragma omp target`: map the data, build the kernel's arguments, launch, unmap.

use crate::config::info_bits;
use crate::data::{ConstructState, MapArgs};
use crate::map_type::{self as mt, has, member_of};
use crate::table::Lookup;
use crate::trace::{self, TargetKind};
use crate::{info, DeviceCtx, Failed, Loc, Outcome, Runtime, Target};
use omp_plugin::{AllocKind, ImageId, LaunchConfig};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// One kernel launch, unpacked from `KernelArgsTy`.
pub struct KernelLaunch<'a> {
    /// `KernelArgsTy::Version`; 3 and later pass the launch environment (`dyn_ptr`).
    pub version: u32,
    pub args: MapArgs<'a>,
    pub num_teams: u32,
    pub thread_limit: u32,
    pub tripcount: u64,
    pub nowait: bool,
}

/// What `__tgt_target_kernel` returns.
pub const OFFLOAD_SUCCESS: i32 = 0;
/// Tells the caller to run the host version of the region.
pub const OFFLOAD_FAIL: i32 = -1;

impl Runtime {
    /// `__tgt_target_kernel`.
    pub fn target_kernel(&self, loc: Loc, device_id: i64, host_ptr: usize, launch: &mut KernelLaunch) -> i32 {
        let dev = match self.check_device(device_id, loc) {
            Ok(Target::Device(d)) => d,
            Ok(Target::Host) => return OFFLOAD_FAIL,
            Err(f) => {
                self.handle_outcome(Err(f), loc);
                return OFFLOAD_FAIL;
            }
        };
        if self.config.info_on(info_bits::KERNEL_ARGS) {
            self.print_args(dev.id, "Entering OpenMP kernel", loc, &launch.args);
        }
        let outcome = self.construct(TargetKind::Target, dev.id, loc, || self.target(&dev, loc, host_ptr, launch));
        if outcome.is_err() {
            info::error(format_args!("Executing target region abort target."));
        }
        self.after_construct(&dev, loc);
        self.handle_outcome(outcome, loc);
        OFFLOAD_SUCCESS
    }

    fn target(&self, dev: &DeviceCtx, loc: Loc, host_ptr: usize, launch: &mut KernelLaunch) -> Outcome {
        let _launching = self.in_flight.enter();
        let Some(kernel) = dev.kernel(host_ptr) else {
            if self.registry.read().unwrap().retired.contains(&host_ptr) {
                static EXPLAINED: AtomicBool = AtomicBool::new(false);
                let why = if EXPLAINED.swap(true, Ordering::Relaxed) {
                    ""
                } else {
                    " (the program is exiting or its library was closed) while the region was still pending; wait for nowait target tasks (taskwait) before returning from main or closing the library"
                };
                info::error(format_args!("target region at {} skipped: its binary was unregistered{why}", loc.parse()));
                return Ok(());
            }
            info::error(format_args!("Host ptr 0x{host_ptr:016x} does not have a matching target pointer."));
            return Err(Failed);
        };
        let n = launch.args.len();
        let mut privates: Vec<(usize, usize)> = Vec::new();
        let mut tgt_args: Vec<usize> = Vec::with_capacity(n);
        let result = (|| -> Outcome {
            if n > 0 {
                if self.data_begin(dev, &mut launch.args, false, &mut ConstructState::default()).is_err() {
                    info::error(format_args!("Call to targetDataBegin failed, abort target."));
                    info::error(format_args!("Failed to process data before launching the kernel."));
                    self.explain_kernel_failure(dev, loc, host_ptr, "mapping its data before the launch");
                    return Err(Failed);
                }
                self.kernel_arguments(dev, loc, host_ptr, &launch.args, &mut tgt_args, &mut privates)?;
            }
            if self.config.info_on(info_bits::PLUGIN_KERNEL) {
                let name = self.kernel_name(host_ptr).unwrap_or_else(|| format!("0x{host_ptr:x}"));
                let (teams, threads) = (launch.num_teams.max(1), launch.thread_limit.max(1));
                // LLVM 22 prints three-dimensional sizes; clang 19 programs get LLVM 19's line.
                let (teams, threads) = if self.clang19_programs_only() {
                    (teams.to_string(), threads.to_string())
                } else {
                    (format!("[{teams},1,1]"), format!("[{threads},1,1]"))
                };
                info::emit(&format!(
                    "\"PluginInterface\" device {} info: Launching kernel {name} with {teams} blocks and {threads} threads in Generic mode\n",
                    dev.id
                ));
            }
            if self.observed() {
                let (target_id, _) = trace::current();
                let op = trace::next_id();
                self.observe(|o| o.submit(target_id, op, launch.num_teams));
            }
            let config = LaunchConfig {
                num_teams: launch.num_teams,
                thread_limit: launch.thread_limit,
                with_dyn_ptr: launch.version >= 3,
            };
            let span = || crate::profile::Span {
                cat: crate::profile::Category::Kernel,
                name: self.kernel_name(host_ptr).unwrap_or_else(|| format!("0x{host_ptr:x}")),
                device: dev.id,
                bytes: 0,
                args: vec![
                    ("location", loc.parse().to_string()),
                    ("num_teams", launch.num_teams.to_string()),
                    ("thread_limit", launch.thread_limit.to_string()),
                    ("arguments", tgt_args.len().to_string()),
                ],
            };
            self.timed(span, || dev.dev.launch(kernel, &tgt_args, &config)).map_err(|e| {
                let name = self.kernel_name(host_ptr).unwrap_or_default();
                let l = loc.parse();
                info::error(format_args!("Kernel {name} at {l} failed: {e}"));
                Failed
            })?;
            if n > 0 && self.data_end(dev, &mut launch.args, false).is_err() {
                info::error(format_args!("Call to targetDataEnd failed, abort target."));
                info::error(format_args!("Failed to process data after launching the kernel."));
                self.explain_kernel_failure(dev, loc, host_ptr, "copying its data back after the launch");
                return Err(Failed);
            }
            Ok(())
        })();
        for p in privates {
            let _ = dev.free_sized(p.0, p.1, AllocKind::Default);
        }
        result
    }

    /// Builds the kernel's argument vector from the TARGET_PARAM entries, and applies
    /// lambda-capture fix-ups.
    /// INFO 0x40: a pointer argument that points nowhere on the device (the runtime
    /// documentation's `sum` example without `map(to: A[0:N])`).
    fn unmapped_pointer_note(&self, dev: &DeviceCtx, loc: Loc, host_ptr: usize, var: &str, addr: usize) {
        let kernel = self.kernel_name(host_ptr).unwrap_or_default();
        let why = if dev.dev.shares_host_address_space() {
            " (this works only because the device shares the host's memory: map the data it points to)"
        } else {
            ""
        };
        info::info(
            dev.id,
            format_args!(
                "{}: pointer {var} passed to kernel {kernel} holds host address 0x{addr:016x}, which is not mapped on device {}{why}",
                loc.parse(),
                dev.id
            ),
        );
    }

    /// One line that says which kernel failed, where, and in which step.
    fn explain_kernel_failure(&self, dev: &DeviceCtx, loc: Loc, host_ptr: usize, step: &str) {
        let name = self.kernel_name(host_ptr).unwrap_or_else(|| format!("0x{host_ptr:x}"));
        let l = loc.parse();
        let at = if l.is_known() { format!("at {l} ") } else { String::new() };
        info::error(format_args!("target region {at}(kernel {name}, device {}) failed while {step}", dev.id));
    }

    #[allow(clippy::too_many_arguments)]
    fn kernel_arguments(
        &self,
        dev: &DeviceCtx,
        loc: Loc,
        host_ptr: usize,
        args: &MapArgs,
        out: &mut Vec<usize>,
        privates: &mut Vec<(usize, usize)>,
    ) -> Outcome {
        let n = args.len();
        // Argument value per entry index, for lambda fix-ups that refer to their parent.
        let mut value_of = vec![None; n];
        for i in 0..n {
            let ty = args.types[i];
            let begin = args.begins[i];
            let base = args.bases[i];
            if !has(ty, mt::TARGET_PARAM) {
                if has(ty, mt::LITERAL | mt::PTR_AND_OBJ | mt::IMPLICIT) {
                    if let Some(parent_val) = member_of(ty).and_then(|p| value_of.get(p).copied().flatten()) {
                        let parent = member_of(ty).expect("checked");
                        let field = parent_val + base.wrapping_sub(args.begins[parent]);
                        let table = dev.lock_table();
                        if let Some(k) = table.lookup(begin, args.sizes[i].max(0) as usize).key() {
                            let dev_ptr = table.get(k).expect("key").translate(begin);
                            drop(table);
                            self.submit(
                                dev,
                                field,
                                &dev_ptr as *const usize as usize,
                                std::mem::size_of::<usize>(),
                                0,
                            )?;
                        }
                    }
                }
                continue;
            }
            let value = if has(ty, mt::LITERAL) {
                base
            } else if has(ty, mt::PRIVATE) {
                let size = args.sizes[i].max(0) as usize;
                let storage = dev.alloc(size.max(1), AllocKind::Default).map_err(|e| {
                    info::error(format_args!("Data allocation for firstprivate failed: {e}"));
                    Failed
                })?;
                privates.push((storage, size.max(1)));
                if has(ty, mt::TO) && size > 0 {
                    self.submit(dev, storage, begin, size, args.name(i))?;
                }
                storage.wrapping_add(base.wrapping_sub(begin))
            } else {
                let hp_base = if has(ty, mt::PTR_AND_OBJ) { omp_plugin::host_memory::read_ptr(base) } else { base };
                let table = dev.lock_table();
                let tgt_begin = match table.lookup(begin, args.sizes[i].max(0) as usize) {
                    Lookup::Contained(k) | Lookup::Extends(k) => table.get(k).expect("key").translate(begin),
                    Lookup::NotFound => {
                        if begin != 0 && self.config.info_on(info_bits::EMPTY_MAPPING) {
                            self.unmapped_pointer_note(dev, loc, host_ptr, info::var_name(args.name(i)), begin);
                        }
                        begin
                    }
                };
                tgt_begin.wrapping_add(hp_base.wrapping_sub(begin))
            };
            value_of[i] = Some(value);
            out.push(value);
        }
        Ok(())
    }

    /// The device symbol name of a kernel, from the registered entries.
    fn kernel_name(&self, host_ptr: usize) -> Option<String> {
        let reg = self.registry.read().unwrap();
        reg.descs
            .iter()
            .flat_map(|d| d.entries.iter())
            .find(|e| e.addr as usize == host_ptr && e.size == 0)
            .and_then(|e| omp_plugin::host_memory::c_str(e.name as usize))
            .map(str::to_string)
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
        self.deferred.lock().unwrap_or_else(|p| p.into_inner()).push((dev, image));
        self.pending.store(true, Ordering::SeqCst);
        if self.launches.load(Ordering::SeqCst) == 0 {
            self.unload_deferred();
        }
    }

    fn unload_deferred(&self) {
        let images = {
            let mut deferred = self.deferred.lock().unwrap_or_else(|p| p.into_inner());
            self.pending.store(false, Ordering::SeqCst);
            std::mem::take(&mut *deferred)
        };
        for (dev, image) in images {
            if let Err(e) = dev.dev.unload_image(image) {
                info::error(format_args!("device {}: {e}", dev.id));
            }
        }
    }
}
