//! What a construct decides under the table lock and does after releasing it: events,
//! host-to-device copies, and waking threads that wait for entries being mapped.

use super::diagnose::MapError;
use super::{ConstructState, PendingCopy};
use crate::table::MappingTable;
use crate::trace::Event;
use crate::{DeviceCtx, MapName, Runtime};

impl Runtime {
    /// Queues an event decided under the table lock, to be emitted after it is released; it
    /// is only built when someone observes (no allocation on an unobserved construct).
    #[inline]
    pub(super) fn queue(&self, st: &mut ConstructState, event: impl FnOnce() -> Event<'static>) {
        if self.observing() {
            st.events.push(event());
        }
    }

    /// Waits until no entry that one of `ranges` falls in is being mapped by another thread
    /// (or is away on a spreading trip), and returns the table locked.
    /// `held` is the table's guard when the caller still holds it.
    #[link_section = ".text.hot.omp_launch"]
    pub(crate) fn lock_idle<'d>(
        &self,
        dev: &'d DeviceCtx,
        held: Option<omp_sync::MutexGuard<'d, MappingTable>>,
        ranges: &[(usize, usize)],
    ) -> omp_sync::MutexGuard<'d, MappingTable> {
        let mut table = held.unwrap_or_else(|| dev.lock_table());
        while ranges.iter().any(|&(hp, size)| table.is_busy(hp, size)) {
            table.waiters += 1;
            table = dev.wait_mapped(table);
            table.waiters -= 1;
        }
        table
    }

    /// Performs the copies a construct queued under the table lock, then tells waiting
    /// threads that the entries it was mapping are ready (also when a copy failed).
    #[link_section = ".text.hot.omp_launch"]
    pub(super) fn flush(&self, dev: &DeviceCtx, st: &mut ConstructState) -> Result<(), MapError> {
        for ev in std::mem::take(&mut st.events) {
            self.emit(&ev);
        }
        let mut result = Ok(());
        for copy in st.copies.drain(..) {
            if result.is_err() {
                continue;
            }
            result = match copy {
                // SAFETY: queued from a map clause's (begin, size): program memory that the
                // construct names and that stays alive while it runs.
                PendingCopy::Data { tgt, host, size, name } => unsafe { self.submit(dev, tgt, host, size, name) },
                PendingCopy::Pointer { tgt, value, name } => {
                    // SAFETY: `value` is a local of this frame, 8 readable bytes.
                    unsafe {
                        self.submit(dev, tgt, &value as *const usize as usize, std::mem::size_of::<usize>(), name)
                    }
                }
            };
        }
        if !st.busy.is_empty() {
            dev.clear_busy(&st.busy);
            st.busy.clear();
        }
        result
    }

    /// Host→device copy of mapping `name`, with INFO 0x20 reporting.
    ///
    /// # Safety
    /// `[host, host+size)` must be readable program memory for the duration of the call.
    pub(crate) unsafe fn submit(
        &self,
        dev: &DeviceCtx,
        tgt: usize,
        host: usize,
        size: usize,
        name: MapName,
    ) -> Result<(), MapError> {
        // SAFETY: the caller's promise.
        unsafe { dev.submit_traced(self, tgt, host, size, name) }.map_err(|e| MapError::CopyTo(Box::new(e)))
    }

    /// Device→host copy of mapping `name`, with INFO 0x20 reporting.
    ///
    /// # Safety
    /// `[host, host+size)` must be writable program memory for the duration of the call.
    pub(crate) unsafe fn retrieve(
        &self,
        dev: &DeviceCtx,
        host: usize,
        tgt: usize,
        size: usize,
        name: MapName,
    ) -> Result<(), MapError> {
        // SAFETY: the caller's promise.
        unsafe { dev.retrieve_traced(self, host, tgt, size, name) }.map_err(|e| MapError::CopyFrom(Box::new(e)))
    }
}
