//! Running (or, under `-###`, printing) the commands of a build.

use crate::bail;
use crate::error::Result;
use std::process::{Command, Stdio};

/// One external command and what it does, for messages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cmd {
    pub prog: String,
    pub args: Vec<String>,
    /// What failed, when it fails: "a.c: compile for offload target x86_64-pc-linux-gnu".
    pub what: String,
    /// A `#` line printed before the command under -v/-###.
    pub note: Option<String>,
}

impl Cmd {
    /// A command running `prog`, described by `what` in error messages.
    pub fn new(prog: impl Into<String>, what: impl Into<String>) -> Self {
        Cmd { prog: prog.into(), args: Vec::new(), what: what.into(), note: None }
    }

    /// Appends one argument.
    pub fn arg(&mut self, a: impl Into<String>) -> &mut Self {
        self.args.push(a.into());
        self
    }

    /// Appends several arguments.
    pub fn args<I, S>(&mut self, it: I) -> &mut Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.args.extend(it.into_iter().map(Into::into));
        self
    }

    /// The command as a shell line, quoted where needed.
    pub fn shell_line(&self) -> String {
        std::iter::once(&self.prog).chain(&self.args).map(|a| quote(a)).collect::<Vec<_>>().join(" ")
    }
}

/// Quotes `s` for a POSIX shell when it holds anything but plain characters.
pub fn quote(s: &str) -> String {
    let plain = !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || "-_./=,:+@%".contains(c));
    if plain {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', "'\\''"))
    }
}

/// How commands are carried out.
#[derive(Debug, Clone, Copy)]
pub struct Runner {
    /// `-###`: print, do not run.
    pub dry_run: bool,
    /// `-v`: print, then run.
    pub verbose: bool,
}

impl Runner {
    /// Prints a note line (a `#` comment) where commands are printed.
    pub fn note(&self, line: &str) {
        if self.dry_run || self.verbose {
            crate::diag::line(&format!("# {line}"));
        }
    }

    /// Runs `cmd`. Its diagnostics are collected and written to our stderr in one piece when
    /// it ends, so those of commands running side by side never mix within a line.
    pub fn run(&self, cmd: &Cmd) -> Result<()> {
        if let Some(n) = &cmd.note {
            self.note(n);
        }
        if self.dry_run || self.verbose {
            crate::diag::line(&format!(" {}", cmd.shell_line()));
        }
        if self.dry_run {
            return Ok(());
        }
        let output = Command::new(&cmd.prog)
            .args(&cmd.args)
            .stdin(Stdio::inherit())
            .stdout(Stdio::inherit())
            .stderr(Stdio::piped())
            .output();
        let status = match output {
            Ok(o) => {
                crate::diag::write(&o.stderr);
                o.status
            }
            Err(e) => bail!("{}: cannot run '{}': {e}", cmd.what, cmd.prog),
        };
        if !status.success() {
            match status.code() {
                Some(c) => bail!("{} failed (exit code {c})", cmd.what),
                None => bail!("{} failed ({status})", cmd.what),
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoting() {
        assert_eq!(quote("-O2"), "-O2");
        assert_eq!(quote("a b"), "'a b'");
        assert_eq!(quote("it's"), "'it'\\''s'");
        assert_eq!(quote(""), "''");
    }
}
