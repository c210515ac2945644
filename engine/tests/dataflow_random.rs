//! Randomized equivalence: random keyed events with bounded disorder through tumbling,
//! sliding and session windows under each late policy, at 1, 2 and 4 shards, against a
//! plain reference computation.
//!
//! Two phases per seed:
//! - **Bounded disorder only** (disorder within the watermark bound): nothing is late, so
//!   every policy must produce exactly the reference's windows and counts.
//! - **With very late events** (some events far behind the watermark): whether such an
//!   event is late depends on how far the watermark has got when it arrives, which depends
//!   on the shards' relative speed, so the checks are the invariants each policy promises
//!   whatever the timing: with `Update` (ample lateness) the last result of every window
//!   equals the reference; with `SideOutput` a tumbling window's result plus its late
//!   events equals the reference; with `Drop` no window exceeds the reference and the
//!   dropped count makes up the difference.
//!
//! Every run prints `SEED=<n>`; `SEED=<n> cargo test -p sluice-engine --test
//! dataflow_random` replays it.

use std::{
    collections::{BTreeMap, HashMap},
    sync::{Arc, Mutex},
    time::Duration,
};

use sluice_engine::dataflow::{
    CheckpointConfig, Firing, Generator, LatePolicy, Pipeline, PipelineConfig, WatermarkStrategy, Window, WindowResult,
    Windows,
};
use sluice_io::EventTime;

mod common;
use common::Rng;

const KEYS: u64 = 7;
const DISORDER_MS: i64 = 20;

#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, rkyv::Archive, rkyv::Serialize, rkyv::Deserialize,
)]
struct Ev {
    key: u64,
    time: i64,
}
sluice_engine::rkyv_data!(Ev);

/// Events in arrival order: a clock advancing 0-2 ms per event, each event up to
/// `DISORDER_MS` behind it; with `very_late`, about one in 50 is 500 ms behind instead.
fn events(rng: &mut Rng, n: usize, very_late: bool) -> Vec<Ev> {
    let mut clock = 1_000i64;
    (0..n)
        .map(|_| {
            clock += rng.below(3) as i64;
            let behind = if very_late && rng.below(50) == 0 { 500 } else { rng.below(DISORDER_MS as u64 + 1) as i64 };
            Ev { key: rng.below(KEYS), time: clock - behind }
        })
        .collect()
}

/// The reference: every (key, window) and its count, computed from all events.
fn reference(events: &[Ev], windows: Windows) -> BTreeMap<(u64, Window), u64> {
    let mut out = BTreeMap::new();
    match windows {
        Windows::Session { gap } => {
            let mut by_key: HashMap<u64, Vec<i64>> = HashMap::new();
            for e in events {
                by_key.entry(e.key).or_default().push(e.time);
            }
            for (key, mut times) in by_key {
                times.sort_unstable();
                let (mut start, mut end, mut count) = (times[0], times[0] + gap, 0u64);
                for t in times {
                    // Closer than the gap joins; exactly a gap after starts a new session.
                    if t >= end {
                        out.insert((key, window(start, end)), count);
                        (start, count) = (t, 0);
                    }
                    end = end.max(t + gap);
                    count += 1;
                }
                out.insert((key, window(start, end)), count);
            }
        }
        _ => {
            for e in events {
                windows.assign(EventTime::from_millis(e.time), |w| *out.entry((e.key, w)).or_insert(0) += 1);
            }
        }
    }
    out
}

fn window(start: i64, end: i64) -> Window {
    Window { start: EventTime::from_millis(start), end: EventTime::from_millis(end) }
}

struct Run {
    results: Vec<WindowResult<u64, u64>>,
    late: Vec<Ev>,
    dropped: u64,
}

fn run_pipeline(events: &Arc<Vec<Ev>>, windows: Windows, policy: LatePolicy, shards: usize) -> Run {
    let results = Arc::new(Mutex::new(Vec::new()));
    let late = Arc::new(Mutex::new(Vec::new()));
    let (sink, late_sink, input) = (results.clone(), late.clone(), events.clone());
    let mut config = PipelineConfig::with_shards(shards);
    // Small batches, so watermarks interleave with the data as they would in a stream.
    config.batch_records = 16;
    let running = Pipeline::new(config)
        .spawn(move |scope| {
            let input = input.clone();
            let n = input.len() as u64;
            let strategy =
                WatermarkStrategy::bounded_out_of_orderness(Duration::from_millis(DISORDER_MS as u64), |e: &Ev| {
                    EventTime::from_millis(e.time)
                });
            let mut windowed = scope
                .source(Generator::new(scope.shard(), scope.shards(), n, move |i| input[i as usize]), strategy)
                .key_by(|e| e.key)
                .window(windows)
                .allowed_lateness(Duration::from_secs(3600))
                .late_policy(policy);
            if policy == LatePolicy::SideOutput {
                let late_sink = late_sink.clone();
                windowed.late_stream().for_each(move |e| late_sink.lock().unwrap().push(e.value));
            }
            let sink = sink.clone();
            windowed.count().for_each(move |e| sink.lock().unwrap().push(e.value));
        })
        .unwrap();
    let metrics = running.metrics();
    running.join().unwrap();
    let dropped = metrics.late_dropped();
    let results = std::mem::take(&mut *results.lock().unwrap());
    let late = std::mem::take(&mut *late.lock().unwrap());
    Run { results, late, dropped }
}

/// The last result emitted for each (key, window).
fn last_results(results: &[WindowResult<u64, u64>]) -> BTreeMap<(u64, Window), u64> {
    let mut out = BTreeMap::new();
    for r in results {
        out.insert((r.key, r.window), r.value);
    }
    out
}

fn seed() -> u64 {
    common::seed_from_env()
}

const WINDOWS: [Windows; 3] =
    [Windows::Tumbling { size: 50, offset: 0 }, Windows::Sliding { size: 60, slide: 20 }, Windows::Session { gap: 4 }];
const POLICIES: [LatePolicy; 3] = [LatePolicy::Drop, LatePolicy::Update, LatePolicy::SideOutput];

#[test]
fn bounded_disorder_equals_the_reference_for_every_window_policy_and_shard_count() {
    let seed = seed();
    let mut rng = Rng::seeded(seed);
    let events = Arc::new(events(&mut rng, 3000, false));
    for windows in WINDOWS {
        let expected = reference(&events, windows);
        for policy in POLICIES {
            for shards in [1, 2, 4] {
                let ctx = format!("SEED={seed} {windows:?} {policy:?} {shards} shards");
                let run = run_pipeline(&events, windows, policy, shards);
                assert!(run.results.iter().all(|r| r.firing == Firing::OnTime), "{ctx}: nothing is late");
                assert_eq!(run.results.len(), expected.len(), "{ctx}: one result per window");
                assert_eq!(last_results(&run.results), expected, "{ctx}");
                assert!(run.late.is_empty(), "{ctx}");
            }
        }
    }
}

#[test]
fn very_late_events_keep_each_policys_promise() {
    let seed = seed();
    let mut rng = Rng::seeded(seed ^ 0x5EED);
    let events = Arc::new(events(&mut rng, 3000, true));
    for windows in WINDOWS {
        let expected = reference(&events, windows);
        for shards in [1, 2, 4] {
            let ctx = |p: LatePolicy| format!("SEED={seed} {windows:?} {p:?} {shards} shards");

            // Update, with an hour of lateness: every window ends at its full count.
            let run = run_pipeline(&events, windows, LatePolicy::Update, shards);
            let last = last_results(&run.results);
            if matches!(windows, Windows::Session { .. }) {
                // Sessions a late event merged have results superseded by the merged
                // window's: each reference session's last result is exact, and every
                // emitted window lies within a reference session of its key.
                for (kw, count) in &expected {
                    assert_eq!(last.get(kw), Some(count), "{}: session {kw:?}", ctx(LatePolicy::Update));
                }
                for (key, w) in last.keys() {
                    assert!(
                        expected.keys().any(|(k, r)| k == key && r.start <= w.start && w.end <= r.end),
                        "{}: {w:?} of key {key} is in no reference session",
                        ctx(LatePolicy::Update)
                    );
                }
            } else {
                assert_eq!(last, expected, "{}", ctx(LatePolicy::Update));
            }
            assert_eq!(run.dropped, 0, "{}", ctx(LatePolicy::Update));
            if shards == 1 {
                // One shard sees its own watermark at once: the very late events are late.
                assert!(run.results.iter().any(|r| r.firing == Firing::Update), "{}", ctx(LatePolicy::Update));
            }

            if matches!(windows, Windows::Session { .. }) {
                // A dropped late event may have bridged sessions, so only totals compare.
                for policy in [LatePolicy::Drop, LatePolicy::SideOutput] {
                    let run = run_pipeline(&events, windows, policy, shards);
                    let emitted: u64 = run.results.iter().map(|r| r.value).sum();
                    let set_aside = run.late.len() as u64 + run.dropped;
                    assert_eq!(emitted + set_aside, events.len() as u64, "{}", ctx(policy));
                }
                continue;
            }

            // Drop: nothing over the reference, and the dropped count covers the gap
            // (exactly so for tumbling windows, where an event is in one window).
            let run = run_pipeline(&events, windows, LatePolicy::Drop, shards);
            let last = last_results(&run.results);
            for (kw, count) in &last {
                assert!(count <= expected.get(kw).unwrap_or(&0), "{}: {kw:?}", ctx(LatePolicy::Drop));
            }
            if shards == 1 {
                assert!(run.dropped > 0, "{}: the late path ran", ctx(LatePolicy::Drop));
            }
            if matches!(windows, Windows::Tumbling { .. }) {
                let missing: u64 = expected.iter().map(|(kw, c)| c - last.get(kw).unwrap_or(&0)).sum();
                assert_eq!(missing, run.dropped, "{}", ctx(LatePolicy::Drop));
            }

            // SideOutput: result plus late events per window equals the reference.
            let run = run_pipeline(&events, windows, LatePolicy::SideOutput, shards);
            if shards == 1 {
                assert!(!run.late.is_empty(), "{}: the late path ran", ctx(LatePolicy::SideOutput));
            }
            let mut total = last_results(&run.results);
            for (kw, count) in &total {
                assert!(count <= expected.get(kw).unwrap_or(&0), "{}: {kw:?}", ctx(LatePolicy::SideOutput));
            }
            if matches!(windows, Windows::Tumbling { .. }) {
                for e in &run.late {
                    windows.assign(EventTime::from_millis(e.time), |w| *total.entry((e.key, w)).or_insert(0) += 1);
                }
                assert_eq!(total, expected, "{}", ctx(LatePolicy::SideOutput));
            }
        }
    }
}

/// The count through `combine_by` (partials per shard, merged by the key's owner) over
/// tumbling or sliding `windows`. With `checkpoints`, a checkpoint every 5 ms while the source takes about a
/// millisecond per 100 events (each barrier sends the open partials on before it passes);
/// the checkpoints completed come back with the run. `test` names the checkpoint directory:
/// the tests of this binary run at once, and two pipelines must not share one.
fn run_combined(test: &str, events: &Arc<Vec<Ev>>, windows: Windows, shards: usize, checkpoints: bool) -> (Run, usize) {
    let results = Arc::new(Mutex::new(Vec::new()));
    let (sink, input) = (results.clone(), events.clone());
    let mut config = PipelineConfig::with_shards(shards);
    config.batch_records = 16;
    let mut pipeline = Pipeline::new(config);
    let dir = checkpoints.then(|| common::data_dir("dataflow_random", &format!("{test}-{shards}")));
    if let Some(dir) = &dir {
        pipeline = pipeline.checkpointing(
            CheckpointConfig::new(AsRef::<std::path::Path>::as_ref(dir)).interval(Duration::from_millis(5)),
        );
    }
    let running = pipeline
        .spawn(move |scope| {
            let input = input.clone();
            let n = input.len() as u64;
            let strategy =
                WatermarkStrategy::bounded_out_of_orderness(Duration::from_millis(DISORDER_MS as u64), |e: &Ev| {
                    EventTime::from_millis(e.time)
                });
            let sink = sink.clone();
            let generator = Generator::new(scope.shard(), scope.shards(), n, move |i| {
                if checkpoints && i % 100 == 0 {
                    std::thread::sleep(Duration::from_millis(1));
                }
                input[i as usize]
            });
            let combining = scope.source(generator, strategy).combine_by(|e: &Ev| e.key);
            let ms = |ms: i64| Duration::from_millis(ms as u64);
            let windowed = match windows {
                Windows::Tumbling { size, .. } => combining.tumbling(ms(size)),
                Windows::Sliding { size, slide } => combining.sliding(ms(size), ms(slide)),
                _ => unreachable!("combine_by takes tumbling and sliding windows"),
            };
            windowed.count().for_each(move |e| sink.lock().unwrap().push(e.value));
        })
        .unwrap();
    let metrics = running.metrics();
    while !running.is_finished() {
        std::thread::sleep(Duration::from_millis(5));
    }
    let completed = running.checkpoints().len();
    running.join().unwrap();
    let dropped = metrics.late_dropped();
    let results = std::mem::take(&mut *results.lock().unwrap());
    (Run { results, late: Vec::new(), dropped }, completed)
}

#[test]
fn combine_by_equals_the_one_phase_tumbling_count() {
    let seed = seed();
    let mut rng = Rng::seeded(seed ^ 0xC0B1);
    // Bounded disorder: exactly the reference, one result per window; sliding windows
    // whose slide divides the size, and whose does not (panes of their gcd, 10 ms).
    let on_time = Arc::new(events(&mut rng, 3000, false));
    let cases = [
        Windows::Tumbling { size: 50, offset: 0 },
        Windows::Sliding { size: 60, slide: 20 },
        Windows::Sliding { size: 50, slide: 20 },
    ];
    for (windows, shards) in cases.iter().flat_map(|w| [1, 2, 4].map(|s| (*w, s))) {
        let expected = reference(&on_time, windows);
        let ctx = format!("SEED={seed} combine_by {windows:?} {shards} shards");
        let (run, _) = run_combined("combine-on-time", &on_time, windows, shards, false);
        assert!(run.results.iter().all(|r| r.firing == Firing::OnTime), "{ctx}: nothing is late");
        assert_eq!(run.results.len(), expected.len(), "{ctx}: one result per window");
        assert_eq!(last_results(&run.results), expected, "{ctx}");
        assert_eq!(run.dropped, 0, "{ctx}");
    }
    // Very late events are dropped, as by the one-phase window: no window over the
    // reference, and the dropped count is exactly what is missing.
    let windows = Windows::Tumbling { size: 50, offset: 0 };
    let late_events = Arc::new(self::events(&mut rng, 3000, true));
    let expected = reference(&late_events, windows);
    for shards in [1, 2] {
        let ctx = format!("SEED={seed} combine_by very late, {shards} shards");
        let (run, _) = run_combined("combine-late", &late_events, windows, shards, false);
        let last = last_results(&run.results);
        for (kw, count) in &last {
            assert!(count <= expected.get(kw).unwrap_or(&0), "{ctx}: {kw:?}");
        }
        let missing: u64 = expected.iter().map(|(kw, c)| c - last.get(kw).unwrap_or(&0)).sum();
        assert_eq!(missing, run.dropped, "{ctx}");
        if shards == 1 {
            assert!(run.dropped > 0, "{ctx}: the late path ran");
        }
    }
}

#[test]
fn combine_by_sends_its_partials_at_each_checkpoint_barrier_and_stays_exact() {
    let seed = seed();
    let mut rng = Rng::seeded(seed ^ 0xC0B2);
    let windows = Windows::Tumbling { size: 50, offset: 0 };
    let events = Arc::new(events(&mut rng, 20_000, false));
    let expected = reference(&events, windows);
    let (run, completed) = run_combined("combine-checkpoints", &events, windows, 2, true);
    let ctx = format!("SEED={seed} combine_by with checkpoints, 2 shards");
    // The last checkpoint is the one bounded inputs take at their end; the others were
    // taken while the partials were open.
    assert!(completed >= 2, "{ctx}: {completed} checkpoints completed, none during the run");
    assert_eq!(run.results.len(), expected.len(), "{ctx}: one result per window");
    assert_eq!(last_results(&run.results), expected, "{ctx}");
}

#[test]
fn combine_by_over_many_keys_crosses_in_pieces_and_stays_exact() {
    // Hundreds of keys per pane and shard against batches of 16: each pane's partials
    // leave as one long batch, which the exchange sends on in pieces of a batch per shard
    // (the other shards' parts first), with and without checkpoint barriers among them.
    let seed = seed();
    let mut rng = Rng::seeded(seed ^ 0xC0B3);
    let mut many = events(&mut rng, 6000, false);
    for e in &mut many {
        e.key = rng.below(3000);
    }
    let many = Arc::new(many);
    for windows in [Windows::Tumbling { size: 1000, offset: 0 }, Windows::Sliding { size: 1000, slide: 500 }] {
        let expected = reference(&many, windows);
        for (shards, checkpoints) in [(2, false), (4, false), (2, true)] {
            let ctx =
                format!("SEED={seed} combine_by, many keys, {windows:?}, {shards} shards, checkpoints {checkpoints}");
            let (run, _) = run_combined("combine-many-keys", &many, windows, shards, checkpoints);
            assert_eq!(run.results.len(), expected.len(), "{ctx}: one result per window");
            assert_eq!(last_results(&run.results), expected, "{ctx}");
        }
    }
}
