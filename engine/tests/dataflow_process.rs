//! The keyed process function end to end, on real pipelines (pinned executors, rings
//! between shards), at 1 and 2 shards, against hand-computed results:
//!
//! - value state: a running sum per key (and a random one against a model);
//! - map and list state: pages per user;
//! - event-time timers: firing in time order when the watermark passes them, once per key
//!   and time, before the watermark is passed on, and at the end of input; a timer set in
//!   the past; deleting a timer;
//! - processing-time timers: firing within a bounded wall time, and deleted ones not at all;
//! - a key whose state is empty again is forgotten;
//! - fraud detection (a small transaction followed by a large one within a minute).
//!
//! Inputs are read on shard 0 only, one record per batch, so a key's records reach its
//! shard in input order, each followed by the watermark it moved. At 1 shard the whole
//! trace (records and watermarks) is checked. At 2, a shard's first watermarks may be
//! held back until the other shard's (empty) source has ended, so the functions tested
//! there give the same records whenever their timers fire; each shard's records are
//! checked exactly, and its watermarks for rising to the end of time, each after the
//! records at or below it.
//!
//! The randomized case prints `SEED=<n>`; `SEED=<n> cargo test -p sluice-engine --test
//! dataflow_process` replays it.

use std::{
    cell::Cell,
    collections::HashMap,
    sync::{Arc, Mutex, mpsc},
    time::{Duration, Instant},
};

use sluice_engine::dataflow::{
    ChannelSource, Data, Event, Generator, KeyedProcessFunction, KeyedState, ListState, MapState, Operator, Pipeline,
    PipelineConfig, ProcessContext, TimeDomain, Timer, ValueState, WatermarkStrategy, checkpoint::StateError,
    key_group, shard_of_group,
};
use sluice_io::EventTime;

/// One input record: a key, an event time (ms) and a number whose meaning each test gives.
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

/// What a shard's sink saw, in order.
#[derive(Debug, Clone, PartialEq)]
enum Seen<O> {
    Rec(i64, O),
    Wm(i64),
    End,
}

use Seen::{End, Rec, Wm};

mod common;
use common::Rng;

/// Records everything that reaches the end of the pipeline on one shard.
struct Recorder<O> {
    shard: usize,
    log: Arc<Mutex<Vec<Vec<Seen<O>>>>>,
}

impl<O> Operator<O> for Recorder<O> {
    fn on_batch(&mut self, batch: &mut Vec<Event<O>>) {
        self.log.lock().unwrap()[self.shard].extend(batch.drain(..).map(|e| Rec(e.time.millis(), e.value)));
    }
    fn on_watermark(&mut self, watermark: EventTime) {
        self.log.lock().unwrap()[self.shard].push(Wm(watermark.millis()));
    }
    fn on_idle(&mut self, _: bool) {}
    fn on_end(&mut self) {
        self.log.lock().unwrap()[self.shard].push(End);
    }
}

/// Runs `make()` over `input`, read on shard 0 one record per batch with a monotonous
/// watermark and keyed by `In::key`; what each shard's sink saw.
fn run<F, O>(shards: usize, input: &[In], make: fn() -> F) -> Vec<Vec<Seen<O>>>
where
    F: KeyedProcessFunction<char, In, Out = O>,
    F::State: Data,
    O: Send + 'static,
{
    let config = PipelineConfig { batch_records: 1, ..PipelineConfig::with_shards(shards) };
    run_with(config, input, make)
}

fn run_with<F, O>(config: PipelineConfig, input: &[In], make: fn() -> F) -> Vec<Vec<Seen<O>>>
where
    F: KeyedProcessFunction<char, In, Out = O>,
    F::State: Data,
    O: Send + 'static,
{
    let input: Arc<Vec<In>> = Arc::new(input.to_vec());
    let log = Arc::new(Mutex::new((0..config.shards).map(|_| Vec::new()).collect::<Vec<_>>()));
    let sink = log.clone();
    Pipeline::new(config)
        .run(move |scope| {
            let input = input.clone();
            let count = if scope.shard() == 0 { input.len() as u64 } else { 0 };
            scope
                .source(
                    Generator::new(0, 1, count, move |i| input[i as usize]),
                    WatermarkStrategy::monotonous(|e: &In| EventTime::from_millis(e.time)),
                )
                .key_by(|e| e.key)
                .process(make())
                .attach(Recorder { shard: scope.shard(), log: sink.clone() });
        })
        .unwrap();
    Arc::try_unwrap(log).ok().unwrap().into_inner().unwrap()
}

/// The shard that owns `key` under the default key groups.
fn owner(key: char, shards: usize) -> usize {
    let groups = PipelineConfig::DEFAULT_KEY_GROUPS;
    shard_of_group(key_group(&key, groups), groups, shards)
}

fn records<O: Clone>(trace: &[Seen<O>]) -> Vec<(i64, O)> {
    trace.iter().filter_map(|s| if let Rec(t, o) = s { Some((*t, o.clone())) } else { None }).collect()
}

/// Checks what `shards` shards saw against the 1-shard trace `expected`: at 1 shard the
/// trace itself; at more, each shard's records are those of the keys it owns, in order,
/// and its watermarks rise to the end of time, each after the records at or below it.
fn check<O: Clone + PartialEq + std::fmt::Debug>(seen: &[Vec<Seen<O>>], expected: &[Seen<O>], key_of: fn(&O) -> char) {
    let shards = seen.len();
    if shards == 1 {
        assert_eq!(seen[0], expected);
        return;
    }
    for (shard, trace) in seen.iter().enumerate() {
        let mine: Vec<_> = records(expected).into_iter().filter(|(_, o)| owner(key_of(o), shards) == shard).collect();
        assert_eq!(records(trace), mine, "records of shard {shard}");
        let mut watermark = i64::MIN;
        for s in trace {
            match s {
                Rec(t, o) => assert!(*t > watermark, "shard {shard}: {o:?} at {t} after watermark {watermark}"),
                Wm(w) => {
                    assert!(*w > watermark, "shard {shard}: watermarks rise");
                    watermark = *w;
                }
                End => assert_eq!(watermark, i64::MAX, "shard {shard}: the input ends at the end of time"),
            }
        }
        assert_eq!(trace.last(), Some(&End));
    }
}

type Ctx<'a, O> = ProcessContext<'a, char, O>;

// ---------------------------------------------------------------------------------------
// Value state.

/// A running sum per key; the key's state is cleared when the sum is back to zero.
struct RunningSum;

impl KeyedProcessFunction<char, In> for RunningSum {
    type State = ValueState<i64>;
    type Out = (char, i64);
    fn process_element(&mut self, key: &char, e: Event<In>, sum: &mut ValueState<i64>, ctx: &mut Ctx<'_, Self::Out>) {
        let s = sum.get_or_insert_with(|| 0);
        *s += e.value.v;
        ctx.emit((*key, *s));
        if *s == 0 {
            sum.clear();
        }
    }
}

#[test]
fn value_state_keeps_a_running_sum_per_key() {
    let input = [r('a', 1, 3), r('b', 2, 4), r('a', 3, 5), r('b', 4, -4), r('a', 5, 1), r('b', 6, 2)];
    let expected = vec![
        Rec(1, ('a', 3)),
        Wm(0),
        Rec(2, ('b', 4)),
        Wm(1),
        Rec(3, ('a', 8)),
        Wm(2),
        Rec(4, ('b', 0)),
        Wm(3),
        Rec(5, ('a', 9)),
        Wm(4),
        Rec(6, ('b', 2)),
        Wm(5),
        Wm(i64::MAX),
        End,
    ];
    for shards in [1, 2] {
        check(&run(shards, &input, || RunningSum), &expected, |o| o.0);
    }
}

#[test]
fn random_running_sums_match_a_model() {
    const KEYS: [char; 12] = ['0', '1', '2', '3', '4', '5', '6', '7', '8', '9', 'x', 'y'];
    let mut rng = Rng::from_env();
    let input: Vec<In> =
        (0..20_000).map(|i| r(KEYS[rng.below(KEYS.len() as u64) as usize], i / 3, rng.below(21) as i64 - 10)).collect();
    let mut model: HashMap<char, i64> = HashMap::new();
    let expected: Vec<(i64, (char, i64))> = input
        .iter()
        .map(|e| {
            let sum = model.entry(e.key).or_default();
            *sum += e.v;
            (e.time, (e.key, *sum))
        })
        .collect();
    for shards in [1, 2] {
        // Whole batches this time, as a pipeline runs by default.
        let seen = run_with(PipelineConfig::with_shards(shards), &input, || RunningSum);
        for (shard, trace) in seen.iter().enumerate() {
            let mine: Vec<_> = expected.iter().filter(|(_, o)| owner(o.0, shards) == shard).cloned().collect();
            assert_eq!(records(trace), mine, "{shards} shards, shard {shard}");
        }
    }
}

// ---------------------------------------------------------------------------------------
// Map and list state.

/// Per user: visits per page (map state) and the last three pages (list state); page -1
/// logs the user out, forgetting both.
struct Pages;

type PagesOut = (char, i64, u32, usize, Vec<i64>);

impl KeyedProcessFunction<char, In> for Pages {
    type State = (MapState<i64, u32>, ListState<i64>);
    type Out = PagesOut;
    fn process_element(&mut self, user: &char, e: Event<In>, state: &mut Self::State, ctx: &mut Ctx<'_, PagesOut>) {
        let (visits, recent) = state;
        let page = e.value.v;
        if page < 0 {
            visits.clear();
            recent.clear();
            ctx.emit((*user, page, 0, 0, Vec::new()));
            return;
        }
        let n = visits.entry(page).or_insert(0);
        *n += 1;
        let n = *n;
        recent.add(page);
        if recent.len() > 3 {
            let mut kept = recent.take();
            kept.remove(0);
            recent.update(kept);
        }
        ctx.emit((*user, page, n, visits.len(), recent.get().to_vec()));
    }
}

#[test]
fn map_and_list_state_follow_each_user() {
    let input = [
        r('u', 1, 1),
        r('u', 2, 2),
        r('v', 3, 1),
        r('u', 4, 1),
        r('u', 5, 3),
        r('v', 6, -1),
        r('v', 7, 5),
        r('u', 8, 4),
    ];
    let want: Vec<(i64, PagesOut)> = vec![
        (1, ('u', 1, 1, 1, vec![1])),
        (2, ('u', 2, 1, 2, vec![1, 2])),
        (3, ('v', 1, 1, 1, vec![1])),
        (4, ('u', 1, 2, 2, vec![1, 2, 1])),
        (5, ('u', 3, 1, 3, vec![2, 1, 3])),
        (6, ('v', -1, 0, 0, vec![])),
        (7, ('v', 5, 1, 1, vec![5])),
        (8, ('u', 4, 1, 4, vec![1, 3, 4])),
    ];
    let mut expected = Vec::new();
    for (t, o) in want {
        expected.push(Rec(t, o));
        expected.push(Wm(t - 1));
    }
    expected.extend([Wm(i64::MAX), End]);
    for shards in [1, 2] {
        check(&run(shards, &input, || Pages), &expected, |o| o.0);
    }
}

// ---------------------------------------------------------------------------------------
// Event-time timers.

/// Each record asks for a reminder `v` ms after its time; a reminder reports how many
/// records asked for it (one timer per key and time, counted in map state).
struct Reminders;

impl KeyedProcessFunction<char, In> for Reminders {
    type State = MapState<i64, u32>;
    type Out = (char, u32);
    fn process_element(&mut self, _: &char, e: Event<In>, asked: &mut Self::State, ctx: &mut Ctx<'_, Self::Out>) {
        let due = e.value.time + e.value.v;
        *asked.entry(due).or_insert(0) += 1;
        ctx.register_event_time_timer(EventTime::from_millis(due));
    }
    fn on_timer(&mut self, key: &char, timer: Timer, asked: &mut Self::State, ctx: &mut Ctx<'_, Self::Out>) {
        assert_eq!(timer.domain, TimeDomain::EventTime);
        assert_eq!(ctx.time(), timer.time);
        assert!(ctx.current_watermark() >= timer.time, "fires once the watermark has passed it");
        ctx.emit((*key, asked.remove(&timer.time.millis()).unwrap_or(0)));
    }
}

#[test]
fn event_time_timers_fire_in_order_as_the_watermark_passes_and_at_the_end() {
    let input = [
        r('a', 0, 10),   // due 10
        r('a', 5, 5),    // due 10 again: the same timer
        r('b', 7, 3),    // due 10, registered after a's
        r('a', 12, 20),  // due 32; the watermark 11 after it fires a@10 and b@10
        r('b', 20, 5),   // due 25
        r('a', 30, 2),   // due 32 again; watermark 29 fires b@25
        r('b', 40, 100), // due 140; watermark 39 fires a@32, and the end b@140
    ];
    let expected = vec![
        Wm(-1),
        Wm(4),
        Wm(6),
        Rec(10, ('a', 2)),
        Rec(10, ('b', 1)),
        Wm(11),
        Wm(19),
        Rec(25, ('b', 1)),
        Wm(29),
        Rec(32, ('a', 2)),
        Wm(39),
        Rec(140, ('b', 1)),
        Wm(i64::MAX),
        End,
    ];
    for shards in [1, 2] {
        check(&run(shards, &input, || Reminders), &expected, |o| o.0);
    }
}

#[test]
fn a_timer_set_in_the_past_fires_with_the_next_watermark() {
    // After c@20 the watermark is 19; d@21 asks for 15, which fires when 20 comes. c's
    // timers (31 and 120) wait for the end.
    let input = [r('c', 20, 100), r('d', 21, -6), r('c', 30, 1)];
    let expected =
        vec![Wm(19), Rec(15, ('d', 1)), Wm(20), Wm(29), Rec(31, ('c', 1)), Rec(120, ('c', 1)), Wm(i64::MAX), End];
    assert_eq!(run(1, &input, || Reminders)[0], expected);
    // At 2 shards only the records are fixed: d's may come after a later watermark.
    for (shard, trace) in run(2, &input, || Reminders).iter().enumerate() {
        let mine: Vec<_> = records(&expected).into_iter().filter(|(_, o)| owner(o.0, 2) == shard).collect();
        let mut got = records(trace);
        got.sort_by_key(|(t, _)| *t);
        assert_eq!(got, mine);
    }
}

/// `v > 0` arms a timer `v` ms later (replacing the armed one), `v == 0` disarms it; a
/// timer reports the key and when it was armed.
struct Alarm;

impl KeyedProcessFunction<char, In> for Alarm {
    type State = ValueState<(i64, i64)>;
    type Out = (char, &'static str, i64);
    fn process_element(&mut self, key: &char, e: Event<In>, armed: &mut Self::State, ctx: &mut Ctx<'_, Self::Out>) {
        if let Some((due, _)) = armed.take() {
            assert!(ctx.delete_event_time_timer(EventTime::from_millis(due)));
            assert!(!ctx.delete_event_time_timer(EventTime::from_millis(due)), "deleted once");
            ctx.emit((*key, "disarmed", due));
        }
        if e.value.v > 0 {
            let due = e.value.time + e.value.v;
            armed.set((due, e.value.time));
            ctx.register_event_time_timer(EventTime::from_millis(due));
        }
    }
    fn on_timer(&mut self, key: &char, _: Timer, armed: &mut Self::State, ctx: &mut Ctx<'_, Self::Out>) {
        let (_, at) = armed.take().expect("an armed alarm");
        ctx.emit((*key, "rang", at));
    }
}

#[test]
fn a_deleted_event_time_timer_does_not_fire() {
    let input = [
        r('a', 0, 10), // a due 10
        r('b', 1, 10), // b due 11
        r('a', 5, 0),  // a disarmed
        r('c', 6, 3),  // c due 9
        r('a', 7, 20), // a due 27
        r('b', 8, 30), // b moved to 38
    ];
    let expected = vec![
        Wm(-1),
        Wm(0),
        Rec(5, ('a', "disarmed", 10)),
        Wm(4),
        Wm(5),
        Wm(6),
        Rec(8, ('b', "disarmed", 11)),
        Wm(7),
        Rec(9, ('c', "rang", 6)),
        Rec(27, ('a', "rang", 7)),
        Rec(38, ('b', "rang", 8)),
        Wm(i64::MAX),
        End,
    ];
    for shards in [1, 2] {
        check(&run(shards, &input, || Alarm), &expected, |o| o.0);
    }
}

// ---------------------------------------------------------------------------------------
// Processing-time timers.

/// The processing-time test's input: a key and a delay.
#[derive(Debug, Clone, Copy, rkyv::Archive, rkyv::Serialize, rkyv::Deserialize)]
struct WallIn(char, i64);
sluice_engine::rkyv_data!(WallIn);

/// `v > 0` sets a processing-time timer `v` ms from now (replacing the one set), `v == 0`
/// deletes it; a timer reports its time and when it fired.
struct WallAlarms;

impl KeyedProcessFunction<char, WallIn> for WallAlarms {
    type State = ValueState<EventTime>;
    type Out = (char, i64, i64);
    fn process_element(&mut self, _: &char, e: Event<WallIn>, set: &mut Self::State, ctx: &mut Ctx<'_, Self::Out>) {
        if let Some(at) = set.take() {
            assert!(ctx.delete_processing_time_timer(at));
        }
        if e.value.1 > 0 {
            let at = EventTime::from_millis(ctx.current_processing_time().millis() + e.value.1);
            ctx.register_processing_time_timer(at);
            set.set(at);
        }
    }
    fn on_timer(&mut self, key: &char, timer: Timer, set: &mut Self::State, ctx: &mut Ctx<'_, Self::Out>) {
        assert_eq!(timer.domain, TimeDomain::ProcessingTime);
        assert_eq!(set.take(), Some(timer.time));
        ctx.emit((*key, timer.time.millis(), ctx.current_processing_time().millis()));
    }
}

#[test]
fn processing_time_timers_fire_on_the_wall_clock_and_deleted_ones_do_not() {
    for shards in [1, 2] {
        let (tx, rx) = async_channel::unbounded::<WallIn>();
        let (out_tx, out_rx) = mpsc::channel::<Event<(char, i64, i64)>>();
        let out_tx = Arc::new(Mutex::new(out_tx));
        let running = Pipeline::new(PipelineConfig::with_shards(shards))
            .spawn(move |scope| {
                let out = out_tx.clone();
                // Read on shard 0 only, so b's two records reach b's shard in order.
                let source = if scope.shard() == 0 { vec![rx.clone()] } else { Vec::new() };
                scope
                    .source(ChannelSource::splits(source), WatermarkStrategy::processing_time())
                    .key_by(|e: &WallIn| e.0)
                    .process(WallAlarms)
                    .for_each(move |e| out.lock().unwrap().send(e).unwrap());
            })
            .unwrap();
        let sent_at = EventTime::now().millis();
        let started = Instant::now();
        tx.send_blocking(WallIn('a', 50)).unwrap();
        tx.send_blocking(WallIn('b', 100)).unwrap();
        tx.send_blocking(WallIn('b', 0)).unwrap();
        let fired = out_rx.recv_timeout(Duration::from_secs(5)).expect("a's timer fires");
        let elapsed = started.elapsed();
        let (key, at, fired_at) = fired.value;
        assert_eq!(key, 'a');
        assert_eq!(fired.time.millis(), at, "a timer's output carries its time");
        assert!(at >= sent_at + 50, "the timer is 50 ms after a was processed");
        assert!(fired_at >= at, "not before its time");
        // (49: the wall clock is read in whole milliseconds.)
        assert!(elapsed >= Duration::from_millis(49), "fired after {elapsed:?}");
        // 50 ms, plus a tick (10 ms) and scheduling; far less than a second on any machine.
        assert!(elapsed < Duration::from_secs(1), "{shards} shards: fired after {elapsed:?}");
        // b's deleted timer (due 100 ms after it was set) must not fire.
        std::thread::sleep(Duration::from_millis(250));
        assert!(out_rx.try_recv().is_err(), "a deleted timer fired");
        tx.close();
        running.join().unwrap();
        assert!(out_rx.try_recv().is_err());
    }
}

// ---------------------------------------------------------------------------------------
// Forgetting empty keys.

thread_local! {
    /// States alive on this shard's thread.
    static LIVE: Cell<i64> = const { Cell::new(0) };
}

/// A value state that counts its instances on the thread it lives on.
struct Tracked(ValueState<i64>);

impl Default for Tracked {
    fn default() -> Self {
        LIVE.with(|l| l.set(l.get() + 1));
        Tracked(ValueState::default())
    }
}

impl Drop for Tracked {
    fn drop(&mut self) {
        LIVE.with(|l| l.set(l.get() - 1));
    }
}

/// Checkpointed as its one field.
impl Data for Tracked {
    fn encode(&self, out: &mut Vec<u8>) {
        self.0.encode(out);
    }
    fn decode(input: &mut &[u8]) -> Result<Self, StateError> {
        ValueState::decode(input).map(Tracked)
    }
}

impl KeyedState for Tracked {
    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// `v > 0` opens a key (sets its state), `v == 0` closes it (clears it); each record
/// reports how many states its shard holds at that moment, its own included.
struct OpenClose;

impl KeyedProcessFunction<char, In> for OpenClose {
    type State = Tracked;
    type Out = (char, i64);
    fn process_element(&mut self, key: &char, e: Event<In>, state: &mut Tracked, ctx: &mut Ctx<'_, Self::Out>) {
        if e.value.v > 0 {
            state.0.set(e.value.v);
        } else {
            state.0.clear();
        }
        ctx.emit((*key, LIVE.with(Cell::get)));
    }
}

#[test]
fn a_key_whose_state_is_empty_again_is_forgotten() {
    const KEYS: [char; 8] = ['0', '1', '2', '3', '4', '5', '6', '7'];
    // Each key opened and closed in turn, four rounds: one state alive at a time.
    let input: Vec<In> = (0..64).map(|i| r(KEYS[(i / 2) % 8], i as i64, if i % 2 == 0 { 1 } else { 0 })).collect();
    for shards in [1, 2] {
        let seen = run(shards, &input, || OpenClose);
        let reports: Vec<_> = seen.iter().flat_map(|trace| records(trace)).collect();
        assert_eq!(reports.len(), 64);
        assert!(reports.iter().all(|(_, (_, live))| *live == 1), "{shards} shards: {reports:?}");
    }
    // Opened and never closed, the keys pile up: the count above is not vacuous.
    let input: Vec<In> = (0..8).map(|i| r(KEYS[i], i as i64, 1)).collect();
    let seen = run(1, &input, || OpenClose);
    let lives: Vec<i64> = records(&seen[0]).iter().map(|(_, (_, live))| *live).collect();
    assert_eq!(lives, (1..=8).collect::<Vec<i64>>());
}

// ---------------------------------------------------------------------------------------
// Fraud detection, as in the example.

const SMALL_CENTS: i64 = 100;
const LARGE_CENTS: i64 = 50_000;
const ONE_MINUTE_MS: i64 = 60_000;

/// Flags a key (an account) when a transaction under 1.00 is followed by one over 500.00
/// within a minute; the flag's deadline is value state, and a timer at the deadline
/// clears it.
struct FraudDetector;

impl KeyedProcessFunction<char, In> for FraudDetector {
    type State = ValueState<EventTime>;
    type Out = (char, i64);
    fn process_element(&mut self, account: &char, tx: Event<In>, flag: &mut Self::State, ctx: &mut Ctx<'_, Self::Out>) {
        if let Some(until) = flag.take() {
            ctx.delete_event_time_timer(until);
            if tx.value.v > LARGE_CENTS && tx.time <= until {
                ctx.emit((*account, tx.value.v));
            }
        }
        if tx.value.v < SMALL_CENTS {
            let until = EventTime::from_millis(tx.time.millis() + ONE_MINUTE_MS);
            flag.set(until);
            ctx.register_event_time_timer(until);
        }
    }
    fn on_timer(&mut self, _: &char, _: Timer, flag: &mut Self::State, _: &mut Ctx<'_, Self::Out>) {
        flag.clear();
    }
}

#[test]
fn fraud_detection_flags_a_small_then_a_large_transaction_within_a_minute() {
    let s = 1000;
    let input = [
        r('1', 0, 50),                // small
        r('2', 0, 50),                // small
        r('5', 0, 1),                 // small
        r('6', 0, 99),                // small
        r('7', s, 50),                // small
        r('7', 2 * s, 20),            // small again: the minute restarts
        r('4', 5 * s, 100),           // exactly 1.00: not small
        r('4', 6 * s, 50_001),        // large, but nothing small before
        r('3', 10 * s, 99),           // small
        r('8', 12 * s, 10),           // small
        r('3', 20 * s, 1000),         // neither: clears the flag
        r('3', 25 * s, 70_000),       // large, but the flag is gone
        r('8', 13 * s, 50_000),       // exactly 500.00: not large
        r('1', 30 * s, 60_000),       // large within a minute: ALERT
        r('1', 40 * s, 90_000),       // large again, the flag was cleared by the alert
        r('5', 60 * s, 50_001),       // large exactly one minute later: ALERT
        r('6', 60 * s + 1, 80_000),   // one minute and 1 ms: the timer cleared the flag
        r('7', 61 * s + 500, 60_000), // 59.5 s after the second small: ALERT
        r('2', 90 * s, 60_000),       // large, 90 s later: no
    ];
    let mut sorted = input.to_vec();
    sorted.sort_by_key(|e| e.time);
    let alerts = [(30 * s, ('1', 60_000)), (60 * s, ('5', 50_001)), (61 * s + 500, ('7', 60_000))];
    for shards in [1, 2] {
        let seen = run(shards, &sorted, || FraudDetector);
        let mut got: Vec<_> = seen.iter().flat_map(|trace| records(trace)).collect();
        got.sort();
        assert_eq!(got, alerts, "{shards} shards");
        // The same alerts when the whole input is one batch and the watermark comes last.
        let seen = run_with(PipelineConfig::with_shards(shards), &sorted, || FraudDetector);
        let mut got: Vec<_> = seen.iter().flat_map(|trace| records(trace)).collect();
        got.sort();
        assert_eq!(got, alerts, "{shards} shards, one batch");
    }
}
