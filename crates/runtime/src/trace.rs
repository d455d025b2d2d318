//! Events the runtime reports to observers: OMPT tools (through the ABI layer) and, later,
//! profilers. Observers are fixed when the runtime is built; with none, each hook costs one
//! branch.

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};

/// OMPT's `ompt_target_t`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TargetKind {
    Target = 1,
    EnterData = 2,
    ExitData = 3,
    Update = 4,
}

/// OMPT's `ompt_target_data_op_t`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DataOp {
    Alloc = 1,
    ToDevice = 2,
    FromDevice = 3,
    Delete = 4,
}

/// One data operation, with OMPT's fields.
#[derive(Debug, Clone, Copy)]
pub struct DataOpEvent {
    pub target_id: u64,
    pub host_op_id: u64,
    pub op: DataOp,
    pub src: usize,
    pub src_device: i32,
    pub dst: usize,
    pub dst_device: i32,
    pub bytes: usize,
    pub codeptr: usize,
}

/// Something that wants to hear about the runtime's work. Every method has a default.
pub trait Observer: Send + Sync {
    fn device_init(&self, _device: i32) {}
    fn device_load(&self, _device: i32, _image: &[u8], _module_id: u64) {}
    fn target(&self, _kind: TargetKind, _begin: bool, _device: i32, _target_id: u64, _codeptr: usize) {}
    fn data_op(&self, _ev: &DataOpEvent) {}
    fn submit(&self, _target_id: u64, _host_op_id: u64, _num_teams: u32) {}
}

thread_local! {
    /// (target id, return address) of the construct this thread is running.
    static CURRENT: Cell<(u64, usize)> = const { Cell::new((0, 0)) };
    /// The program's return address, recorded by the ABI layer at each entry point.
    static RETURN_ADDRESS: Cell<usize> = const { Cell::new(0) };
}

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// A fresh id for a construct or a host operation.
pub fn next_id() -> u64 {
    NEXT_ID.fetch_add(1, Ordering::Relaxed)
}

/// Records where the program called the runtime from (for tools' `codeptr_ra`).
#[inline]
pub fn set_return_address(ra: usize) {
    RETURN_ADDRESS.with(|c| c.set(ra));
}

pub(crate) fn return_address() -> usize {
    RETURN_ADDRESS.with(|c| c.get())
}

pub(crate) fn enter_construct(target_id: u64, codeptr: usize) -> (u64, usize) {
    CURRENT.with(|c| c.replace((target_id, codeptr)))
}

pub(crate) fn leave_construct(prev: (u64, usize)) {
    CURRENT.with(|c| c.set(prev));
}

pub(crate) fn current() -> (u64, usize) {
    CURRENT.with(|c| c.get())
}
