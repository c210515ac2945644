//! Running one closure per shard, each on its own glommio executor pinned to a CPU.
//!
//! Also owns the executor's io_uring settings ([`ShardConfig`]), which must fit the locked
//! memory limit (8 MiB on these machines, not raisable) across all executors of the process.

use std::{any::Any, future::Future, io, sync::OnceLock};

use anyhow::{Context, anyhow};
use glommio::{
    BuilderErrorKind, ExecutorJoinHandle, GlommioError, LocalExecutorBuilder, Placement,
};

/// glommio registers an executor's I/O memory with each of its three rings (main, latency,
/// poll), and the kernel charges a non-root user's locked memory once per registration.
const RINGS_PER_EXECUTOR: u64 = 3;
/// Share of the memlock limit handed to executors' I/O memory; the rest is headroom for
/// anything else the user locks.
const MEMLOCK_BUDGET_NUM: u64 = 3;
const MEMLOCK_BUDGET_DEN: u64 = 4;
/// glommio raises anything smaller to 64 KiB.
const MIN_IO_MEMORY: u64 = 64 << 10;
/// glommio's own default; more buys nothing for these workloads.
const MAX_IO_MEMORY: u64 = 10 << 20;
/// glommio's default submission depth. Ring memory itself is charged to the memory cgroup,
/// not to memlock (Linux >= 5.12), so this does not enter the budget.
const RING_DEPTH: usize = 128;

/// io_uring settings for each shard's executor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShardConfig {
    /// Bytes of registered I/O memory per executor (`LocalExecutorBuilder::io_memory`): the
    /// pool DMA buffers come from. When it runs out, glommio falls back to ordinary heap
    /// buffers and unregistered I/O; when registering it fails (memlock), glommio logs a
    /// warning and runs without registered buffers at all.
    pub io_memory: usize,
    /// Submission queue depth of each ring (`LocalExecutorBuilder::ring_depth`).
    pub ring_depth: usize,
}

impl ShardConfig {
    /// Settings for `shards` executors under this process's `RLIMIT_MEMLOCK`.
    pub fn for_shards(shards: usize) -> Self {
        Self::for_memlock_limit(shards, memlock_limit())
    }

    /// Settings for `shards` executors sharing a locked-memory limit of `memlock` bytes:
    /// three quarters of it split over `3 * shards` registrations, clamped to
    /// 64 KiB..=10 MiB and rounded down to 4 KiB. With 8 MiB that is 2 MiB per executor for
    /// one shard, 1 MiB for two, 512 KiB for four (a `DmaStreamWriter`'s default 4 x 128 KiB
    /// write-behind), 64 KiB from 32 shards on.
    pub fn for_memlock_limit(shards: usize, memlock: u64) -> Self {
        let registrations = RINGS_PER_EXECUTOR.saturating_mul(shards.max(1) as u64);
        let budget = memlock / MEMLOCK_BUDGET_DEN * MEMLOCK_BUDGET_NUM;
        let io_memory = (budget / registrations).clamp(MIN_IO_MEMORY, MAX_IO_MEMORY) & !4095;
        Self {
            io_memory: usize::try_from(io_memory).expect("at most 10 MiB"),
            ring_depth: RING_DEPTH,
        }
    }
}

/// The soft `RLIMIT_MEMLOCK` in bytes (`u64::MAX` when unlimited or unreadable).
fn memlock_limit() -> u64 {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `getrlimit` only writes a `struct rlimit` through the pointer, which points at
    // a live, properly aligned `libc::rlimit` owned by this frame.
    let rc = unsafe { libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut limit) };
    if rc == 0 { limit.rlim_cur } else { u64::MAX }
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
/// need not be `Send`. Every shard is joined even if another fails; the first error (in shard
/// order) is returned, with the shard number as context. A panicking shard is reported as an
/// error carrying the panic message.
pub fn run_on_shards<F, Fut, T>(shards: usize, f: F) -> anyhow::Result<Vec<T>>
where
    F: Fn(usize) -> Fut + Send + Sync + Clone + 'static,
    Fut: Future<Output = anyhow::Result<T>> + 'static,
    T: Send + 'static,
{
    run_on_shards_with(ShardConfig::for_shards(shards), shards, f)
}

/// [`run_on_shards`] with explicit executor settings.
pub fn run_on_shards_with<F, Fut, T>(
    config: ShardConfig,
    shards: usize,
    f: F,
) -> anyhow::Result<Vec<T>>
where
    F: Fn(usize) -> Fut + Send + Sync + Clone + 'static,
    Fut: Future<Output = anyhow::Result<T>> + 'static,
    T: Send + 'static,
{
    anyhow::ensure!(shards > 0, "need at least one shard");
    let cpus = cpus()?;

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
    let joined: Vec<anyhow::Result<T>> = handles
        .into_iter()
        .enumerate()
        .map(|(shard, handle)| join_shard(shard, handle))
        .collect();
    if let Some(e) = spawn_error {
        return Err(e);
    }
    joined.into_iter().collect()
}

fn join_shard<T: Send + 'static>(
    shard: usize,
    handle: ExecutorJoinHandle<anyhow::Result<T>>,
) -> anyhow::Result<T> {
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
