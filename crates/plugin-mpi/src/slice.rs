//! A short scheduler slice for the threads that hand calls on (the MPI threads, a rank's
//! kernel threads): on Linux 6.12 and later (EEVDF), a normal (`SCHED_OTHER`) thread may ask
//! for a shorter time slice with `sched_setattr`'s `sched_runtime`, unprivileged; its virtual
//! deadline is then earlier, so when it wakes on a busy CPU it runs sooner (and for less at a
//! time). `LIBOMPTARGET_MPI_SLICE=<µs>` (100 to 100000) asks for it; unset, nothing changes.

/// `struct sched_attr`, as far as `SCHED_ATTR_SIZE_VER0`.
#[repr(C)]
struct SchedAttr {
    size: u32,
    policy: u32,
    flags: u64,
    nice: i32,
    priority: u32,
    runtime: u64,
    deadline: u64,
    period: u64,
}

/// The slice asked for, in nanoseconds (read once).
fn wanted() -> Option<u64> {
    static SLICE: std::sync::OnceLock<Option<u64>> = std::sync::OnceLock::new();
    *SLICE.get_or_init(|| {
        let us: u64 = std::env::var("LIBOMPTARGET_MPI_SLICE").ok()?.trim().parse().ok()?;
        (100..=100_000).contains(&us).then_some(us * 1000)
    })
}

/// Gives the calling thread the slice asked for, if one was; a kernel without custom slices
/// refuses it, and the thread keeps the default.
pub fn shorten_this_thread() {
    let Some(runtime) = wanted() else { return };
    // SAFETY: sched_getscheduler, getpriority and gettid take no pointers; `attr` is a valid sched_attr of the
    // size it says, read by the kernel for this thread (pid 0) only.
    unsafe {
        // A real-time thread stays one.
        if libc::sched_getscheduler(0) != libc::SCHED_OTHER {
            return;
        }
        let tid = libc::gettid() as libc::id_t;
        *libc::__errno_location() = 0;
        let nice = libc::getpriority(libc::PRIO_PROCESS, tid);
        if nice == -1 && *libc::__errno_location() != 0 {
            return;
        }
        let attr = SchedAttr {
            size: std::mem::size_of::<SchedAttr>() as u32,
            policy: libc::SCHED_OTHER as u32,
            flags: 0,
            nice,
            priority: 0,
            runtime,
            deadline: 0,
            period: 0,
        };
        libc::syscall(libc::SYS_sched_setattr, 0, &attr as *const SchedAttr, 0);
    }
}
