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
