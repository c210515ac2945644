//! Checkpoint files: the storage half of sluice's checkpoints.
//!
//! A checkpoint is a directory `chk-{id:020}/` under the store's root. It holds one
//! *part* file per piece of state the caller chose to write separately (a shard, a range
//! of key groups), named by the caller and stored as `{name}.part`, and a `MANIFEST`
//! written last. The store does not interpret part bodies (the engine encodes them with
//! rkyv); it makes them durable, checks them on the way back, and decides which
//! checkpoint is the latest one that can be restored.
//!
//! - [`part`]: the part file format (a 32-byte header with magic, version, checkpoint id,
//!   body length and CRC32C, then the body) and [`PartStore`], which writes and reads
//!   parts. A `PartStore` holds no state beyond the root path, so every shard can make
//!   its own on its own executor and write its part there, without a global pause.
//! - [`manifest`]: the [`Manifest`] (id, parts with their length, CRC and base, opaque
//!   metadata such as source offsets) and its encoding with its own CRC.
//! - [`store`]: [`CheckpointStore`], the coordinator's side: ids, commit (write
//!   `MANIFEST.tmp`, fsync, rename to `MANIFEST`, fsync the checkpoint directory and the
//!   root), abort, keeping the last K completed checkpoints, and finding the latest valid
//!   one on recovery.
//!
//! **Incremental chains.** A part may be a delta: its [`PartInfo::base`] names an older
//! checkpoint that holds the state it applies to (by convention the part of the same
//! name there, but the store does not look inside). Restoring a checkpoint needs every
//! checkpoint reachable through the bases of its parts, so pruning never removes one
//! that a kept checkpoint reaches, and a checkpoint whose chain is damaged is not valid.
//! Consolidation is the engine's choice: a part with no base is a full snapshot, and
//! once no kept checkpoint reaches the old chain, pruning removes it.
//!
//! **Contract.** A checkpoint is completed exactly when its `MANIFEST` exists; a
//! directory without one is what a crash mid-checkpoint leaves, and opening the store
//! removes it. Everything a `MANIFEST` names was durable before the `MANIFEST` was
//! written. Damage is always a typed error ([`LogError::Corrupt`] with the file and what
//! failed), never a panic. All file I/O goes through the [`Storage`] seam.
//!
//! [`Storage`]: crate::storage::Storage

mod files;
pub mod manifest;
pub mod part;
pub mod store;

use std::path::{Path, PathBuf};

pub use manifest::{Manifest, PartInfo};
pub use part::PartStore;
pub use store::{CheckpointStore, CommitReport, LatestValid, OpenReport, SkippedCheckpoint};

use crate::error::{LogError, Result};
use crate::types::CheckpointId;

/// The file whose presence makes a checkpoint completed.
pub const MANIFEST_FILE: &str = "MANIFEST";

/// The manifest while it is being written; renamed to [`MANIFEST_FILE`] once durable.
pub const MANIFEST_TMP_FILE: &str = "MANIFEST.tmp";

/// The largest manifest written or read. A manifest lists parts and carries a few
/// offsets, so this is far beyond any real one; a size past it on disk is damage, and is
/// never read into memory.
pub const MANIFEST_BYTES_MAX: usize = 64 << 20;

/// The suffix of part files, so that a part name can never clash with the manifest.
const PART_SUFFIX: &str = ".part";

/// The longest part name accepted, in bytes: short enough for any filesystem's name
/// limit once the suffix is added, and for the manifest's 16-bit name length.
pub const PART_NAME_BYTES_MAX: usize = 128;

const DIR_PREFIX: &str = "chk-";

/// Checks that `name` can name a part: 1 to [`PART_NAME_BYTES_MAX`] bytes of
/// `[a-zA-Z0-9._-]`, starting with a letter or digit. That rules out path separators,
/// `.` and `..`, and hidden files (the storage backend may leave `.iopoll-probe` in a
/// directory it opens files in).
pub fn validate_part_name(name: &str) -> Result<()> {
    let invalid = |reason| Err(LogError::InvalidName { name: name.to_string(), reason });
    if name.is_empty() {
        return invalid("a part name must not be empty");
    }
    if name.len() > PART_NAME_BYTES_MAX {
        return invalid("a part name must be at most 128 bytes");
    }
    if !name.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-')) {
        return invalid("a part name may hold only ASCII letters, digits, '.', '_' and '-'");
    }
    if !name.as_bytes()[0].is_ascii_alphanumeric() {
        return invalid("a part name must start with a letter or a digit");
    }
    Ok(())
}

/// The directory of checkpoint `id` under `root`.
#[must_use]
pub fn checkpoint_dir(root: &Path, id: CheckpointId) -> PathBuf {
    root.join(format!("{DIR_PREFIX}{:020}", id.0))
}

/// The file of part `name` of checkpoint `id` (the name must be valid).
#[must_use]
pub fn part_path(root: &Path, id: CheckpointId, name: &str) -> PathBuf {
    checkpoint_dir(root, id).join(format!("{name}{PART_SUFFIX}"))
}

/// The checkpoint id a directory name stands for, if it is one of ours.
fn parse_checkpoint_dir(name: &str) -> Option<CheckpointId> {
    let digits = name.strip_prefix(DIR_PREFIX)?;
    if digits.len() != 20 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok().map(CheckpointId)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checkpoint_part_names_are_validated() {
        for good in ["shard-0", "kg_0-127.v1", "0", "A.b_c-d", &"x".repeat(PART_NAME_BYTES_MAX)] {
            assert!(validate_part_name(good).is_ok(), "{good:?} should be accepted");
        }
        let long = "y".repeat(PART_NAME_BYTES_MAX + 1);
        for bad in ["", ".", "..", "../x", "a/b", "/abs", ".iopoll-probe", "-x", "_x", "a b", "é", "a\0b", &long] {
            let err = validate_part_name(bad).expect_err(bad);
            assert!(matches!(err, LogError::InvalidName { ref name, .. } if name == bad), "{err}");
        }
    }

    #[test]
    fn checkpoint_dir_names_round_trip() {
        let root = Path::new("/data/checkpoints");
        let id = CheckpointId(42);
        let dir = checkpoint_dir(root, id);
        assert_eq!(dir, Path::new("/data/checkpoints/chk-00000000000000000042"));
        let name = dir.file_name().and_then(|n| n.to_str()).expect("utf-8 name");
        assert_eq!(parse_checkpoint_dir(name), Some(id));
        assert_eq!(part_path(root, id, "shard-1"), dir.join("shard-1.part"));
        for other in ["chk-42", "chk-0000000000000000004x", "x-00000000000000000042", ".iopoll-probe"] {
            assert_eq!(parse_checkpoint_dir(other), None, "{other}");
        }
    }
}
