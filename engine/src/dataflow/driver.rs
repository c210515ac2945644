//! The shard's driver: the one task per shard that runs the pipeline's operators.
//!
//! It loops over the shard's inputs (sources and the ring sides of exchanges), pushing each
//! unit of work through the synchronous operator graph, flushing what exchanges and sinks
//! hold pending, and running processing-time duties when due. Ring inputs are always
//! drained; sources are pulled only while nothing is pending, so a full ring downstream
//! stops the sources that feed it, not the shard. With nothing to do it spins for
//! `spin_before_park`, then parks until a ring, a source, a flush or a timer wakes it.

use std::{
    cell::RefCell,
    future::poll_fn,
    rc::Rc,
    sync::{
        Arc,
        atomic::{AtomicU8, Ordering},
    },
    task::{Context, Poll, Waker},
    time::{Duration, Instant},
};

use futures_lite::FutureExt;
use sluice_io::CheckpointId;

use super::{
    checkpoint::{Barrier, CheckpointCoordinator},
    scope::{Input, Pending, Scope, Ticker},
};

/// How often a shard looks for a stop request while it has nothing else to wake it.
const STOP_POLL: Duration = Duration::from_millis(20);
/// Rounds of work between yields to the executor, which then collects I/O completions and
/// wake-ups from other threads.
const ROUNDS_PER_YIELD: u32 = 32;
/// Ring messages one ring input moves per round.
const RING_BUDGET: usize = 16;

/// A request to end a running pipeline, shared by its shards.
#[derive(Debug, Default)]
pub(crate) struct StopFlag(AtomicU8);

impl StopFlag {
    const RUN: u8 = 0;
    const STOP: u8 = 1;
    const DRAIN: u8 = 2;
    const FAILED: u8 = 3;

    /// A shard failed: every shard abandons the pipeline at once.
    pub(crate) fn fail(&self) {
        self.0.store(Self::FAILED, Ordering::Release);
    }

    fn failed(&self) -> bool {
        self.0.load(Ordering::Acquire) == Self::FAILED
    }

    pub(crate) fn stop(&self, drain: bool) {
        let _ = self.0.compare_exchange(
            Self::RUN,
            if drain { Self::DRAIN } else { Self::STOP },
            Ordering::AcqRel,
            Ordering::Acquire,
        );
    }

    fn get(&self) -> Option<bool> {
        match self.0.load(Ordering::Acquire) {
            Self::RUN => None,
            v => Some(v == Self::DRAIN),
        }
    }
}

enum Round {
    Done,
    Progress,
    Idle,
}

struct Driver {
    inputs: Vec<Box<dyn Input>>,
    ended: Vec<bool>,
    pending: Vec<Rc<RefCell<dyn Pending>>>,
    tickers: Vec<Rc<RefCell<dyn Ticker>>>,
    tick_request: super::scope::TickRequest,
    stop: Arc<StopFlag>,
    stopped: bool,
    spin: Duration,
    spin_deadline: Option<Instant>,
    next_tick: Option<Instant>,
    timer: Option<(Instant, glommio::timer::Timer)>,
    /// [`PipelineConfig::watermark_interval`](super::PipelineConfig::watermark_interval)
    /// (`None` when zero: nothing is held), and when the pending outputs last released
    /// what they hold ([`Pending::release`]).
    release_every: Option<Duration>,
    released: Instant,
    /// With checkpoints: the coordinator, and the last checkpoint injected here.
    coordinator: Option<Arc<CheckpointCoordinator>>,
    injected: CheckpointId,
    completed: CheckpointId,
    /// A stopping savepoint is durable (and completed here): the shard reads no input
    /// and runs no timer any more; it ends once its sinks have flushed (committed what
    /// the savepoint covers). Its streams are not ended, so no operator sees an end and
    /// nothing fires after the savepoint's barrier.
    halting: bool,
}

/// Runs one shard's part of the pipeline until all its inputs have ended and nothing is
/// pending.
pub(crate) async fn run(scope: Scope, stop: Arc<StopFlag>) {
    let (inputs, pending, tickers, tick_request, coordinator) = {
        let mut state = scope.state.borrow_mut();
        (
            std::mem::take(&mut state.inputs),
            std::mem::take(&mut state.pending),
            std::mem::take(&mut state.tickers),
            state.tick_request.clone(),
            state.checkpoint.as_ref().map(|c| c.borrow().coordinator.clone()),
        )
    };
    let mut driver = Driver {
        ended: vec![false; inputs.len()],
        inputs,
        pending,
        tickers,
        tick_request,
        stop,
        stopped: false,
        spin: scope.config().ring.spin_before_park,
        spin_deadline: None,
        next_tick: Some(Instant::now()),
        timer: None,
        release_every: Some(scope.config().watermark_interval).filter(|i| !i.is_zero()),
        released: Instant::now(),
        coordinator,
        injected: CheckpointId(0),
        completed: CheckpointId(0),
        halting: false,
    };
    while !poll_fn(|cx| driver.poll_step(cx)).await {
        glommio::yield_if_needed().await;
    }
}

impl Driver {
    /// Works until nothing is left to do now; `Ready(true)` when the shard is done.
    ///
    /// Work is polled with a waker that does nothing: only when the driver is about to
    /// park does it poll once more with its own waker, so that rings, sources and sinks
    /// know whom to wake. Registering on every poll would let a busy peer queue a foreign
    /// wake-up per message while this shard spins, and glommio, which drains those only
    /// when the executor goes idle, would overflow the task's waker count.
    fn poll_step(&mut self, cx: &mut Context<'_>) -> Poll<bool> {
        let mut rounds = 0;
        let mut quiet = Context::from_waker(Waker::noop());
        loop {
            if self.stop.failed() {
                // Another shard failed; what is in flight here cannot complete.
                return Poll::Ready(true);
            }
            if !self.stopped
                && let Some(drain) = self.stop.get()
            {
                self.stopped = true;
                for input in &mut self.inputs {
                    input.stop(drain);
                }
            }
            let holding = self.follow_checkpoints();
            let now = Instant::now();
            if let Some(at) = self.tick_request.take().filter(|_| !self.halting) {
                self.next_tick = Some(self.next_tick.map_or(at, |t| t.min(at)));
            }
            if !self.halting && !holding && self.next_tick.is_some_and(|t| t <= now) {
                self.tick(now);
            }
            match self.round(&mut quiet) {
                Round::Done => return Poll::Ready(true),
                Round::Progress => {
                    self.spin_deadline = None;
                    if self.release_every.is_some_and(|every| now.saturating_duration_since(self.released) >= every) {
                        self.release(now);
                    }
                    rounds += 1;
                    if rounds >= ROUNDS_PER_YIELD {
                        cx.waker().wake_by_ref();
                        return Poll::Pending;
                    }
                    continue;
                }
                Round::Idle if self.release_every.is_some() => self.release(now),
                Round::Idle => {}
            }
            // Nothing moved: spin a little, then park.
            let deadline = *self.spin_deadline.get_or_insert(now + self.spin);
            if now < deadline {
                cx.waker().wake_by_ref();
                return Poll::Pending;
            }
            match self.round(cx) {
                Round::Done => return Poll::Ready(true),
                Round::Progress => {
                    self.spin_deadline = None;
                    continue;
                }
                Round::Idle => {}
            }
            let wake_at = match self.next_tick {
                Some(t) if !holding && !self.halting => t.min(now + STOP_POLL),
                _ => now + STOP_POLL,
            };
            let timer = match &mut self.timer {
                // A timer already set for no later than needed will do (an early wake-up
                // costs one idle round); replacing it on every park would churn timers.
                Some((at, timer)) if *at <= wake_at && *at > now => timer,
                slot => {
                    &mut slot.insert((wake_at, glommio::timer::Timer::new(wake_at.saturating_duration_since(now)))).1
                }
            };
            if timer.poll(cx).is_ready() {
                self.timer = None;
                continue;
            }
            return Poll::Pending;
        }
    }

    /// Passes a new checkpoint's barrier to the inputs and a completed one's news, and
    /// starts halting once a stopping savepoint is durable. Returns whether the shard holds
    /// at a stopping savepoint's barrier: from there on no processing-time duty runs (idle
    /// detection, processing-time watermarks, early firings, timers), so nothing fires
    /// after the barrier; if the savepoint fails, they go on.
    fn follow_checkpoints(&mut self) -> bool {
        let Some(coordinator) = &self.coordinator else { return false };
        let trigger = coordinator.trigger();
        if trigger > self.injected {
            // Sources inject the barrier before they read anything more.
            self.injected = trigger;
            for (input, ended) in self.inputs.iter_mut().zip(&self.ended) {
                if !ended {
                    input.inject_barrier(Barrier { id: trigger });
                }
            }
        }
        let completed = coordinator.completed();
        if completed > self.completed {
            self.completed = completed;
            for input in &mut self.inputs {
                input.checkpoint_completed(completed);
            }
        }
        let stopped_at = coordinator.stop_done.load(std::sync::atomic::Ordering::Acquire);
        if stopped_at != 0 && self.completed.get() >= stopped_at && !self.halting {
            self.halting = true;
            self.ended.fill(true);
            self.pending.retain(|p| p.borrow().flush_before_halt());
            self.next_tick = None;
        }
        let at = coordinator.stop_at.load(std::sync::atomic::Ordering::Acquire);
        at != 0 && at == self.injected.get()
    }

    /// Hands on what the pending outputs hold back: the shard is idle, or the interval
    /// has passed. What a full ring refuses waits for the next round's flush.
    fn release(&mut self, now: Instant) {
        self.released = now;
        for p in &self.pending {
            p.borrow_mut().release();
        }
    }

    /// One pass over the pending outputs and the inputs, polled with `cx`.
    fn round(&mut self, cx: &mut Context<'_>) -> Round {
        let mut blocked = false;
        for p in &self.pending {
            blocked |= p.borrow_mut().poll_flush(cx).is_pending();
        }
        let mut progress = false;
        for (input, ended) in self.inputs.iter_mut().zip(&mut self.ended) {
            if *ended || (blocked && input.is_source()) {
                continue;
            }
            match input.poll_input(cx, RING_BUDGET) {
                Poll::Ready(true) => progress = true,
                Poll::Ready(false) => {
                    *ended = true;
                    progress = true;
                }
                Poll::Pending => {}
            }
        }
        if !blocked && self.ended.iter().all(|&e| e) {
            // Ending inputs may have left records pending: flush once more.
            let mut flushed = true;
            for p in &self.pending {
                flushed &= p.borrow_mut().poll_flush(cx).is_ready();
            }
            if flushed {
                return Round::Done;
            }
        }
        if progress { Round::Progress } else { Round::Idle }
    }

    fn tick(&mut self, now: Instant) {
        let mut next: Option<Instant> = None;
        let mut keep = |t: Option<Instant>| {
            if let Some(t) = t {
                next = Some(next.map_or(t, |n| n.min(t)));
            }
        };
        for ticker in &self.tickers {
            keep(ticker.borrow_mut().tick(now));
        }
        for (input, ended) in self.inputs.iter_mut().zip(&self.ended) {
            if !ended {
                keep(input.tick(now));
            }
        }
        self.next_tick = next.map(|t| t.max(now + Duration::from_micros(100)));
    }
}
