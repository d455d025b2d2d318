//! The construct-level entry points: a `target` region or a data directive, from device
//! selection through its begin and end events to the offload policy's verdict. The work
//! itself is in `launch.rs` (kernels) and `data.rs` (mapping).

use crate::data::{ConstructState, Directive, MapArgs};
use crate::error::{report, Abandoned};
use crate::launch::{KernelLaunch, OFFLOAD_FAIL, OFFLOAD_SUCCESS};
use crate::spread::Spread;
use crate::trace::{self, Event, TargetKind};
use crate::{DeviceCtx, Failed, Loc, Runtime, Target};

impl Runtime {
    /// `__tgt_target_kernel`. A failure is reported here: its step's lines, then (after the
    /// construct's end) the line that gives the region up.
    #[link_section = ".text.hot.omp_launch"]
    pub fn target_kernel(&self, loc: Loc, device_id: i64, host_ptr: usize, launch: &mut KernelLaunch) -> i32 {
        // Off, spreading costs this one test.
        if let Some(spread) = &self.spread {
            if launch.nowait && device_id == -1 {
                return self.target_kernel_spread(spread, loc, host_ptr, launch);
            }
        }
        let selected = self.check_device(device_id, loc);
        let dev = match selected {
            Ok(Target::Device(d)) => d,
            Ok(Target::Host) => return OFFLOAD_FAIL,
            Err(e) => {
                report(&e);
                self.handle_outcome(Err(Failed), loc);
                return OFFLOAD_FAIL;
            }
        };
        let scope = self.enter_construct(TargetKind::Target, dev.id, loc, "Entering OpenMP kernel", &launch.args);
        let outcome = self.target(&dev, loc, host_ptr, launch).map_err(|e| {
            report(&e);
            Failed
        });
        self.leave_construct(scope);
        if outcome.is_err() {
            report(&Abandoned::Target);
        }
        self.after_construct(&dev, loc);
        self.handle_outcome(outcome, loc);
        OFFLOAD_SUCCESS
    }

    /// A `nowait` region that names no device, under `LIBOMPTARGET_SPREAD`: placed by
    /// [`Runtime::place`] and run as if it named that device, counted in flight there
    /// until it ends. (Through [`Runtime::target_kernel`] again, not a second copy of the
    /// launch: a second caller kept the launch out of line and cost every launch.) When the
    /// default device cannot be used, its number goes the plain way, which says why.
    /// `nowait` is cleared first (spreading is all it is read for), so the region does not
    /// come back here: the default device's number is -1 when the program made the initial
    /// device its default, and that once recursed until the stack ran out.
    #[cold]
    #[inline(never)]
    fn target_kernel_spread(&self, spread: &Spread, loc: Loc, host_ptr: usize, launch: &mut KernelLaunch) -> i32 {
        launch.nowait = false;
        match self.place(spread, loc, host_ptr, &launch.args) {
            Some(placed) => match placed.home.clone() {
                Some(home) => self.target_carried(loc, host_ptr, launch, &placed, &home),
                None => self.target_kernel(loc, i64::from(placed.device.id), host_ptr, launch),
            },
            None => self.target_kernel(loc, self.resolve_device(-1), host_ptr, launch),
        }
    }

    /// Enters a construct: gives it an id, then announces its map arguments and its begin,
    /// so that every event of the construct, its arguments included, belongs to its id
    /// ([`trace::EventCx::construct`]). `None` when nobody observes.
    #[link_section = ".text.hot.omp_launch"]
    fn enter_construct(
        &self,
        kind: TargetKind,
        device: i32,
        loc: Loc,
        region: &str,
        args: &MapArgs,
    ) -> Option<ConstructScope> {
        if !self.observing() {
            return None;
        }
        let target_id = trace::next_id();
        let codeptr = trace::return_address();
        let prev = trace::enter_construct(target_id, codeptr);
        self.announce_args(device, region, loc, args);
        self.emit(&Event::Construct { kind, begin: true, device, loc, target_id, codeptr, time: None });
        let start = self.start_timer();
        Some(ConstructScope { kind, device, loc, target_id, codeptr, prev, start })
    }

    /// Leaves a construct with its end event.
    #[link_section = ".text.hot.omp_launch"]
    fn leave_construct(&self, scope: Option<ConstructScope>) {
        let Some(ConstructScope { kind, device, loc, target_id, codeptr, prev, start }) = scope else { return };
        let time = Self::stop_timer(start);
        self.emit(&Event::Construct { kind, begin: false, device, loc, target_id, codeptr, time });
        trace::leave_construct(prev);
    }

    /// A data directive (`target data` begin/end, `enter`/`exit data`, `update`), including
    /// device selection, INFO output and the outcome policy. A failure is reported here, as
    /// for a `target` region.
    pub fn data_directive(&self, loc: Loc, device_id: i64, args: &mut MapArgs, which: Directive, nowait: bool) {
        let dev = match self.check_device(device_id, loc) {
            Ok(crate::Target::Device(d)) => d,
            Ok(crate::Target::Host) => return,
            Err(e) => {
                report(&e);
                return self.handle_outcome(Err(Failed), loc);
            }
        };
        let region = match (which, nowait) {
            (Directive::Begin, false) => "Entering OpenMP data region with being_mapper",
            (Directive::Begin, true) => "Entering OpenMP data region with being_nowait_mapper",
            (Directive::End, false) => "Exiting OpenMP data region with end_mapper",
            (Directive::End, true) => "Exiting OpenMP data region with end_nowait_mapper",
            (Directive::Update, false) => "Updating data within the OpenMP data region with update_mapper",
            (Directive::Update, true) => "Updating data within the OpenMP data region with update_nowait_mapper",
        };
        let kind = match which {
            Directive::Begin => TargetKind::EnterData,
            Directive::End => TargetKind::ExitData,
            Directive::Update => TargetKind::Update,
        };
        let scope = self.enter_construct(kind, dev.id, loc, region, args);
        let outcome = match which {
            Directive::Begin => self.data_begin(&dev, args, false, &mut ConstructState::default()),
            Directive::End => self.data_end(&dev, args, false),
            Directive::Update => self.data_update(&dev, args),
        };
        let outcome = outcome.map_err(|e| {
            report(&e);
            Failed
        });
        self.leave_construct(scope);
        if outcome.is_err() {
            report(&Abandoned::Data(match which {
                Directive::Begin => "targetDataBegin",
                Directive::End => "targetDataEnd",
                Directive::Update => "targetDataUpdate",
            }));
        }
        self.after_construct(&dev, loc);
        self.handle_outcome(outcome, loc);
    }

    /// The mapping tables after every construct, for observers that show them (INFO 0x4).
    pub(crate) fn after_construct(&self, _dev: &DeviceCtx, loc: Loc) {
        self.announce_tables(loc, false);
    }

    /// Offers every device's mapping table to observers (built only if one looks).
    pub(crate) fn announce_tables(&self, loc: Loc, reverse: bool) {
        if !self.observing() {
            return;
        }
        let text = || {
            let l = loc.parse();
            let mut devices = self.devices();
            if reverse {
                devices.reverse();
            }
            devices.iter().map(|d| d.table_text(&l)).collect::<String>()
        };
        self.emit(&Event::MappingTables { tables: crate::trace::Lazy(&text) });
    }

    /// The construct's map arguments, as the compiler passed them (INFO 0x1 prints them).
    fn announce_args(&self, device: i32, region: &str, loc: Loc, args: &MapArgs) {
        self.emit(&Event::Arguments { device, region, loc, types: args.types, sizes: args.sizes, names: args.names });
    }
}

/// A construct entered while observers listen: what its end event needs.
struct ConstructScope {
    kind: TargetKind,
    device: i32,
    loc: Loc,
    target_id: u64,
    codeptr: usize,
    prev: (u64, usize),
    start: Option<std::time::Instant>,
}
