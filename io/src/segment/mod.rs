//! One segment: a file of record batches named by its base offset (as Kafka names
//! them), its sparse indexes, and the scan that recovers or rebuilds them.
//!
//! This file owns `Segment`, a segment as the log holds it. The rest is split by idea:
//! `files.rs` (file names, creating and preallocating, index files, removal),
//! `appender.rs` (the write-behind appender of the active segment), [`index`] (the
//! sparse indexes and their file format) and `read.rs` (the recovery scan and the read
//! path). Nothing here knows the log: the log and recovery build on these pieces.

pub(crate) mod appender;
mod files;
pub mod index;
mod read;

use std::rc::Rc;

pub use files::SegmentPaths;
pub(crate) use files::{
    first_allocation, first_step, load_index, open_segment_file, read_small_file, remove_index_files,
    remove_segment_files, write_index, write_small_file,
};
pub use index::{SegmentFacts, SegmentIndex};
pub use read::{OwnedBatches, ReadBatches};
pub(crate) use read::{ReadBuf, read_batches, read_batches_from, scan};

use crate::error::LogError;
use crate::storage::StorageFile;
use crate::types::Offset;

/// A segment's file and what is known of its contents.
#[derive(Debug)]
pub(crate) struct Segment<F: StorageFile> {
    pub(crate) base: Offset,
    pub(crate) file: Rc<F>,
    pub(crate) paths: SegmentPaths,
    pub(crate) index: SegmentIndex,
    /// When the segment was created or reopened, for rolling by age.
    pub(crate) opened: std::time::Instant,
    /// Where a recovery scan found this closed segment damaged, and why: its index and
    /// facts stop there, and a read that needs what lies beyond gets a corruption error
    /// rather than the next segment's records.
    pub(crate) damage: Option<(u64, String)>,
}

impl<F: StorageFile> Segment<F> {
    /// The error for reading past this segment's damage, if it has any.
    pub(crate) fn damage_error(&self) -> Option<LogError> {
        self.damage.as_ref().map(|(pos, reason)| LogError::Corrupt {
            path: self.paths.log.clone(),
            pos: crate::types::FilePos(*pos),
            reason: reason.clone(),
        })
    }
}

impl<F: StorageFile> Segment<F> {
    pub(crate) fn facts(&self) -> SegmentFacts {
        self.index.facts()
    }
}
