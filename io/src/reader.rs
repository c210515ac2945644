//! A sequential reader over a partition log with read-ahead: while the caller works on
//! one read's batches, the next read is already in flight, so a consumer that keeps up
//! with the disk sees its bandwidth rather than its latency.

use crate::error::Result;
use crate::log::Log;
use crate::segment::ReadBatches;
use crate::storage::{Storage, UringStorage};
use crate::types::Offset;

/// Reads a log from a position onwards, one read ahead of the caller.
///
/// ```no_run
/// # async fn example(log: sluice_io::Log) -> sluice_io::Result<()> {
/// let mut reader = log.reader(log.start_offset(), 1 << 20);
/// loop {
///     let batches = reader.next().await?;
///     if batches.is_empty() {
///         break; // at the end of the log, for now
///     }
///     for record in batches.records() {
///         let record = record?;
///         println!("{} {} bytes", record.offset(), record.value_bytes().len());
///     }
/// }
/// # Ok(())
/// # }
/// ```
pub struct LogReader<S: Storage = UringStorage> {
    log: Log<S>,
    next: Offset,
    max_bytes: usize,
    ahead: Option<glommio::Task<Result<ReadBatches>>>,
}

impl<S: Storage> std::fmt::Debug for LogReader<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LogReader").field("next", &self.next).field("max_bytes", &self.max_bytes).finish()
    }
}

impl<S: Storage> LogReader<S> {
    pub(crate) fn new(log: Log<S>, from: Offset, max_bytes: usize) -> LogReader<S> {
        LogReader { log, next: from, max_bytes, ahead: None }
    }

    /// The offset the next read starts at.
    #[must_use]
    pub fn position(&self) -> Offset {
        self.next
    }

    /// Moves the reader; a read already in flight is cancelled.
    pub fn seek(&mut self, to: Offset) {
        self.ahead = None;
        self.next = to;
    }

    /// The next batches (as [`Log::read`] returns them), starting the read after them
    /// before returning. Empty at the end of the log; call again to wait for more.
    pub async fn next(&mut self) -> Result<ReadBatches> {
        let batches = match self.ahead.take() {
            Some(task) => task.await?,
            None => self.log.read(self.next, self.max_bytes).await?,
        };
        if batches.is_empty() {
            return Ok(batches);
        }
        self.next = batches.next_offset();
        let (log, at, max) = (self.log.clone(), self.next, self.max_bytes);
        self.ahead = Some(glommio::spawn_local(async move { log.read(at, max).await }));
        Ok(batches)
    }
}

impl<S: Storage> Log<S> {
    /// A sequential reader from `from`, reading about `max_bytes` at a time, one read
    /// ahead.
    #[must_use]
    pub fn reader(&self, from: Offset, max_bytes: usize) -> LogReader<S> {
        LogReader::new(self.clone(), from, max_bytes)
    }
}
