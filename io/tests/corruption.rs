//! Random bytes flipped in segments and indexes: every read either returns exactly the
//! records that were written or a typed [`LogError::Corrupt`] naming the damaged batch,
//! [`RecoveryMode::Full`] cuts the log at the first damaged batch (and only there), a
//! damaged index is rebuilt without losing a record, and damage in the active segment is
//! cut on a plain [`RecoveryMode::Tail`] reopen.
//!
//! A pristine log is built once per test and its batch boundaries are learned
//! independently of the log, by walking the segment files with `check_batch`. Each case
//! copies the pristine directory, flips bytes, and computes from the flipped positions
//! what the log must do: a batch is damaged when a flipped byte lies in its header or body
//! (the zero padding after the body is not covered by the CRC and changes nothing); an
//! index file is damaged when any of its bytes changed.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use common::Rng;
use sluice_io::record::{BatchError, HEADER_BYTES, HeaderError, check_batch};
use sluice_io::{
    FilePos, FsyncPolicy, Log, LogConfig, LogError, Offset, Record, RecordView, RecoveryMode, RecoveryReport,
    Timestamp, UringStorage,
};

/// Records in the pristine log.
const RECORDS: u64 = 2500;
/// Small segments, so the pristine log has several.
const SEGMENT_BYTES: u64 = 32 << 10;

fn value(o: u64) -> Vec<u8> {
    let mut v = format!("value-{o:08}:").into_bytes();
    let extra = (o * 7 % 61) as usize;
    v.extend((0..extra).map(|i| b'a' + ((o as usize + i) % 26) as u8));
    v
}

fn key(o: u64) -> Option<Vec<u8>> {
    (!o.is_multiple_of(3)).then(|| format!("key-{}", o % 17).into_bytes())
}

fn time(o: u64) -> Timestamp {
    Timestamp(1_000 + 10 * o as i64)
}

fn config(recovery: RecoveryMode) -> LogConfig {
    LogConfig {
        segment_bytes_max: SEGMENT_BYTES,
        index_interval_bytes: 2048,
        write_buffer_bytes: 64 << 10,
        fsync: FsyncPolicy::Never,
        recovery,
        ..LogConfig::default()
    }
}

/// Asserts that `r` is exactly the record written at offset `o`.
fn check_record(r: &RecordView<'_>, o: u64) {
    assert_eq!(r.offset(), Offset(o), "record offset");
    assert_eq!(r.value_bytes(), value(o).as_slice(), "value of offset {o}");
    assert_eq!(r.key(), key(o).as_deref(), "key of offset {o}");
    assert_eq!(r.event_time(), time(o), "event time of offset {o}");
    assert_eq!(r.headers().len(), 0, "headers of offset {o}");
}

/// One batch of a pristine segment.
#[derive(Clone, Debug)]
struct BatchLoc {
    /// Position in the segment file.
    pos: u64,
    /// Header plus body: the bytes the CRC and magic check cover.
    covered: u64,
    /// First offset.
    base: u64,
    /// Offset after the last.
    next: u64,
}

/// One pristine segment.
#[derive(Clone, Debug)]
struct SegModel {
    name: String,
    base: u64,
    batches: Vec<BatchLoc>,
    /// End of the last batch: the active segment's file is longer (preallocated).
    valid_end: u64,
}

impl SegModel {
    fn index_names(&self) -> [String; 2] {
        [format!("{:020}.index", self.base), format!("{:020}.timeindex", self.base)]
    }
}

/// Walks a segment file's batches with `check_batch`, up to its end or a zeroed header.
fn walk(path: &Path) -> (Vec<BatchLoc>, u64) {
    let bytes = std::fs::read(path).expect("read segment");
    let mut pos = 0usize;
    let mut out = Vec::new();
    while pos + HEADER_BYTES <= bytes.len() {
        match check_batch(&bytes[pos..]) {
            Ok(h) => {
                out.push(BatchLoc {
                    pos: pos as u64,
                    covered: (HEADER_BYTES + h.body_len as usize) as u64,
                    base: h.base_offset.0,
                    next: h.next_offset().0,
                });
                pos += h.stored_len();
            }
            Err(BatchError::Header(HeaderError::Zero)) => break,
            Err(e) => panic!("pristine segment {} has a bad batch at {pos}: {e}", path.display()),
        }
    }
    (out, pos as u64)
}

/// Builds the pristine log in `dir` and returns its segments, checked for sanity.
async fn build_pristine(dir: &Path, rng: &mut Rng) -> Vec<SegModel> {
    let (log, _) = Log::open(UringStorage, dir, config(RecoveryMode::Tail)).await.unwrap();
    let mut o = 0;
    while o < RECORDS {
        let n = rng.range(1, 40).min(RECORDS - o);
        let vals: Vec<Vec<u8>> = (o..o + n).map(value).collect();
        let keys: Vec<Option<Vec<u8>>> = (o..o + n).map(key).collect();
        let recs: Vec<Record<'_>> = (0..n as usize)
            .map(|i| Record {
                key: keys[i].as_deref(),
                value: Some(&vals[i]),
                event_time: time(o + i as u64),
                headers: &[],
            })
            .collect();
        let info = log.append(&recs).await.unwrap();
        assert_eq!(info.base_offset, Offset(o));
        o += n;
    }
    log.close().await.unwrap();
    drop(log);

    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.ends_with(".log"))
        .collect();
    names.sort();
    let mut segs = Vec::new();
    let mut next = 0;
    for (i, name) in names.iter().enumerate() {
        let path = dir.join(name);
        let (batches, valid_end) = walk(&path);
        let base: u64 = name.strip_suffix(".log").unwrap().parse().unwrap();
        assert_eq!(base, next, "segments are contiguous");
        for b in &batches {
            assert_eq!(b.base, next, "batches are contiguous");
            next = b.next;
        }
        let len = std::fs::metadata(&path).unwrap().len();
        if i + 1 < names.len() {
            assert_eq!(len, valid_end, "a closed segment is cut to its valid data");
            let seg = SegModel { name: name.clone(), base, batches, valid_end };
            for idx in seg.index_names() {
                assert!(dir.join(idx).exists(), "closed segment {name} has its indexes");
            }
            segs.push(seg);
        } else {
            assert!(len > valid_end, "the active segment is preallocated");
            segs.push(SegModel { name: name.clone(), base, batches, valid_end });
        }
    }
    assert_eq!(next, RECORDS);
    assert!(segs.len() >= 4, "want several segments, got {}", segs.len());
    segs
}

/// Bytes to flip: file name to positions (each position flipped once, so it changes).
#[derive(Debug, Default)]
struct Flips(BTreeMap<String, BTreeSet<u64>>);

impl Flips {
    fn add(&mut self, name: &str, pos: u64) {
        self.0.entry(name.to_string()).or_default().insert(pos);
    }

    fn apply(&self, dir: &Path, rng: &mut Rng) {
        for (name, positions) in &self.0 {
            let file = std::fs::OpenOptions::new().read(true).write(true).open(dir.join(name)).unwrap();
            for &pos in positions {
                let mut b = [0u8];
                file.read_exact_at(&mut b, pos).unwrap();
                b[0] ^= rng.range(1, 256) as u8;
                file.write_all_at(&b, pos).unwrap();
            }
            file.sync_all().unwrap();
        }
    }
}

/// What the flips must cause, in terms of the pristine segments.
#[derive(Debug)]
struct Expect {
    /// (segment, batch) pairs with a flipped covered byte, in offset order.
    damaged: BTreeSet<(usize, usize)>,
    /// Closed segments with a flipped byte in either index file.
    index_damaged: BTreeSet<usize>,
    segs: Vec<SegModel>,
}

impl Expect {
    fn new(segs: &[SegModel], flips: &Flips) -> Expect {
        let mut damaged = BTreeSet::new();
        let mut index_damaged = BTreeSet::new();
        for (name, positions) in &flips.0 {
            if let Some(si) = segs.iter().position(|s| &s.name == name) {
                for &pos in positions {
                    let bi = segs[si].batches.partition_point(|b| b.pos <= pos) - 1;
                    let b = &segs[si].batches[bi];
                    if pos < b.pos + b.covered {
                        damaged.insert((si, bi));
                    }
                }
            } else {
                let si = segs.iter().position(|s| s.index_names().contains(name)).expect("flipped file is known");
                index_damaged.insert(si);
            }
        }
        Expect { damaged, index_damaged, segs: segs.to_vec() }
    }

    fn active(&self) -> usize {
        self.segs.len() - 1
    }

    fn first_damage_in(&self, si: usize) -> Option<usize> {
        self.damaged.range((si, 0)..(si + 1, 0)).next().map(|&(_, bi)| bi)
    }

    /// The (segment, batch) holding offset `o`.
    fn locate(&self, o: u64) -> (usize, usize) {
        let si = self.segs.partition_point(|s| s.base <= o) - 1;
        let bi = self.segs[si].batches.partition_point(|b| b.base <= o) - 1;
        (si, bi)
    }

    /// The log end a Tail reopen must show: the active segment is cut at its first
    /// damaged batch; damage in closed segments is left in place.
    fn tail_end(&self) -> u64 {
        let a = self.active();
        self.first_damage_in(a).map_or(RECORDS, |bi| self.segs[a].batches[bi].base)
    }

    /// The log end a Full reopen must show: the first damaged batch in offset order.
    fn full_end(&self) -> u64 {
        self.damaged.first().map_or(RECORDS, |&(si, bi)| self.segs[si].batches[bi].base)
    }

    /// Checks a `Corrupt` error that may come from any segment up to `last`: it must name
    /// a damaged batch there.
    fn check_corrupt_up_to(&self, dir: &Path, last: usize, err: &LogError, what: &str) {
        let LogError::Corrupt { path, pos, .. } = err else {
            panic!("{what}: want a result or Corrupt, got {err:?}");
        };
        let si = self.segs.iter().position(|s| &dir.join(&s.name) == path);
        let si = si.unwrap_or_else(|| panic!("{what}: {err}: not a segment of the log"));
        assert!(si <= last, "{what}: {err}: segment {si} is after segment {last}");
        let at = self.segs[si].batches.iter().position(|b| FilePos(b.pos) == *pos);
        let at = at.unwrap_or_else(|| panic!("{what}: {err}: not a batch boundary"));
        assert!(self.damaged.contains(&(si, at)), "{what}: {err}: batch {at} of segment {si} is not damaged");
    }

    /// Checks a `Corrupt` error for a read that wanted offset `o`: it must name a
    /// damaged batch in the segment holding `o`, at or before the batch holding `o`.
    fn check_corrupt(&self, dir: &Path, o: u64, err: &LogError, what: &str) {
        let LogError::Corrupt { path, pos, .. } = err else {
            panic!("{what} of offset {o}: want records or Corrupt, got {err:?}");
        };
        let (si, bi) = self.locate(o);
        let seg = &self.segs[si];
        assert_eq!(path, &dir.join(&seg.name), "{what} of offset {o}: {err}");
        assert!(path.is_file(), "{what}: {} is a file", path.display());
        let at = seg.batches.iter().position(|b| FilePos(b.pos) == *pos);
        let at = at.unwrap_or_else(|| panic!("{what} of offset {o}: {err}: not a batch boundary"));
        assert!(at <= bi && self.damaged.contains(&(si, at)), "{what} of offset {o}: {err}: batch {at} is not damaged");
    }
}

/// Reads every offset below `end` one by one, and the stream from 0, and seeks by
/// time: each answer is exact or a `Corrupt` that `expect` explains.
async fn check_reads(log: &Log, dir: &Path, expect: &Expect, end: u64, rng: &mut Rng) {
    assert_eq!(log.start_offset(), Offset(0));
    assert_eq!(log.end_offset(), Offset(end));
    for o in 0..end {
        let (si, bi) = expect.locate(o);
        let max_bytes = rng.range(1, 6000) as usize;
        match log.read(Offset(o), max_bytes).await {
            Ok(batches) => {
                assert!(!expect.damaged.contains(&(si, bi)), "read of offset {o} in a damaged batch returned Ok");
                assert!(!batches.is_empty(), "read of offset {o} below the end {end} is empty");
                let mut next = o;
                for r in batches.records() {
                    check_record(&r.unwrap(), next);
                    next += 1;
                }
                assert!(next > o && next <= end, "read of offset {o} returned up to {next}");
                assert_eq!(batches.next_offset(), Offset(next));
            }
            Err(e) => expect.check_corrupt(dir, o, &e, "read"),
        }
    }
    let at_end = log.read(Offset(end), 4096).await.unwrap();
    assert!(at_end.is_empty());
    match log.read(Offset(end + 1), 4096).await {
        Err(LogError::OffsetOutOfRange { requested, start, end: e }) => {
            assert_eq!((requested, start, e), (Offset(end + 1), Offset(0), Offset(end)));
        }
        other => panic!("read past the end: {other:?}"),
    }

    // The stream from 0, skipping each damaged batch once its error is seen.
    let mut at = 0;
    let mut errors = 0;
    while at < end {
        match log.read(Offset(at), 64 << 10).await {
            Ok(batches) => {
                for r in batches.records() {
                    check_record(&r.unwrap(), at);
                    at += 1;
                }
            }
            Err(e) => {
                // The damage is at or before the batch holding `at`: skip that batch.
                expect.check_corrupt(dir, at, &e, "stream read");
                let (si, bi) = expect.locate(at);
                at = expect.segs[si].batches[bi].next;
                errors += 1;
            }
        }
    }
    assert!(errors > 0 || expect.damaged.iter().all(|&(si, bi)| expect.segs[si].batches[bi].base >= end));

    // Seek by time: record o has time 1000 + 10 o.
    let mut samples: Vec<u64> = (0..end).step_by(37).collect();
    samples.extend((0..8).filter(|_| end > 0).map(|_| rng.range(0, end)));
    for o in samples {
        let t = if o > 0 && o % 2 == 0 { Timestamp(time(o).0 - 5) } else { time(o) };
        match log.offset_for_time(t).await {
            Ok(found) => {
                assert_eq!(found, Some(Offset(o)), "offset_for_time({t})");
                assert!(
                    !expect.damaged.contains(&expect.locate(o)),
                    "offset_for_time found offset {o} in a damaged batch"
                );
            }
            // A damaged segment at or before the answer may hide an earlier match, so
            // the seek may fail there instead.
            Err(e) => expect.check_corrupt_up_to(dir, expect.locate(o).0, &e, "offset_for_time"),
        }
    }
    if end > 0 {
        match log.offset_for_time(Timestamp(time(end - 1).0 + 1)).await {
            Ok(found) => assert_eq!(found, None),
            Err(e) => expect.check_corrupt_up_to(dir, expect.active(), &e, "offset_for_time past the end"),
        }
    }
}

/// Opens a damaged copy in Tail mode and checks the report and every read.
async fn check_tail(dir: &Path, expect: &Expect, rng: &mut Rng) -> RecoveryReport {
    let (log, report) = Log::open(UringStorage, dir, config(RecoveryMode::Tail)).await.unwrap();
    let a = expect.active();
    let end = expect.tail_end();
    match expect.first_damage_in(a) {
        Some(bi) => {
            let t = report.truncated.as_ref().unwrap_or_else(|| panic!("active damage not cut: {report:?}"));
            assert_eq!(t.path, dir.join(&expect.segs[a].name));
            assert_eq!(t.pos, FilePos(expect.segs[a].batches[bi].pos));
            assert_eq!(t.log_end, Offset(end));
            assert_eq!(t.segments_removed, 0);
        }
        None => assert!(report.truncated.is_none(), "nothing to cut: {report:?}"),
    }
    let rebuilt: BTreeSet<PathBuf> = expect
        .index_damaged
        .iter()
        .filter(|&&si| expect.first_damage_in(si).is_none())
        .map(|&si| dir.join(&expect.segs[si].name))
        .collect();
    assert_eq!(report.rebuilt_indexes.iter().cloned().collect::<BTreeSet<_>>(), rebuilt, "{report:?}");
    let left: Vec<(PathBuf, FilePos)> = expect
        .index_damaged
        .iter()
        .filter_map(|&si| expect.first_damage_in(si).map(|bi| (si, bi)))
        .map(|(si, bi)| (dir.join(&expect.segs[si].name), FilePos(expect.segs[si].batches[bi].pos)))
        .collect();
    let got: Vec<(PathBuf, FilePos)> = report.damaged_segments.iter().map(|(p, pos, _)| (p.clone(), *pos)).collect();
    assert_eq!(got, left, "{report:?}");
    check_reads(&log, dir, expect, end, rng).await;
    report
}

/// Opens a damaged copy in Full mode: the log is cut at the first damaged batch, every
/// record below the cut reads back exactly, and appends continue from the cut.
async fn check_full(dir: &Path, expect: &Expect, rng: &mut Rng) {
    let (log, report) = Log::open(UringStorage, dir, config(RecoveryMode::Full)).await.unwrap();
    let end = expect.full_end();
    let segments_left = match expect.damaged.first() {
        Some(&(si, bi)) => {
            let t = report.truncated.as_ref().unwrap_or_else(|| panic!("damage not cut: {report:?}"));
            assert_eq!(t.path, dir.join(&expect.segs[si].name));
            assert_eq!(t.pos, FilePos(expect.segs[si].batches[bi].pos));
            assert_eq!(t.log_end, Offset(end));
            assert_eq!(t.segments_removed, expect.segs.len() - 1 - si);
            si + 1
        }
        None => {
            assert!(report.truncated.is_none(), "{report:?}");
            expect.segs.len()
        }
    };
    assert!(report.damaged_segments.is_empty() && report.rebuilt_indexes.is_empty(), "{report:?}");
    assert_eq!(log.segment_count(), segments_left);
    let logs_on_disk = std::fs::read_dir(dir)
        .unwrap()
        .filter(|e| e.as_ref().unwrap().path().extension().is_some_and(|x| x == "log"))
        .count();
    assert_eq!(logs_on_disk, segments_left, "segments after the cut are deleted");
    let undamaged = Expect { damaged: BTreeSet::new(), index_damaged: BTreeSet::new(), segs: expect.segs.clone() };
    check_reads(&log, dir, &undamaged, end, rng).await;

    // The log continues from the cut, and a later Tail reopen agrees.
    let vals: Vec<Vec<u8>> = (end..end + 5).map(value).collect();
    let keys: Vec<Option<Vec<u8>>> = (end..end + 5).map(key).collect();
    let recs: Vec<Record<'_>> = (0..5)
        .map(|i| Record {
            key: keys[i].as_deref(),
            value: Some(&vals[i]),
            event_time: time(end + i as u64),
            headers: &[],
        })
        .collect();
    assert_eq!(log.append(&recs).await.unwrap().base_offset, Offset(end));
    log.close().await.unwrap();
    drop(log);
    let (log, report) = Log::open(UringStorage, dir, config(RecoveryMode::Tail)).await.unwrap();
    assert!(report.truncated.is_none() && report.damaged_segments.is_empty(), "{report:?}");
    assert_eq!(log.end_offset(), Offset(end + 5));
    let mut at = 0;
    while at < end + 5 {
        let batches = log.read(Offset(at), 64 << 10).await.unwrap();
        assert!(!batches.is_empty());
        for r in batches.records() {
            check_record(&r.unwrap(), at);
            at += 1;
        }
    }
}

/// A random position in the valid data of segment `si`; with `header_only`, inside
/// the header of a random batch.
fn pick_log_pos(seg: &SegModel, rng: &mut Rng, header_only: bool) -> u64 {
    if header_only {
        let b = &seg.batches[rng.range(0, seg.batches.len() as u64) as usize];
        b.pos + rng.range(0, HEADER_BYTES as u64)
    } else {
        rng.range(0, seg.valid_end)
    }
}

fn pick_index_flip(dir: &Path, seg: &SegModel, rng: &mut Rng, flips: &mut Flips) {
    let name = &seg.index_names()[rng.range(0, 2) as usize];
    let len = std::fs::metadata(dir.join(name)).unwrap().len();
    flips.add(name, rng.range(0, len));
}

#[test]
fn random_flips_read_correct_or_typed_error() {
    let seed = common::seed("random_flips_read_correct_or_typed_error");
    let pristine = common::temp_dir("corrupt-pristine");
    common::run(move || async move {
        let mut rng = Rng::new(seed);
        let segs = build_pristine(&pristine, &mut rng).await;
        let closed = segs.len() - 1;
        for case in 0..8 {
            let mut flips = Flips::default();
            let n = rng.range(1, 6);
            match case % 4 {
                // Closed segments only: left in place by Tail, cut by Full.
                0 => {
                    for _ in 0..n {
                        let si = rng.range(0, closed as u64) as usize;
                        flips.add(&segs[si].name, pick_log_pos(&segs[si], &mut rng, false));
                    }
                }
                // Any segment, the active one included.
                1 => {
                    for _ in 0..n {
                        let si = rng.range(0, segs.len() as u64) as usize;
                        flips.add(&segs[si].name, pick_log_pos(&segs[si], &mut rng, false));
                    }
                }
                // Batch headers: magic, lengths, offsets.
                2 => {
                    for _ in 0..n {
                        let si = rng.range(0, segs.len() as u64) as usize;
                        flips.add(&segs[si].name, pick_log_pos(&segs[si], &mut rng, true));
                    }
                }
                // Indexes and segments together, sometimes both in one closed segment:
                // the rebuilt index stops at the damage, and reads past it must fail
                // as corrupt rather than be served from the next segment.
                _ => {
                    for _ in 0..n {
                        let si = rng.range(0, segs.len() as u64) as usize;
                        if si < closed && rng.chance(1, 2) {
                            pick_index_flip(&pristine, &segs[si], &mut rng, &mut flips);
                        } else {
                            flips.add(&segs[si].name, pick_log_pos(&segs[si], &mut rng, false));
                        }
                    }
                }
            }
            let expect = Expect::new(&segs, &flips);
            eprintln!(
                "case {case}: flips {:?}; damaged batches {:?}, damaged indexes {:?}, tail end {}, full end {}",
                flips.0,
                expect.damaged,
                expect.index_damaged,
                expect.tail_end(),
                expect.full_end()
            );
            let tail_dir = pristine.with_extension(format!("case{case}-tail"));
            let full_dir = pristine.with_extension(format!("case{case}-full"));
            common::copy_dir(&pristine, &tail_dir);
            flips.apply(&tail_dir, &mut rng);
            common::copy_dir(&tail_dir, &full_dir);
            check_tail(&tail_dir, &expect, &mut rng).await;
            check_full(&full_dir, &expect, &mut rng).await;
            let _ = std::fs::remove_dir_all(&tail_dir);
            let _ = std::fs::remove_dir_all(&full_dir);
        }
        let _ = std::fs::remove_dir_all(&pristine);
    });
}

#[test]
fn index_only_damage_is_rebuilt() {
    let seed = common::seed("index_only_damage_is_rebuilt");
    let pristine = common::temp_dir("corrupt-index-pristine");
    common::run(move || async move {
        let mut rng = Rng::new(seed);
        let segs = build_pristine(&pristine, &mut rng).await;
        let mut flips = Flips::default();
        for _ in 0..rng.range(1, 6) {
            let si = rng.range(0, segs.len() as u64 - 1) as usize;
            pick_index_flip(&pristine, &segs[si], &mut rng, &mut flips);
        }
        let expect = Expect::new(&segs, &flips);
        eprintln!("flips {:?}; damaged indexes {:?}", flips.0, expect.index_damaged);
        assert!(expect.damaged.is_empty() && !expect.index_damaged.is_empty());
        let dir = pristine.with_extension("tail");
        let full_dir = pristine.with_extension("full");
        common::copy_dir(&pristine, &dir);
        flips.apply(&dir, &mut rng);
        common::copy_dir(&dir, &full_dir);

        let report = check_tail(&dir, &expect, &mut rng).await;
        assert!(!report.rebuilt_indexes.is_empty());
        assert!(report.truncated.is_none());
        // The rebuilt indexes are good: the next open loads them.
        let (log, report) = Log::open(UringStorage, &dir, config(RecoveryMode::Tail)).await.unwrap();
        assert!(report.rebuilt_indexes.is_empty() && report.truncated.is_none(), "{report:?}");
        for si in &expect.index_damaged {
            for name in segs[*si].index_names() {
                assert_eq!(
                    std::fs::read(dir.join(&name)).unwrap(),
                    std::fs::read(pristine.join(&name)).unwrap(),
                    "{name}"
                );
            }
        }
        check_reads(&log, &dir, &expect, RECORDS, &mut rng).await;
        drop(log);
        // Full recovery ignores indexes and cuts nothing.
        check_full(&full_dir, &expect, &mut rng).await;
        for d in [&pristine, &dir, &full_dir] {
            let _ = std::fs::remove_dir_all(d);
        }
    });
}

#[test]
fn active_segment_flip_is_cut_on_tail_reopen() {
    let seed = common::seed("active_segment_flip_is_cut_on_tail_reopen");
    let pristine = common::temp_dir("corrupt-active-pristine");
    common::run(move || async move {
        let mut rng = Rng::new(seed);
        let segs = build_pristine(&pristine, &mut rng).await;
        let active = segs.last().unwrap();
        for case in 0..3 {
            // Damage a random batch for certain: flip inside its header or body.
            let bi = rng.range(0, active.batches.len() as u64) as usize;
            let b = &active.batches[bi];
            let mut flips = Flips::default();
            for _ in 0..rng.range(1, 4) {
                flips.add(&active.name, b.pos + rng.range(0, b.covered));
            }
            let expect = Expect::new(&segs, &flips);
            eprintln!("case {case}: flips {:?} in batch {bi} (offsets {}..{})", flips.0, b.base, b.next);
            assert_eq!(expect.tail_end(), b.base);
            let dir = pristine.with_extension(format!("active{case}"));
            common::copy_dir(&pristine, &dir);
            flips.apply(&dir, &mut rng);

            let report = check_tail(&dir, &expect, &mut rng).await;
            assert!(report.truncated.is_some());
            // The cut is durable and the segment is preallocated again.
            let len = std::fs::metadata(dir.join(&active.name)).unwrap().len();
            assert_eq!(len, SEGMENT_BYTES);
            let (log, report) = Log::open(UringStorage, &dir, config(RecoveryMode::Tail)).await.unwrap();
            assert!(report.truncated.is_none(), "{report:?}");
            assert_eq!(log.end_offset(), Offset(b.base));
            let v = value(b.base);
            let k = key(b.base);
            let rec = Record { key: k.as_deref(), value: Some(&v), event_time: time(b.base), headers: &[] };
            assert_eq!(log.append(&[rec]).await.unwrap().base_offset, Offset(b.base));
            let batches = log.read(Offset(b.base), 4096).await.unwrap();
            let got: Vec<_> = batches.records().map(Result::unwrap).collect();
            assert_eq!(got.len(), 1);
            check_record(&got[0], b.base);
            drop(log);
            let _ = std::fs::remove_dir_all(&dir);
        }
        let _ = std::fs::remove_dir_all(&pristine);
    });
}
