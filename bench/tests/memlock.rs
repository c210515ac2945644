//! glommio executors started by `run_on_shards` get their I/O memory registered with
//! io_uring, within the locked-memory limit (8 MiB on these machines).
//!
//! A separate test binary, hence a separate process: the kernel counts locked memory per user
//! and pinned memory per process, so executors of concurrently running tests would make the
//! numbers meaningless. The checks bite when run as a non-root user (root is exempt from the
//! limit; registrations are counted in `VmPin` all the same), e.g.
//! `setpriv --reuid=65534 --regid=65534 --clear-groups target/debug/deps/memlock-<hash>`.

use std::{
    fs,
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    thread,
    time::{Duration, Instant},
};

use sluice_bench::harness::{ShardConfig, run_on_shards_with};

/// This process's pinned memory in bytes.
fn vm_pin_bytes() -> u64 {
    let status = fs::read_to_string("/proc/self/status").expect("read /proc/self/status");
    let kib = status
        .lines()
        .find_map(|l| l.strip_prefix("VmPin:"))
        .and_then(|v| v.trim().strip_suffix("kB"))
        .and_then(|v| v.trim().parse::<u64>().ok())
        .expect("VmPin line");
    kib * 1024
}

/// Waits until `n` threads arrived, giving up after 10 s so that a shard that failed to
/// start cannot hang the test.
fn rendezvous(arrived: &AtomicUsize, n: usize) {
    arrived.fetch_add(1, Ordering::SeqCst);
    let deadline = Instant::now() + Duration::from_secs(10);
    while arrived.load(Ordering::SeqCst) < n && Instant::now() < deadline {
        thread::sleep(Duration::from_millis(1));
    }
}

/// Starts `shards` executors and returns `VmPin` seen while all of them are up.
fn pinned_while_running(config: ShardConfig, shards: usize) -> u64 {
    let up = Arc::new(AtomicUsize::new(0));
    let done = Arc::new(AtomicUsize::new(0));
    let pinned = run_on_shards_with(config, shards, move |_| {
        let (up, done) = (up.clone(), done.clone());
        async move {
            rendezvous(&up, shards);
            let pinned = vm_pin_bytes();
            rendezvous(&done, shards);
            Ok(pinned)
        }
    })
    .expect("executors start");
    pinned.into_iter().min().expect("at least one shard")
}

#[test]
fn executors_register_their_io_memory_back_to_back() {
    // 1, 2 and 4 executors, each started right after the previous ones exited: io_uring
    // releases rings asynchronously, and run_on_shards waits for that.
    for shards in [1, 2, 4, 4, 1] {
        let config = ShardConfig::for_shards(shards);
        let registered = 3 * shards as u64 * config.io_memory as u64;
        let pinned = pinned_while_running(config, shards);
        assert!(pinned >= registered, "{shards} shards {config:?}: VmPin {pinned} < {registered} registered");
    }
}
