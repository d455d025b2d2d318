//! Worksharing and distribute loops: `__kmpc_{for,distribute,distribute_for}_static_loop_*`.
//!
//! OpenMPIRBuilder hands the runtime the loop body as a callback `body(iv, ctx)` over the
//! normalized induction variable and the trip count `num_iters`; the runtime decides which
//! iterations each thread (and team) runs. Deliberate differences from LLVM's GPU DeviceRTL:
//!
//! * `num_iters` is the trip count: iterations `[0, num_iters)`. LLVM 19's DeviceRTL ran one
//!   more (fixed upstream by llvm-project PR #133435); flang 19 and 22 both pass the trip count.
//! * Unchunked loops get one contiguous, balanced block per thread (GPU DeviceRTL is cyclic, which
//!   suits coalescing; contiguous blocks suit CPU caches and prefetchers).
//! * Worksharing loops end with a team barrier: flang's device path drops the implicit barrier
//!   of `!$omp do` (llvm-project PR #224040), which races when a later loop reads what another
//!   thread wrote. For a `nowait` loop the barrier is only extra synchronisation.
//! * LLVM 22 adds a trailing `i8 one_iteration_per_thread` (no-loop kernels). The archive does not
//!   declare it because LLVM 19 callers do not pass it; the bitcode form (built with
//!   `--cfg omp_devicertl_llvm22`, only ever linked with LLVM 22 code) does, so its definitions
//!   have exactly the type of flang 22's calls, which LLVM needs to inline them. Running every
//!   iteration is right either way.
//! * Unchunked loops (what flang emits unless `schedule(static, n)` / `dist_schedule` give a
//!   chunk) take a short path: one block per thread, one plain counted loop over it. In the
//!   bitcode form that loop is what LTO inlines into flang's outlined region, where the body
//!   callback becomes a direct call, is inlined, and the loop is vectorised. Chunked loops take
//!   the general path, kept out of line.

use core::ffi::c_void;
use core::ops::Range;

use crate::ffi::{self, Ident};
use crate::kernel;

/// One worker's share of the iterations `[0, n)`, as half-open ranges in increasing order.
///
/// `chunk == 0`: one contiguous block; blocks differ in length by at most one.
/// `chunk > 0`: chunks of `chunk` iterations dealt round-robin (`schedule(static, chunk)`).
#[derive(Clone, Debug)]
pub struct Share {
    next: u64,
    n: u64,
    /// Length of each range (the whole block when unchunked).
    len: u64,
    /// Distance between this worker's consecutive ranges; `None` after the last one.
    stride: Option<u64>,
}

/// The share of worker `id` of `workers` (treated as at least 1) in `[0, n)`.
pub fn share(n: u64, workers: u64, id: u64, chunk: u64) -> Share {
    let workers = workers.max(1);
    let empty = Share { next: n, n, len: 0, stride: None };
    if id >= workers {
        return empty;
    }
    if chunk == 0 {
        let (q, r) = (n / workers, n % workers);
        // id < workers, so id * q <= n: no overflow.
        let start = id * q + id.min(r);
        let len = q + u64::from(id < r);
        return Share { next: start, n: start + len, len, stride: None };
    }
    match id.checked_mul(chunk) {
        Some(start) => Share { next: start, n, len: chunk, stride: workers.checked_mul(chunk) },
        None => empty,
    }
}

impl Iterator for Share {
    type Item = Range<u64>;

    fn next(&mut self) -> Option<Range<u64>> {
        if self.next >= self.n {
            return None;
        }
        let start = self.next;
        let end = start + self.len.min(self.n - start);
        self.next = match self.stride.and_then(|s| start.checked_add(s)) {
            Some(next) => next,
            None => self.n,
        };
        Some(start..end)
    }
}

/// The iterations one thread runs of a `distribute parallel do`: team `team` of `teams` takes its
/// share (`team_chunk`) of `[0, n)`, and thread `tid` of `threads` its share (`thread_chunk`) of
/// each team range.
pub fn nested_share(
    n: u64,
    teams: u64,
    team: u64,
    team_chunk: u64,
    threads: u64,
    tid: u64,
    thread_chunk: u64,
) -> impl Iterator<Item = Range<u64>> {
    share(n, teams, team, team_chunk).flat_map(move |block| {
        share(block.end - block.start, threads, tid, thread_chunk)
            .map(move |r| block.start + r.start..block.start + r.end)
    })
}

/// The integer types of the loop entry points (`_4`, `_4u`, `_8`, `_8u`).
trait Iv: Copy + PartialOrd {
    /// A count argument as an iteration count (negative counts mean none).
    fn count(self) -> u64;
    /// An induction-variable value below a count that came from this type (lossless).
    fn from_iv(iv: u64) -> Self;
    /// `self + 1`, for a value below a count of this type (cannot overflow).
    fn succ(self) -> Self;
}

macro_rules! iv_impl {
    ($($t:ty),*) => {$(
        impl Iv for $t {
            #[allow(clippy::cast_sign_loss, clippy::unnecessary_cast)]
            #[inline(always)]
            fn count(self) -> u64 {
                if self <= 0 { 0 } else { self as u64 }
            }
            #[allow(clippy::cast_possible_truncation, clippy::cast_possible_wrap)]
            #[inline(always)]
            fn from_iv(iv: u64) -> Self {
                iv as $t
            }
            #[inline(always)]
            fn succ(self) -> Self {
                self.wrapping_add(1)
            }
        }
    )*};
}
iv_impl!(i32, u32, i64, u64);

/// The calling thread's id and team size in the innermost libomp team.
fn thread_team() -> (u64, u64) {
    // SAFETY: libomp queries without preconditions.
    let (tid, threads) = unsafe { (ffi::omp_get_thread_num(), ffi::omp_get_num_threads()) };
    (u64::try_from(tid).unwrap_or(0), u64::try_from(threads).unwrap_or(1).max(1))
}

/// The calling thread's team id and team count from the kernel context.
fn team() -> (u64, u64) {
    let k = kernel::current();
    (u64::try_from(k.team_id).unwrap_or(0), u64::try_from(k.num_teams).unwrap_or(1))
}

/// The one block `[start, end)` of worker `id` of `workers` (at least 1) in an unchunked `[0, n)`;
/// the same block [`share`] gives with `chunk == 0`.
fn block(n: u64, workers: u64, id: u64) -> (u64, u64) {
    let workers = workers.max(1);
    if id >= workers {
        return (n, n);
    }
    let (q, r) = (n / workers, n % workers);
    // id < workers, so id * q + min(id, r) + q + 1 <= n: no overflow.
    let start = id * q + id.min(r);
    (start, start + q + u64::from(id < r))
}

// The unchunked blocks and the end-of-loop barrier are computed out of line: what the loop entry
// points keep inline is only the loop itself, so they stay small enough for LLVM to inline them
// into flang's code (bitcode form) without any attribute.

/// This thread's block of an unchunked worksharing loop over `[0, n)`.
#[inline(never)]
fn for_block(n: u64) -> (u64, u64) {
    let (tid, threads) = thread_team();
    block(n, threads, tid)
}

/// This team's block of an unchunked `distribute` over `[0, n)`.
#[inline(never)]
fn dist_block(n: u64) -> (u64, u64) {
    let (team, teams) = team();
    block(n, teams, team)
}

/// This thread's block of this team's block of an unchunked `distribute parallel do`.
#[inline(never)]
fn dist_for_block(n: u64) -> (u64, u64) {
    let (team, teams) = team();
    let (tid, threads) = thread_team();
    let (tb, te) = block(n, teams, team);
    let (start, end) = block(te - tb, threads, tid);
    (tb + start, tb + end)
}

/// The implicit barrier at the end of a worksharing loop (none needed for a team of one).
#[inline(never)]
fn loop_barrier(loc: *mut Ident) {
    // SAFETY: libomp query without preconditions.
    if unsafe { ffi::omp_get_num_threads() } > 1 {
        let loc = ffi::loc_or_default(loc);
        // SAFETY: called by every thread of the current libomp team, which all run the same loop
        // (worksharing loops are encountered by all threads of the team or by none).
        unsafe { ffi::__kmpc_barrier(loc, ffi::__kmpc_global_thread_num(loc)) };
    }
}

/// Runs `body` over `[start, end)`: the loop that, once inlined with a known `body`, becomes the
/// user's loop. The counter has the entry point's own type, as the user's loop had.
///
/// # Safety
/// `body(iv, ctx)` is valid to call for every iv in `[start, end)`, and `end` fits in `T`.
#[inline(always)]
unsafe fn run_block<T: Iv>(body: unsafe extern "C" fn(T, *mut c_void), ctx: *mut c_void, start: u64, end: u64) {
    let (mut iv, end) = (T::from_iv(start), T::from_iv(end));
    while iv < end {
        // SAFETY: per this function's contract.
        unsafe { body(iv, ctx) };
        iv = iv.succ();
    }
}

/// Runs `body` over `ranges` (chunked schedules).
///
/// # Safety
/// `body(iv, ctx)` is valid to call for every iv in `ranges`, which lie in `[0, n)` for a count
/// `n` of type `T`.
#[inline(never)]
unsafe fn run_chunked<T: Iv>(
    body: unsafe extern "C" fn(T, *mut c_void),
    ctx: *mut c_void,
    ranges: impl Iterator<Item = Range<u64>>,
) {
    for r in ranges {
        // SAFETY: per this function's contract.
        unsafe { run_block(body, ctx, r.start, r.end) };
    }
}

/// A chunked worksharing loop: this thread's round-robin chunks.
///
/// # Safety
/// As for [`run_chunked`], over `[0, n)`.
#[inline(never)]
unsafe fn for_chunked<T: Iv>(body: unsafe extern "C" fn(T, *mut c_void), ctx: *mut c_void, n: u64, chunk: u64) {
    let (tid, threads) = thread_team();
    // SAFETY: forwarded contract.
    unsafe { run_chunked(body, ctx, share(n, threads, tid, chunk)) };
}

/// A chunked `distribute`: this team's chunks.
///
/// # Safety
/// As for [`run_chunked`], over `[0, n)`.
#[inline(never)]
unsafe fn dist_chunked<T: Iv>(body: unsafe extern "C" fn(T, *mut c_void), ctx: *mut c_void, n: u64, chunk: u64) {
    let (team, teams) = team();
    // SAFETY: forwarded contract.
    unsafe { run_chunked(body, ctx, share(n, teams, team, chunk)) };
}

/// A `distribute parallel do` with a chunk at either level.
///
/// # Safety
/// As for [`run_chunked`], over `[0, n)`.
#[inline(never)]
unsafe fn dist_for_chunked<T: Iv>(
    body: unsafe extern "C" fn(T, *mut c_void),
    ctx: *mut c_void,
    n: u64,
    block_chunk: u64,
    thread_chunk: u64,
) {
    let (team, teams) = team();
    let (tid, threads) = thread_team();
    let ranges = nested_share(n, teams, team, block_chunk, threads, tid, thread_chunk);
    // SAFETY: forwarded contract.
    unsafe { run_chunked(body, ctx, ranges) };
}

macro_rules! loops {
    ($t:ty, $for_:ident, $dist:ident, $dist_for:ident) => {
        /// Worksharing loop over `[0, num_iters)` in the current team, then a team barrier.
        /// The `num_threads` argument is libomp's team size at the call site, which is re-read.
        ///
        /// # Safety
        /// Called by compiler-generated code: `body(iv, ctx)` is the loop body.
        #[no_mangle]
        pub unsafe extern "C" fn $for_(
            loc: *mut Ident,
            body: Option<unsafe extern "C" fn($t, *mut c_void)>,
            ctx: *mut c_void,
            num_iters: $t,
            _num_threads: $t,
            thread_chunk: $t,
            #[cfg(omp_devicertl_llvm22)] _one_iteration_per_thread: u8,
        ) {
            if let Some(body) = body {
                let (n, chunk) = (num_iters.count(), thread_chunk.count());
                if chunk == 0 {
                    let (start, end) = for_block(n);
                    // SAFETY: per this function's contract; end <= n fits in the type.
                    unsafe { run_block(body, ctx, start, end) };
                } else {
                    // SAFETY: per this function's contract.
                    unsafe { for_chunked(body, ctx, n, chunk) };
                }
            }
            loop_barrier(loc);
        }

        /// `distribute` over `[0, num_iters)`: the share of this kernel's team. Run by one thread
        /// per team, so no barrier.
        ///
        /// # Safety
        /// As for the worksharing loop.
        #[no_mangle]
        pub unsafe extern "C" fn $dist(
            _loc: *mut Ident,
            body: Option<unsafe extern "C" fn($t, *mut c_void)>,
            ctx: *mut c_void,
            num_iters: $t,
            block_chunk: $t,
            #[cfg(omp_devicertl_llvm22)] _one_iteration_per_thread: u8,
        ) {
            if let Some(body) = body {
                let (n, chunk) = (num_iters.count(), block_chunk.count());
                if chunk == 0 {
                    let (start, end) = dist_block(n);
                    // SAFETY: per this function's contract; end <= n fits in the type.
                    unsafe { run_block(body, ctx, start, end) };
                } else {
                    // SAFETY: per this function's contract.
                    unsafe { dist_chunked(body, ctx, n, chunk) };
                }
            }
        }

        /// `distribute parallel do`: this team's share, split among the threads of the current
        /// libomp team. No barrier: this composite construct is its own parallel region, which
        /// holds nothing after the loop but the reduction epilogue (`__kmpc_reduce`, which
        /// synchronises itself) and `lastprivate` copy-out (by the thread that ran the last
        /// iteration, from its own copy), and the region's end joins the team anyway.
        ///
        /// # Safety
        /// As for the worksharing loop.
        #[no_mangle]
        pub unsafe extern "C" fn $dist_for(
            _loc: *mut Ident,
            body: Option<unsafe extern "C" fn($t, *mut c_void)>,
            ctx: *mut c_void,
            num_iters: $t,
            _num_threads: $t,
            block_chunk: $t,
            thread_chunk: $t,
            #[cfg(omp_devicertl_llvm22)] _one_iteration_per_thread: u8,
        ) {
            if let Some(body) = body {
                let (n, bc, tc) = (num_iters.count(), block_chunk.count(), thread_chunk.count());
                if bc == 0 && tc == 0 {
                    let (start, end) = dist_for_block(n);
                    // SAFETY: per this function's contract; end <= n fits in the type.
                    unsafe { run_block(body, ctx, start, end) };
                } else {
                    // SAFETY: per this function's contract.
                    unsafe { dist_for_chunked(body, ctx, n, bc, tc) };
                }
            }
        }
    };
}

loops!(u32, __kmpc_for_static_loop_4u, __kmpc_distribute_static_loop_4u, __kmpc_distribute_for_static_loop_4u);
loops!(i32, __kmpc_for_static_loop_4, __kmpc_distribute_static_loop_4, __kmpc_distribute_for_static_loop_4);
loops!(u64, __kmpc_for_static_loop_8u, __kmpc_distribute_static_loop_8u, __kmpc_distribute_for_static_loop_8u);
loops!(i64, __kmpc_for_static_loop_8, __kmpc_distribute_static_loop_8, __kmpc_distribute_for_static_loop_8);

#[cfg(test)]
mod tests {
    use super::*;
    use std::vec::Vec;

    /// How many times each iteration of `[0, n)` is run by all workers together.
    fn coverage(n: u64, shares: impl Iterator<Item = Range<u64>>) -> Vec<u32> {
        let mut hits = std::vec![0u32; usize::try_from(n).unwrap()];
        for r in shares {
            assert!(r.start < r.end && r.end <= n, "bad range {r:?} for n={n}");
            for i in r {
                hits[usize::try_from(i).unwrap()] += 1;
            }
        }
        hits
    }

    #[test]
    fn every_iteration_runs_exactly_once() {
        for n in [0u64, 1, 2, 3, 7, 8, 100, 1001] {
            for workers in 1..=9u64 {
                for chunk in [0u64, 1, 3, 4, 1000] {
                    let all = (0..workers).flat_map(|id| share(n, workers, id, chunk));
                    assert!(coverage(n, all).iter().all(|&h| h == 1), "n={n} workers={workers} chunk={chunk}");
                }
            }
        }
    }

    #[test]
    fn trip_count_is_not_plus_one() {
        // LLVM 19's DeviceRTL ran num_iters + 1 iterations; a single worker must run exactly n.
        let runs: u64 = share(10, 1, 0, 0).map(|r| r.end - r.start).sum();
        assert_eq!(runs, 10);
        assert_eq!(share(0, 4, 0, 0).count(), 0);
    }

    /// A share as (start, end) pairs, which compare more readably than ranges.
    fn pairs(s: Share) -> Vec<(u64, u64)> {
        s.map(|r| (r.start, r.end)).collect()
    }

    #[test]
    fn unchunked_blocks_are_contiguous_and_balanced() {
        let blocks: Vec<_> = (0..4).map(|id| pairs(share(10, 4, id, 0))).collect();
        assert_eq!(blocks, [[(0, 3)], [(3, 6)], [(6, 8)], [(8, 10)]]);
    }

    #[test]
    fn fast_path_block_is_the_unchunked_share() {
        for n in [0u64, 1, 5, 10, 1001, u64::MAX] {
            for workers in 0..=9u64 {
                for id in 0..=10u64 {
                    let (start, end) = block(n, workers, id);
                    let want: Vec<_> = pairs(share(n, workers, id, 0));
                    let got: Vec<_> = if start < end { std::vec![(start, end)] } else { Vec::new() };
                    assert_eq!(got, want, "n={n} workers={workers} id={id}");
                }
            }
        }
    }

    #[test]
    fn chunked_is_round_robin() {
        assert_eq!(pairs(share(10, 2, 1, 3)), [(3, 6), (9, 10)]);
    }

    #[test]
    fn more_workers_than_iterations_and_bad_ids() {
        assert_eq!(share(2, 5, 4, 0).count(), 0);
        assert_eq!(share(5, 2, 2, 0).count(), 0);
        assert_eq!(pairs(share(5, 0, 0, 0)), [(0, 5)]);
    }

    #[test]
    fn no_overflow_near_the_top_of_the_range() {
        let n = u64::MAX;
        let last = share(n, 3, 2, 0).last().unwrap();
        assert_eq!(last.end, n);
        assert_eq!(pairs(share(n, 2, 1, u64::MAX / 2 + 1)), [(u64::MAX / 2 + 1, u64::MAX)]);
        assert_eq!(share(n, 2, 1, u64::MAX).count(), 0);
        let n32 = u64::from(u32::MAX);
        let total: u64 = (0..7).flat_map(|id| share(n32, 7, id, 0)).map(|r| r.end - r.start).sum();
        assert_eq!(total, n32);
    }

    #[test]
    fn distribute_parallel_do_covers_the_space_once() {
        for n in [0u64, 1, 5, 64, 999] {
            for teams in 1..=4u64 {
                for threads in 1..=3u64 {
                    for (bc, tc) in [(0, 0), (0, 2), (7, 0), (5, 3)] {
                        let all = (0..teams).flat_map(|team| {
                            (0..threads).flat_map(move |tid| nested_share(n, teams, team, bc, threads, tid, tc))
                        });
                        assert!(
                            coverage(n, all).iter().all(|&h| h == 1),
                            "n={n} teams={teams} threads={threads} chunks={bc},{tc}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn signed_counts_below_one_mean_no_iterations() {
        assert_eq!((-5i32).count(), 0);
        assert_eq!(0i64.count(), 0);
        assert_eq!(7i32.count(), 7);
        assert_eq!(u32::MAX.count(), u64::from(u32::MAX));
        assert_eq!(<u32 as Iv>::from_iv(u64::from(u32::MAX) - 1), u32::MAX - 1);
    }
}
