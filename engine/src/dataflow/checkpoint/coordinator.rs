//! The checkpoint coordinator: begins checkpoints, collects the shards' acknowledgements,
//! commits manifests, aborts what times out, and loads the checkpoint to restore from.

use std::{
    collections::BTreeMap,
    sync::{
        Arc, Condvar, Mutex, PoisonError,
        atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use sluice_io::{CheckpointId, CheckpointStore, Manifest, PartInfo, UringStorage};

use super::{
    CheckpointConfig, CheckpointError, CheckpointStats, Restored, ShardPart, decode_part, encode_part,
    legacy::{PART_FORMAT, part_format},
    part_name,
    savepoint::{Savepoint, SavepointRequest},
};

/// A shard's answer for one checkpoint: its part, or why it has none.
#[derive(Debug)]
pub(crate) struct Ack {
    pub(crate) id: CheckpointId,
    pub(crate) shard: usize,
    /// The shard's snapshot, encoded and written by the coordinator.
    pub(crate) part: ShardPart,
    /// The checkpoint the part's deltas build on.
    pub(crate) base: Option<u64>,
    pub(crate) keys: u64,
    /// In-flight records in the part (unaligned mode).
    pub(crate) inflight: u64,
    pub(crate) alignment: Duration,
}

/// A checkpoint of this run that did not complete, and why. The pipeline goes on and
/// begins the next one after its interval, as it does after every failed checkpoint (so
/// a cause that lasts, such as a checkpoint directory removed under the pipeline, fails
/// each one in turn: see [`RunningPipeline::failed_checkpoints`]).
///
/// [`RunningPipeline::failed_checkpoints`]: crate::dataflow::RunningPipeline::failed_checkpoints
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckpointFailure {
    /// The checkpoint (its id is used up).
    pub id: CheckpointId,
    /// What failed: beginning it, a shard's snapshot, its deadline, or its commit.
    pub reason: String,
}

/// What the coordinator and the shards share. The shards only read atomics and send
/// acknowledgements; nothing here is on the record path.
#[derive(Debug)]
pub(crate) struct CheckpointCoordinator {
    /// The checkpoint whose barriers sources inject (0: none yet).
    pub(crate) trigger: AtomicU64,
    /// The checkpoint that is the final one of bounded inputs, once it begins (0: none);
    /// set before its trigger.
    pub(crate) final_trigger: AtomicU64,
    /// The last completed checkpoint (0: none in this run).
    pub(crate) completed: AtomicU64,
    /// The final checkpoint of bounded inputs has completed: sources may end.
    pub(crate) final_done: AtomicBool,
    /// A checkpoint every shard snapshots whole (a savepoint; 0: none); set before its
    /// trigger.
    pub(crate) full: AtomicU64,
    /// A savepoint after whose barrier the sources read nothing more and end once it has
    /// completed (`stop_with_savepoint`; 0: none). Set before its trigger, cleared if it
    /// fails (the sources then go on).
    pub(crate) stop_at: AtomicU64,
    /// The stopping savepoint that is durable in its directory: sources held at its barrier
    /// end (0: none).
    pub(crate) stop_done: AtomicU64,
    /// The savepoint asked for and not yet begun.
    savepoint: Mutex<Option<SavepointRequest>>,
    /// Sources registered, over all shards, and those that ran out.
    pub(crate) sources: AtomicUsize,
    pub(crate) exhausted: AtomicUsize,
    /// Shards whose graph is built.
    pub(crate) built: AtomicUsize,
    /// Transactional sink instances, and those done with recovery.
    pub(crate) sinks: AtomicUsize,
    pub(crate) sinks_recovered: AtomicUsize,
    /// What the pipeline restores from.
    pub(crate) restored: Option<Arc<Restored>>,
    shards: usize,
    acks: (async_channel::Sender<Ack>, async_channel::Receiver<Ack>),
    stats: Mutex<Vec<CheckpointStats>>,
    /// The checkpoints of this run that failed, in order.
    failures: Mutex<Vec<CheckpointFailure>>,
    /// When the last checkpoint completed (for its age in the metrics).
    pub(crate) last_completed_at: Mutex<Option<std::time::Instant>>,
    /// How long reading the restored checkpoint took (its parts read, checked and
    /// merged), when the pipeline restored.
    pub(crate) restore_read: Mutex<Option<std::time::Duration>>,
    /// When reading the restored checkpoint began, when the pipeline restored.
    pub(crate) restore_began: Mutex<Option<std::time::Instant>>,
    /// From `restore_began` until the last shard had taken its state (the read, then
    /// every shard's build and decoding).
    pub(crate) restore_ready: Mutex<Option<std::time::Duration>>,
    /// Signalled when a checkpoint completes and when the coordinator's loop ends.
    changed: Condvar,
    /// The coordinator's loop has returned: no checkpoint will complete any more.
    done: AtomicBool,
    stop: AtomicBool,
}

impl CheckpointCoordinator {
    /// A shard has built its graph and taken its restored state: the restore time is until
    /// the last shard's. Once per shard, before `spawn` returns.
    pub(crate) fn note_shard_restored(&self) {
        let Some(began) = *self.restore_began.lock().unwrap_or_else(std::sync::PoisonError::into_inner) else {
            return;
        };
        let mut ready = self.restore_ready.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let now = began.elapsed();
        *ready = Some(ready.map_or(now, |r| r.max(now)));
    }

    pub(crate) fn new(shards: usize, restored: Option<Arc<Restored>>) -> CheckpointCoordinator {
        CheckpointCoordinator {
            trigger: AtomicU64::new(0),
            final_trigger: AtomicU64::new(0),
            completed: AtomicU64::new(0),
            final_done: AtomicBool::new(false),
            full: AtomicU64::new(0),
            stop_at: AtomicU64::new(0),
            stop_done: AtomicU64::new(0),
            savepoint: Mutex::new(None),
            sources: AtomicUsize::new(0),
            exhausted: AtomicUsize::new(0),
            built: AtomicUsize::new(0),
            sinks: AtomicUsize::new(0),
            sinks_recovered: AtomicUsize::new(0),
            restored,
            shards,
            acks: async_channel::unbounded(),
            stats: Mutex::new(Vec::new()),
            failures: Mutex::new(Vec::new()),
            last_completed_at: Mutex::new(None),
            restore_read: Mutex::new(None),
            restore_began: Mutex::new(None),
            restore_ready: Mutex::new(None),
            changed: Condvar::new(),
            done: AtomicBool::new(false),
            stop: AtomicBool::new(false),
        }
    }

    pub(crate) fn ack(&self, ack: Ack) {
        let _ = self.acks.0.try_send(ack);
    }

    pub(crate) fn stop(&self) {
        self.stop.store(true, Ordering::Release);
    }

    /// The last completed checkpoint (0: none in this run).
    pub(crate) fn completed(&self) -> CheckpointId {
        CheckpointId(self.completed.load(Ordering::Acquire))
    }

    /// The checkpoint whose barriers sources inject (0: none yet).
    pub(crate) fn trigger(&self) -> CheckpointId {
        CheckpointId(self.trigger.load(Ordering::Acquire))
    }

    /// Blocks until a checkpoint with an id above `after` has completed, and returns the
    /// first such; `None` when `timeout` passes or the coordinator's loop ends first.
    pub(crate) fn wait_for(&self, after: CheckpointId, timeout: Duration) -> Option<CheckpointStats> {
        let deadline = Instant::now() + timeout;
        let mut stats = self.stats.lock().unwrap_or_else(PoisonError::into_inner);
        loop {
            if let Some(s) = stats.iter().find(|s| s.id > after) {
                return Some(*s);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() || self.done.load(Ordering::Acquire) {
                return None;
            }
            stats = self.changed.wait_timeout(stats, left).unwrap_or_else(PoisonError::into_inner).0;
        }
    }

    /// Marks the coordinator's loop as ended and wakes every waiter; a savepoint asked for
    /// and not begun fails.
    fn finish(&self) {
        {
            let mut request = self.savepoint.lock().unwrap_or_else(PoisonError::into_inner);
            self.done.store(true, Ordering::Release);
            if let Some(request) = request.take() {
                request.fail("the pipeline took no more checkpoints");
            }
        }
        let _stats = self.stats.lock().unwrap_or_else(PoisonError::into_inner);
        self.changed.notify_all();
    }

    /// Asks for a savepoint; it fails at once when another is pending or the coordinator
    /// has stopped.
    pub(crate) fn request_savepoint(&self, request: SavepointRequest) {
        let mut slot = self.savepoint.lock().unwrap_or_else(PoisonError::into_inner);
        if self.done.load(Ordering::Acquire) {
            request.fail("the pipeline takes no more checkpoints");
        } else if slot.is_some() {
            request.fail("another savepoint is being taken");
        } else {
            *slot = Some(request);
        }
    }

    /// Every completed checkpoint's figures, in order.
    pub(crate) fn stats(&self) -> Vec<CheckpointStats> {
        self.stats.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// Every failed checkpoint of this run, in order.
    pub(crate) fn failures(&self) -> Vec<CheckpointFailure> {
        self.failures.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// Checkpoint `id` failed for `reason`: logged and kept for
    /// [`CheckpointCoordinator::failures`].
    fn failed(&self, id: CheckpointId, reason: String) {
        eprintln!("sluice: checkpoint {id} failed: {reason}");
        self.failures.lock().unwrap_or_else(PoisonError::into_inner).push(CheckpointFailure { id, reason });
    }

    /// Whether every source of the pipeline has run out.
    fn all_exhausted(&self) -> bool {
        self.built.load(Ordering::Acquire) == self.shards && {
            let sources = self.sources.load(Ordering::Acquire);
            sources > 0 && self.exhausted.load(Ordering::Acquire) >= sources
        }
    }

    /// Whether every transactional sink finished its recovery, so new transactions may
    /// start.
    pub(crate) fn sinks_ready(&self) -> bool {
        self.built.load(Ordering::Acquire) == self.shards
            && self.sinks_recovered.load(Ordering::Acquire) >= self.sinks.load(Ordering::Acquire)
    }
}

/// Opens the checkpoint store and reads the latest completed checkpoint that is whole,
/// falling back to older ones (with a log line naming what was skipped and why).
///
/// Each part is read once: reading checks its header, length and CRC (and those of the
/// parts of older checkpoints its deltas build on), so there is no separate verification
/// pass. Checkpoints that exist but none of which can be read are an error, not a fresh
/// start: starting over would replay from the beginning and break exactly-once output.
pub(crate) async fn open_store(
    config: &CheckpointConfig,
) -> Result<(CheckpointStore<UringStorage>, Option<Restored>), CheckpointError> {
    // Absolute, so that fsyncing a directory's parent never meets an empty path.
    let dir = std::path::absolute(&config.dir)
        .map_err(|source| CheckpointError::Resolve { dir: config.dir.clone(), source })?;
    let store = CheckpointStore::open(UringStorage, &dir, config.keep)
        .await
        .map_err(|source| CheckpointError::Store { dir: dir.clone(), source })?;
    let completed = store.completed();
    if completed.is_empty()
        && let Some(savepoint) = &config.restore_from
    {
        // The job has no checkpoint of its own yet: it starts from the savepoint.
        let restored = read_savepoint(savepoint).await?;
        let mut store = store;
        store.advance_past(restored.id);
        return Ok((store, Some(restored)));
    }
    let mut failures = Vec::new();
    for &id in completed.iter().rev() {
        match read_checkpoint(&store, id).await {
            Ok(restored) => {
                eprintln!(
                    "sluice: restoring checkpoint {id} ({} parts read, taken at {} shards)",
                    restored.parts, restored.restored.shards
                );
                return Ok((store, Some(restored.restored)));
            }
            Err(e) => {
                eprintln!(
                    "sluice: checkpoint {id} is damaged, falling back to an older one (results an exactly-once sink committed after it are written again): {e}"
                );
                failures.push(e);
            }
        }
    }
    if failures.is_empty() { Ok((store, None)) } else { Err(CheckpointError::NoneReadable { dir, failures }) }
}

/// Reads the savepoint in `dir` (a store holding one completed checkpoint).
async fn read_savepoint(dir: &std::path::Path) -> Result<Restored, CheckpointError> {
    let fail = |reason: String| CheckpointError::Savepoint { dir: dir.to_path_buf(), reason };
    let abs = std::path::absolute(dir).map_err(|e| fail(e.to_string()))?;
    if !abs.is_dir() {
        return Err(fail("no such directory".into()));
    }
    let store = CheckpointStore::open(UringStorage, &abs, 1).await.map_err(|e| fail(e.to_string()))?;
    let Some(&id) = store.completed().last() else {
        return Err(fail("it holds no completed savepoint".into()));
    };
    let read = read_checkpoint(&store, id).await.map_err(|e| fail(e.to_string()))?;
    eprintln!(
        "sluice: restoring savepoint {id} from {} ({} parts read, taken at {} shards)",
        abs.display(),
        read.parts,
        read.restored.shards
    );
    Ok(read.restored)
}

struct ReadCheckpoint {
    restored: Restored,
    parts: usize,
}

/// Reads checkpoint `id`'s parts, each with its chain of bases back to a whole one.
async fn read_checkpoint(
    store: &CheckpointStore<UringStorage>,
    id: sluice_io::CheckpointId,
) -> Result<ReadCheckpoint, CheckpointError> {
    let io = |at: sluice_io::CheckpointId| move |source| CheckpointError::Read { id: at, source };
    let manifest = store.manifest(id).await.map_err(io(id))?;
    let mut restored = Restored { id, ..Restored::default() };
    let mut parts = 0;
    for info in &manifest.parts {
        // The part, and the same shard's parts it is a delta on, back to a whole one.
        let mut chain = Vec::new();
        let (mut at, mut info) = (id, info.clone());
        let mut format = part_format(&manifest.metadata);
        loop {
            let body = store.read_part(at, &info).await.map_err(io(at))?;
            parts += 1;
            // A checkpoint of the first format (no metadata) keys its operators by
            // position only; the second's in-flight records carry no watermarks.
            let part = if format > 1 { decode_part(body, format > 2) } else { super::legacy::decode_v1(&body) };
            let part = part.map_err(|source| CheckpointError::Decode { id: at, part: info.name.clone(), source })?;
            chain.push(part);
            let Some(base) = info.base else { break };
            let older = store.manifest(base).await.map_err(io(base))?;
            format = part_format(&older.metadata);
            info = older.part(&info.name).cloned().ok_or_else(|| CheckpointError::MissingBase {
                id: base,
                part: info.name.clone(),
                of: at,
            })?;
            at = base;
        }
        chain.reverse();
        restored.merge_chain(chain);
    }
    Ok(ReadCheckpoint { restored, parts })
}

/// Sleeps on the coordinator's executor.
async fn sleep(d: Duration) {
    glommio::timer::sleep(d).await;
}

/// Takes checkpoints until stopped (or until the final one of bounded inputs completes).
pub(crate) async fn run_coordinator(
    coordinator: Arc<CheckpointCoordinator>,
    config: CheckpointConfig,
    store: CheckpointStore<UringStorage>,
) {
    take_checkpoints(&coordinator, config, store).await;
    coordinator.finish();
}

/// What waiting for the interval decided.
enum Next {
    /// Take a checkpoint; `true` when it is the final one of bounded inputs.
    Take(bool),
    /// Take a savepoint.
    Savepoint(SavepointRequest),
    /// The pipeline is stopping.
    Stop,
}

/// Waits out the interval, or less when every bounded source has run out.
async fn wait_for_next(coordinator: &CheckpointCoordinator, interval: Duration) -> Next {
    let due = Instant::now() + interval;
    loop {
        if coordinator.stop.load(Ordering::Acquire) {
            return Next::Stop;
        }
        if coordinator.all_exhausted() {
            return Next::Take(true);
        }
        if let Some(request) = coordinator.savepoint.lock().unwrap_or_else(PoisonError::into_inner).take() {
            return Next::Savepoint(request);
        }
        let now = Instant::now();
        if now >= due {
            return Next::Take(false);
        }
        sleep((due - now).min(Duration::from_millis(5))).await;
    }
}

/// Every shard's part of one checkpoint, as written, and the figures of its acks.
#[derive(Default)]
struct Collected {
    parts: BTreeMap<usize, (PartInfo, u64)>,
    keys: u64,
    inflight_records: u64,
    alignment: Duration,
}

/// How collecting a checkpoint's parts ended.
enum Collect {
    Done(Collected),
    Failed(String),
    Stopped,
}

/// Collects every shard's acknowledgement of checkpoint `id` and writes its part, until
/// all are written, one fails, the deadline passes, or the pipeline stops.
async fn collect_parts(
    coordinator: &CheckpointCoordinator,
    store: &mut CheckpointStore<UringStorage>,
    id: sluice_io::CheckpointId,
    deadline: Instant,
    timeout: Duration,
) -> Collect {
    let rx = &coordinator.acks.1;
    let mut got = Collected::default();
    while got.parts.len() < coordinator.shards {
        if coordinator.stop.load(Ordering::Acquire) {
            return Collect::Stopped;
        }
        let wait = deadline.saturating_duration_since(Instant::now());
        if wait.is_zero() {
            return Collect::Failed(format!("timed out after {timeout:?}"));
        }
        let ack = futures_lite::future::or(async { rx.recv().await.ok() }, async {
            sleep(wait.min(Duration::from_millis(20))).await;
            None
        })
        .await;
        let Some(ack) = ack else { continue };
        if ack.id != id {
            continue;
        }
        let written = match encode_part(&ack.part) {
            Ok(body) => store
                .write_part(id, &part_name(ack.shard), ack.base.map(sluice_io::CheckpointId), &body)
                .await
                .map(|info| (info, body.len() as u64))
                .map_err(|e| e.to_string()),
            Err(e) => Err(e.to_string()),
        };
        match written {
            Ok(part) => {
                got.keys += ack.keys;
                got.inflight_records += ack.inflight;
                got.alignment = got.alignment.max(ack.alignment);
                got.parts.insert(ack.shard, part);
            }
            Err(e) => return Collect::Failed(format!("shard {}'s snapshot: {e}", ack.shard)),
        }
    }
    Collect::Done(got)
}

async fn take_checkpoints(
    coordinator: &Arc<CheckpointCoordinator>,
    config: CheckpointConfig,
    mut store: CheckpointStore<UringStorage>,
) {
    loop {
        let (last, savepoint) = match wait_for_next(coordinator, config.interval).await {
            Next::Stop => return,
            Next::Take(last) => (last, None),
            Next::Savepoint(request) => (false, Some(request)),
        };
        let started = Instant::now();
        let id = match store.begin().await {
            Ok(id) => id,
            Err(e) => {
                coordinator.failed(CheckpointId(store.next_id().0 - 1), format!("cannot begin: {e}"));
                if let Some(request) = savepoint {
                    request.fail(format!("cannot begin its checkpoint: {e}"));
                }
                sleep(config.interval).await;
                continue;
            }
        };
        while coordinator.acks.1.try_recv().is_ok() {}
        if last {
            coordinator.final_trigger.store(id.0, Ordering::Release);
        }
        if let Some(request) = &savepoint {
            coordinator.full.store(id.0, Ordering::Release);
            if request.stop {
                coordinator.stop_at.store(id.0, Ordering::Release);
            }
        }
        coordinator.trigger.store(id.0, Ordering::Release);
        let got = match collect_parts(coordinator, &mut store, id, started + config.timeout, config.timeout).await {
            Collect::Done(got) => got,
            Collect::Stopped => {
                let _ = store.abort(id).await;
                fail_savepoint(coordinator, savepoint, "the pipeline stopped");
                return;
            }
            Collect::Failed(reason) => {
                coordinator.failed(id, format!("aborted: {reason}"));
                if let Err(e) = store.abort(id).await {
                    eprintln!("sluice: removing aborted checkpoint {id} failed: {e}");
                }
                fail_savepoint(coordinator, savepoint, format!("its checkpoint {id} was aborted: {reason}"));
                continue;
            }
        };
        let bytes = got.parts.values().map(|(_, b)| b).sum();
        let manifest = Manifest::new(id, got.parts.into_values().map(|(info, _)| info).collect(), PART_FORMAT.to_vec());
        match store.commit(&manifest).await {
            Ok(_) => {
                coordinator.completed.store(id.0, Ordering::Release);
                let (alignment, keys, inflight_records) = (got.alignment, got.keys, got.inflight_records);
                let stats =
                    CheckpointStats { id, duration: started.elapsed(), alignment, bytes, keys, inflight_records };
                coordinator.stats.lock().unwrap_or_else(PoisonError::into_inner).push(stats);
                *coordinator.last_completed_at.lock().unwrap_or_else(PoisonError::into_inner) =
                    Some(std::time::Instant::now());
                coordinator.changed.notify_all();
                if let Some(request) = savepoint {
                    finish_savepoint(coordinator, &store, request, stats);
                }
                if last {
                    coordinator.final_done.store(true, Ordering::Release);
                    return;
                }
            }
            Err(e) => {
                coordinator.failed(id, format!("failed to commit: {e}"));
                fail_savepoint(coordinator, savepoint, format!("its checkpoint {id} failed to commit: {e}"));
            }
        }
    }
}

/// A savepoint's checkpoint failed: the sources a stopping savepoint held go on.
fn fail_savepoint(coordinator: &CheckpointCoordinator, request: Option<SavepointRequest>, reason: impl Into<String>) {
    if let Some(request) = request {
        coordinator.stop_at.store(0, Ordering::Release);
        request.fail(reason);
    }
}

/// A savepoint's checkpoint completed: copies it into the savepoint's directory and
/// answers the request.
fn finish_savepoint(
    coordinator: &CheckpointCoordinator,
    store: &CheckpointStore<UringStorage>,
    request: SavepointRequest,
    checkpoint: CheckpointStats,
) {
    let exporting = Instant::now();
    let dir = match std::path::absolute(&request.dir) {
        Ok(dir) => dir,
        Err(e) => return fail_savepoint(coordinator, Some(request), format!("resolving its path: {e}")),
    };
    match super::savepoint::export(store.root(), checkpoint.id, &dir) {
        Ok(linked) => {
            let savepoint = Savepoint {
                dir: request.dir.clone(),
                checkpoint,
                linked,
                export: exporting.elapsed(),
                duration: request.requested.elapsed(),
            };
            eprintln!("sluice: savepoint {} taken in {}", checkpoint.id, dir.display());
            if request.stop {
                coordinator.stop_done.store(checkpoint.id.0, Ordering::Release);
            }
            let _ = request.reply.send(Ok(savepoint));
        }
        // The checkpoint completed (its sinks commit), but the savepoint is not there:
        // a stopping job goes on.
        Err(reason) => fail_savepoint(coordinator, Some(request), reason),
    }
}
