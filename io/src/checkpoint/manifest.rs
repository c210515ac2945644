//! The manifest: what a completed checkpoint holds, and its file format.
//!
//! ```text
//! header (16 bytes, little endian)
//!   0  magic "SLCM"    4  version u16    6  flags u16 (0)
//!   8  body length u32 12  CRC32C of bytes 4..12 and of the body
//! body
//!   id u64
//!   metadata length u32, metadata bytes
//!   part count u32, then per part:
//!     name length u16, name bytes, body length u64, body CRC32C u32,
//!     has base u8 (0 or 1), base id u64 (present only if has base is 1)
//! ```
//!
//! The CRC covers everything but the magic and itself, so a damaged length in the header
//! is caught as well as damage in the body. Decoding checks every length against the
//! bytes present, so even bytes that pass the CRC by design cannot make it panic.

use std::collections::BTreeSet;

use crate::types::{CheckpointId, FilePos};

use super::validate_part_name;

/// One part of a checkpoint, as its manifest records it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PartInfo {
    /// The caller's name for the part (see [`super::validate_part_name`]).
    pub name: String,
    /// The body's length in bytes.
    pub len: u64,
    /// The CRC32C of the body.
    pub crc32c: u32,
    /// For an incremental part, the older checkpoint holding the state this part's body
    /// applies to; restoring this checkpoint needs that one too. `None` for a full part.
    pub base: Option<CheckpointId>,
}

/// What a completed checkpoint holds.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Manifest {
    /// The checkpoint.
    pub id: CheckpointId,
    /// Its parts, as [`super::PartStore::write_part`] returned them.
    pub parts: Vec<PartInfo>,
    /// Opaque to the store: the engine keeps its sources' offsets here.
    pub metadata: Vec<u8>,
}

impl Manifest {
    /// A manifest for checkpoint `id`.
    #[must_use]
    pub fn new(id: CheckpointId, parts: Vec<PartInfo>, metadata: Vec<u8>) -> Manifest {
        Manifest { id, parts, metadata }
    }

    /// The part called `name`, if there is one.
    #[must_use]
    pub fn part(&self, name: &str) -> Option<&PartInfo> {
        self.parts.iter().find(|p| p.name == name)
    }

    /// The checkpoints that this one's parts are deltas on: restoring it needs them
    /// (and, in turn, the checkpoints that they need).
    #[must_use]
    pub fn bases(&self) -> BTreeSet<CheckpointId> {
        self.parts.iter().filter_map(|p| p.base).collect()
    }

    /// The manifest file's bytes.
    #[must_use]
    pub(super) fn encode(&self) -> Vec<u8> {
        let mut body = Vec::with_capacity(16 + self.metadata.len() + self.parts.len() * 48);
        body.extend_from_slice(&self.id.0.to_le_bytes());
        body.extend_from_slice(&len_u32(self.metadata.len(), "metadata").to_le_bytes());
        body.extend_from_slice(&self.metadata);
        body.extend_from_slice(&len_u32(self.parts.len(), "part count").to_le_bytes());
        for p in &self.parts {
            // The store validated the names, so they fit the 16-bit length.
            let name_len = u16::try_from(p.name.len()).expect("part names are validated");
            body.extend_from_slice(&name_len.to_le_bytes());
            body.extend_from_slice(p.name.as_bytes());
            body.extend_from_slice(&p.len.to_le_bytes());
            body.extend_from_slice(&p.crc32c.to_le_bytes());
            match p.base {
                None => body.push(0),
                Some(base) => {
                    body.push(1);
                    body.extend_from_slice(&base.0.to_le_bytes());
                }
            }
        }
        let mut out = Vec::with_capacity(HEADER_BYTES + body.len());
        out.extend_from_slice(&MAGIC.to_le_bytes());
        out.extend_from_slice(&VERSION.to_le_bytes());
        out.extend_from_slice(&0u16.to_le_bytes());
        out.extend_from_slice(&len_u32(body.len(), "manifest").to_le_bytes());
        let crc = crc32c::crc32c_append(crc32c::crc32c(&out[4..12]), &body);
        out.extend_from_slice(&crc.to_le_bytes());
        out.extend_from_slice(&body);
        out
    }

    /// Reads a manifest file's bytes; on damage, where and what.
    pub(super) fn decode(bytes: &[u8]) -> Result<Manifest, (FilePos, String)> {
        if bytes.len() < HEADER_BYTES {
            let reason = format!("manifest of {} bytes is shorter than its {HEADER_BYTES}-byte header", bytes.len());
            return Err((FilePos(0), reason));
        }
        let magic = u32::from_le_bytes(bytes[0..4].try_into().expect("4 bytes"));
        if magic != MAGIC {
            return Err((FilePos(0), format!("bad manifest magic {magic:#010x}")));
        }
        let body_len = u32::from_le_bytes(bytes[8..12].try_into().expect("4 bytes")) as usize;
        if bytes.len() != HEADER_BYTES + body_len {
            let reason = format!("manifest header says {body_len} body bytes, the file holds {}", bytes.len());
            return Err((FilePos(8), reason));
        }
        let stored = u32::from_le_bytes(bytes[12..16].try_into().expect("4 bytes"));
        let crc = crc32c::crc32c_append(crc32c::crc32c(&bytes[4..12]), &bytes[HEADER_BYTES..]);
        if crc != stored {
            return Err((FilePos(0), format!("manifest CRC mismatch (stored {stored:#010x}, computed {crc:#010x})")));
        }
        let version = u16::from_le_bytes(bytes[4..6].try_into().expect("2 bytes"));
        if version != VERSION {
            return Err((FilePos(4), format!("unsupported manifest version {version}")));
        }
        let mut r = Reader { bytes, pos: HEADER_BYTES };
        let id = CheckpointId(r.u64("id")?);
        let metadata_len = r.u32("metadata length")? as usize;
        let metadata = r.take(metadata_len, "metadata")?.to_vec();
        let count = r.u32("part count")? as usize;
        // Every part takes at least 15 bytes, so a count the bytes cannot hold is damage
        // and never a reason to allocate.
        if count > r.remaining() / 15 {
            return Err((FilePos(r.pos as u64), format!("{count} parts cannot fit in {} bytes", r.remaining())));
        }
        let mut parts = Vec::with_capacity(count);
        for _ in 0..count {
            let at = r.pos;
            let name_len = usize::from(r.u16("part name length")?);
            let name = std::str::from_utf8(r.take(name_len, "part name")?)
                .map_err(|_| (FilePos(at as u64), "part name is not UTF-8".to_string()))?
                .to_string();
            validate_part_name(&name).map_err(|e| (FilePos(at as u64), e.to_string()))?;
            let len = r.u64("part length")?;
            let crc32c = r.u32("part CRC")?;
            let base = match r.take(1, "part base flag")?[0] {
                0 => None,
                1 => Some(CheckpointId(r.u64("part base")?)),
                other => return Err((FilePos(r.pos as u64 - 1), format!("bad part base flag {other}"))),
            };
            parts.push(PartInfo { name, len, crc32c, base });
        }
        if r.remaining() != 0 {
            return Err((FilePos(r.pos as u64), format!("{} unexpected bytes after the parts", r.remaining())));
        }
        Ok(Manifest { id, parts, metadata })
    }
}

const MAGIC: u32 = u32::from_le_bytes(*b"SLCM");
const VERSION: u16 = 1;
const HEADER_BYTES: usize = 16;

/// A length the format stores in 32 bits. A manifest is small by design (a list of
/// parts and a few offsets), so exceeding it is a caller bug, not an operating error.
fn len_u32(len: usize, what: &str) -> u32 {
    u32::try_from(len).unwrap_or_else(|_| panic!("{what} of {len} bytes exceeds the manifest's 4 GiB limit"))
}

/// A bounds-checked cursor over the manifest body.
struct Reader<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn remaining(&self) -> usize {
        self.bytes.len() - self.pos
    }

    fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8], (FilePos, String)> {
        if n > self.remaining() {
            return Err((FilePos(self.pos as u64), format!("{what} runs past the end of the manifest")));
        }
        let out = &self.bytes[self.pos..self.pos + n];
        self.pos += n;
        Ok(out)
    }

    fn u16(&mut self, what: &str) -> Result<u16, (FilePos, String)> {
        Ok(u16::from_le_bytes(self.take(2, what)?.try_into().expect("2 bytes")))
    }

    fn u32(&mut self, what: &str) -> Result<u32, (FilePos, String)> {
        Ok(u32::from_le_bytes(self.take(4, what)?.try_into().expect("4 bytes")))
    }

    fn u64(&mut self, what: &str) -> Result<u64, (FilePos, String)> {
        Ok(u64::from_le_bytes(self.take(8, what)?.try_into().expect("8 bytes")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Manifest {
        Manifest::new(
            CheckpointId(7),
            vec![
                PartInfo { name: "shard-0".into(), len: 0, crc32c: 0, base: None },
                PartInfo { name: "shard-1".into(), len: 4097, crc32c: 0xdead_beef, base: Some(CheckpointId(6)) },
            ],
            b"offsets: t/0=12 t/1=40".to_vec(),
        )
    }

    #[test]
    fn checkpoint_manifest_round_trips() {
        let m = sample();
        assert_eq!(Manifest::decode(&m.encode()), Ok(m.clone()));
        assert_eq!(m.bases(), BTreeSet::from([CheckpointId(6)]));
        assert_eq!(m.part("shard-1").map(|p| p.len), Some(4097));
        let empty = Manifest::new(CheckpointId(1), Vec::new(), Vec::new());
        assert_eq!(Manifest::decode(&empty.encode()), Ok(empty));
    }

    /// Every single flipped byte and every truncation of a manifest is reported as
    /// damage, never decoded into something else and never a panic. Exhaustive over
    /// positions; the flipped bits are seeded (`SEED=` replays).
    #[test]
    fn checkpoint_manifest_damage_is_detected() {
        let seed = std::env::var("SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(|| {
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(1, |d| d.as_nanos() as u64)
        });
        eprintln!("checkpoint_manifest_damage_is_detected: SEED={seed}");
        let mut state = seed;
        let mut next = move || {
            // SplitMix64: no dependency, the same sequence everywhere.
            state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = state;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^ (z >> 31)
        };
        let good = sample().encode();
        for i in 0..good.len() {
            let mut bad = good.clone();
            bad[i] ^= (next() % 255 + 1) as u8;
            assert!(Manifest::decode(&bad).is_err(), "flip at byte {i} went unnoticed");
        }
        for len in 0..good.len() {
            assert!(Manifest::decode(&good[..len]).is_err(), "truncation to {len} bytes went unnoticed");
        }
        let mut longer = good.clone();
        longer.push(0);
        assert!(Manifest::decode(&longer).is_err(), "a trailing byte went unnoticed");
    }
}
