//! Waiting on a ring without spinning forever: the [`Bell`] a parked side leaves its waker
//! on, and the [`Spin`] policy that decides when a waiting side parks.
//!
//! A bell belongs to one waiting side (the receiver of a shard's inbox waiting for data,
//! or a sender waiting for room) and is rung by the other side, usually from another
//! shard's thread. The waker it holds may belong to any executor; glommio queues a wake
//! from a foreign thread and wakes its sleeping executor itself, so no eventfd is ours.
//!
//! # No lost wake-ups
//!
//! The protocol is Dekker's: each side writes its own variable, issues a sequentially
//! consistent fence, then reads the other's.
//!
//! - The waiter stores its waker, sets `parked`, fences, then checks the ring once more;
//!   only if that check finds nothing does it return `Pending`.
//! - The ringer changes the ring (a push publishes the tail, a pop the head), fences, then
//!   reads `parked`; if it is set, it clears it and wakes the stored waker.
//!
//! Of the two fences one comes first in their single total order, so either the waiter's
//! re-check sees the ringer's change, or the ringer sees `parked` and wakes the waiter.
//!
//! # No lock on the data path
//!
//! While neither side is parked, ringing costs a fence and a load of a flag that stays in
//! both caches. The waker slot is a `Mutex`, taken only to park and to wake a parked side:
//! the crate forbids `unsafe`, which an `AtomicWaker`'s cell would need, and the slow path
//! around a park (a foreign wake is an eventfd write in glommio) dwarfs an uncontended lock.

use std::{
    fmt,
    sync::{
        Mutex, PoisonError,
        atomic::{AtomicBool, Ordering, fence},
    },
    task::{Context, Poll, Waker},
    time::{Duration, Instant},
};

/// Where one waiting side of a ring parks, and how the other side wakes it.
#[derive(Default)]
pub(crate) struct Bell {
    /// Set by the waiter before its last check, cleared by whoever wakes it.
    parked: AtomicBool,
    /// The waker of the last park. Locked only to park and to wake a parked waiter.
    waker: Mutex<Option<Waker>>,
}

impl Bell {
    /// Leaves `waker` here and announces the park. The caller must check the ring again
    /// afterwards and return `Pending` only if that check still finds nothing to do.
    pub(crate) fn arm(&self, waker: &Waker) {
        if waker.will_wake(Waker::noop()) {
            // A poll that will not park (the dataflow driver's busy rounds): a wake-up
            // would do nothing, and announcing the park would make the ringer's next ring
            // miss the flag's cache line and take the lock. A park left by an earlier
            // real waker stays: at worst one spurious wake-up.
            return;
        }
        {
            let mut slot = self.waker.lock().unwrap_or_else(PoisonError::into_inner);
            if !slot.as_ref().is_some_and(|w| w.will_wake(waker)) {
                *slot = Some(waker.clone());
            }
        }
        // SeqCst store: the ringer's acquiring swap of `true` also sees the waker above.
        self.parked.store(true, Ordering::SeqCst);
        fence(Ordering::SeqCst);
    }

    /// Withdraws a park the waiter no longer needs (its re-check or a spurious poll found
    /// work), so the ringer stops paying for a wake-up nobody waits for.
    pub(crate) fn disarm(&self) {
        self.parked.store(false, Ordering::Relaxed);
    }

    /// Wakes the waiter if it is parked. Call after every change that may end its wait.
    pub(crate) fn ring(&self) {
        fence(Ordering::SeqCst);
        if self.parked.load(Ordering::Relaxed) && self.parked.swap(false, Ordering::AcqRel) {
            let waker = self.waker.lock().unwrap_or_else(PoisonError::into_inner).take();
            // Woken outside the lock: a foreign wake in glommio may write an eventfd.
            if let Some(waker) = waker {
                waker.wake();
            }
        }
    }

    #[cfg(test)]
    pub(crate) fn is_parked(&self) -> bool {
        self.parked.load(Ordering::SeqCst)
    }
}

impl fmt::Debug for Bell {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Bell").field("parked", &self.parked.load(Ordering::Relaxed)).finish_non_exhaustive()
    }
}

/// The spin-then-park policy of one wait (one `send`, `recv` or `recv_any` call).
///
/// While the wait is younger than `spin_before_park`, a poll that finds nothing to do
/// wakes its own task and returns `Pending`: the task is polled again as soon as the
/// executor has run its other ready tasks, so the shard keeps serving them while it spins.
/// After that the wait parks on its [`Bell`].
#[derive(Debug)]
pub(crate) struct Spin {
    spin_before_park: Duration,
    deadline: Option<Instant>,
    armed: bool,
}

impl Spin {
    pub(crate) fn new(spin_before_park: Duration) -> Self {
        Spin { spin_before_park, deadline: None, armed: false }
    }

    /// One poll of the wait: `attempt` until it returns `Some`, spinning and then parking
    /// on `bell` in between. After parking, `attempt` runs once more before `Pending`.
    pub(crate) fn poll<R>(&mut self, bell: &Bell, cx: &Context<'_>, mut attempt: impl FnMut() -> Option<R>) -> Poll<R> {
        let done = match attempt() {
            Some(done) => done,
            None if self.keep_spinning(cx) => return Poll::Pending,
            None => {
                bell.arm(cx.waker());
                self.armed = true;
                match attempt() {
                    Some(done) => done,
                    None => return Poll::Pending,
                }
            }
        };
        if self.armed {
            // The park is no longer needed: the ringer need not pay for a wake-up.
            bell.disarm();
            self.armed = false;
        }
        Poll::Ready(done)
    }

    /// Whether the wait should poll again rather than park; if so the task has been woken.
    fn keep_spinning(&mut self, cx: &Context<'_>) -> bool {
        if self.spin_before_park.is_zero() || self.armed {
            return false;
        }
        let now = Instant::now();
        let deadline = *self.deadline.get_or_insert(now + self.spin_before_park);
        if now < deadline {
            cx.waker().wake_by_ref();
            true
        } else {
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use std::{
        sync::{
            Arc,
            atomic::{AtomicUsize, Ordering},
        },
        task::Wake,
    };

    use super::*;

    struct CountingWaker(AtomicUsize);

    impl Wake for CountingWaker {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    #[test]
    fn a_bell_wakes_only_a_parked_waiter_and_only_once() {
        let count = Arc::new(CountingWaker(AtomicUsize::new(0)));
        let waker = Waker::from(count.clone());
        let bell = Bell::default();

        bell.ring();
        assert_eq!(count.0.load(Ordering::SeqCst), 0, "nobody parked");

        bell.arm(&waker);
        assert!(bell.is_parked());
        bell.ring();
        bell.ring();
        assert_eq!(count.0.load(Ordering::SeqCst), 1, "one park, one wake");
        assert!(!bell.is_parked());

        bell.arm(&waker);
        bell.disarm();
        bell.ring();
        assert_eq!(count.0.load(Ordering::SeqCst), 1, "a withdrawn park is not woken");
    }

    #[test]
    fn a_poll_with_the_noop_waker_does_not_park_nor_replace_a_real_park() {
        let count = Arc::new(CountingWaker(AtomicUsize::new(0)));
        let waker = Waker::from(count.clone());
        let bell = Bell::default();

        bell.arm(Waker::noop());
        assert!(!bell.is_parked(), "nothing to wake: no park announced");

        bell.arm(&waker);
        bell.arm(Waker::noop());
        assert!(bell.is_parked());
        bell.ring();
        assert_eq!(count.0.load(Ordering::SeqCst), 1, "the real waiter is still woken");
    }

    #[test]
    fn a_wait_spins_until_its_deadline_then_parks_and_checks_once_more() {
        let count = Arc::new(CountingWaker(AtomicUsize::new(0)));
        let waker = Waker::from(count.clone());
        let cx = Context::from_waker(&waker);
        let bell = Bell::default();
        let nothing = || None::<()>;

        let mut spin = Spin::new(Duration::from_secs(3600));
        assert!(spin.poll(&bell, &cx, nothing).is_pending());
        assert_eq!(count.0.load(Ordering::SeqCst), 1, "a spinning poll wakes its own task");
        assert!(!bell.is_parked(), "a spinning wait does not park");

        let mut short = Spin::new(Duration::from_nanos(1));
        assert!(short.poll(&bell, &cx, nothing).is_pending());
        std::thread::sleep(Duration::from_millis(1));
        let mut attempts = 0;
        assert!(
            short
                .poll(&bell, &cx, || {
                    attempts += 1;
                    None::<()>
                })
                .is_pending()
        );
        assert!(bell.is_parked(), "past the deadline the wait parks");
        assert_eq!(attempts, 2, "a parking wait checks once more after arming");

        let mut attempts = 0;
        let found = short.poll(&bell, &cx, || {
            attempts += 1;
            (attempts == 1).then_some(7)
        });
        assert_eq!(found, Poll::Ready(7));
        assert!(!bell.is_parked(), "a wait that ends withdraws its park");

        let mut no_spin = Spin::new(Duration::ZERO);
        assert!(no_spin.poll(&bell, &cx, nothing).is_pending());
        assert!(bell.is_parked(), "zero spin parks at once");
    }
}
