//! A randomized model test: a partition log against a simple in-memory model, under
//! random appends, reads, seeks by offset and time, rolls, retention, compaction and
//! reboots (a reboot loses exactly what the durability policy allows to be lost).
//! Prints its seed; `SEED=` replays.
//!
//! The model is a `BTreeMap` from offset to record, with the log's start and end offsets
//! and `durable_end`, below which every offset is known to be durable. Each operation is
//! applied to both and their answers compared; the log's state (start, end, durable
//! offset, segment bases) is checked against the model after every operation.
//!
//! Two kinds of reboot. A clean one closes the log and reopens it: nothing is lost. A
//! crash marks the [`FaultyStorage`] as crashed (every later write and sync fails, so
//! nothing more reaches the disk), drops the log, and reopens the directory with a fresh
//! storage. The reopened log must hold at least everything durable, at most everything
//! acknowledged, and every record it holds must be the model's; the model then loses the
//! tail the log lost. Writes already submitted when the crash flag is set may still land
//! (as on a real machine), which is why the lost tail is a range, not a number. Every
//! durable batch must be on disk after a crash; on half the crashes, random 512-byte
//! blocks past the durable position are then zeroed, as unsynced writes lost out of
//! order would leave them, so recovery meets holes and torn batches too.
//!
//! Retention and compaction are modelled exactly: the expected effect is computed from
//! the model's records, the segment bases the log reports, and (for retention by size)
//! the sizes of the closed segment files, which roll truncates to their valid length.
//!
//! Replay: `SEED=n cargo test -p sluice-io --test model <name>` replays the operation
//! sequence exactly up to the first crash under `Interval` or `Never` (how much such a
//! crash loses depends on timing) or the first roll by `segment_ms` (wall clock).

mod common;

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::fmt;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::Duration;

use common::Rng;
use sluice_io::record::{BatchEncoder, check_batch};
use sluice_io::segment::SegmentPaths;
use sluice_io::{
    BatchMeta, CleanupPolicy, FaultyStorage, FsyncPolicy, Header, Log, LogConfig, LogError, Offset, Record, RecordView,
    RecoveryMode, Timestamp, UringStorage,
};

#[test]
fn model_fsync_always() {
    model_test("model_fsync_always", 0);
}

#[test]
fn model_fsync_interval() {
    model_test("model_fsync_interval", 1);
}

#[test]
fn model_fsync_never() {
    model_test("model_fsync_never", 2);
}

#[test]
fn model_mixed() {
    model_test("model_mixed", 3);
}

/// One sub-run: its seed is derived from the test's seed and `index`, which also picks
/// the fsync policy (0 always, 1 interval, 2 never, 3 random) and, with the seed's low
/// bit, the cleanup policy, so that over seeds every policy meets both cleanups.
fn model_test(name: &'static str, index: u64) {
    let base = base_seed();
    let seed = Rng::new(base ^ index.wrapping_mul(0xA076_1D64_78BD_642F)).next_u64();
    let dir = common::temp_dir(name);
    let run_dir = dir.clone();
    common::run(move || async move {
        let mut run = Run::open(name, index, base, seed, run_dir).await;
        run.go().await;
    });
    let _ = std::fs::remove_dir_all(&dir);
}

/// The seed all four tests derive theirs from: `SEED`, or a fresh one, printed once.
fn base_seed() -> u64 {
    static SEED: OnceLock<u64> = OnceLock::new();
    *SEED.get_or_init(|| common::seed("model"))
}

/// The shared generator, with inclusive ranges and percentages, which read better when
/// picking operations.
trait Pick {
    /// Uniform in `[lo, hi]`.
    fn within(&mut self, lo: u64, hi: u64) -> u64;
    /// Uniform in `[lo, hi]`.
    fn signed(&mut self, lo: i64, hi: i64) -> i64;
    fn percent(&mut self, percent: u64) -> bool;
    fn bytes(&mut self, n: usize) -> Vec<u8>;
}

impl Pick for Rng {
    fn within(&mut self, lo: u64, hi: u64) -> u64 {
        self.range(lo, hi + 1)
    }

    fn signed(&mut self, lo: i64, hi: i64) -> i64 {
        lo + self.range(0, hi.abs_diff(lo) + 1) as i64
    }

    fn percent(&mut self, percent: u64) -> bool {
        self.chance(percent, 100)
    }

    fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next_u64() as u8).collect()
    }
}

/// A record as the model holds it.
#[derive(Clone, PartialEq, Eq)]
struct ModelRecord {
    key: Option<Vec<u8>>,
    value: Option<Vec<u8>>,
    time: i64,
    headers: Vec<(String, Option<Vec<u8>>)>,
}

impl ModelRecord {
    fn from_view(r: &RecordView<'_>) -> (u64, ModelRecord) {
        let record = ModelRecord {
            key: r.key().map(<[u8]>::to_vec),
            value: r.value().map(<[u8]>::to_vec),
            time: r.event_time().0,
            headers: r.headers().map(|h| (h.key.to_string(), h.value.map(<[u8]>::to_vec))).collect(),
        };
        (r.offset().0, record)
    }
}

impl fmt::Debug for ModelRecord {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let key = self.key.as_ref().map(|k| String::from_utf8_lossy(k).into_owned());
        match &self.value {
            Some(v) => {
                let head: Vec<u8> = v.iter().take(4).copied().collect();
                write!(f, "{{key {key:?}, value {} bytes {head:02x?}.., time {}", v.len(), self.time)?;
            }
            None => write!(f, "{{key {key:?}, null value, time {}", self.time)?,
        }
        if !self.headers.is_empty() {
            write!(f, ", {} headers", self.headers.len())?;
        }
        write!(f, "}}")
    }
}

/// What the log should hold.
#[derive(Debug, Default)]
struct Model {
    records: BTreeMap<u64, ModelRecord>,
    start: u64,
    end: u64,
    /// Every offset below this is durable: a crash may not lose it.
    durable_end: u64,
}

impl Model {
    /// The newest event time of the records in `[lo, hi)`, as a segment holding exactly
    /// them reports it (`i64::MIN` when there are none).
    fn max_time(&self, lo: u64, hi: u64) -> i64 {
        self.records.range(lo..hi).map(|(_, r)| r.time).max().unwrap_or(i64::MIN)
    }

    fn drop_below(&mut self, start: u64) -> usize {
        let kept = self.records.split_off(&start);
        let dropped = self.records.len();
        self.records = kept;
        self.start = start;
        dropped
    }
}

/// One step of a run.
#[derive(Debug)]
enum Op {
    Append(Vec<ModelRecord>),
    /// Up to `reads` consecutive reads from `offset`, as a consumer would make them.
    Read {
        offset: u64,
        max_bytes: usize,
        reads: usize,
    },
    ReadOutOfRange(u64),
    OffsetForTime(i64),
    Roll,
    Flush,
    Retention(i64),
    Compact(i64),
    /// Lets background work (the interval flusher, in-flight writes) run.
    Sleep(u64),
    CleanReboot,
    CrashReboot,
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Op::Append(records) => {
                write!(f, "Append {} records [", records.len())?;
                for (i, r) in records.iter().enumerate() {
                    if i > 0 {
                        write!(f, ", ")?;
                    }
                    write!(f, "{r:?}")?;
                }
                write!(f, "]")
            }
            other => write!(f, "{other:?}"),
        }
    }
}

/// Counts printed at the end, to show what a run covered.
#[derive(Debug, Default)]
struct Stats {
    appends: u64,
    records: u64,
    reads: u64,
    records_read: u64,
    time_seeks: u64,
    out_of_range: u64,
    rolls: u64,
    flushes: u64,
    retention_passes: u64,
    retention_segments: u64,
    retention_records: u64,
    compactions: u64,
    compacted_segments: u64,
    compacted_records: u64,
    clean_reboots: u64,
    crash_reboots: u64,
    /// Crashes that also lost unsynced writes out of order, and the blocks they lost.
    lossy_crashes: u64,
    lost_blocks: u64,
    crash_lost_records: u64,
    crash_truncations: u64,
    max_segments: usize,
}

/// Prints where a run failed, if it panics while this is alive.
struct FailureContext(String);

impl Drop for FailureContext {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("{}", self.0);
        }
    }
}

const KEYS: usize = 10;
const HISTORY: usize = 12;

struct Run {
    name: &'static str,
    base_seed: u64,
    rng: Rng,
    config: LogConfig,
    dir: PathBuf,
    storage: FaultyStorage,
    /// The open log; `None` only while a reboot drops and reopens it.
    log: Option<Log<FaultyStorage>>,
    model: Model,
    /// The durable offset last seen from the current log: it never goes backwards.
    durable_seen: u64,
    /// The producers' clock; event times scatter around it.
    clock: i64,
    ops: usize,
    stats: Stats,
}

impl Run {
    async fn open(name: &'static str, index: u64, base_seed: u64, seed: u64, dir: PathBuf) -> Run {
        let mut rng = Rng::new(seed);
        let fsync = match if index < 3 { index } else { rng.within(0, 2) } {
            0 => FsyncPolicy::Always,
            1 => FsyncPolicy::Interval(Duration::from_millis(rng.within(5, 20))),
            _ => FsyncPolicy::Never,
        };
        let compact = if index < 3 { (index + (base_seed & 1)).is_multiple_of(2) } else { rng.percent(50) };
        let config = LogConfig {
            fsync,
            segment_bytes_max: rng.within(4 << 10, 32 << 10),
            segment_ms: if rng.percent(20) { Some(rng.within(20, 100)) } else { None },
            index_interval_bytes: rng.within(256, 1024) as u32,
            write_buffer_bytes: [4 << 10, 8 << 10, 16 << 10, 64 << 10][rng.within(0, 3) as usize],
            write_behind_buffers: rng.within(1, 4) as usize,
            preallocate: rng.percent(50),
            retention_ms: if rng.percent(50) { Some(rng.within(3_000, 30_000)) } else { None },
            retention_bytes: if rng.percent(50) { Some(rng.within(32 << 10, 256 << 10)) } else { None },
            cleanup: if compact { CleanupPolicy::Compact } else { CleanupPolicy::Delete },
            delete_retention_ms: rng.within(1_000, 10_000),
            recovery: if rng.percent(25) { RecoveryMode::Full } else { RecoveryMode::Tail },
            ..LogConfig::default()
        };
        let ops = rng.within(800, 1500) as usize;
        eprintln!("{name}: SEED={base_seed} sub-run {index} (seed {seed:#x}), {ops} ops, {config:?}");
        let storage = FaultyStorage::new();
        let (log, report) = Log::open(storage.clone(), &dir, config.clone()).await.expect("open a new log");
        assert_eq!(report.segments, 0, "{report:?}");
        Run {
            name,
            base_seed,
            rng,
            config,
            dir,
            storage,
            log: Some(log),
            model: Model::default(),
            durable_seen: 0,
            clock: 1_700_000_000_000,
            ops,
            stats: Stats::default(),
        }
    }

    fn log(&self) -> &Log<FaultyStorage> {
        self.log.as_ref().expect("the log is open")
    }

    async fn go(&mut self) {
        let mut history: VecDeque<String> = VecDeque::new();
        for i in 0..self.ops {
            let op = self.gen_op();
            let text = op.to_string();
            let _context = FailureContext(format!(
                "{}: SEED={} failed at op #{i}: {text}\n  config: {:?}\n  model: start {} end {} durable_end {} \
                 ({} records), log segments {:?}\n  previous ops, oldest first:\n    {}",
                self.name,
                self.base_seed,
                self.config,
                self.model.start,
                self.model.end,
                self.model.durable_end,
                self.model.records.len(),
                self.log().segment_bases(),
                history.iter().cloned().collect::<Vec<_>>().join("\n    "),
            ));
            self.apply(&op).await;
            self.check_state();
            if history.len() == HISTORY {
                history.pop_front();
            }
            history.push_back(format!("#{i}: {}", truncated(&text, 300)));
        }
        // The end state reads back whole, before and after a last clean reboot.
        self.check_all().await;
        self.apply(&Op::CleanReboot).await;
        self.check_state();
        self.stats.max_segments = self.stats.max_segments.max(self.log().segment_count());
        eprintln!(
            "{}: ok: end {} start {} records {} segments {}; {:?}",
            self.name,
            self.model.end,
            self.model.start,
            self.model.records.len(),
            self.log().segment_count(),
            self.stats
        );
    }

    fn gen_op(&mut self) -> Op {
        let r = self.rng.within(0, 99);
        match r {
            0..=34 => Op::Append(self.gen_records()),
            35..=54 => {
                let offset = self.pick_offset();
                let max_bytes =
                    if self.rng.percent(50) { self.rng.within(1, 2048) } else { self.rng.within(2048, 64 << 10) }
                        as usize;
                let reads = if self.rng.percent(10) { 1000 } else { self.rng.within(1, 6) as usize };
                Op::Read { offset, max_bytes, reads }
            }
            55..=57 => {
                let below = self.model.start > 0 && self.rng.percent(50);
                let offset = if below {
                    self.rng.within(0, self.model.start - 1)
                } else {
                    self.model.end + self.rng.within(1, 100)
                };
                Op::ReadOutOfRange(offset)
            }
            58..=66 => Op::OffsetForTime(self.pick_time()),
            67..=71 => Op::Roll,
            72..=75 => Op::Flush,
            76..=81 => {
                let horizon = self.config.retention_ms.unwrap_or(10_000) as i64;
                let now = match self.rng.within(0, 9) {
                    0 => self.clock + 10 * horizon,
                    1..=2 => self.clock - 10 * horizon,
                    _ => self.clock + self.rng.signed(-horizon, horizon),
                };
                Op::Retention(now)
            }
            82..=88 => {
                let horizon = self.config.delete_retention_ms as i64;
                let now = match self.rng.within(0, 9) {
                    0 => self.clock + 10 * horizon,
                    1..=2 => self.clock - 10 * horizon,
                    _ => self.clock + self.rng.signed(-horizon, horizon),
                };
                Op::Compact(now)
            }
            89..=94 => Op::Sleep(self.rng.within(0, 12)),
            95..=96 => Op::CleanReboot,
            _ => Op::CrashReboot,
        }
    }

    fn gen_records(&mut self) -> Vec<ModelRecord> {
        let rng = &mut self.rng;
        let n = if rng.percent(15) { rng.within(20, 50) } else { rng.within(1, 20) };
        self.clock += rng.signed(0, 300);
        (0..n)
            .map(|_| {
                let key = if rng.percent(25) {
                    None
                } else {
                    Some(format!("key-{}", rng.within(0, KEYS as u64 - 1)).into_bytes())
                };
                // Tombstones (null values) and empty values, which are not tombstones.
                let value = match () {
                    _ if key.is_some() && rng.percent(8) => None,
                    _ if rng.percent(4) => Some(Vec::new()),
                    _ => {
                        let len = rng.within(0, 300) as usize;
                        Some(rng.bytes(len))
                    }
                };
                let time = self.clock + rng.signed(-100, 100);
                let headers = if rng.percent(15) {
                    (0..rng.within(1, 2))
                        .map(|i| {
                            let len = rng.within(0, 16) as usize;
                            (format!("h{i}"), (!rng.percent(20)).then(|| rng.bytes(len)))
                        })
                        .collect()
                } else {
                    Vec::new()
                };
                ModelRecord { key, value, time, headers }
            })
            .collect()
    }

    /// An offset in `[start, end]`: often an edge, a held offset or a compaction gap.
    fn pick_offset(&mut self) -> u64 {
        let (start, end) = (self.model.start, self.model.end);
        match self.rng.within(0, 9) {
            0 => start,
            1 => end,
            2 | 3 if !self.model.records.is_empty() => {
                let n = self.model.records.len() as u64;
                let i = self.rng.within(0, n - 1) as usize;
                *self.model.records.keys().nth(i).expect("in range")
            }
            4 if end > start => end - self.rng.within(1, (end - start).min(20)),
            _ => self.rng.within(start, end),
        }
    }

    /// A time to seek: a held record's time, one around the clock, or beyond either end.
    fn pick_time(&mut self) -> i64 {
        match self.rng.within(0, 9) {
            0 => i64::MIN,
            1 => self.clock + 1_000,
            2 | 3 if !self.model.records.is_empty() => {
                let n = self.model.records.len() as u64;
                let i = self.rng.within(0, n - 1) as usize;
                self.model.records.values().nth(i).expect("in range").time + self.rng.signed(-1, 1)
            }
            _ => self.clock - self.rng.signed(-200, 60_000),
        }
    }

    async fn apply(&mut self, op: &Op) {
        match op {
            Op::Append(records) => self.append(records).await,
            &Op::Read { offset, max_bytes, reads } => {
                self.stats.reads += 1;
                self.check_reads(offset, max_bytes, reads).await;
            }
            &Op::ReadOutOfRange(offset) => {
                self.stats.out_of_range += 1;
                match self.log().read(Offset(offset), 4096).await {
                    Err(LogError::OffsetOutOfRange { requested, start, end }) => {
                        assert_eq!((requested.0, start.0, end.0), (offset, self.model.start, self.model.end));
                    }
                    other => panic!("read at {offset} outside the log: expected OffsetOutOfRange, got {other:?}"),
                }
            }
            &Op::OffsetForTime(time) => {
                self.stats.time_seeks += 1;
                let got = self.log().offset_for_time(Timestamp(time)).await.expect("offset_for_time");
                let want = self.model.records.iter().find(|(_, r)| r.time >= time).map(|(&o, _)| Offset(o));
                assert_eq!(got, want, "offset_for_time({time})");
            }
            Op::Roll => {
                let before = self.log().segment_bases();
                self.log().roll().await.expect("roll");
                let after = self.log().segment_bases();
                if before.last() == Some(&Offset(self.model.end)) {
                    assert_eq!(after, before, "rolling an empty active segment does nothing");
                } else {
                    self.stats.rolls += 1;
                    let mut want = before;
                    want.push(Offset(self.model.end));
                    assert_eq!(after, want, "a roll starts a segment at the end offset");
                }
                assert_eq!(self.log().durable_offset().0, self.model.end, "a roll makes everything durable");
            }
            Op::Flush => {
                self.stats.flushes += 1;
                self.log().flush().await.expect("flush");
                assert_eq!(self.log().durable_offset().0, self.model.end, "a flush makes everything durable");
            }
            &Op::Retention(now) => self.retention(now).await,
            &Op::Compact(now) => self.compact(now).await,
            &Op::Sleep(ms) => glommio::timer::sleep(Duration::from_millis(ms)).await,
            Op::CleanReboot => self.reboot(false).await,
            Op::CrashReboot => self.reboot(true).await,
        }
    }

    async fn append(&mut self, records: &[ModelRecord]) {
        let headers: Vec<Vec<Header<'_>>> = records
            .iter()
            .map(|r| r.headers.iter().map(|(k, v)| Header { key: k, value: v.as_deref() }).collect())
            .collect();
        let batch: Vec<Record<'_>> = records
            .iter()
            .zip(&headers)
            .map(|(r, h)| Record {
                key: r.key.as_deref(),
                value: r.value.as_deref(),
                event_time: Timestamp(r.time),
                headers: h,
            })
            .collect();
        let info = self.log().append(&batch).await.expect("append");
        let n = records.len() as u64;
        assert_eq!(info.base_offset, Offset(self.model.end), "offsets continue from the end offset");
        assert_eq!(info.last_offset, Offset(self.model.end + n - 1));
        for (i, r) in records.iter().enumerate() {
            self.model.records.insert(self.model.end + i as u64, r.clone());
        }
        self.model.end += n;
        self.stats.appends += 1;
        self.stats.records += n;
        self.stats.max_segments = self.stats.max_segments.max(self.log().segment_count());
    }

    /// Reads from `from` as a consumer does (each read starting at the previous one's
    /// next offset), at most `reads` times or until the end. Each read must return
    /// exactly the model's records in `[at, next_offset)`; an empty read only at the end (it
    /// may skip to there over offsets compaction removed).
    async fn check_reads(&mut self, from: u64, max_bytes: usize, reads: usize) {
        let mut at = from;
        for _ in 0..reads {
            let batches = self.log().read(Offset(at), max_bytes).await.unwrap_or_else(|e| panic!("read at {at}: {e}"));
            let next = batches.next_offset().0;
            if batches.is_empty() {
                // An empty read stays where it is, or skips to the end over a tail that
                // compaction emptied (as a Kafka consumer skips compacted offsets).
                assert!(
                    next == at || (next <= self.model.end && self.model.records.range(at..next).next().is_none()),
                    "an empty read at {at} moved to {next} (end {})",
                    self.model.end
                );
                let rest: Vec<_> = self.model.records.range(at..).take(3).collect();
                assert!(
                    rest.is_empty(),
                    "read at {at} (end {}) returned nothing; the model holds {rest:?}",
                    self.model.end
                );
                return;
            }
            assert!(next > at && next <= self.model.end, "read at {at}: next offset {next}, end {}", self.model.end);
            let got: Vec<(u64, ModelRecord)> = batches
                .records()
                .map(|r| ModelRecord::from_view(&r.unwrap_or_else(|e| panic!("read at {at}: record: {e}"))))
                .collect();
            let want: Vec<(u64, &ModelRecord)> = self.model.records.range(at..next).map(|(&o, r)| (o, r)).collect();
            same_records(&got, &want, &format!("read at {at} ({max_bytes} bytes, next {next})"));
            self.stats.records_read += got.len() as u64;
            at = next;
            if at == self.model.end {
                break;
            }
        }
    }

    /// Reads the whole log and compares it with the model.
    async fn check_all(&mut self) {
        let start = self.model.start;
        self.check_reads(start, 256 << 10, usize::MAX).await;
    }

    async fn retention(&mut self, now: i64) {
        self.stats.retention_passes += 1;
        let bases: Vec<u64> = self.log().segment_bases().iter().map(|b| b.0).collect();
        let closed = bases.len() - 1;
        let sizes: Vec<u64> = bases[..closed]
            .iter()
            .map(|&b| {
                let path = SegmentPaths::new(&self.dir, Offset(b)).log;
                std::fs::metadata(&path).unwrap_or_else(|e| panic!("stat {}: {e}", path.display())).len()
            })
            .collect();
        let total = self.log().size_bytes();
        assert!(sizes.iter().sum::<u64>() <= total, "closed segments {sizes:?} exceed the log's {total} bytes");
        // The rule: delete the oldest closed segments while each is past the retention time
        // or the log without it is still at least the retention size.
        let mut remaining = total;
        let mut n = 0;
        for i in 0..closed {
            let max_time = self.model.max_time(bases[i], bases[i + 1]);
            let by_time = self.config.retention_ms.is_some_and(|ms| max_time < now.saturating_sub(ms as i64));
            let by_size = self.config.retention_bytes.is_some_and(|max| remaining - sizes[i] >= max);
            if !(by_time || by_size) {
                break;
            }
            remaining -= sizes[i];
            n += 1;
        }
        let report = self.log().apply_retention(Timestamp(now)).await.expect("apply_retention");
        let start = bases[n];
        assert_eq!(report.segments_deleted, n, "segments deleted; {report:?}");
        assert_eq!(report.log_start, Offset(start), "{report:?}");
        assert_eq!(report.bytes_deleted, sizes[..n].iter().sum::<u64>(), "{report:?}");
        assert_eq!(self.log().start_offset(), Offset(start));
        assert_eq!(self.log().size_bytes(), remaining);
        let want_bases: Vec<Offset> = bases[n..].iter().map(|&b| Offset(b)).collect();
        assert_eq!(self.log().segment_bases(), want_bases);
        self.stats.retention_segments += n as u64;
        self.stats.retention_records += self.model.drop_below(start) as u64;
        if n > 0 {
            // The new start reads back as the model's first record.
            self.check_reads(start, 1, 1).await;
        }
    }

    async fn compact(&mut self, now: i64) {
        if self.config.cleanup != CleanupPolicy::Compact {
            match self.log().compact(Timestamp(now)).await {
                Err(LogError::InvalidConfig(_)) => return,
                other => panic!("compacting a delete-policy log: expected InvalidConfig, got {other:?}"),
            }
        }
        self.stats.compactions += 1;
        let bases: Vec<u64> = self.log().segment_bases().iter().map(|b| b.0).collect();
        let active = *bases.last().expect("a log has an active segment");
        // The rule, over closed segments only: keep the latest record of each key, drop a
        // latest record that is a tombstone once its segment's newest event time is older
        // than `now - delete_retention_ms`, and keep every unkeyed record.
        let mut latest: HashMap<&[u8], u64> = HashMap::new();
        for (&o, r) in self.model.records.range(..active) {
            if let Some(k) = &r.key {
                latest.insert(k, o);
            }
        }
        let horizon = now.saturating_sub(self.config.delete_retention_ms as i64);
        let (mut superseded, mut tombstones, mut rewritten) = (0u64, 0u64, 0usize);
        let mut gone = Vec::new();
        for w in bases.windows(2) {
            let expired = self.model.max_time(w[0], w[1]) < horizon;
            let before = gone.len();
            for (&o, r) in self.model.records.range(w[0]..w[1]) {
                let Some(k) = &r.key else { continue };
                if latest[k.as_slice()] != o {
                    superseded += 1;
                    gone.push(o);
                } else if r.value.is_none() && expired {
                    tombstones += 1;
                    gone.push(o);
                }
            }
            rewritten += usize::from(gone.len() > before);
        }
        let report = self.log().compact(Timestamp(now)).await.expect("compact");
        assert_eq!(
            (report.records_superseded, report.tombstones_removed, report.segments_rewritten),
            (superseded, tombstones, rewritten),
            "compaction (superseded, tombstones, segments rewritten); {report:?}"
        );
        assert!(report.bytes_after <= report.bytes_before, "{report:?}");
        assert_eq!(
            self.log().segment_bases().iter().map(|b| b.0).collect::<Vec<_>>(),
            bases,
            "compaction keeps segments"
        );
        for o in &gone {
            self.model.records.remove(o);
        }
        self.stats.compacted_segments += rewritten as u64;
        self.stats.compacted_records += gone.len() as u64;
    }

    async fn reboot(&mut self, crash: bool) {
        let bases = self.log().segment_bases();
        if crash {
            self.stats.crash_reboots += 1;
            // From here on nothing reaches the disk. Writes the log already submitted may
            // still land, as they would on a real machine: wait for them, so that none
            // lands after the reopened log has read the segment.
            self.storage.plan().borrow_mut().crashed = true;
            drop(self.log.take());
            self.storage.settled().await;
            let active = bases.last().expect("a log has an active segment").0;
            self.lose_unsynced_writes(active);
        } else {
            self.stats.clean_reboots += 1;
            self.log().close().await.expect("close");
            assert!(
                matches!(self.log().append(&[Record::unkeyed(b"x", Timestamp(0))]).await, Err(LogError::Closed { .. })),
                "a closed log refuses appends"
            );
            assert_eq!(self.log().durable_offset().0, self.model.end, "close makes everything durable");
            self.model.durable_end = self.model.end;
            drop(self.log.take());
        }
        self.storage = FaultyStorage::new();
        let (log, report) = Log::open(self.storage.clone(), &self.dir, self.config.clone())
            .await
            .unwrap_or_else(|e| panic!("reopen: {e}"));
        self.log = Some(log);
        assert_eq!(report.segments, bases.len(), "segments found on reopen; {report:?}");
        assert!(report.rebuilt_indexes.is_empty(), "closed segments keep their indexes; {report:?}");
        assert!(report.damaged_segments.is_empty(), "{report:?}");
        assert!(report.removed_files.is_empty(), "{report:?}");
        assert_eq!(self.log().segment_bases(), bases, "a reboot keeps the segments");
        let end = self.log().end_offset().0;
        if crash {
            if let Some(t) = &report.truncated {
                self.stats.crash_truncations += 1;
                assert_eq!(t.log_end.0, end, "{report:?}");
                assert_eq!(t.segments_removed, 0, "{report:?}");
            }
            assert!(
                end >= self.model.durable_end && end <= self.model.end,
                "after a crash the log ends at {end}: it must keep every durable offset (below {}) and hold no more \
                 than was acknowledged (below {})",
                self.model.durable_end,
                self.model.end
            );
            let lost = self.model.records.split_off(&end);
            self.stats.crash_lost_records += lost.len() as u64;
            self.model.end = end;
        } else {
            assert!(report.truncated.is_none(), "a clean reboot cuts nothing; {report:?}");
            assert_eq!(end, self.model.end, "a clean reboot loses nothing");
        }
        assert_eq!(self.log().start_offset().0, self.model.start);
        assert_eq!(self.log().durable_offset().0, end, "what recovery found is durable");
        self.model.durable_end = end;
        self.durable_seen = end;
        self.check_all().await;
    }

    /// After a crash: checks that every durable batch of the active segment is on disk,
    /// and on some crashes loses unsynced writes out of order, as a machine that lost
    /// power may: each 512-byte block past the durable position (and the rest of the
    /// block that position is in) reverts, with some probability, to what it held at the
    /// last sync, which is zeros (a flush pads with zeros, a new segment is zeros, and
    /// recovery cuts whatever lies past the valid end).
    fn lose_unsynced_writes(&mut self, active: u64) {
        let path = SegmentPaths::new(&self.dir, Offset(active)).log;
        let mut bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
        let durable_end = self.model.durable_end;
        let (mut pos, mut next) = (0usize, active);
        while next < durable_end {
            let h = check_batch(&bytes[pos.min(bytes.len())..]).unwrap_or_else(|e| {
                panic!("durable batch at byte {pos} (offset {next}, durable end {durable_end}) is not on disk: {e}")
            });
            assert_eq!(h.base_offset.0, next, "the active segment's batches are contiguous (byte {pos})");
            next = h.next_offset().0;
            pos += h.stored_len();
        }
        assert_eq!(next, durable_end, "the durable end is a batch boundary");
        if !self.rng.percent(50) {
            return;
        }
        self.stats.lossy_crashes += 1;
        let percent = [10, 50, 100][self.rng.within(0, 2) as usize];
        let file = std::fs::OpenOptions::new().write(true).open(&path).expect("open the active segment");
        while pos < bytes.len() {
            let block_end = ((pos / 512 + 1) * 512).min(bytes.len());
            let block = &mut bytes[pos..block_end];
            if block.iter().any(|&b| b != 0) && self.rng.percent(percent) {
                block.fill(0);
                file.write_all_at(block, pos as u64).expect("zero a lost block");
                self.stats.lost_blocks += 1;
            }
            pos = block_end;
        }
        file.sync_all().expect("sync the active segment");
    }

    /// Checks the log's offsets and segments against the model, and learns what became
    /// durable (in the background, for the interval policy).
    fn check_state(&mut self) {
        let log = self.log.as_ref().expect("the log is open");
        let m = &mut self.model;
        assert_eq!(log.start_offset().0, m.start, "start offset");
        assert_eq!(log.end_offset().0, m.end, "end offset");
        let durable = log.durable_offset().0;
        assert!(durable >= self.durable_seen, "the durable offset went back from {} to {durable}", self.durable_seen);
        assert!(durable <= m.end, "durable offset {durable} beyond the end {}", m.end);
        if self.config.fsync == FsyncPolicy::Always {
            assert_eq!(durable, m.end, "under fsync=always every acknowledged append is durable");
        }
        self.durable_seen = durable;
        m.durable_end = m.durable_end.max(durable);
        let bases = log.segment_bases();
        assert_eq!(bases.first(), Some(&Offset(m.start)), "the start offset is the first segment's base");
        assert!(bases.windows(2).all(|w| w[0] < w[1]), "segment bases increase: {bases:?}");
        let active = bases.last().expect("an active segment").0;
        assert!(active <= m.end, "active base {active} beyond the end {}", m.end);
        assert!(m.durable_end >= active, "a roll makes the closed segments durable: {} < {active}", m.durable_end);
        if let (Some((&first, _)), Some((&last, _))) = (m.records.first_key_value(), m.records.last_key_value()) {
            assert!(
                first >= m.start && last < m.end,
                "model records [{first}, {last}] outside [{}, {})",
                m.start,
                m.end
            );
        }
    }
}

fn same_records(got: &[(u64, ModelRecord)], want: &[(u64, &ModelRecord)], what: &str) {
    let n = got.len().max(want.len());
    for i in 0..n {
        let g = got.get(i).map(|(o, r)| (*o, r));
        let w = want.get(i).map(|(o, r)| (*o, *r));
        assert!(
            g == w,
            "{what}: record {i} of {} (the model has {}) differs:\n  got  {g:?}\n  want {w:?}",
            got.len(),
            want.len()
        );
    }
}

fn truncated(s: &str, max: usize) -> &str {
    match s.char_indices().nth(max) {
        Some((i, _)) => &s[..i],
        None => s,
    }
}

/// Regression, found while writing the model above: recovery ended the active segment
/// cleanly at zeros but left the bytes past them in place. After a crash that lost one
/// write but not a later one, those bytes are batches the log had declared lost; once new
/// appends ended exactly where one of them started, even a clean reopen took them (and
/// their records) back, behind a gap in the offsets.
#[test]
fn stale_batches_behind_a_hole_stay_lost() {
    /// The value length that makes a batch of `n` records exactly `stored` bytes.
    fn value_len_for(n: usize, stored: usize) -> usize {
        let mut encoder = BatchEncoder::new();
        (0..stored)
            .find(|&len| {
                let value = vec![7u8; len];
                let records: Vec<Record<'_>> = (0..n).map(|_| Record::unkeyed(&value, Timestamp(1))).collect();
                encoder.encode(&records, &BatchMeta::default(), Offset(0)).expect("encode").0.len() == stored
            })
            .expect("a value length that fills the batch exactly")
    }

    let dir = common::temp_dir("model-stale");
    let run_dir = dir.clone();
    common::run(move || async move {
        let dir = run_dir;
        let config = LogConfig { fsync: FsyncPolicy::Never, ..LogConfig::default() };
        // Batches of 1 KiB, so that a run of them can end on a 4 KiB boundary: there no
        // write of the appender (however it pads) zeroes the bytes that follow.
        const BATCH: usize = 1024;
        // Eight batches of two records: offsets 0..16 at bytes 0..8192.
        let (log, _) = Log::open(UringStorage, &dir, config.clone()).await.expect("open");
        let old = vec![1u8; value_len_for(2, BATCH)];
        for _ in 0..8 {
            log.append(&[Record::unkeyed(&old, Timestamp(1)), Record::unkeyed(&old, Timestamp(1))])
                .await
                .expect("append");
        }
        log.close().await.expect("close");
        drop(log);
        // A crash lost the write of the second batch (bytes 1024..2048), not the later ones.
        let path = SegmentPaths::new(&dir, Offset(0)).log;
        let file = std::fs::OpenOptions::new().write(true).open(&path).expect("open segment");
        file.write_all_at(&[0u8; BATCH], BATCH as u64).expect("zero a batch");
        file.sync_all().expect("sync");
        drop(file);
        // Recovery ends at the hole: offset 2. Three new records there, one per batch, at
        // bytes 1024..4096: the log's data now ends where the fifth old batch (offset 8)
        // starts.
        let (log, _) = Log::open(UringStorage, &dir, config.clone()).await.expect("reopen");
        assert_eq!(log.end_offset(), Offset(2));
        let new = vec![2u8; value_len_for(1, BATCH)];
        for o in 2..5 {
            assert_eq!(
                log.append(&[Record::unkeyed(&new, Timestamp(2))]).await.expect("append").base_offset,
                Offset(o)
            );
        }
        log.close().await.expect("close");
        drop(log);
        // A clean reopen holds exactly offsets 0..5, the last three the new records.
        let (log, report) = Log::open(UringStorage, &dir, config).await.expect("reopen");
        assert_eq!(log.end_offset(), Offset(5), "batches declared lost came back; {report:?}");
        let batches = log.read(Offset(2), 64 << 10).await.expect("read");
        let got: Vec<_> = batches
            .records()
            .map(|r| {
                let r = r.expect("record");
                (r.offset(), r.value_bytes().to_vec())
            })
            .collect();
        assert_eq!(got, (2..5).map(|o| (Offset(o), new.clone())).collect::<Vec<_>>());
    });
    let _ = std::fs::remove_dir_all(&dir);
}
