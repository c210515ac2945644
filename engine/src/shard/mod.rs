//! A shard: one glommio executor pinned to a CPU, owning the partition logs assigned to
//! it. It serves requests from the engine handle (which any thread may hold) one task per
//! request, so appends that arrive together share a group commit.
//!
//! Contract: only this shard's executor touches its logs; everything in [`ShardState`]
//! is `!Send` and lives on that executor. Requests and replies cross threads through
//! bounded channels; records cross as owned bytes.

mod cleaner;
mod groups;
mod metrics;
mod partition;
mod request;

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;
use std::time::Duration;

use std::path::PathBuf;

use sluice_io::{CleanTrigger, Log, LogConfig, PartitionId, UringStorage};

pub use self::cleaner::CleanerStats;
use self::partition::{Partition, append, enqueue, fetch, flush_pending, reconfigure, wake_all};
pub(crate) use self::request::{Batching, LocalTask, Reply, Request};
use crate::error::{EngineError, Result};
use crate::group::coordinator::GroupCoordinator;
use crate::group::offsets::{self, CommittedDetails};

type Key = (String, PartitionId);

/// Everything a shard owns.
#[derive(Default)]
struct ShardState {
    partitions: HashMap<Key, Rc<RefCell<Partition>>>,
    /// The consumer groups whose offsets-topic partition lives here.
    groups: GroupCoordinator,
    /// Committed offsets by group, as read from and written to the offsets topic.
    committed: HashMap<String, CommittedDetails>,
    /// Kafka clients' JoinGroup and SyncGroup requests waiting for their answers.
    waiters: groups::Waiters,
    /// What the cleaner has done, and its task queue.
    cleaning: CleanerStats,
    cleaner: Option<glommio::TaskQueueHandle>,
}

/// What a shard is started with.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ShardSettings {
    /// How often the cleaner passes over the shard's partitions.
    pub(crate) retention_check: Duration,
}

/// How often a shard looks for members whose session timed out.
const EXPIRY_CHECK: Duration = Duration::from_millis(25);

/// Runs a shard until it is told to shut down or every sender is gone.
pub(crate) async fn run(requests: async_channel::Receiver<Request>, settings: ShardSettings) {
    let state = Rc::new(RefCell::new(ShardState::default()));
    let cleaner_queue = cleaner::queue();
    state.borrow_mut().cleaner = Some(cleaner_queue);
    cleaner::spawn_checks(Rc::downgrade(&state), cleaner_queue, settings.retention_check);
    cleaner::spawn_failure_probes(Rc::downgrade(&state), cleaner_queue);
    let expiry = Rc::downgrade(&state);
    glommio::spawn_local(async move {
        loop {
            glommio::timer::sleep(EXPIRY_CHECK).await;
            let Some(state) = expiry.upgrade() else { return };
            groups::tick(&state);
        }
    })
    .detach();
    while let Ok(request) = requests.recv().await {
        if let Request::Metrics { reply } = request {
            let _ = reply.try_send(Ok(metrics::sample(&state, requests.len())));
            continue;
        }
        if let Request::Shutdown { reply } = request {
            refuse_queued(&requests);
            let result = shutdown(&state).await;
            release_files(state).await;
            let _ = reply.send(result).await;
            return;
        }
        let state = state.clone();
        glommio::spawn_local(async move { handle(&state, request).await }).detach();
    }
    let _ = shutdown(&state).await;
    release_files(state).await;
}

/// Closes the queue and drops what is still in it, so that a request sent after the
/// shutdown began fails at once and one queued behind it sees its reply channel close
/// (`EngineError::ShutDown`): the channel outlives the shard while handles hold senders,
/// and a request left in it would wait for its answer forever (a metrics scrape during
/// shutdown did).
fn refuse_queued(requests: &async_channel::Receiver<Request>) {
    requests.close();
    while requests.try_recv().is_ok() {}
}

/// Drops the shard's state and gives the executor's reactor a turn, so that the files it
/// held are closed now: glommio closes a dropped file in its next I/O cycle, which an
/// executor about to end never has, and an engine opened again in the same process found
/// every partition's descriptors of the last one still open.
async fn release_files(state: Rc<RefCell<ShardState>>) {
    drop(state);
    glommio::timer::sleep(Duration::from_millis(1)).await;
}

fn partition(state: &Rc<RefCell<ShardState>>, topic: &str, p: PartitionId) -> Result<Rc<RefCell<Partition>>> {
    state
        .borrow()
        .partitions
        .get(&(topic.to_string(), p))
        .cloned()
        .ok_or_else(|| EngineError::UnknownTopic(topic.to_string()))
}

/// Runs `op` on the log of a partition this shard serves; its error names the partition.
async fn on_log<T, Fut>(
    state: &Rc<RefCell<ShardState>>,
    topic: &str,
    p: PartitionId,
    op: impl FnOnce(Log<UringStorage>) -> Fut,
) -> Result<T>
where
    Fut: Future<Output = sluice_io::Result<T>>,
{
    let log = partition(state, topic, p)?.borrow().log.clone();
    op(log).await.map_err(|e| EngineError::log(topic, p, e))
}

/// Serves one request: a group's to `groups`, a partition's here.
async fn handle(state: &Rc<RefCell<ShardState>>, request: Request) {
    let Some(request) = groups::serve(state, request).await else { return };
    match request {
        Request::Open { topic, partition: p, dir, config, batching, reply } => {
            let result = open_partition(state, topic, p, dir, config, batching).await;
            let _ = reply.send(result).await;
        }
        Request::Reconfigure { topic, partition: p, config, batching, reply } => {
            let result = match partition(state, &topic, p) {
                Err(e) => Err(e),
                Ok(part) => reconfigure(&part, config, batching).map_err(|e| EngineError::log(&topic, p, e)),
            };
            let _ = reply.send(result).await;
        }
        Request::Delete { topic, partition: p, reply } => {
            let result = delete_partition(state, topic, p).await;
            let _ = reply.send(result).await;
        }
        Request::Send { topic, partition: p, record, reply } => match partition(state, &topic, p) {
            Err(e) => {
                let _ = reply.send(Err(e)).await;
            }
            Ok(part) => enqueue(part, topic, p, record, reply).await,
        },
        Request::Append { topic, partition: p, records, meta, reply } => {
            let result = match partition(state, &topic, p) {
                Err(e) => Err(e),
                Ok(part) => {
                    let mut headers = Vec::new();
                    append(&part, &topic, p, &records.as_records(&mut headers), &meta).await
                }
            };
            let _ = reply.send(result).await;
        }
        Request::Fetch { topic, partition: p, offset, max_bytes, wait, reply } => {
            let result = match partition(state, &topic, p) {
                Err(e) => Err(e),
                Ok(part) => fetch(&part, &topic, p, offset, max_bytes, wait).await,
            };
            let _ = reply.send(result).await;
        }
        Request::Offsets { topic, partition: p, reply } => {
            // The end readers see (the high watermark), made as current as the policy
            // allows: a reader is never told of offsets it cannot read.
            let result =
                on_log(
                    state,
                    &topic,
                    p,
                    |log| async move { log.make_visible().await.map(|end| (log.start_offset(), end)) },
                )
                .await;
            let _ = reply.send(result).await;
        }
        Request::FirstTransactional { topic, partition: p, from, reply } => {
            let result = on_log(state, &topic, p, |log| async move { Ok(log.first_transactional_from(from)) }).await;
            let _ = reply.send(result).await;
        }
        Request::Sync { topic, partition: p, reply } => {
            let result =
                on_log(state, &topic, p, |log| async move { log.flush().await.map(|()| log.durable_offset()) }).await;
            let _ = reply.send(result).await;
        }
        Request::OffsetForTime { topic, partition: p, time, reply } => {
            let result = on_log(state, &topic, p, |log| async move { log.offset_for_time(time).await }).await;
            let _ = reply.send(result).await;
        }
        Request::Clean { topic, partition: p, reply } => {
            let queue = state.borrow().cleaner.expect("set when the shard starts");
            let state = state.clone();
            let pass = async move {
                let result = cleaner::clean(&state, &topic, p, CleanTrigger::Now).await;
                let _ = reply.send(result).await;
            };
            glommio::spawn_local_into(pass, queue).expect("the cleaner's queue belongs to this executor").detach();
        }
        Request::DeleteRecords { topic, partition: p, before, reply } => {
            let result = on_log(state, &topic, p, |log| async move { log.delete_records_before(before).await }).await;
            let _ = reply.send(result).await;
        }
        Request::CleanerStats { reply } => {
            let stats = state.borrow().cleaning.clone();
            let _ = reply.send(Ok(stats)).await;
        }
        Request::Run { task } => task().await,
        Request::Shutdown { .. } | Request::Metrics { .. } => unreachable!("handled by the loop"),
        _ => unreachable!("group requests are served by `groups::serve`"),
    }
}

/// Opens a partition's log (recovering it) and starts serving it; the offsets topic's
/// partitions also load the committed offsets they hold.
async fn open_partition(
    state: &Rc<RefCell<ShardState>>,
    topic: String,
    p: PartitionId,
    dir: PathBuf,
    config: LogConfig,
    batching: Batching,
) -> Result<()> {
    let err = |e| EngineError::log(&topic, p, e);
    let (log, _report) = Log::open(UringStorage, dir, config).await.map_err(err)?;
    let loaded = if topic == offsets::TOPIC { Some(offsets::load(&log).await.map_err(err)?) } else { None };
    let part = Partition::open(log, batching).await.map_err(err)?;
    let mut st = state.borrow_mut();
    for (group, offsets) in loaded.into_iter().flatten() {
        st.committed.entry(group).or_default().extend(offsets);
    }
    st.partitions.insert((topic, p), Rc::new(RefCell::new(part)));
    Ok(())
}

/// Stops serving a partition, closes its log and deletes its directory.
async fn delete_partition(state: &Rc<RefCell<ShardState>>, topic: String, p: PartitionId) -> Result<()> {
    let Some(part) = state.borrow_mut().partitions.remove(&(topic, p)) else { return Ok(()) };
    let log = part.borrow().log.clone();
    let dir = log.dir().to_path_buf();
    let _ = log.close().await;
    wake_all(&part);
    std::fs::remove_dir_all(&dir).map_err(|source| EngineError::Io { op: "deleting", path: dir, source })
}

async fn shutdown(state: &Rc<RefCell<ShardState>>) -> Result<()> {
    let parts: Vec<(Key, Rc<RefCell<Partition>>)> = state.borrow_mut().partitions.drain().collect();
    let mut first_error = None;
    for ((topic, p), part) in parts {
        // Sends still lingering are appended and answered before the log closes.
        flush_pending(&part, &topic, p).await;
        let log = part.borrow().log.clone();
        if let Err(e) = log.close().await {
            first_error.get_or_insert(EngineError::log(&topic, p, e));
        }
        wake_all(&part);
    }
    first_error.map_or(Ok(()), Err)
}
