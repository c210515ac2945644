//! Tests of the rings: one ring used from one thread (`channel`), wake-ups between
//! executors on different threads (`wake`), and the mesh (`mesh`).
//!
//! Every test that waits across threads runs under [`on_executors`], which fails with a
//! message after [`TIME_LIMIT`] instead of hanging on a lost wake-up.

mod channel;
mod mesh;
mod wake;

use std::{
    any::Any,
    future::Future,
    panic::AssertUnwindSafe,
    sync::mpsc,
    time::{Duration, Instant},
};

use futures_lite::FutureExt;
use glommio::{LocalExecutorBuilder, Placement};

use super::{Message, RingConfig};

/// How long a cross-thread test may run before it is declared hung.
pub(super) const TIME_LIMIT: Duration = Duration::from_secs(30);

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

/// Runs `f(i, inputs[i])` for every input, each on its own glommio executor on its own
/// thread, and returns the results in input order. Panics with `what` if any panics, or
/// if they have not all finished within [`TIME_LIMIT`] (a lost wake-up leaves a task
/// parked forever; the hung threads are left behind).
pub(super) fn on_executors<I, F, Fut, R>(what: &str, inputs: Vec<I>, f: F) -> Vec<R>
where
    I: Send + 'static,
    F: Fn(usize, I) -> Fut + Send + Clone + 'static,
    Fut: Future<Output = R> + 'static,
    R: Send + 'static,
{
    let n = inputs.len();
    let (done_tx, done_rx) = mpsc::channel::<(usize, Result<R, String>)>();
    for (i, input) in inputs.into_iter().enumerate() {
        let (f, done) = (f.clone(), done_tx.clone());
        LocalExecutorBuilder::new(Placement::Unbound)
            .name(&format!("ring-test-{i}"))
            .io_memory(64 << 10)
            .spawn(move || async move {
                let result = AssertUnwindSafe(f(i, input)).catch_unwind().await.map_err(panic_message);
                let _ = done.send((i, result));
            })
            .expect("start a glommio executor");
    }
    drop(done_tx);

    let deadline = Instant::now() + TIME_LIMIT;
    let mut results: Vec<Option<R>> = (0..n).map(|_| None).collect();
    for finished in 0..n {
        let wait = deadline.saturating_duration_since(Instant::now());
        match done_rx.recv_timeout(wait) {
            Ok((i, Ok(r))) => results[i] = Some(r),
            Ok((i, Err(message))) => panic!("{what}: executor {i} panicked: {message}"),
            Err(_) => {
                panic!("{what}: {} of {n} executors still running after {TIME_LIMIT:?}: a lost wake-up?", n - finished)
            }
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
