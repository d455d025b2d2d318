//! Data motion for `target data`, `enter data`, `exit data`, `update`, and the map clauses
//! of `target`: LLVM's targetDataBegin / targetDataEnd / targetDataUpdate semantics.
//!
//! One module per job: `args` (the map arrays), `target_pointer` (LLVM's getTargetPointer),
//! `pending` (copies and events decided under the table lock, done after it), `begin`,
//! `attach` (shadow pointers and clang 22's ATTACH), `end`, `update`, `strided`
//! (non-contiguous updates) and `diagnose` (why a map clause failed: [`MapError`], in messages that name the
//! variable).

mod args;
mod attach;
mod begin;
mod diagnose;
mod end;
mod pending;
mod strided;
mod target_pointer;
mod update;

pub use args::{MapArgs, MapperComponents};
pub use diagnose::{Absent, MapError, NotPresent};

use crate::trace::Event;
use crate::MapName;

/// State carried across the entries of one construct.
#[derive(Default)]
pub struct ConstructState {
    /// Entries (table keys) this construct created: ATTACH attaches only when one side is new.
    new_entries: Vec<usize>,
    /// ATTACH entries, deferred to the end of data-begin: (pointer address, pointee begin, type).
    attaches: Vec<(usize, usize, i64, MapName)>,
    /// Host-to-device copies decided under the table lock, done after it is released.
    copies: Vec<PendingCopy>,
    /// Entries this construct marked as being mapped; cleared once its copies are done.
    busy: Vec<usize>,
    /// Events decided under the table lock, emitted after it is released.
    events: Vec<Event<'static>>,
}

impl ConstructState {
    /// Forgets everything, keeping the buffers (a construct's state reused by the next).
    pub(crate) fn clear(&mut self) {
        self.new_entries.clear();
        self.attaches.clear();
        self.copies.clear();
        self.busy.clear();
        self.events.clear();
    }

    /// Whether anything decided under the table lock waits for it to be released.
    fn pending(&self) -> bool {
        !self.copies.is_empty() || !self.busy.is_empty() || !self.events.is_empty()
    }
}

/// A copy to the device, decided while the table was locked.
enum PendingCopy {
    /// Program memory named by a map clause.
    Data { tgt: usize, host: usize, size: usize, name: MapName },
    /// A device pointer value (an attached pointer) to store at `tgt`.
    Pointer { tgt: usize, value: usize, name: MapName },
}

/// Where a pointer or object landed on the device.
#[derive(Debug, Clone, Copy, Default)]
struct TargetPointer {
    tgt: usize,
    key: Option<usize>,
    is_new: bool,
    /// Unified shared memory: the host address is used as is.
    is_host: bool,
}

impl TargetPointer {
    fn present(&self) -> bool {
        self.tgt != 0 || self.is_host
    }
}

struct Request {
    begin: usize,
    base: usize,
    padding: usize,
    size: usize,
    name: MapName,
    ty: i64,
    update_ref: bool,
    copy_to: bool,
}

/// Which directive a data operation comes from (for INFO messages).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Directive {
    Begin,
    End,
    Update,
}
