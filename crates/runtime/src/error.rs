//! Runtime errors are values; this is the one place that prints them.
//!
//! Each operation returns its own error type (`MapError`, `LaunchError`, `MemoryApiError`,
//! `LoadError`, `SelectError`, `RegistryError`…). Each is a [`Diagnostic`]: the lines users
//! know from LLVM's libomptarget, each headed `omptarget error:` or `omptarget message:`.
//! The construct and the C boundary decide when to print one ([`report`]); code below them
//! only returns it. A failure that is not the program's (a device lost) says so once, in the
//! error that found it.

use crate::info;
use std::fmt;

/// How a line of a report is headed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Severity {
    /// `omptarget error: …`
    Error,
    /// `omptarget message: …`
    Message,
}

/// Where a [`Diagnostic`] writes its lines.
pub struct Lines<'s> {
    sink: &'s mut dyn FnMut(Severity, fmt::Arguments) -> fmt::Result,
}

impl<'s> Lines<'s> {
    /// Lines that go to `sink`, in order.
    pub fn new(sink: &'s mut dyn FnMut(Severity, fmt::Arguments) -> fmt::Result) -> Self {
        Self { sink }
    }

    /// An `omptarget error:` line.
    pub fn error(&mut self, text: fmt::Arguments) -> fmt::Result {
        (self.sink)(Severity::Error, text)
    }

    /// An `omptarget message:` line.
    pub fn message(&mut self, text: fmt::Arguments) -> fmt::Result {
        (self.sink)(Severity::Message, text)
    }
}

/// An error as the user reads it: zero or more lines, each with its heading. An error with
/// no lines (a device lost earlier, which was said then) fails silently.
pub trait Diagnostic {
    /// Writes the error's lines, in the order they are printed.
    fn write_lines(&self, out: &mut Lines<'_>) -> fmt::Result;
}

/// Prints an error's lines to stderr (and the debug file, when there is one). The only
/// printer of runtime errors: constructs and the C boundary call it once per error.
pub fn report(error: &dyn Diagnostic) {
    let _ = error.write_lines(&mut Lines::new(&mut |severity, text| {
        match severity {
            Severity::Error => info::error(text),
            Severity::Message => info::message(text),
        }
        Ok(())
    }));
}

/// An error's lines without their headings, one per line: its `Display`.
pub fn display(error: &dyn Diagnostic, f: &mut fmt::Formatter<'_>) -> fmt::Result {
    let mut first = true;
    error.write_lines(&mut Lines::new(&mut |_, text| {
        if !std::mem::take(&mut first) {
            f.write_str("\n")?;
        }
        f.write_fmt(text)
    }))
}

/// The headed lines of an error, as [`report`] would print them (for tests).
pub fn headed_lines(error: &dyn Diagnostic) -> Vec<(Severity, String)> {
    let mut lines = Vec::new();
    let _ = error.write_lines(&mut Lines::new(&mut |severity, text| {
        lines.push((severity, text.to_string()));
        Ok(())
    }));
    lines
}

/// `Display` (each line without its heading) and `Error` for a [`Diagnostic`].
macro_rules! diagnostic_display {
    ($($t:ty),* $(,)?) => {$(
        impl std::fmt::Display for $t {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                $crate::error::display(self, f)
            }
        }
        impl std::error::Error for $t {}
    )*};
}
pub(crate) use diagnostic_display;

/// The line that closes a construct given up on, after its step's error and the
/// construct's end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Abandoned {
    /// A `target` region.
    Target,
    /// A data directive, by LLVM's name for its step (`targetDataBegin`…).
    Data(&'static str),
}

impl Diagnostic for Abandoned {
    fn write_lines(&self, out: &mut Lines<'_>) -> fmt::Result {
        match self {
            Abandoned::Target => out.error(format_args!("Executing target region abort target.")),
            Abandoned::Data(step) => out.error(format_args!("Call to {step} failed, abort target.")),
        }
    }
}

diagnostic_display!(Abandoned);

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug)]
    struct Two;
    impl Diagnostic for Two {
        fn write_lines(&self, out: &mut Lines<'_>) -> fmt::Result {
            out.message(format_args!("first {}", 1))?;
            out.error(format_args!("second"))
        }
    }
    diagnostic_display!(Two);

    #[test]
    fn display_is_the_lines_without_headings() {
        assert_eq!(Two.to_string(), "first 1\nsecond");
        assert_eq!(
            headed_lines(&Two),
            vec![(Severity::Message, "first 1".to_string()), (Severity::Error, "second".to_string())]
        );
        assert_eq!(Abandoned::Data("targetDataEnd").to_string(), "Call to targetDataEnd failed, abort target.");
    }
}
