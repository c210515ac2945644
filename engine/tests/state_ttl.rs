//! State time-to-live on keyed process state, end to end:
//!
//! - event time: a hand-computed trace at one shard (write-stamped and read-stamped values,
//!   a late write stamped at the watermark);
//! - processing time: a value expires on the wall clock, and the sweep forgets a key no
//!   record touches again;
//! - settings that cannot apply are refused by `spawn` with the typed error;
//! - a checkpoint never holds an expired value (its size shows it);
//! - across a checkpoint restore at another shard count and across a savepoint, every read
//!   agrees with an oracle (a plain value state holding the write's stamp) judged against
//!   [`ProcessContext::ttl_watermark`], and values written before the restore are read
//!   after it.
//!
//! `cargo test ttl` selects them all.

mod common;

use std::{
    sync::{
        Arc, Mutex,
        atomic::{AtomicI64, AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use sluice_engine::{
    EngineError,
    dataflow::{
        ChannelSource, CheckpointConfig, Data, Event, Generator, KeyedProcessFunction, KeyedState, Pipeline,
        PipelineConfig, ProcessContext, Scope, TimeDomain, TtlClock, TtlConfig, TtlError, TtlPolicy, TtlUpdate,
        TtlValueState, ValueState, WatermarkStrategy, checkpoint::StateError,
    },
};
use sluice_io::{CheckpointId, EventTime};

/// One input record of the hand-made traces: a key, an event time (ms), a number.
#[derive(Debug, Clone, Copy, rkyv::Archive, rkyv::Serialize, rkyv::Deserialize)]
struct In {
    key: char,
    time: i64,
    v: i64,
}
sluice_engine::rkyv_data!(In);

const fn r(key: char, time: i64, v: i64) -> In {
    In { key, time, v }
}

/// 100 ms of event time since the last write.
struct EventWrite100;
impl TtlPolicy for EventWrite100 {
    const CONFIG: TtlConfig = TtlConfig::new(Duration::from_millis(100), TimeDomain::EventTime);
}

/// 100 ms of event time since the last read or write.
struct EventRead100;
impl TtlPolicy for EventRead100 {
    const CONFIG: TtlConfig =
        TtlConfig::new(Duration::from_millis(100), TimeDomain::EventTime).update(TtlUpdate::OnReadAndWrite);
}

/// `v > 0` writes `v` to both values; `v == 0` reads both and emits what it saw.
struct TwoValues;

type Both = (TtlValueState<i64, EventWrite100>, TtlValueState<i64, EventRead100>);

impl KeyedProcessFunction<char, In> for TwoValues {
    type State = Both;
    type Out = (i64, Option<i64>, Option<i64>);
    fn process_element(
        &mut self,
        _: &char,
        e: Event<In>,
        (write, read): &mut Both,
        ctx: &mut ProcessContext<'_, char, Self::Out>,
    ) {
        if e.value.v > 0 {
            write.set(ctx, e.value.v);
            read.set(ctx, e.value.v);
        } else {
            let seen = (e.value.time, write.get(ctx).copied(), read.get(ctx).copied());
            ctx.emit(seen);
        }
    }
}

#[test]
fn event_time_ttl_hides_values_once_the_watermark_passes_their_stamp_plus_ttl() {
    // One record per batch on one shard: each record is processed at the watermark the
    // one before it moved (its time - 1, monotonous).
    let input = [
        r('a', 0, 7),    // both stamped 0
        r('a', 50, 0),   // wm -1: 7, 7 (the read-stamped one now at 50)
        r('a', 101, 0),  // wm 49: 7, 7 (read stamp 101)
        r('a', 102, 0),  // wm 100: 0 + 100 <= 100, gone; 7 (102)
        r('a', 110, 9),  // wm 101: both stamped 110
        r('a', 150, 0),  // wm 109: 9, 9 (150)
        r('a', 211, 0),  // wm 149: 9, 9 (211)
        r('a', 212, 0),  // wm 210: gone; 9 (212)
        r('a', 50, 4),   // late, wm 211: both stamped at the watermark, 211
        r('a', 311, 0),  // wm 211: 4, 4 (311)
        r('a', 312, 0),  // wm 310: 4 (211 + 100 > 310), 4 (312)
        r('a', 313, 0),  // wm 311: gone; 4 (313)
        r('z', 1000, 1), // another key moves the watermark
        r('a', 1001, 0), // wm 999: gone; 313 + 100 <= 999, gone
    ];
    let want = vec![
        (50, Some(7), Some(7)),
        (101, Some(7), Some(7)),
        (102, None, Some(7)),
        (150, Some(9), Some(9)),
        (211, Some(9), Some(9)),
        (212, None, Some(9)),
        (311, Some(4), Some(4)),
        (312, Some(4), Some(4)),
        (313, None, Some(4)),
        (1001, None, None),
    ];
    let out = Arc::new(Mutex::new(Vec::new()));
    let sink = out.clone();
    let input = Arc::new(input);
    Pipeline::new(PipelineConfig { batch_records: 1, ..PipelineConfig::with_shards(1) })
        .run(move |scope| {
            let (input, sink) = (input.clone(), sink.clone());
            scope
                .source(
                    Generator::new(0, 1, input.len() as u64, move |i| input[i as usize]),
                    WatermarkStrategy::monotonous(|e: &In| EventTime::from_millis(e.time)),
                )
                .key_by(|e| e.key)
                .process(TwoValues)
                .for_each(move |e| sink.lock().unwrap().push(e.value));
        })
        .unwrap();
    assert_eq!(*out.lock().unwrap(), want);
}

// ---------------------------------------------------------------------------------------
// Processing time, and the sweep.

/// 50 ms of wall clock.
struct Wall50;
impl TtlPolicy for Wall50 {
    const CONFIG: TtlConfig = TtlConfig::new(Duration::from_millis(50), TimeDomain::ProcessingTime);
}

/// An hour of wall clock: never expires within a test.
struct WallHour;
impl TtlPolicy for WallHour {
    const CONFIG: TtlConfig = TtlConfig::new(Duration::from_secs(3600), TimeDomain::ProcessingTime);
}

/// States of [`Session`] alive (this test's alone).
static SESSIONS_ALIVE: AtomicI64 = AtomicI64::new(0);

/// A struct of TTL fields, forwarding [`KeyedState`]'s TTL methods as the docs ask; it
/// counts its instances.
struct Session {
    short: TtlValueState<i64, Wall50>,
    long: TtlValueState<i64, WallHour>,
}

impl Default for Session {
    fn default() -> Self {
        SESSIONS_ALIVE.fetch_add(1, Ordering::SeqCst);
        Session { short: TtlValueState::default(), long: TtlValueState::default() }
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        SESSIONS_ALIVE.fetch_sub(1, Ordering::SeqCst);
    }
}

impl KeyedState for Session {
    fn is_empty(&self) -> bool {
        self.short.is_empty() && self.long.is_empty()
    }
    fn ttl_configs(configs: &mut Vec<TtlConfig>) {
        TtlValueState::<i64, Wall50>::ttl_configs(configs);
        TtlValueState::<i64, WallHour>::ttl_configs(configs);
    }
    fn expire(&mut self, clock: &TtlClock) -> bool {
        self.short.expire(clock) | self.long.expire(clock)
    }
}

impl Data for Session {
    fn encode(&self, out: &mut Vec<u8>) {
        self.short.encode(out);
        self.long.encode(out);
    }
    fn decode(input: &mut &[u8]) -> Result<Self, StateError> {
        SESSIONS_ALIVE.fetch_add(1, Ordering::SeqCst);
        Ok(Session { short: Data::decode(input)?, long: Data::decode(input)? })
    }
}

/// `v == 1` writes both values, `v == 2` the short one only, `v == 0` reads both.
struct Sessions;

impl KeyedProcessFunction<char, In> for Sessions {
    type State = Session;
    type Out = (char, bool, bool);
    fn process_element(
        &mut self,
        key: &char,
        e: Event<In>,
        s: &mut Session,
        ctx: &mut ProcessContext<'_, char, Self::Out>,
    ) {
        match e.value.v {
            0 => {
                let seen = (*key, s.short.get(ctx).is_some(), s.long.get(ctx).is_some());
                ctx.emit(seen);
            }
            1 => {
                s.short.set(ctx, 1);
                s.long.set(ctx, 1);
            }
            _ => {
                s.short.set(ctx, 2);
            }
        }
    }
}

#[test]
fn processing_time_ttl_expires_on_the_wall_clock_and_the_sweep_forgets_idle_keys() {
    let (tx, rx) = async_channel::unbounded::<In>();
    let (out_tx, out_rx) = std::sync::mpsc::channel::<(char, bool, bool)>();
    let out_tx = Arc::new(Mutex::new(out_tx));
    let running = Pipeline::new(PipelineConfig::with_shards(1))
        .spawn(move |scope| {
            let out = out_tx.clone();
            scope
                .source(ChannelSource::splits(vec![rx.clone()]), WatermarkStrategy::processing_time())
                .key_by(|e: &In| e.key)
                .process(Sessions)
                .for_each(move |e| out.lock().unwrap().send(e.value).unwrap());
        })
        .unwrap();
    let written = Instant::now();
    tx.send_blocking(r('a', 0, 1)).unwrap();
    tx.send_blocking(r('b', 0, 2)).unwrap();
    tx.send_blocking(r('a', 0, 0)).unwrap();
    let (key, _, long) = out_rx.recv_timeout(Duration::from_secs(10)).expect("a is read");
    assert_eq!((key, long), ('a', true), "the hour-long value is there");
    // Past the short TTL (by the test's clock, which starts before the write).
    std::thread::sleep(Duration::from_millis(200).saturating_sub(written.elapsed()));
    tx.send_blocking(r('a', 0, 0)).unwrap();
    let seen = out_rx.recv_timeout(Duration::from_secs(10)).expect("a is read again");
    assert_eq!(seen, ('a', false, true), "the 50 ms value expired, the hour-long one did not");
    // b is never touched again: the processing-time sweep (every 50 ms) forgets it, and a
    // keeps only its hour-long value.
    let deadline = Instant::now() + Duration::from_secs(10);
    while SESSIONS_ALIVE.load(Ordering::SeqCst) != 1 {
        assert!(
            Instant::now() < deadline,
            "b's expired state is never swept: {} alive",
            SESSIONS_ALIVE.load(Ordering::SeqCst)
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    tx.close();
    running.join().unwrap();
}

// ---------------------------------------------------------------------------------------
// Refusals.

struct ZeroTtl;
impl TtlPolicy for ZeroTtl {
    const CONFIG: TtlConfig = TtlConfig::new(Duration::ZERO, TimeDomain::EventTime);
}

struct NoSweep;
impl TtlPolicy for NoSweep {
    const CONFIG: TtlConfig = TtlConfig::new(Duration::from_secs(1), TimeDomain::ProcessingTime).sweep_keys(0);
}

struct Keeps<S>(std::marker::PhantomData<S>);

impl<S: KeyedState + Default + Data + 'static> KeyedProcessFunction<u64, u64> for Keeps<S> {
    type State = S;
    type Out = u64;
    fn process_element(&mut self, _: &u64, e: Event<u64>, _: &mut S, ctx: &mut ProcessContext<'_, u64, u64>) {
        ctx.emit(e.value);
    }
}

fn spawn_keeping<S: KeyedState + Default + Data + 'static>(checkpoints: Option<&std::path::Path>) -> EngineError {
    let mut pipeline = Pipeline::new(PipelineConfig::with_shards(2));
    if let Some(dir) = checkpoints {
        pipeline = pipeline.checkpointing(CheckpointConfig::new(dir));
    }
    let Err(e) = pipeline.spawn(|scope| {
        scope
            .source(
                Generator::new(scope.shard(), scope.shards(), 10, |i| i),
                WatermarkStrategy::monotonous(|i: &u64| EventTime::from_millis(*i as i64)),
            )
            .key_by(|i| i % 3)
            .process(Keeps::<S>(std::marker::PhantomData))
            .for_each(|_| {});
    }) else {
        panic!("a TTL that cannot apply was accepted")
    };
    e
}

#[test]
fn ttl_settings_that_cannot_apply_refuse_the_start_with_the_typed_error() {
    let dir = common::data_dir("state_ttl", "refused");
    let e = spawn_keeping::<TtlValueState<u64, ZeroTtl>>(None);
    assert!(matches!(e, EngineError::StateTtl(TtlError::BelowResolution { ttl: Duration::ZERO })), "{e}");
    assert!(e.to_string().contains("below the clocks' 1 ms resolution"), "{e}");
    // Inside a tuple, with checkpoints on.
    let e = spawn_keeping::<(ValueState<u64>, TtlValueState<u64, NoSweep>)>(Some(&dir));
    assert!(matches!(e, EngineError::StateTtl(TtlError::NoSweep)), "{e}");
}

// ---------------------------------------------------------------------------------------
// Checkpoints.

/// An hour of event time: expires only at the end of the input.
struct EventHour;
impl TtlPolicy for EventHour {
    const CONFIG: TtlConfig = TtlConfig::new(Duration::from_secs(3600), TimeDomain::EventTime).sweep_keys(1);
}

struct Writes<S>(std::marker::PhantomData<S>);

impl KeyedProcessFunction<u64, u64> for Writes<TtlValueState<u64, EventHour>> {
    type State = TtlValueState<u64, EventHour>;
    type Out = ();
    fn process_element(&mut self, _: &u64, e: Event<u64>, s: &mut Self::State, ctx: &mut ProcessContext<'_, u64, ()>) {
        s.set(ctx, e.value);
    }
}

impl KeyedProcessFunction<u64, u64> for Writes<ValueState<u64>> {
    type State = ValueState<u64>;
    type Out = ();
    fn process_element(&mut self, _: &u64, e: Event<u64>, s: &mut Self::State, _: &mut ProcessContext<'_, u64, ()>) {
        s.set(e.value);
    }
}

/// Writes 20 000 keys once each (checkpointing whole every 5 ms); the last checkpoint's
/// figures: it is taken after the end of input moved the watermark to the end of time.
fn last_checkpoint<S>(dir: &std::path::Path) -> sluice_engine::dataflow::CheckpointStats
where
    S: KeyedState + Default + Data + 'static,
    Writes<S>: KeyedProcessFunction<u64, u64, State = S, Out = ()>,
{
    let running = Pipeline::new(PipelineConfig::with_shards(2))
        .checkpointing(CheckpointConfig::new(dir).interval(Duration::from_millis(5)).full_every(1))
        .spawn(|scope| {
            scope
                .source(
                    Generator::new(scope.shard(), scope.shards(), 20_000, |i| i),
                    WatermarkStrategy::monotonous(|i: &u64| EventTime::from_millis((*i / 100) as i64)),
                )
                .key_by(|i| *i)
                .process(Writes::<S>(std::marker::PhantomData))
                .for_each(|_| {});
        })
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while !running.is_finished() {
        assert!(Instant::now() < deadline, "the job ends");
        std::thread::sleep(Duration::from_millis(2));
    }
    let stats = running.checkpoints();
    running.join().unwrap();
    *stats.last().expect("the final checkpoint")
}

#[test]
fn ttl_expired_values_are_never_written_into_a_checkpoint() {
    let dir = common::data_dir("state_ttl", "snapshot");
    let plain = last_checkpoint::<ValueState<u64>>(&dir.join("plain"));
    let ttl = last_checkpoint::<TtlValueState<u64, EventHour>>(&dir.join("ttl"));
    // Without TTL the final (whole) snapshot holds every key; with an event-time TTL every
    // value has expired at the end of time, and the snapshot (the sweep visits one key per
    // advance) drops them all rather than write them.
    assert_eq!(plain.keys, 20_000, "{plain:?}");
    assert_eq!(ttl.keys, 0, "{ttl:?}");
    assert!(ttl.bytes < plain.bytes / 10, "{ttl:?} against {plain:?}");
}

// ---------------------------------------------------------------------------------------
// Restores: an oracle checks every read.

/// 50 ms of event time since the last write.
struct EventWrite50;
impl TtlPolicy for EventWrite50 {
    const CONFIG: TtlConfig = TtlConfig::new(Duration::from_millis(50), TimeDomain::EventTime).sweep_keys(100);
}

/// An hour of wall clock since the last read or write.
struct WallHourRead;
impl TtlPolicy for WallHourRead {
    const CONFIG: TtlConfig =
        TtlConfig::new(Duration::from_secs(3600), TimeDomain::ProcessingTime).update(TtlUpdate::OnReadAndWrite);
}

/// What the oracle function saw, over every run of one job.
#[derive(Debug, Default)]
struct Reads {
    /// Reads that found the event-time value, and those that found it expired.
    present: AtomicU64,
    expired: AtomicU64,
    /// Reads in a later run of values an earlier run wrote.
    restored: AtomicU64,
    /// Reads that disagreed with the oracle.
    wrong: AtomicU64,
}

/// The event-time value (the run that wrote it, the record), the hour-long wall-clock
/// flag, and the oracle: the event-time value's stamp, in a plain value state.
type OracleState = (TtlValueState<(u8, u64), EventWrite50>, TtlValueState<u8, WallHourRead>, ValueState<i64>);

/// Reads both values of the record's key and checks them against the oracle, then writes
/// them on a tenth of the records (each key every 100 ms of event time, the keys'
/// phases spread over that).
struct Oracle {
    run: u8,
    reads: Arc<Reads>,
}

impl KeyedProcessFunction<u64, u64> for Oracle {
    type State = OracleState;
    type Out = ();
    fn process_element(
        &mut self,
        _: &u64,
        e: Event<u64>,
        (value, wall, stamp): &mut OracleState,
        ctx: &mut ProcessContext<'_, u64, ()>,
    ) {
        let now = ctx.ttl_watermark().millis();
        let live = stamp.value().map(|s| s + 50 > now);
        let reads = &self.reads;
        match (live, value.get(ctx).copied()) {
            (Some(true), Some((run, _))) => {
                reads.present.fetch_add(1, Ordering::Relaxed);
                if run != self.run {
                    reads.restored.fetch_add(1, Ordering::Relaxed);
                }
            }
            (Some(false), None) => {
                reads.expired.fetch_add(1, Ordering::Relaxed);
            }
            (None, None) => {}
            _ => {
                reads.wrong.fetch_add(1, Ordering::Relaxed);
            }
        }
        if wall.get(ctx).is_some() != stamp.value().is_some() {
            reads.wrong.fetch_add(1, Ordering::Relaxed);
        }
        // Key k is written every 100 ms of event time, 10 ms later than key k - 1 (mod 10):
        // at any moment about half the keys hold a live value and half an expired one,
        // so wherever a run stops, the next reads some of both.
        if (e.value / 1000 + e.value % 10).is_multiple_of(10) {
            value.set(ctx, (self.run, e.value));
            wall.set(ctx, self.run);
            stamp.set(e.time.millis().max(now));
        }
    }
}

/// Records in the restore tests: 1000 keys, one record per key every 10 ms of event time.
const ORACLE_RECORDS: u64 = 200_000;

/// The oracle job of run `run`: in run 1 each record takes 20 us (so it is stopped well
/// before its end), in run 2 nothing.
fn oracle_job(scope: &Scope, run: u8, reads: &Arc<Reads>) {
    let work = if run == 1 { Duration::from_micros(20) } else { Duration::ZERO };
    scope
        .source(
            Generator::new(scope.shard(), scope.shards(), ORACLE_RECORDS, |i| i),
            WatermarkStrategy::monotonous(|i: &u64| EventTime::from_millis((*i / 100) as i64)),
        )
        .uid("numbers")
        .map(move |i| {
            let until = Instant::now() + work;
            while Instant::now() < until {}
            i
        })
        .key_by(|i| i % 1000)
        .process(Oracle { run, reads: reads.clone() })
        .uid("oracle")
        .for_each(|_| {});
}

/// Runs the oracle job again (run 2) at `shards` from `config`, to the end, and checks
/// every read of both runs.
fn resume_and_check(config: CheckpointConfig, shards: usize, reads: &Arc<Reads>) {
    let job = reads.clone();
    let running = Pipeline::new(PipelineConfig::with_shards(shards))
        .checkpointing(config)
        .spawn(move |scope| oracle_job(scope, 2, &job))
        .unwrap();
    assert!(running.restored_from().is_some(), "run 2 restores");
    running.join().unwrap();
    let r = reads;
    assert_eq!(r.wrong.load(Ordering::Relaxed), 0, "reads against the oracle: {r:?}");
    assert!(r.present.load(Ordering::Relaxed) > 0 && r.expired.load(Ordering::Relaxed) > 0, "{r:?}");
    assert!(r.restored.load(Ordering::Relaxed) > 0, "run 2 read values run 1 wrote: {r:?}");
}

#[test]
fn ttl_state_restores_from_a_checkpoint_at_another_shard_count_with_every_read_as_the_oracle_says() {
    let dir = common::data_dir("state_ttl", "checkpoint");
    let reads = Arc::new(Reads::default());
    let job = reads.clone();
    let config = || CheckpointConfig::new(dir.join("job")).interval(Duration::from_millis(20)).full_every(3);
    let running = Pipeline::new(PipelineConfig::with_shards(2))
        .checkpointing(config())
        .spawn(move |scope| oracle_job(scope, 1, &job))
        .unwrap();
    let mut last = CheckpointId(0);
    for _ in 0..4 {
        last = running.wait_for_checkpoint(last, Duration::from_secs(30)).expect("a checkpoint completes").id;
    }
    running.stop(false);
    running.join().unwrap();
    // Two shards' parts, incremental, restored at one.
    resume_and_check(config(), 1, &reads);
}

#[test]
fn ttl_state_resumes_from_a_savepoint_with_every_read_as_the_oracle_says() {
    let dir = common::data_dir("state_ttl", "savepoint");
    let savepoint = dir.join("savepoint");
    let reads = Arc::new(Reads::default());
    let job = reads.clone();
    let running = Pipeline::new(PipelineConfig::with_shards(1))
        .checkpointing(CheckpointConfig::new(dir.join("v1")).interval(Duration::from_millis(20)))
        .spawn(move |scope| oracle_job(scope, 1, &job))
        .unwrap();
    running.wait_for_checkpoint(CheckpointId(0), Duration::from_secs(30)).expect("a checkpoint completes");
    running.stop_with_savepoint(&savepoint).unwrap();
    resume_and_check(CheckpointConfig::new(dir.join("v2")).restore_from(&savepoint), 2, &reads);
}
