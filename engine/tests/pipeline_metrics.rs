//! A running pipeline's metrics (`RunningPipeline::metric_source`, `render_metrics`): every
//! stream counts the records through it on each shard, in build order, and the text a
//! scrape gets carries them.

use std::collections::BTreeMap;

use sluice_engine::dataflow::{Generator, Pipeline, PipelineConfig, WatermarkStrategy};
use sluice_engine::metrics::{Families, Num, Value};
use sluice_io::EventTime;

#[test]
fn streams_count_their_records_on_every_shard() {
    let running = Pipeline::new(PipelineConfig::with_shards(2))
        .spawn(|scope| {
            scope
                .source(
                    Generator::new(scope.shard(), scope.shards(), 9_000, |i| i),
                    WatermarkStrategy::monotonous(|i: &u64| EventTime::from_millis(*i as i64)),
                )
                .filter(|i| i % 3 != 0)
                .map(|i| i * 2)
                .key_by(|i| i % 17)
                .into_stream()
                .for_each(|_| {});
        })
        .unwrap();
    let source = running.metric_source("job");
    running.join().unwrap();

    let mut families = Families::default();
    source.collect(&mut families);
    let mut per_stream: BTreeMap<String, i64> = BTreeMap::new();
    let mut shards = std::collections::BTreeSet::new();
    for (labels, value) in families.series("sluice_pipeline_stream_records_total") {
        let label = |k: &str| labels.iter().find(|(n, _)| *n == k).map(|(_, v)| v.clone()).unwrap();
        assert_eq!(label("pipeline"), "job");
        shards.insert(label("shard"));
        let Value::Counter(Num::Int(n)) = value else { panic!("{value:?}") };
        *per_stream.entry(label("stream")).or_default() += n;
    }
    assert_eq!(shards.len(), 2, "both shards report");
    let expected: BTreeMap<String, i64> =
        [("0-source", 9_000), ("1-transform", 6_000), ("2-transform", 6_000), ("3-key_by", 6_000)]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect();
    assert_eq!(per_stream, expected);
    // Every stream ended: no watermark lag is reported for it.
    assert_eq!(families.series("sluice_pipeline_stream_watermark_lag_seconds").count(), 0);
    let text = families.render(false);
    assert!(text.contains(r#"sluice_pipeline_late_records_total{pipeline="job",policy="drop"} 0"#), "{text}");
    assert!(
        text.contains(r#"sluice_pipeline_stream_records_total{pipeline="job",stream="0-source",shard="0"}"#),
        "{text}"
    );
}

fn checkpointed_count(dir: &std::path::Path) -> sluice_engine::dataflow::RunningPipeline {
    use sluice_engine::dataflow::{CheckpointConfig, Windows};
    Pipeline::new(PipelineConfig::with_shards(2))
        .checkpointing(CheckpointConfig::new(dir).interval(std::time::Duration::from_millis(10)))
        .spawn(|scope| {
            scope
                .source(
                    Generator::new(scope.shard(), scope.shards(), 100_000, |i| i),
                    WatermarkStrategy::monotonous(|i: &u64| EventTime::from_millis((*i / 100) as i64)),
                )
                .key_by(|i| i % 7)
                .window(Windows::tumbling(std::time::Duration::from_millis(100)))
                .count()
                .for_each(|_| {});
        })
        .unwrap()
}

fn int(v: Option<&Value>) -> Option<i64> {
    match v? {
        Value::Gauge(Num::Int(i)) | Value::Counter(Num::Int(i)) => Some(*i),
        _ => None,
    }
}

#[test]
fn checkpoints_and_the_restore_are_reported() {
    let dir = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("pipeline-metrics-checkpoints-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let running = checkpointed_count(&dir);
    let source = running.metric_source("counted");
    let stats = loop {
        let s = running.checkpoints();
        if !s.is_empty() {
            break s;
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    };
    assert!(!stats.is_empty());
    running.join().unwrap();
    let mut f = Families::default();
    source.collect(&mut f);
    let p = [("pipeline", "counted")];
    let completed = int(f.get("sluice_pipeline_checkpoints_completed_total", &p)).expect("completed");
    assert!(completed >= 1);
    let Some(Value::Histogram(durations)) = f.get("sluice_pipeline_checkpoint_duration_seconds", &p) else {
        panic!("a duration histogram")
    };
    assert_eq!(durations.count() as i64, completed);
    let last = int(f.get("sluice_pipeline_last_checkpoint_id", &p)).expect("last id");
    assert!(last >= completed, "ids start at 1: {last} for {completed}");
    assert!(int(f.get("sluice_pipeline_last_checkpoint_bytes", &p)).is_some_and(|b| b > 0));
    assert!(
        matches!(f.get("sluice_pipeline_last_checkpoint_age_seconds", &p), Some(Value::Gauge(Num::Float(a))) if *a >= 0.0)
    );
    assert!(f.get("sluice_pipeline_restored_checkpoint_id", &p).is_none(), "nothing was restored");
    assert!(f.get("sluice_pipeline_restore_seconds", &p).is_none(), "nothing was restored");

    // A second run on the directory restores the last checkpoint and says so.
    let again = checkpointed_count(&dir);
    let restored = again.restored_from().expect("restored");
    let families = again.metric_families();
    // The whole restore (read, then every shard's build and decoding) holds the read.
    let (read, whole) = (again.restore_read().expect("a read time"), again.restore_time().expect("a restore time"));
    assert!(whole >= read, "restore {whole:?} shorter than its read {read:?}");
    again.join().unwrap();
    let p = [("pipeline", "pipeline")];
    assert_eq!(int(families.get("sluice_pipeline_restored_checkpoint_id", &p)), Some(restored.0 as i64));
    let gauge = |name| match families.get(name, &p) {
        Some(Value::Gauge(Num::Float(s))) => *s,
        other => panic!("{name}: {other:?}"),
    };
    assert!((gauge("sluice_pipeline_restore_read_seconds") - read.as_secs_f64()).abs() < 1e-9);
    assert!((gauge("sluice_pipeline_restore_seconds") - whole.as_secs_f64()).abs() < 1e-9);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_slow_receiver_shows_as_full_ring_waits_on_its_senders_rings() {
    let mut config = PipelineConfig::with_shards(2);
    config.batch_records = 8;
    config.ring.ring_capacity_batches = 1;
    let running = Pipeline::new(config)
        .spawn(|scope| {
            scope
                .source(
                    Generator::new(scope.shard(), scope.shards(), 4_000, |i| i),
                    WatermarkStrategy::monotonous(|i: &u64| EventTime::from_millis(*i as i64)),
                )
                .key_by(|i| i % 2)
                .into_stream()
                .map(|i| {
                    // The receiving side takes its time: the senders find the rings full.
                    std::thread::sleep(std::time::Duration::from_micros(50));
                    i
                })
                .for_each(|_| {});
        })
        .unwrap();
    let source = running.metric_source("slow");
    running.join().unwrap();
    let mut f = Families::default();
    source.collect(&mut f);
    let mut full = 0;
    let mut pairs = Vec::new();
    for (labels, value) in f.series("sluice_pipeline_ring_full_total") {
        let get = |k: &str| labels.iter().find(|(n, _)| *n == k).map(|(_, v)| v.clone()).unwrap();
        pairs.push((get("exchange"), get("from"), get("to")));
        let Value::Counter(Num::Int(n)) = value else { panic!("{value:?}") };
        full += n;
    }
    pairs.sort();
    let want: Vec<(String, String, String)> = [("0", "0", "1"), ("0", "1", "0")]
        .iter()
        .map(|(e, a, b)| (e.to_string(), a.to_string(), b.to_string()))
        .collect();
    assert_eq!(pairs, want, "one ring per ordered pair of shards");
    assert!(full > 0, "a receiver that sleeps per record makes its senders wait");
    for (_, value) in f.series("sluice_pipeline_ring_occupied_messages") {
        let Value::Gauge(Num::Int(n)) = value else { panic!("{value:?}") };
        assert!((0..=1).contains(n), "occupancy within the capacity of 1: {n}");
    }
}
