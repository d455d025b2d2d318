//! Where intermediate files go: a private directory removed at the end, or the current
//! directory under `--save-temps`.

use crate::error::{Error, Result};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

/// The intermediate files of one ompcc run.
#[derive(Debug)]
pub struct Temps {
    dir: PathBuf,
    keep: bool,
    created: bool,
    counter: AtomicUsize,
}

impl Temps {
    /// Creates the directory (unless `dry_run`). Under `save` files go to the current directory.
    pub fn new(save: bool, dry_run: bool) -> Result<Temps> {
        if save {
            return Ok(Temps { dir: PathBuf::from("."), keep: true, created: false, counter: AtomicUsize::new(0) });
        }
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.subsec_nanos());
        let dir = std::env::temp_dir().join(format!("ompcc-{}-{nanos:x}", std::process::id()));
        if !dry_run {
            std::fs::create_dir_all(&dir)
                .map_err(|e| Error::new(format!("cannot create temporary directory {}: {e}", dir.display())))?;
        }
        Ok(Temps { dir, keep: false, created: !dry_run, counter: AtomicUsize::new(0) })
    }

    /// A fresh path `<stem>.<suffix>`; a number keeps private names unique.
    pub fn path(&self, stem: &str, suffix: &str) -> PathBuf {
        if self.keep {
            return self.dir.join(format!("{stem}.{suffix}"));
        }
        let n = self.counter.fetch_add(1, Ordering::Relaxed);
        self.dir.join(format!("{stem}-{n}.{suffix}"))
    }
}

impl Drop for Temps {
    fn drop(&mut self) {
        if self.created && !self.keep {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// The file name of `path` without directory and extension.
pub fn stem(path: &str) -> String {
    Path::new(path).file_stem().map_or_else(|| "out".to_string(), |s| s.to_string_lossy().into_owned())
}
