//! A short scheduler slice for the threads that hand calls on (the MPI threads, a rank's
//! kernel threads), through the worker's [`omp_worker::slice`] (EEVDF's `sched_runtime`,
//! Linux 6.12+, unprivileged). `LIBOMPTARGET_MPI_SLICE=<µs>` (100 to 100000) asks for it;
//! unset, nothing changes. Measured on the development VM it did not shorten the hand-offs
//! (docs/cluster.md), so it stays off unless asked for.

use omp_worker::slice;

/// Gives the calling thread the slice `LIBOMPTARGET_MPI_SLICE` asks for, if it asks.
pub fn shorten_this_thread() {
    static SLICE: std::sync::OnceLock<Option<u32>> = std::sync::OnceLock::new();
    let wanted = SLICE.get_or_init(|| slice::parse_slice_us(std::env::var("LIBOMPTARGET_MPI_SLICE").ok().as_deref()));
    if let Some(us) = *wanted {
        slice::shorten_this_thread(us);
    }
}
