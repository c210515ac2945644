//! Crash equivalence: a child process runs the checkpointed job (tumbling, sliding and
//! session windows and a keyed process function with timers, from a topic into an
//! exactly-once topic sink, checkpoints every 100 ms); the parent kills it with SIGKILL at
//! random moments, several times, restarts it each time, and finally reads the output
//! topic `read_committed`: it must equal the reference output exactly, no duplicate and no
//! loss. Run in aligned and unaligned checkpoint mode, at 1 and 2 shards, and with the
//! shard count changing at every restart (rescaling: 2 -> 1 -> 2 ...), for several seeds.
//! In unaligned mode at 2 shards, the scenario's checkpoints must have stored in-flight
//! records (every run reports its running total as checkpoints complete, killed runs
//! included), or the mode was not exercised. Whether one checkpoint catches records in
//! flight depends on timing; `checkpoint.rs` has the deterministic test of that path (a
//! backpressured ring).
//!
//! This test has its own `main` (`harness = false`): the child is this same binary, started
//! with `SLUICE_CRASH_CHILD` set. `SEED=<n>` replays one seed.

#[path = "checkpoint_job/mod.rs"]
mod checkpoint_job;
mod common;

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use checkpoint_job::{JobConfig, committed_output, diff, engine, expected, input, produce, spawn};
use futures_lite::future::block_on;
use sluice_engine::dataflow::CheckpointMode;

const CHILD: &str = "SLUICE_CRASH_CHILD";
/// The line a child writes to stderr whenever a checkpoint completes that stored records
/// in flight: the total its checkpoints stored so far.
const INFLIGHT: &str = "in-flight records stored: ";

fn main() {
    if let Ok(spec) = std::env::var(CHILD) {
        child(&spec);
        return;
    }
    let seeds: Vec<u64> = match std::env::var("SEED") {
        Ok(s) => vec![s.parse().expect("SEED is a number")],
        Err(_) => vec![1, 2],
    };
    let started = Instant::now();
    for seed in seeds {
        for mode in [CheckpointMode::Aligned, CheckpointMode::Unaligned] {
            for shards in [Shards::Fixed(1), Shards::Fixed(2), Shards::Alternating] {
                let t = Instant::now();
                let report = scenario(seed, mode, shards);
                println!("SEED={seed} {mode} {shards:?}: {report} ({:.1} s)", t.elapsed().as_secs_f64());
            }
        }
    }
    println!("test result: ok. checkpoint_crash passed in {:.1} s", started.elapsed().as_secs_f64());
}

#[derive(Debug, Clone, Copy)]
enum Shards {
    Fixed(usize),
    /// 2 on the first run, 1 on the next, and so on: every restart rescales.
    Alternating,
}

/// Runs the job in a child process until it finishes, killing it `KILLS` times first;
/// checks the committed output. Returns what happened, for the log.
fn scenario(seed: u64, mode: CheckpointMode, shards: Shards) -> String {
    const KILLS: usize = 3;
    let dir = common::data_dir("checkpoint_crash", &format!("{seed}-{mode}-{shards:?}"));
    let data = dir.join("data");
    let records = input(seed, 8000, 40);
    let want = expected(&records);
    {
        let e = engine(&data);
        produce(&e.handle(), &records);
        block_on(e.shutdown()).unwrap();
    }
    let mut rng = common::Rng::seeded(seed * 31 + 7);
    let mut kills = 0;
    let mut restores = 0;
    let mut inflight = 0;
    for run in 0.. {
        assert!(run < 50, "SEED={seed} {mode} {shards:?}: the job never finished");
        let n = match shards {
            Shards::Fixed(n) => n,
            Shards::Alternating => 2 - run % 2,
        };
        let spec = format!("{}|{}|{n}|{mode}", data.display(), dir.join("checkpoints").display());
        let mut child = Command::new(std::env::current_exe().unwrap())
            .env(CHILD, spec)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("the child starts");
        let finished = if kills < KILLS {
            let deadline = Instant::now() + Duration::from_millis(150 + rng.below(600));
            loop {
                if let Some(status) = child.try_wait().unwrap() {
                    break Some(status);
                }
                if Instant::now() >= deadline {
                    child.kill().unwrap();
                    child.wait().unwrap();
                    kills += 1;
                    break None;
                }
                std::thread::sleep(Duration::from_millis(2));
            }
        } else {
            Some(child.wait().unwrap())
        };
        let mut log = String::new();
        child.stderr.take().unwrap().read_to_string(&mut log).unwrap();
        restores += log.matches("restoring checkpoint").count();
        if let Some(status) = finished {
            assert!(status.success(), "SEED={seed} {mode} {shards:?}: the child failed ({status}):\n{log}");
        }
        let stored = log.lines().filter_map(|l| l.strip_prefix(INFLIGHT)).map(|n| n.parse::<u64>().unwrap()).max();
        if n == 2 {
            inflight += stored.unwrap_or(0);
        }
        if finished.is_some() {
            break;
        }
    }
    if mode == CheckpointMode::Unaligned && !matches!(shards, Shards::Fixed(1)) {
        assert!(
            inflight > 0,
            "SEED={seed} {mode} {shards:?}: no checkpoint of a two-shard run stored in-flight records"
        );
    }
    assert!(restores > 0, "SEED={seed} {mode} {shards:?}: no run restored a checkpoint, so nothing was tested");
    let e = engine(&data);
    let got = committed_output(&e.handle());
    block_on(e.shutdown()).unwrap();
    assert!(got == want, "SEED={seed} {mode} {shards:?}: {}", diff(&got, &want));
    format!(
        "{kills} kills, {restores} restores, {inflight} in-flight records stored by two-shard runs, {} results equal",
        got.len()
    )
}

/// The child: runs the job to its end on the data directory and checkpoints in `spec`.
fn child(spec: &str) {
    let mut parts = spec.split('|');
    let data = PathBuf::from(parts.next().unwrap());
    let checkpoints = PathBuf::from(parts.next().unwrap());
    let shards: usize = parts.next().unwrap().parse().unwrap();
    let mode = parts.next().unwrap().parse().unwrap();
    let e = engine(Path::new(&data));
    let config =
        JobConfig { checkpoints, shards, interval: Duration::from_millis(100), work: Duration::from_micros(300), mode };
    let running = spawn(&e.handle(), &config);
    let mut reported = 0;
    let mut report = |running: &sluice_engine::dataflow::RunningPipeline| {
        let inflight: u64 = running.checkpoints().iter().map(|c| c.inflight_records).sum();
        if inflight > reported {
            reported = inflight;
            eprintln!("{INFLIGHT}{inflight}");
        }
    };
    while !running.is_finished() {
        report(&running);
        std::thread::sleep(Duration::from_millis(5));
    }
    report(&running);
    running.join().unwrap();
    block_on(e.shutdown()).unwrap();
}
