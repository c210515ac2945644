//! Window semantics end to end, on real pipelines (pinned executors, rings between shards).
//!
//! - The textbook case: clicks per minute, out of order, then one late click, under each
//!   late policy.
//! - Early firings and the global window with a count trigger.
//!
//! The randomized equivalence against a reference lives in `dataflow_random.rs`.

use std::{
    sync::{Arc, Mutex, mpsc},
    time::Duration,
};

use sluice_engine::dataflow::checkpoint::StateError;
use sluice_engine::dataflow::{
    ChannelSource, CountTrigger, Data, Firing, Generator, LatePolicy, Pipeline, PipelineConfig, WatermarkStrategy,
    WindowResult, Windows, key_group, shard_of_group,
};
use sluice_io::EventTime;

#[derive(Debug, Clone)]
struct Click {
    page: &'static str,
    time: EventTime,
}

/// Records crossing a `key_by` are checkpoint `Data`. The page is written as its text and
/// read back leaked: test pages are a handful of literals.
impl Data for Click {
    fn encode(&self, out: &mut Vec<u8>) {
        self.page.to_string().encode(out);
        self.time.encode(out);
    }
    fn decode(input: &mut &[u8]) -> Result<Self, StateError> {
        let page: &'static str = Box::leak(String::decode(input)?.into_boxed_str());
        Ok(Click { page, time: EventTime::decode(input)? })
    }
}

/// 14:00 on an arbitrary day, in ms.
const T14: i64 = 1_700_000_000_000 / 3_600_000 * 3_600_000 + 14 * 3_600_000;

fn at(minute: i64, second: i64) -> EventTime {
    EventTime::from_millis(T14 + minute * 60_000 + second * 1000)
}

#[derive(Debug)]
enum Out {
    Result(WindowResult<String, u64>),
    Late(EventTime),
}

/// Runs clicks per minute with `policy` on `shards` shards and returns everything emitted
/// and the late-dropped count.
fn clicks_per_minute(policy: LatePolicy, shards: usize) -> (Vec<Out>, u64) {
    let (tx, rx) = async_channel::unbounded::<Click>();
    let (out_tx, out_rx) = mpsc::channel::<Out>();
    let out_tx = Arc::new(Mutex::new(out_tx));
    let running = Pipeline::new(PipelineConfig::with_shards(shards))
        .spawn(move |scope| {
            let strategy = WatermarkStrategy::bounded_out_of_orderness(Duration::from_secs(10), |c: &Click| c.time)
                .with_idle_timeout(Duration::from_millis(50));
            let mut windowed = scope
                .source(ChannelSource::new(rx.clone()), strategy)
                .key_by(|c| c.page.to_string())
                .window(Windows::tumbling(Duration::from_secs(60)))
                .allowed_lateness(Duration::from_secs(300))
                .late_policy(policy);
            if policy == LatePolicy::SideOutput {
                let late = out_tx.clone();
                windowed.late_stream().for_each(move |e| late.lock().unwrap().send(Out::Late(e.value.time)).unwrap());
            }
            let results = out_tx.clone();
            windowed.count().for_each(move |e| results.lock().unwrap().send(Out::Result(e.value)).unwrap());
        })
        .unwrap();
    let send = |second: i64| tx.send_blocking(Click { page: "home", time: at(0, second) }).unwrap();
    // Three clicks in 14:00-14:01, the third (14:00:40) arriving before the second (14:00:20).
    send(10);
    send(40);
    send(20);
    // A click at 14:01:30 moves the watermark (10 s bound) past 14:01.
    tx.send_blocking(Click { page: "home", time: at(1, 30) }).unwrap();
    let first = out_rx.recv_timeout(Duration::from_secs(10)).expect("the 14:00 window fires");
    // Then a click stamped 14:00:45 arrives late.
    send(45);
    if policy != LatePolicy::Drop {
        // Wait for its effect before ending, so the end of input cannot overtake it.
        let second = out_rx.recv_timeout(Duration::from_secs(10)).expect("the late click has an effect");
        tx.close();
        running.join().unwrap();
        let mut all = vec![first, second];
        all.extend(out_rx.try_iter());
        return (all, 0);
    }
    // Under Drop nothing is emitted for it: wait until it has been counted.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while running.metrics().late_dropped() == 0 {
        assert!(std::time::Instant::now() < deadline, "the late click is never counted");
        std::thread::sleep(Duration::from_millis(5));
    }
    let dropped = running.metrics().late_dropped();
    tx.close();
    running.join().unwrap();
    let mut all = vec![first];
    all.extend(out_rx.try_iter());
    (all, dropped)
}

fn minute(m: i64) -> sluice_engine::dataflow::Window {
    sluice_engine::dataflow::Window { start: at(m, 0), end: at(m + 1, 0) }
}

fn result(m: i64, value: u64, firing: Firing) -> String {
    format!("{:?}", WindowResult { key: "home", window: minute(m), value, firing })
}

fn render(outs: &[Out]) -> Vec<String> {
    outs.iter()
        .map(|o| match o {
            Out::Result(r) => format!("{r:?}"),
            Out::Late(t) => format!("late {}", t.millis()),
        })
        .collect()
}

#[test]
fn textbook_drop_keeps_three_and_counts_the_late_click() {
    for shards in [1, 2] {
        let (outs, dropped) = clicks_per_minute(LatePolicy::Drop, shards);
        assert_eq!(render(&outs), vec![result(0, 3, Firing::OnTime), result(1, 1, Firing::OnTime)], "{shards} shards");
        assert_eq!(dropped, 1, "{shards} shards");
    }
}

#[test]
fn textbook_update_emits_four_as_an_update() {
    for shards in [1, 2] {
        let (outs, _) = clicks_per_minute(LatePolicy::Update, shards);
        assert_eq!(
            render(&outs),
            vec![result(0, 3, Firing::OnTime), result(0, 4, Firing::Update), result(1, 1, Firing::OnTime)],
            "{shards} shards"
        );
    }
}

#[test]
fn textbook_side_output_delivers_the_late_click() {
    for shards in [1, 2] {
        let (outs, _) = clicks_per_minute(LatePolicy::SideOutput, shards);
        assert_eq!(
            render(&outs),
            vec![result(0, 3, Firing::OnTime), format!("late {}", at(0, 45).millis()), result(1, 1, Firing::OnTime)],
            "{shards} shards"
        );
    }
}

#[test]
fn early_firings_preview_an_open_window() {
    let (tx, rx) = async_channel::unbounded::<Click>();
    let results = Arc::new(Mutex::new(Vec::new()));
    let sink = results.clone();
    let running = Pipeline::new(PipelineConfig::with_shards(1))
        .spawn(move |scope| {
            let sink = sink.clone();
            scope
                .source(
                    ChannelSource::new(rx.clone()),
                    WatermarkStrategy::bounded_out_of_orderness(Duration::from_secs(10), |c: &Click| c.time),
                )
                .key_by(|c| c.page.to_string())
                .window(Windows::tumbling(Duration::from_secs(60)))
                .early_firing(Duration::from_millis(5))
                .count()
                .for_each(move |e| sink.lock().unwrap().push(e.value));
        })
        .unwrap();
    tx.send_blocking(Click { page: "home", time: at(0, 1) }).unwrap();
    tx.send_blocking(Click { page: "home", time: at(0, 2) }).unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !results.lock().unwrap().iter().any(|r| r.firing == Firing::Early && r.value == 2) {
        assert!(std::time::Instant::now() < deadline, "no early firing of the open window");
        std::thread::sleep(Duration::from_millis(2));
    }
    tx.close();
    running.join().unwrap();
    let results = results.lock().unwrap();
    let on_time: Vec<_> = results.iter().filter(|r| r.firing == Firing::OnTime).collect();
    assert_eq!(on_time.len(), 1);
    assert_eq!(on_time[0].value, 2);
    assert!(results.iter().all(|r| r.window == minute(0) && r.value <= 2));
}

#[test]
fn global_window_fires_on_its_trigger() {
    let results = Arc::new(Mutex::new(Vec::new()));
    let sink = results.clone();
    Pipeline::new(PipelineConfig::with_shards(2))
        .run(move |scope| {
            let sink = sink.clone();
            scope
                .source(
                    Generator::new(scope.shard(), scope.shards(), 100, |i| i),
                    WatermarkStrategy::monotonous(|i: &u64| EventTime::from_millis(*i as i64)),
                )
                .key_by(|i| i % 3)
                .window(Windows::global())
                .trigger(CountTrigger(10))
                .reduce(|a, b| a + b)
                .for_each(move |e| sink.lock().unwrap().push((e.value.key, e.value.value)));
        })
        .unwrap();
    let mut results = results.lock().unwrap().clone();
    results.sort_unstable();
    // Key k has the i < 100 with i % 3 == k: 34, 33 and 33 of them, so 3 full batches of
    // ten each; the last few never fire (a global window fires only on its trigger).
    assert_eq!(results.len(), 9);
    for k in 0..3u64 {
        let sums: Vec<u64> = results.iter().filter(|r| r.0 == k).map(|r| r.1).collect();
        assert_eq!(sums.len(), 3);
        // Each batch of ten is some ten of the key's values; together the first thirty.
        let total: u64 = sums.iter().sum();
        let values: Vec<u64> = (0..100).filter(|i| i % 3 == k).collect();
        assert!(total >= values[..30].iter().sum::<u64>() && total <= values[values.len() - 30..].iter().sum::<u64>());
    }
}

/// One source with two splits (partitions); only the first ever gets records.
fn one_silent_split(
    idle_timeout: Option<Duration>,
    shards: usize,
) -> (std::time::Duration, Vec<WindowResult<String, u64>>) {
    let (busy_tx, busy_rx) = async_channel::unbounded::<Click>();
    let (silent_tx, silent_rx) = async_channel::unbounded::<Click>();
    let (out_tx, out_rx) = mpsc::channel();
    let out_tx = Arc::new(Mutex::new(out_tx));
    let running = Pipeline::new(PipelineConfig::with_shards(shards))
        .spawn(move |scope| {
            let mut strategy = WatermarkStrategy::bounded_out_of_orderness(Duration::from_secs(1), |c: &Click| c.time);
            if let Some(timeout) = idle_timeout {
                strategy = strategy.with_idle_timeout(timeout);
            }
            let sink = out_tx.clone();
            scope
                .source(ChannelSource::splits(vec![busy_rx.clone(), silent_rx.clone()]), strategy)
                .key_by(|c| c.page.to_string())
                .window(Windows::tumbling(Duration::from_secs(60)))
                .count()
                .for_each(move |e| sink.lock().unwrap().send(e.value).unwrap());
        })
        .unwrap();
    let started = std::time::Instant::now();
    for second in [5, 15, 25] {
        busy_tx.send_blocking(Click { page: "home", time: at(0, second) }).unwrap();
    }
    // Past the window's end on the busy split.
    busy_tx.send_blocking(Click { page: "home", time: at(1, 30) }).unwrap();
    let first = out_rx.recv_timeout(Duration::from_millis(1500));
    let waited = started.elapsed();
    drop((busy_tx, silent_tx));
    running.join().unwrap();
    let mut results: Vec<_> = first.into_iter().collect();
    results.extend(out_rx.try_iter());
    (waited, results)
}

#[test]
fn a_silent_partition_stops_holding_results_back_after_its_idle_timeout() {
    for shards in [1, 2] {
        let (waited, results) = one_silent_split(Some(Duration::from_millis(100)), shards);
        assert!(
            waited < Duration::from_millis(1500),
            "{shards} shards: the 14:00 window fired while the input was open"
        );
        assert_eq!(results[0].window, minute(0), "{shards} shards");
        assert_eq!(results[0].value, 3, "{shards} shards");
    }
    // The control: without an idle timeout the silent split holds the watermark at its
    // start, and the window fires only when the input ends.
    let (waited, results) = one_silent_split(None, 1);
    assert!(waited >= Duration::from_millis(1500), "fired with a silent partition and no idle timeout");
    assert_eq!(results.iter().map(|r| (r.window, r.value)).collect::<Vec<_>>(), vec![(minute(0), 3), (minute(1), 1)]);
}

/// Two shards whose sources never run dry, each making records only for a key it owns:
/// no record crosses, so shard 1 learns shard 0's watermark only as the exchange sends
/// it, which a busy shard does at least every `watermark_interval`. Shard 1's first
/// window fires while both sources are still running.
#[test]
fn a_busy_shard_sends_its_watermark_at_least_every_interval() {
    let groups = PipelineConfig::DEFAULT_KEY_GROUPS;
    let owned_by =
        |shard: usize| (0..).find(|k: &u64| shard_of_group(key_group(k, groups), groups, 2) == shard).unwrap();
    let keys = [owned_by(0), owned_by(1)];
    for interval in [Duration::ZERO, Duration::from_millis(1), Duration::from_millis(200)] {
        let (out_tx, out_rx) = mpsc::channel();
        let out_tx = Arc::new(Mutex::new(out_tx));
        let config = PipelineConfig { watermark_interval: interval, ..PipelineConfig::with_shards(2) };
        let running = Pipeline::new(config)
            .spawn(move |scope| {
                let sink = out_tx.clone();
                // Shard s makes the i with i % 2 == s, each for key `keys[s]`; 10 000 per
                // second of event time.
                let strategy = WatermarkStrategy::bounded_out_of_orderness(Duration::ZERO, |&(_, i): &(u64, u64)| {
                    EventTime::from_millis((i / 10) as i64)
                });
                scope
                    .source(
                        Generator::new(scope.shard(), scope.shards(), u64::MAX, move |i| (keys[(i % 2) as usize], i)),
                        strategy,
                    )
                    .key_by(|&(key, _)| key)
                    .window(Windows::tumbling(Duration::from_secs(1)))
                    .count()
                    .for_each(move |e| sink.lock().unwrap().send(e.value).unwrap());
            })
            .unwrap();
        let fired = std::iter::from_fn(|| out_rx.recv_timeout(Duration::from_secs(60)).ok())
            .find(|result: &WindowResult<u64, u64>| result.key == keys[1]);
        let running_still = !running.is_finished();
        running.stop(false);
        running.join().unwrap();
        let fired = fired.unwrap_or_else(|| panic!("interval {interval:?}: shard 1's window never fired"));
        assert!(running_still, "interval {interval:?}");
        assert_eq!((fired.window.start, fired.value), (EventTime::from_millis(0), 5_000), "interval {interval:?}");
    }
}
