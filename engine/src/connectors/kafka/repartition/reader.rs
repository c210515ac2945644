//! [`RepartitionSource`]: one shard's reader of the repartition topic, turning the
//! writers' watermark records into the punctuation of its stream.

use std::{
    collections::{BTreeMap, HashMap},
    sync::Arc,
    task::{Context, Poll},
};

use sluice_io::EventTime;

use super::{KafkaConnectorError, Shared, WATERMARK_HEADER};
use crate::connectors::kafka::{KafkaRecord, KafkaSource};
use crate::dataflow::{Data, Source, UserError};

/// What the reader emits: a record with its event time, or the reader's watermark (a
/// punctuation, dropped right after the source by
/// [`Repartition::key_by_through`](super::Repartition::key_by_through)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Through<T> {
    /// A record and its event time.
    Data(T, EventTime),
    /// The reader's watermark.
    Watermark(EventTime),
}

impl<T> Through<T> {
    /// The event time: the record's, or the watermark itself.
    pub fn time(&self) -> EventTime {
        match self {
            Through::Data(_, t) | Through::Watermark(t) => *t,
        }
    }

    /// The punctuation this item carries.
    #[must_use]
    pub fn watermark(&self) -> Option<EventTime> {
        match self {
            Through::Watermark(w) => Some(*w),
            Through::Data(..) => None,
        }
    }

    /// The record, if this is one.
    pub fn into_data(self) -> Option<T> {
        match self {
            Through::Data(v, _) => Some(v),
            Through::Watermark(_) => None,
        }
    }
}

/// A repartition topic's record as the consumer decodes it.
enum Decoded<T> {
    Data(T, EventTime),
    Mark { partition: i32, writer: u64, watermark: EventTime },
    Bad(String),
}

type Decode<T> = Box<dyn FnMut(KafkaRecord<'_>) -> Decoded<T>>;

fn decode<T: Data>(r: &KafkaRecord<'_>) -> Decoded<T> {
    let value = r.value.unwrap_or_default();
    let at = |what: &str| format!("{what} at partition {} offset {}", r.partition, r.offset);
    let Some((time, mut rest)) = value.split_first_chunk::<8>() else {
        return Decoded::Bad(at("a record shorter than its event time"));
    };
    let time = EventTime::from_millis(i64::from_le_bytes(*time));
    if let Some(h) = r.headers().find(|h| h.key == WATERMARK_HEADER) {
        let writer = std::str::from_utf8(h.value.unwrap_or_default()).ok().and_then(|s| s.parse::<u64>().ok());
        return match writer {
            Some(writer) => Decoded::Mark { partition: r.partition, writer, watermark: time },
            None => Decoded::Bad(at("a watermark record without a writer number")),
        };
    }
    match T::decode(&mut rest) {
        Ok(v) if rest.is_empty() => Decoded::Data(v, time),
        Ok(_) => Decoded::Bad(at("trailing bytes after a record")),
        Err(e) => Decoded::Bad(at(&format!("an undecodable record ({e})"))),
    }
}

/// One shard's reader of the repartition topic (made by
/// [`Repartition::key_by_through`](super::Repartition::key_by_through)): a Kafka source in
/// the job's consumer group whose watermark is the minimum over the partitions it holds of
/// the minimum over every writer's last watermark record there.
pub struct RepartitionSource<T> {
    shared: Arc<Shared>,
    shard: usize,
    inner: KafkaSource<Decoded<T>, Decode<T>>,
    marks: Marks,
    /// The last watermark emitted.
    emitted: EventTime,
    scratch: Vec<Decoded<T>>,
}

impl<T> std::fmt::Debug for RepartitionSource<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RepartitionSource")
            .field("writers", &self.marks.writers)
            .field("emitted", &self.emitted)
            .finish_non_exhaustive()
    }
}

impl<T: Data> RepartitionSource<T> {
    pub(super) fn new(shared: Arc<Shared>, shard: usize, shards: usize) -> Result<Self, KafkaConnectorError> {
        let decode: Decode<T> = Box::new(|r| decode(&r));
        let writers = u64::from(shared.config.instances) * shards as u64;
        let inner = if shared.config.fixed_assignment {
            let reader = u64::from(shared.config.instance) * shards as u64 + shard as u64;
            let partitions = (0..shared.partitions).filter(|p| u64::from(*p) % writers == reader).map(|p| p as i32);
            shared.readers.instance_fixed(shard, partitions.collect(), decode)?
        } else {
            shared.readers.instance(shard, decode)?
        };
        if writers > MAX_WRITERS {
            return Err(KafkaConnectorError::Config(format!(
                "{writers} writers (instances * shards): a checkpoint can name at most {MAX_WRITERS}"
            )));
        }
        let marks = Marks::new(writers);
        Ok(RepartitionSource { shared, shard, inner, marks, emitted: EventTime::MIN, scratch: Vec::new() })
    }
}

/// The bit that marks a checkpointed position as a writer's watermark on a partition
/// rather than a partition's offset: `MARK | partition << 31 | writer`, the watermark's
/// milliseconds as the position.
const MARK: u64 = 1 << 63;
/// The most writers a checkpoint can name (31 bits).
const MAX_WRITERS: u64 = 1 << 31;

/// The writers' last watermark records, per partition.
#[derive(Debug)]
struct Marks {
    /// How many writers the job has (`instances * shards`).
    writers: u64,
    /// Per partition, each writer's last watermark.
    by_partition: HashMap<i32, BTreeMap<u64, EventTime>>,
}

impl Marks {
    fn new(writers: u64) -> Self {
        Marks { writers, by_partition: HashMap::new() }
    }

    /// Takes writer `writer`'s watermark record on `partition`; an error for a writer
    /// number beyond the job's writers.
    fn mark(&mut self, partition: i32, writer: u64, watermark: EventTime) -> Result<(), String> {
        if writer >= self.writers {
            return Err(format!(
                "repartition reader: a watermark from writer {writer} on partition {partition}, but the job has {} \
                 writers (instances * shards): does every instance run as many shards?",
                self.writers
            ));
        }
        let at = self.by_partition.entry(partition).or_default().entry(writer).or_insert(EventTime::MIN);
        *at = (*at).max(watermark);
        Ok(())
    }

    /// The watermark over the partitions `held`: per partition the minimum over the
    /// writers (`EventTime::MIN` until every writer has written one there), and the
    /// minimum of those; `None` when nothing is held.
    fn watermark(&self, held: &[i32]) -> Option<EventTime> {
        let partition = |p: &i32| match self.by_partition.get(p) {
            Some(m) if m.len() as u64 == self.writers => m.values().copied().min().unwrap_or(EventTime::MIN),
            _ => EventTime::MIN,
        };
        held.iter().map(partition).min()
    }

    /// For a checkpoint: every writer's watermark on each partition of `held`, as
    /// positions keyed with [`MARK`].
    fn snapshot(&self, held: &[i32], out: &mut Vec<(u64, i64)>) {
        for p in held {
            let Ok(partition) = u64::try_from(*p) else { continue };
            for (writer, mark) in self.by_partition.get(p).into_iter().flatten() {
                out.push((MARK | partition << 31 | writer, mark.0));
            }
        }
    }

    /// Takes the watermarks of a restored checkpoint's positions (those keyed with
    /// [`MARK`]); an error for one naming a writer beyond the job's.
    fn restore(&mut self, positions: &HashMap<u64, i64>) -> Result<(), String> {
        for (&key, &mark) in positions.iter().filter(|(k, _)| *k & MARK != 0) {
            let partition = i32::try_from((key & !MARK) >> 31).map_err(|_| format!("a watermark key {key:#x}"))?;
            self.mark(partition, key & (MAX_WRITERS - 1), EventTime::from_millis(mark))?;
        }
        Ok(())
    }
}

impl<T: 'static> Source<Through<T>> for RepartitionSource<T> {
    fn splits(&self) -> usize {
        1
    }

    fn poll_next(&mut self, cx: &mut Context<'_>, out: &mut Vec<Through<T>>, max: usize) -> Poll<Option<usize>> {
        let mut scratch = std::mem::take(&mut self.scratch);
        let polled = self.inner.poll_next(cx, &mut scratch, max);
        for item in scratch.drain(..) {
            match item {
                Decoded::Data(v, t) => out.push(Through::Data(v, t)),
                Decoded::Mark { partition, writer, watermark } => {
                    if let Err(e) = self.marks.mark(partition, writer, watermark) {
                        self.shared.report(e);
                    }
                }
                Decoded::Bad(e) => self.shared.report(format!("repartition reader: {e}")),
            }
        }
        self.scratch = scratch;
        let assigned = self.inner.assigned();
        let watermark = self.marks.watermark(&assigned);
        self.shared.note_assigned(self.shard, assigned);
        if let Some(w) = watermark
            && w > self.emitted
        {
            self.emitted = w;
            out.push(Through::Watermark(w));
        }
        match polled {
            Poll::Ready(Some(_)) => Poll::Ready(Some(0)),
            Poll::Pending if !out.is_empty() => Poll::Ready(Some(0)),
            other => other,
        }
    }

    /// The Kafka source's offsets and, keyed with [`MARK`], every writer's watermark on
    /// each partition this shard reads: the two agree (both as of the barrier), so a
    /// restored reader resumes with the watermarks of the records before its offsets.
    fn positions(&self) -> Option<Vec<(u64, i64)>> {
        let mut positions = self.inner.positions()?;
        self.marks.snapshot(&self.inner.assigned(), &mut positions);
        Some(positions)
    }

    fn restore(&mut self, positions: &HashMap<u64, i64>) -> Result<(), UserError> {
        self.marks.restore(positions).map_err(|e| format!("repartition reader: restoring watermarks: {e}"))?;
        let offsets: HashMap<u64, i64> =
            positions.iter().filter(|(k, _)| *k & MARK == 0).map(|(k, v)| (*k, *v)).collect();
        self.inner.restore(&offsets)
    }

    fn checkpoint_completed(&mut self, positions: &[(u64, i64)]) {
        let offsets: Vec<(u64, i64)> = positions.iter().copied().filter(|(k, _)| k & MARK == 0).collect();
        self.inner.checkpoint_completed(&offsets);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(ms: i64) -> EventTime {
        EventTime::from_millis(ms)
    }

    #[test]
    fn a_partition_waits_for_every_writer() {
        let mut marks = Marks::new(2);
        marks.mark(0, 0, t(100)).unwrap();
        assert_eq!(marks.watermark(&[0]), Some(EventTime::MIN), "writer 1 has not written yet");
        marks.mark(0, 1, t(50)).unwrap();
        assert_eq!(marks.watermark(&[0]), Some(t(50)));
        marks.mark(0, 1, t(200)).unwrap();
        assert_eq!(marks.watermark(&[0]), Some(t(100)), "the slower writer holds it back");
        marks.mark(0, 0, t(90)).unwrap();
        assert_eq!(marks.watermark(&[0]), Some(t(100)), "a writer's watermark never goes back");
    }

    #[test]
    fn the_minimum_over_held_partitions() {
        let mut marks = Marks::new(1);
        marks.mark(0, 0, t(300)).unwrap();
        marks.mark(1, 0, t(100)).unwrap();
        assert_eq!(marks.watermark(&[0, 1]), Some(t(100)));
        assert_eq!(marks.watermark(&[0]), Some(t(300)));
        assert_eq!(marks.watermark(&[0, 2]), Some(EventTime::MIN), "partition 2 has no watermark yet");
        assert_eq!(marks.watermark(&[]), None);
    }

    #[test]
    fn a_writer_out_of_range_is_an_error() {
        let mut marks = Marks::new(2);
        let e = marks.mark(3, 2, t(1)).unwrap_err();
        assert!(e.contains("writer 2 on partition 3") && e.contains("2 writers"), "{e}");
        assert_eq!(marks.watermark(&[3]), Some(EventTime::MIN));
    }

    #[test]
    fn watermarks_round_trip_through_a_checkpoint() {
        let mut marks = Marks::new(3);
        marks.mark(0, 0, t(100)).unwrap();
        marks.mark(0, 2, t(-5)).unwrap();
        marks.mark(5, 1, t(7)).unwrap();
        marks.mark(9, 1, t(8)).unwrap();
        let mut positions = vec![(0, 12), (5, 3)];
        marks.snapshot(&[0, 5], &mut positions);
        assert_eq!(positions.len(), 5, "two offsets, three watermarks (partition 9 is not held): {positions:?}");
        let positions: HashMap<u64, i64> = positions.into_iter().collect();
        let mut restored = Marks::new(3);
        restored.restore(&positions).unwrap();
        assert_eq!(restored.by_partition.len(), 2);
        assert_eq!(restored.by_partition[&0], marks.by_partition[&0]);
        assert_eq!(restored.by_partition[&5], marks.by_partition[&5]);
        restored.mark(0, 1, t(50)).unwrap();
        assert_eq!(restored.watermark(&[0]), Some(t(-5)), "no writer waits again for what it had written");
        let mut fewer = Marks::new(2);
        assert!(fewer.restore(&positions).unwrap_err().contains("writer 2"), "a checkpoint of more writers");
    }

    #[test]
    fn through_items() {
        let d = Through::Data(7u8, t(5));
        assert_eq!((d.time(), d.watermark(), d.into_data()), (t(5), None, Some(7)));
        let w = Through::<u8>::Watermark(t(9));
        assert_eq!((w.time(), w.watermark(), w.into_data()), (t(9), Some(t(9)), None));
    }
}
