//! One ring from one thread: order, backpressure, message kinds, closing, and waits
//! between two tasks of one executor.

use std::time::Duration;

use glommio::LocalExecutor;
use sluice_io::EventTime;

use super::{config, one, record};
use crate::ring::{Control, Message, SendError, TryRecvError, TrySendError, channel};

#[test]
fn order_is_preserved_across_wrap_arounds() {
    let (mut tx, mut rx) = channel::<u64>(config(7, Duration::ZERO));
    let (mut sent, mut received) = (0u64, 0u64);
    // Uneven bursts, so the ring's indices wrap at every offset.
    for burst in (1..=7).cycle().take(500) {
        for _ in 0..burst {
            tx.try_send(one(sent)).expect("room for a burst up to the capacity");
            sent += 1;
        }
        for _ in 0..burst {
            assert_eq!(record(rx.try_recv().expect("queued")), received);
            received += 1;
        }
    }
    assert_eq!(rx.try_recv(), Err(TryRecvError::Empty));
    assert_eq!(sent, received);
}

#[test]
fn every_message_kind_passes() {
    let messages = vec![
        Message::data(vec![1u64, 2, 3]),
        Message::data(Vec::new()),
        Message::Watermark(EventTime::MIN),
        Message::Watermark(sluice_io::Timestamp(42)),
        Message::Barrier(sluice_io::CheckpointId(7)),
        Message::Control(Control::Idle),
        Message::Control(Control::Active),
        Message::EndOfStream,
    ];
    let (mut tx, mut rx) = channel::<u64>(config(messages.len(), Duration::ZERO));
    for message in messages.clone() {
        tx.try_send(message).expect("room");
    }
    let received: Vec<_> = std::iter::from_fn(|| rx.try_recv().ok()).collect();
    assert_eq!(received, messages);
}

#[test]
fn a_batch_crosses_the_ring_without_a_copy() {
    let (mut tx, mut rx) = channel::<u64>(config(1, Duration::ZERO));
    let records: Vec<u64> = (0..1000).collect();
    let ptr = records.as_ptr();
    tx.try_send(Message::data(records)).expect("room");
    let Ok(Message::Data(batch)) = rx.try_recv() else { panic!("expected the batch") };
    assert_eq!(batch.as_ptr(), ptr, "the receiver gets the sender's allocation");
}

#[test]
fn a_recycled_vector_goes_back_to_the_sender_empty_with_its_allocation() {
    let (mut tx, mut rx) = channel::<u64>(config(2, Duration::ZERO));
    assert_eq!(tx.recycled(), None, "nothing given back yet");
    tx.try_send(Message::data(vec![1, 2, 3])).expect("room");
    let Ok(Message::Data(batch)) = rx.try_recv() else { panic!("expected the batch") };
    let records = batch.into_vec();
    let (ptr, capacity) = (records.as_ptr(), records.capacity());
    rx.recycle(records);
    rx.recycle(Vec::new());
    let again = tx.recycled().expect("the vector came back");
    assert_eq!((again.as_ptr(), again.capacity(), again.len()), (ptr, capacity, 0));
    assert_eq!(tx.recycled(), None, "a vector without capacity is not given back");

    // The return path is bounded: beyond capacity + 2 vectors, the rest are dropped.
    for _ in 0..10 {
        rx.recycle(Vec::with_capacity(1));
    }
    assert_eq!(std::iter::from_fn(|| tx.recycled()).count(), 4);
}

#[test]
fn a_full_ring_hands_the_message_back_until_a_recv_makes_room() {
    let (mut tx, mut rx) = channel::<u64>(config(2, Duration::ZERO));
    tx.try_send(one(0)).expect("room");
    tx.try_send(one(1)).expect("room");
    let err = tx.try_send(one(2)).expect_err("the ring is full");
    assert!(err.is_full());
    assert_eq!(format!("{err:?}"), "Full(data)");
    assert_eq!(err.into_inner(), one(2), "the message comes back");

    assert_eq!(record(rx.try_recv().expect("queued")), 0);
    tx.try_send(one(2)).expect("a recv made room");
    assert!(tx.try_send(one(3)).expect_err("full again").is_full());
    let rest: Vec<_> = std::iter::from_fn(|| rx.try_recv().ok()).map(record).collect();
    assert_eq!(rest, [1, 2]);
}

#[test]
#[should_panic(expected = "room for at least one message")]
fn a_ring_without_room_is_refused() {
    let _ = channel::<u64>(config(0, Duration::ZERO));
}

#[test]
fn dropping_the_sender_closes_the_ring_after_what_it_sent() {
    let (mut tx, mut rx) = channel::<u64>(config(4, Duration::ZERO));
    tx.try_send(one(0)).expect("room");
    tx.try_send(Message::EndOfStream).expect("room");
    drop(tx);
    assert!(rx.is_closed());
    assert_eq!(rx.len(), 2);
    assert_eq!(record(rx.try_recv().expect("queued")), 0);
    assert_eq!(rx.try_recv(), Ok(Message::EndOfStream));
    assert_eq!(rx.try_recv(), Err(TryRecvError::Closed));
    LocalExecutor::default().run(async move { assert_eq!(rx.recv().await, None) });
}

#[test]
fn dropping_the_receiver_fails_later_sends_with_the_message() {
    let (mut tx, rx) = channel::<u64>(config(4, Duration::ZERO));
    tx.try_send(one(0)).expect("room");
    drop(rx);
    assert!(tx.is_closed());
    assert!(matches!(tx.try_send(one(1)), Err(TrySendError::Closed(m)) if m == one(1)));
    LocalExecutor::default().run(async move {
        assert_eq!(tx.send(one(2)).await, Err(SendError(one(2))));
    });
}

/// Two tasks of one executor; with no spin, every wait parks and is woken by the other
/// task, so both bells are exercised on every message.
#[test]
fn send_waits_for_room_and_recv_waits_for_data_within_one_executor() {
    for spin in [Duration::ZERO, Duration::from_micros(20)] {
        LocalExecutor::default().run(async move {
            let (mut tx, mut rx) = channel::<u64>(config(1, spin));
            let consumer = glommio::spawn_local(async move {
                let mut next = 0;
                while let Some(message) = rx.recv().await {
                    assert_eq!(record(message), next);
                    next += 1;
                }
                next
            });
            for n in 0..1000 {
                tx.send(one(n)).await.expect("receiver alive");
            }
            drop(tx);
            assert_eq!(consumer.await, 1000);
        });
    }
}
