//! The bare baseline of `sluice-bench pipeline --compare bare`: the windowed keyed count
//! as the single-threaded loop one would write by hand with no engine at all, the ceiling
//! one shard of an engine can approach (and `shards x` it, what `shards` cores could do
//! with no exchange between them).
//!
//! The loop makes the same events as the main job's generator (event `i`, key
//! `i mod 10 000`, event time `i` microseconds in the throughput schedule), counts them in
//! one `FxHashMap<key, count>` for the open one-second window (the engine's key hash), and
//! drains the map into the counting sink when the first event of the next window arrives:
//! the events come in time order, so that is when the window is complete. Every result is
//! checked against the same expected counts ([`Tally`]) the sluice and timely runs check.
//!
//! It lives in a crate of its own, like the timely baseline, so its compiled code is the
//! same whatever changes in the engine or the bench.

use std::{
    hint::black_box,
    time::{Duration, Instant},
};

use anyhow::Context;
use rustc_hash::FxHashMap;
use sluice_bench_timely::job::{Job, KEYS, Tally};

/// One run of the bare loop.
#[derive(Debug, Clone, Copy)]
pub struct BareRun {
    /// From the first event made to the last result checked.
    pub elapsed: Duration,
    /// What the loop's sink saw (already checked against the job).
    pub tally: Tally,
}

/// Runs the job's events through the bare loop on a thread of its own, pinned to `cpu`
/// when given (best effort, as the timely baseline pins its workers).
///
/// # Errors
///
/// Results that do not match the job (a broken loop), or a thread that could not start.
pub fn run(job: &Job, cpu: Option<usize>) -> anyhow::Result<BareRun> {
    let job = *job;
    let thread = std::thread::Builder::new()
        .name("bare-baseline".into())
        .spawn(move || {
            if let Some(cpu) = cpu {
                let _ = core_affinity::set_for_current(core_affinity::CoreId { id: cpu });
            }
            let started = Instant::now();
            let tally = count(&job);
            (started.elapsed(), tally)
        })
        .context("starting the bare baseline's thread")?;
    let (elapsed, tally) = thread.join().map_err(|_| anyhow::anyhow!("the bare baseline's thread panicked"))?;
    tally.check(&job, "bare")?;
    Ok(BareRun { elapsed, tally })
}

/// The loop itself: every event of `job` counted per key into its window's map, each map
/// drained into the tally when its window ends.
///
/// # Panics
///
/// Never for a [`Job`] (its events are in time order); the assertion guards the loop's
/// one assumption.
pub fn count(job: &Job) -> Tally {
    // The default key count's key is a division by a constant, as in the sluice and timely
    // runs' selectors.
    if job.keys == KEYS { count_by(job, Job::default_key) } else { count_by(job, |i| job.key(i)) }
}

fn count_by(job: &Job, key: impl Fn(u64) -> u64) -> Tally {
    let mut tally = Tally::default();
    let mut counts: FxHashMap<u64, u64> = FxHashMap::default();
    let mut window = i64::MIN;
    for i in 0..job.events {
        // `black_box`: the events are a pure function of `i`, which the compiler must not
        // fold into closed-form counts; an engine's source hands them over opaque too.
        let i = black_box(i);
        let start = Job::window_start(job.time_ms(i));
        if start != window {
            assert!(start > window, "the job's events come in time order");
            drain(job, window, &mut counts, &mut tally);
            window = start;
        }
        // A probe first, inserting only a key new to the window (as sluice's windows do):
        // cheaper than `entry`, which builds its entry for every record.
        let key = key(i);
        match counts.get_mut(&key) {
            Some(count) => *count += 1,
            None => {
                counts.insert(key, 1);
            }
        }
    }
    drain(job, window, &mut counts, &mut tally);
    tally
}

/// Hands the window starting at `start_ms`'s counts to the sink, keeping the map's
/// capacity for the next window.
fn drain(job: &Job, start_ms: i64, counts: &mut FxHashMap<u64, u64>, tally: &mut Tally) {
    for (key, count) in counts.drain() {
        tally.add(job, key, start_ms, count);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_loop_counts_every_window_of_the_job() {
        // Two full windows and a partial third: 3 x 10 000 results.
        let job = Job::new(2_500_000, None, 10, 1024).unwrap();
        let run = run(&job, None).unwrap();
        assert_eq!((run.tally.results, run.tally.sum, run.tally.wrong), (30_000, 2_500_000, 0));
        assert!(run.elapsed > Duration::ZERO);
    }

    #[test]
    fn fewer_events_than_keys_and_other_key_counts_add_up() {
        for (events, keys) in [(1, 10_000), (777, 10_000), (2_000_123, 7)] {
            let job = Job::new(events, None, 0, 16).unwrap().with_keys(keys).unwrap();
            let tally = count(&job);
            tally.check(&job, "bare").unwrap();
            assert_eq!(tally.results, job.expected_results());
        }
        // The loop needs only time order, so a paced schedule's windows count right too.
        let paced = Job::new(6000, Some(2500), 0, 16).unwrap();
        count(&paced).check(&paced, "paced").unwrap();
        let empty = Job::new(0, None, 0, 16).unwrap();
        assert_eq!(count(&empty), Tally::default());
    }
}
