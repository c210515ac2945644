//! Real Kafka clients against the Kafka listener: kcat (librdkafka 2.0, Debian's
//! package), Python confluent-kafka (librdkafka 2.x) and kafka-python 3.x, run as child
//! processes against a listener on an ephemeral loopback port. `.ci/deps` installs them;
//! a missing client fails the test with a message naming it.

mod common;

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::kafka::{Served, client};
use futures_lite::future::block_on;
use sluice_engine::OwnedHeader;
use sluice_engine::dataflow::topic::{StartFrom, TopicRecord, TopicSource};
use sluice_engine::dataflow::{Pipeline, PipelineConfig, WatermarkStrategy};
use sluice_engine::kafka::KafkaConfig;
use sluice_io::{Offset, PartitionId, Timestamp};

impl Served {
    fn start(name: &str) -> Served {
        let mut kafka = KafkaConfig::new("127.0.0.1:0".parse().expect("address"));
        kafka.executors = 2;
        Served::launch("kafka_clients", name, 2, kafka)
    }

    /// The listener on the engine's shard executors (`KafkaConfig::on_shards`).
    fn start_on_shards(name: &str) -> Served {
        let mut kafka = KafkaConfig::new("127.0.0.1:0".parse().expect("address"));
        kafka.on_shards = true;
        Served::launch("kafka_clients", name, 2, kafka)
    }

    fn bootstrap(&self) -> String {
        self.addr().to_string()
    }

    fn engine(&self) -> sluice_engine::EngineHandle {
        self.handle()
    }
}

/// Runs a command with `stdin`, failing the test if it runs past `limit`. Returns stdout
/// and stderr.
fn run(cmd: &mut Command, stdin: &[u8], limit: Duration) -> (bool, String, String) {
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}; install the Kafka test clients with .ci/deps"));
    {
        let mut input = child.stdin.take().expect("stdin");
        input.write_all(stdin).expect("writing stdin");
    }
    let mut out = child.stdout.take().expect("stdout");
    let mut err = child.stderr.take().expect("stderr");
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = out.read_to_string(&mut s);
        s
    });
    let err_reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err.read_to_string(&mut s);
        s
    });
    let deadline = Instant::now() + limit;
    let status = loop {
        if let Some(status) = child.try_wait().expect("waiting") {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            let (o, e) = (reader.join().unwrap_or_default(), err_reader.join().unwrap_or_default());
            panic!("{cmd:?} ran past {limit:?}\nstdout:\n{o}\nstderr:\n{e}");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    (status.success(), reader.join().unwrap_or_default(), err_reader.join().unwrap_or_default())
}

fn need_kcat() {
    let ok = client("kcat").arg("-V").output().map(|o| o.status.success()).unwrap_or(false);
    assert!(ok, "kcat is not installed: run .ci/deps (it installs Debian's kcat package)");
}

fn python() -> String {
    std::env::var("SLUICE_PYTHON").unwrap_or_else(|_| "python3".to_string())
}

fn need_python_module(module: &str) {
    let ok = client(python())
        .args(["-c", &format!("import {module}")])
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false);
    assert!(ok, "Python module {module} is not installed for {}: run .ci/deps", python());
}

fn script(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/kafka").join(name)
}

#[test]
fn kcat_produces_consumes_and_lists_metadata() {
    kcat_round_trip(Served::start("kcat_basic"));
}

#[test]
fn kcat_round_trip_through_a_listener_on_the_shards() {
    kcat_round_trip(Served::start_on_shards("kcat_on_shards"));
}

fn kcat_round_trip(s: Served) {
    need_kcat();
    let h = s.engine();
    block_on(h.create_topic("kc", 2, None)).expect("topic");
    let input: String = (0..20).map(|i| format!("key-{i}:value-{i}\n")).collect();
    // The client picks partitions: murmur2_random is librdkafka's copy of the Java client's.
    let (ok, out, err) = run(
        client("kcat").args(["-b", &s.bootstrap(), "-P", "-t", "kc", "-K:", "-X", "partitioner=murmur2_random"]),
        input.as_bytes(),
        Duration::from_secs(30),
    );
    assert!(ok, "kcat -P failed\n{out}\n{err}");

    let (ok, out, err) = run(
        client("kcat").args(["-b", &s.bootstrap(), "-C", "-t", "kc", "-e", "-q", "-f", "%p\t%o\t%k\t%s\n"]),
        b"",
        Duration::from_secs(30),
    );
    assert!(ok, "kcat -C failed\n{out}\n{err}");
    let mut per_partition: BTreeMap<u32, Vec<u64>> = BTreeMap::new();
    let mut values = Vec::new();
    for line in out.lines() {
        let f: Vec<&str> = line.split('\t').collect();
        assert_eq!(f.len(), 4, "line {line:?}");
        let (p, o): (u32, u64) = (f[0].parse().expect("partition"), f[1].parse().expect("offset"));
        // Keys land where sluice's partitioner (murmur2, Kafka's) would put them.
        assert_eq!(h.partition_for("kc", Some(f[2].as_bytes())).expect("partition").get(), p, "key {}", f[2]);
        assert_eq!(f[3], f[2].replace("key", "value"));
        per_partition.entry(p).or_default().push(o);
        values.push(f[3].to_string());
    }
    values.sort();
    let mut want: Vec<String> = (0..20).map(|i| format!("value-{i}")).collect();
    want.sort();
    assert_eq!(values, want);
    for (p, offsets) in &per_partition {
        let expect: Vec<u64> = (0..offsets.len() as u64).collect();
        assert_eq!(offsets, &expect, "partition {p} offsets are dense and in order");
    }

    let (ok, out, err) = run(client("kcat").args(["-b", &s.bootstrap(), "-L"]), b"", Duration::from_secs(30));
    assert!(ok, "kcat -L failed\n{out}\n{err}");
    assert!(out.contains(&format!("broker 0 at {} (controller)", s.bootstrap())), "{out}");
    assert!(out.contains("topic \"kc\" with 2 partitions"), "{out}");
    assert!(!out.contains("__consumer_offsets"), "internal topic listed:\n{out}");
}

#[test]
fn kcat_consumes_as_a_group_and_commits() {
    need_kcat();
    let s = Served::start("kcat_group");
    let h = s.engine();
    block_on(h.create_topic("kg", 3, None)).expect("topic");
    for i in 0..30 {
        block_on(h.send("kg", Some(format!("k{i}").as_bytes()), format!("v{i}").as_bytes(), Timestamp(1000 + i)))
            .expect("send");
    }
    let kcat_group = || {
        run(
            client("kcat").args([
                "-b",
                &s.bootstrap(),
                "-G",
                "kcat-group",
                "-X",
                "auto.offset.reset=earliest",
                "-e",
                "-q",
                "-f",
                "%p\t%o\t%s\n",
                "kg",
            ]),
            b"",
            Duration::from_secs(60),
        )
    };
    let (ok, out, err) = kcat_group();
    assert!(ok, "kcat -G failed\n{out}\n{err}");
    let mut got: Vec<&str> = out.lines().map(|l| l.rsplit('\t').next().unwrap_or_default()).collect();
    got.sort_unstable();
    let mut want: Vec<String> = (0..30).map(|i| format!("v{i}")).collect();
    want.sort();
    assert_eq!(got, want, "stderr:\n{err}");
    // kcat commits what it consumed when it leaves: the group's offsets are the ends.
    let committed = block_on(h.committed_offsets("kcat-group")).expect("committed");
    for p in PartitionId::all(3) {
        let (_, end) = block_on(h.offsets("kg", p)).expect("offsets");
        assert_eq!(committed.get(&("kg".to_string(), p)), Some(&end), "partition {p}: {committed:?}");
    }
    // A second run of the group resumes there and reads nothing.
    let (ok, out, err) = kcat_group();
    assert!(ok, "second kcat -G failed\n{out}\n{err}");
    assert_eq!(out.trim(), "", "re-read after commit; stderr:\n{err}");
    assert_eq!(block_on(h.offsets("kg", PartitionId(0))).expect("offsets").0, Offset(0));
}

/// The records of kcat's `-f '%K %S %k%s\n'` output: each key (`None` for a null one) and
/// value, read by their lengths, so any bytes may be in them.
fn kcat_records(out: &[u8]) -> Vec<(Option<Vec<u8>>, Vec<u8>)> {
    let mut records = Vec::new();
    let mut at = 0;
    let number = |at: &mut usize| -> i64 {
        let end = *at + out[*at..].iter().position(|&b| b == b' ').expect("a length and a space");
        let n = std::str::from_utf8(&out[*at..end]).expect("digits").parse().expect("a length");
        *at = end + 1;
        n
    };
    while at < out.len() {
        let (key_len, value_len) = (number(&mut at), number(&mut at));
        let key = usize::try_from(key_len).ok().map(|n| {
            at += n;
            out[at - n..at].to_vec()
        });
        let n = usize::try_from(value_len).expect("a value");
        records.push((key, out[at..at + n].to_vec()));
        at += n;
        assert_eq!(out[at], b'\n', "a record ends its line");
        at += 1;
    }
    records
}

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("hex")).collect()
}

#[test]
fn every_codec_round_trips_byte_identical_through_confluent_kafka_kafka_python_and_kcat() {
    for module in ["confluent_kafka", "kafka", "snappy", "lz4.frame", "zstandard"] {
        need_python_module(module);
    }
    need_kcat();
    let s = Served::start("codecs");
    let expected = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("kafka-codecs-{}.json", std::process::id()));
    let (ok, out, err) = run(
        client(python()).arg(script("compression_clients.py")).arg(s.bootstrap()).arg("codec").arg(&expected),
        b"",
        Duration::from_secs(240),
    );
    println!("{out}");
    assert!(ok && out.trim_end().ends_with("OK"), "compression_clients.py failed\nstdout:\n{out}\nstderr:\n{err}");
    let text = std::fs::read_to_string(&expected).expect("the script wrote what each topic holds");
    let _ = std::fs::remove_file(&expected);
    let topics: BTreeMap<String, Vec<(Option<String>, String)>> = serde_json::from_str(&text).expect("json");
    assert_eq!(topics.len(), 12, "{:?}", topics.keys());
    for (topic, records) in &topics {
        // kcat (librdkafka) reads every topic back byte-identical too.
        let out = client("kcat")
            .args(["-b", &s.bootstrap(), "-C", "-t", topic, "-e", "-q", "-f", "%K %S %k%s\n"])
            .output()
            .expect("kcat runs");
        assert!(out.status.success(), "kcat -C {topic}: {}", String::from_utf8_lossy(&out.stderr));
        let want: Vec<(Option<Vec<u8>>, Vec<u8>)> =
            records.iter().map(|(k, v)| (k.as_deref().map(unhex), unhex(v))).collect();
        let got = kcat_records(&out.stdout);
        assert_eq!(got.len(), want.len(), "{topic}: kcat read {} records", got.len());
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert!(g == w, "{topic}: record {i} read by kcat differs ({} of {} value bytes)", g.1.len(), w.1.len());
        }
        // Stored uncompressed, each batch remembers the codec its producer used (both
        // clients send a batch uncompressed when compressing it would not shrink it).
        let codec = ["gzip", "snappy", "lz4", "zstd"].iter().position(|c| topic.ends_with(c)).expect("a codec") + 1;
        let produced_with = if topic.contains("-topic-") { 0 } else { codec as u8 };
        let batches =
            block_on(s.engine().fetch(topic, PartitionId(0), Offset(0), 8 << 20, Duration::ZERO)).expect("fetch");
        let stored: std::collections::BTreeSet<u8> =
            batches.batches().map(|b| b.expect("a batch").header().attributes.codec()).collect();
        assert!(
            stored.contains(&produced_with) && stored.iter().all(|&c| c == 0 || c == produced_with),
            "{topic}: {stored:?}"
        );
    }
}

fn run_script(name: &str, module: &str, topic: &str) {
    need_python_module(module);
    let s = Served::start(topic);
    let (ok, out, err) =
        run(client(python()).arg(script(name)).arg(s.bootstrap()).arg(topic), b"", Duration::from_secs(120));
    println!("{out}");
    assert!(ok && out.trim_end().ends_with("OK"), "{name} failed\nstdout:\n{out}\nstderr:\n{err}");
}

#[test]
fn confluent_kafka_admin_idempotent_produce_group_commit_and_seek_by_time() {
    run_script("confluent_client.py", "confluent_kafka", "ck");
}

#[test]
fn confluent_kafka_member_joining_a_group_takes_partitions_over_without_rereading() {
    run_script("confluent_rebalance.py", "confluent_kafka", "handoff");
}

#[test]
fn confluent_kafka_consumers_started_together_share_the_first_generation_after_the_initial_delay() {
    need_python_module("confluent_kafka");
    let mut kafka = KafkaConfig::new("127.0.0.1:0".parse().expect("address"));
    kafka.group_initial_rebalance_delay = Duration::from_millis(1500);
    let s = Served::launch("kafka_clients", "initial_delay", 2, kafka);
    let script = script("confluent_initial_rebalance.py");
    let (ok, out, err) =
        run(client(python()).arg(script).arg(s.bootstrap()).arg("together").arg("1500"), b"", Duration::from_secs(120));
    println!("{out}");
    assert!(ok && out.trim_end().ends_with("OK"), "failed\nstdout:\n{out}\nstderr:\n{err}");
}

#[test]
fn kafka_python_member_joining_a_group_takes_partitions_over_without_rereading() {
    run_script("kafka_python_rebalance.py", "kafka", "kphandoff");
}

/// A record's key, value and headers.
type Parts = (Option<Vec<u8>>, Option<Vec<u8>>, Vec<OwnedHeader>);

#[test]
fn headers_null_keys_and_null_values_come_back_to_every_client_as_produced_with_every_codec() {
    need_kcat();
    need_python_module("kafka");
    need_python_module("confluent_kafka");
    let s = Served::start("fidelity");
    let (ok, out, err) = run(
        client(python()).arg(script("record_fidelity.py")).arg(s.bootstrap()).arg("fidelity"),
        b"",
        Duration::from_secs(120),
    );
    println!("{out}");
    assert!(ok && out.trim_end().ends_with("OK"), "record_fidelity.py failed\nstdout:\n{out}\nstderr:\n{err}");
    // The codecs were really used: the batches are stored with the codec they came in.
    for (id, codec) in ["none", "gzip", "snappy", "lz4", "zstd"].iter().enumerate() {
        let topic = format!("fidelity-{codec}");
        let batches =
            block_on(s.engine().fetch(&topic, PartitionId(0), Offset(0), 8 << 20, Duration::ZERO)).expect("fetch");
        let stored: std::collections::BTreeSet<u8> =
            batches.batches().map(|b| b.expect("a batch").header().attributes.codec()).collect();
        assert_eq!(stored, [id as u8].into(), "{topic}: the codecs its batches were stored with");
        // A pipeline's topic source reads them as the Kafka clients did.
        let source = block_on(TopicSource::open(&s.engine(), &topic, StartFrom::Earliest)).expect("source").bounded();
        let read = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let sink = read.clone();
        Pipeline::new(PipelineConfig { pin: false, ..PipelineConfig::with_shards(1) })
            .run(move |scope| {
                let sink = sink.clone();
                scope
                    .topic_source(&source, WatermarkStrategy::monotonous(TopicRecord::event_time))
                    .for_each(move |e| sink.lock().unwrap().push(e.value));
            })
            .expect("pipeline");
        let read: Vec<Parts> = read.lock().unwrap().drain(..).map(|r| (r.key, r.value, r.headers)).collect();
        let h = |k: &str, v: Option<&[u8]>| OwnedHeader { key: k.into(), value: v.map(<[u8]>::to_vec) };
        let want = vec![
            (Some(b"k1".to_vec()), Some(b"v1".to_vec()), vec![h("trace", Some(b"abc")), h("span", Some(b"0123"))]),
            (None, None, vec![h("n", None), h("e", Some(b""))]),
            (Some(b"k3".to_vec()), None, vec![]),
            (Some(Vec::new()), Some(Vec::new()), vec![h("trace", Some(b"x")), h("trace", Some(b"y"))]),
            (Some(b"k5".to_vec()), Some("\u{e9}t\u{e9}".into()), vec![h("\u{fc}ber", Some("\u{e7}a".as_bytes()))]),
            (Some(b"big".to_vec()), Some(b"abc".repeat(1000)), vec![h("h", Some(&[b'v'; 100]))]),
        ];
        assert_eq!(read, want, "{topic}: the pipeline's topic source reads every part of each record");
    }
}

#[test]
fn kafka_python_admin_idempotent_produce_group_commit_and_seek_by_time() {
    run_script("kafka_python_client.py", "kafka", "kp");
}

#[test]
fn kafka_python_groups_with_its_own_assignor_commit_metadata_admin_apis_and_static_removal() {
    need_python_module("kafka");
    let mut s = Served::start("kpgroups");
    let script_run = |s: &Served, args: &[&str]| {
        let (ok, out, err) = run(
            client(python()).arg(script("kafka_python_groups.py")).arg(s.bootstrap()).arg("kpg").args(args),
            b"",
            Duration::from_secs(180),
        );
        println!("{out}");
        assert!(
            ok && out.trim_end().ends_with("OK"),
            "kafka_python_groups.py {args:?} failed\nstdout:\n{out}\nstderr:\n{err}"
        );
    };
    script_run(&s, &[]);
    // What was committed, with its metadata and leader epochs, survives a restart.
    s.restart();
    script_run(&s, &["after-restart"]);
}

#[test]
fn confluent_kafka_static_members_come_back_without_a_rebalance_and_cooperative_sticky_hands_over() {
    run_script("confluent_groups.py", "confluent_kafka", "ckgroups");
}

#[test]
fn confluent_kafka_sees_topic_ids_and_fetches_by_id() {
    run_script("confluent_topic_ids.py", "confluent_kafka", "topicids");
}

#[test]
fn confluent_kafka_consumer_protocol_splits_a_topic_and_hands_partitions_over_at_committed_offsets() {
    need_python_module("confluent_kafka");
    let mut kafka = KafkaConfig::new("127.0.0.1:0".parse().expect("address"));
    kafka.executors = 2;
    // Members learn of a new assignment at their next heartbeat: every 500 ms here.
    kafka.consumer_heartbeat_interval = Duration::from_millis(500);
    let s = Served::launch("kafka_clients", "kip848", 2, kafka);
    let (ok, out, err) = run(
        client(python()).arg(script("confluent_consumer_protocol.py")).arg(s.bootstrap()).arg("kip848"),
        b"",
        Duration::from_secs(180),
    );
    println!("{out}");
    assert!(
        ok && out.trim_end().ends_with("OK"),
        "confluent_consumer_protocol.py failed\nstdout:\n{out}\nstderr:\n{err}"
    );
}

#[test]
fn confluent_kafka_consumer_protocol_regex_subscription_range_assignor_and_static_member() {
    need_python_module("confluent_kafka");
    let mut kafka = KafkaConfig::new("127.0.0.1:0".parse().expect("address"));
    kafka.consumer_heartbeat_interval = Duration::from_millis(500);
    let s = Served::launch("kafka_clients", "kip848static", 2, kafka);
    let (ok, out, err) = run(
        client(python()).arg(script("confluent_consumer_static_regex.py")).arg(s.bootstrap()).arg("kip848static"),
        b"",
        Duration::from_secs(180),
    );
    println!("{out}");
    assert!(
        ok && out.trim_end().ends_with("OK"),
        "confluent_consumer_static_regex.py failed\nstdout:\n{out}\nstderr:\n{err}"
    );
}

#[test]
fn confluent_kafka_with_a_small_fetch_max_bytes_consumes_everything() {
    run_script("confluent_fetch_limits.py", "confluent_kafka", "fetchmax");
}

#[test]
fn confluent_kafka_list_offsets_tells_read_committed_the_last_stable_offset() {
    run_script("confluent_list_offsets.py", "confluent_kafka", "listoffsets");
}

/// The values kcat reads from every partition of `topic` to its end at an isolation level.
fn kcat_values(bootstrap: &str, topic: &str, isolation: &str) -> Vec<String> {
    let (ok, out, err) = run(
        client("kcat").args([
            "-b",
            bootstrap,
            "-C",
            "-t",
            topic,
            "-e",
            "-q",
            "-f",
            "%s\n",
            "-X",
            &format!("isolation.level={isolation}"),
        ]),
        b"",
        Duration::from_secs(30),
    );
    assert!(ok, "kcat -C ({isolation}) failed\n{out}\n{err}");
    let mut values: Vec<String> = out.lines().map(str::to_string).collect();
    values.sort();
    values
}

#[test]
fn confluent_kafka_transactions_and_read_committed_with_kcat() {
    need_python_module("confluent_kafka");
    need_kcat();
    let s = Served::start("txn");
    let (ok, out, err) = run(
        client(python()).arg(script("confluent_transactions.py")).arg(s.bootstrap()).arg("txn"),
        b"",
        Duration::from_secs(120),
    );
    println!("{out}");
    assert!(ok && out.trim_end().ends_with("OK"), "confluent_transactions.py failed\nstdout:\n{out}\nstderr:\n{err}");
    // kcat (librdkafka) reads the log the script left.
    let mut committed: Vec<String> = (0..10).map(|i| format!("c-{i}")).collect();
    committed.extend((0..5).map(|i| format!("d-{i}")));
    committed.extend((0..3).map(|i| format!("open-{i}")));
    committed.push("p2-0".into());
    committed.sort();
    assert_eq!(kcat_values(&s.bootstrap(), "txn", "read_committed"), committed);
    let uncommitted = kcat_values(&s.bootstrap(), "txn", "read_uncommitted");
    let aborted: Vec<String> = uncommitted.iter().filter(|v| !committed.contains(v)).cloned().collect();
    let mut expected_aborted: Vec<String> = (0..10).map(|i| format!("a-{i}")).collect();
    // The fenced producer's record may or may not have reached the log before it was
    // fenced; it is never committed.
    let fenced: Vec<&String> = aborted.iter().filter(|v| v.starts_with("fenced-")).collect();
    assert!(fenced.len() <= 1, "{aborted:?}");
    expected_aborted.extend(fenced.into_iter().cloned());
    expected_aborted.sort();
    assert_eq!(aborted, expected_aborted, "read_uncommitted adds exactly the aborted records");
}
