//! `sluice count`: a windowed count per key over a topic, as a pipeline on every shard.

use std::{path::PathBuf, time::Duration};

use anyhow::Result;
use clap::Args;
use futures_lite::future::block_on;
use sluice_engine::EngineHandle;
use sluice_engine::dataflow::{CheckpointConfig, RunningPipeline};
use sluice_io::Timestamp;

use crate::{DataDir, signals, with_engine};

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
    /// Checkpoint the job into DIR, and start from the last checkpoint there. Without it,
    /// --savepoint-dir and --from-savepoint checkpoint into a temporary directory removed
    /// when the command exits.
    #[arg(long, value_name = "DIR")]
    checkpoint_dir: Option<PathBuf>,
    /// On SIGTERM or SIGINT, stop the job with a savepoint written to DIR (new or empty),
    /// which --from-savepoint starts the next run from.
    #[arg(long, value_name = "DIR")]
    savepoint_dir: Option<PathBuf>,
    /// Start from the savepoint in DIR (unless --checkpoint-dir holds a checkpoint of the
    /// job's own, which is newer).
    #[arg(long, value_name = "DIR")]
    from_savepoint: Option<PathBuf>,
}

/// A checkpoint directory of the command's own, removed when it exits.
struct TempCheckpoints(PathBuf);

impl Drop for TempCheckpoints {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

impl CountArgs {
    /// The job's checkpoints, if it takes any, and the temporary directory they are in
    /// (when it is one).
    fn checkpoints(&self) -> (Option<CheckpointConfig>, Option<TempCheckpoints>) {
        let wanted = self.savepoint_dir.is_some() || self.from_savepoint.is_some();
        let (dir, temp) = match &self.checkpoint_dir {
            Some(dir) => (dir.clone(), None),
            None if wanted => {
                let dir = std::env::temp_dir().join(format!("sluice-count-checkpoints-{}", std::process::id()));
                (dir.clone(), Some(TempCheckpoints(dir)))
            }
            None => return (None, None),
        };
        let mut config = CheckpointConfig::new(dir);
        if let Some(savepoint) = &self.from_savepoint {
            config = config.restore_from(savepoint);
        }
        (Some(config), temp)
    }
}

/// Runs `sluice count`.
pub(crate) fn run(a: &CountArgs) -> Result<()> {
    // Blocked before the engine starts its threads, so that only `stop` takes them.
    let signals = a.savepoint_dir.as_ref().map(|_| signals::block_termination()).transpose()?;
    with_engine(&a.dir, |h| count(h, a, signals.as_ref()))
}

/// Waits for the job; with `signals`, a SIGTERM or SIGINT stops it with a savepoint in
/// `savepoint_dir`.
fn finish(running: RunningPipeline, signals: Option<&libc::sigset_t>, savepoint_dir: Option<&PathBuf>) -> Result<()> {
    let (Some(signals), Some(dir)) = (signals, savepoint_dir) else { return Ok(running.join()?) };
    while !running.is_finished() {
        if let Some(signal) = signals::pending(signals)? {
            let savepoint = running.stop_with_savepoint(dir)?;
            eprintln!(
                "sluice count: signal {signal}: stopped with savepoint {} in {}",
                savepoint.checkpoint.id,
                dir.display()
            );
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(running.join()?)
}

/// `sluice count`: a pipeline from the topic through a per-key tumbling window count to
/// stdout.
fn count(h: &EngineHandle, a: &CountArgs, signals: Option<&libc::sigset_t>) -> Result<()> {
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
    let (checkpoints, _temp) = a.checkpoints();
    let mut pipeline = Pipeline::new(PipelineConfig::default());
    if let Some(checkpoints) = checkpoints {
        pipeline = pipeline.checkpointing(checkpoints);
    }
    let running = pipeline
        .spawn(move |scope| {
            // Partitions with nothing new stop holding the windows back after a second.
            let strategy = WatermarkStrategy::bounded_out_of_orderness(bound, TopicRecord::event_time)
                .with_idle_timeout(Duration::from_secs(1));
            scope
                .topic_source(&source, strategy)
                .uid("topic")
                .key_by(|r: &TopicRecord| {
                    r.key.as_deref().map(|k| String::from_utf8_lossy(k).into_owned()).unwrap_or_default()
                })
                .window(Windows::tumbling(window))
                .count()
                .uid("counts")
                .map(|r| format!("{}\t{}\t{}\t{}", r.window.start.millis(), r.window.end.millis(), r.key, r.value))
                .print();
        })
        .map_err(|e| errors.take_error().map_or(e, Into::into))?;
    finish(running, signals, a.savepoint_dir.as_ref()).map_err(|e| match errors.take_error() {
        Some(source) => source.into(),
        None => e,
    })
}
