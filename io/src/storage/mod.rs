//! The I/O seam. Segment and index files are reached only through [`Storage`] and
//! [`StorageFile`], so that tests can inject torn writes, failed fsyncs and a full disk
//! ([`faulty`]) while production uses io_uring through glommio's DMA files ([`uring`]).
//!
//! Buffers are glommio's own types (`DmaBuffer` to write, `ReadResult` to read), so the
//! real backend adds no copy and the faulty backend wraps the real one: faults are
//! injected around real disk I/O, never instead of it.
//!
//! Contract: all positions and lengths given to `write_at` are multiples of
//! [`StorageFile::alignment`]; reads may be unaligned.

pub mod faulty;
pub mod uring;

use std::io;
use std::path::{Path, PathBuf};
use std::rc::Rc;

pub use glommio::io::{DmaBuffer, ReadResult};

pub use faulty::{FaultPlan, FaultyStorage};
pub use uring::UringStorage;

/// Opens and manages files. Cheap to clone; one per executor.
#[allow(async_fn_in_trait)] // futures are !Send by design: a log lives on one executor.
pub trait Storage: Clone + std::fmt::Debug + 'static {
    /// The file handle this backend returns.
    type File: StorageFile;

    /// Opens `path` for direct reading and writing, creating it if `create` is set.
    async fn open(&self, path: &Path, create: bool) -> io::Result<Self::File>;

    /// Removes a file.
    async fn remove(&self, path: &Path) -> io::Result<()>;

    /// Atomically renames `from` to `to`, replacing `to`.
    async fn rename(&self, from: &Path, to: &Path) -> io::Result<()>;

    /// Makes the directory's entries (creations, renames, removals) durable.
    async fn sync_dir(&self, dir: &Path) -> io::Result<()>;

    /// Creates a directory and its parents.
    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        std::fs::create_dir_all(dir)
    }

    /// The file names in a directory.
    fn list_dir(&self, dir: &Path) -> io::Result<Vec<PathBuf>> {
        let mut out = Vec::new();
        for entry in std::fs::read_dir(dir)? {
            out.push(entry?.path());
        }
        out.sort();
        Ok(out)
    }
}

/// One open file, read and written with direct I/O.
#[allow(async_fn_in_trait)]
pub trait StorageFile: std::fmt::Debug + 'static {
    /// The alignment direct I/O needs for write positions and lengths.
    fn alignment(&self) -> u64;

    /// A buffer suitable for `write_at`, of `len` bytes (a multiple of the alignment).
    fn alloc_buffer(&self, len: usize) -> DmaBuffer;

    /// Writes the whole buffer at `pos`. Returns bytes written. The buffer is shared so
    /// that the caller can take it back once the write completes and reuse it.
    async fn write_at(&self, buf: Rc<DmaBuffer>, pos: u64) -> io::Result<usize>;

    /// Reads up to `len` bytes at `pos` (fewer at end of file).
    async fn read_at(&self, pos: u64, len: usize) -> io::Result<ReadResult>;

    /// Makes written data durable (fdatasync).
    async fn sync(&self) -> io::Result<()>;

    /// Reserves space for the file up to `len` bytes and grows its size to at least
    /// `len`; the new bytes read as zeros. Segments preallocate so that writes do not
    /// allocate blocks and syncs do not change the file size.
    async fn allocate(&self, len: u64) -> io::Result<()>;

    /// Sets the file's size.
    async fn truncate(&self, len: u64) -> io::Result<()>;

    /// The file's size in bytes.
    async fn size(&self) -> io::Result<u64>;

    /// The file's path.
    fn path(&self) -> &Path;
}
