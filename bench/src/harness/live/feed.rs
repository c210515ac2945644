//! The live page's feed: what the run publishes, turned once a second into one update.
//!
//! Two things come in, neither on a record's path: the interval histograms a
//! [`LatencyRecorder`](crate::harness::LatencyRecorder) made `with_intervals` hands over
//! when its 1 s interval closes (once a second per recorder), and a workload's cumulative
//! count of records, read by the sampler (the same counter its progress line reads). The
//! sampler thread turns them, every second, into an update: records and throughput in
//! that second, the achieved rate since the first record counted, the offered rate, and
//! the percentiles of the latency intervals closed in that second. At the end the run's report comes in
//! whole. Updates are kept (one per second of the run) so that a page opened late, or
//! reconnecting, gets the whole run.

use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use serde_json::json;

/// A cumulative count of records, read once a second.
pub type Counter = Box<dyn Fn() -> u64 + Send>;

/// One run's feed.
pub struct Feed {
    state: Mutex<State>,
    changed: Condvar,
    started: Instant,
}

impl std::fmt::Debug for Feed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Feed").field("started", &self.started).finish_non_exhaustive()
    }
}

struct State {
    /// Server-sent event frames so far, in order (`event: ...\ndata: ...\n\n`).
    frames: Vec<String>,
    /// Latency intervals closed since the last update.
    pending: Option<Histogram<u64>>,
    /// Measured values since the start (every interval's count), the count of last
    /// resort when no counter is registered.
    measured: u64,
    counter: Option<Counter>,
    /// Whether a counter was ever registered (the measured values no longer count then).
    counted: bool,
    /// What earlier counters counted (a run of several phases registers one each).
    base: u64,
    /// The current counter's last reading.
    last_reading: u64,
    /// The total at the last update.
    last_total: u64,
    last_tick: Instant,
    /// The last update that found nothing counted yet: the achieved rate is taken from
    /// here, so the seconds a run spends starting do not dilute it.
    counting_from: Instant,
    unit: String,
    offered: Option<u64>,
    finished: bool,
}

impl Feed {
    /// A feed for `workload` whose measured values count `unit` (shown until a counter
    /// says otherwise), offered `offered` per second (`None`: closed loop).
    #[must_use]
    pub fn new(workload: &str, unit: &str, offered: Option<u64>) -> Arc<Feed> {
        let started = Instant::now();
        let hello = json!({ "workload": workload, "unit": unit, "offered": offered });
        let state = State {
            frames: vec![frame("hello", &hello)],
            pending: None,
            measured: 0,
            counter: None,
            counted: false,
            base: 0,
            last_reading: 0,
            last_total: 0,
            last_tick: started,
            counting_from: started,
            unit: unit.to_string(),
            offered,
            finished: false,
        };
        Arc::new(Feed { state: Mutex::new(state), changed: Condvar::new(), started })
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Adds a closed latency interval to the next update.
    pub fn interval(&self, histogram: &Histogram<u64>) {
        if histogram.is_empty() {
            return;
        }
        let mut s = self.lock();
        s.measured += histogram.len();
        match &mut s.pending {
            Some(p) => p.add(histogram).expect("auto-resizing histograms with equal precision always add"),
            None => s.pending = Some(histogram.clone()),
        }
    }

    /// From now on the records are what `counter` counts (from 0), in `unit`, offered at
    /// `offered` per second (`None`: as fast as taken).
    pub fn watch(&self, unit: &str, offered: Option<u64>, counter: Counter) {
        let mut s = self.lock();
        s.base += s.last_reading;
        s.last_reading = 0;
        s.counter = Some(counter);
        s.counted = true;
        s.unit = unit.to_string();
        s.offered = offered;
    }

    /// Drops the counter (its run ended), keeping what it counted.
    pub fn unwatch(&self) {
        let mut s = self.lock();
        if let Some(counter) = s.counter.take() {
            s.last_reading = counter();
        }
    }

    /// The offered rate from now on (a new step of a rate search).
    pub fn offer(&self, offered: Option<u64>) {
        self.lock().offered = offered;
    }

    /// Makes one update from what came in since the last.
    pub fn tick(&self) {
        let mut s = self.lock();
        let now = Instant::now();
        if let Some(counter) = &s.counter {
            s.last_reading = counter();
        }
        let total = if s.counted { s.base + s.last_reading } else { s.measured };
        let records = total.saturating_sub(s.last_total);
        let secs = now.duration_since(s.last_tick).as_secs_f64().max(1e-3);
        let elapsed = now.duration_since(self.started).as_secs_f64().max(1e-3);
        if total == 0 {
            s.counting_from = now;
        }
        let counting = now.duration_since(s.counting_from).as_secs_f64().max(1e-3);
        let latency = s.pending.take().map(|h| {
            json!({ "p50": h.value_at_quantile(0.50), "p99": h.value_at_quantile(0.99),
                    "p999": h.value_at_quantile(0.999), "max": h.max(), "count": h.len() })
        });
        let update = json!({
            "t": round3(elapsed),
            "records": records,
            "total": total,
            "unit": s.unit,
            "throughput": round3(records as f64 / secs),
            "achieved": round3(total as f64 / counting),
            "offered": s.offered,
            "latency": latency,
        });
        s.last_total = total;
        s.last_tick = now;
        s.frames.push(frame("second", &update));
        drop(s);
        self.changed.notify_all();
    }

    /// The run ended with `report` (its JSON report): one last update (unless less than
    /// half a second passed since the last, too short for a rate), then the report.
    pub fn finish(&self, report: serde_json::Value) {
        if self.lock().last_tick.elapsed() >= Duration::from_millis(500) {
            self.tick();
        }
        let mut s = self.lock();
        let elapsed = round3(self.started.elapsed().as_secs_f64());
        s.frames.push(frame("final", &json!({ "t": elapsed, "report": report })));
        s.finished = true;
        drop(s);
        self.changed.notify_all();
    }

    /// The run failed: says so on the page.
    pub fn fail(&self, error: &str) {
        let mut s = self.lock();
        s.frames.push(frame("failed", &json!({ "error": error })));
        s.finished = true;
        drop(s);
        self.changed.notify_all();
    }

    /// Whether the run has ended.
    pub fn is_finished(&self) -> bool {
        self.lock().finished
    }

    /// The frames from `from` on, waiting up to `wait` for one if there is none yet.
    pub fn frames_from(&self, from: usize, wait: Duration) -> Vec<String> {
        let s = self.lock();
        let (s, _) = self
            .changed
            .wait_timeout_while(s, wait, |s| s.frames.len() <= from)
            .unwrap_or_else(PoisonError::into_inner);
        s.frames.get(from..).map(<[String]>::to_vec).unwrap_or_default()
    }
}

fn round3(v: f64) -> f64 {
    (v * 1000.0).round() / 1000.0
}

/// One server-sent event: its name and its data on one line.
fn frame(event: &str, data: &serde_json::Value) -> String {
    format!("event: {event}\ndata: {data}\n\n")
}

/// Ticks `feed` every second until it finishes (on a thread of its own).
pub fn run_sampler(feed: &Arc<Feed>) -> std::io::Result<()> {
    let feed = feed.clone();
    std::thread::Builder::new().name("sluice-live".into()).spawn(move || {
        let mut next = feed.started + Duration::from_secs(1);
        while !feed.is_finished() {
            std::thread::sleep(next.saturating_duration_since(Instant::now()));
            next += Duration::from_secs(1);
            // `finish` makes the last update itself.
            if !feed.is_finished() {
                feed.tick();
            }
        }
    })?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU64, Ordering};

    fn data(frame: &str) -> serde_json::Value {
        let line = frame.lines().find_map(|l| l.strip_prefix("data: ")).unwrap();
        serde_json::from_str(line).unwrap()
    }

    #[test]
    fn updates_count_records_and_latency_per_second() {
        let feed = Feed::new("pipeline", "results", Some(100));
        // No counter: the measured values are the records.
        let mut h = Histogram::<u64>::new(3).unwrap();
        for v in 1..=100u64 {
            h.record(v).unwrap();
        }
        feed.interval(&h);
        feed.tick();
        let counted = Arc::new(AtomicU64::new(0));
        let c = counted.clone();
        feed.watch("events", None, Box::new(move || c.load(Ordering::Relaxed)));
        counted.store(500, Ordering::Relaxed);
        feed.tick();
        feed.unwatch();
        feed.finish(json!({ "latency_us": { "p99": 99 } }));
        let frames = feed.frames_from(0, Duration::ZERO);
        assert!(frames[0].starts_with("event: hello\n"), "{frames:?}");
        let first = data(&frames[1]);
        assert_eq!((first["records"].as_u64(), first["unit"].as_str()), (Some(100), Some("results")));
        assert_eq!(first["latency"]["p50"].as_u64(), Some(50));
        assert_eq!(first["latency"]["max"].as_u64(), Some(100));
        assert_eq!(first["offered"].as_u64(), Some(100));
        // The counter takes over: 500 events, from the 100 already counted's total on.
        let second = data(&frames[2]);
        assert_eq!((second["records"].as_u64(), second["total"].as_u64()), (Some(400), Some(500)));
        assert_eq!((second["unit"].as_str(), second["latency"].is_null()), (Some("events"), true));
        let last = frames.last().unwrap();
        assert!(last.starts_with("event: final\n"));
        assert_eq!(data(last)["report"]["latency_us"]["p99"].as_u64(), Some(99));
        assert!(feed.is_finished());
        // Nothing new: an empty answer after the wait.
        assert!(feed.frames_from(frames.len(), Duration::from_millis(1)).is_empty());
    }

    #[test]
    fn the_achieved_rate_leaves_out_the_seconds_before_the_first_record() {
        let feed = Feed::new("pipeline", "events", Some(1000));
        let counted = Arc::new(AtomicU64::new(0));
        let c = counted.clone();
        feed.watch("events", Some(1000), Box::new(move || c.load(Ordering::Relaxed)));
        // The run starts: nothing counted for a while.
        std::thread::sleep(Duration::from_millis(200));
        feed.tick();
        std::thread::sleep(Duration::from_millis(50));
        counted.store(1000, Ordering::Relaxed);
        feed.tick();
        let since_feed = feed.started.elapsed().as_secs_f64();
        let frames = feed.frames_from(0, Duration::ZERO);
        let update = data(frames.last().unwrap());
        assert_eq!(update["total"].as_u64(), Some(1000));
        let achieved = update["achieved"].as_f64().unwrap();
        // Counted over at least the 50 ms since the empty update, and over less than
        // the whole time since the feed began.
        assert!(achieved <= 1000.0 / 0.05, "{achieved}");
        assert!(achieved > 1000.0 / since_feed, "{achieved} against {}", 1000.0 / since_feed);
    }
}
