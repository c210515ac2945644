//! The output side every window operator shares: results, the late stream, and the late
//! counters, flushed downstream once per input batch or watermark.

use std::sync::Arc;

use sluice_io::EventTime;

use super::{Firing, LatePolicy, Window, WindowResult, WindowSpec};
use crate::dataflow::metrics::LateCells;
use crate::dataflow::{Event, Port, checkpoint::Barrier};

pub(crate) struct Emit<K, T, R> {
    out: Port<WindowResult<K, R>>,
    results: Vec<Event<WindowResult<K, R>>>,
    pub(crate) spec: WindowSpec<K, T>,
    late: Vec<Event<T>>,
    late_cells: Arc<LateCells>,
    dropped: u64,
    side: u64,
    updates: u64,
}

impl<K: 'static, T: 'static, R: 'static> Emit<K, T, R> {
    pub(crate) fn new(out: Port<WindowResult<K, R>>, spec: WindowSpec<K, T>, late_cells: Arc<LateCells>) -> Self {
        Emit { out, results: Vec::new(), spec, late: Vec::new(), late_cells, dropped: 0, side: 0, updates: 0 }
    }

    /// Queues one result; it carries the window's last instant as its event time.
    #[inline]
    pub(crate) fn result(&mut self, key: K, window: Window, value: R, firing: Firing) {
        if firing == Firing::Update {
            self.updates += 1;
        }
        self.results.push(Event { time: window.max_timestamp(), value: WindowResult { key, window, value, firing } });
    }

    /// A record no window would take: dropped and counted, or sent to the late stream.
    pub(crate) fn late(&mut self, event: Event<T>) {
        match (self.spec.policy, &self.spec.late) {
            (LatePolicy::SideOutput, Some(_)) => {
                self.side += 1;
                self.late.push(event);
            }
            _ => self.dropped += 1,
        }
    }

    /// Whether late records may still update fired windows, and the lateness in ms.
    pub(crate) fn keeps_fired(&self) -> bool {
        self.spec.policy == LatePolicy::Update && self.spec.lateness > 0
    }

    /// Sends what is queued downstream.
    pub(crate) fn flush(&mut self) {
        self.out.borrow_mut().push(&mut self.results);
        if let Some(late) = &self.spec.late {
            late.borrow_mut().push(&mut self.late);
        }
        let cells = &self.late_cells;
        cells.dropped.add(std::mem::take(&mut self.dropped));
        cells.side_output.add(std::mem::take(&mut self.side));
        cells.updates.add(std::mem::take(&mut self.updates));
    }

    pub(crate) fn watermark(&mut self, watermark: EventTime) {
        self.flush();
        self.out.borrow_mut().watermark_to(watermark);
        if let Some(late) = &self.spec.late {
            late.borrow_mut().watermark_to(watermark);
        }
    }

    pub(crate) fn idle(&mut self, idle: bool) {
        self.flush();
        self.out.borrow_mut().set_idle(idle);
        if let Some(late) = &self.spec.late {
            late.borrow_mut().set_idle(idle);
        }
    }

    pub(crate) fn barrier(&mut self, barrier: Barrier) {
        self.flush();
        self.out.borrow_mut().barrier(barrier);
        if let Some(late) = &self.spec.late {
            late.borrow_mut().barrier(barrier);
        }
    }

    pub(crate) fn end(&mut self) {
        self.flush();
        self.out.borrow_mut().end();
        if let Some(late) = &self.spec.late {
            late.borrow_mut().end();
        }
    }
}
