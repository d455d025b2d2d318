//! A shorter scheduler time slice for a thread whose work is answering another process.
//!
//! On a loaded CPU a thread woken by a pipe write waits for the running task's time slice to
//! end (milliseconds) before it runs. Since Linux 6.12 (EEVDF) a normal thread may ask for a
//! shorter slice with `sched_setattr` (`sched_runtime`, 100 µs to 100 ms, no privilege
//! needed), and a woken thread with a shorter slice than the running one preempts it
//! ("PREEMPT_SHORT"). Its share of the CPU does not change, only how finely it is cut.
//!
//! [`shorten_this_thread`] gives the calling thread such a slice. It leaves alone threads that
//! are not normal (`SCHED_OTHER`: batch, idle, real-time), threads whose slice is already at
//! most that, and kernels that do not report a slice (before 6.12: they would ignore it); a
//! refusal (seccomp, a policy) is silent. The environment ([`SLICE_ENV`]) asks for it; it is
//! off unless asked for, because on the development VM it did not make a loaded launch faster
//! (docs/isolate.md, "A short time slice for the worker").

use std::sync::OnceLock;

/// The environment variable that asks for the slice, in microseconds (unset or `0`: leave
/// slices alone).
pub const SLICE_ENV: &str = "LIBOMPTARGET_ISOLATE_SLICE_US";
/// The shortest slice the kernel takes (it raises shorter ones to this).
pub const LEAST_SLICE_US: u32 = 100;
/// The longest slice the kernel takes.
pub const MOST_SLICE_US: u32 = 100_000;

const SCHED_OTHER: u32 = 0;
/// Threads the thread creates start with the default slice.
const SCHED_FLAG_RESET_ON_FORK: u64 = 0x01;

/// `struct sched_attr` (include/uapi/linux/sched/types.h), its first version plus utilization
/// clamps (`SCHED_ATTR_SIZE_VER1`).
#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
struct SchedAttr {
    size: u32,
    sched_policy: u32,
    sched_flags: u64,
    sched_nice: i32,
    sched_priority: u32,
    /// For a normal thread (6.12+): its slice, in nanoseconds.
    sched_runtime: u64,
    sched_deadline: u64,
    sched_period: u64,
    sched_util_min: u32,
    sched_util_max: u32,
}

/// The slice [`SLICE_ENV`] asks for, in microseconds, read once; `None`: turned off.
pub fn slice_from_env() -> Option<u32> {
    static SLICE: OnceLock<Option<u32>> = OnceLock::new();
    *SLICE.get_or_init(|| parse_slice_us(std::env::var(SLICE_ENV).ok().as_deref()))
}

/// A [`SLICE_ENV`] value: unset, empty, `0` or not a number is off; others are held to what
/// the kernel takes.
pub fn parse_slice_us(v: Option<&str>) -> Option<u32> {
    match v.map(str::trim).map(str::parse::<u64>) {
        None | Some(Err(_)) | Some(Ok(0)) => None,
        Some(Ok(us)) => Some(us.clamp(u64::from(LEAST_SLICE_US), u64::from(MOST_SLICE_US)) as u32),
    }
}

/// Gives the calling thread a time slice of `us` microseconds from now on; threads it creates
/// afterwards start with the default slice. Returns whether the slice changed (`false`: left
/// alone, as the module says).
pub fn shorten_this_thread(us: u32) -> bool {
    let Some(mut attr) = this_thread_attr() else { return false };
    let slice_ns = u64::from(us.clamp(LEAST_SLICE_US, MOST_SLICE_US)) * 1000;
    if attr.sched_policy != SCHED_OTHER || attr.sched_runtime == 0 || attr.sched_runtime <= slice_ns {
        return false;
    }
    attr.size = size_of::<SchedAttr>() as u32;
    // Only reset-on-fork is ours to set; the nice value stays the thread's (it is part of
    // what sched_setattr sets for a normal thread).
    attr.sched_flags = (attr.sched_flags & SCHED_FLAG_RESET_ON_FORK) | SCHED_FLAG_RESET_ON_FORK;
    attr.sched_runtime = slice_ns;
    attr.sched_deadline = 0;
    attr.sched_period = 0;
    // SAFETY: sched_setattr(0, attr, 0) changes the calling thread only; `attr` is a valid
    // sched_attr whose `size` says how much of it the kernel reads.
    let r = unsafe { libc::syscall(libc::SYS_sched_setattr, 0, &attr as *const SchedAttr, 0) };
    r == 0
}

/// The calling thread's slice in microseconds, as the kernel reports it (`None` before 6.12
/// or where the call is refused).
pub fn this_thread_slice_us() -> Option<u64> {
    this_thread_attr().map(|a| a.sched_runtime / 1000).filter(|&us| us > 0)
}

fn this_thread_attr() -> Option<SchedAttr> {
    let mut attr = SchedAttr::default();
    // SAFETY: sched_getattr(0, attr, size, 0) writes at most `size` bytes of the calling
    // thread's attributes into `attr`, which has that size.
    let r = unsafe {
        libc::syscall(
            libc::SYS_sched_getattr,
            0,
            &mut attr as *mut SchedAttr,
            size_of::<SchedAttr>() as libc::c_uint,
            0,
        )
    };
    (r == 0).then_some(attr)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_environment_asks_for_the_slice_and_it_is_off_otherwise() {
        assert_eq!(parse_slice_us(None), None, "off unless asked for");
        assert_eq!(parse_slice_us(Some("")), None);
        assert_eq!(parse_slice_us(Some("fast")), None, "not a number: off");
        assert_eq!(parse_slice_us(Some("0")), None);
        assert_eq!(parse_slice_us(Some("100")), Some(100));
        assert_eq!(parse_slice_us(Some(" 250 ")), Some(250));
        assert_eq!(parse_slice_us(Some("20")), Some(LEAST_SLICE_US), "held to what the kernel takes");
        assert_eq!(parse_slice_us(Some("99999999999")), Some(MOST_SLICE_US));
    }

    #[test]
    fn a_shortened_thread_has_the_slice_and_its_new_threads_the_default() {
        // On a thread of its own: the test harness's threads keep their slices.
        std::thread::spawn(|| {
            let Some(before) = this_thread_slice_us() else {
                assert!(!shorten_this_thread(200), "a kernel that reports no slice is left alone");
                return;
            };
            if before <= 200 {
                return; // the machine's default is already that short: nothing to see
            }
            assert!(shorten_this_thread(200), "a normal thread may shorten its own slice");
            assert_eq!(this_thread_slice_us(), Some(200));
            assert!(!shorten_this_thread(300), "a longer slice than the thread has is no change");
            assert_eq!(this_thread_slice_us(), Some(200));
            let child = std::thread::spawn(this_thread_slice_us).join().unwrap();
            assert_eq!(child, Some(before), "threads it starts have the default slice");
        })
        .join()
        .unwrap();
    }

    #[test]
    fn threads_that_are_not_normal_are_left_alone() {
        std::thread::spawn(|| {
            let param = libc::sched_param { sched_priority: 0 };
            // SAFETY: sets the calling thread (0) to SCHED_BATCH; `param` is valid.
            if unsafe { libc::sched_setscheduler(0, libc::SCHED_BATCH, &param) } != 0 {
                return; // refused here: nothing to test
            }
            let before = this_thread_slice_us();
            assert!(!shorten_this_thread(100));
            assert_eq!(this_thread_slice_us(), before);
        })
        .join()
        .unwrap();
    }
}
