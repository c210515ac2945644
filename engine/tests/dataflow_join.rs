//! The window join and the interval join of two keyed streams, end to end on real
//! pipelines (pinned executors, rings between shards), at 1 and 2 shards.
//!
//! - Hand-computed pairs: orders and payments per user per 10 ms tumbling window, a sliding
//!   window join, an interval join with a negative lower bound; keys present on one side
//!   only yield nothing.
//! - Late records: fed after the join's watermark has been seen to pass them, they are
//!   dropped and counted, and what is still open fires when the input ends.
//! - Randomized: random keyed records with bounded disorder through all three joins,
//!   against a brute-force reference over all pairs. Every run prints `SEED=<n>`;
//!   `SEED=<n> cargo test -p sluice-engine --test dataflow_join` replays it.

use std::{
    sync::{Arc, Mutex, mpsc},
    time::Duration,
};

use sluice_engine::dataflow::checkpoint::StateError;
use sluice_engine::dataflow::{
    ChannelSource, Data, Event, Generator, KeyedStream, Operator, Pipeline, PipelineConfig, Scope, Stream,
    WatermarkStrategy, Windows,
};
use sluice_io::EventTime;

mod common;
use common::Rng;

/// A record of either side: its key, an id to tell it apart, its event time in ms.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Rec {
    key: &'static str,
    id: u32,
    time: i64,
}

/// Records crossing a `key_by` are checkpoint `Data`. The key is written as its text and
/// read back leaked: test keys are a handful of literals.
impl Data for Rec {
    fn encode(&self, out: &mut Vec<u8>) {
        self.key.to_string().encode(out);
        self.id.encode(out);
        self.time.encode(out);
    }
    fn decode(input: &mut &[u8]) -> Result<Self, StateError> {
        let key: &'static str = Box::leak(String::decode(input)?.into_boxed_str());
        Ok(Rec { key, id: u32::decode(input)?, time: i64::decode(input)? })
    }
}

/// The joins' key: a record's key text. Join keys are checkpoint `Data` too, written and
/// read back as `Rec`'s key is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct Key(&'static str);

impl Data for Key {
    fn encode(&self, out: &mut Vec<u8>) {
        self.0.to_string().encode(out);
    }
    fn decode(input: &mut &[u8]) -> Result<Self, StateError> {
        Ok(Key(Box::leak(String::decode(input)?.into_boxed_str())))
    }
}

const fn rec(key: &'static str, id: u32, time: i64) -> Rec {
    Rec { key, id, time }
}

/// What a join emits in these tests: (event time, key, left id, right id).
type Joined = (i64, &'static str, u32, u32);

type Keyed = KeyedStream<Key, Rec>;
type Pairs = Stream<(&'static str, u32, u32)>;
/// Builds a join of two keyed streams, on every shard.
type Builder = Arc<dyn Fn(Keyed, Keyed) -> Pairs + Send + Sync>;

fn ids(key: &Key, l: &Rec, r: &Rec) -> (&'static str, u32, u32) {
    (key.0, l.id, r.id)
}

fn time_of(r: &Rec) -> EventTime {
    EventTime::from_millis(r.time)
}

/// This shard's share of `rows` (which are at most `disorder_ms` out of order), keyed.
fn table(scope: &Scope, rows: &Arc<Vec<Rec>>, disorder_ms: u64) -> Keyed {
    let rows = rows.clone();
    let generator = Generator::new(scope.shard(), scope.shards(), rows.len() as u64, move |i| rows[i as usize]);
    let strategy = WatermarkStrategy::bounded_out_of_orderness(Duration::from_millis(disorder_ms), time_of);
    scope.source(generator, strategy).key_by(|r: &Rec| Key(r.key)).boxed()
}

/// Joins `left` and `right` with `join` on a pipeline with `config`; everything emitted,
/// sorted, and the late-dropped count.
fn run_tables(
    config: PipelineConfig,
    left: &[Rec],
    right: &[Rec],
    disorder_ms: u64,
    join: impl Fn(Keyed, Keyed) -> Pairs + Send + Sync + 'static,
) -> (Vec<Joined>, u64) {
    let (left, right) = (Arc::new(left.to_vec()), Arc::new(right.to_vec()));
    let out = Arc::new(Mutex::new(Vec::new()));
    let sink = out.clone();
    let running = Pipeline::new(config)
        .spawn(move |scope| {
            let sink = sink.clone();
            join(table(scope, &left, disorder_ms), table(scope, &right, disorder_ms))
                .for_each(move |e| sink.lock().unwrap().push((e.time.millis(), e.value.0, e.value.1, e.value.2)));
        })
        .unwrap();
    let metrics = running.metrics();
    running.join().unwrap();
    let mut out = std::mem::take(&mut *out.lock().unwrap());
    out.sort_unstable();
    (out, metrics.late_dropped())
}

fn run_hand(shards: usize, left: &[Rec], right: &[Rec], join: fn(Keyed, Keyed) -> Pairs) -> Vec<Joined> {
    let (out, late) = run_tables(PipelineConfig::with_shards(shards), left, right, 0, join);
    assert_eq!(late, 0, "in-order input has no late records ({shards} shards)");
    out
}

fn sorted(mut v: Vec<Joined>) -> Vec<Joined> {
    v.sort_unstable();
    v
}

// Orders and payments (user, id, ms), each in time order.
const ORDERS: [Rec; 6] = [
    rec("alice", 1, 1),
    rec("bob", 2, 3),
    rec("alice", 3, 7),
    rec("carol", 4, 12),
    rec("alice", 5, 15),
    rec("bob", 6, 25),
];
const PAYMENTS: [Rec; 7] = [
    rec("alice", 1, 2),
    rec("alice", 2, 9),
    rec("bob", 3, 11),
    rec("carol", 4, 14),
    rec("dave", 5, 16),
    rec("bob", 6, 27),
    rec("bob", 7, 29),
];

#[test]
fn tumbling_window_join_pairs_orders_and_payments_per_user_and_window() {
    // [0, 10): alice's orders 1, 3 with her payments 1, 2; bob's order 2 has no payment.
    // [10, 20): carol 4 with 4; alice's order 5, bob's payment 3 and dave's payment 5
    // have no partner. [20, 30): bob's order 6 with payments 6 and 7; nothing comes after
    // it, so only the end of input fires it.
    let expected = sorted(vec![
        (9, "alice", 1, 1),
        (9, "alice", 1, 2),
        (9, "alice", 3, 1),
        (9, "alice", 3, 2),
        (19, "carol", 4, 4),
        (29, "bob", 6, 6),
        (29, "bob", 6, 7),
    ]);
    for shards in [1, 2] {
        let out = run_hand(shards, &ORDERS, &PAYMENTS, |orders, payments| {
            orders.window_join(payments, Windows::tumbling(Duration::from_millis(10)), ids)
        });
        assert_eq!(out, expected, "{shards} shards");
    }
}

#[test]
fn sliding_window_join_pairs_records_in_every_window_they_share() {
    // Windows of 10 ms every 5 ms: [-5, 5), [0, 10), [5, 15), [10, 20).
    let left = [rec("a", 1, 2), rec("a", 2, 6), rec("b", 3, 8), rec("a", 4, 13)];
    let right = [rec("c", 4, 3), rec("a", 1, 4), rec("a", 2, 11), rec("b", 3, 14)];
    let expected = sorted(vec![
        // a: [-5, 5) holds l1, r1; [0, 10) l1, l2, r1; [5, 15) l2, l4, r2; [10, 20) l4, r2.
        (4, "a", 1, 1),
        (9, "a", 1, 1),
        (9, "a", 2, 1),
        (14, "a", 2, 2),
        (14, "a", 4, 2),
        (19, "a", 4, 2),
        // b: l3 and r3 share only [5, 15). c is on the right only.
        (14, "b", 3, 3),
    ]);
    for shards in [1, 2] {
        let out = run_hand(shards, &left, &right, |l, r| {
            l.window_join(r, Windows::sliding(Duration::from_millis(10), Duration::from_millis(5)), ids)
        });
        assert_eq!(out, expected, "{shards} shards");
    }
}

#[test]
fn interval_join_with_a_negative_lower_bound() {
    // r.time in [l.time - 3, l.time + 2], both ends inclusive.
    let left = [rec("a", 1, 5), rec("b", 3, 7), rec("a", 2, 10), rec("a", 4, 20)];
    let right = [
        rec("a", 1, 2),
        rec("b", 6, 3),
        rec("a", 2, 4),
        rec("a", 3, 7),
        rec("c", 8, 7),
        rec("a", 4, 8),
        rec("b", 7, 9),
        rec("a", 5, 12),
    ];
    let expected = sorted(vec![
        // l1 = 5 takes [2, 7]: r1 = 2 (the lower end), r2 = 4, r3 = 7 (the upper end).
        (5, "a", 1, 1),
        (5, "a", 1, 2),
        (7, "a", 1, 3),
        // l2 = 10 takes [7, 12]: r3, r4 = 8, r5 = 12.
        (10, "a", 2, 3),
        (10, "a", 2, 4),
        (12, "a", 2, 5),
        // l3 = 7 takes [4, 9]: r7 = 9, not r6 = 3. l4 = 20 finds nothing; c is right only.
        (9, "b", 3, 7),
    ]);
    for shards in [1, 2] {
        let out = run_hand(shards, &left, &right, |l, r| l.interval_join(r, -3, 2, ids));
        assert_eq!(out, expected, "{shards} shards");
    }
}

/// What the probe at the end of a join reports.
#[derive(Debug)]
enum Seen {
    Pair(Joined),
    /// A shard's join output reached this watermark.
    Watermark(usize, i64),
}

/// A sink that reports pairs and output watermarks, so a test knows how far each shard's
/// join has got.
struct Probe {
    shard: usize,
    tx: Arc<Mutex<mpsc::Sender<Seen>>>,
}

impl Operator<(&'static str, u32, u32)> for Probe {
    fn on_batch(&mut self, batch: &mut Vec<Event<(&'static str, u32, u32)>>) {
        let tx = self.tx.lock().unwrap();
        for e in batch.drain(..) {
            tx.send(Seen::Pair((e.time.millis(), e.value.0, e.value.1, e.value.2))).unwrap();
        }
    }
    fn on_watermark(&mut self, watermark: EventTime) {
        self.tx.lock().unwrap().send(Seen::Watermark(self.shard, watermark.millis())).unwrap();
    }
    fn on_idle(&mut self, _: bool) {}
    fn on_end(&mut self) {}
}

/// A join fed from two channels on shard 0 (the sources of the other shards end at once,
/// so each side's records and watermarks come in the order they are sent).
struct Fed {
    left: async_channel::Sender<Rec>,
    right: async_channel::Sender<Rec>,
    seen: mpsc::Receiver<Seen>,
    running: sluice_engine::dataflow::RunningPipeline,
    shards: usize,
    pairs: Vec<Joined>,
}

impl Fed {
    fn start(shards: usize, join: fn(Keyed, Keyed) -> Pairs) -> Self {
        let (left, left_rx) = async_channel::unbounded();
        let (right, right_rx) = async_channel::unbounded();
        let (tx, seen) = mpsc::channel();
        let tx = Arc::new(Mutex::new(tx));
        let running = Pipeline::new(PipelineConfig::with_shards(shards))
            .spawn(move |scope| {
                let source = |rx: &async_channel::Receiver<Rec>| {
                    let rx = if scope.shard() == 0 { rx.clone() } else { async_channel::unbounded().1 };
                    let strategy = WatermarkStrategy::monotonous(time_of);
                    scope.source(ChannelSource::new(rx), strategy).key_by(|r: &Rec| Key(r.key)).boxed()
                };
                join(source(&left_rx), source(&right_rx)).attach(Probe { shard: scope.shard(), tx: tx.clone() });
            })
            .unwrap();
        Fed { left, right, seen, running, shards, pairs: Vec::new() }
    }

    fn send(&self, left: &[Rec], right: &[Rec]) {
        for r in left {
            self.left.send_blocking(*r).unwrap();
        }
        for r in right {
            self.right.send_blocking(*r).unwrap();
        }
    }

    /// Waits until every shard's join has passed on `watermark`, collecting pairs.
    fn await_watermark(&mut self, watermark: i64) {
        let mut reached = vec![false; self.shards];
        while !reached.iter().all(|&r| r) {
            match self.seen.recv_timeout(Duration::from_secs(10)).expect("the join's watermark never gets there") {
                Seen::Pair(p) => self.pairs.push(p),
                Seen::Watermark(shard, w) => reached[shard] |= w >= watermark,
            }
        }
    }

    fn late_dropped(&self) -> u64 {
        self.running.metrics().late_dropped()
    }

    /// The pairs collected so far, sorted, and forgotten.
    fn take_pairs(&mut self) -> Vec<Joined> {
        sorted(std::mem::take(&mut self.pairs))
    }

    /// Ends both inputs and returns the pairs emitted since the last take and the
    /// late-dropped count.
    fn finish(mut self) -> (Vec<Joined>, u64) {
        self.left.close();
        self.right.close();
        let metrics = self.running.metrics();
        self.running.join().unwrap();
        self.pairs.extend(self.seen.try_iter().filter_map(|s| match s {
            Seen::Pair(p) => Some(p),
            Seen::Watermark(..) => None,
        }));
        (sorted(self.pairs), metrics.late_dropped())
    }
}

#[test]
fn window_join_drops_late_records_and_fires_the_rest_at_the_end() {
    for shards in [1, 2] {
        let mut fed = Fed::start(shards, |l, r| l.window_join(r, Windows::tumbling(Duration::from_millis(10)), ids));
        fed.send(
            &[rec("alice", 1, 1), rec("alice", 2, 7), rec("carol", 3, 12), rec("alice", 4, 25)],
            &[rec("alice", 1, 2), rec("carol", 2, 14), rec("bob", 3, 15), rec("alice", 4, 26)],
        );
        // Both sides are past 24: [0, 10) and [10, 20) have fired, [20, 30) cannot have.
        fed.await_watermark(24);
        assert_eq!(
            fed.take_pairs(),
            vec![(9, "alice", 1, 1), (9, "alice", 2, 1), (19, "carol", 3, 2)],
            "{shards} shards"
        );
        // Late: alice's order at 5 would pair with payment 1, carol's payment at 13 with
        // order 3. Each is followed by a record of a key the other side lacks, which moves
        // the watermark on: once it has passed, the late records have been handled. (A
        // record that moves no watermark may wait in an exchange for the next one.)
        fed.send(&[rec("alice", 5, 5), rec("zed", 6, 27)], &[rec("carol", 5, 13), rec("yan", 6, 28)]);
        fed.await_watermark(26);
        assert_eq!(fed.late_dropped(), 2, "{shards} shards");
        assert_eq!(fed.take_pairs(), vec![], "{shards} shards");
        // The end of input fires [20, 30).
        let (rest, late) = fed.finish();
        assert_eq!(rest, vec![(29, "alice", 4, 4)], "{shards} shards");
        assert_eq!(late, 2, "{shards} shards");
    }
}

#[test]
fn interval_join_drops_late_records() {
    for shards in [1, 2] {
        // r.time in [l.time - 3, l.time + 2].
        let mut fed = Fed::start(shards, |l, r| l.interval_join(r, -3, 2, ids));
        fed.send(&[rec("a", 10, 10), rec("a", 30, 30)], &[rec("a", 30, 30)]);
        fed.await_watermark(29);
        assert_eq!(fed.take_pairs(), vec![(30, "a", 30, 30)], "{shards} shards");
        // At 29 both stored records at 30 could still match, but a record at 28 or 29 is
        // behind the watermark: both are dropped, although each would match one of them.
        // An on-time record at 31 still meets the stored left record at 30; it and a left
        // record of another key move the watermark on, so once it has passed, the late
        // records have been handled.
        fed.send(&[rec("a", 29, 29), rec("z", 40, 40)], &[rec("a", 28, 28), rec("a", 31, 31)]);
        fed.await_watermark(30);
        assert_eq!(fed.late_dropped(), 2, "{shards} shards");
        assert_eq!(fed.take_pairs(), vec![(31, "a", 30, 31)], "{shards} shards");
        let (rest, late) = fed.finish();
        assert_eq!(rest, vec![], "{shards} shards");
        assert_eq!(late, 2, "{shards} shards");
    }
}

const KEYS: [&str; 3] = ["k0", "k1", "k2"];
const DISORDER_MS: u64 = 6;

/// Records in arrival order: a clock advancing 0-3 ms per record, each record up to
/// `DISORDER_MS` behind it, so none is late for a watermark trailing by that much. A third
/// are exactly that far behind, just above the watermark, where a join that dropped its
/// state a millisecond early would miss a pair.
fn records(rng: &mut Rng, n: u32) -> Vec<Rec> {
    let mut clock = 1_000;
    (0..n)
        .map(|id| {
            clock += rng.below_i64(4);
            let behind = if rng.below_i64(3) == 0 { DISORDER_MS as i64 } else { rng.below_i64(DISORDER_MS + 1) };
            rec(KEYS[rng.below_i64(KEYS.len() as u64) as usize], id, clock - behind)
        })
        .collect()
}

/// Every pair of equal keys `keep` accepts, at the time it gives.
fn brute_force(left: &[Rec], right: &[Rec], mut keep: impl FnMut(&Rec, &Rec, &mut Vec<Joined>)) -> Vec<Joined> {
    let mut out = Vec::new();
    for l in left {
        for r in right.iter().filter(|r| r.key == l.key) {
            keep(l, r, &mut out);
        }
    }
    sorted(out)
}

fn window_reference(left: &[Rec], right: &[Rec], windows: Windows) -> Vec<Joined> {
    brute_force(left, right, |l, r, out| {
        windows.assign(time_of(l), |w| {
            if w.contains(time_of(r)) {
                out.push((w.max_timestamp().millis(), l.key, l.id, r.id));
            }
        });
    })
}

#[test]
fn randomized_joins_match_a_brute_force_reference() {
    let seed = common::seed_from_env();
    let mut rng = Rng::seeded(seed);
    for round in 0..4 {
        let left = records(&mut rng, 300);
        let right = records(&mut rng, 300);
        let size = 5 + rng.below_i64(20);
        let slide = 1 + rng.below_i64(size as u64);
        let tumbling = Windows::Tumbling { size, offset: rng.below_i64(size as u64) };
        let sliding = Windows::Sliding { size, slide };
        let lower = rng.below_i64(21) - 10;
        let upper = lower + rng.below_i64(16);
        let interval = brute_force(&left, &right, |l, r, out| {
            if (l.time + lower..=l.time + upper).contains(&r.time) {
                out.push((l.time.max(r.time), l.key, l.id, r.id));
            }
        });
        let cases: [(String, Vec<Joined>, Builder); 3] = [
            (
                format!("{tumbling:?}"),
                window_reference(&left, &right, tumbling),
                Arc::new(move |l, r| l.window_join(r, tumbling, ids)),
            ),
            (
                format!("{sliding:?}"),
                window_reference(&left, &right, sliding),
                Arc::new(move |l, r| l.window_join(r, sliding, ids)),
            ),
            (
                format!("interval [{lower}, {upper}]"),
                interval,
                Arc::new(move |l, r| l.interval_join(r, lower, upper, ids)),
            ),
        ];
        for (name, expected, join) in cases {
            assert!(!expected.is_empty(), "SEED={seed} round {round} {name}: the reference has pairs to find");
            for shards in [1, 2] {
                // Small batches, so watermarks interleave with the records of both sides.
                let batch_records = [1, 8][rng.below_i64(2) as usize];
                let config = PipelineConfig { batch_records, ..PipelineConfig::with_shards(shards) };
                let join = join.clone();
                let (out, late) = run_tables(config, &left, &right, DISORDER_MS, move |l, r| join(l, r));
                let context = format!("SEED={seed} round {round} {name}, {shards} shards, {batch_records} per batch");
                assert_eq!(late, 0, "{context}");
                assert_eq!(out.len(), expected.len(), "{context}");
                assert_eq!(out, expected, "{context}");
            }
        }
    }
}
