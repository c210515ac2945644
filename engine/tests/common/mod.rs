//! Helpers shared by the engine's integration tests.
#![allow(dead_code)]

use std::ops::Deref;
use std::path::{Path, PathBuf};

/// A fresh data directory under the target's temp area, removed when dropped (after the
/// engine using it, which is declared later and so dropped first).
#[derive(Debug)]
pub struct TestDir(PathBuf);

impl Deref for TestDir {
    type Target = Path;

    fn deref(&self) -> &Path {
        &self.0
    }
}

impl Drop for TestDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A fresh directory named after the test file and case.
pub fn data_dir(file: &str, name: &str) -> TestDir {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("{file}-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    TestDir(dir)
}

impl AsRef<Path> for TestDir {
    fn as_ref(&self) -> &Path {
        &self.0
    }
}

impl AsRef<std::ffi::OsStr> for TestDir {
    fn as_ref(&self) -> &std::ffi::OsStr {
        self.0.as_os_str()
    }
}
