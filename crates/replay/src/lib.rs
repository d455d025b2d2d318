//! `omp-replay`: runs one kernel launch recorded on an isolated device
//! (`LIBOMPTARGET_RECORD=DIR`, docs/replay.md) again, alone, in this process: the recorded
//! device memory mapped back at its recorded addresses ([`memory`]), the device image loaded
//! from the record and its kernel called with the recorded arguments ([`kernel`]), and the
//! memory afterwards compared with the recording, or watched for accesses outside the recorded
//! allocations ([`check`]). Everything the description says is checked
//! against the files before anything is mapped ([`desc`]).

pub mod check;
pub mod desc;
pub mod kernel;
pub mod memory;
pub mod shape;

pub use desc::{Description, Record};

/// What went wrong, said in full (the tool prints it after `omp-replay: error: `).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplayError(String);

impl ReplayError {
    pub fn new(message: impl Into<String>) -> Self {
        ReplayError(message.into())
    }

    /// The same error, said of `what` (a file).
    pub fn context(self, what: &str) -> Self {
        ReplayError(format!("{what}: {}", self.0))
    }
}

impl std::fmt::Display for ReplayError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ReplayError {}
