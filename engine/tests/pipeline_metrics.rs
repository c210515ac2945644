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
