//! The channel sink: records handed to host code through a bounded in-process channel.
//!
//! A full channel is backpressure: what the channel refuses waits in the sink, which is
//! then pending, and the shard's driver pulls no new source records until the host has
//! taken some. (The other sinks: `Stream::for_each`, a callback; `Stream::print`, stdout;
//! the topic sink in `topic`.)

use std::{
    cell::RefCell,
    collections::VecDeque,
    future::Future,
    pin::Pin,
    rc::Rc,
    task::{Context, Poll},
};

use sluice_io::EventTime;

use super::{Event, Operator, Stream, operator::Shared, scope::Pending};

type SendFuture = Pin<Box<dyn Future<Output = bool>>>;

struct ChannelSink<T> {
    tx: async_channel::Sender<Event<T>>,
    queue: VecDeque<Event<T>>,
    sending: Option<SendFuture>,
}

impl<T: 'static> Operator<T> for ChannelSink<T> {
    fn on_batch(&mut self, batch: &mut Vec<Event<T>>) {
        for event in batch.drain(..) {
            if !self.queue.is_empty() || self.sending.is_some() {
                self.queue.push_back(event);
                continue;
            }
            match self.tx.try_send(event) {
                Ok(()) | Err(async_channel::TrySendError::Closed(_)) => {}
                Err(async_channel::TrySendError::Full(event)) => self.queue.push_back(event),
            }
        }
    }
    fn on_watermark(&mut self, _: EventTime) {}
    fn on_idle(&mut self, _: bool) {}
    fn on_end(&mut self) {}
}

impl<T: 'static> Pending for ChannelSink<T> {
    /// What it holds was emitted before the shard halted: it reaches the host.
    fn flush_before_halt(&self) -> bool {
        true
    }

    fn poll_flush(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        loop {
            if let Some(sending) = &mut self.sending {
                match sending.as_mut().poll(cx) {
                    Poll::Pending => return Poll::Pending,
                    Poll::Ready(open) => {
                        self.sending = None;
                        if !open {
                            // The host dropped its receiver: nobody will take these.
                            self.queue.clear();
                        }
                    }
                }
            }
            let Some(event) = self.queue.pop_front() else { return Poll::Ready(()) };
            match self.tx.try_send(event) {
                Ok(()) => {}
                Err(async_channel::TrySendError::Closed(_)) => self.queue.clear(),
                Err(async_channel::TrySendError::Full(event)) => {
                    let tx = self.tx.clone();
                    self.sending = Some(Box::pin(async move { tx.send(event).await.is_ok() }));
                }
            }
        }
    }
}

impl<T: 'static> Stream<T> {
    /// Sends every record, with its event time, into `tx`, a channel host code reads. A
    /// bounded channel that is full holds the pipeline back. Each shard sends into its own
    /// clone of `tx`, so the receiver sees the channel close when every shard has finished.
    pub fn to_channel(self, tx: async_channel::Sender<Event<T>>) {
        let sink = Rc::new(RefCell::new(ChannelSink { tx, queue: VecDeque::new(), sending: None }));
        self.scope.add_pending(sink.clone());
        self.attach(Shared(sink));
    }
}
