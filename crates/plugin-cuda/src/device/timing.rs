//! Profile spans measured on the device: with `LIBOMPTARGET_PROFILE` set, a synchronous copy
//! or launch is bracketed by two CUDA events and, once its stream is done, the time between
//! them is what the device reports for it (`Device::device_time`, read by the runtime right
//! after the call on the same thread). Without the profile, or when an event call fails, no
//! time is reported and the runtime's host timing stands.

use super::CudaDevice;
use crate::driver::*;
use std::cell::Cell;
use std::time::Duration;

thread_local! {
    /// The device (its address) and the device time of the last operation this thread timed.
    static LAST: Cell<Option<(usize, Duration)>> = const { Cell::new(None) };
}

/// Two events around one operation on a stream; destroyed when dropped.
pub(super) struct Timing {
    driver: &'static Driver,
    start: CuEvent,
    end: CuEvent,
}

impl Timing {
    /// Records `end` behind the operation just enqueued on `stream`.
    pub(super) fn stop(self, stream: CuStream) -> Option<Timing> {
        // SAFETY: `end` is an event of the stream's context.
        (unsafe { (self.driver.event_record)(self.end, stream) } == CUDA_SUCCESS).then_some(self)
    }

    /// The time between the two events, once the stream is done.
    fn elapsed(&self) -> Option<Duration> {
        let elapsed_time = self.driver.event_elapsed_time?;
        let mut ms = 0f32;
        // SAFETY: both events were recorded on a stream that has been synchronised; writes one float.
        let r = unsafe { elapsed_time(&mut ms, self.start, self.end) };
        (r == CUDA_SUCCESS && ms.is_finite() && ms >= 0.0).then(|| Duration::from_secs_f64(f64::from(ms) / 1e3))
    }
}

impl Drop for Timing {
    fn drop(&mut self) {
        // SAFETY: both events were created by `CudaDevice::timing_start` and are destroyed
        // once, here (a pending record completes before the driver frees them).
        unsafe {
            (self.driver.event_destroy)(self.start);
            (self.driver.event_destroy)(self.end);
        }
    }
}

impl CudaDevice {
    fn key(&self) -> usize {
        self as *const CudaDevice as usize
    }

    /// Starts timing an operation about to be enqueued on `stream`, when the profile is on
    /// and the driver can measure; forgets this thread's last measure either way.
    pub(super) fn timing_start(&self, stream: CuStream) -> Option<Timing> {
        LAST.with(|l| l.set(None));
        if !self.settings.profile {
            return None;
        }
        self.driver.event_elapsed_time?;
        let (mut start, mut end): (CuEvent, CuEvent) = (std::ptr::null_mut(), std::ptr::null_mut());
        // SAFETY: each call writes one event of the current context.
        if unsafe { (self.driver.event_create)(&mut start, 0) } != CUDA_SUCCESS {
            return None;
        }
        // SAFETY: as above.
        if unsafe { (self.driver.event_create)(&mut end, 0) } != CUDA_SUCCESS {
            // SAFETY: `start` was just created and is known to nothing else.
            unsafe { (self.driver.event_destroy)(start) };
            return None;
        }
        let timing = Timing { driver: self.driver, start, end };
        // SAFETY: `start` is an event of the stream's context.
        (unsafe { (self.driver.event_record)(start, stream) } == CUDA_SUCCESS).then_some(timing)
    }

    /// After the timed operation's stream is synchronised: keeps its device time for
    /// `device_time`.
    pub(super) fn timing_done(&self, timing: Option<Timing>) {
        if let Some(d) = timing.and_then(|t| t.elapsed()) {
            LAST.with(|l| l.set(Some((self.key(), d))));
        }
    }

    /// The device time of the operation this thread timed last, if it was on this device.
    pub(super) fn last_device_time(&self) -> Option<Duration> {
        // Taken: a measure is read once, never for a later operation that was not timed.
        LAST.with(|l| l.take()).filter(|&(k, _)| k == self.key()).map(|(_, d)| d)
    }
}
