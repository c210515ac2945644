//! The shard's cleaner: retention, compaction and time-based rolls for every partition
//! the shard owns, internal topics included, every `retention_check` (Kafka's
//! `log.retention.check.interval.ms`), and on demand ([`Request::Clean`]).
//!
//! It runs in its own glommio task queue with a tenth of the data path's share, so
//! appends and fetches go first whenever both have work; compaction gives way at every
//! chunk it reads. It takes no lock the data path takes: each pass works through the
//! partition's [`Log`](sluice_io::Log) handle, whose segment swaps are the log's own
//! business.
//!
//! A pass that fails (a full disk, a failed rename) is counted and reported on stderr
//! at most once per [`REPORT_EVERY`], and tried again at the next check; the partition
//! keeps serving.
//!
//! [`Request::Clean`]: super::Request::Clean

use std::cell::RefCell;
use std::rc::{Rc, Weak};
use std::time::{Duration, Instant};

use glommio::{Latency, Shares, TaskQueueHandle};
use sluice_io::{CleanReport, CleanTrigger, PartitionId, Timestamp};

use super::partition::{Partition, reopen_if_room};
use super::{Key, ShardState, partition};
use crate::error::{EngineError, Result};

/// The cleaner's share of the shard's CPU against the data path's 1000 (glommio's
/// default queue) when both have work.
pub(super) const CLEANER_SHARES: usize = 100;

/// Failures are written to stderr at most this often per shard (the rest are counted).
pub(super) const REPORT_EVERY: Duration = Duration::from_secs(10);

/// How often a shard looks for partitions whose log failed (a full disk) to reopen them
/// once the device has room again.
pub(super) const PROBE_FAILED_EVERY: Duration = Duration::from_secs(1);

/// What the shard's cleaner has done since the shard started.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CleanerStats {
    /// Passes over a partition.
    pub passes: u64,
    /// Active segments rolled by `segment_ms` or for retention.
    pub rolls: u64,
    /// Segments retention deleted.
    pub segments_deleted: u64,
    /// Compactions run.
    pub compactions: u64,
    /// Records compaction removed (superseded, and tombstones past `delete_retention_ms`).
    pub records_removed: u64,
    /// Bytes given back by retention and compaction.
    pub bytes_reclaimed: u64,
    /// Passes that failed.
    pub failures: u64,
    /// Failures not written to stderr (beyond one per [`REPORT_EVERY`]).
    pub failures_unreported: u64,
    last_report: Option<Instant>,
}

impl CleanerStats {
    fn add(&mut self, report: &CleanReport) {
        self.passes += 1;
        self.rolls += u64::from(report.rolled);
        self.segments_deleted += report.retention.segments_deleted as u64;
        self.bytes_reclaimed += report.bytes_reclaimed();
        if let Some(c) = &report.compaction {
            self.compactions += 1;
            self.records_removed += c.records_superseded + c.tombstones_removed;
        }
    }

    fn failed(&mut self, e: &EngineError) {
        self.passes += 1;
        self.failures += 1;
        let now = Instant::now();
        if self.last_report.is_some_and(|at| now.duration_since(at) < REPORT_EVERY) {
            self.failures_unreported += 1;
            return;
        }
        self.last_report = Some(now);
        let hidden = std::mem::take(&mut self.failures_unreported);
        let more = if hidden > 0 { format!(" ({hidden} more failures since the last report)") } else { String::new() };
        eprintln!("sluice: cleaning failed, will retry at the next check: {e}{more}");
    }
}

/// The cleaner's task queue on this shard's executor.
pub(super) fn queue() -> TaskQueueHandle {
    glommio::executor().create_task_queue(Shares::Static(CLEANER_SHARES), Latency::NotImportant, "sluice-cleaner")
}

/// Starts the periodic check; it ends when the shard's state is dropped.
pub(super) fn spawn_checks(state: Weak<RefCell<ShardState>>, queue: TaskQueueHandle, every: Duration) {
    let task = async move {
        loop {
            glommio::timer::sleep(every).await;
            let Some(shard) = state.upgrade() else { return };
            let mut keys: Vec<Key> = shard.borrow().partitions.keys().cloned().collect();
            keys.sort();
            drop(shard);
            for (topic, p) in keys {
                let Some(shard) = state.upgrade() else { return };
                // A partition deleted since the list was taken is skipped.
                if shard.borrow().partitions.contains_key(&(topic.clone(), p)) {
                    let _ = clean(&shard, &topic, p, CleanTrigger::Scheduled).await;
                }
            }
        }
    };
    glommio::spawn_local_into(task, queue).expect("the cleaner's queue belongs to this executor").detach();
}

/// Starts the probe that reopens failed partitions ([`PROBE_FAILED_EVERY`]); it ends
/// when the shard's state is dropped.
pub(super) fn spawn_failure_probes(state: Weak<RefCell<ShardState>>, queue: TaskQueueHandle) {
    let task = async move {
        loop {
            glommio::timer::sleep(PROBE_FAILED_EVERY).await;
            let Some(shard) = state.upgrade() else { return };
            let failed: Vec<(Key, Rc<RefCell<Partition>>, String)> = shard
                .borrow()
                .partitions
                .iter()
                .filter_map(|(k, part)| part.borrow().log.failure().map(|why| (k.clone(), part.clone(), why)))
                .collect();
            drop(shard);
            for ((topic, p), part, why) in failed {
                match reopen_if_room(&part).await {
                    Ok(true) => eprintln!("sluice: {topic}-{p} reopened, appends resume (it had failed: {why})"),
                    Ok(false) => {}
                    Err(e) => {
                        if let Some(shard) = state.upgrade() {
                            shard.borrow_mut().cleaning.failed(&EngineError::log(&topic, p, e));
                        }
                    }
                }
            }
        }
    };
    glommio::spawn_local_into(task, queue).expect("the cleaner's queue belongs to this executor").detach();
}

/// One pass over one partition; counted in the shard's [`CleanerStats`].
pub(super) async fn clean(
    state: &Rc<RefCell<ShardState>>,
    topic: &str,
    p: PartitionId,
    trigger: CleanTrigger,
) -> Result<CleanReport> {
    let log = partition(state, topic, p)?.borrow().log.clone();
    let result = log.clean(Timestamp::now(), trigger).await.map_err(|e| EngineError::log(topic, p, e));
    let stats = &mut state.borrow_mut().cleaning;
    match &result {
        Ok(report) => stats.add(report),
        Err(e) => stats.failed(e),
    }
    result
}
