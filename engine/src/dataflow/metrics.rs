//! Counters a running pipeline keeps: each operator's late records per shard
//! ([`LateCells`]) and each stream's own counts ([`StreamCells`]), in owned cells their
//! shard alone writes, once per batch and per watermark (no shared atomics, no locks on
//! the data path), rendered for a scrape by [`PipelineMetrics`].

use std::sync::Arc;

use sluice_io::{EventTime, LatencyCounts};

use super::checkpoint::CheckpointCoordinator;
use super::scope::Shared;
use crate::metrics::owned::{OwnedCounter, OwnedGauge};
use crate::metrics::{Families, Labels, MetricSource};

/// The pipeline's counters: each operator's late records on each shard, in cells that
/// shard alone writes (no shared atomics on the data path); a read sums them.
#[derive(Debug, Default)]
pub struct Metrics {
    /// Every window and join operator's cells on every shard, registered while the graph
    /// is built (the lock is taken then and by a read, never while records flow).
    late: std::sync::Mutex<Vec<Arc<LateCells>>>,
}

/// One operator's late records on one shard, by policy. Only that shard writes them.
#[derive(Debug, Default)]
pub(crate) struct LateCells {
    /// Dropped (the `Drop` policy, past allowed lateness, or a join's late side).
    pub(crate) dropped: OwnedCounter,
    /// Sent to a late side output.
    pub(crate) side_output: OwnedCounter,
    /// Updates of an already emitted window result.
    pub(crate) updates: OwnedCounter,
}

impl Metrics {
    fn sum(&self, f: impl Fn(&LateCells) -> u64) -> u64 {
        self.late.lock().unwrap_or_else(std::sync::PoisonError::into_inner).iter().map(|c| f(c)).sum()
    }

    /// Late records dropped by window operators (the `Drop` policy, or past allowed
    /// lateness) and by joins.
    #[must_use]
    pub fn late_dropped(&self) -> u64 {
        self.sum(|c| c.dropped.get())
    }

    /// Late records sent to a late side output.
    #[must_use]
    pub fn late_side_output(&self) -> u64 {
        self.sum(|c| c.side_output.get())
    }

    /// Late records that updated an already emitted window result.
    #[must_use]
    pub fn late_updates(&self) -> u64 {
        self.sum(|c| c.updates.get())
    }

    /// New cells for one operator on one shard (the shard building it writes them).
    pub(crate) fn late_cells(&self) -> Arc<LateCells> {
        let cells = Arc::new(LateCells::default());
        self.late.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push(cells.clone());
        cells
    }
}

/// One stream's counts on one shard: records pushed through its port (the records out of
/// the operator that feeds it, the records into those it feeds) and its watermark. Only
/// the shard that owns the port writes them.
#[derive(Debug, Default)]
pub(crate) struct StreamCells {
    pub(crate) records: OwnedCounter,
    /// The last watermark, in ms (`EventTime`).
    pub(crate) watermark_ms: OwnedGauge,
    /// 1 once the stream ended.
    pub(crate) ended: OwnedGauge,
}

/// One ring of an exchange, as its sending shard sees it.
#[derive(Debug, Default)]
pub(crate) struct RingCells {
    /// Messages that found the ring full and waited (backpressure).
    pub(crate) full: OwnedCounter,
    /// Messages in the ring after the sender's last send.
    pub(crate) occupied: OwnedGauge,
}

/// A measured ring: the exchange (its number in build order) and the pair of shards.
#[derive(Debug)]
pub(crate) struct RingEntry {
    pub(crate) exchange: usize,
    pub(crate) from: usize,
    pub(crate) to: usize,
    pub(crate) cells: Arc<RingCells>,
}

/// A measured stream: on which shard, its index in build order (the same on every shard),
/// and what made it.
#[derive(Debug)]
pub(crate) struct StreamEntry {
    pub(crate) shard: usize,
    pub(crate) index: usize,
    pub(crate) kind: &'static str,
    pub(crate) cells: Arc<StreamCells>,
}

/// A running pipeline's metrics as a scrape sees them ([`MetricSource`]): per stream and
/// shard, records and watermark lag (processing time minus watermark); late records by
/// policy; completed checkpoints (count, last id, durations, alignment, bytes, in-flight
/// records). Every series carries the `pipeline` label it was made with.
#[derive(Debug)]
pub(crate) struct PipelineMetrics {
    pub(crate) name: String,
    pub(crate) shared: Arc<Shared>,
    pub(crate) coordinator: Option<Arc<CheckpointCoordinator>>,
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

impl MetricSource for PipelineMetrics {
    fn collect(&self, out: &mut Families) {
        let p = || self.name.clone();
        let streams = self.shared.streams.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let now = now_ms();
        for e in streams.iter() {
            let labels: Labels =
                vec![("pipeline", p()), ("stream", format!("{}-{}", e.index, e.kind)), ("shard", e.shard.to_string())];
            out.counter(
                "sluice_pipeline_stream_records_total",
                "Records through a stream on a shard: out of the operator that feeds it, into those it feeds",
                labels.clone(),
                e.cells.records.get(),
            );
            let wm = e.cells.watermark_ms.get();
            if e.cells.ended.get() == 0 && wm > EventTime::MIN.0 && wm < EventTime::MAX.0 {
                out.gauge(
                    "sluice_pipeline_stream_watermark_lag_seconds",
                    "Processing time minus a stream's watermark on a shard (running streams with a watermark)",
                    labels,
                    (now.saturating_sub(wm)) as f64 / 1e3,
                );
            }
        }
        drop(streams);
        let rings = self.shared.rings.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        for r in rings.iter() {
            let labels: Labels = vec![
                ("pipeline", p()),
                ("exchange", r.exchange.to_string()),
                ("from", r.from.to_string()),
                ("to", r.to.to_string()),
            ];
            out.counter(
                "sluice_pipeline_ring_full_total",
                "Messages of a key_by that found the ring from one shard to another full and waited (backpressure)",
                labels.clone(),
                r.cells.full.get(),
            );
            out.gauge(
                "sluice_pipeline_ring_occupied_messages",
                "Messages in the ring from one shard to another after the sender's last send",
                labels,
                r.cells.occupied.get(),
            );
        }
        drop(rings);
        let m = &self.shared.metrics;
        for (policy, n) in
            [("drop", m.late_dropped()), ("side_output", m.late_side_output()), ("update", m.late_updates())]
        {
            out.counter(
                "sluice_pipeline_late_records_total",
                "Late records by what the window's policy did with them",
                vec![("pipeline", p()), ("policy", policy.to_string())],
                n,
            );
        }
        if let Some(coordinator) = &self.coordinator {
            self.collect_checkpoints(coordinator, out);
        }
    }
}

impl PipelineMetrics {
    /// The checkpoint families: counts, durations, the last one's figures, the restore.
    fn collect_checkpoints(&self, coordinator: &CheckpointCoordinator, out: &mut Families) {
        let p = || self.name.clone();
        let stats = coordinator.stats();
        let l = || vec![("pipeline", p())];
        out.counter(
            "sluice_pipeline_checkpoints_completed_total",
            "Checkpoints completed in this run",
            l(),
            stats.len(),
        );
        out.counter(
            "sluice_pipeline_checkpoints_failed_total",
            "Checkpoints of this run that failed (could not begin, a part not written, timed out, or the commit failed)",
            l(),
            coordinator.failures().len(),
        );
        let mut duration = LatencyCounts::default();
        let mut alignment = LatencyCounts::default();
        for s in &stats {
            duration.record(s.duration);
            alignment.record(s.alignment);
        }
        out.histogram(
            "sluice_pipeline_checkpoint_duration_seconds",
            "Checkpoints from the trigger to the manifest being durable",
            l(),
            &duration,
        );
        out.histogram(
            "sluice_pipeline_checkpoint_alignment_seconds",
            "The longest a shard spent between its first and last participant reporting, per checkpoint",
            l(),
            &alignment,
        );
        if let Some(last) = stats.last() {
            out.gauge("sluice_pipeline_last_checkpoint_id", "The last completed checkpoint", l(), last.id.0);
            out.gauge(
                "sluice_pipeline_last_checkpoint_bytes",
                "Bytes of state the last checkpoint wrote",
                l(),
                last.bytes,
            );
            out.gauge(
                "sluice_pipeline_last_checkpoint_inflight_records",
                "In-flight records the last checkpoint stored (unaligned mode)",
                l(),
                last.inflight_records,
            );
        }
        let last_at = *coordinator.last_completed_at.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(at) = last_at {
            out.gauge(
                "sluice_pipeline_last_checkpoint_age_seconds",
                "Time since the last checkpoint completed",
                l(),
                at.elapsed().as_secs_f64(),
            );
        }
        let read = *coordinator.restore_read.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(read) = read {
            out.gauge(
                "sluice_pipeline_restore_read_seconds",
                "How long reading the restored checkpoint took (parts read, checked and merged)",
                l(),
                read.as_secs_f64(),
            );
        }
        let ready = *coordinator.restore_ready.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(ready) = ready {
            out.gauge(
                "sluice_pipeline_restore_seconds",
                "How long the restore took: from reading the checkpoint until every shard had decoded its state",
                l(),
                ready.as_secs_f64(),
            );
        }
        if let Some(restored) = coordinator.restored.as_ref() {
            out.gauge(
                "sluice_pipeline_restored_checkpoint_id",
                "The checkpoint this run restored from",
                l(),
                restored.id.0,
            );
        }
    }
}
