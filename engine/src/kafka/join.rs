//! Small future combinators the request handlers share: run several engine requests
//! together and take all their answers, or the first.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context as TaskContext, Poll};

pub(crate) type Boxed<'a, T> = Pin<Box<dyn Future<Output = T> + 'a>>;

/// Runs futures together; their results in order. Each is first polled in order, so the
/// requests they send reach their shards in order.
pub(crate) async fn join_all<'a, T: Unpin + 'a>(futures: Vec<Boxed<'a, T>>) -> Vec<T> {
    struct JoinAll<'a, T> {
        futures: Vec<Option<Boxed<'a, T>>>,
        results: Vec<Option<T>>,
    }
    impl<T: Unpin> Future for JoinAll<'_, T> {
        type Output = Vec<T>;
        fn poll(mut self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<Vec<T>> {
            let this = &mut *self;
            for (slot, result) in this.futures.iter_mut().zip(this.results.iter_mut()) {
                if let Some(f) = slot
                    && let Poll::Ready(v) = f.as_mut().poll(cx)
                {
                    *result = Some(v);
                    *slot = None;
                }
            }
            if this.futures.iter().all(Option::is_none) {
                Poll::Ready(this.results.iter_mut().filter_map(Option::take).collect())
            } else {
                Poll::Pending
            }
        }
    }
    let results = futures.iter().map(|_| None).collect();
    JoinAll { futures: futures.into_iter().map(Some).collect(), results }.await
}

/// Resolves when the first of `futures` does (or at once if there are none).
pub(crate) async fn first_of<'a>(futures: Vec<Boxed<'a, ()>>) {
    struct FirstOf<'a> {
        futures: Vec<Boxed<'a, ()>>,
    }
    impl Future for FirstOf<'_> {
        type Output = ();
        fn poll(mut self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<()> {
            if self.futures.is_empty() {
                return Poll::Ready(());
            }
            for f in &mut self.futures {
                if f.as_mut().poll(cx).is_ready() {
                    return Poll::Ready(());
                }
            }
            Poll::Pending
        }
    }
    FirstOf { futures }.await;
}
