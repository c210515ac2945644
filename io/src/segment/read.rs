//! Reading batches out of a segment: the recovery scan and the consumer read path.
//!
//! Both read large aligned chunks and walk the batches in them in place. Every batch's
//! header, length and CRC are checked before anything in it is trusted.

use std::path::{Path, PathBuf};

use crate::error::{LogError, Result};
use crate::record::{BatchError, BatchHeader, BatchView, HEADER_BYTES, HeaderError, RecordView, check_batch};
use crate::storage::{ReadResult, StorageFile};
use crate::types::{FilePos, Offset};

use super::index::SegmentIndex;

/// Bytes read at a time by the recovery scan.
const SCAN_CHUNK_BYTES: usize = 1 << 20;

/// What a scan of a segment found.
#[derive(Debug)]
pub(crate) struct ScanOutcome {
    /// The index of every valid batch, in order; its facts give the valid end.
    pub(crate) index: SegmentIndex,
    /// Where and why the scan stopped before the end of the file's data, when the bytes
    /// there are not a clean end (zeros or end of file) but a torn or corrupt batch.
    pub(crate) damage: Option<(u64, String)>,
}

/// Scans a segment from its start, checking every batch, up to `file_len` bytes.
pub(crate) async fn scan<F: StorageFile>(
    file: &F,
    base: Offset,
    interval_bytes: u32,
    file_len: u64,
) -> Result<ScanOutcome> {
    let mut index = SegmentIndex::new(base, interval_bytes);
    let mut pos = 0u64;
    let path = file.path().to_path_buf();
    loop {
        if pos >= file_len {
            return Ok(ScanOutcome { index, damage: None });
        }
        let want = SCAN_CHUNK_BYTES.min((file_len - pos) as usize);
        let buf = file.read_at(pos, want).await.map_err(|e| LogError::io("read", &path, e))?;
        let mut at = 0usize;
        loop {
            let rest = &buf[at..];
            let header = match BatchHeader::decode(rest, crate::record::MAX_BODY_BYTES) {
                Ok(h) => h,
                Err(HeaderError::Short) if (pos + buf.len() as u64) < file_len && at > 0 => break,
                Err(HeaderError::Zero) => return Ok(ScanOutcome { index, damage: None }),
                Err(HeaderError::Short) if rest.iter().all(|&b| b == 0) => {
                    return Ok(ScanOutcome { index, damage: None });
                }
                Err(e) => return Ok(ScanOutcome { index, damage: Some((pos + at as u64, e.to_string())) }),
            };
            let need = header.stored_len();
            if rest.len() < HEADER_BYTES + header.body_len as usize {
                if pos + at as u64 + need as u64 > file_len {
                    let reason = format!("batch of {need} bytes runs past the end of the file");
                    return Ok(ScanOutcome { index, damage: Some((pos + at as u64, reason)) });
                }
                if at == 0 {
                    // A batch larger than a chunk: read it whole.
                    let whole = file.read_at(pos, need).await.map_err(|e| LogError::io("read", &path, e))?;
                    match check_batch(&whole) {
                        Ok(h) if h.base_offset >= index.facts().next_offset => {
                            index.add_batch(pos, &h);
                            pos += need as u64;
                            break;
                        }
                        Ok(h) => return Ok(ScanOutcome { index, damage: Some((pos, out_of_order(&h))) }),
                        Err(e) => return Ok(ScanOutcome { index, damage: Some((pos, e.to_string())) }),
                    }
                }
                break;
            }
            match check_batch(rest) {
                Ok(h) if h.base_offset >= index.facts().next_offset => {
                    index.add_batch(pos + at as u64, &h);
                    at += need;
                }
                Ok(h) => return Ok(ScanOutcome { index, damage: Some((pos + at as u64, out_of_order(&h))) }),
                Err(e) => return Ok(ScanOutcome { index, damage: Some((pos + at as u64, e.to_string())) }),
            }
            if at >= buf.len() {
                break;
            }
        }
        if at > 0 {
            pos += at as u64;
        }
        if at == 0 && buf.len() < want {
            return Ok(ScanOutcome { index, damage: None });
        }
    }
}

fn out_of_order(h: &BatchHeader) -> String {
    format!("batch base offset {} goes backwards", h.base_offset)
}

/// Bytes read for the read path: from the disk, or from the appender's memory when they
/// have not all reached the disk yet (a reader at the tail).
pub(crate) enum ReadBuf {
    /// A direct read.
    Disk(ReadResult),
    /// A copy of the write-behind buffers.
    Memory(rkyv::util::AlignedVec<16>),
}

impl std::ops::Deref for ReadBuf {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        match self {
            ReadBuf::Disk(r) => r,
            ReadBuf::Memory(v) => v,
        }
    }
}

/// Batches read in place from one segment: a read buffer and where its checked batches
/// lie in it.
pub struct ReadBatches {
    buf: Option<ReadBuf>,
    batches: Vec<(usize, BatchHeader)>,
    from: Offset,
    next: Offset,
    path: PathBuf,
    file_pos: u64,
}

impl std::fmt::Debug for ReadBatches {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReadBatches")
            .field("from", &self.from)
            .field("next", &self.next)
            .field("batches", &self.batches.len())
            .finish()
    }
}

impl ReadBatches {
    /// No batches: the reader is at the end of the log.
    pub(crate) fn empty(at: Offset) -> ReadBatches {
        ReadBatches { buf: None, batches: Vec::new(), from: at, next: at, path: PathBuf::new(), file_pos: 0 }
    }

    /// True when no batch was read.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.batches.is_empty()
    }

    /// How many batches were read.
    #[must_use]
    pub fn batch_count(&self) -> usize {
        self.batches.len()
    }

    /// The file position just after the last batch read.
    #[must_use]
    pub fn end_pos(&self) -> u64 {
        self.batches.last().map_or(self.file_pos, |(at, h)| self.file_pos + (*at + h.stored_len()) as u64)
    }

    /// The offset to read next.
    #[must_use]
    pub fn next_offset(&self) -> Offset {
        self.next
    }

    /// Drops the batches at or past `bound` (the log's visible end).
    pub(crate) fn keep_below(&mut self, bound: Offset) {
        let n = self.batches.iter().take_while(|(_, h)| h.base_offset < bound).count();
        if n < self.batches.len() {
            self.batches.truncate(n);
            self.next = self.batches.last().map_or(self.from, |(_, h)| h.next_offset());
        }
    }

    /// The batches, checked, read in place. The first may start before the offset asked
    /// for; [`records`](Self::records) skips those records.
    pub fn batches(&self) -> impl Iterator<Item = Result<BatchView<'_>>> + '_ {
        let buf: &[u8] = self.buf.as_deref().unwrap_or(&[]);
        self.batches.iter().map(move |&(at, header)| {
            BatchView::after_check(header, &buf[at..]).map_err(|e| LogError::Corrupt {
                path: self.path.clone(),
                pos: FilePos(self.file_pos + at as u64),
                reason: e.to_string(),
            })
        })
    }

    /// The records at or after the offset asked for, in order, read in place. Control
    /// batches (transaction markers) hold no records a reader sees and are skipped.
    pub fn records(&self) -> impl Iterator<Item = Result<RecordView<'_>>> + '_ {
        records_from(self.batches(), self.from)
    }
}

/// Reads whole batches from `file` starting at the batch that holds `offset`, beginning
/// the search at `start_pos` and stopping at `end_pos` (the segment's valid end). Returns
/// at least one batch if one holds an offset at or after `offset`, and no more than
/// `max_bytes` beyond the first.
pub(crate) async fn read_batches<F: StorageFile>(
    file: &F,
    path: &Path,
    offset: Offset,
    start_pos: u64,
    end_pos: u64,
    max_bytes: usize,
    lookahead_bytes: usize,
) -> Result<ReadBatches> {
    let read = async |at: u64, len: usize| {
        file.read_at(at, len).await.map(ReadBuf::Disk).map_err(|e| LogError::io("read", path, e))
    };
    read_batches_from(read, path, offset, start_pos, end_pos, max_bytes, lookahead_bytes).await
}

/// [`read_batches`] over any source of bytes by position (the disk, or memory).
pub(crate) async fn read_batches_from(
    read: impl AsyncFn(u64, usize) -> Result<ReadBuf>,
    path: &Path,
    offset: Offset,
    start_pos: u64,
    end_pos: u64,
    max_bytes: usize,
    lookahead_bytes: usize,
) -> Result<ReadBatches> {
    let mut pos = start_pos;
    let corrupt = |at: u64, reason: String| LogError::Corrupt { path: path.to_path_buf(), pos: FilePos(at), reason };
    while pos < end_pos {
        let want = ((end_pos - pos) as usize).min(max_bytes.saturating_add(lookahead_bytes).max(HEADER_BYTES));
        let mut buf = read(pos, want).await?;
        if buf.len() < want {
            return Err(corrupt(pos + buf.len() as u64, "segment file is shorter than its valid data".into()));
        }
        let reaches_end = pos + buf.len() as u64 >= end_pos;
        let mut at = 0usize;
        let mut batches = Vec::new();
        let mut taken = 0usize;
        let mut next = offset;
        while at < buf.len() {
            let header = match check_batch(&buf[at..]) {
                Ok(h) => h,
                Err(BatchError::Header(HeaderError::Short) | BatchError::Truncated { .. }) if !reaches_end => {
                    if at > 0 {
                        break;
                    }
                    // The first batch is larger than the chunk: read exactly it.
                    let h = BatchHeader::decode(&buf, crate::record::MAX_BODY_BYTES)
                        .map_err(|e| corrupt(pos, e.to_string()))?;
                    if pos + h.stored_len() as u64 > end_pos {
                        return Err(corrupt(pos, "batch runs past the segment's valid end".into()));
                    }
                    buf = read(pos, h.stored_len()).await?;
                    continue;
                }
                Err(e) if batches.is_empty() => return Err(corrupt(pos + at as u64, e.to_string())),
                Err(_) => break, // return what was good; the next read reports the damage
            };
            let len = header.stored_len();
            if header.next_offset() > offset {
                if !batches.is_empty() && taken + len > max_bytes {
                    break;
                }
                batches.push((at, header));
                taken += len;
                next = header.next_offset();
            }
            at += len;
        }
        if !batches.is_empty() {
            return Ok(ReadBatches {
                buf: Some(buf),
                batches,
                from: offset,
                next,
                path: path.to_path_buf(),
                file_pos: pos,
            });
        }
        pos += at as u64;
    }
    Ok(ReadBatches::empty(offset))
}

impl ReadBatches {
    /// The batches' stored bytes, contiguous, as read.
    #[must_use]
    pub fn bytes(&self) -> &[u8] {
        match (self.batches.first(), self.batches.last(), self.buf.as_deref()) {
            (Some(&(first, _)), Some(&(last, h)), Some(buf)) => &buf[first..last + h.stored_len()],
            _ => &[],
        }
    }

    /// A copy that can cross threads: the batches' bytes in an aligned buffer, still read
    /// in place (one copy of the bytes, no decoding).
    #[must_use]
    pub fn to_owned_batches(&self) -> OwnedBatches {
        let mut buf = rkyv::util::AlignedVec::<16>::with_capacity(self.bytes().len());
        buf.extend_from_slice(self.bytes());
        OwnedBatches { buf, from: self.from, next: self.next }
    }
}

/// Batches copied out of a read so they can move to another thread. Their CRCs were
/// checked when they were read; their records are still read in place.
#[derive(Clone)]
pub struct OwnedBatches {
    buf: rkyv::util::AlignedVec<16>,
    from: Offset,
    next: Offset,
}

impl std::fmt::Debug for OwnedBatches {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OwnedBatches")
            .field("from", &self.from)
            .field("next", &self.next)
            .field("bytes", &self.buf.len())
            .finish()
    }
}

impl OwnedBatches {
    /// No batches, positioned at `at`.
    #[must_use]
    pub fn empty(at: Offset) -> OwnedBatches {
        OwnedBatches { buf: rkyv::util::AlignedVec::new(), from: at, next: at }
    }

    /// Batches already checked (their CRCs and structure), stored back to back in
    /// `buf`, holding the offsets from `from` (records before it are skipped) to `next`.
    #[must_use]
    pub fn from_bytes(buf: rkyv::util::AlignedVec<16>, from: Offset, next: Offset) -> OwnedBatches {
        OwnedBatches { buf, from, next }
    }

    /// True when there are no batches.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }

    /// The offset to read next.
    #[must_use]
    pub fn next_offset(&self) -> Offset {
        self.next
    }

    /// The batches' stored bytes.
    #[must_use]
    pub fn bytes(&self) -> &[u8] {
        &self.buf
    }

    /// The batches, in order.
    pub fn batches(&self) -> impl Iterator<Item = Result<BatchView<'_>>> + '_ {
        let mut at = 0usize;
        std::iter::from_fn(move || {
            if at >= self.buf.len() {
                return None;
            }
            let view = BatchView::new(&self.buf[at..]).map_err(|e| LogError::Corrupt {
                path: PathBuf::from("<owned batches>"),
                pos: FilePos(at as u64),
                reason: e.to_string(),
            });
            match &view {
                Ok(v) => at += v.header().stored_len(),
                Err(_) => at = self.buf.len(),
            }
            Some(view)
        })
    }

    /// The records at or after the offset asked for, in order, read in place. Control
    /// batches (transaction markers) hold no records a reader sees and are skipped.
    pub fn records(&self) -> impl Iterator<Item = Result<RecordView<'_>>> + '_ {
        records_from(self.batches(), self.from)
    }
}

/// The records of `batches` at or after `from`, with a batch's error in its place.
fn records_from<'a>(
    batches: impl Iterator<Item = Result<BatchView<'a>>> + 'a,
    from: Offset,
) -> impl Iterator<Item = Result<RecordView<'a>>> + 'a {
    batches.flat_map(move |b| {
        let (ok, err) = match b {
            Ok(view) if view.header().attributes.is_control() => (None, None),
            Ok(view) => (Some(view.records().filter(move |r| r.offset() >= from)), None),
            Err(e) => (None, Some(Err(e))),
        };
        ok.into_iter().flatten().map(Ok).chain(err)
    })
}
