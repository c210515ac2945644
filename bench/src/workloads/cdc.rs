//! `sluice-bench cdc`: changes per second from PostgreSQL into a materialized table, the
//! commit-to-visible latency, and `pg_recvlogical` reading the same slot output as the
//! baseline, in one run.
//!
//! A PostgreSQL of the run's own starts in the work directory (`LocalPostgres`:
//! `wal_level=logical`, fsync off) with one table `bench (id bigint primary key, v bigint,
//! pad text)` and one publication of it. Then:
//!
//! 1. **setup**: sluice's pipeline (one shard: the PostgreSQL source, checkpoints every
//!    second, and a `for_each` that applies each change to a table in memory, key to row)
//!    starts, makes its slot and reads the (empty) snapshot, completes a checkpoint and
//!    stops. A second slot for `pg_recvlogical` is made at the same time, so both slots
//!    start before any change.
//! 2. **backlog**: both slots' restart points are moved up to their confirmed positions
//!    (`pg_replication_slot_advance` of each slot to its own `confirmed_flush_lsn`, the
//!    same for both: see `settle_slots`); `--changes` rows are inserted in transactions
//!    of `--txn-rows`, with nothing reading, then a `CHECKPOINT`; the WAL position after
//!    them is the end.
//! 3. **baseline**: `pg_recvlogical --start -E END` with pgoutput (protocol 1, the same
//!    publication) reads its slot to the end into a file: changes / its wall time.
//! 4. **sluice**: the pipeline restarts from its checkpoint and reads its slot; timed
//!    from the restart until the table (empty at each start) holds every row of the
//!    round (changes / that time). A table that does not hold exactly the round's rows
//!    fails the run. The pipeline then completes two more checkpoints and stops.
//!
//!    Steps 2 to 4 repeat `--rounds` times (new rows each round, both slots going on from
//!    where they were); the report has each round and the medians (rate and ratio).
//! 5. **latency**: with the pipeline running, `--latency-txns` single-row updates, each
//!    its own transaction, about `--rate` per second (psql sleeps between them); each
//!    change's latency runs from its commit time (the server's, in the transaction's
//!    Begin message) to the moment it was applied to the table (the same machine's clock).
//!
//! Both reads in 3-4 include connecting, both over the server's Unix socket. Each round
//! also has the CPU time (user plus system) of each reader's process and of the server's
//! processes while it read, reported per change: less sensitive to the machine's load
//! than the rates. The table is the benchmark's own (not
//! checkpointed), and a change is "visible" once applied to it in the pipeline: the change
//! topics `sluice cdc postgres` writes become visible to read_committed readers only at the
//! next checkpoint (`--checkpoint-interval-ms`), which this does not measure.

use std::{
    cell::RefCell,
    process::Stdio,
    rc::Rc,
    sync::{
        Arc, Mutex, PoisonError,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    time::{Duration, Instant, SystemTime, UNIX_EPOCH},
};

use anyhow::{Context, bail, ensure};
use clap::Args;
use rustc_hash::FxHashMap;
use serde::Serialize;
use sluice_engine::{
    connectors::postgres::{Change, Dsn, PostgresConfig, PostgresSource, Tuple, local::LocalPostgres},
    dataflow::{CheckpointConfig, Event, Pipeline, PipelineConfig, RunningPipeline, WatermarkStrategy},
};
use sluice_io::EventTime;

use super::{DirArgs, kafka::cpu};
use crate::harness::{LatencyRecorder, LatencySummary, Table};

/// The slots and the publication.
const SLOT: &str = "sluice_bench";
const BASELINE_SLOT: &str = "recvlogical_bench";
const PUBLICATION: &str = "sluice_bench";

/// The target: sluice at least this share of pg_recvlogical's rate.
const TARGET_RATIO: f64 = 0.8;

/// Options of `sluice-bench cdc`.
#[derive(Debug, Clone, Args)]
pub struct CdcArgs {
    /// Rows inserted for the throughput phases (one change each)
    #[arg(long, default_value_t = 200_000, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub changes: u64,
    /// Rows per transaction of the backlog
    #[arg(long, default_value_t = 1000, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub txn_rows: u64,
    /// Rounds of backlog, baseline and sluice (figures are the rounds' medians)
    #[arg(long, default_value_t = 3, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub rounds: u64,
    /// Single-row transactions of the latency phase
    #[arg(long, default_value_t = 2000, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub latency_txns: u64,
    /// Transactions per second of the latency phase (about: psql sleeps 1/rate between
    /// them, and each takes its own round trip)
    #[arg(long, default_value_t = 200, value_name = "R", value_parser = clap::value_parser!(u64).range(1..=10_000))]
    pub rate: u64,
    #[command(flatten)]
    pub dir: DirArgs,
    /// Also write the report as JSON to this file
    #[arg(long, value_name = "PATH")]
    pub json: Option<std::path::PathBuf>,
}

/// What a run measured.
#[derive(Debug, Serialize)]
pub struct CdcReport {
    /// `cdc`.
    pub workload: &'static str,
    /// Rows inserted for the throughput phases.
    pub changes: u64,
    /// Rows per backlog transaction.
    pub txn_rows: u64,
    /// pg_recvlogical's wall time to read a backlog (median over the rounds).
    pub recvlogical_seconds: f64,
    /// Its changes per second (from that median).
    pub recvlogical_changes_per_s: f64,
    /// sluice's wall time, from the restart to the last row in the table (median).
    pub sluice_seconds: f64,
    /// Its changes per second (from that median).
    pub sluice_changes_per_s: f64,
    /// The median of the rounds' ratios of sluice's rate to pg_recvlogical's (target at
    /// least 0.8).
    pub ratio: f64,
    /// CPU µs (user plus system) per change, medians over the rounds: pg_recvlogical's
    /// process, the server while it read, sluice's (this process: the pipeline and the
    /// replication thread), the server while sluice read. Less sensitive to the machine's
    /// load than the rates.
    pub cpu_us_per_change: CdcCpu,
    /// Every round.
    pub rounds: Vec<CdcRound>,
    /// Single-row transactions of the latency phase, and the rate asked.
    pub latency_txns: u64,
    /// Asked transactions per second.
    pub rate: u64,
    /// Commit-to-visible latency, µs.
    pub latency_us: LatencySummary,
}

/// CPU µs per change (medians over the rounds).
#[derive(Debug, Serialize)]
pub struct CdcCpu {
    /// The pg_recvlogical process.
    pub recvlogical: f64,
    /// The server while pg_recvlogical read.
    pub recvlogical_server: f64,
    /// sluice (this process).
    pub sluice: f64,
    /// The server while sluice read.
    pub sluice_server: f64,
}

/// What the pipeline's sink shares with the run.
#[derive(Default)]
struct Seen {
    /// Changes applied since the pipeline started.
    applied: AtomicU64,
    /// Rows in the table.
    rows: AtomicU64,
    /// Record latencies.
    measure: AtomicBool,
    latency: Mutex<LatencyRecorder>,
}

fn now_us() -> i64 {
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
    i64::try_from(now.as_micros()).unwrap_or(i64::MAX)
}

/// Starts the pipeline: the source into a table in memory.
fn start(source: &PostgresSource, checkpoints: &std::path::Path, seen: &Arc<Seen>) -> anyhow::Result<RunningPipeline> {
    let (source, seen) = (source.clone(), seen.clone());
    let pipeline = Pipeline::new(PipelineConfig::with_shards(1))
        .checkpointing(CheckpointConfig::new(checkpoints).interval(Duration::from_secs(1)));
    Ok(pipeline.spawn(move |scope| {
        let table: Rc<RefCell<FxHashMap<String, Tuple>>> = Rc::default();
        let seen = seen.clone();
        let time = |c: &Change| EventTime::from_millis(c.commit_us / 1000);
        scope.source(source.reader(scope.shard()), WatermarkStrategy::monotonous(time)).for_each(
            move |e: Event<Change>| {
                let change = e.value;
                let key = change.key_json().unwrap_or_default();
                let mut table = table.borrow_mut();
                match change.after {
                    Some(after) => {
                        table.insert(key, after);
                    }
                    None => {
                        table.remove(&key);
                    }
                }
                if seen.measure.load(Ordering::Relaxed) {
                    let latency = u64::try_from(now_us() - change.commit_us).unwrap_or(0);
                    seen.latency.lock().unwrap_or_else(PoisonError::into_inner).record(Duration::from_micros(latency));
                }
                seen.rows.store(table.len() as u64, Ordering::Relaxed);
                seen.applied.fetch_add(1, Ordering::Release);
            },
        );
    })?)
}

/// Waits (at most ten minutes) until `done` holds; fails if the pipeline ends first.
fn wait(running: &RunningPipeline, source: &PostgresSource, what: &str, done: impl Fn() -> bool) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(600);
    while !done() {
        if running.is_finished() {
            bail!("the pipeline ended while waiting for {what}: {:?}", source.take_error());
        }
        ensure!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(1));
    }
    Ok(())
}

/// Settles a running pipeline: two more checkpoints completed, the second begun after
/// everything it had applied, so a restart resumes past it.
fn settle(running: &RunningPipeline) -> anyhow::Result<()> {
    let mut last = running.checkpoints().last().map_or(sluice_io::CheckpointId(0), |c| c.id);
    for _ in 0..2 {
        last = running.wait_for_checkpoint(last, Duration::from_secs(60)).context("no checkpoint")?.id;
    }
    Ok(())
}

/// One round's figures.
#[derive(Debug, Clone, Serialize)]
pub struct CdcRound {
    /// pg_recvlogical's wall time to read the backlog, seconds.
    pub recvlogical_seconds: f64,
    /// sluice's, from its restart to the last row in the table.
    pub sluice_seconds: f64,
    /// sluice's rate over pg_recvlogical's.
    pub ratio: f64,
    /// CPU time (user plus system) of the pg_recvlogical process, seconds.
    pub recvlogical_cpu_seconds: f64,
    /// The server's CPU time while pg_recvlogical read (its walsender, mostly).
    pub recvlogical_server_cpu_seconds: f64,
    /// CPU time of this process (sluice's pipeline and replication thread) from the
    /// restart to the last row in the table.
    pub sluice_cpu_seconds: f64,
    /// The server's CPU time in that window.
    pub sluice_server_cpu_seconds: f64,
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values.get(values.len() / 2).copied().unwrap_or(0.0)
}

/// Steps 2 to 4 for round `round`: the backlog (ids after the earlier rounds'), the
/// baseline, and sluice from its checkpoint; returns the round and the running pipeline.
fn round(
    args: &CdcArgs,
    round: u64,
    pg: &LocalPostgres,
    source: &PostgresSource,
    checkpoints: &std::path::Path,
) -> anyhow::Result<(CdcRound, RunningPipeline, Arc<Seen>)> {
    settle_slots(pg)?;
    let mut script = String::new();
    let (mut next, end) = (round * args.changes + 1, (round + 1) * args.changes);
    while next <= end {
        let last = (next + args.txn_rows - 1).min(end);
        script.push_str(&format!(
            "INSERT INTO bench SELECT g, g, repeat('x', 32) FROM generate_series({next}, {last}) g;\n"
        ));
        next = last + 1;
    }
    // A checkpoint logs the running transactions (none): the point both slots can
    // restart decoding from once their readers have confirmed past it.
    script.push_str("CHECKPOINT;\n");
    pg.psql(&script)?;
    let end = pg.psql("SELECT pg_current_wal_insert_lsn();")?.trim().to_owned();
    let (client, server) = (cpu(libc::RUSAGE_CHILDREN), server_cpu(pg)?);
    let recvlogical_seconds = baseline(pg, &end)?;
    // Its walsender ended (and was reaped: its CPU time is the postmaster's children's).
    wait_inactive(pg)?;
    let recvlogical_cpu_seconds = (cpu(libc::RUSAGE_CHILDREN).saturating_sub(client)).as_secs_f64();
    let recvlogical_server_cpu_seconds = server_cpu(pg)? - server;
    eprintln!("round {round}: end {end}, slots {}", slots(pg)?);
    let seen = Arc::new(Seen::default());
    let (client, server) = (cpu(libc::RUSAGE_SELF), server_cpu(pg)?);
    let started = Instant::now();
    let running = start(source, checkpoints, &seen)?;
    wait(&running, source, "the backlog", || seen.applied.load(Ordering::Acquire) >= args.changes)?;
    let sluice_seconds = started.elapsed().as_secs_f64();
    let sluice_cpu_seconds = (cpu(libc::RUSAGE_SELF).saturating_sub(client)).as_secs_f64();
    let sluice_server_cpu_seconds = server_cpu(pg)? - server;
    let rows = seen.rows.load(Ordering::Acquire);
    ensure!(rows == args.changes, "round {round}: the table holds {rows} rows, not {}", args.changes);
    let ratio = recvlogical_seconds / sluice_seconds;
    let figures = CdcRound {
        recvlogical_seconds,
        sluice_seconds,
        ratio,
        recvlogical_cpu_seconds,
        recvlogical_server_cpu_seconds,
        sluice_cpu_seconds,
        sluice_server_cpu_seconds,
    };
    Ok((figures, running, seen))
}

/// Moves both slots' restart positions (where the server starts decoding for a reader)
/// up to the last running-transactions record their readers have confirmed past, the
/// same way for both: each slot is advanced to its own confirmed position (nothing it
/// would send is skipped). The server moves a slot's restart position only when its
/// decoding meets such a record (logged every 15 s of activity and at checkpoints) and
/// the reader then confirms past it; in rounds of a few seconds that rarely happens, so
/// without this each round decodes the earlier rounds' log again before its own, for
/// both readers, and the rounds measure PostgreSQL's decoding of a growing log.
fn settle_slots(pg: &LocalPostgres) -> anyhow::Result<()> {
    wait_inactive(pg)?;
    pg.psql("SELECT pg_replication_slot_advance(slot_name, confirmed_flush_lsn) FROM pg_replication_slots;")?;
    Ok(())
}

/// CPU time (user plus system) the server's processes have used so far, seconds: the
/// postmaster's own and its ended children's (reaped, so in its `cutime`/`cstime`), plus
/// every live child's, from `/proc`. Clock ticks: 10 ms resolution per process.
fn server_cpu(pg: &LocalPostgres) -> anyhow::Result<f64> {
    let pid_file = pg.dir.join("data/postmaster.pid");
    let text = std::fs::read_to_string(&pid_file).with_context(|| format!("reading {}", pid_file.display()))?;
    let postmaster: u32 = text.lines().next().unwrap_or_default().trim().parse().context("the postmaster's pid")?;
    // Fields after the command's closing parenthesis: state (3), ppid (4), ..., utime (14),
    // stime (15), cutime (16), cstime (17), counted from 1 with the pid.
    let fields = |stat: &str| -> Vec<u64> {
        stat.rsplit_once(')')
            .map(|(_, rest)| rest)
            .unwrap_or_default()
            .split_whitespace()
            .map(|f| f.parse().unwrap_or(0))
            .collect()
    };
    let mut ticks = 0;
    for entry in std::fs::read_dir("/proc")?.flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else { continue };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else { continue };
        let f = fields(&stat);
        if f.len() < 15 {
            continue;
        }
        if pid == postmaster {
            ticks += f[11] + f[12] + f[13] + f[14];
        } else if f[1] == u64::from(postmaster) {
            ticks += f[11] + f[12];
        }
    }
    // SAFETY: sysconf only reads a configuration value.
    let per_second = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1);
    Ok(ticks as f64 / per_second as f64)
}

/// Waits (at most a minute) until no slot is in use: the readers' walsenders have ended.
fn wait_inactive(pg: &LocalPostgres) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(60);
    while pg.psql("SELECT count(*) FROM pg_replication_slots WHERE active;")?.trim() != "0" {
        ensure!(Instant::now() < deadline, "a replication slot is still in use 60 s after its reader ended");
        std::thread::sleep(Duration::from_millis(10));
    }
    Ok(())
}

/// Both slots' restart and confirmed positions, for the log.
fn slots(pg: &LocalPostgres) -> anyhow::Result<String> {
    let rows = pg.psql(
        "SELECT slot_name || ' restart ' || restart_lsn || ' confirmed ' || confirmed_flush_lsn \
         FROM pg_replication_slots ORDER BY slot_name;",
    )?;
    Ok(rows.lines().map(str::trim).collect::<Vec<_>>().join("; "))
}

/// Runs the workload.
///
/// # Errors
///
/// PostgreSQL not starting, a phase failing, or a table that does not hold the rows.
pub fn run(args: &CdcArgs) -> anyhow::Result<CdcReport> {
    let work = args.dir.work_dir("cdc")?;
    let pg = LocalPostgres::start(&work.path().join("pg")).context("starting PostgreSQL")?;
    pg.psql(&format!(
        "CREATE TABLE bench (id bigint PRIMARY KEY, v bigint NOT NULL, pad text NOT NULL);
         CREATE PUBLICATION {PUBLICATION} FOR TABLE bench;
         SELECT 1 FROM pg_create_logical_replication_slot('{BASELINE_SLOT}', 'pgoutput');"
    ))?;
    let config = PostgresConfig {
        // The server's Unix socket, as pg_recvlogical uses (the same transport for both).
        dsn: Dsn::parse(&format!("host={} port={} user=postgres dbname=postgres", pg.dir.display(), pg.port))?,
        tables: vec![("public".into(), "bench".into())],
        slot: SLOT.into(),
        publication: PUBLICATION.into(),
    };
    let source = PostgresSource::new(config);
    let checkpoints = work.path().join("checkpoints");
    // 1. The slot, and a checkpoint past the snapshot: streaming means the snapshot has
    // been emitted.
    let seen = Arc::new(Seen::default());
    let mut running = start(&source, &checkpoints, &seen)?;
    let streaming = || {
        pg.psql("SELECT count(*) FROM pg_stat_replication WHERE application_name = 'sluice' AND state = 'streaming';")
    };
    wait(&running, &source, "streaming", || streaming().is_ok_and(|n| n.trim() == "1"))?;
    let mut rounds = Vec::new();
    let mut seen = seen;
    for r in 0..args.rounds {
        settle(&running)?;
        running.stop(false);
        running.join()?;
        let (figures, next, next_seen) = round(args, r, &pg, &source, &checkpoints)?;
        eprintln!("round {r}: {figures:?}");
        (running, seen) = (next, next_seen);
        rounds.push(figures);
    }
    // 5. Latency.
    seen.measure.store(true, Ordering::Release);
    let before = seen.applied.load(Ordering::Acquire);
    let pause = 1.0 / args.rate as f64;
    let updates: String = (0..args.latency_txns)
        .map(|i| {
            format!("UPDATE bench SET v = v + 1 WHERE id = {};\nSELECT pg_sleep({pause});\n", i % args.changes + 1)
        })
        .collect();
    pg.psql(&updates)?;
    wait(&running, &source, "the updates", || seen.applied.load(Ordering::Acquire) >= before + args.latency_txns)?;
    running.stop(false);
    running.join()?;
    let latency_us = seen.latency.lock().unwrap_or_else(PoisonError::into_inner).summary();
    let per_change = |rounds: &[CdcRound], seconds: fn(&CdcRound) -> f64| {
        median(rounds.iter().map(seconds).collect()) * 1e6 / args.changes as f64
    };
    let recvlogical_seconds = median(rounds.iter().map(|r| r.recvlogical_seconds).collect());
    let sluice_seconds = median(rounds.iter().map(|r| r.sluice_seconds).collect());
    Ok(CdcReport {
        workload: "cdc",
        changes: args.changes,
        txn_rows: args.txn_rows,
        recvlogical_seconds,
        recvlogical_changes_per_s: args.changes as f64 / recvlogical_seconds,
        sluice_seconds,
        sluice_changes_per_s: args.changes as f64 / sluice_seconds,
        ratio: median(rounds.iter().map(|r| r.ratio).collect()),
        cpu_us_per_change: CdcCpu {
            recvlogical: per_change(&rounds, |r| r.recvlogical_cpu_seconds),
            recvlogical_server: per_change(&rounds, |r| r.recvlogical_server_cpu_seconds),
            sluice: per_change(&rounds, |r| r.sluice_cpu_seconds),
            sluice_server: per_change(&rounds, |r| r.sluice_server_cpu_seconds),
        },
        rounds,
        latency_txns: args.latency_txns,
        rate: args.rate,
        latency_us,
    })
}

/// pg_recvlogical reading its slot from the start to `end`: its wall time, seconds.
fn baseline(pg: &LocalPostgres, end: &str) -> anyhow::Result<f64> {
    let out = pg.dir.join("recvlogical.out");
    let started = Instant::now();
    let status = pg
        .command("pg_recvlogical")
        .args(["-d", "postgres", "-U", "postgres", "-h"])
        .arg(&pg.dir)
        .args(["-p", &pg.port.to_string(), "--slot", BASELINE_SLOT, "--start", "--no-loop", "-E", end])
        .args(["-o", "proto_version=1", "-o", &format!("publication_names={PUBLICATION}"), "-f"])
        .arg(&out)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .context("running pg_recvlogical")?;
    let seconds = started.elapsed().as_secs_f64();
    ensure!(status.status.success(), "pg_recvlogical: {}", String::from_utf8_lossy(&status.stderr));
    let bytes = std::fs::metadata(&out).map(|m| m.len()).unwrap_or(0);
    ensure!(bytes > 0, "pg_recvlogical wrote nothing into {}", out.display());
    Ok(seconds)
}

impl CdcReport {
    /// The report as a table.
    #[must_use]
    pub fn table(&self) -> Table {
        let mut table = Table::titled(format!(
            "cdc: {} inserted rows in transactions of {}, then {} single-row updates at about {}/s",
            self.changes, self.txn_rows, self.latency_txns, self.rate
        ));
        table.row("pg_recvlogical", format!("{:.0}", self.recvlogical_changes_per_s), "changes/s (baseline)");
        table.row("sluice into a table", format!("{:.0}", self.sluice_changes_per_s), "changes/s");
        let each: Vec<String> = self.rounds.iter().map(|r| format!("{:.2}", r.ratio)).collect();
        table.row(
            "ratio",
            format!("{:.2}", self.ratio),
            format!("median of {} (target at least {TARGET_RATIO})", each.join(", ")),
        );
        let cpu = &self.cpu_us_per_change;
        table.row(
            "CPU pg_recvlogical",
            format!("{:.2}", cpu.recvlogical),
            format!("us/change (server meanwhile {:.2})", cpu.recvlogical_server),
        );
        table.row(
            "CPU sluice",
            format!("{:.2}", cpu.sluice),
            format!("us/change (server meanwhile {:.2})", cpu.sluice_server),
        );
        table.latency_rows("commit-to-visible", &self.latency_us);
        table
    }
}
