//! The timers of one keyed process operator on one shard: one queue per time domain.
//!
//! A timer is a (key, time) pair, registered at most once (registering it again is a
//! no-op, as in Flink), and fires once its time has passed. The queue needs only
//! `K: Hash + Eq + Clone`: timers are ordered by (time, registration number) in a
//! `BTreeMap`, and an index from (key, time) to that number finds a timer to delete. Both
//! registering and deleting cost O(log n) and deleting frees the timer at once, so a
//! function that moves a key's timeout forward on every record (delete, register) holds one
//! timer per key, not one per record. Timers of one time fire in the order they were
//! registered.

use std::{collections::BTreeMap, hash::Hash};

use rustc_hash::FxHashMap;
use sluice_io::EventTime;

#[derive(Debug)]
pub(crate) struct TimerQueue<K> {
    by_time: BTreeMap<(EventTime, u64), K>,
    index: FxHashMap<(K, EventTime), u64>,
    next_seq: u64,
}

impl<K> Default for TimerQueue<K> {
    fn default() -> Self {
        TimerQueue { by_time: BTreeMap::new(), index: FxHashMap::default(), next_seq: 0 }
    }
}

impl<K: Hash + Eq + Clone> TimerQueue<K> {
    /// Registers the timer (key, time); false if it already was.
    pub(crate) fn register(&mut self, key: &K, time: EventTime) -> bool {
        let seq = self.next_seq;
        match self.index.entry((key.clone(), time)) {
            std::collections::hash_map::Entry::Occupied(_) => false,
            std::collections::hash_map::Entry::Vacant(slot) => {
                slot.insert(seq);
                self.next_seq += 1;
                self.by_time.insert((time, seq), key.clone());
                true
            }
        }
    }

    /// Deletes the timer (key, time); false if there was none.
    pub(crate) fn delete(&mut self, key: &K, time: EventTime) -> bool {
        match self.index.remove(&(key.clone(), time)) {
            Some(seq) => {
                self.by_time.remove(&(time, seq));
                true
            }
            None => false,
        }
    }

    /// The earliest timer's time.
    pub(crate) fn next_time(&self) -> Option<EventTime> {
        self.by_time.first_key_value().map(|((time, _), _)| *time)
    }

    /// Removes and returns the earliest timer if its time is at or before `upto`.
    pub(crate) fn pop_due(&mut self, upto: EventTime) -> Option<(EventTime, K)> {
        let entry = self.by_time.first_entry()?;
        let time = entry.key().0;
        if time > upto {
            return None;
        }
        let key = entry.remove();
        self.index.remove(&(key.clone(), time));
        Some((time, key))
    }

    /// Every timer, in firing order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (EventTime, &K)> + '_ {
        self.by_time.iter().map(|((time, _), key)| (*time, key))
    }

    /// How many timers are registered.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.by_time.len()
    }

    /// Removes every timer.
    pub(crate) fn clear(&mut self) {
        self.by_time = BTreeMap::new();
        self.index = FxHashMap::default();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(ms: i64) -> EventTime {
        EventTime::from_millis(ms)
    }

    #[test]
    fn timers_fire_in_time_then_registration_order_once_each() {
        let mut q = TimerQueue::default();
        assert!(q.register(&"b", t(20)));
        assert!(q.register(&"a", t(10)));
        assert!(q.register(&"c", t(20)));
        assert!(!q.register(&"b", t(20)), "a timer is registered once per key and time");
        assert_eq!(q.len(), 3);
        assert_eq!(q.next_time(), Some(t(10)));
        assert_eq!(q.pop_due(t(9)), None);
        assert_eq!(q.pop_due(t(25)), Some((t(10), "a")));
        assert_eq!(q.pop_due(t(25)), Some((t(20), "b")));
        assert_eq!(q.pop_due(t(25)), Some((t(20), "c")));
        assert_eq!(q.pop_due(t(25)), None);
        assert!(q.register(&"b", t(20)), "a fired timer can be registered again");
    }

    #[test]
    fn a_deleted_timer_is_gone_and_can_come_back() {
        let mut q = TimerQueue::default();
        q.register(&1u32, t(5));
        q.register(&2u32, t(5));
        assert!(q.delete(&1, t(5)));
        assert!(!q.delete(&1, t(5)));
        assert!(!q.delete(&2, t(6)));
        assert_eq!(q.len(), 1);
        // Moving a timeout forward on every record keeps one timer per key.
        for time in 6..100 {
            q.delete(&2, t(time - 1));
            q.register(&2, t(time));
        }
        assert_eq!(q.len(), 1);
        assert_eq!(q.pop_due(EventTime::MAX), Some((t(99), 2)));
        assert_eq!(q.len(), 0);
        q.register(&3, t(1));
        q.clear();
        assert_eq!(q.next_time(), None);
    }
}
