//! A shard's metrics: the cells its own thread writes ([`ShardCells`]), what it answers a
//! scrape with ([`ShardSample`], built on the shard's thread by `shard/metrics.rs`), and
//! how the samples of every shard become [`Families`] (with each group's lag, which needs
//! the end offsets of partitions other shards own).

use std::cell::Cell;
use std::collections::HashMap;
use std::time::Duration;

use sluice_io::{LatencyCounts, LatencyHistogram, LogStatsSnapshot};

use super::{Families, Labels, PARTITION_SERIES_MAX, Value};

/// The cleaner's counts on one shard (from the shard's `CleanerStats`).
#[derive(Debug, Default, Clone, Copy)]
pub struct CleanerSample {
    /// Passes over a partition.
    pub passes: u64,
    /// Passes that failed.
    pub failures: u64,
    /// Closed segments retention deleted.
    pub segments_deleted: u64,
    /// Compactions run.
    pub compactions: u64,
    /// Records compaction removed.
    pub records_removed: u64,
    /// Bytes given back by retention and compaction.
    pub bytes_reclaimed: u64,
}

/// What a shard's thread counts outside its logs. Thread-local: the shard's code writes
/// it with plain cell updates and the shard reads it when a scrape asks.
#[derive(Debug, Default)]
pub(crate) struct ShardCells {
    /// How long an append took, from the request to its acknowledgement (as durable as the
    /// topic's fsync policy).
    pub(crate) append: LatencyHistogram,
    /// Task time and tasks run, summed from glommio's executor statistics (which reset
    /// when read) at each scrape.
    busy: Cell<Duration>,
    tasks: Cell<u64>,
}

thread_local! {
    static CELLS: ShardCells = ShardCells::default();
}

impl ShardCells {
    /// Runs `f` on this thread's cells.
    pub(crate) fn with<R>(f: impl FnOnce(&ShardCells) -> R) -> R {
        CELLS.with(f)
    }

    /// Folds in glommio's statistics of this thread's executor since the last call, and
    /// returns the totals: busy time (tasks and I/O polling, not spinning or sleeping)
    /// and tasks run.
    pub(crate) fn executor_totals(&self) -> (Duration, u64) {
        let stats = glommio::executor().executor_stats();
        self.busy.set(self.busy.get() + stats.total_runtime());
        self.tasks.set(self.tasks.get() + stats.tasks_executed());
        (self.busy.get(), self.tasks.get())
    }
}

/// One partition as a scrape sees it.
#[derive(Clone, Debug)]
pub struct PartitionSample {
    /// The topic.
    pub topic: String,
    /// The partition.
    pub partition: u32,
    /// The first offset held.
    pub start_offset: u64,
    /// The offset the next append gets (Kafka's log end offset).
    pub end_offset: u64,
    /// The end readers see (the high watermark).
    pub high_watermark: u64,
    /// Bytes its segments hold.
    pub size_bytes: u64,
    /// What its log counted.
    pub stats: LogStatsSnapshot,
}

/// One consumer group as a scrape sees it.
#[derive(Clone, Debug)]
pub struct GroupSample {
    /// The group id.
    pub group: String,
    /// `classic` (Kafka clients) or `consumer` (the engine's consumers).
    pub protocol: &'static str,
    /// Members now.
    pub members: usize,
    /// The generation.
    pub generation: i64,
}

/// One committed offset.
#[derive(Clone, Debug)]
pub struct CommittedSample {
    /// The group.
    pub group: String,
    /// The topic.
    pub topic: String,
    /// The partition.
    pub partition: u32,
    /// The committed offset (the next record the group reads).
    pub offset: u64,
}

/// What a shard answers a scrape with, built on its own thread.
#[derive(Clone, Debug, Default)]
pub struct ShardSample {
    /// Busy time of the shard's executor since it started.
    pub busy: Duration,
    /// Tasks the shard's executor ran.
    pub tasks_run: u64,
    /// Requests waiting in the shard's queue.
    pub queued_requests: usize,
    /// Append latency.
    pub append: LatencyCounts,
    /// The shard's partitions (at most [`PARTITION_SERIES_MAX`]).
    pub partitions: Vec<PartitionSample>,
    /// Partitions left out by the cap.
    pub partitions_dropped: u64,
    /// fsync latency over all the shard's partitions.
    pub fsync: LatencyCounts,
    /// The cleaner's counts.
    pub cleaner: CleanerSample,
    /// Groups this shard coordinates (at most [`super::SERIES_MAX`]).
    pub groups: Vec<GroupSample>,
    /// Groups left out by the cap.
    pub groups_dropped: u64,
    /// Committed offsets of the groups this shard coordinates (at most
    /// [`PARTITION_SERIES_MAX`]).
    pub committed: Vec<CommittedSample>,
    /// Committed offsets left out by the cap.
    pub committed_dropped: u64,
}

fn shard_label(shard: usize) -> Labels {
    vec![("shard", shard.to_string())]
}

fn partition_labels(topic: &str, partition: u32) -> Labels {
    vec![("topic", topic.to_string()), ("partition", partition.to_string())]
}

/// Adds every shard's sample (`samples[i]` is shard `i`'s) to `out`.
pub(crate) fn add_samples(out: &mut Families, samples: &[ShardSample]) {
    let mut ends: HashMap<(&str, u32), u64> = HashMap::new();
    for (shard, s) in samples.iter().enumerate() {
        add_shard(out, shard, s);
        for p in &s.partitions {
            ends.insert((p.topic.as_str(), p.partition), p.end_offset);
        }
    }
    for s in samples {
        for c in &s.committed {
            let labels =
                vec![("group", c.group.clone()), ("topic", c.topic.clone()), ("partition", c.partition.to_string())];
            out.add_capped(
                "sluice_group_committed_offset",
                "The offset a consumer group committed (the next record it reads), per partition",
                PARTITION_SERIES_MAX,
                labels.clone(),
                Value::Gauge(c.offset.into()),
            );
            if let Some(&end) = ends.get(&(c.topic.as_str(), c.partition)) {
                out.add_capped(
                    "sluice_group_lag",
                    "Records between a group's committed offset and the partition's log end offset",
                    PARTITION_SERIES_MAX,
                    labels,
                    Value::Gauge(end.saturating_sub(c.offset).into()),
                );
            }
        }
        out.dropped("sluice_group_committed_offset", s.committed_dropped);
    }
}

fn add_shard(out: &mut Families, shard: usize, s: &ShardSample) {
    let l = || shard_label(shard);
    out.counter(
        "sluice_shard_busy_seconds_total",
        "Time the shard's executor spent running tasks and polling I/O (its rate is the busy ratio)",
        l(),
        s.busy.as_secs_f64(),
    );
    out.counter("sluice_shard_tasks_run_total", "Tasks the shard's executor ran", l(), s.tasks_run);
    out.gauge("sluice_shard_queued_requests", "Requests waiting in the shard's bounded queue", l(), s.queued_requests);
    out.histogram(
        "sluice_log_append_duration_seconds",
        "Appends on this shard, from the request to the acknowledgement (as durable as the topic's fsync policy)",
        l(),
        &s.append,
    );
    out.histogram(
        "sluice_log_fsync_duration_seconds",
        "fdatasyncs of active segments for group commit on this shard",
        l(),
        &s.fsync,
    );
    let c = &s.cleaner;
    out.counter("sluice_log_cleaner_passes_total", "Cleaner passes over a partition", l(), c.passes);
    out.counter("sluice_log_cleaner_failures_total", "Cleaner passes that failed", l(), c.failures);
    out.counter(
        "sluice_log_retention_segments_deleted_total",
        "Closed segments deleted by retention (time or size)",
        l(),
        c.segments_deleted,
    );
    out.counter("sluice_log_compactions_total", "Compactions run", l(), c.compactions);
    out.counter(
        "sluice_log_compaction_records_removed_total",
        "Records compaction removed (superseded, and tombstones past delete.retention.ms)",
        l(),
        c.records_removed,
    );
    out.counter(
        "sluice_log_reclaimed_bytes_total",
        "Bytes given back by retention and compaction",
        l(),
        c.bytes_reclaimed,
    );
    add_partitions(out, s);
    for g in &s.groups {
        let gl = || vec![("group", g.group.clone()), ("protocol", g.protocol.to_string())];
        out.gauge("sluice_group_members", "Members of a consumer group", gl(), g.members);
        out.gauge(
            "sluice_group_generation",
            "A consumer group's generation (each rebalance adds one)",
            gl(),
            g.generation,
        );
    }
    out.dropped("sluice_group_members", s.groups_dropped);
    out.dropped("sluice_group_generation", s.groups_dropped);
}

/// The per-partition families of a shard's sample (capped, with the dropped counted).
fn add_partitions(out: &mut Families, s: &ShardSample) {
    for p in &s.partitions {
        let pl = || partition_labels(&p.topic, p.partition);
        let mut gauge = |name, help, v: u64| {
            out.add_capped(name, help, PARTITION_SERIES_MAX, pl(), Value::Gauge(v.into()));
        };
        gauge("sluice_log_start_offset", "The first offset a partition holds", p.start_offset);
        gauge(
            "sluice_log_end_offset",
            "The offset a partition's next append gets (Kafka's log end offset)",
            p.end_offset,
        );
        gauge(
            "sluice_log_high_watermark_offset",
            "The end of what readers of a partition see (durable per its fsync policy)",
            p.high_watermark,
        );
        gauge("sluice_log_size_bytes", "Bytes a partition's segments hold", p.size_bytes);
        let mut counter = |name, help, v: u64| {
            out.add_capped(name, help, PARTITION_SERIES_MAX, pl(), Value::Counter(v.into()));
        };
        counter(
            "sluice_log_records_appended_total",
            "Records appended to a partition since it was opened (transaction markers included)",
            p.stats.records_appended,
        );
        counter(
            "sluice_log_appended_bytes_total",
            "Bytes appended to a partition since it was opened, as stored",
            p.stats.bytes_appended,
        );
        counter(
            "sluice_log_segment_rolls_total",
            "Active segments a partition closed and replaced since it was opened",
            p.stats.segment_rolls,
        );
    }
    for name in [
        "sluice_log_start_offset",
        "sluice_log_end_offset",
        "sluice_log_high_watermark_offset",
        "sluice_log_size_bytes",
        "sluice_log_records_appended_total",
        "sluice_log_appended_bytes_total",
        "sluice_log_segment_rolls_total",
    ] {
        out.dropped(name, s.partitions_dropped);
    }
}
