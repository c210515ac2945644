//! Kafka transactions through the listener over raw TCP (requests encoded and responses
//! decoded with the `kafka-protocol` crate): the coordinator's answers to malformed or
//! out-of-place transactional requests, transactional produce checks, and what a
//! read_committed Fetch returns (last stable offset, aborted transactions, control
//! batches on the wire).

mod common;

use sluice_io::PartitionId;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use common::kafka::{RawClient, Served};
use futures_lite::future::block_on;
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::records::{
    Compression, Record, RecordBatchDecoder, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
};
use sluice_engine::kafka::KafkaConfig;

const NONE: i16 = 0;
const UNKNOWN_TOPIC_OR_PARTITION: i16 = 3;
const INVALID_REQUEST: i16 = 42;
const INVALID_PRODUCER_EPOCH: i16 = 47;
const INVALID_TXN_STATE: i16 = 48;
const INVALID_PRODUCER_ID_MAPPING: i16 = 49;
const INVALID_TRANSACTION_TIMEOUT: i16 = 50;
const OPERATION_NOT_ATTEMPTED: i16 = 55;
const PRODUCER_FENCED: i16 = 90;

impl Served {
    fn start(name: &str) -> Served {
        let served =
            Served::launch("kafka_transactions", name, 1, KafkaConfig::new("127.0.0.1:0".parse().expect("address")));
        block_on(served.handle().create_topic("t", 2, None)).expect("topic");
        served
    }

    fn connect(&self) -> Client {
        RawClient::connect(self.addr(), "test")
    }
}

/// The raw client of `common::kafka`, with this file's requests.
type Client = RawClient;

impl Client {
    fn init(&mut self, tid: &str, timeout_ms: i32) -> InitProducerIdResponse {
        let mut r = InitProducerIdRequest::default();
        r.transactional_id = Some(TransactionalId(s(tid)));
        r.transaction_timeout_ms = timeout_ms;
        r.producer_id = ProducerId(-1);
        r.producer_epoch = -1;
        self.call(ApiKey::InitProducerId, 4, &r)
    }

    /// The per-partition error codes of AddPartitionsToTxn (v3).
    fn add_partitions(&mut self, tid: &str, pid: i64, epoch: i16, parts: &[(&str, i32)]) -> Vec<(String, i32, i16)> {
        let mut r = AddPartitionsToTxnRequest::default();
        r.v3_and_below_transactional_id = TransactionalId(s(tid));
        r.v3_and_below_producer_id = ProducerId(pid);
        r.v3_and_below_producer_epoch = epoch;
        for &(t, p) in parts {
            let mut topic = add_partitions_to_txn_request::AddPartitionsToTxnTopic::default();
            topic.name = TopicName(s(t));
            topic.partitions = vec![p];
            r.v3_and_below_topics.push(topic);
        }
        let resp: AddPartitionsToTxnResponse = self.call(ApiKey::AddPartitionsToTxn, 3, &r);
        resp.results_by_topic_v3_and_below
            .iter()
            .flat_map(|t| {
                t.results_by_partition
                    .iter()
                    .map(|p| (t.name.0.as_str().to_string(), p.partition_index, p.partition_error_code))
            })
            .collect()
    }

    fn end(&mut self, tid: &str, pid: i64, epoch: i16, commit: bool) -> i16 {
        let mut r = EndTxnRequest::default();
        r.transactional_id = TransactionalId(s(tid));
        r.producer_id = ProducerId(pid);
        r.producer_epoch = epoch;
        r.committed = commit;
        let resp: EndTxnResponse = self.call(ApiKey::EndTxn, 3, &r);
        resp.error_code
    }

    /// Produce v7 of one batch to `t`-`partition`: the error code and base offset.
    fn produce(&mut self, tid: Option<&str>, partition: i32, batch: Bytes) -> (i16, i64) {
        let mut p = produce_request::PartitionProduceData::default();
        p.index = partition;
        p.records = Some(batch);
        let mut t = produce_request::TopicProduceData::default();
        t.name = TopicName(s("t"));
        t.partition_data = vec![p];
        let mut r = ProduceRequest::default();
        r.transactional_id = tid.map(|x| TransactionalId(s(x)));
        r.acks = -1;
        r.timeout_ms = 5000;
        r.topic_data = vec![t];
        let resp: ProduceResponse = self.call(ApiKey::Produce, 7, &r);
        let pr = &resp.responses[0].partition_responses[0];
        (pr.error_code, pr.base_offset)
    }

    /// Fetch v11 of `t`-`partition` from `offset` at an isolation level, waiting at most
    /// 100 ms.
    fn fetch(&mut self, partition: i32, offset: i64, isolation: i8) -> fetch_response::PartitionData {
        let mut p = fetch_request::FetchPartition::default();
        p.partition = partition;
        p.fetch_offset = offset;
        p.partition_max_bytes = 1 << 20;
        p.log_start_offset = -1;
        let mut t = fetch_request::FetchTopic::default();
        t.topic = TopicName(s("t"));
        t.partitions = vec![p];
        let mut r = FetchRequest::default();
        r.replica_id = BrokerId(-1);
        r.max_wait_ms = 100;
        r.min_bytes = 1;
        r.max_bytes = 1 << 20;
        r.isolation_level = isolation;
        r.topics = vec![t];
        let resp: FetchResponse = self.call(ApiKey::Fetch, 11, &r);
        resp.responses[0].partitions[0].clone()
    }
}

fn s(x: &str) -> StrBytes {
    StrBytes::from_string(x.to_string())
}

/// One Kafka v2 batch of `values`.
fn batch(transactional: bool, control: bool, pid: i64, epoch: i16, sequence: i32, values: &[&str]) -> Bytes {
    let records: Vec<Record> = values
        .iter()
        .enumerate()
        .map(|(i, v)| Record {
            transactional,
            control,
            delete_horizon: false,
            partition_leader_epoch: 0,
            producer_id: pid,
            producer_epoch: epoch,
            timestamp_type: TimestampType::Creation,
            offset: i as i64,
            sequence: sequence + i as i32,
            timestamp: 1000,
            key: None,
            value: Some(Bytes::copy_from_slice(v.as_bytes())),
            headers: Default::default(),
        })
        .collect();
    let mut buf = BytesMut::new();
    let opts = RecordEncodeOptions { version: 2, compression: Compression::None };
    RecordBatchEncoder::encode(&mut buf, records.iter(), &opts).expect("encodes");
    buf.freeze()
}

/// Every record of a fetch's bytes: (offset, control, value).
fn records_of(pd: &fetch_response::PartitionData) -> Vec<(i64, bool, Vec<u8>)> {
    let mut bytes = pd.records.clone().unwrap_or_default();
    let mut out = Vec::new();
    while !bytes.is_empty() {
        let set = RecordBatchDecoder::decode(&mut bytes).expect("the fetched batches decode, CRC checked");
        for r in set.records {
            out.push((r.offset, r.control, r.value.map(|v| v.to_vec()).unwrap_or_default()));
        }
    }
    out
}

#[test]
fn requests_for_unknown_transactional_ids_or_producers_are_refused() {
    let served = Served::start("unknown_ids");
    let mut c = served.connect();
    assert_eq!(c.end("nobody", 1, 0, true), INVALID_PRODUCER_ID_MAPPING, "EndTxn for an unknown transactional id");
    assert_eq!(c.add_partitions("nobody", 1, 0, &[("t", 0)]), [("t".to_string(), 0, INVALID_PRODUCER_ID_MAPPING)]);
    let mut r = AddOffsetsToTxnRequest::default();
    r.transactional_id = TransactionalId(s("nobody"));
    r.group_id = GroupId(s("g"));
    let resp: AddOffsetsToTxnResponse = c.call(ApiKey::AddOffsetsToTxn, 3, &r);
    assert_eq!(resp.error_code, INVALID_PRODUCER_ID_MAPPING);
    // FindCoordinator for transactional ids: this node, except for an empty id.
    let mut r = FindCoordinatorRequest::default();
    r.key = s("tx");
    r.key_type = 1;
    let resp: FindCoordinatorResponse = c.call(ApiKey::FindCoordinator, 3, &r);
    assert_eq!((resp.error_code, resp.node_id.0), (NONE, 0));
    r.key = s("");
    let resp: FindCoordinatorResponse = c.call(ApiKey::FindCoordinator, 3, &r);
    assert_eq!((resp.error_code, resp.node_id.0), (INVALID_REQUEST, -1));
    // Bad InitProducerId arguments.
    assert_eq!(c.init("", 60_000).error_code, INVALID_REQUEST, "an empty transactional id");
    assert_eq!(c.init("tx", 0).error_code, INVALID_TRANSACTION_TIMEOUT);
    assert_eq!(c.init("tx", i32::MAX).error_code, INVALID_TRANSACTION_TIMEOUT);
    // A known id with the wrong producer id, and then with an old epoch.
    let first = c.init("tx", 60_000);
    assert_eq!((first.error_code, first.producer_epoch), (NONE, 0));
    let pid = first.producer_id.0;
    assert_eq!(c.end("tx", pid + 1, 0, false), INVALID_PRODUCER_ID_MAPPING);
    let second = c.init("tx", 60_000);
    assert_eq!((second.error_code, second.producer_id.0, second.producer_epoch), (NONE, pid, 1), "epoch bumped");
    assert_eq!(c.end("tx", pid, 0, true), INVALID_PRODUCER_EPOCH, "the fenced epoch");
    assert_eq!(c.add_partitions("tx", pid, 0, &[("t", 0)]), [("t".to_string(), 0, INVALID_PRODUCER_EPOCH)]);
    // InitProducerId naming an older producer is fenced (v4).
    let mut r = InitProducerIdRequest::default();
    r.transactional_id = Some(TransactionalId(s("tx")));
    r.transaction_timeout_ms = 60_000;
    r.producer_id = ProducerId(pid);
    r.producer_epoch = 0;
    let resp: InitProducerIdResponse = c.call(ApiKey::InitProducerId, 4, &r);
    assert_eq!(resp.error_code, PRODUCER_FENCED);
}

#[test]
fn end_txn_without_a_transaction_and_out_of_place_requests_get_invalid_txn_state() {
    let served = Served::start("no_txn");
    let mut c = served.connect();
    let init = c.init("tx", 60_000);
    let (pid, epoch) = (init.producer_id.0, init.producer_epoch);
    assert_eq!(c.end("tx", pid, epoch, true), INVALID_TXN_STATE, "commit with nothing open");
    assert_eq!(c.end("tx", pid, epoch, false), INVALID_TXN_STATE, "abort with nothing open");
    // TxnOffsetCommit for a group never added with AddOffsetsToTxn.
    let mut p = txn_offset_commit_request::TxnOffsetCommitRequestPartition::default();
    p.committed_offset = 1;
    let mut t = txn_offset_commit_request::TxnOffsetCommitRequestTopic::default();
    t.name = TopicName(s("t"));
    t.partitions = vec![p];
    let mut r = TxnOffsetCommitRequest::default();
    r.transactional_id = TransactionalId(s("tx"));
    r.group_id = GroupId(s("g"));
    r.producer_id = ProducerId(pid);
    r.producer_epoch = epoch;
    r.topics = vec![t];
    let resp: TxnOffsetCommitResponse = c.call(ApiKey::TxnOffsetCommit, 3, &r);
    assert_eq!(resp.topics[0].partitions[0].error_code, INVALID_TXN_STATE);
    // A transactional batch to a partition the transaction did not add.
    let b = batch(true, false, pid, epoch, 0, &["x"]);
    assert_eq!(c.produce(Some("tx"), 0, b.clone()).0, INVALID_TXN_STATE);
    // A transactional batch without a transactional id, a plain one with one, and a
    // control batch from a client.
    assert_eq!(c.produce(None, 0, b).0, INVALID_REQUEST);
    assert_eq!(c.produce(Some("tx"), 0, batch(false, false, -1, -1, -1, &["x"])).0, INVALID_REQUEST);
    assert_eq!(c.produce(None, 0, batch(true, true, pid, epoch, -1, &["x"])).0, INVALID_REQUEST);
    // An unknown partition keeps the others out of the transaction.
    let added = c.add_partitions("tx", pid, epoch, &[("t", 0), ("t", 9), ("nope", 0)]);
    assert_eq!(
        added,
        [
            ("t".to_string(), 0, OPERATION_NOT_ATTEMPTED),
            ("t".to_string(), 9, UNKNOWN_TOPIC_OR_PARTITION),
            ("nope".to_string(), 0, UNKNOWN_TOPIC_OR_PARTITION)
        ]
    );
    assert_eq!(c.end("tx", pid, epoch, true), INVALID_TXN_STATE, "nothing was added");
    // Nothing reached the log.
    assert!(records_of(&c.fetch(0, 0, 0)).is_empty());
}

#[test]
fn read_committed_fetch_stops_at_the_open_transaction_and_lists_aborted_ones() {
    let served = Served::start("read_committed");
    let mut c = served.connect();
    let init = c.init("tx", 60_000);
    let (pid, epoch) = (init.producer_id.0, init.producer_epoch);
    // A plain record first (offset 0).
    assert_eq!(c.produce(None, 0, batch(false, false, -1, -1, -1, &["plain"])), (NONE, 0));
    // Transaction 1, aborted: offsets 1-2, marker at 3.
    assert_eq!(c.add_partitions("tx", pid, epoch, &[("t", 0)]), [("t".to_string(), 0, NONE)]);
    assert_eq!(c.produce(Some("tx"), 0, batch(true, false, pid, epoch, 0, &["a1", "a2"])), (NONE, 1));
    assert_eq!(c.end("tx", pid, epoch, false), NONE);
    assert_eq!(c.end("tx", pid, epoch, false), NONE, "a retried EndTxn succeeds");
    // Transaction 2, open: offset 4.
    assert_eq!(c.add_partitions("tx", pid, epoch, &[("t", 0)]), [("t".to_string(), 0, NONE)]);
    assert_eq!(c.produce(Some("tx"), 0, batch(true, false, pid, epoch, 2, &["c1"])), (NONE, 4));

    let rc = c.fetch(0, 0, 1);
    assert_eq!((rc.high_watermark, rc.last_stable_offset), (5, 4), "stable offset at the open transaction");
    let got = records_of(&rc);
    let offsets: Vec<i64> = got.iter().map(|r| r.0).collect();
    assert_eq!(offsets, [0, 1, 2, 3], "everything below the stable offset, the control batch included");
    assert!(got[3].1, "offset 3 goes out as a control record");
    let aborted: Vec<(i64, i64)> =
        rc.aborted_transactions.iter().flatten().map(|a| (a.producer_id.0, a.first_offset)).collect();
    assert_eq!(aborted, [(pid, 1)]);
    // From past the aborted transaction's marker, it is not listed.
    assert!(c.fetch(0, 4, 1).aborted_transactions.iter().flatten().next().is_none());
    assert!(records_of(&c.fetch(0, 4, 1)).is_empty(), "the open transaction is held back");
    // read_uncommitted sees all of it.
    let ru = c.fetch(0, 0, 0);
    assert_eq!(records_of(&ru).iter().map(|r| r.0).collect::<Vec<_>>(), [0, 1, 2, 3, 4]);

    // Commit: the stable offset moves to the end, and the records come out.
    assert_eq!(c.end("tx", pid, epoch, true), NONE);
    let rc = c.fetch(0, 4, 1);
    assert_eq!((rc.high_watermark, rc.last_stable_offset), (6, 6));
    let got = records_of(&rc);
    assert_eq!(got.iter().map(|r| (r.0, r.1)).collect::<Vec<_>>(), [(4, false), (5, true)]);
    assert_eq!(got[0].2, b"c1");
    // The control record's key says commit (version 0, type 1).
    let mut bytes = rc.records.clone().unwrap_or_default();
    let mut keys = Vec::new();
    while !bytes.is_empty() {
        for r in RecordBatchDecoder::decode(&mut bytes).expect("decodes").records {
            if r.control {
                keys.push(r.key.map(|k| k.to_vec()));
            }
        }
    }
    assert_eq!(keys, [Some(vec![0, 0, 0, 1])]);
    // The other partition, never written, answers an empty read at offset 0.
    let other = c.fetch(1, 0, 1);
    assert_eq!((other.error_code, other.last_stable_offset), (NONE, 0));
}

#[test]
fn a_first_read_committed_fetch_from_mid_log_still_sees_earlier_transactions() {
    let served = Served::start("mid_log");
    let mut c = served.connect();
    let init = c.init("tx", 60_000);
    let (pid, epoch) = (init.producer_id.0, init.producer_epoch);
    // An aborted transaction at 0-1 (marker 2), an open one at 3, then a plain record at 4.
    assert_eq!(c.add_partitions("tx", pid, epoch, &[("t", 1)]), [("t".to_string(), 1, NONE)]);
    assert_eq!(c.produce(Some("tx"), 1, batch(true, false, pid, epoch, 0, &["a1"])), (NONE, 0));
    assert_eq!(c.produce(Some("tx"), 1, batch(true, false, pid, epoch, 1, &["a2"])), (NONE, 1));
    assert_eq!(c.end("tx", pid, epoch, false), NONE);
    assert_eq!(c.add_partitions("tx", pid, epoch, &[("t", 1)]), [("t".to_string(), 1, NONE)]);
    assert_eq!(c.produce(Some("tx"), 1, batch(true, false, pid, epoch, 2, &["o1"])), (NONE, 3));
    assert_eq!(c.produce(None, 1, batch(false, false, -1, -1, -1, &["plain"])), (NONE, 4));
    // The listener's first read_committed fetch of the partition starts at offset 1: the
    // transaction that began at 0 is still listed, and the open one holds back offset 3 on.
    let rc = c.fetch(1, 1, 1);
    assert_eq!((rc.high_watermark, rc.last_stable_offset), (5, 3));
    let aborted: Vec<(i64, i64)> =
        rc.aborted_transactions.iter().flatten().map(|a| (a.producer_id.0, a.first_offset)).collect();
    assert_eq!(aborted, [(pid, 0)]);
    assert_eq!(records_of(&rc).iter().map(|r| r.0).collect::<Vec<_>>(), [1, 2]);
    // A new producer for the id aborts the open transaction: everything is stable.
    let again = c.init("tx", 60_000);
    assert_eq!((again.error_code, again.producer_epoch), (NONE, 1));
    let rc = c.fetch(1, 3, 1);
    assert_eq!((rc.high_watermark, rc.last_stable_offset), (6, 6));
    let aborted: Vec<(i64, i64)> =
        rc.aborted_transactions.iter().flatten().map(|a| (a.producer_id.0, a.first_offset)).collect();
    assert_eq!(aborted, [(pid, 3)]);
    assert_eq!(records_of(&rc).iter().map(|r| (r.0, r.1)).collect::<Vec<_>>(), [(3, false), (4, false), (5, true)]);
}

/// A read_committed fetch of `t`-0 from 0: (high watermark, last stable offset, aborted
/// transactions as (producer id, first offset)).
fn stable_view(c: &mut Client) -> (i64, i64, Vec<(i64, i64)>) {
    let rc = c.fetch(0, 0, 1);
    let aborted = rc.aborted_transactions.iter().flatten().map(|a| (a.producer_id.0, a.first_offset)).collect();
    (rc.high_watermark, rc.last_stable_offset, aborted)
}

#[test]
fn transactional_ids_survive_a_restart_and_an_open_transaction_is_aborted_and_fenced() {
    let mut served = Served::start("restart_open");
    let mut c = served.connect();
    // An idle id keeps its producer id across the restart.
    let idle = c.init("idle", 60_000);
    // An id with a transaction open when the listener goes down.
    let init = c.init("tx", 60_000);
    let (pid, epoch) = (init.producer_id.0, init.producer_epoch);
    assert_eq!(c.add_partitions("tx", pid, epoch, &[("t", 0)]), [("t".to_string(), 0, NONE)]);
    assert_eq!(c.produce(Some("tx"), 0, batch(true, false, pid, epoch, 0, &["a", "b"])), (NONE, 0));
    assert_eq!(stable_view(&mut c), (2, 0, vec![]), "the open transaction holds the stable offset");

    served.restart();
    let mut c = served.connect();
    // Aborted on start: a marker at 2, the stable offset past it, the records listed as aborted.
    assert_eq!(stable_view(&mut c), (3, 3, vec![(pid, 0)]));
    // Its producer was fenced: the old epoch is refused, and a new init is two epochs on.
    assert_eq!(c.end("tx", pid, epoch, true), INVALID_PRODUCER_EPOCH);
    let again = c.init("tx", 60_000);
    assert_eq!((again.error_code, again.producer_id.0, again.producer_epoch), (NONE, pid, epoch + 2));
    let idle_again = c.init("idle", 60_000);
    assert_eq!(
        (idle_again.producer_id.0, idle_again.producer_epoch),
        (idle.producer_id.0, idle.producer_epoch + 1),
        "the idle id's producer id persisted"
    );
    // The internal topic is not listed to clients.
    assert!(!served.handle().list_topics().iter().any(|t| t == sluice_engine::kafka::TRANSACTION_STATE_TOPIC));
}

#[test]
fn a_commit_decided_before_a_crash_is_completed_when_the_listener_starts() {
    let mut served = Served::start("restart_prepared");
    let mut c = served.connect();
    let init = c.init("tx", 60_000);
    let (pid, epoch) = (init.producer_id.0, init.producer_epoch);
    assert_eq!(c.add_partitions("tx", pid, epoch, &[("t", 0)]), [("t".to_string(), 0, NONE)]);
    assert_eq!(c.produce(Some("tx"), 0, batch(true, false, pid, epoch, 0, &["a", "b"])), (NONE, 0));
    // What EndTxn(commit) records before its first marker, as a crash right after it
    // leaves the state topic.
    let prepared = format!(
        r#"{{"producer_id":{pid},"epoch":{epoch},"timeout_ms":60000,"state":"prepare_commit","partitions":[["t",0]],"offsets":[{{"group":"g","member":null,"offsets":[["t",0,2]]}}]}}"#
    );
    let record = sluice_engine::OwnedRecord::new(Some(b"tx".to_vec()), prepared.into_bytes(), sluice_io::Timestamp(1));
    block_on(served.handle().send_to(sluice_engine::kafka::TRANSACTION_STATE_TOPIC, PartitionId(0), record))
        .expect("appended");

    served.restart();
    let mut c = served.connect();
    // Committed on start: a marker at 2, nothing aborted, and the group's offset committed.
    assert_eq!(stable_view(&mut c), (3, 3, vec![]));
    let values: Vec<Vec<u8>> = records_of(&c.fetch(0, 0, 1)).into_iter().filter(|r| !r.1).map(|r| r.2).collect();
    assert_eq!(values, [b"a".to_vec(), b"b".to_vec()]);
    let committed = block_on(served.handle().committed_offsets("g")).expect("offsets");
    assert_eq!(committed.get(&("t".to_string(), PartitionId(0))).map(|o| o.0), Some(2));
    // The transaction is over: a retried EndTxn(commit) succeeds, nothing else is open.
    assert_eq!(c.end("tx", pid, epoch, true), NONE);
}

#[test]
fn a_transaction_open_past_its_timeout_is_aborted_and_its_producer_fenced() {
    let served = Served::start("timeout");
    let mut c = served.connect();
    let init = c.init("tx", 300);
    let (pid, epoch) = (init.producer_id.0, init.producer_epoch);
    assert_eq!(c.add_partitions("tx", pid, epoch, &[("t", 0)]), [("t".to_string(), 0, NONE)]);
    assert_eq!(c.produce(Some("tx"), 0, batch(true, false, pid, epoch, 0, &["a"])), (NONE, 0));
    // The listener checks every second: the abort lands within a few. A fetch may see the
    // log before the marker (stable offset 0, or at most its high watermark of 1).
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    let view = loop {
        let view = stable_view(&mut c);
        assert!(view.1 <= view.0, "the stable offset {} is above the high watermark {}", view.1, view.0);
        if view.1 >= 2 || std::time::Instant::now() > deadline {
            break view;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(view, (2, 2, vec![(pid, 0)]), "aborted after its 300 ms timeout");
    assert_eq!(c.end("tx", pid, epoch, true), INVALID_PRODUCER_EPOCH, "the producer was fenced");
    assert_eq!(c.produce(Some("tx"), 0, batch(true, false, pid, epoch, 1, &["late"])).0, INVALID_PRODUCER_EPOCH);
}

#[test]
fn produces_racing_end_txn_never_leave_a_hanging_transaction() {
    // A producer keeps appending to its transaction from one connection while EndTxn
    // comes on another: every batch is either in the transaction (before its marker) or
    // refused, so once it is over nothing holds the stable offset back.
    // Each append is durable (fsync always) before its request is answered: the window
    // in which EndTxn's marker could slip between a batch's check and its append is wide.
    let served =
        Served::launch("kafka_transactions", "race", 1, KafkaConfig::new("127.0.0.1:0".parse().expect("address")));
    let config = sluice_engine::TopicConfig { fsync: sluice_io::FsyncPolicy::Always, ..Default::default() };
    block_on(served.handle().create_topic("t", 1, Some(config))).expect("topic");
    let mut admin = served.connect();
    let init = admin.init("tx", 60_000);
    let (pid, epoch) = (init.producer_id.0, init.producer_epoch);
    let mut sequence = 0;
    for round in 0..20 {
        assert_eq!(admin.add_partitions("tx", pid, epoch, &[("t", 0)]), [("t".to_string(), 0, NONE)]);
        let mut producer = served.connect();
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let appender = {
            let stop = stop.clone();
            std::thread::spawn(move || {
                let mut accepted = 0;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let two = batch(true, false, pid, epoch, sequence, &["x", "y"]);
                    let (code, _) = producer.produce(Some("tx"), 0, two);
                    if code == NONE {
                        sequence += 2;
                        accepted += 1;
                    }
                }
                (accepted, sequence)
            })
        };
        std::thread::sleep(Duration::from_millis(2 + round % 5));
        assert_eq!(admin.end("tx", pid, epoch, round % 2 == 0), NONE);
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let (_, next) = appender.join().expect("appender");
        sequence = next;
        let (hw, lso, _) = stable_view(&mut admin);
        assert_eq!(lso, hw, "round {round}: a batch landed after its transaction's marker");
    }
}
