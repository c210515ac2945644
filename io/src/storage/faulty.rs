//! A fault-injecting backend for tests: it wraps the real io_uring backend and, on
//! command, tears a write at a chosen byte, fails an fsync, or reports a full disk.
//! Faults are injected around real disk I/O, so what survives a fault is what the disk
//! really holds.

use std::cell::RefCell;
use std::io;
use std::path::{Path, PathBuf};
use std::rc::Rc;

use super::uring::{UringFile, UringStorage};
use super::{DmaBuffer, ReadResult, Storage, StorageFile};

/// What to inject. Shared by every file the storage opens; change it at any time.
#[derive(Debug, Default)]
pub struct FaultPlan {
    /// Tear the write that crosses this many bytes written (counted over all files since
    /// the plan was made): the write's bytes before the tear point reach the disk; past
    /// it, the disk keeps what it held (a write that did not happen does not destroy
    /// earlier data), and bytes the file never had written become `tear_fill`. From then on the storage behaves as crashed (every write and sync
    /// fails), as if the process died mid-write.
    pub tear_at_byte: Option<u64>,
    /// What never-written bytes past a tear point become (0 for a clean cut, anything
    /// else for garbage left by a half-finished write).
    pub tear_fill: u8,
    /// Fail this many of the next syncs (EIO).
    pub fail_syncs: u32,
    /// Writes that would take the total past this many bytes fail with ENOSPC.
    pub space_bytes: Option<u64>,
    /// Bytes written so far through this plan.
    pub bytes_written: u64,
    /// Syncs that succeeded.
    pub syncs: u64,
    /// Set once a tear happened.
    pub crashed: bool,
    /// Writes handed to the disk and not yet completed: a crash does not stop those, so
    /// a test waits for them ([`FaultyStorage::settled`]) before it recovers.
    pub writes_in_flight: u64,
    /// How far each file has been written: below it a torn write leaves the old bytes,
    /// above it the fill.
    pub written_to: std::collections::HashMap<PathBuf, u64>,
}

/// The real backend with faults injected per a shared [`FaultPlan`].
#[derive(Clone, Debug, Default)]
pub struct FaultyStorage {
    inner: UringStorage,
    plan: Rc<RefCell<FaultPlan>>,
}

impl FaultyStorage {
    /// A faulty storage with no faults planned yet.
    #[must_use]
    pub fn new() -> FaultyStorage {
        FaultyStorage::default()
    }

    /// The plan, to change what is injected.
    #[must_use]
    pub fn plan(&self) -> &Rc<RefCell<FaultPlan>> {
        &self.plan
    }

    /// Resolves once no write this storage handed to the disk is still in flight. After a
    /// crash, writes submitted before it may still land, as they would on a real machine
    /// until it died: a test waits for them before it reopens, so that none lands after
    /// recovery has read the file.
    pub async fn settled(&self) {
        while self.plan.borrow().writes_in_flight > 0 {
            glommio::timer::sleep(std::time::Duration::from_millis(1)).await;
        }
    }

    fn check_crashed(&self) -> io::Result<()> {
        if self.plan.borrow().crashed {
            return Err(io::Error::other("simulated crash: storage is gone"));
        }
        Ok(())
    }
}

impl Storage for FaultyStorage {
    type File = FaultyFile;

    async fn open(&self, path: &Path, create: bool) -> io::Result<FaultyFile> {
        self.check_crashed()?;
        let inner = self.inner.open(path, create).await?;
        // A file opened again (by a recovery after a crash) holds what it held: a torn
        // write must keep those bytes, so the mark starts at the file's size, not at 0.
        let held = inner.size().await?;
        let mut plan = self.plan.borrow_mut();
        let mark = plan.written_to.entry(path.to_path_buf()).or_default();
        *mark = (*mark).max(held);
        drop(plan);
        Ok(FaultyFile { inner, storage: self.clone() })
    }

    async fn remove(&self, path: &Path) -> io::Result<()> {
        self.check_crashed()?;
        self.inner.remove(path).await
    }

    async fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        self.check_crashed()?;
        self.inner.rename(from, to).await
    }

    async fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        self.check_crashed()?;
        self.inner.sync_dir(dir).await
    }

    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        self.check_crashed()?;
        self.inner.create_dir_all(dir)
    }

    fn list_dir(&self, dir: &Path) -> io::Result<Vec<PathBuf>> {
        self.inner.list_dir(dir)
    }
}

/// A real file whose writes and syncs pass through the fault plan.
#[derive(Debug)]
pub struct FaultyFile {
    inner: UringFile,
    storage: FaultyStorage,
}

/// Counts a write in [`FaultPlan::writes_in_flight`] while it lives.
struct InFlight<'a>(&'a RefCell<FaultPlan>);

impl<'a> InFlight<'a> {
    fn new(plan: &'a RefCell<FaultPlan>) -> Self {
        plan.borrow_mut().writes_in_flight += 1;
        InFlight(plan)
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.borrow_mut().writes_in_flight -= 1;
    }
}

impl StorageFile for FaultyFile {
    fn alignment(&self) -> u64 {
        self.inner.alignment()
    }

    fn alloc_buffer(&self, len: usize) -> DmaBuffer {
        self.inner.alloc_buffer(len)
    }

    async fn write_at(&self, buf: Rc<DmaBuffer>, pos: u64) -> io::Result<usize> {
        self.storage.check_crashed()?;
        let len = buf.len() as u64;
        let tear = {
            let mut plan = self.storage.plan.borrow_mut();
            if plan.space_bytes.is_some_and(|space| plan.bytes_written + len > space) {
                return Err(io::Error::from_raw_os_error(libc::ENOSPC));
            }
            let start = plan.bytes_written;
            plan.bytes_written += len;
            match plan.tear_at_byte {
                Some(at) if at < start + len => {
                    plan.crashed = true;
                    let written_to = plan.written_to.get(self.path()).copied().unwrap_or(0);
                    Some((at.saturating_sub(start) as usize, plan.tear_fill, written_to))
                }
                _ => None,
            }
        };
        let _in_flight = InFlight::new(&self.storage.plan);
        let Some((keep, fill, written_to)) = tear else {
            let n = self.inner.write_at(buf, pos).await?;
            let mut plan = self.storage.plan.borrow_mut();
            let mark = plan.written_to.entry(self.path().to_path_buf()).or_default();
            *mark = (*mark).max(pos + n as u64);
            return Ok(n);
        };
        let old = self.inner.read_at(pos, buf.len()).await?;
        let mut torn = self.inner.alloc_buffer(buf.len());
        for (i, (b, &new)) in torn.as_bytes_mut().iter_mut().zip(buf.as_bytes()).enumerate() {
            *b = match old.get(i) {
                _ if i < keep => new,
                Some(&o) if pos + (i as u64) < written_to => o,
                _ => fill,
            };
        }
        self.inner.write_at(Rc::new(torn), pos).await?;
        Err(io::Error::other("simulated crash during write"))
    }

    async fn read_at(&self, pos: u64, len: usize) -> io::Result<ReadResult> {
        self.inner.read_at(pos, len).await
    }

    async fn sync(&self) -> io::Result<()> {
        self.storage.check_crashed()?;
        {
            let mut plan = self.storage.plan.borrow_mut();
            if plan.fail_syncs > 0 {
                plan.fail_syncs -= 1;
                return Err(io::Error::from_raw_os_error(libc::EIO));
            }
        }
        self.inner.sync().await?;
        self.storage.plan.borrow_mut().syncs += 1;
        Ok(())
    }

    async fn allocate(&self, len: u64) -> io::Result<()> {
        self.storage.check_crashed()?;
        if self.storage.plan.borrow().space_bytes.is_some_and(|space| len > space) {
            return Err(io::Error::from_raw_os_error(libc::ENOSPC));
        }
        self.inner.allocate(len).await
    }

    async fn truncate(&self, len: u64) -> io::Result<()> {
        self.storage.check_crashed()?;
        self.inner.truncate(len).await
    }

    async fn size(&self) -> io::Result<u64> {
        self.inner.size().await
    }

    fn path(&self) -> &Path {
        self.inner.path()
    }
}
