//! The security files' common handling: JSON read whole, replaced whole (written beside,
//! fsynced, renamed, the directory fsynced), changed under an exclusive file lock.

use std::path::Path;

use serde::Serialize;
use serde::de::DeserializeOwned;

use super::SecurityError;

fn io<'a>(action: &'static str, path: &'a Path) -> impl FnOnce(std::io::Error) -> SecurityError + 'a {
    move |source| SecurityError::Io { action, path: path.to_path_buf(), source }
}

/// The file's contents, or the default when it does not exist.
pub(super) fn read_json<T: DeserializeOwned + Default>(path: &Path) -> Result<T, SecurityError> {
    match std::fs::read(path) {
        Ok(bytes) => serde_json::from_slice(&bytes)
            .map_err(|e| SecurityError::Corrupt { path: path.to_path_buf(), reason: e.to_string() }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(T::default()),
        Err(e) => Err(io("reading", path)(e)),
    }
}

/// Replaces the file with `value`, durably.
pub(super) fn write_json<T: Serialize>(path: &Path, value: &T) -> Result<(), SecurityError> {
    use std::io::Write;
    let dir = path.parent().expect("a file in a directory");
    std::fs::create_dir_all(dir).map_err(io("creating", dir))?;
    let tmp = path.with_extension("json.tmp");
    let bytes = serde_json::to_vec_pretty(value).expect("plain data serializes");
    let mut file = std::fs::File::create(&tmp).map_err(io("creating", &tmp))?;
    file.write_all(&bytes).map_err(io("writing", &tmp))?;
    file.sync_all().map_err(io("syncing", &tmp))?;
    std::fs::rename(&tmp, path).map_err(io("renaming", &tmp))?;
    std::fs::File::open(dir).and_then(|d| d.sync_all()).map_err(io("syncing", dir))
}

/// An exclusive lock on `path` (created if missing), held until the file is dropped.
pub(super) fn lock(path: &Path) -> Result<std::fs::File, SecurityError> {
    let dir = path.parent().expect("a file in a directory");
    std::fs::create_dir_all(dir).map_err(io("creating", dir))?;
    let file =
        std::fs::OpenOptions::new().create(true).truncate(false).write(true).open(path).map_err(io("opening", path))?;
    file.lock().map_err(io("locking", path))?;
    Ok(file)
}

/// A file's modification time and size: when either changes, it is read again.
type Stamp = (std::time::SystemTime, u64);

/// The file's stamp, or `None` if it does not exist.
fn stamp(path: &Path) -> Option<Stamp> {
    let m = std::fs::metadata(path).ok()?;
    Some((m.modified().ok()?, m.len()))
}

/// A JSON file as a running server sees it: read again whenever its modification time or
/// size changes (one `stat` per look), the last good copy kept if a changed file cannot
/// be read.
#[derive(Debug)]
pub(super) struct Watched<T> {
    path: std::path::PathBuf,
    cached: std::sync::Mutex<(Option<Stamp>, std::sync::Arc<T>)>,
}

impl<T: DeserializeOwned + Default> Watched<T> {
    /// The file at `path`, read now.
    pub(super) fn new(path: &Path) -> Result<Watched<T>, SecurityError> {
        let stamp = stamp(path);
        let value = std::sync::Arc::new(read_json(path)?);
        Ok(Watched { path: path.to_path_buf(), cached: std::sync::Mutex::new((stamp, value)) })
    }

    /// The contents now, and the error that kept an older copy in use, if any.
    pub(super) fn current(&self) -> (std::sync::Arc<T>, Option<SecurityError>) {
        let now = stamp(&self.path);
        let mut cached = self.cached.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if now == cached.0 {
            return (cached.1.clone(), None);
        }
        match read_json(&self.path) {
            Ok(value) => {
                *cached = (now, std::sync::Arc::new(value));
                (cached.1.clone(), None)
            }
            Err(e) => (cached.1.clone(), Some(e)),
        }
    }
}
