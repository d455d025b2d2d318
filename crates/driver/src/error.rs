//! The driver's one error type: a single line, printed as `ompcc: error: …`.

use std::fmt;

/// Why ompcc stopped. The message is one line, without the `ompcc: error:` prefix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error(pub String);

impl Error {
    /// An error with the given message.
    pub fn new(msg: impl Into<String>) -> Self {
        Error(msg.into())
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Error {}

/// The driver's result type.
pub type Result<T> = std::result::Result<T, Error>;

/// Returns early with a formatted [`Error`].
#[macro_export]
macro_rules! bail {
    ($($t:tt)*) => { return Err($crate::error::Error::new(format!($($t)*))) };
}
