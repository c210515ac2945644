//! Crash test: a child process appends with `FsyncPolicy::Always` and reports each
//! acknowledged append to its parent, which kills it with SIGKILL at a random moment,
//! reopens the log and checks that every acknowledged record is there, intact, at the
//! offset it was acknowledged at, that offsets are contiguous, and that whatever else
//! survived (appends in flight at the kill) is well formed.
//!
//! The child is this test binary run again with a filter that selects only
//! `crash_child_entry`, which does nothing unless `SLUICE_CRASH_CHILD_DIR` is set.

mod common;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use common::Rng;
use sluice_io::{FsyncPolicy, Log, LogConfig, Offset, Record, Timestamp, UringStorage};

const CHILD_DIR_ENV: &str = "SLUICE_CRASH_CHILD_DIR";
const CHILD_SEED_ENV: &str = "SLUICE_CRASH_CHILD_SEED";
/// Concurrent appenders in the child: they share group commits.
const WRITERS: u32 = 4;
/// Crash rounds per run.
const ROUNDS: u64 = 5;

fn config() -> LogConfig {
    LogConfig {
        fsync: FsyncPolicy::Always,
        segment_bytes_max: 64 << 10,
        index_interval_bytes: 4096,
        write_buffer_bytes: 64 << 10,
        ..LogConfig::default()
    }
}

/// FNV-1a, as the records' checksum.
fn fnv64(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3))
}

/// A record value: writer, sequence number, padding derived from both, and a checksum
/// of all that.
fn encode_value(writer: u32, seq: u64, pad: usize) -> Vec<u8> {
    let mut v = Vec::with_capacity(22 + pad);
    v.extend_from_slice(&writer.to_le_bytes());
    v.extend_from_slice(&seq.to_le_bytes());
    v.extend_from_slice(&(pad as u16).to_le_bytes());
    v.extend((0..pad).map(|i| (seq as u8).wrapping_mul(31).wrapping_add(writer as u8).wrapping_add(i as u8)));
    let sum = fnv64(&v);
    v.extend_from_slice(&sum.to_le_bytes());
    v
}

/// Decodes a value, checking its length, padding and checksum.
fn decode_value(v: &[u8]) -> Option<(u32, u64)> {
    if v.len() < 22 {
        return None;
    }
    let (body, sum) = v.split_at(v.len() - 8);
    if fnv64(body).to_le_bytes() != sum {
        return None;
    }
    let writer = u32::from_le_bytes(body[0..4].try_into().ok()?);
    let seq = u64::from_le_bytes(body[4..12].try_into().ok()?);
    let pad = u16::from_le_bytes(body[12..14].try_into().ok()?) as usize;
    (body.len() == 14 + pad && encode_value(writer, seq, pad) == v).then_some((writer, seq))
}

fn writer_key(writer: u32) -> Vec<u8> {
    format!("writer-{writer}").into_bytes()
}

/// One acknowledged append, as the child reported it.
#[derive(Copy, Clone, Debug)]
struct Ack {
    base: u64,
    last: u64,
    writer: u32,
    seq_first: u64,
    count: u64,
}

impl Ack {
    fn parse(line: &str) -> Option<Ack> {
        let f: Vec<u64> = line.split(' ').map(|t| t.parse().ok()).collect::<Option<_>>()?;
        let [base, last, writer, seq_first, count] = f[..] else { return None };
        Some(Ack { base, last, writer: u32::try_from(writer).ok()?, seq_first, count })
    }
}

/// The child: appends forever from several concurrent writers, printing one line per
/// acknowledged append. Returns at once unless started by the parent.
#[test]
fn crash_child_entry() {
    let Some(dir) = std::env::var_os(CHILD_DIR_ENV) else { return };
    let seed: u64 = std::env::var(CHILD_SEED_ENV).expect("child seed").parse().expect("child seed is a number");
    let dir = PathBuf::from(dir);
    common::run(move || async move {
        let (log, _) = Log::open(UringStorage, &dir, config()).await.expect("child opens the log");
        // libtest may have printed "test crash_child_entry ... " without a newline.
        println!();
        for w in 0..WRITERS {
            let log = log.clone();
            glommio::spawn_local(async move {
                let mut rng = Rng::new(seed ^ (u64::from(w) + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15));
                let key = writer_key(w);
                let mut seq = 0u64;
                loop {
                    let n = rng.range(1, 24);
                    let vals: Vec<Vec<u8>> =
                        (0..n).map(|i| encode_value(w, seq + i, rng.range(0, 300) as usize)).collect();
                    let recs: Vec<Record<'_>> = vals
                        .iter()
                        .enumerate()
                        .map(|(i, v)| Record::keyed(&key, v, Timestamp((seq + i as u64) as i64)))
                        .collect();
                    let info = match log.append(&recs).await {
                        Ok(info) => info,
                        Err(e) => {
                            eprintln!("child writer {w}: append failed: {e}");
                            std::process::exit(3);
                        }
                    };
                    if info.last_offset.0 - info.base_offset.0 + 1 != n {
                        eprintln!("child writer {w}: {n} records acknowledged as {info:?}");
                        std::process::exit(4);
                    }
                    let line = format!("{} {} {w} {seq} {n}\n", info.base_offset, info.last_offset);
                    let mut out = std::io::stdout().lock();
                    out.write_all(line.as_bytes()).expect("write ack");
                    out.flush().expect("flush ack");
                    seq += n;
                }
            })
            .detach();
        }
        // The writers never finish: the parent kills this process.
        std::future::pending::<()>().await;
    });
}

/// Runs the child on `dir`, kills it with SIGKILL `kill_after` after its first
/// acknowledgement, and returns every acknowledgement it completed.
fn run_child_and_kill(dir: &Path, seed: u64, kill_after: Duration) -> Vec<Ack> {
    let mut child = Command::new(std::env::current_exe().expect("test binary"))
        .args(["--exact", "crash_child_entry", "--nocapture", "--test-threads=1"])
        .env(CHILD_DIR_ENV, dir)
        .env(CHILD_SEED_ENV, seed.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn child");
    let stdout = child.stdout.take().expect("child stdout");
    let mut stderr = child.stderr.take().expect("child stderr");
    let (first_tx, first_rx) = mpsc::channel();
    let reader = std::thread::spawn(move || {
        let mut acks = Vec::new();
        let mut reader = BufReader::new(stdout);
        let mut line = String::new();
        loop {
            line.clear();
            match reader.read_line(&mut line) {
                Ok(0) | Err(_) => return acks,
                // A line cut by the kill has no newline: it was never fully reported.
                Ok(_) if !line.ends_with('\n') => return acks,
                Ok(_) => {
                    if let Some(ack) = Ack::parse(line.trim_end()) {
                        if acks.is_empty() {
                            let _ = first_tx.send(());
                        }
                        acks.push(ack);
                    }
                }
            }
        }
    });
    let err_reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stderr.read_to_string(&mut s);
        s
    });
    let started = first_rx.recv_timeout(Duration::from_secs(60)).is_ok();
    if started {
        std::thread::sleep(kill_after);
    }
    let early_exit = child.try_wait().expect("poll child");
    child.kill().expect("SIGKILL the child");
    let status = child.wait().expect("reap child");
    let acks = reader.join().expect("stdout reader");
    let errors = err_reader.join().expect("stderr reader");
    assert!(started && early_exit.is_none(), "the child stopped on its own ({status:?}): {errors}");
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(status.signal(), Some(libc::SIGKILL), "the child died of SIGKILL");
    acks
}

/// Reopens the killed child's log and checks it against the acknowledgements; then
/// checks the log continues from its end. Returns the end offset.
async fn verify(dir: PathBuf, acks: Vec<Ack>) -> u64 {
    let (log, report) = Log::open(UringStorage, &dir, config()).await.expect("reopen after the crash");
    let end = log.end_offset().0;
    eprintln!(
        "  reopened: {} segments, end offset {end}, truncated {:?}, rebuilt indexes {}",
        report.segments,
        report.truncated.as_ref().map(|t| (t.pos, t.log_end, &t.reason)),
        report.rebuilt_indexes.len()
    );
    assert_eq!(log.start_offset(), Offset(0));

    // Every record present, in order: contiguous offsets, each well formed.
    let mut present: Vec<(u32, u64)> = Vec::with_capacity(end as usize);
    let mut at = 0u64;
    while at < end {
        let batches = log.read(Offset(at), 256 << 10).await.expect("read after the crash");
        assert!(!batches.is_empty(), "offset {at} below the end {end} reads nothing");
        for r in batches.records() {
            let r = r.expect("a record present after the crash");
            assert_eq!(r.offset(), Offset(at), "offsets are contiguous");
            let (writer, seq) = decode_value(r.value_bytes())
                .unwrap_or_else(|| panic!("record at offset {at} is malformed ({} bytes)", r.value_bytes().len()));
            assert_eq!(r.key(), Some(writer_key(writer).as_slice()), "key of offset {at}");
            assert_eq!(r.event_time(), Timestamp(seq as i64), "event time of offset {at}");
            present.push((writer, seq));
            at += 1;
        }
    }
    assert_eq!(present.len() as u64, end);

    // Each writer's records appear in its own order, with no gap and no repeat: a
    // writer appends its next batch only after the previous one was acknowledged.
    let mut next_seq: BTreeMap<u32, u64> = BTreeMap::new();
    for (o, &(w, seq)) in present.iter().enumerate() {
        let want = next_seq.entry(w).or_insert(0);
        assert_eq!(seq, *want, "offset {o}: writer {w} sequence");
        *want += 1;
    }

    // Every acknowledged append is there, at the offsets it was acknowledged at.
    let mut acked_records = 0;
    for a in &acks {
        assert_eq!(a.last - a.base + 1, a.count, "{a:?}");
        assert!(a.last < end, "acknowledged {a:?} lost: the log ends at {end}");
        for i in 0..a.count {
            assert_eq!(present[(a.base + i) as usize], (a.writer, a.seq_first + i), "{a:?}, record {i}");
        }
        acked_records += a.count;
    }
    let acked_end = acks.iter().map(|a| a.last + 1).max().unwrap_or(0);
    eprintln!("  {} appends ({acked_records} records) acknowledged up to {acked_end}; {end} present", acks.len());
    log.close().await.unwrap();
    drop(log);

    // Reopen once more and append: the log continues from its end.
    let (log, report) = Log::open(UringStorage, &dir, config()).await.expect("second reopen");
    assert!(report.truncated.is_none(), "the first reopen left a clean log: {report:?}");
    assert_eq!(log.end_offset(), Offset(end));
    let v = encode_value(WRITERS, 0, 7);
    let key = writer_key(WRITERS);
    let info = log.append(&[Record::keyed(&key, &v, Timestamp(0))]).await.unwrap();
    assert_eq!(info.base_offset, Offset(end));
    let batches = log.read(Offset(end), 4096).await.unwrap();
    let got: Vec<_> = batches.records().map(Result::unwrap).collect();
    assert_eq!(got.len(), 1);
    assert_eq!(decode_value(got[0].value_bytes()), Some((WRITERS, 0)));
    log.close().await.unwrap();
    end
}

#[test]
fn acknowledged_appends_survive_sigkill() {
    let base = common::seed("acknowledged_appends_survive_sigkill");
    for round in 0..ROUNDS {
        let seed = base.wrapping_add(round);
        let mut rng = Rng::new(seed);
        let kill_after = Duration::from_millis(rng.range(100, 600));
        eprintln!("round {round}: child seed {seed}, kill {kill_after:?} after the first acknowledgement");
        let dir = common::temp_dir("crash");
        let acks = run_child_and_kill(&dir, seed, kill_after);
        assert!(!acks.is_empty(), "the child acknowledged nothing");
        let verify_dir = dir.clone();
        let end = common::run(move || verify(verify_dir, acks));
        assert!(end > 0);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
