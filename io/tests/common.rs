//! Helpers shared by the log's integration tests.
#![allow(dead_code)]

use std::future::Future;
use std::path::PathBuf;

/// Runs `f` on a fresh glommio executor (small io memory, so several fit in 8 MiB of
/// locked memory) and returns its output.
pub fn run<T, F, Fut>(f: F) -> T
where
    F: FnOnce() -> Fut + Send + 'static,
    Fut: Future<Output = T> + 'static,
    T: Send + 'static,
{
    glommio::LocalExecutorBuilder::new(glommio::Placement::Unbound)
        .io_memory(1 << 20)
        .ring_depth(64)
        .spawn(f)
        .expect("spawn executor")
        .join()
        .expect("executor thread")
}

/// A fresh directory under the target's temp area (on a real disk, not tmpfs).
pub fn temp_dir(name: &str) -> PathBuf {
    let base = std::env::var_os("SLUICE_TEST_DIR").map_or_else(|| PathBuf::from(env!("CARGO_TARGET_TMPDIR")), PathBuf::from);
    let dir = base.join(format!("{name}-{}-{}", std::process::id(), rand_suffix()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("create temp dir");
    dir
}

fn rand_suffix() -> u64 {
    use std::time::{SystemTime, UNIX_EPOCH};
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_nanos() as u64).unwrap_or(0)
}

/// The test's seed: `SEED` from the environment, or a fresh one, printed either way.
pub fn seed(test: &str) -> u64 {
    let seed = std::env::var("SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(rand_suffix);
    eprintln!("{test}: SEED={seed}");
    seed
}
