//! Pure, safe readers for the binary formats of OpenMP offloading.
//!
//! Every reader takes bytes nobody vouched for: reads are bounds-checked and return
//! [`FormatError`], never panic.

#![forbid(unsafe_code)]

pub mod bytes;
pub mod elf;
pub mod entries;
pub mod json;
pub mod offload_binary;
pub mod source_loc;

pub use entries::{parse_entry_table, EntryLayout, OffloadEntry};
pub use offload_binary::{ImageKind, OffloadBinary, OffloadKind};
pub use source_loc::SourceLocation;

/// Why a byte buffer could not be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FormatError {
    /// The buffer ends before a field that must be there.
    Truncated { what: &'static str, need: u64, have: u64 },
    /// A magic number or version does not match.
    BadMagic { what: &'static str },
    /// A field holds a value the format forbids.
    Invalid { what: &'static str, detail: String },
}

impl std::fmt::Display for FormatError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FormatError::Truncated { what, need, have } => {
                write!(f, "{what}: truncated (needs {need} bytes, has {have})")
            }
            FormatError::BadMagic { what } => write!(f, "{what}: bad magic number"),
            FormatError::Invalid { what, detail } => write!(f, "{what}: {detail}"),
        }
    }
}

impl std::error::Error for FormatError {}
