//! The engine's metrics for host code (`EngineHandle::metrics`, `render_metrics`): what the
//! shards answer follows what was appended and committed, and group ids from clients are
//! escaped and bounded (a client inventing group ids gets at most the cap of series, the
//! rest counted as dropped).

mod common;

use std::time::Duration;

use futures_lite::future::block_on;
use sluice_engine::group::coordinator::JoinRequest;
use sluice_engine::metrics::{Num, SERIES_MAX, Value};
use sluice_engine::{Engine, EngineConfig, OwnedRecord};
use sluice_io::{Offset, PartitionId, Timestamp};

fn gauge(v: Option<&Value>) -> Option<i64> {
    match v? {
        Value::Gauge(Num::Int(i)) | Value::Counter(Num::Int(i)) => Some(*i),
        _ => None,
    }
}

#[test]
fn host_code_sees_offsets_appends_commits_and_lag() {
    let dir = common::data_dir("metrics", "host");
    let engine = block_on(Engine::open(EngineConfig { shards: Some(2), ..EngineConfig::new(&*dir) })).unwrap();
    let h = engine.handle();
    block_on(h.create_topic("orders", 2, None)).unwrap();
    for i in 0..7u32 {
        let p = PartitionId(i % 2);
        block_on(h.send_to("orders", p, OwnedRecord::new(None, format!("v{i}"), Timestamp(1_000 + i64::from(i)))))
            .unwrap();
    }
    let group = "billing \"eu\"\nline";
    let commit = vec![("orders".to_string(), PartitionId(0), Offset(1))];
    block_on(h.commit_offsets(group, None, &commit)).unwrap();

    let m = block_on(h.metrics()).unwrap();
    let p0 = [("topic", "orders"), ("partition", "0")];
    let p1 = [("topic", "orders"), ("partition", "1")];
    assert_eq!(gauge(m.get("sluice_log_end_offset", &p0)), Some(4));
    assert_eq!(gauge(m.get("sluice_log_end_offset", &p1)), Some(3));
    assert_eq!(gauge(m.get("sluice_log_records_appended_total", &p0)), Some(4));
    assert_eq!(gauge(m.get("sluice_log_start_offset", &p1)), Some(0));
    let g = [("group", group), ("topic", "orders"), ("partition", "0")];
    assert_eq!(gauge(m.get("sluice_group_committed_offset", &g)), Some(1));
    assert_eq!(gauge(m.get("sluice_group_lag", &g)), Some(3));
    let appends: u64 = m
        .series("sluice_log_append_duration_seconds")
        .map(|(_, v)| match v {
            Value::Histogram(h) => h.count(),
            _ => 0,
        })
        .sum();
    assert!(appends >= 2, "sends were appended (batched by linger): {appends}");
    assert_eq!(m.series("sluice_shard_busy_seconds_total").count(), 2, "one series per shard");

    let text = block_on(h.render_metrics(false)).unwrap();
    assert!(
        text.contains(r#"sluice_group_lag{group="billing \"eu\"\nline",topic="orders",partition="0"} 3"#),
        "{text}"
    );
    assert!(text.contains(r#"sluice_log_end_offset{topic="orders",partition="0"} 4"#), "{text}");
    block_on(engine.shutdown()).unwrap();
    // After the shutdown a scrape fails at once, not waiting for shards that are gone.
    assert!(block_on(h.metrics()).is_err());
}

#[test]
fn invented_group_ids_are_capped_and_counted() {
    let dir = common::data_dir("metrics", "cap");
    let engine = block_on(Engine::open(EngineConfig { shards: Some(2), ..EngineConfig::new(&*dir) })).unwrap();
    let h = engine.handle();
    block_on(h.create_topic("t", 1, None)).unwrap();
    let extra = 7;
    for i in 0..SERIES_MAX + extra {
        let req = JoinRequest {
            member: None,
            topics: vec!["t".into()],
            session_timeout: Duration::from_secs(60),
            assignor: "range".into(),
        };
        block_on(h.join_group(&format!("invented-{i}"), req)).unwrap();
    }
    let m = block_on(h.metrics()).unwrap();
    assert_eq!(m.series("sluice_group_members").count(), SERIES_MAX);
    let text = m.render(false);
    // The shards stop gathering at the cap each, and the merge drops past it: together
    // every group beyond the cap is counted once.
    assert!(
        text.contains(&format!("sluice_metrics_series_dropped{{family=\"sluice_group_members\"}} {extra}\n")),
        "{}",
        text.lines().filter(|l| l.contains("dropped")).collect::<Vec<_>>().join("\n")
    );
    block_on(engine.shutdown()).unwrap();
}
