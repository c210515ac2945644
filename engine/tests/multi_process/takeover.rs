//! Work that moves between processes (issue 27): the windowed count cut into [`SLOTS`]
//! slots that [`JobMember`]s spread over the job's processes through the consumer group
//! `{job}-slots` (cooperative-sticky), every slot checkpointing into its own directory
//! under one root that all processes share, repartitioning exactly once on fixed
//! partitions, and writing its counts through the exactly-once `KafkaSink` under the
//! slot's transactional ids; the test reads the output `read_committed`.
//!
//! `multi_process_takeover`: three processes share the six slots; once some counts are
//! committed, one process is killed with SIGKILL; the other two must take its slots over
//! (after its six-second session times out), each restored from the slot's last
//! completed checkpoint. Then a fourth process joins and must be given slots, which it
//! restores from their checkpoints while the slots that do not move go on running (the
//! cooperative protocol stops only what moves). Then the first process leaves (scaling in,
//! [`JobMember::leave`]): it stops its slots and leaves the group, and the two left take
//! them over from their checkpoints. The committed output must equal, record
//! for record, the single process's result. It runs on the served listener and on
//! librdkafka's mock cluster; the mock has no `read_committed` (it serves aborted and
//! open transactions' records), so there the check is at least once: every count of
//! the single process is there, none is missing or short, and no window is invented.
//!
//! The served variant runs once more with each member process in a network namespace of
//! its own (`netns.rs`: veth pairs to a bridge the broker listens on), where the machine
//! permits it (root); elsewhere it prints why and skips.
//!
//! `multi_process_takeover_broker_restart`: three processes; once some counts are
//! committed the served broker (listener and engine) is restarted on its port and data
//! directory. Its group membership is in memory only, so the members lose their slots and
//! rejoin; the slots restart from their checkpoints (a pipeline failing on the outage is
//! restarted by its member) and the committed output equals the single process's, with no
//! process restarted by the test.
//!
//! The job, the member processes and the checks are in `slots.rs`.

use std::{
    collections::BTreeSet,
    io::Write,
    time::{Duration, Instant},
};

use rdkafka::mocking::MockCluster;
use sluice_engine::kafka::KafkaConfig;

use crate::common::{data_dir, kafka::Served};
use crate::job::{EVENTS, Output, PARTITIONS, single_process};
use crate::slots::{JOB, Launcher, Members, OUT, SLOTS, TOPIC};

type Test = fn();

pub(super) const TESTS: [(&str, Test); 4] = [
    ("multi_process_takeover (served)", || multi_process_takeover("served")),
    ("multi_process_takeover (served, network namespaces)", || multi_process_takeover("netns")),
    ("multi_process_takeover (mock)", || multi_process_takeover("mock")),
    ("multi_process_takeover_broker_restart (served)", multi_process_takeover_broker_restart),
];

/// The broker, the job's topics made, and the checkpoint root.
fn broker(
    kind: &str,
    name: &str,
) -> (Option<Served>, Option<MockCluster<'static, rdkafka::producer::DefaultProducerContext>>, String) {
    if kind == "served" || kind == "netns" {
        let host = if kind == "netns" { crate::netns::BRIDGE_ADDR } else { "127.0.0.1" };
        let mut kafka = KafkaConfig::new(format!("{host}:0").parse().unwrap());
        // The bridge is the test's own, reachable from its namespaces only.
        kafka.allow_plaintext = kind == "netns";
        let served = Served::launch_at("multi_process", &format!("{name}-{kind}"), 1, kafka, None);
        let bootstrap = served.addr().to_string();
        crate::slots::create_topics(&bootstrap);
        (Some(served), None, bootstrap)
    } else {
        let mock = MockCluster::new(1).expect("the mock cluster starts");
        mock.create_topic(TOPIC, PARTITIONS as i32, 1).expect("the repartition topic");
        mock.create_topic(OUT, 1, 1).expect("the output topic");
        // The mock cluster answers no CreateTopics (the members make it on `sluice serve`).
        mock.create_topic(&format!("{JOB}-slots"), SLOTS as i32, 1).expect("the slots topic");
        let bootstrap = mock.bootstrap_servers();
        (None, Some(mock), bootstrap)
    }
}

fn multi_process_takeover(kind: &str) {
    let launcher = if kind == "netns" {
        match crate::netns::Netns::new() {
            Ok(mut netns) => {
                let launcher: Launcher =
                    Box::new(move |i| vec!["ip".into(), "netns".into(), "exec".into(), netns.member(i)]);
                Some(launcher)
            }
            Err(why) => {
                println!("multi_process_takeover (served, network namespaces): skipped, no network namespaces: {why}");
                return;
            }
        }
    } else {
        None
    };
    let expected = single_process();
    let (_served, _mock, bootstrap) = broker(kind, "takeover");
    let root = data_dir("multi_process", &format!("takeover-{kind}-checkpoints"));
    let mut members = Members::start_with(&bootstrap, &root, 3, launcher);
    let mut output = Output::of(&bootstrap, OUT);
    members.wait_spread(&[0, 1, 2], "three members", &[], &mut output);
    let deadline = Instant::now() + Duration::from_secs(180);
    members.wait_committed(&mut output, EVENTS / 5, deadline, &[]);
    let lost = members.slots(1);
    println!("{} of {EVENTS} events committed: killing member 1, which runs slots {lost:?}", output.total());
    members.children.0[1].kill().expect("SIGKILL");
    members.children.0[1].wait().expect("reaped");
    let marks = members.marks();
    members.wait_spread(&[0, 2], "after the kill", &[1], &mut output);
    members.assert_restored(&lost, &[0, 2], &marks, "the killed member's");
    let kept: Vec<BTreeSet<u32>> = [0, 2].iter().map(|&m| members.slots(m)).collect();
    let stopped_before: Vec<usize> = [0, 2].iter().map(|&m| members.seen[m].lock().unwrap().stopped.len()).collect();
    let marks = members.marks();
    let joined = members.add();
    println!("member {joined} joins");
    members.wait_spread(&[0, 2, joined], "after the join", &[1], &mut output);
    let moved = members.slots(joined);
    members.assert_restored(&moved, &[joined], &marks, "the moved");
    for (i, &m) in [0, 2].iter().enumerate() {
        let stopped = members.seen[m].lock().unwrap().stopped[stopped_before[i]..].to_vec();
        assert!(
            stopped.iter().all(|s| moved.contains(s))
                && kept[i].difference(&moved).all(|s| members.slots(m).contains(s)),
            "member {m} stopped {stopped:?} though only {moved:?} moved (cooperative rebalancing)"
        );
    }
    let leaving = 0;
    let given_back = members.slots(leaving);
    println!("member {leaving} leaves, giving back slots {given_back:?}");
    let stdin = members.children.0[leaving].stdin.as_mut().expect("piped");
    writeln!(stdin, "leave").expect("the member reads its stdin");
    let marks = members.marks();
    let left = members.children.0[leaving].wait().expect("the member exits");
    assert!(left.success(), "member {leaving} left with {left}");
    members.wait_spread(&[2, joined], "after the leave", &[1, leaving], &mut output);
    members.assert_restored(&given_back, &[2, joined], &marks, "the leaving member's");
    // The mock cluster has no `read_committed` (its Fetch answers the end offset as the
    // last stable offset and lists no aborted transactions: rdkafka_mock_handlers.c), so
    // there aborted and replayed output is read too: nothing may be missing, but counts
    // may come more than once or larger.
    let exact = kind != "mock";
    let failures = members.finish(&mut output, &expected, exact, deadline, &[1, leaving]);
    let how =
        if exact { "exactly once, equal to the single process's" } else { "every one of the single process's there" };
    println!("{kind}: {} counts, {how}; (slot failures, starts that waited): {failures:?}", output.counts.len());
}

fn multi_process_takeover_broker_restart() {
    let expected = single_process();
    let (served, _, bootstrap) = broker("served", "takeover_broker_restart");
    let mut served = served.expect("served");
    let root = data_dir("multi_process", "takeover-broker-restart-checkpoints");
    let mut members = Members::start(&bootstrap, &root, 3);
    let mut output = Output::of(&bootstrap, OUT);
    members.wait_spread(&[0, 1, 2], "three members", &[], &mut output);
    let deadline = Instant::now() + Duration::from_secs(240);
    members.wait_committed(&mut output, EVENTS / 5, deadline, &[]);
    println!("{} of {EVENTS} events committed: restarting the broker", output.total());
    served.restart_same_port();
    assert_eq!(served.addr().to_string(), bootstrap, "the listener is back on its port");
    let failures = members.finish(&mut output, &expected, true, deadline, &[]);
    println!(
        "{} counts committed, equal to the single process's; (slot failures, starts that waited): {failures:?}",
        output.counts.len()
    );
}
