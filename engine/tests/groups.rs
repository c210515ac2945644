//! Consumer groups end to end: rebalances on join, leave and session timeout (no partition
//! owned twice in a generation, none orphaned), committed offsets that survive a restart,
//! independent groups, offset resets, lag, and stale generations.

mod common;

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_lite::future::block_on;
use sluice_engine::group::assignor::TopicPartition;
use sluice_engine::{
    Engine, EngineConfig, EngineError, EngineHandle, GroupConsumer, GroupOptions, OffsetReset, RebalanceListener,
    SeekTo,
};
use sluice_io::{Offset, PartitionId, Timestamp};

fn data_dir(name: &str) -> common::TestDir {
    common::data_dir("groups", name)
}

fn open(dir: &Path) -> Engine {
    block_on(Engine::open(EngineConfig { shards: Some(2), ..EngineConfig::new(dir) })).unwrap()
}

fn options(assignor: &str) -> GroupOptions {
    GroupOptions {
        assignor: assignor.into(),
        session_timeout: Duration::from_millis(300),
        heartbeat_interval: Duration::from_millis(20),
        reset: OffsetReset::Earliest,
        max_bytes: 1 << 20,
    }
}

fn fill(h: &EngineHandle, topic: &str, partitions: u32, per_partition: u64) {
    block_on(h.create_topic(topic, partitions, None)).unwrap();
    for p in PartitionId::all(partitions) {
        for i in 0..per_partition {
            let r = sluice_engine::OwnedRecord::new(None, format!("{topic}-{p}-{i}").into_bytes(), Timestamp(i as i64));
            block_on(h.send_to(topic, p, r)).unwrap();
        }
    }
}

/// The coordinator's view: every partition owned exactly once in the current generation.
fn check_exclusive(h: &EngineHandle, group: &str, topic: &str, partitions: u32) -> u32 {
    let d = block_on(h.describe_group(group)).unwrap().expect("the group exists");
    let mut owned: Vec<TopicPartition> = d.members.iter().flat_map(|m| m.2.clone()).collect();
    owned.sort();
    let all: Vec<TopicPartition> = (0..partitions).map(|p| TopicPartition::new(topic, PartitionId(p))).collect();
    if d.members.is_empty() {
        assert!(owned.is_empty());
    } else {
        assert_eq!(owned, all, "generation {}: none owned twice, none orphaned", d.generation);
    }
    d.generation
}

#[derive(Default, Clone)]
struct Events(Arc<Mutex<Vec<String>>>);

impl RebalanceListener for Events {
    fn on_revoked(&mut self, partitions: &[TopicPartition]) {
        self.0.lock().unwrap().push(format!("revoked {}", partitions.len()));
    }
    fn on_assigned(&mut self, partitions: &[TopicPartition]) {
        self.0.lock().unwrap().push(format!("assigned {}", partitions.len()));
    }
}

#[test]
fn rebalances_on_join_leave_and_timeout() {
    for assignor in ["range", "roundrobin", "sticky"] {
        let dir = data_dir(&format!("rebalance-{assignor}"));
        let engine = open(&dir);
        let h = engine.handle();
        fill(&h, "t", 6, 3);
        let events = Events::default();
        let mut a =
            block_on(GroupConsumer::join(h.clone(), "g", &["t"], options(assignor), Some(Box::new(events.clone()))))
                .unwrap();
        assert_eq!(a.assignment().len(), 6);
        assert_eq!(check_exclusive(&h, "g", "t", 6), 1);
        let mut b = block_on(GroupConsumer::join(h.clone(), "g", &["t"], options(assignor), None)).unwrap();
        assert_eq!(check_exclusive(&h, "g", "t", 6), 2);
        // a still holds every partition until it hears of generation 2: b starts with none.
        assert!(b.assignment().is_empty(), "{assignor}: b handed {:?} while a holds them", b.assignment());
        block_on(a.heartbeat()).unwrap();
        assert_eq!(a.generation(), 2);
        // a let b's share go; b's next heartbeat hands it over.
        block_on(b.heartbeat()).unwrap();
        assert_eq!(a.assignment().len() + b.assignment().len(), 6);
        assert_eq!(a.assignment().len(), 3, "{assignor}: balanced");
        let a_set: BTreeSet<_> = a.assignment().iter().cloned().collect();
        assert!(b.assignment().iter().all(|tp| !a_set.contains(tp)));
        assert_eq!(*events.0.lock().unwrap(), vec!["assigned 6", "revoked 3"]);

        // b leaves: a gets everything back at its next heartbeat.
        block_on(b.leave()).unwrap();
        assert_eq!(check_exclusive(&h, "g", "t", 6), 3);
        block_on(a.heartbeat()).unwrap();
        assert_eq!((a.generation(), a.assignment().len()), (3, 6));

        // c joins and then stops heartbeating: evicted after its session timeout.
        let c = block_on(GroupConsumer::join(h.clone(), "g", &["t"], options(assignor), None)).unwrap();
        let c_member = c.member().clone();
        assert_eq!(check_exclusive(&h, "g", "t", 6), 4);
        for _ in 0..40 {
            block_on(a.poll(Duration::from_millis(20))).unwrap();
        }
        let d = block_on(h.describe_group("g")).unwrap().unwrap();
        assert!(d.members.iter().all(|m| m.0 != c_member), "c was evicted");
        assert_eq!(check_exclusive(&h, "g", "t", 6), 5);
        assert_eq!(a.assignment().len(), 6);
        drop(c);
        drop(engine);
    }
}

#[test]
fn committed_offsets_survive_a_restart_and_groups_are_independent() {
    let dir = data_dir("commits");
    let engine = open(&dir);
    let h = engine.handle();
    fill(&h, "t", 3, 10);
    let mut a = block_on(GroupConsumer::join(h.clone(), "first", &["t"], options("range"), None)).unwrap();
    let mut seen = 0;
    while seen < 30 {
        for p in block_on(a.poll(Duration::from_millis(100))).unwrap() {
            seen += p.batches.records().count();
        }
    }
    block_on(a.commit()).unwrap();
    // A commit from an old generation is refused.
    let member = a.member().clone();
    let other = block_on(GroupConsumer::join(h.clone(), "first", &["t"], options("range"), None)).unwrap();
    assert!(matches!(
        block_on(h.commit_offsets(
            "first",
            Some((&member, a.generation())),
            &[("t".into(), PartitionId(0), Offset(1))]
        )),
        Err(EngineError::StaleGeneration { .. })
    ));
    block_on(other.leave()).unwrap();
    block_on(a.leave()).unwrap();
    // A second group reads the same topic from its own start.
    let mut b = block_on(GroupConsumer::join(h.clone(), "second", &["t"], options("range"), None)).unwrap();
    let mut seen_b = 0;
    while seen_b < 30 {
        for p in block_on(b.poll(Duration::from_millis(100))).unwrap() {
            seen_b += p.batches.records().count();
        }
    }
    block_on(b.leave()).unwrap();
    let lag = block_on(h.group_lag("first")).unwrap();
    assert_eq!(lag.len(), 3);
    assert!(lag.iter().all(|l| l.committed == Offset(10) && l.lag == 0), "{lag:?}");
    assert_eq!(block_on(h.list_groups()).unwrap(), vec!["first".to_string(), "second".to_string()]);
    block_on(engine.shutdown()).unwrap();

    // Restart: the committed offsets are read back from the offsets topic.
    let engine = open(&dir);
    let h = engine.handle();
    let committed = block_on(h.committed_offsets("first")).unwrap();
    assert_eq!(committed.len(), 3);
    assert!(committed.values().all(|&o| o == Offset(10)));
    for i in 0..5 {
        block_on(h.send_to(
            "t",
            PartitionId(1),
            sluice_engine::OwnedRecord::new(None, format!("new{i}").into_bytes(), Timestamp(100)),
        ))
        .unwrap();
    }
    let lag = block_on(h.group_lag("first")).unwrap();
    assert_eq!(lag.iter().map(|l| l.lag).sum::<u64>(), 5);
    // Rejoining resumes at the committed offsets: only the 5 new records.
    let mut a = block_on(GroupConsumer::join(h.clone(), "first", &["t"], options("range"), None)).unwrap();
    let mut values = Vec::new();
    for _ in 0..20 {
        for p in block_on(a.poll(Duration::from_millis(20))).unwrap() {
            values.extend(p.batches.records().map(|r| String::from_utf8(r.unwrap().value_bytes().to_vec()).unwrap()));
        }
    }
    assert_eq!(values, (0..5).map(|i| format!("new{i}")).collect::<Vec<_>>());
    // Resets need an empty group.
    assert!(block_on(h.reset_offsets("first", "t", SeekTo::Earliest)).is_err());
    block_on(a.leave()).unwrap();
    let reset = block_on(h.reset_offsets("first", "t", SeekTo::Earliest)).unwrap();
    assert!(reset.iter().all(|(_, _, o)| *o == Offset(0)));
    let reset = block_on(h.reset_offsets("first", "t", SeekTo::Timestamp(Timestamp(5)))).unwrap();
    assert_eq!(reset[0].2, Offset(5));
    let reset = block_on(h.reset_offsets("first", "t", SeekTo::Offset(Offset(7)))).unwrap();
    assert!(reset.iter().all(|(_, _, o)| *o == Offset(7)));
    assert!(matches!(block_on(h.reset_offsets("first", "nope", SeekTo::Earliest)), Err(EngineError::UnknownTopic(_))));
    // Group ids are any string (Kafka's rule) and never a path: `..` and `a/b` are just
    // groups with nothing committed; only joining needs a non-empty id.
    for id in ["..", "../bad", "a/b", "roundrobin,range", "grüppe"] {
        assert_eq!(block_on(h.committed_offsets(id)).unwrap(), Default::default(), "{id:?}");
    }
    assert!(matches!(
        block_on(GroupConsumer::join(h.clone(), "", &["t"], options("range"), None)),
        Err(EngineError::InvalidName(_))
    ));
}
