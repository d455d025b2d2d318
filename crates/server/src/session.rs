//! A client program's session: what it owns (allocations, globals, images, kernels), the
//! checks every call makes against that, and its place under `--max-sessions`.

use crate::relay::Relay;
use omp_sync::Mutex;
use omp_worker::CallError;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;
use tonic::Status;

/// A kernel the session resolved.
pub(crate) struct Kernel {
    pub device: u32,
    pub addr: u64,
    pub name: String,
}

/// Everything a session owns, checked on every call.
#[derive(Default)]
pub(crate) struct Owned {
    /// Allocation start → size.
    pub allocs: BTreeMap<u64, u64>,
    /// Global start → size, from the images' symbol tables.
    pub globals: BTreeMap<u64, u64>,
    pub used: u64,
    /// (device, worker image index) by handle - 1.
    pub images: Vec<(u32, u64)>,
    pub kernels: Vec<Kernel>,
}

fn within(map: &BTreeMap<u64, u64>, addr: u64, size: u64) -> bool {
    let Some(end) = addr.checked_add(size) else { return false };
    map.range(..=addr).next_back().is_some_and(|(&start, &len)| end <= start + len)
}

/// One client program's session.
pub struct Session {
    /// Given to the client that opened the session; every call must carry it.
    pub(crate) secret: String,
    pub(crate) worker: Relay,
    pub(crate) owned: Mutex<Owned>,
    pub(crate) last_beat: Mutex<Instant>,
    pub(crate) ended: Mutex<Option<String>>,
    /// Names of the kernels running now: a worker that dies while one runs names it.
    pub(crate) running: Mutex<Vec<String>>,
    /// The session's place under `--max-sessions`, given back when the session is dropped.
    pub(crate) _slot: Slot,
}

/// One of the `--max-sessions` places, taken before the worker starts.
pub(crate) struct Slot(Arc<AtomicUsize>);

impl Slot {
    /// Takes a place if fewer than `max` are taken.
    pub(crate) fn take(taken: &Arc<AtomicUsize>, max: usize) -> Option<Slot> {
        taken.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| (n < max).then_some(n + 1)).ok()?;
        Some(Slot(taken.clone()))
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Session {
    /// Fails when `[addr, addr+size)` is not inside this session's memory.
    pub(crate) fn check_range(&self, addr: u64, size: u64) -> Result<(), Status> {
        let o = self.owned.lock();
        if within(&o.allocs, addr, size) || within(&o.globals, addr, size) {
            return Ok(());
        }
        Err(Status::invalid_argument(format!("0x{addr:x} (+{size} bytes) is not device memory of this session")))
    }

    /// Why the session ended when its worker ended `how`.
    pub(crate) fn death_reason(&self, how: &str) -> String {
        match self.running.lock().first() {
            Some(name) => format!("kernel '{name}' crashed the device worker ({how})"),
            None => format!("the device worker {how}"),
        }
    }

    pub(crate) fn end(&self, why: &str) {
        let mut e = self.ended.lock();
        if e.is_none() {
            *e = Some(why.to_string());
        }
    }

    pub(crate) fn map_err(&self, e: CallError, what: &str) -> Status {
        match e {
            CallError::Failed(m) => Status::internal(m),
            CallError::Died(how) => {
                let why = format!("the device worker {how} during {what}");
                self.end(&why);
                Status::aborted(format!("session ended: {why}"))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_must_lie_inside_one_region() {
        let mut m = BTreeMap::new();
        m.insert(0x1000, 0x100);
        m.insert(0x2000, 0x10);
        assert!(within(&m, 0x1000, 0x100));
        assert!(within(&m, 0x10ff, 1));
        assert!(!within(&m, 0x10ff, 2));
        assert!(!within(&m, 0xfff, 1));
        assert!(!within(&m, 0x1800, 1));
        assert!(!within(&m, u64::MAX, 2));
        assert!(within(&m, 0x2008, 8));
    }
}
