//! Tests of the rings: one ring used from one thread (`channel`), wake-ups between
//! executors on different threads (`wake`), and the mesh (`mesh`).
//!
//! Every test that waits across threads runs under [`on_executors`], which fails with a
//! message once no message has moved for [`STALL_LIMIT`] instead of hanging on a lost
//! wake-up.

mod channel;
mod mesh;
mod wake;

use std::{
    any::Any,
    future::Future,
    panic::AssertUnwindSafe,
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
        mpsc,
    },
    time::{Duration, Instant},
};

use futures_lite::FutureExt;
use glommio::{LocalExecutorBuilder, Placement};

use super::{Message, RingConfig};

/// How long a cross-thread test may go without a message moving before it is declared
/// hung. A lost wake-up stops progress for good; a machine busy with other work only slows
/// it (a total time limit of 30 s failed a correct ping-pong once, during a build).
pub(super) const STALL_LIMIT: Duration = Duration::from_secs(20);

/// Messages moved so far, counted by the tests' receiving loops ([`Progress::tick`]).
#[derive(Clone, Default)]
pub(super) struct Progress(Arc<AtomicU64>);

impl Progress {
    /// One more message arrived.
    pub(super) fn tick(&self) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }

    fn moved(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// A ring config with `capacity` slots and `spin` before parking.
pub(super) fn config(capacity: usize, spin: Duration) -> RingConfig {
    RingConfig { ring_capacity_batches: capacity, spin_before_park: spin }
}

/// A data message of one record, for tests that follow sequence numbers.
pub(super) fn one(n: u64) -> Message<u64> {
    Message::data(vec![n])
}

/// The single record of a data message made by [`one`].
pub(super) fn record(message: Message<u64>) -> u64 {
    match message {
        Message::Data(batch) => batch[0],
        other => panic!("expected data, got {}", other.kind()),
    }
}

/// Runs `f(i, inputs[i], progress)` for every input, each on its own glommio executor on
/// its own thread, and returns the results in input order. Panics with `what` if any
/// panics, or if no message has moved (`progress` ticked) for [`STALL_LIMIT`] while some
/// have not finished: a lost wake-up leaves a task parked forever (the hung threads are
/// left behind).
pub(super) fn on_executors<I, F, Fut, R>(what: &str, inputs: Vec<I>, f: F) -> Vec<R>
where
    I: Send + 'static,
    F: Fn(usize, I, Progress) -> Fut + Send + Clone + 'static,
    Fut: Future<Output = R> + 'static,
    R: Send + 'static,
{
    let n = inputs.len();
    let progress = Progress::default();
    let (done_tx, done_rx) = mpsc::channel::<(usize, Result<R, String>)>();
    for (i, input) in inputs.into_iter().enumerate() {
        let (f, done, progress) = (f.clone(), done_tx.clone(), progress.clone());
        LocalExecutorBuilder::new(Placement::Unbound)
            .name(&format!("ring-test-{i}"))
            .io_memory(64 << 10)
            .spawn(move || async move {
                let result = AssertUnwindSafe(f(i, input, progress)).catch_unwind().await.map_err(panic_message);
                let _ = done.send((i, result));
            })
            .expect("start a glommio executor");
    }
    drop(done_tx);

    let mut results: Vec<Option<R>> = (0..n).map(|_| None).collect();
    let mut finished = 0;
    let (mut seen, mut since) = (progress.moved(), Instant::now());
    while finished < n {
        match done_rx.recv_timeout(Duration::from_millis(200)) {
            Ok((i, Ok(r))) => {
                results[i] = Some(r);
                finished += 1;
            }
            Ok((i, Err(message))) => panic!("{what}: executor {i} panicked: {message}"),
            Err(mpsc::RecvTimeoutError::Timeout) => {
                let moved = progress.moved();
                if moved != seen {
                    (seen, since) = (moved, Instant::now());
                } else if since.elapsed() >= STALL_LIMIT {
                    panic!(
                        "{what}: {} of {n} executors still running, and no message moved for {STALL_LIMIT:?} \
                         (after {moved}): a lost wake-up?",
                        n - finished
                    );
                }
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => panic!("{what}: an executor ended without reporting"),
        }
    }
    results.into_iter().map(|r| r.expect("every executor reported")).collect()
}

fn panic_message(payload: Box<dyn Any + Send>) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "<non-string panic payload>".to_string())
}

#[test]
#[should_panic(expected = "no message moved")]
fn a_test_whose_messages_stop_moving_fails_rather_than_hangs() {
    // A task parked forever, as a lost wake-up would leave it (its thread is left behind).
    on_executors("a stalled wait", vec![()], |_, (), _progress| std::future::pending::<()>());
}
