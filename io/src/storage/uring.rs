//! The production backend: glommio DMA files (`O_DIRECT`, submitted through io_uring).

use std::cell::RefCell;
use std::collections::HashSet;
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::rc::Rc;

use futures_lite::FutureExt;
use glommio::io::{DmaBuffer, DmaFile, OpenOptions, ReadResult};

use super::{Storage, StorageFile};

/// A glommio error as the OS error it carries. glommio's own conversion to `io::Error`
/// keeps only its text for the errors it enriches with the operation and path, so an
/// ENOSPC could not be told apart from any other failure, and messages repeated the path
/// with glommio's internals.
fn os_error<T>(e: glommio::GlommioError<T>) -> io::Error {
    match e {
        glommio::GlommioError::IoError(e) => e,
        glommio::GlommioError::EnhancedIoError { source, .. } => source,
        e => e.into(),
    }
}

/// Runs a glommio open of `path`, turning a panic inside it into an error. glommio's
/// `DmaFile::open_at` opens the file and then unwraps a `statfs` of its path, so a file
/// whose directory is removed in between (a checkpoint directory deleted under a running
/// pipeline) panicked the task that opened it: the checkpoint coordinator's thread
/// died and the pipeline hung. The panic still goes through the panic hook (a line on
/// stderr); what unwinds is only the open's own future, dropped here with the file it had
/// opened.
async fn open_unwinding<T>(path: &Path, open: impl Future<Output = io::Result<T>>) -> io::Result<T> {
    match std::panic::AssertUnwindSafe(open).catch_unwind().await {
        Ok(opened) => opened,
        Err(panic) => {
            let why = panic
                .downcast_ref::<String>()
                .map(String::as_str)
                .or_else(|| panic.downcast_ref::<&str>().copied())
                .unwrap_or("no message");
            Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!("opening {} failed inside glommio (was it removed meanwhile?): {why}", path.display()),
            ))
        }
    }
}

/// io_uring storage through glommio. Must be used inside a glommio executor.
#[derive(Clone, Debug, Default)]
pub struct UringStorage;

thread_local! {
    /// Devices whose iopoll support this executor thread has probed with a non-empty file.
    static PROBED_DEVICES: RefCell<HashSet<u64>> = RefCell::new(HashSet::new());
}

/// glommio probes a device for polled I/O on the first DMA file it opens there, with a
/// read at offset 0. On an empty file that read succeeds by returning nothing, the probe
/// wrongly concludes polling works, and every later read fails with EOPNOTSUPP (upstream
/// DataDog/glommio #605). So before the first real open on a device, this opens a small
/// non-empty file on it, which makes the probe see the truth.
async fn probe_device_once(dir: &Path) -> io::Result<()> {
    let dev = std::fs::metadata(dir)?.dev();
    if PROBED_DEVICES.with(|p| p.borrow().contains(&dev)) {
        return Ok(());
    }
    let probe = dir.join(".iopoll-probe");
    if std::fs::metadata(&probe).map(|m| m.len()).unwrap_or(0) < 4096 {
        std::fs::write(&probe, [0u8; 4096])?;
    }
    let file = open_unwinding(&probe, async { DmaFile::open(&probe).await.map_err(os_error) }).await?;
    file.close().await.map_err(os_error)?;
    PROBED_DEVICES.with(|p| p.borrow_mut().insert(dev));
    Ok(())
}

impl Storage for UringStorage {
    type File = UringFile;

    async fn open(&self, path: &Path, create: bool) -> io::Result<UringFile> {
        let dir = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
        probe_device_once(dir).await?;
        let opening =
            async { OpenOptions::new().read(true).write(true).create(create).dma_open(path).await.map_err(os_error) };
        let file = open_unwinding(path, opening).await?;
        Ok(UringFile { file: Rc::new(file), path: path.to_path_buf() })
    }

    async fn remove(&self, path: &Path) -> io::Result<()> {
        std::fs::remove_file(path)
    }

    async fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        std::fs::rename(from, to)
    }

    async fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        let d = glommio::io::Directory::open(dir).await.map_err(os_error)?;
        d.sync().await.map_err(os_error)?;
        d.close().await.map_err(os_error)?;
        Ok(())
    }
}

/// A glommio DMA file.
#[derive(Debug, Clone)]
pub struct UringFile {
    file: Rc<DmaFile>,
    path: PathBuf,
}

impl StorageFile for UringFile {
    fn alignment(&self) -> u64 {
        self.file.alignment()
    }

    fn alloc_buffer(&self, len: usize) -> DmaBuffer {
        self.file.alloc_dma_buffer(len)
    }

    async fn write_at(&self, buf: Rc<DmaBuffer>, pos: u64) -> io::Result<usize> {
        self.file.write_rc_at(buf, pos).await.map_err(os_error)
    }

    async fn read_at(&self, pos: u64, len: usize) -> io::Result<ReadResult> {
        self.file.read_at(pos, len).await.map_err(os_error)
    }

    async fn sync(&self) -> io::Result<()> {
        self.file.fdatasync().await.map_err(os_error)
    }

    async fn allocate(&self, len: u64) -> io::Result<()> {
        self.file.pre_allocate(len, false).await.map_err(os_error)
    }

    async fn truncate(&self, len: u64) -> io::Result<()> {
        self.file.truncate(len).await.map_err(os_error)
    }

    async fn size(&self) -> io::Result<u64> {
        self.file.file_size().await.map_err(os_error)
    }

    fn path(&self) -> &Path {
        &self.path
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_panic_inside_an_open_is_an_error() {
        let path = Path::new("/nowhere/chk-1/shard-0");
        // As glommio's `statfs(path).unwrap()` does when the path is gone.
        let panicking = async {
            std::fs::metadata(path).unwrap();
            Ok(())
        };
        let err = futures_lite::future::block_on(open_unwinding::<()>(path, panicking)).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::NotFound);
        assert!(err.to_string().contains("/nowhere/chk-1/shard-0") && err.to_string().contains("NotFound"), "{err}");
        let fine = futures_lite::future::block_on(open_unwinding(path, async { Ok(7) })).unwrap();
        assert_eq!(fine, 7);
    }
}
