//! Helpers shared by the engine's integration tests.
#![allow(dead_code)]

pub mod kafka;

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

/// SplitMix64: a small, good, seedable generator for test inputs.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator seeded with `seed`.
    pub fn seeded(seed: u64) -> Rng {
        Rng(seed)
    }

    /// A generator seeded from `SEED` (to replay a run) or the clock; prints the seed.
    pub fn from_env() -> Rng {
        Rng(seed_from_env())
    }

    /// The next 64 random bits.
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `0..n`.
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    /// A number in `0..n`, signed.
    pub fn below_i64(&mut self, n: u64) -> i64 {
        self.below(n) as i64
    }
}

/// The seed of a randomized test: `SEED` if set (to replay a run), else the clock. Printed
/// as `SEED=<n>` so a failing run can be replayed.
pub fn seed_from_env() -> u64 {
    let seed = std::env::var("SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(|| {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(1, |d| d.as_nanos() as u64)
    });
    println!("SEED={seed}");
    seed
}
