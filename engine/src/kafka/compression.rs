//! Kafka's record batch codecs: the records section of a v2 batch (everything after its
//! 61-byte header) inflated on produce and compressed again on fetch.
//!
//! Ids as in a batch's attributes (bits 0-2): 1 gzip, 2 snappy, 3 lz4, 4 zstd.
//!
//! - gzip: RFC 1952, members concatenated as Java's `GZIPInputStream` reads them;
//!   written at level 6 (Kafka's `compression.gzip.level` default).
//! - snappy: the Java client writes xerial's framing (a 16-byte header, `\x82SNAPPY\0`,
//!   then blocks, each a big-endian length and a raw snappy block); librdkafka and
//!   kafka-python (`xerial_compatible=False`) may write one raw snappy block. Both are
//!   read; xerial's framing is written, with 32 KiB blocks as the Java client's, since
//!   every client reads it.
//! - lz4: the LZ4 frame format with independent blocks (Kafka's `KafkaLZ4BlockOutputStream`
//!   and librdkafka's `LZ4F` settings; dependent blocks are refused, as Kafka's reader
//!   refuses them). Read here frame by frame, so that a frame cut short at a block boundary
//!   is caught (it lacks its end mark) and every checksum it carries is checked; written
//!   with 64 KiB blocks and no checksums beyond the header's, as Kafka does.
//! - zstd: standard frames (level 3 written, Kafka's default).
//!
//! **No decompression bomb**: [`inflate`] takes a hard limit on its output and fails with
//! [`InflateError::TooLarge`] as soon as more would follow. Output grows in steps up to
//! the limit and never past it: whatever the compressed bytes claim, inflating them costs
//! at most `limit` bytes of memory plus the decoder's own buffers (a snappy block's
//! claimed length is checked against what the limit leaves before it is allocated, an lz4
//! block is inflated straight into the output's room; zstd's window is bounded by the
//! library's default limit, 128 MiB of address space that is touched only as output is
//! written, so again by the limit). Truncated or corrupt
//! input is [`InflateError::Corrupt`]: each format's own framing and checksums catch it
//! (gzip's CRC-32 and length trailer, lz4's end mark and checksums, zstd's frame end,
//! snappy's block lengths), and never yields a shorter output.

use std::cell::RefCell;
use std::io::{Read, Write};

use bytes::{BufMut, BytesMut};
use sluice_io::record::Attributes;

use crate::config::CompressionType;

/// A record batch codec, by Kafka's id.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Codec {
    /// No compression (id 0).
    None,
    /// gzip (id 1).
    Gzip,
    /// Snappy (id 2).
    Snappy,
    /// LZ4 frames (id 3).
    Lz4,
    /// Zstandard (id 4).
    Zstd,
}

impl Codec {
    /// The codec with Kafka's id `id`, if there is one (ids 5-7 are not).
    #[must_use]
    pub fn from_id(id: u8) -> Option<Codec> {
        Some(match id {
            0 => Codec::None,
            1 => Codec::Gzip,
            2 => Codec::Snappy,
            3 => Codec::Lz4,
            4 => Codec::Zstd,
            _ => return None,
        })
    }

    /// Kafka's id.
    #[must_use]
    pub fn id(self) -> u8 {
        match self {
            Codec::None => 0,
            Codec::Gzip => 1,
            Codec::Snappy => 2,
            Codec::Lz4 => 3,
            Codec::Zstd => 4,
        }
    }

    /// Kafka's name for it.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Codec::None => "none",
            Codec::Gzip => "gzip",
            Codec::Snappy => "snappy",
            Codec::Lz4 => "lz4",
            Codec::Zstd => "zstd",
        }
    }
}

impl std::fmt::Display for Codec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// A codec by Kafka's name (`none`, `gzip`, `snappy`, `lz4`, `zstd`).
impl std::str::FromStr for Codec {
    type Err = String;

    fn from_str(s: &str) -> Result<Codec, String> {
        [Codec::None, Codec::Gzip, Codec::Snappy, Codec::Lz4, Codec::Zstd]
            .into_iter()
            .find(|c| c.name() == s)
            .ok_or_else(|| format!("unknown codec `{s}`: expected none, gzip, snappy, lz4 or zstd"))
    }
}

/// The codec a fetch sends a stored batch in: the topic's `compression.type`, or with
/// `producer` the codec the batch arrived in. Control batches (transaction markers) go
/// uncompressed, as Kafka writes them.
#[must_use]
pub fn for_fetch(topic: CompressionType, batch: Attributes) -> Codec {
    if batch.is_control() {
        return Codec::None;
    }
    match topic {
        CompressionType::Producer => Codec::from_id(batch.codec()).unwrap_or(Codec::None),
        CompressionType::Uncompressed => Codec::None,
        CompressionType::Gzip => Codec::Gzip,
        CompressionType::Snappy => Codec::Snappy,
        CompressionType::Lz4 => Codec::Lz4,
        CompressionType::Zstd => Codec::Zstd,
    }
}

/// Why compressed records could not be inflated.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InflateError {
    /// They inflate past the limit (nothing past it was inflated).
    #[error("{codec} records inflate past {limit} bytes, the most one batch may hold")]
    TooLarge {
        /// The codec.
        codec: Codec,
        /// The limit, in bytes.
        limit: usize,
    },
    /// The compressed bytes are truncated or corrupt.
    #[error("{codec} records are corrupt or truncated: {reason}")]
    Corrupt {
        /// The codec.
        codec: Codec,
        /// What the decoder said.
        reason: String,
    },
}

/// Bytes read from a streaming decoder at a time.
const READ_CHUNK_BYTES: usize = 64 << 10;
/// xerial's header: a marker byte, "SNAPPY", a NUL, then version 1 and compatible
/// version 1 as big-endian 32-bit integers.
const XERIAL_HEADER: [u8; 16] = [0x82, b'S', b'N', b'A', b'P', b'P', b'Y', 0, 0, 0, 0, 1, 0, 0, 0, 1];
/// Uncompressed bytes per xerial block written (the Java client's block size).
const XERIAL_BLOCK_BYTES: usize = 32 << 10;
/// Kafka's default levels.
const GZIP_LEVEL: u32 = 6;
const ZSTD_LEVEL: i32 = 3;

/// Inflates `input`, compressed with `codec`, into at most `limit` bytes.
pub fn inflate(codec: Codec, input: &[u8], limit: usize) -> Result<Vec<u8>, InflateError> {
    let mut out = Vec::new();
    inflate_into(codec, input, limit, &mut out)?;
    Ok(out)
}

/// [`inflate`] into `out` (empty): on an error it holds what was inflated before, in a
/// buffer whose capacity never passed `limit`.
fn inflate_into(codec: Codec, input: &[u8], limit: usize, out: &mut Vec<u8>) -> Result<(), InflateError> {
    let corrupt = |e: &dyn std::fmt::Display| InflateError::Corrupt { codec, reason: e.to_string() };
    match codec {
        Codec::None => bounded(codec, input, limit, out),
        Codec::Gzip => bounded(codec, flate2::read::MultiGzDecoder::new(input), limit, out),
        Codec::Snappy => inflate_snappy(input, limit, out),
        Codec::Lz4 => inflate_lz4(input, limit, out),
        Codec::Zstd => {
            bounded(codec, zstd::stream::read::Decoder::with_buffer(input).map_err(|e| corrupt(&e))?, limit, out)
        }
    }
}

/// Reads `reader` to its end into `out`, at most `limit` bytes.
fn bounded(codec: Codec, mut reader: impl Read, limit: usize, out: &mut Vec<u8>) -> Result<(), InflateError> {
    let mut chunk = vec![0u8; READ_CHUNK_BYTES];
    loop {
        let n = match reader.read(&mut chunk) {
            Ok(0) => return Ok(()),
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(InflateError::Corrupt { codec, reason: e.to_string() }),
        };
        if n > limit - out.len() {
            return Err(InflateError::TooLarge { codec, limit });
        }
        grow_within(out, n, limit);
        out.extend_from_slice(&chunk[..n]);
    }
}

/// Makes room for `more` bytes in `out`, doubling as a vector does but never past `limit`
/// (the caller has checked that `out.len() + more <= limit`).
fn grow_within(out: &mut Vec<u8>, more: usize, limit: usize) {
    let need = out.len() + more;
    if need > out.capacity() {
        let target = (out.capacity() * 2).max(need).max(READ_CHUNK_BYTES).min(limit);
        out.reserve_exact(target - out.len());
    }
}

fn inflate_snappy(input: &[u8], limit: usize, out: &mut Vec<u8>) -> Result<(), InflateError> {
    let codec = Codec::Snappy;
    let corrupt = |reason: String| InflateError::Corrupt { codec, reason };
    // xerial's framing starts with its marker and name; its version fields are not
    // checked (some writers put them little-endian), as the Java and Python clients do.
    let Some(mut rest) = input.strip_prefix(&XERIAL_HEADER[..8]) else {
        return raw_snappy_into(input, out, limit);
    };
    rest = rest.get(8..).ok_or_else(|| corrupt("xerial header truncated".into()))?;
    while !rest.is_empty() {
        let (len, tail) = rest.split_at_checked(4).ok_or_else(|| corrupt("xerial block length truncated".into()))?;
        let len = u32::from_be_bytes([len[0], len[1], len[2], len[3]]) as usize;
        let (block, tail) = tail
            .split_at_checked(len)
            .ok_or_else(|| corrupt(format!("xerial block of {len} bytes with {} left", tail.len())))?;
        raw_snappy_into(block, out, limit)?;
        rest = tail;
    }
    Ok(())
}

/// Appends one raw snappy block's content to `out`, checking the length it claims
/// against what `limit` leaves before allocating it.
fn raw_snappy_into(block: &[u8], out: &mut Vec<u8>, limit: usize) -> Result<(), InflateError> {
    let codec = Codec::Snappy;
    let corrupt = |e: snap::Error| InflateError::Corrupt { codec, reason: e.to_string() };
    let len = snap::raw::decompress_len(block).map_err(corrupt)?;
    if len > limit - out.len() {
        return Err(InflateError::TooLarge { codec, limit });
    }
    let at = out.len();
    grow_within(out, len, limit);
    out.resize(at + len, 0);
    let n = snap::raw::Decoder::new().decompress(block, &mut out[at..]).map_err(corrupt)?;
    if n != len {
        return Err(InflateError::Corrupt { codec, reason: format!("a block claimed {len} bytes and held {n}") });
    }
    Ok(())
}

/// An lz4 frame's magic number.
const LZ4_MAGIC: u32 = 0x184D_2204;

/// Reads the lz4 frames of `input`, one after another, into at most `limit` bytes.
fn inflate_lz4(input: &[u8], limit: usize, out: &mut Vec<u8>) -> Result<(), InflateError> {
    let codec = Codec::Lz4;
    let corrupt = |reason: &str| InflateError::Corrupt { codec, reason: reason.to_string() };
    let le32 = |b: &[u8]| u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
    let mut rest = input;
    if rest.is_empty() {
        return Err(corrupt("no lz4 frame"));
    }
    while !rest.is_empty() {
        if le32(take(&mut rest, 4, "frame magic")?) != LZ4_MAGIC {
            return Err(corrupt("not an lz4 frame (bad magic number)"));
        }
        let descriptor = rest;
        let fb = take(&mut rest, 2, "frame descriptor")?;
        let (flg, bd) = (fb[0], fb[1]);
        if flg >> 6 != 1 || flg & 0x02 != 0 || bd & 0x8f != 0 {
            return Err(corrupt("an lz4 frame descriptor of an unknown version or with reserved bits set"));
        }
        if flg & 0x20 == 0 {
            return Err(corrupt("lz4 frames with dependent blocks are not supported (Kafka's reader refuses them)"));
        }
        if flg & 0x01 != 0 {
            return Err(corrupt("lz4 frames with a dictionary are not supported"));
        }
        let (block_checksums, content_checksum) = (flg & 0x10 != 0, flg & 0x04 != 0);
        let block_max = match bd >> 4 {
            4 => 64 << 10,
            5 => 256 << 10,
            6 => 1 << 20,
            7 => 4 << 20,
            _ => return Err(corrupt("an lz4 block size that does not exist")),
        };
        let content_size = if flg & 0x08 != 0 {
            let b = take(&mut rest, 8, "content size")?;
            Some(u64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]))
        } else {
            None
        };
        let descriptor = &descriptor[..descriptor.len() - rest.len()];
        let hc = take(&mut rest, 1, "header checksum")?[0];
        if (twox_hash::XxHash32::oneshot(0, descriptor) >> 8) as u8 != hc {
            return Err(corrupt("lz4 frame header checksum mismatch"));
        }
        let frame_start = out.len();
        loop {
            let size = le32(take(&mut rest, 4, "block size (or the end mark)")?);
            if size == 0 {
                break;
            }
            let len = (size & 0x7fff_ffff) as usize;
            if len > block_max {
                return Err(corrupt("an lz4 block larger than the frame's block size"));
            }
            let block = take(&mut rest, len, "block")?;
            if block_checksums && le32(take(&mut rest, 4, "block checksum")?) != twox_hash::XxHash32::oneshot(0, block)
            {
                return Err(corrupt("lz4 block checksum mismatch"));
            }
            if size & 0x8000_0000 != 0 {
                // Stored uncompressed.
                if len > limit - out.len() {
                    return Err(InflateError::TooLarge { codec, limit });
                }
                grow_within(out, len, limit);
                out.extend_from_slice(block);
                continue;
            }
            let (at, room) = (out.len(), block_max.min(limit - out.len()));
            grow_within(out, room, limit);
            out.resize(at + room, 0);
            match lz4_flex::block::decompress_into(block, &mut out[at..]) {
                Ok(n) => out.truncate(at + n),
                Err(lz4_flex::block::DecompressError::OutputTooSmall { .. }) if room < block_max => {
                    return Err(InflateError::TooLarge { codec, limit });
                }
                Err(e) => return Err(corrupt(&e.to_string())),
            }
        }
        if content_checksum
            && le32(take(&mut rest, 4, "content checksum")?) != twox_hash::XxHash32::oneshot(0, &out[frame_start..])
        {
            return Err(corrupt("lz4 content checksum mismatch"));
        }
        if content_size.is_some_and(|n| n != (out.len() - frame_start) as u64) {
            return Err(corrupt("lz4 frame content size mismatch"));
        }
    }
    Ok(())
}

/// The next `n` bytes of an lz4 frame, `what` naming them if they are not all there.
fn take<'a>(rest: &mut &'a [u8], n: usize, what: &str) -> Result<&'a [u8], InflateError> {
    let (head, tail) = rest
        .split_at_checked(n)
        .ok_or_else(|| InflateError::Corrupt { codec: Codec::Lz4, reason: format!("lz4 {what} truncated") })?;
    *rest = tail;
    Ok(head)
}

thread_local! {
    /// A zstd compression context per thread, reused across batches (making one costs
    /// more than compressing a small batch).
    static ZSTD: RefCell<Option<zstd::bulk::Compressor<'static>>> = const { RefCell::new(None) };
}

/// Appends `input` compressed with `codec` to `out` (`Codec::None` copies it).
pub fn compress(codec: Codec, input: &[u8], out: &mut BytesMut) {
    match codec {
        Codec::None => out.extend_from_slice(input),
        Codec::Gzip => {
            let mut enc = flate2::write::GzEncoder::new(out.writer(), flate2::Compression::new(GZIP_LEVEL));
            enc.write_all(input).expect("writing to memory cannot fail");
            enc.finish().expect("writing to memory cannot fail");
        }
        Codec::Snappy => {
            out.extend_from_slice(&XERIAL_HEADER);
            let mut enc = snap::raw::Encoder::new();
            for block in input.chunks(XERIAL_BLOCK_BYTES) {
                let at = out.len();
                out.put_u32(0);
                let max = snap::raw::max_compress_len(block.len());
                out.resize(at + 4 + max, 0);
                let n = enc.compress(block, &mut out[at + 4..]).expect("a block within snappy's size limit");
                out.truncate(at + 4 + n);
                out[at..at + 4].copy_from_slice(&(n as u32).to_be_bytes());
            }
        }
        Codec::Lz4 => {
            let info = lz4_flex::frame::FrameInfo::new()
                .block_size(lz4_flex::frame::BlockSize::Max64KB)
                .block_mode(lz4_flex::frame::BlockMode::Independent);
            let mut enc = lz4_flex::frame::FrameEncoder::with_frame_info(info, out.writer());
            enc.write_all(input).expect("writing to memory cannot fail");
            enc.finish().expect("writing to memory cannot fail");
        }
        Codec::Zstd => ZSTD.with(|cell| {
            let mut cell = cell.borrow_mut();
            let ctx = match &mut *cell {
                Some(ctx) => ctx,
                None => cell.insert(zstd::bulk::Compressor::new(ZSTD_LEVEL).expect("a zstd context")),
            };
            let at = out.len();
            let max = zstd::zstd_safe::compress_bound(input.len());
            out.resize(at + max, 0);
            let n = ctx.compress_to_buffer(input, &mut out[at..]).expect("a buffer of zstd's bound");
            out.truncate(at + n);
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CODECS: [Codec; 4] = [Codec::Gzip, Codec::Snappy, Codec::Lz4, Codec::Zstd];

    fn sample(len: usize) -> Vec<u8> {
        // Compressible but not trivially: a counter's digits.
        (0..len).map(|i| b"0123456789abcdef"[(i * 7 + i / 13) % 16]).collect()
    }

    fn compressed(codec: Codec, input: &[u8]) -> Vec<u8> {
        let mut out = BytesMut::new();
        compress(codec, input, &mut out);
        out.to_vec()
    }

    #[test]
    fn every_codec_round_trips_small_empty_and_multi_block_inputs() {
        for codec in CODECS {
            for len in [0, 1, 100, 40_000, 300_000] {
                let input = sample(len);
                let c = compressed(codec, &input);
                assert_eq!(inflate(codec, &c, 1 << 20).expect("inflates"), input, "{codec} {len}");
            }
        }
    }

    #[test]
    fn ids_are_kafkas_and_5_to_7_are_none() {
        for codec in CODECS.into_iter().chain([Codec::None]) {
            assert_eq!(Codec::from_id(codec.id()), Some(codec));
        }
        assert_eq!((Codec::Gzip.id(), Codec::Snappy.id(), Codec::Lz4.id(), Codec::Zstd.id()), (1, 2, 3, 4));
        assert!((5..=7).all(|id| Codec::from_id(id).is_none()));
    }

    #[test]
    fn fetches_follow_the_topic_or_else_the_producer_and_never_compress_markers() {
        let gzip_batch = Attributes(Attributes::TRANSACTIONAL).with_codec(1);
        let marker = Attributes(Attributes::TRANSACTIONAL | Attributes::CONTROL);
        assert_eq!(for_fetch(CompressionType::Producer, gzip_batch), Codec::Gzip);
        assert_eq!(for_fetch(CompressionType::Producer, Attributes::default()), Codec::None);
        assert_eq!(for_fetch(CompressionType::Zstd, gzip_batch), Codec::Zstd);
        assert_eq!(for_fetch(CompressionType::Uncompressed, gzip_batch), Codec::None);
        for topic in [CompressionType::Producer, CompressionType::Lz4, CompressionType::Snappy] {
            assert_eq!(for_fetch(topic, marker), Codec::None);
        }
    }

    #[test]
    fn raw_snappy_as_librdkafka_writes_it_is_read_too() {
        let input = sample(70_000);
        let raw = snap::raw::Encoder::new().compress_vec(&input).expect("compresses");
        assert_eq!(inflate(Codec::Snappy, &raw, 1 << 20).expect("raw block"), input);
        // And xerial's framing with its version fields little-endian, as some writers do.
        let mut xerial = compressed(Codec::Snappy, &input);
        xerial[8..16].copy_from_slice(&[1, 0, 0, 0, 1, 0, 0, 0]);
        assert_eq!(inflate(Codec::Snappy, &xerial, 1 << 20).expect("xerial"), input);
    }

    #[test]
    fn truncated_input_is_corrupt_for_every_codec() {
        let input = sample(100_000);
        for codec in CODECS {
            let c = compressed(codec, &input);
            for cut in [1, 2, 4, 5, 9, c.len() / 2, c.len() - 1] {
                let got = inflate(codec, &c[..c.len() - cut], 1 << 20).map(|out| out.len());
                assert!(matches!(got, Err(InflateError::Corrupt { .. })), "{codec} cut {cut}: {got:?}");
            }
            // Not compressed at all.
            let got = inflate(codec, b"plain bytes, not compressed ones", 1 << 20).map(|out| out.len());
            assert!(matches!(got, Err(InflateError::Corrupt { .. })), "{codec}: {got:?}");
        }
    }

    #[test]
    fn flipped_bytes_are_corrupt_or_caught_never_a_panic() {
        // A flip in compressed data may still decode (to other bytes, which the batch's
        // record framing then checks); it must never panic or pass the limit.
        let input = sample(20_000);
        for codec in CODECS {
            let c = compressed(codec, &input);
            for at in (0..c.len()).step_by(7) {
                let mut bad = c.clone();
                bad[at] ^= 0x5a;
                if let Ok(out) = inflate(codec, &bad, 30_000) {
                    assert!(out.len() <= 30_000);
                }
            }
        }
    }

    #[test]
    fn gzip_trailer_and_lz4_header_checksums_catch_a_flipped_byte() {
        let input = sample(20_000);
        // gzip: the last eight bytes are the content's CRC-32 and length.
        for back in 1..=8 {
            let mut c = compressed(Codec::Gzip, &input);
            let at = c.len() - back;
            c[at] ^= 0x01;
            let e = inflate(Codec::Gzip, &c, 1 << 20).expect_err("trailer");
            assert!(matches!(e, InflateError::Corrupt { .. }), "byte -{back}: {e}");
        }
        // lz4: magic (4 bytes), FLG, BD, then the header checksum.
        for at in 0..7 {
            let mut c = compressed(Codec::Lz4, &input);
            c[at] ^= 0x01;
            let e = inflate(Codec::Lz4, &c, 1 << 20).expect_err("header");
            assert!(matches!(e, InflateError::Corrupt { .. }), "byte {at}: {e}");
        }
    }

    #[test]
    fn output_past_the_limit_is_refused_for_every_codec() {
        let input = vec![0u8; 200_000];
        for codec in CODECS {
            let c = compressed(codec, &input);
            assert_eq!(inflate(codec, &c, 200_000).expect("at the limit").len(), 200_000, "{codec}");
            assert_eq!(inflate(codec, &c, 199_999), Err(InflateError::TooLarge { codec, limit: 199_999 }), "{codec}");
        }
        // A raw snappy block that claims 4 GiB: refused from its length, nothing allocated.
        let claim = [0xff, 0xff, 0xff, 0xff, 0x0f, 0x00];
        assert_eq!(
            inflate(Codec::Snappy, &claim, 1 << 20),
            Err(InflateError::TooLarge { codec: Codec::Snappy, limit: 1 << 20 })
        );
    }

    /// The process's peak resident memory so far (`VmHWM`), in bytes.
    fn peak_rss() -> usize {
        let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
        let line = status.lines().find(|l| l.starts_with("VmHWM:")).expect("VmHWM");
        let kb: usize = line.split_whitespace().nth(1).and_then(|v| v.parse().ok()).expect("a number");
        kb * 1024
    }

    /// `total` zero bytes compressed with `codec`: one MiB of zeros compressed (one gzip
    /// member, zstd frame or lz4 frame; 32 KiB in one xerial snappy block), repeated
    /// (each format reads its units one after another), so the test never holds or
    /// deflates the inflated form itself.
    fn bomb(codec: Codec, total: usize) -> Vec<u8> {
        let unit = if codec == Codec::Snappy { 32 << 10 } else { 1 << 20 };
        let one = compressed(codec, &vec![0u8; unit]);
        let body = match codec {
            Codec::Snappy => &one[XERIAL_HEADER.len()..],
            _ => &one[..],
        };
        let mut out = if codec == Codec::Snappy { XERIAL_HEADER.to_vec() } else { Vec::new() };
        for _ in 0..total / unit {
            out.extend_from_slice(body);
        }
        out
    }

    #[test]
    fn a_gigabyte_of_zeros_is_refused_without_inflating_it() {
        let limit = 8 << 20;
        for codec in CODECS {
            let c = bomb(codec, 1 << 30);
            assert!(c.len() < 64 << 20, "{codec}: the bomb is {} bytes", c.len());
            let before = peak_rss();
            let mut out = Vec::new();
            let got = inflate_into(codec, &c, limit, &mut out);
            assert_eq!(got, Err(InflateError::TooLarge { codec, limit }));
            assert!(out.len() <= limit && out.capacity() <= limit, "{codec}: {} of {}", out.len(), out.capacity());
            drop(out);
            // The limit, the decoders' buffers, and other tests of this process meanwhile
            // (the peak is the process's); a gigabyte inflated would show.
            let grew = peak_rss().saturating_sub(before);
            assert!(grew < 512 << 20, "{codec}: peak memory grew by {grew} bytes");
        }
    }
}
