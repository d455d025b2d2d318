//! What ompcc says on stderr: warnings, errors, the commands of `-v`/`-###`, and the
//! diagnostics of the compilers it runs.
//!
//! `eprintln!` panics when stderr cannot be written (`2>/dev/full`, `2>&1 | head -1`), which
//! would end ompcc with a panic message nobody sees and exit status 101. Here a failed write
//! is remembered instead, and [`crate::cli::main`] then ends with status 1: the build itself
//! goes on to a clean end (temporary files removed, compilers running side by side waited
//! for), it just cannot be told about.

use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};

static STDERR_FAILED: AtomicBool = AtomicBool::new(false);

/// Writes `bytes` to stderr in one piece (lines of jobs running side by side never mix).
pub fn write(bytes: &[u8]) {
    if bytes.is_empty() {
        return;
    }
    let mut err = std::io::stderr().lock();
    if err.write_all(bytes).and_then(|()| err.flush()).is_err() {
        STDERR_FAILED.store(true, Ordering::Relaxed);
    }
}

/// Writes one line (`text` and a newline) to stderr.
pub fn line(text: &str) {
    let mut l = String::with_capacity(text.len() + 1);
    l.push_str(text);
    l.push('\n');
    write(l.as_bytes());
}

/// `ompcc: warning: …`
pub fn warning(msg: impl std::fmt::Display) {
    line(&format!("ompcc: warning: {msg}"));
}

/// `ompcc: error: …`
pub fn error(msg: impl std::fmt::Display) {
    line(&format!("ompcc: error: {msg}"));
}

/// True once a write to stderr has failed.
pub fn stderr_failed() -> bool {
    STDERR_FAILED.load(Ordering::Relaxed)
}
