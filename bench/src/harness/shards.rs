//! Running one closure per shard, each on its own glommio executor pinned to a CPU.
//!
//! Also owns the executors' io_uring settings ([`ShardConfig`]), sized so that all of them
//! fit the user's locked-memory limit (8 MiB on these machines, not raisable).

use std::{any::Any, future::Future, io, sync::OnceLock, time::Duration};

use anyhow::{Context, anyhow};
use glommio::{BuilderErrorKind, ExecutorJoinHandle, GlommioError, LocalExecutorBuilder, Placement};

use super::memlock;

/// glommio registers an executor's I/O memory with each of its three rings (main, latency,
/// poll), and the kernel charges a non-root user's locked memory once per registration.
const RINGS_PER_EXECUTOR: u64 = 3;
/// Share of the memlock limit the executors of one call may use; the rest is headroom for
/// anything else the user locks.
const MEMLOCK_BUDGET_NUM: u64 = 3;
const MEMLOCK_BUDGET_DEN: u64 = 4;
/// glommio raises anything smaller to 64 KiB.
const MIN_IO_MEMORY: u64 = 64 << 10;
/// glommio's own default; more buys nothing for these workloads.
const MAX_IO_MEMORY: u64 = 10 << 20;
/// glommio's default submission depth.
const RING_DEPTH: usize = 128;
/// How long [`run_on_shards_with`] waits for executors that just exited to release their
/// locked memory.
const RELEASE_TIMEOUT: Duration = Duration::from_secs(1);

/// io_uring settings for each shard's executor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShardConfig {
    /// Bytes of registered I/O memory per executor (`LocalExecutorBuilder::io_memory`): the
    /// pool DMA buffers come from. When it runs out, glommio falls back to ordinary heap
    /// buffers and unregistered I/O. When registering it would exceed the memlock limit,
    /// glommio silently runs the whole executor without registered buffers.
    pub io_memory: usize,
    /// Submission queue depth of each ring (`LocalExecutorBuilder::ring_depth`).
    pub ring_depth: usize,
}

impl ShardConfig {
    /// Settings for `shards` executors under this process's `RLIMIT_MEMLOCK`.
    pub fn for_shards(shards: usize) -> Self {
        Self::for_memlock_limit(shards, memlock::limit())
    }

    /// Settings for `shards` executors sharing a locked-memory limit of `limit` bytes.
    ///
    /// For a non-root user the kernel charges each executor three registrations of its I/O
    /// memory plus the memory of its three rings (measured on Linux 6.18: about 16 KiB per
    /// ring at depth 128, about 100 KiB at 1024). Three quarters of the limit is split over
    /// the executors, their rings' estimated size taken off, the rest divided by three,
    /// clamped to 64 KiB..=10 MiB and rounded down to 4 KiB. With 8 MiB and depth 128 that
    /// is 2024 KiB per executor for one shard, 1000 KiB for two, 488 KiB for four, and the
    /// 64 KiB minimum from 24 shards on (from 32 shards the minimum no longer fits and
    /// glommio goes without registered buffers).
    pub fn for_memlock_limit(shards: usize, limit: u64) -> Self {
        let ring_depth = RING_DEPTH;
        let per_executor = limit / MEMLOCK_BUDGET_DEN * MEMLOCK_BUDGET_NUM / shards.max(1) as u64;
        let rings = RINGS_PER_EXECUTOR * memlock::ring_bytes_estimate(ring_depth);
        let io_memory =
            (per_executor.saturating_sub(rings) / RINGS_PER_EXECUTOR).clamp(MIN_IO_MEMORY, MAX_IO_MEMORY) & !4095;
        Self { io_memory: usize::try_from(io_memory).expect("at most 10 MiB"), ring_depth }
    }

    /// Locked memory `shards` executors with these settings are charged for (non-root),
    /// estimated generously.
    pub fn memlock_bytes(&self, shards: usize) -> u64 {
        let per_executor = RINGS_PER_EXECUTOR * (self.io_memory as u64 + memlock::ring_bytes_estimate(self.ring_depth));
        per_executor * shards as u64
    }
}

/// The CPUs this process may run on, read once: `core_affinity::get_core_ids` reports the
/// calling thread's mask, which would shrink to one core if the caller were ever pinned.
fn cpus() -> anyhow::Result<&'static [usize]> {
    static CPUS: OnceLock<Vec<usize>> = OnceLock::new();
    if let Some(cpus) = CPUS.get() {
        return Ok(cpus);
    }
    let ids = core_affinity::get_core_ids()
        .filter(|ids| !ids.is_empty())
        .context("reading the CPUs this process may run on")?;
    Ok(CPUS.get_or_init(|| ids.into_iter().map(|core| core.id).collect()))
}

/// Runs `f(shard)` for every shard in `0..shards`, each on its own thread running a glommio
/// `LocalExecutor` pinned to CPU `cpus[shard % cpus.len()]` (more shards than CPUs share
/// them round-robin), with [`ShardConfig::for_shards`] settings. Returns the results in
/// shard order once all shards finished.
///
/// `f` is cloned into each thread and the future it returns never leaves that thread, so it
/// need not be `Send`.
///
/// Every shard that started is joined before anything is returned, even if another failed;
/// the first error in shard order is returned with the shard number as context, and a
/// panicking shard becomes an error carrying the panic message. If a shard cannot start at
/// all, the error comes after the running shards finished: a shard that waits for all its
/// peers (a barrier, a channel mesh) would then wait forever.
///
/// Before starting, waits (up to 1 s) until the executors' locked memory fits under the
/// user's `RLIMIT_MEMLOCK`: rings of executors that just exited are released asynchronously,
/// and an executor that starts before gets no registered buffers (glommio does not fail, it
/// only runs slower). If there is still no room, a warning goes to stderr.
pub fn run_on_shards<F, Fut, T>(shards: usize, f: F) -> anyhow::Result<Vec<T>>
where
    F: Fn(usize) -> Fut + Send + Sync + Clone + 'static,
    Fut: Future<Output = anyhow::Result<T>> + 'static,
    T: Send + 'static,
{
    run_on_shards_with(ShardConfig::for_shards(shards), shards, f)
}

/// [`run_on_shards`] with explicit executor settings.
pub fn run_on_shards_with<F, Fut, T>(config: ShardConfig, shards: usize, f: F) -> anyhow::Result<Vec<T>>
where
    F: Fn(usize) -> Fut + Send + Sync + Clone + 'static,
    Fut: Future<Output = anyhow::Result<T>> + 'static,
    T: Send + 'static,
{
    anyhow::ensure!(shards > 0, "need at least one shard");
    let cpus = cpus()?;
    if !memlock::wait_until_lockable(config.memlock_bytes(shards), RELEASE_TIMEOUT) {
        eprintln!(
            "warning: not enough locked memory (RLIMIT_MEMLOCK) free for {shards} executors \
             with {} KiB of I/O memory each; some may run without registered io_uring buffers",
            config.io_memory >> 10
        );
    }

    let mut handles = Vec::with_capacity(shards);
    let mut spawn_error = None;
    for shard in 0..shards {
        let cpu = cpus[shard % cpus.len()];
        let f = f.clone();
        let spawned = LocalExecutorBuilder::new(Placement::Fixed(cpu))
            .name(&format!("shard-{shard}"))
            .io_memory(config.io_memory)
            .ring_depth(config.ring_depth)
            .spawn(move || f(shard));
        match spawned {
            Ok(handle) => handles.push(handle),
            Err(e) => {
                let e = glommio_error(e).context(format!("starting shard {shard} on CPU {cpu}"));
                spawn_error = Some(e);
                break;
            }
        }
    }

    // Join everything that started before reporting anything, so no shard outlives the call.
    let joined: Vec<anyhow::Result<T>> =
        handles.into_iter().enumerate().map(|(shard, handle)| join_shard(shard, handle)).collect();
    if let Some(e) = spawn_error {
        return Err(e);
    }
    joined.into_iter().collect()
}

fn join_shard<T: Send + 'static>(shard: usize, handle: ExecutorJoinHandle<anyhow::Result<T>>) -> anyhow::Result<T> {
    match handle.join() {
        Ok(result) => result.with_context(|| format!("shard {shard} failed")),
        Err(e) => Err(glommio_error(e).context(format!("shard {shard} failed"))),
    }
}

/// `GlommioError` is not `Sync` (it can hold a panic payload), so it cannot go into an
/// `anyhow::Error` as is.
fn glommio_error(e: GlommioError<()>) -> anyhow::Error {
    match e {
        GlommioError::BuilderError(BuilderErrorKind::ThreadPanic(payload)) => {
            anyhow!("panicked: {}", panic_message(payload.as_ref()))
        }
        other => anyhow::Error::new(io::Error::from(other)),
    }
}

fn panic_message(payload: &(dyn Any + Send)) -> &str {
    payload
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("<non-string panic payload>")
}
