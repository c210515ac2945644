//! A shard's answer to a scrape ([`Request::Metrics`]): built on the shard's own thread
//! from the state it owns, so nothing in it is shared or locked. Its cost is the scrape's,
//! not the data path's: one pass over the shard's partitions, groups and committed
//! offsets, each stopped at its cap.
//!
//! [`Request::Metrics`]: super::Request::Metrics

use std::cell::RefCell;
use std::rc::Rc;

use crate::metrics::shard::{CleanerSample, CommittedSample, GroupSample, PartitionSample};
use crate::metrics::{PARTITION_SERIES_MAX, SERIES_MAX, ShardCells, ShardSample};

use super::ShardState;

/// The shard's sample; `queued_requests` is its request queue's length now.
pub(super) fn sample(state: &Rc<RefCell<ShardState>>, queued_requests: usize) -> ShardSample {
    let st = state.borrow();
    let (busy, tasks_run, append) = ShardCells::with(|c| {
        let (busy, tasks) = c.executor_totals();
        (busy, tasks, c.append.counts())
    });
    let mut sample = ShardSample {
        busy,
        tasks_run,
        queued_requests,
        append,
        cleaner: CleanerSample {
            passes: st.cleaning.passes,
            failures: st.cleaning.failures,
            segments_deleted: st.cleaning.segments_deleted,
            compactions: st.cleaning.compactions,
            records_removed: st.cleaning.records_removed,
            bytes_reclaimed: st.cleaning.bytes_reclaimed,
        },
        ..ShardSample::default()
    };
    for ((topic, p), part) in &st.partitions {
        let log = &part.borrow().log;
        let stats = log.stats();
        sample.fsync.add(&stats.fsync);
        if sample.partitions.len() >= PARTITION_SERIES_MAX {
            sample.partitions_dropped += 1;
            continue;
        }
        sample.partitions.push(PartitionSample {
            topic: topic.clone(),
            partition: p.0,
            start_offset: log.start_offset().0,
            end_offset: log.end_offset().0,
            high_watermark: log.visible_offset().0,
            size_bytes: log.size_bytes(),
            stats,
        });
    }
    let classic = st.groups.classic.sizes().map(|(g, m, gen_)| (g, "classic", m, i64::from(gen_)));
    let engine = st.groups.sizes().map(|(g, m, gen_)| (g, "consumer", m, i64::from(gen_)));
    for (group, protocol, members, generation) in classic.chain(engine) {
        if sample.groups.len() >= SERIES_MAX {
            sample.groups_dropped += 1;
            continue;
        }
        sample.groups.push(GroupSample { group: group.to_string(), protocol, members, generation });
    }
    for (group, offsets) in &st.committed {
        for ((topic, p), c) in offsets {
            if sample.committed.len() >= PARTITION_SERIES_MAX {
                sample.committed_dropped += 1;
                continue;
            }
            sample.committed.push(CommittedSample {
                group: group.clone(),
                topic: topic.clone(),
                partition: p.0,
                offset: c.offset.0,
            });
        }
    }
    sample
}
