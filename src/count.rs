//! `sluice count`: a windowed count per key over a topic, as a pipeline on every shard.

use std::time::Duration;

use anyhow::Result;
use clap::Args;
use futures_lite::future::block_on;
use sluice_engine::EngineHandle;
use sluice_io::Timestamp;

use crate::{DataDir, with_engine};

#[derive(Debug, Args)]
pub(crate) struct CountArgs {
    /// The topic.
    topic: String,
    #[command(flatten)]
    dir: DataDir,
    /// Window length in milliseconds.
    #[arg(allow_negative_numbers = true, long, default_value_t = 60_000, value_parser = clap::value_parser!(u64).range(1..))]
    window_ms: u64,
    /// How far out of order records may arrive, in milliseconds.
    #[arg(allow_negative_numbers = true, long, default_value_t = 0)]
    out_of_orderness_ms: u64,
    /// Start at the first record at or after this event time (ms since the epoch);
    /// the default is the first offset held.
    #[arg(allow_negative_numbers = true, long)]
    timestamp: Option<i64>,
    /// Keep counting new records instead of stopping at the end (stop with Ctrl-C).
    #[arg(long)]
    follow: bool,
}

/// Runs `sluice count`.
pub(crate) fn run(a: &CountArgs) -> Result<()> {
    with_engine(&a.dir, |h| count(h, a))
}

/// `sluice count`: a pipeline from the topic through a per-key tumbling window count to
/// stdout.
fn count(h: &EngineHandle, a: &CountArgs) -> Result<()> {
    use sluice_engine::dataflow::{
        Pipeline, PipelineConfig, WatermarkStrategy, Windows,
        topic::{StartFrom, TopicRecord, TopicSource},
    };
    let start = a.timestamp.map_or(StartFrom::Earliest, |t| StartFrom::Timestamp(Timestamp(t)));
    let mut source = block_on(TopicSource::open(h, &a.topic, start))?;
    if !a.follow {
        source = source.bounded();
    }
    let (window, bound) = (Duration::from_millis(a.window_ms), Duration::from_millis(a.out_of_orderness_ms));
    let errors = source.clone();
    Pipeline::new(PipelineConfig::default())
        .run(move |scope| {
            // Partitions with nothing new stop holding the windows back after a second.
            let strategy = WatermarkStrategy::bounded_out_of_orderness(bound, TopicRecord::event_time)
                .with_idle_timeout(Duration::from_secs(1));
            scope
                .topic_source(&source, strategy)
                .key_by(|r: &TopicRecord| {
                    r.key.as_deref().map(|k| String::from_utf8_lossy(k).into_owned()).unwrap_or_default()
                })
                .window(Windows::tumbling(window))
                .count()
                .map(|r| format!("{}\t{}\t{}\t{}", r.window.start.millis(), r.window.end.millis(), r.key, r.value))
                .print();
        })
        .map_err(|e| errors.take_error().map_or(e, Into::into))?;
    Ok(())
}
