//! The coordinator's side of checkpoints: handing out ids, committing manifests
//! atomically, aborting, keeping the last K completed checkpoints, and finding the
//! latest one that can be restored.
//!
//! A `CheckpointStore` lives on the coordinator's executor (`!Send`, like a log) and is
//! the only writer of manifests and the only remover of checkpoint directories. Shards
//! write their parts through their own [`PartStore`]s on the same root.

use std::collections::hash_map::Entry;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};

use crate::error::{LogError, Result};
use crate::storage::Storage;
use crate::types::{CheckpointId, FilePos};

use super::files::{is_not_found, open_read, read_exact, remove_checkpoint_dir, write_file};
use super::{
    MANIFEST_BYTES_MAX, MANIFEST_FILE, MANIFEST_TMP_FILE, Manifest, PartInfo, PartStore, checkpoint_dir,
    parse_checkpoint_dir, validate_part_name,
};

/// The checkpoints under one root directory. See the [module docs](super).
#[derive(Debug)]
pub struct CheckpointStore<S: Storage> {
    parts: PartStore<S>,
    keep_completed: usize,
    /// Completed checkpoints (a `MANIFEST` on disk) and the bases their parts name, or
    /// why their manifest could not be read.
    completed: BTreeMap<CheckpointId, Result<BTreeSet<CheckpointId>, LogError>>,
    /// Begun here and neither committed nor aborted.
    pending: BTreeSet<CheckpointId>,
    next_id: CheckpointId,
    opened: OpenReport,
}

/// What opening a store found and did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OpenReport {
    /// Completed checkpoints found (a `MANIFEST` present), oldest first.
    pub completed: Vec<CheckpointId>,
    /// Checkpoints without a `MANIFEST` (a crash mid-checkpoint, an abort cut short)
    /// whose directories were removed.
    pub removed_incomplete: Vec<CheckpointId>,
    /// Completed checkpoints whose `MANIFEST` does not read, and why. They are left in
    /// place: [`CheckpointStore::latest_valid`] reports them and the next commit prunes
    /// them.
    pub unreadable_manifests: Vec<(CheckpointId, String)>,
}

/// What a commit cleaned up after the manifest was durable. A failure here does not
/// undo the commit, so it is reported rather than returned.
#[derive(Debug, Default)]
pub struct CommitReport {
    /// Completed checkpoints removed: beyond the last K and reached by no kept chain.
    pub pruned: Vec<CheckpointId>,
    /// Older checkpoints that never completed (aborted, timed out, or left by a shard
    /// that wrote after an abort) whose directories were removed: an id older than a
    /// completed checkpoint can never complete.
    pub swept: Vec<CheckpointId>,
    /// Removals that failed; they are retried by the next commit or open.
    pub cleanup_errors: Vec<LogError>,
}

/// The result of [`CheckpointStore::latest_valid`].
#[derive(Debug, Default)]
pub struct LatestValid {
    /// The newest checkpoint whose manifest, parts and chain all verify.
    pub latest: Option<(CheckpointId, Manifest)>,
    /// Newer completed checkpoints passed over, newest first, each with its damage.
    pub skipped: Vec<SkippedCheckpoint>,
}

/// A completed checkpoint that cannot be restored.
#[derive(Debug)]
pub struct SkippedCheckpoint {
    /// The checkpoint.
    pub id: CheckpointId,
    /// Why: [`LogError::Corrupt`] for damaged bytes, [`LogError::Checkpoint`] for a broken
    /// chain, [`LogError::Io`] (not found) for a missing file.
    pub error: LogError,
}

impl<S: Storage> CheckpointStore<S> {
    /// Opens (creating it if needed) the store at `root`, keeping the last
    /// `keep_completed` completed checkpoints (at least 1). Directories of checkpoints
    /// that never completed are removed; the next id is past every id found, completed
    /// or not. So ids increase across restarts too, with one exception: the id of a
    /// checkpoint that was aborted (its directory removed) after the last completed one
    /// may be handed out again after a restart.
    pub async fn open(storage: S, root: impl Into<PathBuf>, keep_completed: usize) -> Result<CheckpointStore<S>> {
        let root = root.into();
        if keep_completed == 0 {
            return Err(LogError::InvalidConfig("checkpoint keep_completed must be at least 1".into()));
        }
        storage.create_dir_all(&root).map_err(|e| LogError::io("create directory", &root, e))?;
        let mut store = CheckpointStore {
            parts: PartStore::new(storage, root),
            keep_completed,
            completed: BTreeMap::new(),
            pending: BTreeSet::new(),
            next_id: CheckpointId::FIRST,
            opened: OpenReport::default(),
        };
        for (id, dir) in store.checkpoint_dirs()? {
            store.next_id = store.next_id.max(id.next());
            let entries = store.storage().list_dir(&dir).map_err(|e| LogError::io("list", &dir, e))?;
            if !entries.contains(&dir.join(MANIFEST_FILE)) {
                remove_checkpoint_dir(store.storage(), &dir).await?;
                eprintln!("sluice-io: checkpoint {id} never completed (no {MANIFEST_FILE}); removed {}", dir.display());
                store.opened.removed_incomplete.push(id);
                continue;
            }
            let bases = match store.read_manifest(id).await {
                Ok(m) => Ok(m.bases()),
                Err(e) if is_damage(&e) => {
                    eprintln!("sluice-io: checkpoint {id} has an unreadable manifest: {e}");
                    store.opened.unreadable_manifests.push((id, e.to_string()));
                    Err(e)
                }
                Err(e) => return Err(e),
            };
            store.completed.insert(id, bases);
            store.opened.completed.push(id);
        }
        Ok(store)
    }

    /// The root directory.
    #[must_use]
    pub fn root(&self) -> &Path {
        self.parts.root()
    }

    /// The storage backend.
    #[must_use]
    pub fn storage(&self) -> &S {
        self.parts.storage()
    }

    /// The part writer and reader of this store's root.
    #[must_use]
    pub fn parts(&self) -> &PartStore<S> {
        &self.parts
    }

    /// What opening the store found and did.
    #[must_use]
    pub fn open_report(&self) -> &OpenReport {
        &self.opened
    }

    /// The id the next [`CheckpointStore::begin`] hands out.
    #[must_use]
    pub fn next_id(&self) -> CheckpointId {
        self.next_id
    }

    /// Makes every id [`CheckpointStore::begin`] hands out from now on greater than `id`
    /// (a job that starts from a savepoint numbers its checkpoints after it, so that ids
    /// keep increasing along the job's history).
    pub fn advance_past(&mut self, id: CheckpointId) {
        if self.next_id <= id {
            self.next_id = id.next();
        }
    }

    /// Completed checkpoints on disk, oldest first (not verified: see
    /// [`CheckpointStore::latest_valid`]).
    #[must_use]
    pub fn completed(&self) -> Vec<CheckpointId> {
        self.completed.keys().copied().collect()
    }

    /// Starts the next checkpoint: hands out its id and creates its directory, so that
    /// parts can be written into it.
    ///
    /// The root must still be there: a root removed since the store opened is not made
    /// again (`LogError::Checkpoint`), since the completed checkpoints a delta would
    /// build on went with it. The store forgets them, so once the root is back (made by
    /// someone else) only whole snapshots can commit until a new chain begins.
    pub async fn begin(&mut self) -> Result<CheckpointId> {
        let id = self.next_id;
        // Advanced first: even a failed begin uses its id up, so ids stay unique.
        self.next_id = id.next();
        if !self.root().is_dir() {
            self.completed.clear();
            let reason = format!("the checkpoint directory {} was removed", self.root().display());
            return Err(LogError::Checkpoint { id, reason });
        }
        let dir = checkpoint_dir(self.root(), id);
        self.storage().create_dir_all(&dir).map_err(|e| LogError::io("create directory", &dir, e))?;
        self.pending.insert(id);
        Ok(id)
    }

    /// Writes a part of checkpoint `id`: [`PartStore::write_part`] on this store's root.
    pub async fn write_part(
        &self,
        id: CheckpointId,
        name: &str,
        base: Option<CheckpointId>,
        body: &[u8],
    ) -> Result<PartInfo> {
        self.parts.write_part(id, name, base, body).await
    }

    /// Reads a part of checkpoint `id`: [`PartStore::read_part`] on this store's root.
    pub async fn read_part(&self, id: CheckpointId, info: &PartInfo) -> Result<rkyv::util::AlignedVec<16>> {
        self.parts.read_part(id, info).await
    }

    /// Completes checkpoint `manifest.id`: checks that it is in progress and newer than
    /// every completed one, that its parts are on disk as described and that their
    /// bases are completed checkpoints; then syncs the checkpoint directory (the parts'
    /// entries), writes `MANIFEST.tmp`, fsyncs it, renames it to `MANIFEST`, and fsyncs
    /// the checkpoint directory and the root. Once it returns `Ok`, the checkpoint
    /// survives a crash. Then it prunes (see [`CommitReport`]).
    ///
    /// A rejected manifest (`LogError::Checkpoint`, `InvalidName`, or a part that does
    /// not match) changes nothing. A failure while writing aborts the checkpoint: its
    /// directory is removed, best effort, and the next checkpoint proceeds. If the
    /// failure came after the rename (a directory fsync) and the removal fails too, a
    /// restart may find the checkpoint completed although `commit` returned an error.
    /// It is a sound checkpoint (everything it names was durable before its manifest),
    /// but nobody was told it completed: a sink that commits on completion must also
    /// settle, on recovery, the epoch of the checkpoint it restores.
    pub async fn commit(&mut self, manifest: &Manifest) -> Result<CommitReport> {
        let id = manifest.id;
        self.check_commit(manifest).await?;
        let encoded = manifest.encode();
        if encoded.len() > MANIFEST_BYTES_MAX {
            let reason = format!("its manifest of {} bytes exceeds {MANIFEST_BYTES_MAX} bytes", encoded.len());
            return Err(LogError::Checkpoint { id, reason });
        }
        if let Err(e) = self.write_manifest(manifest, &encoded).await {
            self.pending.remove(&id);
            let dir = checkpoint_dir(self.root(), id);
            match remove_checkpoint_dir(self.storage(), &dir).await {
                Ok(()) => eprintln!("sluice-io: checkpoint {id} failed to commit ({e}); aborted"),
                Err(e2) => eprintln!("sluice-io: checkpoint {id} failed to commit ({e}); removing it failed: {e2}"),
            }
            return Err(e);
        }
        self.pending.remove(&id);
        self.completed.insert(id, Ok(manifest.bases()));
        Ok(self.prune(id).await)
    }

    /// Abandons checkpoint `id` (timed out, or a shard failed): removes its directory.
    /// Writing a part into it afterwards fails. A completed checkpoint cannot be aborted.
    pub async fn abort(&mut self, id: CheckpointId) -> Result<()> {
        if self.completed.contains_key(&id) {
            let reason = "it is completed; only a checkpoint in progress can be aborted".to_string();
            return Err(LogError::Checkpoint { id, reason });
        }
        self.pending.remove(&id);
        remove_checkpoint_dir(self.storage(), &checkpoint_dir(self.root(), id)).await
    }

    /// The newest completed checkpoint whose manifest verifies, whose parts all verify
    /// (header, length, CRC: every part is read), and whose chain does too. Newer ones
    /// that fail are skipped, each with a log line and an entry in
    /// [`LatestValid::skipped`]. Damage and missing files are reasons to skip; any other
    /// I/O error is returned, since it says nothing about the checkpoint.
    ///
    /// Verifying reads every part of the chosen checkpoint and its chain, and with
    /// `O_DIRECT` there is no page cache to serve the restore's reads afterwards: a
    /// recovery reads its state from disk twice. That is the price of choosing, before
    /// restoring anything, a checkpoint that will not turn out damaged half-way.
    pub async fn latest_valid(&self) -> Result<LatestValid> {
        let mut out = LatestValid::default();
        // Chains share their bases: each is verified once per call.
        let mut verdicts = HashMap::new();
        for &id in self.completed.keys().rev() {
            let error = match self.verify(id).await {
                Ok(manifest) => match self.verify_chain(&manifest, &mut verdicts).await? {
                    None => {
                        out.latest = Some((id, manifest));
                        return Ok(out);
                    }
                    Some(broken) => broken,
                },
                Err(e) if is_damage(&e) => e,
                Err(e) => return Err(e),
            };
            eprintln!("sluice-io: checkpoint {id} is unusable, falling back to an older one: {error}");
            out.skipped.push(SkippedCheckpoint { id, error });
        }
        Ok(out)
    }

    /// The checkpoint directories under the root, oldest first.
    fn checkpoint_dirs(&self) -> Result<Vec<(CheckpointId, PathBuf)>> {
        let root = self.root();
        let entries = self.storage().list_dir(root).map_err(|e| LogError::io("list", root, e))?;
        let mut dirs: Vec<_> = entries
            .into_iter()
            .filter(|p| p.is_dir())
            .filter_map(|p| Some((parse_checkpoint_dir(p.file_name()?.to_str()?)?, p)))
            .collect();
        dirs.sort();
        Ok(dirs)
    }

    /// Reads checkpoint `id`'s manifest (for walking an incremental chain to its bases).
    ///
    /// # Errors
    ///
    /// A missing or damaged manifest.
    pub async fn manifest(&self, id: CheckpointId) -> Result<Manifest> {
        self.read_manifest(id).await
    }

    async fn read_manifest(&self, id: CheckpointId) -> Result<Manifest> {
        let path = checkpoint_dir(self.root(), id).join(MANIFEST_FILE);
        let (file, size) = open_read(self.storage(), &path).await?;
        if size > MANIFEST_BYTES_MAX as u64 {
            let reason = format!("manifest of {size} bytes exceeds the {MANIFEST_BYTES_MAX}-byte limit");
            return Err(LogError::Corrupt { path, pos: FilePos(0), reason });
        }
        let bytes = match size {
            0 => Vec::new(),
            n => read_exact(&file, 0, n as usize).await?.to_vec(),
        };
        let m =
            Manifest::decode(&bytes).map_err(|(pos, reason)| LogError::Corrupt { path: path.clone(), pos, reason })?;
        if m.id != id {
            let reason = format!("manifest of checkpoint {} found in the directory of {id}", m.id);
            return Err(LogError::Corrupt { path, pos: FilePos(16), reason });
        }
        Ok(m)
    }

    /// Reads checkpoint `id`'s manifest and verifies every part it names.
    async fn verify(&self, id: CheckpointId) -> Result<Manifest> {
        let manifest = self.read_manifest(id).await?;
        for part in &manifest.parts {
            self.parts.verify_part(id, part).await?;
        }
        Ok(manifest)
    }

    /// Verifies every checkpoint reachable through the bases of `manifest`'s parts;
    /// returns the first broken link as an error about `manifest`'s checkpoint.
    async fn verify_chain(
        &self,
        manifest: &Manifest,
        verdicts: &mut HashMap<CheckpointId, Result<BTreeSet<CheckpointId>, LogError>>,
    ) -> Result<Option<LogError>> {
        let mut todo: Vec<_> = manifest.bases().into_iter().collect();
        let mut seen = BTreeSet::new();
        while let Some(base) = todo.pop() {
            if !seen.insert(base) {
                continue;
            }
            let verdict = match verdicts.entry(base) {
                Entry::Occupied(known) => known.into_mut(),
                Entry::Vacant(slot) => slot.insert(match self.verify(base).await {
                    Ok(m) => Ok(m.bases()),
                    Err(e) if is_damage(&e) => Err(e),
                    Err(e) => return Err(e),
                }),
            };
            match verdict {
                Ok(bases) => todo.extend(bases.iter().copied()),
                Err(reason) => {
                    let reason = format!("its chain needs checkpoint {base}, which is unusable: {reason}");
                    return Ok(Some(LogError::Checkpoint { id: manifest.id, reason }));
                }
            }
        }
        Ok(None)
    }

    /// Refuses a manifest that cannot be committed, before anything is written.
    async fn check_commit(&self, manifest: &Manifest) -> Result<()> {
        let id = manifest.id;
        let reject = |reason: String| Err(LogError::Checkpoint { id, reason });
        if !self.pending.contains(&id) {
            return reject("it is not in progress here (not begun, or already committed or aborted)".into());
        }
        if let Some((&last, _)) = self.completed.last_key_value()
            && last >= id
        {
            return reject(format!("checkpoint {last} completed first; an older one can no longer complete"));
        }
        let mut names = BTreeSet::new();
        for part in &manifest.parts {
            validate_part_name(&part.name)?;
            if !names.insert(part.name.as_str()) {
                return reject(format!("part {} is listed twice", part.name));
            }
            if let Some(base) = part.base
                && (base >= id || !matches!(self.completed.get(&base), Some(Ok(_))))
            {
                return reject(format!("part {} is a delta on {base}, which is not a completed checkpoint", part.name));
            }
            if let Err(e) = self.parts.check_header(id, part).await {
                return if is_not_found(&e) { reject(format!("part {} was not written", part.name)) } else { Err(e) };
            }
        }
        Ok(())
    }

    async fn write_manifest(&self, manifest: &Manifest, encoded: &[u8]) -> Result<()> {
        let storage = self.storage();
        let dir = checkpoint_dir(self.root(), manifest.id);
        let sync_dir = |d: PathBuf| async move {
            storage.sync_dir(&d).await.map_err(|e| LogError::SyncFailed { path: d.clone(), source: e })
        };
        // The parts' directory entries must be durable before a manifest names them.
        sync_dir(dir.clone()).await?;
        let tmp = dir.join(MANIFEST_TMP_FILE);
        let path = dir.join(MANIFEST_FILE);
        write_file(storage, &tmp, encoded, &[]).await?;
        storage.rename(&tmp, &path).await.map_err(|e| LogError::io("rename", &tmp, e))?;
        sync_dir(dir).await?;
        // The checkpoint directory's own entry, made when it began, is in the root.
        sync_dir(self.root().to_path_buf()).await
    }

    /// Removes completed checkpoints beyond the last `keep_completed` readable ones that
    /// no kept chain reaches, and directories of older checkpoints that never completed.
    async fn prune(&mut self, newest: CheckpointId) -> CommitReport {
        let mut report = CommitReport::default();
        let kept: Vec<_> = self
            .completed
            .iter()
            .rev()
            .filter(|(_, v)| v.is_ok())
            .take(self.keep_completed)
            .map(|(&id, _)| id)
            .collect();
        let mut protected = BTreeSet::new();
        let mut todo = kept;
        while let Some(id) = todo.pop() {
            if protected.insert(id)
                && let Some(Ok(bases)) = self.completed.get(&id)
            {
                todo.extend(bases.iter().copied());
            }
        }
        let doomed: Vec<_> = self.completed.keys().copied().filter(|id| !protected.contains(id)).collect();
        for id in doomed {
            match remove_checkpoint_dir(self.storage(), &checkpoint_dir(self.root(), id)).await {
                Ok(()) => {
                    self.completed.remove(&id);
                    report.pruned.push(id);
                }
                Err(e) => report.cleanup_errors.push(e),
            }
        }
        match self.checkpoint_dirs() {
            Ok(dirs) => {
                for (id, dir) in dirs {
                    if id >= newest || self.completed.contains_key(&id) {
                        continue;
                    }
                    self.pending.remove(&id);
                    match remove_checkpoint_dir(self.storage(), &dir).await {
                        Ok(()) => report.swept.push(id),
                        Err(e) => report.cleanup_errors.push(e),
                    }
                }
            }
            Err(e) => report.cleanup_errors.push(e),
        }
        for e in &report.cleanup_errors {
            eprintln!("sluice-io: checkpoint cleanup after committing {newest} failed: {e}");
        }
        report
    }
}

/// Errors that say a checkpoint is damaged or incomplete, rather than that the disk
/// could not be asked.
fn is_damage(e: &LogError) -> bool {
    matches!(e, LogError::Corrupt { .. } | LogError::Checkpoint { .. } | LogError::InvalidName { .. })
        || is_not_found(e)
}
