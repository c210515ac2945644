//! Savepoints: a checkpoint taken on request, whole (no part builds on an older
//! checkpoint), and exported into a directory of its own that is kept until someone
//! deletes it.
//!
//! A savepoint is an ordinary checkpoint of the running job first (so its sinks commit
//! what it covers, and a crash after it restores from it), forced whole
//! ([`CheckpointCoordinator::full`](super::CheckpointCoordinator)); once its manifest is
//! durable the coordinator puts its parts and then its manifest into `dir/chk-{id}/`, the
//! manifest last (written as `MANIFEST.tmp`, synced, renamed): the savepoint directory is
//! then a checkpoint store holding that one completed checkpoint. A part is hard-linked
//! when `dir` is on the job's file system (a part file is never written again once its
//! checkpoint is completed, and the job's pruning only unlinks its own name, so the
//! savepoint's stays whole), and copied and synced otherwise: a savepoint of any size then
//! costs the job's checkpoint plus a few file-system operations. Nothing in it names a path (parts are named `shard-{s}`, bases
//! are none), so the directory can be moved or copied to another machine and restored
//! from there ([`CheckpointConfig::restore_from`](super::CheckpointConfig::restore_from)).

use std::{
    path::{Path, PathBuf},
    time::Duration,
};

use sluice_io::{
    CheckpointId,
    checkpoint::{MANIFEST_FILE, MANIFEST_TMP_FILE, checkpoint_dir},
};

use super::{CheckpointError, CheckpointStats};

/// A savepoint taken ([`RunningPipeline::savepoint`]).
///
/// [`RunningPipeline::savepoint`]: crate::dataflow::RunningPipeline::savepoint
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Savepoint {
    /// Its directory.
    pub dir: PathBuf,
    /// The checkpoint it is (of the job that took it).
    pub checkpoint: CheckpointStats,
    /// Putting the checkpoint into [`Savepoint::dir`], synced.
    pub export: Duration,
    /// Whether the parts were hard-linked ([`Savepoint::dir`] on the job's file system)
    /// rather than copied.
    pub linked: bool,
    /// From the request to the savepoint being durable in its directory.
    pub duration: Duration,
}

/// A request for a savepoint, handed to the coordinator.
#[derive(Debug)]
pub(crate) struct SavepointRequest {
    pub(crate) dir: PathBuf,
    /// Stop the sources after the savepoint's barrier (`stop_with_savepoint`).
    pub(crate) stop: bool,
    pub(crate) requested: std::time::Instant,
    pub(crate) reply: std::sync::mpsc::Sender<Result<Savepoint, CheckpointError>>,
}

impl SavepointRequest {
    /// Answers the request with why it failed.
    pub(crate) fn fail(self, reason: impl Into<String>) {
        let _ = self.reply.send(Err(CheckpointError::Savepoint { dir: self.dir, reason: reason.into() }));
    }
}

/// Whether `dir` holds a checkpoint directory (`chk-*`) already.
fn holds_checkpoint(dir: &Path) -> std::io::Result<bool> {
    match std::fs::read_dir(dir) {
        Ok(entries) => {
            for entry in entries {
                if entry?.file_name().to_string_lossy().starts_with("chk-") {
                    return Ok(true);
                }
            }
            Ok(false)
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(e),
    }
}

/// Syncs the file or directory at `path`.
fn sync(path: &Path) -> std::io::Result<()> {
    std::fs::File::open(path)?.sync_all()
}

/// Puts completed checkpoint `id` of the store at `root` into `dir` (see the module docs);
/// returns whether every part was hard-linked. Runs on the coordinator's thread, which
/// takes no other checkpoint meanwhile (so the store cannot prune `id` during the copy).
pub(crate) fn export(root: &Path, id: CheckpointId, dir: &Path) -> Result<bool, String> {
    export_parts(root, id, dir, true)
}

/// [`export`], copying every part when `link` is false (what a link across file systems
/// falls back to).
fn export_parts(root: &Path, id: CheckpointId, dir: &Path, link: bool) -> Result<bool, String> {
    let io = |what: &str, path: &Path, e: std::io::Error| format!("{what} {}: {e}", path.display());
    if holds_checkpoint(dir).map_err(|e| io("reading", dir, e))? {
        return Err("the directory holds a checkpoint already: a savepoint needs an empty or new directory".into());
    }
    let from = checkpoint_dir(root, id);
    let to = checkpoint_dir(dir, id);
    std::fs::create_dir_all(&to).map_err(|e| io("creating", &to, e))?;
    let mut linked = true;
    let mut names = Vec::new();
    for entry in std::fs::read_dir(&from).map_err(|e| io("reading", &from, e))? {
        let name = entry.map_err(|e| io("reading", &from, e))?.file_name();
        if name != MANIFEST_FILE {
            names.push(name);
        }
    }
    for name in names {
        let (src, dst) = (from.join(&name), to.join(&name));
        // The part is durable already; only the new name needs the directory's sync below.
        if !link || std::fs::hard_link(&src, &dst).is_err() {
            linked = false;
            std::fs::copy(&src, &dst).map_err(|e| io("copying", &src, e))?;
            sync(&dst).map_err(|e| io("syncing", &dst, e))?;
        }
    }
    // The manifest last, as the store writes it: durable under its temporary name, then
    // renamed, so the savepoint is complete exactly when its MANIFEST exists.
    let (manifest, tmp) = (to.join(MANIFEST_FILE), to.join(MANIFEST_TMP_FILE));
    std::fs::copy(from.join(MANIFEST_FILE), &tmp).map_err(|e| io("copying the manifest to", &tmp, e))?;
    sync(&tmp).map_err(|e| io("syncing", &tmp, e))?;
    sync(&to).map_err(|e| io("syncing", &to, e))?;
    std::fs::rename(&tmp, &manifest).map_err(|e| io("renaming", &tmp, e))?;
    sync(&to).map_err(|e| io("syncing", &to, e))?;
    sync(dir).map_err(|e| io("syncing", dir, e))?;
    Ok(linked)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn savepoint_export_copies_a_checkpoint_and_refuses_a_used_directory() {
        let tmp = std::env::temp_dir().join(format!("sluice-savepoint-export-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&tmp);
        let (root, dir) = (tmp.join("job"), tmp.join("sp"));
        let chk = checkpoint_dir(&root, CheckpointId(4));
        std::fs::create_dir_all(&chk).unwrap();
        std::fs::write(chk.join("shard-0.part"), b"part bytes").unwrap();
        std::fs::write(chk.join(MANIFEST_FILE), b"manifest").unwrap();
        // Same file system: linked, so deleting the job's copy leaves the savepoint whole.
        assert!(export(&root, CheckpointId(4), &dir).unwrap());
        std::fs::remove_dir_all(&root).unwrap();
        let out = checkpoint_dir(&dir, CheckpointId(4));
        assert_eq!(std::fs::read(out.join("shard-0.part")).unwrap(), b"part bytes");
        assert_eq!(std::fs::read(out.join(MANIFEST_FILE)).unwrap(), b"manifest");
        assert!(!out.join(MANIFEST_TMP_FILE).exists());
        std::fs::create_dir_all(&chk).unwrap();
        let err = export(&root, CheckpointId(4), &dir).unwrap_err();
        assert!(err.contains("holds a checkpoint already"), "{err}");
        // Copied (as across file systems): the same files, the job's untouched.
        let copy = tmp.join("copy");
        std::fs::write(chk.join("shard-0.part"), b"part bytes").unwrap();
        std::fs::write(chk.join(MANIFEST_FILE), b"manifest").unwrap();
        assert!(!export_parts(&root, CheckpointId(4), &copy, false).unwrap());
        let out = checkpoint_dir(&copy, CheckpointId(4));
        assert_eq!(std::fs::read(out.join("shard-0.part")).unwrap(), b"part bytes");
        assert_eq!(std::fs::read(out.join(MANIFEST_FILE)).unwrap(), b"manifest");
        assert_eq!(std::fs::read(chk.join("shard-0.part")).unwrap(), b"part bytes");
        std::fs::remove_dir_all(&tmp).unwrap();
    }
}
