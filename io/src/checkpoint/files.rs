//! Whole-file writes and reads through the storage seam, in bounded aligned chunks, and
//! the removal of a checkpoint directory.

use std::io;
use std::path::Path;
use std::rc::Rc;

use crate::error::{LogError, Result};
use crate::storage::{ReadResult, Storage, StorageFile};
use crate::types::FilePos;

use super::MANIFEST_FILE;

/// The largest single write or read. A part can be large; writing it through one DMA
/// buffer of its whole size would pin that much memory at once, so it goes in chunks.
pub(super) const CHUNK_BYTES: usize = 1 << 20;

/// Makes `head` followed by `body` the whole content of `path`, durably: aligned chunks
/// (the last padded with zeros), a truncate that cuts the padding, then fdatasync (which
/// also persists the size). The file is created if missing.
pub(super) async fn write_file<S: Storage>(storage: &S, path: &Path, head: &[u8], body: &[u8]) -> Result<()> {
    let io = |op| move |e| LogError::io(op, path, e);
    let file = storage.open(path, true).await.map_err(io("open"))?;
    let align = usize::try_from(file.alignment()).expect("alignment fits usize").max(1);
    let total = head.len() + body.len();
    let mut pos = 0;
    while pos < total {
        let n = (total - pos).min(CHUNK_BYTES);
        let padded = n.next_multiple_of(align);
        let mut buf = file.alloc_buffer(padded);
        let bytes = buf.as_bytes_mut();
        copy_range(head, body, pos, &mut bytes[..n]);
        bytes[n..].fill(0);
        let written = file.write_at(Rc::new(buf), pos as u64).await.map_err(io("write"))?;
        if written != padded {
            let short = io::Error::new(io::ErrorKind::WriteZero, format!("wrote {written} of {padded} bytes"));
            return Err(LogError::io("write", path, short));
        }
        pos += n;
    }
    file.truncate(total as u64).await.map_err(io("truncate"))?;
    file.sync().await.map_err(|e| LogError::SyncFailed { path: path.to_path_buf(), source: e })?;
    Ok(())
}

/// Copies bytes `[start, start + out.len())` of the concatenation `head ++ body` into
/// `out`, so the header and a large body need not be joined in memory first.
fn copy_range(head: &[u8], body: &[u8], start: usize, out: &mut [u8]) {
    let mut filled = 0;
    if start < head.len() {
        let n = (head.len() - start).min(out.len());
        out[..n].copy_from_slice(&head[start..start + n]);
        filled = n;
    }
    if filled == out.len() {
        return;
    }
    let from = start + filled - head.len();
    let rest = out.len() - filled;
    out[filled..].copy_from_slice(&body[from..from + rest]);
}

/// Opens `path` for reading; returns the file and its size.
pub(super) async fn open_read<S: Storage>(storage: &S, path: &Path) -> Result<(S::File, u64)> {
    let file = storage.open(path, false).await.map_err(|e| LogError::io("open", path, e))?;
    let size = file.size().await.map_err(|e| LogError::io("stat", path, e))?;
    Ok((file, size))
}

/// Reads exactly `len` bytes at `pos`. The caller sized the read from the file's size,
/// so a short read means the file shrank under us: reported as damage.
pub(super) async fn read_exact<F: StorageFile>(file: &F, pos: u64, len: usize) -> Result<ReadResult> {
    let buf = file.read_at(pos, len).await.map_err(|e| LogError::io("read", file.path(), e))?;
    if buf.len() != len {
        return Err(LogError::Corrupt {
            path: file.path().to_path_buf(),
            pos: FilePos(pos),
            reason: format!("expected {len} bytes, the file ended after {}", buf.len()),
        });
    }
    Ok(buf)
}

/// True if the error says a file or directory does not exist.
pub(super) fn is_not_found(e: &LogError) -> bool {
    matches!(e, LogError::Io { source, .. } if source.kind() == io::ErrorKind::NotFound)
}

/// Removes a checkpoint directory and everything in it; a missing directory is fine.
///
/// The `MANIFEST` goes first and that removal is made durable before anything else, so
/// that a crash part-way leaves an incomplete checkpoint (removed on the next open),
/// never one that still looks completed but has lost parts.
pub(super) async fn remove_checkpoint_dir<S: Storage>(storage: &S, dir: &Path) -> Result<()> {
    let entries = match storage.list_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(LogError::io("list", dir, e)),
    };
    let manifest = dir.join(MANIFEST_FILE);
    if entries.contains(&manifest) {
        storage.remove(&manifest).await.map_err(|e| LogError::io("remove", &manifest, e))?;
        storage.sync_dir(dir).await.map_err(|e| LogError::io("fsync directory", dir, e))?;
    }
    for path in entries.iter().filter(|p| **p != manifest) {
        match storage.remove(path).await {
            Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(LogError::io("remove", path, e)),
            _ => {}
        }
    }
    // The seam has no directory removal; an empty directory holds no file data, so this
    // one metadata call goes to the OS directly, as `create_dir_all` does by default.
    match std::fs::remove_dir(dir) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(LogError::io("remove directory", dir, e)),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::copy_range;

    #[test]
    fn checkpoint_copy_range_spans_head_and_body() {
        let head = [1u8, 2, 3];
        let body = [10u8, 11, 12, 13];
        let all: Vec<u8> = head.iter().chain(&body).copied().collect();
        for start in 0..all.len() {
            for len in 0..=all.len() - start {
                let mut out = vec![0; len];
                copy_range(&head, &body, start, &mut out);
                assert_eq!(out, &all[start..start + len], "start {start} len {len}");
            }
        }
    }
}
