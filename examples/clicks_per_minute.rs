//! Clicks per minute, in event time, with out-of-order clicks and one late click, under
//! each late-data policy.
//!
//! Three clicks fall in 14:00-14:01 and arrive out of order; a click at 14:01:30 moves the
//! watermark (10 s of allowed disorder) past 14:01, so that window fires with 3; then a
//! click stamped 14:00:45 arrives, late:
//!
//! - `drop` leaves the result at 3 and counts the click in `late_dropped`;
//! - `update` (with 5 minutes of allowed lateness) emits 4, marked as an update of the 3;
//! - `side-output` delivers the click to the late stream.
//!
//! ```sh
//! cargo run --release --example clicks_per_minute            # all three policies
//! cargo run --release --example clicks_per_minute -- update  # one of drop|update|side-output
//! ```

use std::time::Duration;

use sluice_engine::dataflow::checkpoint::StateError;
use sluice_engine::dataflow::{Data, Generator, LatePolicy, Pipeline, PipelineConfig, WatermarkStrategy, Windows};
use sluice_io::EventTime;

#[derive(Debug, Clone)]
struct Click {
    page: String,
    /// Event time: when the user clicked.
    time: EventTime,
}

/// Clicks cross a `key_by`: an unaligned checkpoint may store them in flight.
impl Data for Click {
    fn encode(&self, out: &mut Vec<u8>) {
        self.page.encode(out);
        self.time.encode(out);
    }
    fn decode(input: &mut &[u8]) -> Result<Self, StateError> {
        let (page, time) = Data::decode(input)?;
        Ok(Click { page, time })
    }
}

/// 2026-11-30 14:00 UTC, in ms since the epoch, plus `minute:second`.
fn at(minute: i64, second: i64) -> EventTime {
    EventTime::from_millis(1_796_047_200_000 + minute * 60_000 + second * 1000)
}

/// The clicks in the order they arrive.
const CLICKS: [(&str, i64, i64); 7] = [
    ("home", 0, 10),
    ("home", 0, 40), // the third click, before the second
    ("home", 0, 20),
    ("cart", 0, 50),
    ("home", 1, 30), // moves the watermark past 14:01
    ("home", 0, 45), // late
    ("cart", 1, 55),
];

fn run(policy: LatePolicy) -> Result<(), Box<dyn std::error::Error>> {
    println!("== late policy {policy:?}");
    let mut config = PipelineConfig::with_shards(1);
    // One click per batch, so each click is followed by the watermark it allows; one
    // shard, so the clicks arrive in exactly the order above.
    config.batch_records = 1;
    let running = Pipeline::new(config).spawn(move |scope| {
        let clicks = Generator::new(scope.shard(), scope.shards(), CLICKS.len() as u64, |i| {
            let (page, minute, second) = CLICKS[i as usize];
            Click { page: page.to_string(), time: at(minute, second) }
        });
        let strategy = WatermarkStrategy::bounded_out_of_orderness(Duration::from_secs(10), |c: &Click| c.time);
        let mut per_minute = scope
            .source(clicks, strategy)
            .key_by(|c| c.page.clone())
            .window(Windows::tumbling(Duration::from_secs(60)))
            .allowed_lateness(Duration::from_secs(300))
            .late_policy(policy);
        if policy == LatePolicy::SideOutput {
            per_minute.late_stream().for_each(|e| println!("late click: {:?}", e.value));
        }
        per_minute.count().for_each(|e| {
            let r = e.value;
            println!(
                "{:<5} [{} .. {})  {} clicks  ({:?})",
                r.key,
                clock(r.window.start),
                clock(r.window.end),
                r.value,
                r.firing
            );
        });
    })?;
    let metrics = running.metrics();
    running.join()?;
    println!("late clicks dropped: {}", metrics.late_dropped());
    Ok(())
}

/// `HH:MM` of a time in UTC.
fn clock(t: EventTime) -> String {
    let minutes = t.millis().div_euclid(60_000);
    format!("{:02}:{:02}", minutes.div_euclid(60).rem_euclid(24), minutes.rem_euclid(60))
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let policies = match std::env::args().nth(1).as_deref() {
        None => vec![LatePolicy::Drop, LatePolicy::Update, LatePolicy::SideOutput],
        Some("drop") => vec![LatePolicy::Drop],
        Some("update") => vec![LatePolicy::Update],
        Some("side-output") => vec![LatePolicy::SideOutput],
        Some(other) => return Err(format!("unknown policy {other:?}: drop, update or side-output").into()),
    };
    for policy in policies {
        run(policy)?;
    }
    Ok(())
}
