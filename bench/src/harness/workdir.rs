//! The directory a benchmark run writes into.

use std::{
    fs, io,
    path::{Path, PathBuf},
    process,
    sync::atomic::{AtomicU64, Ordering},
    time::{SystemTime, UNIX_EPOCH},
};

/// Where fresh temporary work directories are created. Deliberately not `$TMPDIR`: O_DIRECT
/// needs a real file system, and `/tmp` is ext4 on these machines (tmpfs would silently
/// turn glommio's direct I/O into buffered I/O).
const TEMP_ROOT: &str = "/tmp";

/// A directory for a run's files.
///
/// Either a fresh, uniquely named directory under `/tmp`, deleted with everything in it on
/// drop unless kept ([`fresh`](Self::fresh)), or a directory the user chose, which is created
/// if missing and never deleted ([`at`](Self::at)).
#[derive(Debug)]
pub struct WorkDir {
    path: PathBuf,
    remove_on_drop: bool,
}

impl WorkDir {
    /// Creates `/tmp/<prefix>-<pid>-<n>`, unique in this process and not pre-existing. It is
    /// removed recursively on drop unless `keep`.
    pub fn fresh(prefix: &str, keep: bool) -> io::Result<Self> {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let pid = process::id();
        // Only makes names from different runs of the same pid unlikely to collide;
        // `create_dir` below is what guarantees a fresh directory.
        let nanos = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.subsec_nanos());
        loop {
            let n = NEXT.fetch_add(1, Ordering::Relaxed);
            let path = Path::new(TEMP_ROOT).join(format!("{prefix}-{pid}-{nanos:09}-{n}"));
            match fs::create_dir(&path) {
                Ok(()) => {
                    return Ok(Self { path, remove_on_drop: !keep });
                }
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(e),
            }
        }
    }

    /// Uses `path`, creating it (and its parents) if needed. Never removed.
    pub fn at(path: impl Into<PathBuf>) -> io::Result<Self> {
        let path = path.into();
        fs::create_dir_all(&path)?;
        Ok(Self { path, remove_on_drop: false })
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Whether the directory is deleted on drop.
    pub fn is_temporary(&self) -> bool {
        self.remove_on_drop
    }
}

impl Drop for WorkDir {
    fn drop(&mut self) {
        if self.remove_on_drop {
            // Best effort: a leftover temp dir is not worth a panic in drop.
            let _ = fs::remove_dir_all(&self.path);
        }
    }
}
