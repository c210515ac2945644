//! `JobMember` in one process, on librdkafka's mock cluster: slots whose pipelines finish
//! are not restarted, a slot whose lock another process holds waits for it
//! (`SlotEvent::Blocked`) and starts once it is free, restarts from the slot's
//! checkpoint, the metrics count it all, and a bad config or a slots topic of another
//! size is refused. (Moving slots between processes: `multi_process.rs`, takeover.)

mod common;

use std::{
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use rdkafka::mocking::MockCluster;
use sluice_engine::{
    connectors::kafka::{JobMember, JobMemberConfig, KafkaConnectorError, Slot, SlotEvent, SlotJob},
    dataflow::{Generator, Pipeline, PipelineConfig, WatermarkStrategy},
};
use sluice_io::EventTime;

const SLOTS: u32 = 2;

/// Slot `slot` sums its share of 0..1000 (event `i` to slot `i % 2`) into `sums`.
fn run_slot(slot: &Slot, sums: &Arc<Mutex<Vec<(u32, u64)>>>) -> Result<SlotJob, String> {
    let (s, sums) = (slot.slot, sums.clone());
    let running = Pipeline::new(PipelineConfig { pin: false, ..PipelineConfig::with_shards(1) })
        .checkpointing(slot.checkpoints())
        .spawn(move |scope| {
            let sums = sums.clone();
            let make = move |j: u64| j * u64::from(SLOTS) + u64::from(s);
            scope
                .source(
                    Generator::new(0, 1, 500, make),
                    WatermarkStrategy::monotonous(|i: &u64| EventTime::from_millis(*i as i64)),
                )
                .for_each(move |e| sums.lock().unwrap().push((s, e.value)));
        })
        .map_err(|e| e.to_string())?;
    Ok(SlotJob::new(running))
}

fn wait_for(member: &JobMember, what: &str, done: impl Fn(&[SlotEvent]) -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !done(&member.events()) {
        assert!(Instant::now() < deadline, "{what}: events {:?}, problems {:?}", member.events(), member.problems());
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn finished(events: &[SlotEvent], slot: u32) -> usize {
    events.iter().filter(|e| **e == SlotEvent::Finished { slot }).count()
}

#[test]
fn slots_run_to_the_end_wait_for_a_held_lock_and_restart_from_their_checkpoints() {
    let mock = MockCluster::new(1).expect("the mock cluster starts");
    mock.create_topic("sums-slots", SLOTS as i32, 1).expect("the slots topic");
    let root = common::data_dir("job_member", "slots");
    std::fs::create_dir_all(&*root).unwrap();
    // Another process runs slot 0: its lock is held (flock locks of two opens conflict).
    let held = std::fs::File::create(root.join("slot-0.lock")).unwrap();
    held.try_lock().expect("the test takes slot 0's lock");
    let mut config = JobMemberConfig::new(mock.bootstrap_servers(), "sums", SLOTS, &*root);
    config.session_timeout = Duration::from_secs(6);
    config.restart_backoff = Duration::from_millis(100);
    let sums: Arc<Mutex<Vec<(u32, u64)>>> = Arc::default();
    let built = sums.clone();
    let member = JobMember::start(config.clone(), move |slot| run_slot(slot, &built)).expect("the member joins");
    wait_for(&member, "slot 1 finishes, slot 0 waits", |e| {
        finished(e, 1) == 1 && e.contains(&SlotEvent::Blocked { slot: 0 })
    });
    assert_eq!(member.slots(), vec![0, 1], "one member holds both slots");
    assert!(!sums.lock().unwrap().iter().any(|(s, _)| *s == 0), "slot 0 ran while its lock was held");
    assert_eq!(
        member.events().iter().filter(|e| **e == SlotEvent::Blocked { slot: 0 }).count(),
        1,
        "a wait is noted once, however often it is tried: {:?}",
        member.events()
    );
    drop(held);
    wait_for(&member, "slot 0 starts once free and finishes", |e| finished(e, 0) == 1);
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(finished(&member.events(), 1), 1, "a finished slot is not started again");
    let mut got: Vec<u64> = sums.lock().unwrap().iter().map(|(_, v)| *v).collect();
    got.sort_unstable();
    assert_eq!(got, (0..1000).collect::<Vec<_>>(), "each slot's share once");
    let text = member.render_metrics(false);
    for line in [
        "sluice_job_member_slots{job=\"sums\"} 2",
        "sluice_job_member_slot_starts_total{job=\"sums\",restored=\"false\"} 2",
        "sluice_job_member_slot_finishes_total{job=\"sums\"} 2",
        "sluice_job_member_slot_waits_total{job=\"sums\"} 1",
        "sluice_job_member_slot_failures_total{job=\"sums\"} 0",
    ] {
        assert!(text.contains(line), "{line} not in\n{text}");
    }
    member.leave();

    // Again on the same root: both slots restore from their final checkpoints and end at
    // once, with nothing to replay.
    let before = sums.lock().unwrap().len();
    let built = sums.clone();
    let again = JobMember::start(config, move |slot| run_slot(slot, &built)).expect("the member joins again");
    wait_for(&again, "both slots end again", |e| finished(e, 0) == 1 && finished(e, 1) == 1);
    let restored =
        again.events().iter().filter(|e| matches!(e, SlotEvent::Started { restored_from: Some(_), .. })).count();
    assert_eq!(restored, 2, "both restored: {:?}", again.events());
    assert_eq!(sums.lock().unwrap().len(), before, "nothing replayed after the final checkpoints");
    again.leave();
}

#[test]
fn a_slots_topic_of_another_size_and_bad_configs_are_refused() {
    let mock = MockCluster::new(1).expect("the mock cluster starts");
    mock.create_topic("other-slots", 3, 1).expect("the slots topic");
    let root = common::data_dir("job_member", "refused");
    let config = JobMemberConfig::new(mock.bootstrap_servers(), "other", 4, &*root);
    let e = JobMember::start(config, |_| Err("never built".into())).expect_err("3 partitions, 4 slots");
    assert!(matches!(&e, KafkaConnectorError::Topic { detail, .. } if detail.contains("3 partitions")), "{e}");
    let none = JobMemberConfig::new(mock.bootstrap_servers(), "other", 0, &*root);
    assert!(matches!(JobMember::start(none, |_| Err("never".into())), Err(KafkaConnectorError::Config(_))));
    let bad = JobMemberConfig::new(mock.bootstrap_servers(), "no/slash", 3, &*root);
    assert!(JobMember::start(bad, |_| Err("never".into())).is_err(), "a job id that is no topic name");
}
