//! Part files: one piece of a checkpoint's state, written whole and checked on read.
//!
//! ```text
//! header (32 bytes, little endian)
//!   0  magic "SLCP"   4  version u16    6  flags u16 (0)
//!   8  checkpoint id u64                16 body length u64
//!   24 body CRC32C u32                  28 CRC32C of bytes 0..28
//! body at byte 32 (16-byte aligned, as rkyv wants its archives)
//! ```
//!
//! The header has its own CRC, so a damaged length is told apart from a damaged body,
//! and it names its checkpoint, so a part copied into the wrong directory is caught. The
//! file's size must be exactly header plus body: anything else is a torn or stray file.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};

use futures_lite::future;
use rkyv::util::AlignedVec;

use crate::error::{LogError, Result};
use crate::storage::Storage;
use crate::types::{CheckpointId, FilePos};

use super::files::{CHUNK_BYTES, is_not_found, open_read, read_exact, write_file};
use super::{MANIFEST_FILE, PartInfo, checkpoint_dir, part_path, validate_part_name};

/// Bytes before a part's body.
pub const PART_HEADER_BYTES: usize = 32;

/// Chunk reads a part's scan keeps in flight.
const READ_AHEAD_CHUNKS: usize = 4;

/// A chunk read submitted ahead of the one being checked.
enum Ahead<F, R> {
    Pending(std::pin::Pin<Box<F>>),
    Done(R),
}

const MAGIC: u32 = u32::from_le_bytes(*b"SLCP");
const VERSION: u16 = 1;

/// Writes and reads the parts of checkpoints under one root directory.
///
/// It keeps nothing but the root, so each shard makes its own, with the storage of its
/// own executor, and writes its part concurrently with the others; the coordinator's
/// [`super::CheckpointStore`] then commits the manifest that names them.
#[derive(Clone, Debug)]
pub struct PartStore<S: Storage> {
    storage: S,
    root: PathBuf,
}

impl<S: Storage> PartStore<S> {
    /// Parts under `root`, the same root the [`super::CheckpointStore`] was opened on.
    pub fn new(storage: S, root: impl Into<PathBuf>) -> PartStore<S> {
        PartStore { storage, root: root.into() }
    }

    /// The root directory.
    #[must_use]
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The storage backend.
    #[must_use]
    pub fn storage(&self) -> &S {
        &self.storage
    }

    /// Writes part `name` of checkpoint `id` durably (written and fdatasynced; its
    /// directory entry becomes durable when the checkpoint commits) and returns what the
    /// manifest must record. `base` makes it a delta on that older checkpoint.
    ///
    /// The checkpoint must have been begun ([`super::CheckpointStore::begin`]) and not
    /// aborted; writing into one that was is refused with [`LogError::Checkpoint`], so a
    /// shard that finishes after its checkpoint timed out fails cleanly.
    pub async fn write_part(
        &self,
        id: CheckpointId,
        name: &str,
        base: Option<CheckpointId>,
        body: &[u8],
    ) -> Result<PartInfo> {
        validate_part_name(name)?;
        if let Some(b) = base
            && b >= id
        {
            return Err(LogError::Checkpoint {
                id,
                reason: format!("part {name} cannot be a delta on {b}, not older"),
            });
        }
        // Catches a shard writing with a stale id: a completed checkpoint never changes.
        // (Not a lock: the coordinator only commits after every shard acknowledged.)
        if checkpoint_dir(&self.root, id).join(MANIFEST_FILE).exists() {
            let reason = format!("cannot write part {name}: the checkpoint is completed");
            return Err(LogError::Checkpoint { id, reason });
        }
        let crc = crc32c::crc32c(body);
        let header = encode_header(id, body.len() as u64, crc);
        let path = part_path(&self.root, id, name);
        match write_file(&self.storage, &path, &header, body).await {
            Err(e) if is_not_found(&e) => Err(LogError::Checkpoint {
                id,
                reason: format!("cannot write part {name}: the checkpoint was not begun or was aborted"),
            }),
            Err(e) => Err(e),
            Ok(()) => Ok(PartInfo { name: name.to_string(), len: body.len() as u64, crc32c: crc, base }),
        }
    }

    /// Reads part `info` of checkpoint `id`, checking its header, its length and its CRC
    /// against both the header and `info` (from the manifest).
    ///
    /// The body comes in an [`AlignedVec`], so an rkyv archive in it can be accessed in
    /// place, without copying it again.
    pub async fn read_part(&self, id: CheckpointId, info: &PartInfo) -> Result<AlignedVec<16>> {
        let mut out = AlignedVec::new();
        self.scan(id, info, Some(&mut out)).await?;
        Ok(out)
    }

    /// Checks part `info` of checkpoint `id` as [`PartStore::read_part`] does, without
    /// keeping its body.
    pub async fn verify_part(&self, id: CheckpointId, info: &PartInfo) -> Result<()> {
        self.scan(id, info, None).await
    }

    /// Checks that part `info` is on disk with the header `info` describes, reading only
    /// the header: what a commit checks before it names the part in a manifest.
    pub(super) async fn check_header(&self, id: CheckpointId, info: &PartInfo) -> Result<()> {
        let path = part_path(&self.root, id, &info.name);
        let (file, size) = open_read(&self.storage, &path).await?;
        if size < PART_HEADER_BYTES as u64 {
            return check_header(&path, &[], size, id, info);
        }
        let head = read_exact(&file, 0, PART_HEADER_BYTES).await?;
        check_header(&path, &head, size, id, info)
    }

    async fn scan(&self, id: CheckpointId, info: &PartInfo, mut keep: Option<&mut AlignedVec<16>>) -> Result<()> {
        validate_part_name(&info.name)?;
        let path = part_path(&self.root, id, &info.name);
        let (file, size) = open_read(&self.storage, &path).await?;
        if let Some(out) = keep.as_deref_mut() {
            out.reserve_exact(usize::try_from(info.len).unwrap_or(0).min(size as usize));
        }
        if size < PART_HEADER_BYTES as u64 {
            return check_header(&path, &[], size, id, info);
        }
        let mut crc = 0;
        // Aligned chunks from the start, the first holding the header, read
        // `READ_AHEAD_CHUNKS` at a time: each read is submitted (polled once) before the
        // chunk ahead of it is checked and copied, so the disk works while the CPU does.
        let mut chunks = (0..size.div_ceil(CHUNK_BYTES as u64)).map(|i| {
            let pos = i * CHUNK_BYTES as u64;
            (pos, usize::try_from(size - pos).unwrap_or(usize::MAX).min(CHUNK_BYTES))
        });
        let mut ahead = VecDeque::new();
        loop {
            while ahead.len() < READ_AHEAD_CHUNKS {
                let Some((pos, n)) = chunks.next() else { break };
                let mut read = Box::pin(read_exact(&file, pos, n));
                let done = future::poll_once(&mut read).await;
                ahead.push_back((pos, done.map_or(Ahead::Pending(read), Ahead::Done)));
            }
            let Some((pos, read)) = ahead.pop_front() else { break };
            let chunk = match read {
                Ahead::Done(r) => r?,
                Ahead::Pending(read) => read.await?,
            };
            let mut data: &[u8] = &chunk;
            if pos == 0 {
                check_header(&path, data, size, id, info)?;
                data = &data[PART_HEADER_BYTES..];
            }
            crc = crc32c::crc32c_append(crc, data);
            if let Some(out) = keep.as_deref_mut() {
                out.extend_from_slice(data);
            }
        }
        if crc != info.crc32c {
            let reason = format!("body CRC mismatch (expected {:#010x}, computed {crc:#010x})", info.crc32c);
            return Err(LogError::Corrupt { path, pos: FilePos(PART_HEADER_BYTES as u64), reason });
        }
        Ok(())
    }
}

fn encode_header(id: CheckpointId, len: u64, crc: u32) -> [u8; PART_HEADER_BYTES] {
    let mut h = [0u8; PART_HEADER_BYTES];
    h[0..4].copy_from_slice(&MAGIC.to_le_bytes());
    h[4..6].copy_from_slice(&VERSION.to_le_bytes());
    h[8..16].copy_from_slice(&id.0.to_le_bytes());
    h[16..24].copy_from_slice(&len.to_le_bytes());
    h[24..28].copy_from_slice(&crc.to_le_bytes());
    let header_crc = crc32c::crc32c(&h[0..28]);
    h[28..32].copy_from_slice(&header_crc.to_le_bytes());
    h
}

/// Checks a part's header bytes (`head`, at least the header if the file has one)
/// against the file size, the checkpoint it is in, and the manifest's record of it.
fn check_header(path: &Path, head: &[u8], size: u64, id: CheckpointId, info: &PartInfo) -> Result<()> {
    let corrupt =
        |pos: u64, reason: String| Err(LogError::Corrupt { path: path.to_path_buf(), pos: FilePos(pos), reason });
    if head.len() < PART_HEADER_BYTES {
        return corrupt(0, format!("part file of {size} bytes is shorter than its {PART_HEADER_BYTES}-byte header"));
    }
    let u32_at = |i: usize| u32::from_le_bytes(head[i..i + 4].try_into().expect("4 bytes"));
    let u64_at = |i: usize| u64::from_le_bytes(head[i..i + 8].try_into().expect("8 bytes"));
    if u32_at(0) != MAGIC {
        return corrupt(0, format!("bad part magic {:#010x}", u32_at(0)));
    }
    if crc32c::crc32c(&head[0..28]) != u32_at(28) {
        return corrupt(0, "part header CRC mismatch".to_string());
    }
    let version = u16::from_le_bytes(head[4..6].try_into().expect("2 bytes"));
    if version != VERSION {
        return corrupt(4, format!("unsupported part version {version}"));
    }
    let (stored_id, len, crc) = (CheckpointId(u64_at(8)), u64_at(16), u32_at(24));
    if stored_id != id {
        return corrupt(8, format!("part belongs to checkpoint {stored_id}, found in checkpoint {id}"));
    }
    if size.checked_sub(PART_HEADER_BYTES as u64) != Some(len) {
        return corrupt(16, format!("part header says {len} body bytes, the file holds {size} bytes in all"));
    }
    if len != info.len || crc != info.crc32c {
        let reason = format!(
            "part header (len {len}, crc {crc:#010x}) differs from the manifest (len {}, crc {:#010x})",
            info.len, info.crc32c
        );
        return corrupt(16, reason);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checkpoint_part_header_checks() {
        let id = CheckpointId(3);
        let info = PartInfo { name: "p".into(), len: 10, crc32c: 0x1234, base: None };
        let size = PART_HEADER_BYTES as u64 + 10;
        let good = encode_header(id, 10, 0x1234);
        let path = Path::new("chk/p.part");
        assert!(check_header(path, &good, size, id, &info).is_ok());
        // Any flipped header byte is caught by the header CRC (or the magic).
        for i in 0..PART_HEADER_BYTES {
            let mut bad = good;
            bad[i] ^= 0x40;
            let err = check_header(path, &bad, size, id, &info).expect_err("flip");
            assert!(err.is_corruption(), "byte {i}: {err}");
        }
        let cases: [(&[u8], u64, CheckpointId, &str); 4] = [
            (&good[..20], 20, id, "shorter than"),
            (&good, size + 1, id, "the file holds"),
            (&good, size, CheckpointId(4), "belongs to checkpoint 3"),
            (&encode_header(id, 10, 0x9999), size, id, "differs from the manifest"),
        ];
        for (head, size, in_id, what) in cases {
            let err = check_header(path, head, size, in_id, &info).expect_err(what);
            assert!(matches!(&err, LogError::Corrupt { reason, .. } if reason.contains(what)), "{err}");
        }
    }
}
