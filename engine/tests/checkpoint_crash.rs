//! Crash equivalence: a child process runs the checkpointed job (tumbling windows, sliding
//! and session windows with a custom aggregate, a keyed process function with timers, a
//! window join and an interval join, and a session window whose late records update
//! sessions that fired, from bounded topics into an exactly-once topic sink); the parent kills it with SIGKILL
//! at random moments, restarts it each time, and finally reads the output topic
//! `read_committed`: it must equal the reference output exactly, no duplicate and no loss.
//!
//! Three kinds of scenario, each in aligned and unaligned checkpoint mode:
//!
//! - **steady**: checkpoints every 100 ms, 3 kills 150-750 ms after each start, at 1 and 2
//!   shards and with the shard count changing at every restart (2 -> 1 -> 2 ...). In
//!   unaligned mode at 2 shards, the scenario's checkpoints must have stored in-flight
//!   records (every run reports its running total as checkpoints complete, killed runs
//!   included), or the mode was not exercised. Whether one checkpoint catches records in
//!   flight depends on timing; `checkpoint.rs` has the deterministic test of that path.
//! - **rapid**: checkpoints every 50 ms, 15 kills 100-500 ms after each start (so kills
//!   land during start-up, restore, transaction recovery and commit), rescaling at every
//!   restart, for several seeds (`RAPID_SEEDS`, default 6).
//! - **durable**: the output topic is written with `fsync interval:60000`, so an append is
//!   acknowledged while its bytes are still in the process; the child aborts itself right
//!   after its third completed checkpoint. A checkpoint may only complete once the output
//!   it covers can no longer be lost, so the restarted run must still produce everything.
//!   (This is the case that lost session-window results: a window's firing was in a
//!   completed checkpoint and its results were in a write buffer when the process died.)
//!
//! Every scenario prints its kill schedule as `SCHEDULE=shards:ms,...` (`-` for the run
//! left to finish). `SEED=<n>` replays one seed; with `SCHEDULE=...` (and `MODE=aligned` or
//! `unaligned`) it replays that schedule exactly, as far as timing allows.
//! `ONLY=durable,steady,rapid` picks the kinds of scenario to run.
//!
//! This test has its own `main` (`harness = false`): the child is this same binary, started
//! with `SLUICE_CRASH_CHILD` set.

#[path = "checkpoint_job/mod.rs"]
mod checkpoint_job;
mod common;

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use checkpoint_job::{
    JobConfig, committed_output, diff, engine, expected, input, produce_with, spawn, uncommitted_output,
};
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
    let started = Instant::now();
    let modes: Vec<CheckpointMode> = match std::env::var("MODE") {
        Ok(m) => vec![m.parse().expect("MODE is aligned or unaligned")],
        Err(_) => vec![CheckpointMode::Aligned, CheckpointMode::Unaligned],
    };
    if let Ok(schedule) = std::env::var("SCHEDULE") {
        let seed: u64 = std::env::var("SEED").expect("SCHEDULE needs its SEED").parse().expect("SEED is a number");
        let runs = parse_schedule(&schedule);
        for &mode in &modes {
            let report = scenario(seed, mode, Kind::Replay(runs.clone()));
            println!("SEED={seed} MODE={mode} SCHEDULE={schedule}: {report}");
        }
        return;
    }
    let (steady, rapid): (Vec<u64>, Vec<u64>) = match std::env::var("SEED") {
        Ok(s) => {
            let seed = s.parse().expect("SEED is a number");
            (vec![seed], vec![seed])
        }
        Err(_) => {
            let n = std::env::var("RAPID_SEEDS").map_or(6, |n| n.parse().expect("RAPID_SEEDS is a number"));
            (vec![1, 2], (100..100 + n).collect())
        }
    };
    let only = std::env::var("ONLY").ok();
    let runs = |kind: &str| only.as_deref().is_none_or(|o| o.split(',').any(|k| k == kind));
    let steady = if runs("steady") { steady } else { Vec::new() };
    let rapid = if runs("rapid") { rapid } else { Vec::new() };
    for &mode in &modes {
        if runs("durable") {
            let t = Instant::now();
            let report = scenario(7, mode, Kind::Durable);
            println!("SEED=7 MODE={mode} durable: {report} ({:.1} s)", t.elapsed().as_secs_f64());
        }
        for &seed in &steady {
            for shards in [Shards::Fixed(1), Shards::Fixed(2), Shards::Alternating] {
                let t = Instant::now();
                let report = scenario(seed, mode, Kind::Steady(shards));
                println!("SEED={seed} MODE={mode} steady {shards:?}: {report} ({:.1} s)", t.elapsed().as_secs_f64());
            }
        }
        for &seed in &rapid {
            let t = Instant::now();
            let report = scenario(seed, mode, Kind::Rapid);
            println!("SEED={seed} MODE={mode} rapid: {report} ({:.1} s)", t.elapsed().as_secs_f64());
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

#[derive(Debug, Clone)]
enum Kind {
    Steady(Shards),
    Rapid,
    Durable,
    /// A recorded schedule: each run's shard count and the ms after which it is killed
    /// (`None`: left to finish).
    Replay(Vec<(usize, Option<u64>)>),
}

impl Kind {
    /// Run `run`'s shard count, and when to kill it (`None`: let it finish), drawing
    /// from `rng`; `kills` so far.
    fn plan(&self, run: usize, kills: usize, rng: &mut common::Rng) -> (usize, Option<u64>) {
        let alternating = 2 - run % 2;
        match self {
            Kind::Steady(shards) => {
                let n = match shards {
                    Shards::Fixed(n) => *n,
                    Shards::Alternating => alternating,
                };
                (n, (kills < 3).then(|| 150 + rng.below(600)))
            }
            Kind::Rapid => (alternating, (kills < 15).then(|| 100 + rng.below(400))),
            Kind::Durable => (1, None),
            Kind::Replay(runs) => runs.get(run).copied().unwrap_or((alternating, None)),
        }
    }

    /// A name for the scenario's directory.
    fn name(&self) -> String {
        match self {
            Kind::Steady(shards) => format!("steady-{shards:?}"),
            Kind::Rapid => "rapid".into(),
            Kind::Durable => "durable".into(),
            Kind::Replay(_) => "replay".into(),
        }
    }

    fn interval(&self) -> Duration {
        match self {
            Kind::Rapid | Kind::Replay(_) => Duration::from_millis(50),
            _ => Duration::from_millis(100),
        }
    }
}

fn parse_schedule(s: &str) -> Vec<(usize, Option<u64>)> {
    s.split(',')
        .map(|run| {
            let (n, ms) = run.split_once(':').expect("SCHEDULE runs are shards:ms or shards:-");
            (n.parse().expect("a shard count"), (ms != "-").then(|| ms.parse().expect("a kill delay in ms")))
        })
        .collect()
}

/// Runs the job in a child process until it finishes, killing it as `kind` says first;
/// checks the committed output. Returns what happened, for the log.
fn scenario(seed: u64, mode: CheckpointMode, kind: Kind) -> String {
    let dir = common::data_dir("checkpoint_crash", &format!("{seed}-{mode}-{}", kind.name()));
    let data = dir.join("data");
    // The rapid scenario's job is longer and has more keys (more sessions ending all the
    // time), so that fifteen short runs do not finish it.
    let records =
        if matches!(kind, Kind::Rapid | Kind::Replay(_)) { input(seed, 20_000, 200) } else { input(seed, 8000, 40) };
    let want = expected(&records);
    let out_fsync = if matches!(kind, Kind::Durable) { "interval:60000" } else { "interval:5" };
    {
        let e = engine(&data);
        produce_with(&e.handle(), &records, out_fsync);
        block_on(e.shutdown()).unwrap();
    }
    let mut rng = common::Rng::seeded(seed * 31 + 7);
    let mut schedule: Vec<String> = Vec::new();
    // Kills that land before the first checkpoint completed restore nothing: they are
    // made (and recorded in the schedule) but not counted, so that a slow machine still
    // gets its restores.
    let (mut kills, mut early_kills, mut aborts, mut restores, mut inflight) = (0, 0, 0, 0, 0);
    for run in 0.. {
        let (n, kill_after) = kind.plan(run, kills, &mut rng);
        let shown =
            |schedule: &[String]| format!("SEED={seed} MODE={mode} {} SCHEDULE={}", kind.name(), schedule.join(","));
        assert!(run < 60, "{}: the job never finished", shown(&schedule));
        // The durable scenario's first run aborts itself after its third checkpoint.
        let abort_after = if matches!(kind, Kind::Durable) && run == 0 { 3 } else { 0 };
        let spec = format!(
            "{}|{}|{n}|{mode}|{}|{abort_after}",
            data.display(),
            dir.join("checkpoints").display(),
            kind.interval().as_millis()
        );
        let mut child = Command::new(std::env::current_exe().unwrap())
            .env(CHILD, spec)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("the child starts");
        let status = match kill_after {
            Some(ms) => {
                let deadline = Instant::now() + Duration::from_millis(ms);
                loop {
                    if let Some(status) = child.try_wait().unwrap() {
                        break Some(status);
                    }
                    if Instant::now() >= deadline {
                        child.kill().unwrap();
                        child.wait().unwrap();
                        if has_completed_checkpoint(&dir.join("checkpoints")) {
                            kills += 1;
                        } else {
                            early_kills += 1;
                        }
                        break None;
                    }
                    std::thread::sleep(Duration::from_millis(1));
                }
            }
            None => Some(child.wait().unwrap()),
        };
        // A run killed records its delay; one that finished (or aborted itself) first, `-`.
        schedule.push(match (status.is_none(), kill_after) {
            (true, Some(ms)) => format!("{n}:{ms}"),
            _ => format!("{n}:-"),
        });
        let mut log = String::new();
        child.stderr.take().unwrap().read_to_string(&mut log).unwrap();
        restores += log.matches("restoring checkpoint").count();
        let stored = log.lines().filter_map(|l| l.strip_prefix(INFLIGHT)).map(|n| n.parse::<u64>().unwrap()).max();
        if n == 2 {
            inflight += stored.unwrap_or(0);
        }
        match status {
            Some(status) if abort_after > 0 => {
                assert!(!status.success(), "{}: the child was to abort itself:\n{log}", shown(&schedule));
                aborts += 1;
            }
            Some(status) => {
                assert!(status.success(), "{}: the child failed ({status}):\n{log}", shown(&schedule));
                break;
            }
            None => {}
        }
    }
    let shown = format!("SEED={seed} MODE={mode} {} SCHEDULE={}", kind.name(), schedule.join(","));
    if mode == CheckpointMode::Unaligned && matches!(kind, Kind::Steady(Shards::Fixed(2) | Shards::Alternating)) {
        assert!(inflight > 0, "{shown}: no checkpoint of a two-shard run stored in-flight records");
    }
    assert!(restores > 0, "{shown}: no run restored a checkpoint, so nothing was tested");
    let e = engine(&data);
    let got = committed_output(&e.handle());
    if got != want {
        // Tell lost results (never written) from results written and then aborted.
        let written = uncommitted_output(&e.handle());
        let never: Vec<&String> = want.iter().filter(|w| written.binary_search(w).is_err()).take(20).collect();
        block_on(e.shutdown()).unwrap();
        panic!("{shown}: {}\nwanted and never written at all (first 20): {never:?}", diff(&got, &want));
    }
    block_on(e.shutdown()).unwrap();
    format!(
        "SCHEDULE={} {kills} kills (and {early_kills} before any checkpoint), {aborts} aborts, {restores} restores, {inflight} in-flight records stored by two-shard runs, {} results equal",
        schedule.join(","),
        got.len()
    )
}

/// Whether the checkpoint directory holds a completed checkpoint (one with a manifest).
fn has_completed_checkpoint(dir: &Path) -> bool {
    std::fs::read_dir(dir).is_ok_and(|entries| entries.flatten().any(|e| e.path().join("MANIFEST").exists()))
}

/// The child: runs the job to its end on the data directory and checkpoints in `spec`;
/// with a non-zero `abort_after`, aborts the process (no destructor, no flush) as soon as
/// that many checkpoints have completed.
fn child(spec: &str) {
    let mut parts = spec.split('|');
    let data = PathBuf::from(parts.next().unwrap());
    let checkpoints = PathBuf::from(parts.next().unwrap());
    let shards: usize = parts.next().unwrap().parse().unwrap();
    let mode = parts.next().unwrap().parse().unwrap();
    let interval = Duration::from_millis(parts.next().unwrap().parse().unwrap());
    let abort_after: usize = parts.next().unwrap().parse().unwrap();
    let e = engine(Path::new(&data));
    let config = JobConfig { checkpoints, shards, interval, work: Duration::from_micros(300), mode };
    let running = spawn(&e.handle(), &config);
    let mut reported = 0;
    let mut report = |running: &sluice_engine::dataflow::RunningPipeline| {
        let inflight: u64 = running.checkpoints().iter().map(|c| c.inflight_records).sum();
        if inflight > reported {
            reported = inflight;
            eprintln!("{INFLIGHT}{inflight}");
        }
    };
    if abort_after > 0 {
        let mut last = sluice_io::CheckpointId(0);
        for _ in 0..abort_after {
            let Some(stats) = running.wait_for_checkpoint(last, Duration::from_secs(30)) else {
                eprintln!("the job ended before checkpoint {} completed", last.next());
                std::process::exit(3);
            };
            last = stats.id;
        }
        std::process::abort();
    }
    while !running.is_finished() {
        report(&running);
        std::thread::sleep(Duration::from_millis(5));
    }
    report(&running);
    running.join().unwrap();
    block_on(e.shutdown()).unwrap();
}
