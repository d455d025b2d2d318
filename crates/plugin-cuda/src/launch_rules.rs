//! How many blocks and threads a launch gets: LLVM's rules (`GenericKernelTy::getNumThreads`
//! and `getNumBlocks` of LLVM 19's plugin interface), as a pure function of the kernel's
//! environment, the device's limits and the construct's clauses.

use omp_plugin::{LaunchConfig, LaunchShape};

/// A kernel's execution mode, from its `<name>_kernel_environment` (`OMPTgtExecModeFlags`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExecMode {
    /// The main thread runs the region, workers wait for parallel regions (flag 1).
    Generic,
    /// Every thread runs the region (flag 2).
    Spmd,
    /// Generic code the compiler turned into SPMD (flags 1|2).
    GenericSpmd,
}

impl ExecMode {
    pub fn from_flags(flags: u8) -> ExecMode {
        match flags & 3 {
            1 => ExecMode::Generic,
            3 => ExecMode::GenericSpmd,
            _ => ExecMode::Spmd,
        }
    }

    /// The name LLVM prints (`getExecutionModeName`).
    pub fn name(self) -> &'static str {
        match self {
            ExecMode::Generic => "Generic",
            ExecMode::Spmd => "SPMD",
            ExecMode::GenericSpmd => "Generic-SPMD",
        }
    }
}

/// What the launch rules need of a kernel's environment (`ConfigurationEnvironmentTy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KernelEnv {
    pub mode: ExecMode,
    /// `MinThreads`/`MaxThreads` (`ompx_attribute` launch bounds); ≤ 0 when unset.
    pub min_threads: i32,
    pub max_threads: i32,
    /// Bytes per team of a teams reduction and the number of team slots in its buffer: a
    /// launch environment with a reduction buffer is passed when both are non-zero.
    pub reduction_data_size: u32,
    pub reduction_buffer_length: u32,
}

/// A kernel with no environment (`ompx_bare`, or a kernel not made by clang's OpenMP code
/// generation): LLVM launches it in SPMD mode with the clauses taken as given.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Kernel {
    pub env: Option<KernelEnv>,
}

/// The device's grid values (LLVM's `NVPTXGridValues`, capped by the device and the
/// environment).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GridLimits {
    /// Most blocks a launch gets (`GV_Max_Teams`: 65536, the device's grid size, `OMP_NUM_TEAMS`).
    pub block_limit: u32,
    /// Most threads per block (`GV_Max_WG_Size`: 1024, the device's block size,
    /// `OMP_TEAMS_THREAD_LIMIT`).
    pub thread_limit: u32,
    /// Blocks when nothing says otherwise (`GV_Default_Num_Teams`, 3200).
    pub default_blocks: u32,
    /// Threads when nothing says otherwise (`GV_Default_WG_Size`, 128).
    pub default_threads: u32,
    pub warp_size: u32,
    /// `LIBOMPTARGET_MIN_THREADS_FOR_LOW_TRIP_COUNT` (32).
    pub min_threads_for_low_trip_count: u32,
}

impl GridLimits {
    /// LLVM's values for NVIDIA GPUs, capped by what the device says it supports.
    pub fn nvptx(max_grid_dim_x: u32, max_block_dim_x: u32, warp_size: u32) -> GridLimits {
        GridLimits {
            block_limit: max_grid_dim_x.min(1 << 16),
            thread_limit: max_block_dim_x.min(1024),
            default_blocks: 3200,
            default_threads: 128,
            warp_size,
            min_threads_for_low_trip_count: 32,
        }
    }
}

/// The blocks and threads of one launch, and the mode it runs in, as LLVM decides them.
pub fn shape(kernel: &Kernel, limits: &GridLimits, config: &LaunchConfig) -> LaunchShape {
    let Some(env) = kernel.env else {
        // A bare kernel: the clauses as given, in all three dimensions; 1 where unset.
        let or = |v: u32, d: u32| if v > 0 { v } else { d };
        return LaunchShape {
            blocks: [
                or(config.num_teams[0], limits.default_blocks.min(limits.block_limit)),
                or(config.num_teams[1], 1),
                or(config.num_teams[2], 1),
            ],
            threads: [
                or(config.thread_limit[0], limits.default_threads.min(limits.thread_limit)),
                or(config.thread_limit[1], 1),
                or(config.thread_limit[2], 1),
            ],
            mode: ExecMode::Spmd.name(),
        };
    };
    let max_threads =
        if env.max_threads > 0 { (env.max_threads as u32).min(limits.thread_limit) } else { limits.thread_limit };
    let preferred_threads =
        if env.min_threads > 0 { (env.min_threads as u32).max(limits.default_threads) } else { limits.default_threads };

    // getNumThreads: a generic kernel's main thread runs in a warp of its own.
    let user_threads = config.thread_limit[0];
    let mut clause = user_threads;
    if clause > 0 && env.mode == ExecMode::Generic {
        clause = clause.saturating_add(limits.warp_size);
    }
    let mut threads = max_threads.min(if clause > 0 { clause } else { preferred_threads });

    // getNumBlocks.
    let blocks = if config.num_teams[0] > 0 {
        config.num_teams[0].min(limits.block_limit)
    } else {
        let default_blocks = u64::from(limits.default_blocks);
        let trip = config.tripcount;
        let mut from_trip = u64::MAX;
        if trip > 0 {
            if env.mode == ExecMode::Spmd {
                // Enough teams for one iteration per thread; with too few iterations for the
                // default teams, fewer threads per team (never more than asked).
                let min_threads = limits.min_threads_for_low_trip_count.min(threads);
                if trip >= default_blocks * u64::from(threads) || user_threads > 0 {
                } else if trip >= default_blocks * u64::from(min_threads) {
                    let per_block = trip.div_ceil(default_blocks).next_power_of_two();
                    threads = threads.min(per_block as u32);
                } else {
                    threads = threads.min(min_threads);
                }
                from_trip = (trip - 1) / u64::from(threads.max(1)) + 1;
            } else {
                // `teams distribute` around a `parallel for`: one iteration per team.
                from_trip = trip;
            }
        }
        from_trip.min(default_blocks).min(u64::from(limits.block_limit)) as u32
    };
    LaunchShape { blocks: [blocks, 1, 1], threads: [threads, 1, 1], mode: env.mode.name() }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An H200 as the driver describes it.
    fn h200() -> GridLimits {
        GridLimits::nvptx(i32::MAX as u32, 1024, 32)
    }

    fn kernel(mode: ExecMode) -> Kernel {
        Kernel {
            env: Some(KernelEnv {
                mode,
                min_threads: -1,
                max_threads: -1,
                reduction_data_size: 0,
                reduction_buffer_length: 0,
            }),
        }
    }

    fn launch(teams: u32, threads: u32, trip: u64) -> LaunchConfig {
        LaunchConfig {
            num_teams: [teams, 0, 0],
            thread_limit: [threads, 0, 0],
            tripcount: trip,
            ..LaunchConfig::default()
        }
    }

    fn bt(s: LaunchShape) -> (u32, u32, &'static str) {
        (s.blocks[0], s.threads[0], s.mode)
    }

    #[test]
    fn the_device_limits_are_llvms_grid_values_capped_by_the_device() {
        let l = h200();
        assert_eq!((l.block_limit, l.thread_limit, l.warp_size), (65536, 1024, 32));
        assert_eq!(GridLimits::nvptx(1000, 512, 32).block_limit, 1000);
        assert_eq!(GridLimits::nvptx(1000, 512, 32).thread_limit, 512);
    }

    #[test]
    fn a_small_combined_loop_gets_fewer_threads_per_team_as_in_llvms_test() {
        // offload/test/offloading/default_thread_limit.c: 128 iterations → 4 blocks × 32.
        assert_eq!(bt(shape(&kernel(ExecMode::Spmd), &h200(), &launch(0, 0, 128))), (4, 32, "SPMD"));
        // With LIBOMPTARGET_MIN_THREADS_FOR_LOW_TRIP_COUNT=8: 16 × 8.
        let eight = GridLimits { min_threads_for_low_trip_count: 8, ..h200() };
        assert_eq!(bt(shape(&kernel(ExecMode::Spmd), &eight, &launch(0, 0, 128))), (16, 8, "SPMD"));
    }

    #[test]
    fn a_large_combined_loop_gets_one_iteration_per_thread_up_to_the_default_teams() {
        // 3200 × 128 iterations or more: the default thread count, at most 3200 blocks.
        assert_eq!(bt(shape(&kernel(ExecMode::Spmd), &h200(), &launch(0, 0, 10_000_000))), (3200, 128, "SPMD"));
        // Between: threads rounded to a power of two that still fills the default teams.
        assert_eq!(bt(shape(&kernel(ExecMode::Spmd), &h200(), &launch(0, 0, 200_000))), (3125, 64, "SPMD"));
    }

    #[test]
    fn the_clauses_win_and_are_capped_by_the_device() {
        assert_eq!(bt(shape(&kernel(ExecMode::Spmd), &h200(), &launch(7, 96, 1 << 20))), (7, 96, "SPMD"));
        assert_eq!(bt(shape(&kernel(ExecMode::Spmd), &h200(), &launch(100_000, 4096, 0))), (65536, 1024, "SPMD"));
        // A thread_limit keeps its threads even for a short loop.
        assert_eq!(bt(shape(&kernel(ExecMode::Spmd), &h200(), &launch(0, 64, 128))), (2, 64, "SPMD"));
    }

    #[test]
    fn a_generic_kernel_adds_a_warp_for_its_main_thread_and_a_team_per_distribute_iteration() {
        assert_eq!(bt(shape(&kernel(ExecMode::Generic), &h200(), &launch(0, 0, 0))), (3200, 128, "Generic"));
        assert_eq!(bt(shape(&kernel(ExecMode::Generic), &h200(), &launch(0, 64, 0))), (3200, 96, "Generic"));
        assert_eq!(bt(shape(&kernel(ExecMode::Generic), &h200(), &launch(4, 0, 0))), (4, 128, "Generic"));
        assert_eq!(bt(shape(&kernel(ExecMode::Generic), &h200(), &launch(0, 0, 10))), (10, 128, "Generic"));
        // Generic-SPMD: no extra warp, one team per distribute iteration.
        assert_eq!(bt(shape(&kernel(ExecMode::GenericSpmd), &h200(), &launch(0, 64, 10))), (10, 64, "Generic-SPMD"));
    }

    #[test]
    fn launch_bounds_of_the_kernel_cap_and_raise_the_threads() {
        let mut k = kernel(ExecMode::Spmd);
        if let Some(e) = k.env.as_mut() {
            e.max_threads = 256;
        }
        assert_eq!(bt(shape(&k, &h200(), &launch(0, 1024, 0))), (3200, 256, "SPMD"));
        if let Some(e) = k.env.as_mut() {
            e.min_threads = 200;
        }
        assert_eq!(bt(shape(&k, &h200(), &launch(0, 0, 0))), (3200, 200, "SPMD"));
    }

    #[test]
    fn a_bare_kernel_takes_its_three_dimensional_clauses_as_given() {
        let c = LaunchConfig { num_teams: [4, 2, 0], thread_limit: [32, 4, 2], ..LaunchConfig::default() };
        let s = shape(&Kernel { env: None }, &h200(), &c);
        assert_eq!((s.blocks, s.threads, s.mode), ([4, 2, 1], [32, 4, 2], "SPMD"));
    }

    #[test]
    fn the_mode_flags_are_llvms() {
        assert_eq!(ExecMode::from_flags(1), ExecMode::Generic);
        assert_eq!(ExecMode::from_flags(2), ExecMode::Spmd);
        assert_eq!(ExecMode::from_flags(3), ExecMode::GenericSpmd);
    }
}
