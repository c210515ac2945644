//! Bad input to the Kafka listener over raw TCP: each gets the protocol's error code or a
//! closed connection, never a crash, and the listener keeps serving others meanwhile.

mod common;

use sluice_io::PartitionId;
use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use common::kafka::{RawClient, Served};
use futures_lite::future::block_on;
use kafka_protocol::records::{Compression, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType};
use sluice_engine::kafka::KafkaConfig;

const MAX_REQUEST: usize = 1 << 20;

impl Served {
    fn start(name: &str) -> Served {
        Served::with_frame_timeout(name, Duration::from_millis(300))
    }

    fn with_frame_timeout(name: &str, frame_timeout: Duration) -> Served {
        let mut kafka = KafkaConfig::new("127.0.0.1:0".parse().expect("address"));
        kafka.max_request_bytes = MAX_REQUEST;
        kafka.frame_timeout = frame_timeout;
        kafka.write_timeout = Duration::from_millis(500);
        Served::launch("kafka_bad_input", name, 1, kafka)
    }

    fn connect(&self) -> TcpStream {
        let s = TcpStream::connect(self.addr()).expect("connects");
        s.set_read_timeout(Some(Duration::from_secs(10))).expect("timeout");
        s
    }

    /// The listener still answers a well-formed request on a fresh connection.
    fn assert_serving(&self) {
        let mut s = self.connect();
        let (error, keys) = api_versions(&mut s, 0);
        assert_eq!(error, 0);
        assert!(keys.iter().any(|&(k, _, _)| k == 3), "Metadata advertised: {keys:?}");
    }
}

/// A request frame: size, then header v1 (api key, version, correlation id, client id),
/// then `body`.
fn frame(key: i16, version: i16, correlation: i32, body: &[u8]) -> Vec<u8> {
    let mut f = Vec::new();
    f.extend_from_slice(&key.to_be_bytes());
    f.extend_from_slice(&version.to_be_bytes());
    f.extend_from_slice(&correlation.to_be_bytes());
    f.extend_from_slice(&4i16.to_be_bytes());
    f.extend_from_slice(b"test");
    f.extend_from_slice(body);
    let mut out = (f.len() as i32).to_be_bytes().to_vec();
    out.extend_from_slice(&f);
    out
}

/// Reads one response frame.
fn response(s: &mut TcpStream) -> std::io::Result<Vec<u8>> {
    let mut size = [0u8; 4];
    s.read_exact(&mut size)?;
    let mut body = vec![0u8; i32::from_be_bytes(size) as usize];
    s.read_exact(&mut body)?;
    Ok(body)
}

/// True once the server has closed the connection (EOF or reset) within 5 s.
fn closed_by_server(s: &mut TcpStream) -> bool {
    s.set_read_timeout(Some(Duration::from_secs(5))).expect("timeout");
    let mut buf = [0u8; 64];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => continue, // a response to something earlier; keep reading
            Err(e) if matches!(e.kind(), ErrorKind::ConnectionReset | ErrorKind::BrokenPipe) => return true,
            Err(_) => return false, // timed out: still open
        }
    }
}

fn be_i16(b: &[u8], at: usize) -> i16 {
    i16::from_be_bytes([b[at], b[at + 1]])
}

fn be_i32(b: &[u8], at: usize) -> i32 {
    i32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// Sends ApiVersions at `version` (an empty v0-style body) and parses a v0 reply: the
/// error code and the (key, min, max) list.
fn api_versions(s: &mut TcpStream, version: i16) -> (i16, Vec<(i16, i16, i16)>) {
    s.write_all(&frame(18, version, 7, &[])).expect("send");
    let r = response(s).expect("a response");
    assert_eq!(be_i32(&r, 0), 7, "correlation id");
    let error = be_i16(&r, 4);
    let n = be_i32(&r, 6);
    let keys =
        (0..n as usize).map(|i| (be_i16(&r, 10 + 6 * i), be_i16(&r, 12 + 6 * i), be_i16(&r, 14 + 6 * i))).collect();
    (error, keys)
}

#[test]
fn an_api_versions_request_at_an_unknown_version_gets_the_v0_fallback() {
    let s = Served::start("apiversions_fallback");
    let mut c = s.connect();
    let (error, keys) = api_versions(&mut c, 99);
    assert_eq!(error, 35, "UNSUPPORTED_VERSION");
    assert!(keys.contains(&(18, 0, 3)), "ApiVersions 0..=3 listed: {keys:?}");
    // Produce from v0, as Kafka 4.0 lists it (v0-v2 are answered UNSUPPORTED_VERSION).
    assert!(keys.contains(&(0, 0, 9)), "Produce 0..=9 listed: {keys:?}");
    // The client retries at a version listed, on the same connection.
    let (error, keys2) = api_versions(&mut c, 0);
    assert_eq!(error, 0);
    assert_eq!(keys, keys2);
}

#[test]
fn produce_v0_to_v2_is_answered_unsupported_version_per_partition() {
    let s = Served::start("old_produce");
    block_on(s.handle().create_topic("t", 2, None)).expect("topic");
    let mut c = s.connect();
    // A magic-1 message set, as a v2 producer sends one; never read.
    let message_set = [0u8; 34];
    for version in 0..=2i16 {
        let mut b = Vec::new();
        b.extend_from_slice(&1i16.to_be_bytes()); // acks=1
        b.extend_from_slice(&5000i32.to_be_bytes());
        b.extend_from_slice(&1i32.to_be_bytes()); // one topic
        b.extend_from_slice(&1i16.to_be_bytes());
        b.extend_from_slice(b"t");
        b.extend_from_slice(&2i32.to_be_bytes()); // two partitions
        for p in [0i32, 1] {
            b.extend_from_slice(&p.to_be_bytes());
            b.extend_from_slice(&(message_set.len() as i32).to_be_bytes());
            b.extend_from_slice(&message_set);
        }
        c.write_all(&frame(0, version, 40 + i32::from(version), &b)).expect("send");
        let r = response(&mut c).expect("answered, not closed");
        assert_eq!(be_i32(&r, 0), 40 + i32::from(version), "correlation id");
        // topics, name, partitions, then per partition: index, error, base offset and
        // (v2) log append time; then (v1 and v2) the throttle time.
        let per_partition = if version >= 2 { 22 } else { 14 };
        let throttle = if version >= 1 { 4 } else { 0 };
        assert_eq!(r.len(), 4 + 4 + 2 + 1 + 4 + 2 * per_partition + throttle, "v{version}: {r:?}");
        for (i, p) in [0, 1].into_iter().enumerate() {
            let at = 15 + i * per_partition;
            assert_eq!((be_i32(&r, at), be_i16(&r, at + 4)), (p, 35), "v{version}: UNSUPPORTED_VERSION");
        }
    }
    // Nothing was written, and the connection still serves.
    let (error, _) = api_versions(&mut c, 0);
    assert_eq!(error, 0);
    for p in PartitionId::all(2) {
        assert_eq!(block_on(s.handle().offsets("t", p)).expect("offsets").1.0, 0);
    }
}

#[test]
fn an_unknown_api_key_or_version_closes_the_connection() {
    let s = Served::start("unknown_api");
    let mut c = s.connect();
    c.write_all(&frame(9999, 0, 1, &[])).expect("send");
    assert!(closed_by_server(&mut c), "unknown API key");
    let mut c = s.connect();
    c.write_all(&frame(3, 99, 1, &[0, 0, 0, 0])).expect("send");
    assert!(closed_by_server(&mut c), "Metadata v99");
    let mut c = s.connect();
    // Fetch v13 names topics by id, which sluice does not have: not advertised, refused.
    c.write_all(&frame(1, 13, 1, &[])).expect("send");
    assert!(closed_by_server(&mut c), "Fetch v13");
    s.assert_serving();
}

#[test]
fn truncated_and_malformed_frames_close_the_connection() {
    let s = Served::start("truncated");
    // A frame too short for a header.
    let mut c = s.connect();
    c.write_all(&4i32.to_be_bytes()).expect("send");
    c.write_all(&[0, 3, 0, 1]).expect("send");
    assert!(closed_by_server(&mut c), "4-byte frame");
    // A negative size.
    let mut c = s.connect();
    c.write_all(&(-5i32).to_be_bytes()).expect("send");
    assert!(closed_by_server(&mut c), "negative size");
    // A Metadata v1 body that ends inside its topic array (claims 3 topics, has none).
    let mut c = s.connect();
    c.write_all(&frame(3, 1, 1, &3i32.to_be_bytes())).expect("send");
    assert!(closed_by_server(&mut c), "body ends early");
    // A Metadata v1 request claiming 2^31-1 topics in 4 bytes: refused, not allocated.
    let mut c = s.connect();
    c.write_all(&frame(3, 1, 1, &[0x7f, 0xff, 0xff, 0xff])).expect("send");
    assert!(closed_by_server(&mut c), "huge array count");
    // A header whose client id runs past the frame.
    let mut c = s.connect();
    let mut f = 10i32.to_be_bytes().to_vec();
    f.extend_from_slice(&[0, 18, 0, 0, 0, 0, 0, 1, 0x7f, 0xff]);
    c.write_all(&f).expect("send");
    assert!(closed_by_server(&mut c), "client id past the frame");
    s.assert_serving();
}

#[test]
fn trailing_bytes_after_a_request_are_ignored() {
    let s = Served::start("trailing");
    let mut c = s.connect();
    // Metadata v1 with a null topic list (all topics), then junk.
    let mut body = (-1i32).to_be_bytes().to_vec();
    body.extend_from_slice(b"trailing junk");
    c.write_all(&frame(3, 1, 42, &body)).expect("send");
    let r = response(&mut c).expect("answered");
    assert_eq!(be_i32(&r, 0), 42);
    assert_eq!(be_i32(&r, 4), 1, "one broker");
}

#[test]
fn an_oversized_request_closes_the_connection_before_its_body_arrives() {
    let s = Served::start("oversized");
    let mut c = s.connect();
    c.write_all(&((MAX_REQUEST + 1) as i32).to_be_bytes()).expect("send");
    assert!(closed_by_server(&mut c), "over max_request_bytes");
    let mut c = s.connect();
    c.write_all(&i32::MAX.to_be_bytes()).expect("send");
    assert!(closed_by_server(&mut c), "2 GiB frame");
    s.assert_serving();
}

#[test]
fn a_client_that_disconnects_mid_request_leaves_the_listener_serving() {
    let s = Served::start("disconnect");
    for cut in [2usize, 6, 20] {
        let mut c = s.connect();
        let mut body = (-1i32).to_be_bytes().to_vec();
        body.extend_from_slice(&[0u8; 32]);
        let f = frame(3, 1, 1, &body);
        c.write_all(&f[..cut]).expect("send");
        drop(c);
    }
    // Requests pipelined and then abandoned before the responses are read.
    let mut c = s.connect();
    for i in 0..8 {
        c.write_all(&frame(18, 0, i, &[])).expect("send");
    }
    drop(c);
    s.assert_serving();
}

#[test]
fn a_slow_client_is_cut_off_without_stalling_others() {
    let frame_timeout = Duration::from_secs(2);
    let s = Served::with_frame_timeout("slow", frame_timeout);
    let mut slow = s.connect();
    let f = frame(18, 0, 1, &[]);
    slow.write_all(&f[..6]).expect("send");
    let started = Instant::now();
    // While the slow client dawdles, another is served, and the slow one is still
    // connected afterwards: it was not served first by timing it out.
    s.assert_serving();
    slow.set_nonblocking(true).expect("nonblocking");
    let mut byte = [0u8; 1];
    let still_open = matches!(slow.read(&mut byte), Err(e) if e.kind() == ErrorKind::WouldBlock);
    slow.set_nonblocking(false).expect("blocking");
    assert!(still_open || started.elapsed() >= frame_timeout, "the slow client was closed early");
    // The frame did not complete within frame_timeout: closed.
    assert!(closed_by_server(&mut slow), "slow client still connected");
    assert!(started.elapsed() >= frame_timeout / 2, "closed long before the frame timeout");
}

#[test]
fn a_client_that_never_reads_its_responses_is_cut_off_without_stalling_others() {
    let s = Served::start("never_reads");
    let mut greedy = s.connect();
    greedy.set_write_timeout(Some(Duration::from_secs(20))).expect("timeout");
    // Pipelined requests whose responses are never read: the socket buffers fill, the
    // listener stops reading at its in-flight limit, and its write times out.
    let writer = std::thread::spawn(move || {
        let request = frame(3, 1, 1, &(-1i32).to_be_bytes());
        for _ in 0..2_000_000 {
            if let Err(e) = greedy.write_all(&request) {
                return Some(e.kind());
            }
        }
        None
    });
    std::thread::sleep(Duration::from_millis(200));
    s.assert_serving();
    let ended = writer.join().expect("writer thread");
    assert!(
        matches!(ended, Some(ErrorKind::ConnectionReset | ErrorKind::BrokenPipe)),
        "the listener kept the connection: {ended:?}"
    );
    s.assert_serving();
}

fn produce_v3(topic: &str, records: &[u8]) -> Vec<u8> {
    produce_to(topic, 0, records)
}

/// A Produce v3 request (acks=1) of `records` to one partition.
fn produce_to(topic: &str, partition: i32, records: &[u8]) -> Vec<u8> {
    let mut b = Vec::new();
    b.extend_from_slice(&(-1i16).to_be_bytes()); // no transactional id
    b.extend_from_slice(&1i16.to_be_bytes()); // acks=1
    b.extend_from_slice(&5000i32.to_be_bytes());
    b.extend_from_slice(&1i32.to_be_bytes()); // one topic
    b.extend_from_slice(&(topic.len() as i16).to_be_bytes());
    b.extend_from_slice(topic.as_bytes());
    b.extend_from_slice(&1i32.to_be_bytes()); // one partition
    b.extend_from_slice(&partition.to_be_bytes());
    b.extend_from_slice(&(records.len() as i32).to_be_bytes());
    b.extend_from_slice(records);
    frame(0, 3, 5, &b)
}

/// The error code and base offset of the one partition of a Produce v3 response.
fn produce_result(r: &[u8], topic: &str) -> (i16, i64) {
    // correlation id, topics count, topic name, partitions count, partition index
    let at = 4 + 4 + 2 + topic.len() + 4 + 4;
    (be_i16(r, at), i64::from_be_bytes(r[at + 2..at + 10].try_into().expect("8 bytes")))
}

fn batch() -> Vec<u8> {
    idempotent_batch(-1, -1, -1)
}

fn idempotent_batch(producer_id: i64, producer_epoch: i16, sequence: i32) -> Vec<u8> {
    let record = Record {
        producer_id,
        producer_epoch,
        sequence,
        key: Some(bytes::Bytes::from_static(b"k")),
        ..record(0, bytes::Bytes::from_static(b"a value"))
    };
    encode(&[record])
}

/// A plain record at `offset` (time `1234 + offset`) with no key.
fn record(offset: i64, value: bytes::Bytes) -> Record {
    Record {
        transactional: false,
        control: false,
        delete_horizon: false,
        partition_leader_epoch: 0,
        producer_id: -1,
        producer_epoch: -1,
        timestamp_type: TimestampType::Creation,
        offset,
        // The kafka-protocol encoder starts a new batch where offset minus sequence
        // changes: records of consecutive offsets make one batch, base sequence -1.
        sequence: offset as i32 - 1,
        timestamp: 1234 + offset,
        key: None,
        value: Some(value),
        headers: Default::default(),
    }
}

/// `records` as one uncompressed v2 batch.
fn encode(records: &[Record]) -> Vec<u8> {
    let mut buf = BytesMut::new();
    let opts = RecordEncodeOptions { version: 2, compression: Compression::None };
    RecordBatchEncoder::encode(&mut buf, records, &opts).expect("encodes");
    buf.to_vec()
}

#[test]
fn corrupt_record_batches_get_corrupt_message_and_the_connection_stays_usable() {
    let s = Served::start("corrupt_batch");
    block_on(s.handle().create_topic("t", 1, None)).expect("topic");
    let mut c = s.connect();
    let good = batch();
    let mut bad = good.clone();
    let n = bad.len();
    bad[n - 2] ^= 0xff; // a value byte: the CRC no longer matches
    c.write_all(&produce_v3("t", &bad)).expect("send");
    assert_eq!(produce_result(&response(&mut c).expect("answered"), "t").0, 2, "CORRUPT_MESSAGE");
    // A batch cut short.
    c.write_all(&produce_v3("t", &good[..good.len() - 3])).expect("send");
    assert_eq!(produce_result(&response(&mut c).expect("answered"), "t").0, 2, "CORRUPT_MESSAGE");
    // An unknown topic.
    c.write_all(&produce_v3("nope", &good)).expect("send");
    assert_eq!(produce_result(&response(&mut c).expect("answered"), "nope").0, 3, "UNKNOWN_TOPIC_OR_PARTITION");
    // And the good batch is appended at offset 0: nothing bad was written.
    c.write_all(&produce_v3("t", &good)).expect("send");
    assert_eq!(produce_result(&response(&mut c).expect("answered"), "t"), (0, 0));
}

#[test]
fn an_idempotent_producers_retry_is_answered_with_the_original_offset_and_written_once() {
    let s = Served::start("idempotent_retry");
    let h = s.handle();
    block_on(h.create_topic("t", 1, None)).expect("topic");
    let producer = block_on(h.init_producer_id()).expect("producer id").0;
    let mut c = s.connect();
    c.write_all(&produce_v3("t", &batch())).expect("send");
    assert_eq!(produce_result(&response(&mut c).expect("answered"), "t"), (0, 0), "a plain record first");
    let first = idempotent_batch(producer, 0, 0);
    for attempt in 0..3 {
        c.write_all(&produce_v3("t", &first)).expect("send");
        assert_eq!(produce_result(&response(&mut c).expect("answered"), "t"), (0, 1), "attempt {attempt}");
    }
    // A gap in the sequence is refused: OUT_OF_ORDER_SEQUENCE_NUMBER.
    c.write_all(&produce_v3("t", &idempotent_batch(producer, 0, 5))).expect("send");
    assert_eq!(produce_result(&response(&mut c).expect("answered"), "t").0, 45);
    c.write_all(&produce_v3("t", &idempotent_batch(producer, 0, 1))).expect("send");
    assert_eq!(produce_result(&response(&mut c).expect("answered"), "t"), (0, 2));
    assert_eq!(block_on(h.offsets("t", PartitionId(0))).expect("offsets").1.0, 3, "the retries were not written");
}

#[test]
fn a_large_request_arriving_in_uneven_pieces_is_read_whole() {
    // A produce request of about 900 KB (the limit here is 1 MiB), written in pieces from
    // one byte to a few hundred KB, so the listener's buffer grows across many reads. The
    // batch's CRC covers every record byte: one byte lost, doubled or moved is a
    // CORRUPT_MESSAGE, not an append.
    let s = Served::start("large_request");
    block_on(s.handle().create_topic("t", 1, None)).expect("topic");
    let records: Vec<Record> = (0..900).map(|i| record(i, vec![(i % 251) as u8; 1000].into())).collect();
    let request = produce_v3("t", &encode(&records));
    assert!(request.len() > 800_000 && request.len() < MAX_REQUEST, "{} bytes", request.len());
    let mut c = s.connect();
    let mut at = 0;
    for piece in [1, 2, 5, 70_000, 3, 131_072, 1, 250_000, 64 * 1024 + 1].into_iter().chain(std::iter::repeat(99_999)) {
        let end = (at + piece).min(request.len());
        c.write_all(&request[at..end]).expect("send");
        c.flush().expect("flush");
        at = end;
        if at == request.len() {
            break;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    assert_eq!(produce_result(&response(&mut c).expect("answered"), "t"), (0, 0));
    let (start, end) = block_on(s.handle().offsets("t", PartitionId(0))).expect("offsets");
    assert_eq!((start.0, end.0), (0, 900), "every record appended");
}

#[test]
fn large_requests_back_to_back_are_each_stored_as_sent() {
    // Large requests on one connection, longer and shorter than the one before and two
    // at a time in flight: the listener reads a request into the buffer of an earlier
    // one once nothing holds it any more. Every value must come back as it was sent, with
    // nothing of an earlier request's bytes in it.
    let s = Served::start("back_to_back");
    block_on(s.handle().create_topic("t", 1, None)).expect("topic");
    let shapes: [(usize, usize); 7] =
        [(900, 1000), (300, 700), (850, 1100), (100, 900), (600, 1500), (90, 800), (700, 1400)];
    let mut sent: Vec<Vec<u8>> = Vec::new();
    let mut c = s.connect();
    let mut unanswered = 0;
    for (n, (count, bytes)) in shapes.into_iter().enumerate() {
        let records: Vec<Record> = (0..count)
            .map(|i| {
                let value: Vec<u8> = (0..bytes).map(|b| (n * 31 + i * 7 + b) as u8).collect();
                sent.push(value.clone());
                record(i as i64, value.into())
            })
            .collect();
        let request = produce_v3("t", &encode(&records));
        assert!(request.len() > 64 << 10 && request.len() < MAX_REQUEST, "{} bytes", request.len());
        c.write_all(&request).expect("send");
        unanswered += 1;
        if unanswered == 2 {
            assert_eq!(produce_result(&response(&mut c).expect("answered"), "t").0, 0);
            unanswered -= 1;
        }
    }
    assert_eq!(produce_result(&response(&mut c).expect("answered"), "t").0, 0);
    let got = block_on(async {
        let h = s.handle();
        let (mut at, end) = h.offsets("t", PartitionId(0)).await.expect("offsets");
        let mut out = Vec::new();
        while at < end {
            let batches = h.fetch("t", PartitionId(0), at, 1 << 20, Duration::ZERO).await.expect("fetch");
            out.extend(batches.records().map(|r| r.expect("record").value_bytes().to_vec()));
            at = batches.next_offset();
        }
        out
    });
    assert_eq!(got.len(), sent.len(), "every record stored");
    let first = got.iter().zip(&sent).position(|(g, s)| g != s);
    assert!(first.is_none(), "record {first:?} differs from the one sent");
}

#[test]
fn pipelined_produce_requests_keep_their_order_while_the_shards_queue_is_full() {
    // A shard that queues one request, kept full by a second connection's produce
    // requests and by stalls of the shard's thread: requests of one connection that wait
    // for room must still reach the partition in the order they were sent (Kafka's
    // per-connection order), each appended whole.
    let kafka = KafkaConfig::new("127.0.0.1:0".parse().expect("address"));
    let s = Served::launch_queued("kafka_bad_input", "queue_full_order", 1, kafka, Some(1));
    block_on(s.handle().create_topic("t", 2, None)).expect("topic");
    const REQUESTS: usize = 200;
    const PER_REQUEST: usize = 3;
    let done = std::sync::atomic::AtomicBool::new(false);
    // The stalls and the rival are under way before the requests under test are sent.
    let started = std::sync::Barrier::new(3);
    std::thread::scope(|scope| {
        // Stalls of the shard's thread (a task that blocks it), so that the queue fills.
        let stalls = scope.spawn(|| {
            let h = s.handle();
            started.wait();
            let mut stalls = 0;
            loop {
                block_on(h.run_on(0, || async { std::thread::sleep(Duration::from_millis(2)) })).expect("stall");
                stalls += 1;
                if done.load(std::sync::atomic::Ordering::Relaxed) {
                    return stalls;
                }
            }
        });
        // Another connection competing for the same queue, on partition 1.
        let rival = scope.spawn(|| {
            let mut c = s.connect();
            started.wait();
            let mut n = 0;
            loop {
                let request = produce_to("t", 1, &encode(&[record(0, bytes::Bytes::from_static(b"rival"))]));
                c.write_all(&request).expect("send");
                assert_eq!(produce_result(&response(&mut c).expect("answered"), "t").0, 0);
                n += 1;
                if done.load(std::sync::atomic::Ordering::Relaxed) {
                    return n;
                }
            }
        });
        // The connection under test: every request written at once, the listener holding
        // up to 16 in flight, each a batch of values `n.0`, `n.1`, `n.2`.
        let mut c = s.connect();
        let mut requests = Vec::new();
        for n in 0..REQUESTS {
            let records: Vec<Record> =
                (0..PER_REQUEST).map(|i| record(i as i64, format!("{n}.{i}").into_bytes().into())).collect();
            requests.extend(produce_to("t", 0, &encode(&records)));
        }
        let mut writer = c.try_clone().expect("clone");
        started.wait();
        let sender = scope.spawn(move || writer.write_all(&requests).expect("send"));
        for n in 0..REQUESTS {
            let (error, _) = produce_result(&response(&mut c).expect("answered"), "t");
            assert_eq!(error, 0, "request {n}");
        }
        sender.join().expect("sender");
        done.store(true, std::sync::atomic::Ordering::Relaxed);
        stalls.join().expect("stalls");
        rival.join().expect("rival");
    });
    let got: Vec<String> = block_on(async {
        let h = s.handle();
        let (mut at, end) = h.offsets("t", PartitionId(0)).await.expect("offsets");
        let mut out = Vec::new();
        while at < end {
            let batches = h.fetch("t", PartitionId(0), at, 1 << 20, Duration::ZERO).await.expect("fetch");
            out.extend(
                batches.records().map(|r| String::from_utf8(r.expect("record").value_bytes().to_vec()).expect("utf-8")),
            );
            at = batches.next_offset();
        }
        out
    });
    let want: Vec<String> = (0..REQUESTS).flat_map(|n| (0..PER_REQUEST).map(move |i| format!("{n}.{i}"))).collect();
    let first = got.iter().zip(&want).position(|(g, w)| g != w);
    assert!(first.is_none(), "stored out of order from record {first:?}: {:?}", first.map(|i| &got[i..i + 6]));
    assert_eq!(got.len(), want.len(), "every record stored once");
}

/// Produces `records` as one batch to partition 0 of `topic` with a kafka-protocol
/// ProduceRequest at `version` (acks=1); the partition's answer.
fn produce_batch(
    c: &mut RawClient,
    version: i16,
    topic: &str,
    records: &[Record],
) -> kafka_protocol::messages::produce_response::PartitionProduceResponse {
    use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
    use kafka_protocol::messages::{ApiKey, ProduceRequest, ProduceResponse, TopicName};
    use kafka_protocol::protocol::StrBytes;
    let mut part = PartitionProduceData::default();
    part.index = 0;
    part.records = Some(bytes::Bytes::from(encode(records)));
    let mut t = TopicProduceData::default();
    t.name = TopicName(StrBytes::from_string(topic.to_string()));
    t.partition_data.push(part);
    let mut req = ProduceRequest::default();
    req.acks = 1;
    req.timeout_ms = 5000;
    req.topic_data.push(t);
    let resp: ProduceResponse = c.call(ApiKey::Produce, version, &req);
    resp.responses.into_iter().next().expect("the topic").partition_responses.into_iter().next().expect("partition 0")
}

#[test]
fn a_batch_with_keyless_records_for_a_compacted_topic_gets_invalid_record_with_each_named() {
    let s = Served::start("keyless_compacted");
    let h = s.handle();
    let config = sluice_engine::TopicConfig { cleanup: sluice_io::CleanupPolicy::Compact, ..Default::default() };
    block_on(h.create_topic("compacted", 1, Some(config))).expect("topic");
    let mut c = RawClient::connect(s.addr(), "keyless");
    let keyed =
        |offset: i64| Record { key: Some(bytes::Bytes::from(format!("k{offset}"))), ..record(offset, "v".into()) };
    // Records 1 and 3 of five have no key.
    let mixed = [keyed(0), record(1, "v".into()), keyed(2), record(3, "v".into()), keyed(4)];
    let r = produce_batch(&mut c, 9, "compacted", &mixed);
    assert_eq!((r.error_code, r.base_offset), (87, -1), "INVALID_RECORD: {r:?}");
    let named: Vec<(i32, String)> = r
        .record_errors
        .iter()
        .map(|e| (e.batch_index, e.batch_index_error_message.as_ref().map(|m| m.to_string()).unwrap_or_default()))
        .collect();
    let why = "Compacted topic cannot accept message without key in topic partition compacted-0";
    assert_eq!(named, vec![(1, why.to_string()), (3, why.to_string())]);
    let message = r.error_message.as_ref().map(|m| m.to_string()).unwrap_or_default();
    assert!(message.starts_with("One or more records have been rejected due to 2 record errors"), "{message}");
    // Before v8 there are no record errors to send: the code alone.
    let r = produce_batch(&mut c, 7, "compacted", &mixed);
    assert_eq!((r.error_code, r.record_errors.len()), (87, 0));
    assert_eq!(block_on(h.offsets("compacted", PartitionId(0))).expect("offsets").1.0, 0, "nothing of it stored");
    // A batch whose records all have keys is taken, on the same connection.
    let r = produce_batch(&mut c, 9, "compacted", &[keyed(0), keyed(1)]);
    assert_eq!((r.error_code, r.base_offset), (0, 0));
    // A topic that does not compact takes records without a key.
    block_on(h.create_topic("plain", 1, None)).expect("topic");
    let r = produce_batch(&mut c, 9, "plain", &mixed);
    assert_eq!((r.error_code, r.base_offset, r.record_errors.len()), (0, 0, 0));
}
