//! The baseline of `sluice-bench pipeline`: the same windowed keyed count written with the
//! `timely` dataflow crate, run in the same process on as many workers as sluice has shards,
//! pinned to the same CPUs.
//!
//! It is written the way timely's own examples write such a job: each worker generates its
//! share of the events (worker `w` of `W` makes the `i` with `i % W == w`) into an
//! `InputHandle` a batch at a time, and advances the input's time after each batch to what
//! sluice's watermark would be, the largest event time sent minus the out-of-orderness bound
//! (timestamps are event-time milliseconds; a timely frontier `t` is a watermark of `t - 1`).
//! An `Exchange` routes each event to the worker owning its key (by the key's Fx hash,
//! as sluice hashes keys into key groups), where a `unary_frontier` operator keeps one
//! `FxHashMap<key, count>` per open window and a capability at the window's last
//! millisecond, and emits the window's counts once the input frontier passes it. With
//! [`Job::two_phase`] the same operator first runs on each worker's own events without an
//! exchange, and its partial counts are exchanged by key and added up by a second one (as
//! sluice's `combine_by`). A sink
//! counts the results and checks each against the job. Every worker steps once per batch
//! and keeps its input at most [`LAG_MS`] of event time ahead of what its operator has
//! processed, so exchanged batches cannot pile up without bound.

use std::{
    cell::RefCell,
    hash::BuildHasher,
    rc::Rc,
    sync::{Arc, Barrier, atomic::AtomicU64},
    time::Instant,
};

use anyhow::{Context, anyhow};
use rustc_hash::{FxBuildHasher, FxHashMap};
use timely::{
    container::CapacityContainerBuilder,
    dataflow::{
        InputHandle, ProbeHandle,
        channels::pact::{Exchange, Pipeline},
        operators::{Capability, Operator, Probe},
    },
};

use crate::job::{Job, KEYS, Share, Tally, WINDOW_MS};

/// How far (in event-time milliseconds) a worker's input may run ahead of its window
/// operator's frontier before the worker only steps the dataflow.
pub const LAG_MS: u64 = 100;

/// One run of the baseline.
#[derive(Debug, Clone, Copy)]
pub struct TimelyRun {
    /// From the moment every worker was ready to the last worker's last result.
    pub elapsed: std::time::Duration,
    /// What the sinks saw (already checked against the job).
    pub tally: Tally,
}

/// A window the operator holds open: its start, the capability it will emit at, and its
/// counts.
struct OpenWindow {
    start_ms: i64,
    capability: Capability<u64>,
    counts: FxHashMap<u64, u64>,
}

/// A result on its way to the sink: (key, window start in ms, count).
type WindowCount = (u64, i64, u64);

/// The window operator on `$stream` with the exchange `$pact`: `$split` makes each input
/// item a (key, window start in ms, count to add); one `FxHashMap<key, count>` per open
/// window and a capability at the window's last millisecond; a window's counts go out once
/// the input frontier passes it. A macro rather than a function: the same body serves the
/// events and the partial counts without spelling out timely's operator types.
macro_rules! window_counts {
    ($stream:expr, $pact:expr, $name:expr, $split:expr) => {{
        let split = $split;
        $stream.unary_frontier::<CapacityContainerBuilder<Vec<WindowCount>>, _, _, _>(
            $pact,
            $name,
            move |_capability, _info| {
                // Open windows in start order; one, or two around a window's end.
                let mut windows: Vec<OpenWindow> = Vec::new();
                move |(input, frontier), output| {
                    input.for_each(|time, items| {
                        // Items arrive in (almost) time order: the window of the previous
                        // item is looked at first.
                        let mut at = usize::MAX;
                        for item in items.drain(..) {
                            let (key, start_ms, n) = split(item);
                            if windows.get(at).is_none_or(|w| w.start_ms != start_ms) {
                                at = match windows.binary_search_by_key(&start_ms, |w| w.start_ms) {
                                    Ok(found) => found,
                                    Err(insert) => {
                                        let last_ms = (start_ms + WINDOW_MS - 1) as u64;
                                        let capability = time.delayed(&last_ms, output.output_index());
                                        let counts = FxHashMap::default();
                                        windows.insert(insert, OpenWindow { start_ms, capability, counts });
                                        insert
                                    }
                                };
                            }
                            *windows[at].counts.entry(key).or_insert(0) += n;
                        }
                    });
                    // A window is complete once no input may still carry a time at or
                    // below its last millisecond.
                    while windows.first().is_some_and(|w| !frontier.less_equal(w.capability.time())) {
                        let OpenWindow { start_ms, capability, counts } = windows.remove(0);
                        output
                            .session(&capability)
                            .give_iterator(counts.into_iter().map(|(key, count)| (key, start_ms, count)));
                    }
                }
            },
        )
    }};
}

/// Runs the job on `workers` timely workers, worker `w` pinned to `cpus[w % cpus.len()]`.
///
/// # Errors
///
/// A worker that failed, or results that do not match the job.
pub fn run(job: &Job, workers: usize, cpus: &[usize]) -> anyhow::Result<TimelyRun> {
    let job = *job;
    anyhow::ensure!(job.keys == KEYS, "the timely baseline runs the job with its default {KEYS} keys only");
    let cpus = cpus.to_vec();
    // Every worker has built its dataflow before the clock starts.
    let ready = Arc::new(Barrier::new(workers));
    // With `Split::OnDemand`, the counter the workers claim their events from.
    let claims = Arc::new(AtomicU64::new(0));
    let guards = timely::execute(timely::Config::process(workers), move |worker| {
        if let Some(&cpu) = cpus.get(worker.index() % cpus.len().max(1)) {
            // Best effort, like glommio's placement: an unpinned baseline is still correct.
            let _ = core_affinity::set_for_current(core_affinity::CoreId { id: cpu });
        }
        let tally = Rc::new(RefCell::new(Tally::default()));
        let mut input = InputHandle::<u64, CapacityContainerBuilder<Vec<u64>>>::new();
        let probe = ProbeHandle::new();
        worker.dataflow::<u64, _, _>(|scope| {
            let sink_tally = tally.clone();
            let events = input.to_stream(scope);
            let counts = if job.two_phase {
                // Each worker counts its own events per window and key, then the partial
                // counts cross to the key's worker, which adds them up.
                let partials = window_counts!(events, Pipeline, "LocalWindowCount", move |i: u64| {
                    (Job::default_key(i), Job::window_start(job.time_ms(i)), 1)
                });
                window_counts!(
                    partials,
                    Exchange::new(|c: &WindowCount| FxBuildHasher.hash_one(c.0)),
                    "WindowCount",
                    |c: WindowCount| c
                )
            } else {
                window_counts!(
                    events,
                    Exchange::new(|i: &u64| FxBuildHasher.hash_one(Job::default_key(*i))),
                    "WindowCount",
                    move |i: u64| (Job::default_key(i), Job::window_start(job.time_ms(i)), 1)
                )
            };
            counts.probe_with(&probe).sink(Pipeline, "CountingSink", move |(input, _frontier)| {
                let mut tally = sink_tally.borrow_mut();
                input.for_each(|_time, results| {
                    for (key, start_ms, count) in results.drain(..) {
                        tally.add(&job, key, start_ms, count);
                    }
                });
            });
        });

        ready.wait();
        let started = Instant::now();
        let mut share = Share::new(&job, worker.index() as u64, worker.peers() as u64, &claims);
        let mut batch: Vec<u64> = Vec::with_capacity(job.batch);
        while share.fill(&mut batch, job.batch) {
            let max_ms = job.time_ms(*batch.last().expect("at least one event left")) as u64;
            input.send_batch(&mut batch);
            batch.clear();
            let frontier = max_ms.saturating_sub(job.out_of_orderness_ms).max(*input.time());
            input.advance_to(frontier);
            worker.step();
            let behind = frontier.saturating_sub(LAG_MS);
            worker.step_while(|| probe.less_than(&behind));
        }
        input.close();
        worker.step_while(|| !probe.done());
        let tally = *tally.borrow();
        (started, Instant::now(), tally)
    })
    .map_err(|e| anyhow!("starting timely: {e}"))?;

    let mut tally = Tally::default();
    let (mut first, mut last) = (None::<Instant>, None::<Instant>);
    for result in guards.join() {
        let (started, ended, worker_tally) = result.map_err(|e| anyhow!("timely worker: {e}"))?;
        first = Some(first.map_or(started, |f| f.min(started)));
        last = Some(last.map_or(ended, |l| l.max(ended)));
        tally.merge(&worker_tally);
    }
    tally.check(&job, "timely")?;
    let elapsed = last.context("at least one worker")? - first.context("at least one worker")?;
    Ok(TimelyRun { elapsed, tally })
}
