//! The write-behind appender of the active segment.
//!
//! Batches are encoded in place into aligned DMA buffers (a [`Stage`], committed once the
//! batch is known to fit); a full buffer is submitted to io_uring at once and the next
//! one is filled while it is in flight (up to `write_behind` buffers in flight). A flush
//! submits a copy of the blocks written since the last one, padded with zeros to the
//! direct-I/O alignment, and keeps filling the buffer in place, so the next write
//! rewrites the last, partial block with more data in it.
//!
//! Invariant: two writes that cover the same block are never in flight together; a
//! buffer that starts inside a block an earlier partial write covered waits for that
//! write to complete before it is submitted (io_uring does not order writes).

use std::cell::RefCell;
use std::collections::{BTreeSet, VecDeque};
use std::future::poll_fn;
use std::io;
use std::rc::Rc;
use std::task::{Poll, Waker};

use crate::storage::{DmaBuffer, StorageFile};

/// The filesystem block size the appender aligns its writes to (ext4's and xfs's usual).
pub(crate) const FS_BLOCK_BYTES: usize = 4096;

/// Completion state shared with the in-flight write tasks.
#[derive(Debug, Default)]
struct Tracker {
    /// Every write with a sequence number below this has completed.
    done_below: u64,
    /// Completed writes at or above `done_below` (completions arrive out of order).
    done_ahead: BTreeSet<u64>,
    /// Writes submitted and not completed.
    inflight: usize,
    /// The first write error, if any; the appender is unusable after one.
    error: Option<(Option<i32>, io::ErrorKind, String)>,
    waiters: Vec<Waker>,
    /// Full-size buffers whose writes completed, kept for reuse: a fresh buffer costs a
    /// page fault per page on its first fill.
    spare: Spares,
}

/// Full-size buffers nothing holds any more, up to a bound.
#[derive(Debug, Default)]
struct Spares {
    bufs: Vec<DmaBuffer>,
    /// The size of a full buffer: only those are kept.
    buf_bytes: usize,
    max: usize,
}

impl Spares {
    /// A kept buffer, if any.
    fn take(&mut self) -> Option<DmaBuffer> {
        self.bufs.pop()
    }

    /// Keeps `buf` if it is a full-size one and there is room.
    fn offer(&mut self, buf: DmaBuffer) {
        if buf.len() == self.buf_bytes && self.bufs.len() < self.max {
            self.bufs.push(buf);
        }
    }
}

impl Tracker {
    fn complete(&mut self, seq: u64, result: io::Result<()>) {
        if let Err(e) = result
            && self.error.is_none()
        {
            self.error = Some((e.raw_os_error(), e.kind(), e.to_string()));
        }
        self.inflight -= 1;
        self.done_ahead.insert(seq);
        while self.done_ahead.remove(&self.done_below) {
            self.done_below += 1;
        }
        for w in self.waiters.drain(..) {
            w.wake();
        }
    }

    fn error(&self) -> Option<io::Error> {
        self.error.as_ref().map(|(raw, kind, msg)| match raw {
            Some(code) => io::Error::from_raw_os_error(*code),
            None => io::Error::new(*kind, msg.clone()),
        })
    }
}

/// A point in the write stream to wait for: every write submitted before it completed.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) struct FlushTicket {
    seq: u64,
}

/// The active segment's writer.
#[derive(Debug)]
pub(crate) struct Appender<F: StorageFile> {
    file: Rc<F>,
    align: usize,
    buf_bytes: usize,
    write_behind: usize,
    cur: Option<DmaBuffer>,
    cur_pos: u64,
    cur_len: usize,
    /// The previous write's end (padded) and sequence number.
    last_write: Option<(u64, u64)>,
    /// Sequence numbers of the last `write_behind` full-buffer writes: the backpressure
    /// bound counts these (what holds memory), not the small flush writes.
    full_writes: VecDeque<u64>,
    submitted_end: u64,
    next_seq: u64,
    tracker: Rc<RefCell<Tracker>>,
    /// The last full buffers, oldest first, with their file positions: a reader at the
    /// tail copies from them (and `cur`) instead of waiting for the disk.
    recent: VecDeque<(u64, Rc<DmaBuffer>)>,
}

/// Submitted buffers kept for tail reads.
const RECENT_BUFFERS: usize = 2;

impl<F: StorageFile> Appender<F> {
    /// An appender that continues the file at `end`. `tail` holds the file's bytes from
    /// the aligned block start before `end` up to `end` (empty when `end` is aligned).
    pub(crate) fn new(file: Rc<F>, end: u64, tail: &[u8], buf_bytes: usize, write_behind: usize) -> Self {
        // Pad to the filesystem block, not just the device sector: ext4 serializes a
        // direct write that is not block aligned against every other direct write of the
        // file, which stalled appends behind each interval sync.
        let align = (file.alignment() as usize).max(FS_BLOCK_BYTES);
        let buf_bytes = buf_bytes.max(align).next_multiple_of(align);
        let cur_pos = end - end % align as u64;
        assert_eq!(tail.len() as u64, end - cur_pos, "the tail is the partial block before end");
        let mut cur = file.alloc_buffer(buf_bytes);
        cur.as_bytes_mut()[..tail.len()].copy_from_slice(tail);
        Appender {
            file,
            align,
            buf_bytes,
            write_behind: write_behind.max(1),
            cur: Some(cur),
            cur_pos,
            cur_len: tail.len(),
            last_write: None,
            full_writes: VecDeque::new(),
            submitted_end: end,
            next_seq: 0,
            tracker: Rc::new(RefCell::new(Tracker {
                spare: Spares { bufs: Vec::new(), buf_bytes, max: write_behind.max(1) + RECENT_BUFFERS + 1 },
                ..Tracker::default()
            })),
            recent: VecDeque::new(),
        }
    }

    /// A copy of the file's bytes `[from, from + len)` if they all lie in the buffers the
    /// appender still holds (the current one and the last few submitted), else `None`.
    pub(crate) fn read_tail(&self, from: u64, len: usize) -> Option<rkyv::util::AlignedVec<16>> {
        let to = from + len as u64;
        if to > self.end() {
            return None;
        }
        let oldest = self.recent.front().map_or(self.cur_pos, |(pos, _)| *pos).min(self.cur_pos);
        if from < oldest {
            return None;
        }
        let mut out = rkyv::util::AlignedVec::<16>::with_capacity(len);
        out.resize(len, 0);
        let cur = self.cur.as_ref().map(|b| &b.as_bytes()[..self.cur_len]);
        // Oldest first, so that the newest copy of a rewritten block wins.
        let sources = self.recent.iter().map(|(pos, b)| (*pos, b.as_bytes())).chain(cur.map(|c| (self.cur_pos, c)));
        for (pos, bytes) in sources {
            let (lo, hi) = (from.max(pos), to.min(pos + bytes.len() as u64));
            if lo < hi {
                out[(lo - from) as usize..(hi - from) as usize]
                    .copy_from_slice(&bytes[(lo - pos) as usize..(hi - pos) as usize]);
            }
        }
        Some(out)
    }

    /// The logical end of the data appended so far.
    pub(crate) fn end(&self) -> u64 {
        self.cur_pos + self.cur_len as u64
    }

    /// The first write error, if any.
    pub(crate) fn error(&self) -> Option<io::Error> {
        self.tracker.borrow().error()
    }

    /// Starts appending bytes written in place (a batch encoded straight into the write
    /// buffers): they become part of the stream only when the [`Stage`] is committed, and
    /// a stage dropped uncommitted leaves the appender as it was.
    pub(crate) fn stage(&mut self) -> Stage<'_, F> {
        let tail = self.cur_len;
        Stage { app: self, more: Vec::new(), len: 0, tail }
    }

    /// Submits everything appended so far (the last block padded) and returns the ticket
    /// to wait on. Cheap when nothing new was appended.
    pub(crate) fn start_flush(&mut self) -> FlushTicket {
        if self.end() > self.submitted_end {
            self.submit(true, None);
        }
        FlushTicket { seq: self.next_seq }
    }

    /// A handle to wait on tickets without borrowing the appender.
    pub(crate) fn handle(&self) -> TrackerHandle {
        TrackerHandle(self.tracker.clone())
    }

    /// The ticket that bounds write-behind for an append that just copied its bytes: it
    /// is ready once fewer than `write_behind` of the full-buffer writes submitted so far
    /// are in flight (small flush writes hold little memory and are not counted).
    /// Each append waits on its own ticket, fixed when it appended, so a task that keeps
    /// appending cannot take every freed slot from the tasks already waiting.
    pub(crate) fn room_ticket(&self) -> FlushTicket {
        match self.full_writes.front() {
            Some(&oldest) if self.full_writes.len() >= self.write_behind => FlushTicket { seq: oldest + 1 },
            _ => FlushTicket { seq: 0 },
        }
    }

    /// Submits what `cur` holds beyond what was already submitted: the whole buffer when
    /// it is full and nothing of it went out yet (zero-copy: the buffer itself goes to
    /// io_uring and a spare one takes its place), else a copy of the new blocks (a flush
    /// of a partly filled buffer, or the rest of a buffer partly flushed before), padded
    /// to the block. `cur` then stays in place, so a flush allocates only what it writes.
    /// A full buffer is replaced by `next` (a staged one, already filled) or a spare.
    fn submit(&mut self, partial: bool, next: Option<DmaBuffer>) {
        let len = self.cur_len;
        let sent = (self.submitted_end.max(self.cur_pos) - self.cur_pos) as usize;
        let from = sent - sent % self.align;
        let to = if partial { len.next_multiple_of(self.align) } else { len };
        let pos = self.cur_pos + from as u64;
        let seq = self.next_seq;
        self.next_seq += 1;
        // A write that starts inside the block the previous one ended in rewrites it, and
        // must not overtake it.
        let wait_below = match self.last_write {
            Some((end, prev)) if end > pos => prev + 1,
            _ => 0,
        };
        let cur = self.cur.as_mut().expect("the appender always holds a buffer");
        let copy = (partial || from > 0).then(|| {
            let mut copy = self.file.alloc_buffer(to - from);
            copy.as_bytes_mut()[..len - from].copy_from_slice(&cur.as_bytes()[from..len]);
            copy.as_bytes_mut()[len - from..].fill(0);
            copy
        });
        let buf = if partial {
            Rc::new(copy.expect("a flush writes a copy"))
        } else {
            // The full buffer retires into the read cache, written as it is (zero-copy)
            // or through the copy of its unflushed rest; a recycled one takes its place.
            let next = next.unwrap_or_else(|| fresh_buffer(&self.tracker, &*self.file, self.buf_bytes));
            let full = Rc::new(std::mem::replace(cur, next));
            self.recent.push_back((self.cur_pos, full.clone()));
            if self.recent.len() > RECENT_BUFFERS
                && let Some((_, old)) = self.recent.pop_front()
                && let Ok(old) = Rc::try_unwrap(old)
            {
                // Its write completed: the buffer can be filled again.
                self.tracker.borrow_mut().spare.offer(old);
            }
            copy.map_or(full, Rc::new)
        };
        self.submitted_end = self.cur_pos + len as u64;
        if !partial {
            self.cur_pos += len as u64;
            self.cur_len = 0;
            self.full_writes.push_back(seq);
            if self.full_writes.len() > self.write_behind {
                self.full_writes.pop_front();
            }
        }
        self.last_write = Some((pos + (to - from) as u64, seq));
        self.tracker.borrow_mut().inflight += 1;
        let file = self.file.clone();
        let tracker = self.tracker.clone();
        glommio::spawn_local(async move {
            if wait_below > 0 {
                wait_done(&tracker, wait_below).await;
            }
            let want = buf.len();
            let result = match file.write_at(buf.clone(), pos).await {
                Ok(n) if n == want => Ok(()),
                // A direct write to a regular file stops short when the device fills up.
                Ok(n) => Err(io::Error::new(
                    io::ErrorKind::StorageFull,
                    format!("short write: {n} of {want} bytes (the device is full)"),
                )),
                Err(e) => Err(e),
            };
            let mut t = tracker.borrow_mut();
            if let Ok(buf) = Rc::try_unwrap(buf) {
                t.spare.offer(buf);
            }
            t.complete(seq, result);
        })
        .detach();
    }
}

/// Bytes written in place after the appender's end: first into the rest of the current
/// buffer, then into buffers of their own, none submitted until [`commit`](Stage::commit).
/// Positions count from the stage's first byte.
pub(crate) struct Stage<'a, F: StorageFile> {
    app: &'a mut Appender<F>,
    /// The buffers after the current one, in order.
    more: Vec<DmaBuffer>,
    len: usize,
    /// Bytes used of the buffer being filled (the last of `more`, or the current one).
    tail: usize,
}

/// Piece `i` of a stage: 0 is the rest of the current buffer (from `first`), then one per
/// buffer of its own; the last piece (`last`) ends at `tail`.
#[derive(Clone, Copy)]
struct Layout {
    first: usize,
    last: usize,
    tail: usize,
    buf_bytes: usize,
}

impl Layout {
    fn range(self, i: usize) -> std::ops::Range<usize> {
        let start = if i == 0 { self.first } else { 0 };
        let end = if i == self.last { self.tail } else { self.buf_bytes };
        start..end
    }
}

impl<F: StorageFile> Stage<'_, F> {
    /// Bytes staged.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Where the staged pieces lie in their buffers.
    fn layout(&self) -> Layout {
        Layout { first: self.app.cur_len, last: self.more.len(), tail: self.tail, buf_bytes: self.app.buf_bytes }
    }

    /// The staged bytes, in order, as the pieces the buffers hold.
    fn pieces(&self) -> impl Iterator<Item = &[u8]> + '_ {
        let (cur, layout) = (self.app.cur.as_ref().expect("the appender always holds a buffer"), self.layout());
        std::iter::once(cur).chain(&self.more).enumerate().map(move |(i, b)| &b.as_bytes()[layout.range(i)])
    }

    /// The buffer being filled.
    fn last(&mut self) -> &mut [u8] {
        match self.more.last_mut() {
            Some(b) => b.as_bytes_mut(),
            None => self.app.cur.as_mut().expect("the appender always holds a buffer").as_bytes_mut(),
        }
    }

    /// A write that fills the buffer being filled and goes on into fresh ones.
    fn write_spanning(&mut self, mut bytes: &[u8]) {
        while !bytes.is_empty() {
            if self.tail == self.app.buf_bytes {
                self.more.push(fresh_buffer(&self.app.tracker, &*self.app.file, self.app.buf_bytes));
                self.tail = 0;
            }
            let n = (self.app.buf_bytes - self.tail).min(bytes.len());
            let tail = self.tail;
            self.last()[tail..tail + n].copy_from_slice(&bytes[..n]);
            self.tail += n;
            self.len += n;
            bytes = &bytes[n..];
        }
    }

    /// Makes the staged bytes part of the stream, submitting each buffer they fill.
    pub(crate) fn commit(mut self) {
        let mut more = std::mem::take(&mut self.more).into_iter();
        let mut left = self.len;
        let app = &mut *self.app;
        while left > 0 {
            let n = (app.buf_bytes - app.cur_len).min(left);
            app.cur_len += n;
            left -= n;
            if app.cur_len == app.buf_bytes {
                app.submit(false, more.next());
            }
        }
        debug_assert!(more.next().is_none(), "every staged buffer was filled");
    }
}

impl<F: StorageFile> Drop for Stage<'_, F> {
    fn drop(&mut self) {
        // Uncommitted (or committed: then `more` is empty): the extra buffers are spares.
        let mut t = self.app.tracker.borrow_mut();
        for b in self.more.drain(..) {
            t.spare.offer(b);
        }
    }
}

impl<F: StorageFile> rkyv::ser::Positional for Stage<'_, F> {
    #[inline(always)]
    fn pos(&self) -> usize {
        self.len
    }
}

impl<F: StorageFile> rkyv::ser::Writer<rkyv::rancor::Error> for Stage<'_, F> {
    #[inline(always)]
    fn write(&mut self, bytes: &[u8]) -> Result<(), rkyv::rancor::Error> {
        // Most writes are a record's few fields and fit the buffer being filled.
        let (tail, end) = (self.tail, self.tail + bytes.len());
        if end <= self.app.buf_bytes {
            self.last()[tail..end].copy_from_slice(bytes);
            self.tail = end;
            self.len += bytes.len();
        } else {
            self.write_spanning(bytes);
        }
        Ok(())
    }
}

impl<F: StorageFile> crate::record::BatchOut for Stage<'_, F> {
    fn patch(&mut self, mut at: usize, mut bytes: &[u8]) {
        assert!(at + bytes.len() <= self.len, "a patch lies within what was staged");
        let layout = self.layout();
        let cur = self.app.cur.as_mut().expect("the appender always holds a buffer");
        for (i, buf) in std::iter::once(cur).chain(&mut self.more).enumerate() {
            let piece = &mut buf.as_bytes_mut()[layout.range(i)];
            if at >= piece.len() {
                at -= piece.len();
                continue;
            }
            let n = (piece.len() - at).min(bytes.len());
            piece[at..at + n].copy_from_slice(&bytes[..n]);
            bytes = &bytes[n..];
            if bytes.is_empty() {
                return;
            }
            at = 0;
        }
    }

    fn crc_from(&self, crc: u32, mut at: usize) -> u32 {
        self.pieces().fold(crc, |crc, piece| {
            let skip = at.min(piece.len());
            at -= skip;
            crc32c::crc32c_append(crc, &piece[skip..])
        })
    }
}

/// A full-size buffer to fill: a spare one, or a new one.
fn fresh_buffer<F: StorageFile>(tracker: &RefCell<Tracker>, file: &F, buf_bytes: usize) -> DmaBuffer {
    let spare = tracker.borrow_mut().spare.take();
    spare.unwrap_or_else(|| file.alloc_buffer(buf_bytes))
}

/// A clonable handle on an appender's write tracker.
#[derive(Clone, Debug)]
pub(crate) struct TrackerHandle(Rc<RefCell<Tracker>>);

impl TrackerHandle {
    /// Waits until every write before `ticket` completed; fails if any write failed.
    pub(crate) async fn wait(&self, ticket: FlushTicket) -> io::Result<()> {
        wait_done(&self.0, ticket.seq).await;
        match self.0.borrow().error() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

async fn wait_done(tracker: &Rc<RefCell<Tracker>>, below: u64) {
    poll_fn(|cx| {
        let mut t = tracker.borrow_mut();
        if t.done_below >= below || t.error.is_some() {
            Poll::Ready(())
        } else {
            t.waiters.push(cx.waker().clone());
            Poll::Pending
        }
    })
    .await;
}

#[cfg(test)]
mod tests {
    use rkyv::ser::Writer;

    use super::*;
    use crate::record::BatchOut;
    use crate::storage::{Storage, UringStorage};

    /// Runs `f` on a glommio executor with a fresh file on disk.
    fn with_file(name: &str, f: impl AsyncFnOnce(Rc<<UringStorage as Storage>::File>) + Send + 'static) {
        let dir = std::env::temp_dir().join(format!("sluice-appender-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("dir");
        let path = dir.join("seg");
        glommio::LocalExecutorBuilder::new(glommio::Placement::Unbound)
            .spawn(move || async move {
                let file = Rc::new(UringStorage.open(&path, true).await.expect("open"));
                f(file).await;
            })
            .expect("executor")
            .join()
            .expect("ran");
        std::fs::remove_dir_all(&dir).expect("cleanup");
    }

    async fn read_back(file: &Rc<<UringStorage as Storage>::File>, len: usize) -> Vec<u8> {
        file.read_at(0, len).await.expect("read")[..len].to_vec()
    }

    #[test]
    fn staged_bytes_spanning_buffers_land_as_an_append_of_them_would() {
        with_file("stage", async |file| {
            let bytes: Vec<u8> = (0..40_000u32).map(|i| (i * 7 % 251) as u8).collect();
            let mut app = Appender::new(file.clone(), 0, &[], 4096, 2);
            let mut stage = app.stage();
            stage.write(&bytes[..1000]).expect("staged");
            stage.commit();
            // A stage over four buffers, patched across a buffer boundary, then thrown away:
            // nothing of it is appended.
            {
                let mut stage = app.stage();
                stage.write(&[0xee; 15_000]).expect("staged");
                stage.patch(3000, &[0xaa; 200]);
                assert_eq!(stage.len(), 15_000);
            }
            assert_eq!(app.end(), 1000, "an uncommitted stage appends nothing");
            // Staged in uneven pieces, patched where a buffer ends, then committed.
            let mut stage = app.stage();
            let (rest, mut at) = (&bytes[1000..], 0);
            for piece in [1, 3095, 4096, 7, 9000, 10_000].into_iter().chain(std::iter::repeat(4096)) {
                let end = (at + piece).min(rest.len());
                stage.write(&[0u8; 4096 * 3][..end - at]).expect("staged");
                at = end;
                if at == rest.len() {
                    break;
                }
            }
            stage.patch(0, rest); // every staged byte overwritten with the real ones
            let crc = stage.crc_from(0, 5000);
            assert_eq!(crc, crc32c::crc32c(&rest[5000..]), "the CRC reads the pieces in order");
            stage.commit();
            assert_eq!(app.end(), bytes.len() as u64);
            let ticket = app.start_flush();
            app.handle().wait(ticket).await.expect("flushed");
            assert_eq!(read_back(&file, bytes.len()).await, bytes);
            assert_eq!(app.read_tail(30_000, 5000).expect("in the buffers")[..], bytes[30_000..35_000]);
        });
    }
}
