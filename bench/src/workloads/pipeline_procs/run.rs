//! The parent of `sluice-bench pipeline --processes N`: the rounds, the instances' life
//! (start, `READY`, `go`, `DONE`, exit) and the report (see [the module](super)).

use std::{
    io::{BufRead, BufReader, Write},
    process::{Child, ChildStdin, Command, Stdio},
    sync::mpsc,
    time::{Duration, Instant, SystemTime},
};

use anyhow::{Context, bail, ensure};

use super::{
    CpuReport, DEFAULT_CHECKPOINT_INTERVAL_MS, ProcessesReport, TopicCost,
    broker::{self, Broker},
    child::{ChildEnd, ChildSpec},
};
use crate::harness::{LatencyRecorder, WakeProbe, WorkDir};
use crate::workloads::{
    kafka::cpu,
    pipeline::{PipelineArgs, PipelineReport, keep_latency, paced_job},
    pipeline_job::{Job, Tally},
    pipeline_sluice,
};

/// How long after `go` the paced schedule starts, so that every instance has it.
const PACED_START_DELAY: Duration = Duration::from_millis(100);

/// How long the instances may take to get ready, and a round to end.
const READY_TIMEOUT: Duration = Duration::from_secs(120);
const ROUND_TIMEOUT: Duration = Duration::from_secs(1800);

/// One N-process round.
struct Round {
    elapsed: Duration,
    startup: Duration,
    tally: Tally,
    latency: Option<LatencyRecorder>,
    topic: TopicCost,
    process_cpu: Vec<f64>,
    checkpoints: Vec<u64>,
    broker_cpu: Option<f64>,
    cpu_by_thread: std::collections::BTreeMap<String, f64>,
}

/// What every round shares.
struct Setup<'a> {
    args: &'a PipelineArgs,
    broker: Broker,
    processes: usize,
    shards: usize,
    exactly_once: bool,
    interval_ms: u64,
    dir: WorkDir,
}

/// Runs `--processes N` ([`super::check`] has passed), filling `report`.
///
/// # Errors
///
/// A broker or an instance that fails, or results that do not match the job.
pub fn run(args: &PipelineArgs, mut report: PipelineReport, processes: usize) -> anyhow::Result<PipelineReport> {
    let p = &args.processes;
    let load_average = crate::workloads::load_average();
    let broker = Broker::start(p.broker.unwrap_or(super::BrokerKind::Auto), p.bootstrap.as_deref())?;
    let setup = Setup {
        args,
        broker,
        processes,
        shards: report.shards,
        exactly_once: !p.at_least_once,
        interval_ms: p.checkpoint_interval_ms.unwrap_or(DEFAULT_CHECKPOINT_INTERVAL_MS),
        dir: WorkDir::fresh("sluice-bench-pipeline-processes", false)?,
    };
    let job = Job::new(report.events, None, args.out_of_orderness_ms, args.batch)?.with_pin(!args.no_pin);
    let mut rounds: Vec<Round> = Vec::new();
    let mut singles: Vec<(f64, Duration, Duration)> = Vec::new();
    for r in 0..args.rounds {
        let round = setup.round(&format!("r{r}"), &job, false)?;
        report.round_events_per_sec.push(rate(job.events, round.elapsed));
        rounds.push(round);
        let before = cpu(libc::RUSAGE_SELF);
        let single = pipeline_sluice::run(&job, setup.shards, false).context("the single-process job")?;
        singles.push((rate(job.events, single.elapsed), single.elapsed, cpu(libc::RUSAGE_SELF).saturating_sub(before)));
    }
    let best =
        (0..rounds.len()).max_by(|&a, &b| report.round_events_per_sec[a].total_cmp(&report.round_events_per_sec[b]));
    let best = &rounds[best.context("no round ran")?];
    let single = singles.iter().copied().max_by(|a, b| a.0.total_cmp(&b.0)).context("no round ran")?;
    report.rounds = args.rounds;
    report.events_per_sec = rate(job.events, best.elapsed);
    (report.results, report.results_sum) = (best.tally.results, best.tally.sum);
    let mut procs = setup.report(best, &job, single, load_average);
    procs.round_startup_seconds = rounds.iter().map(|r| r.startup.as_secs_f64()).collect();
    procs.round_single_process_events_per_sec = singles.iter().map(|s| s.0).collect();
    procs.ratio_to_single_process = report.events_per_sec / single.0.max(1e-9);
    if args.latency_seconds > 0.0 {
        setup.latency_phase(&mut report, &mut procs)?;
    } else {
        args.run.refuse_latency_files("--latency-seconds 0 skips the latency phase")?;
    }
    report.processes = Some(procs);
    Ok(report)
}

fn rate(events: u64, elapsed: Duration) -> f64 {
    events as f64 / elapsed.as_secs_f64().max(1e-9)
}

impl Setup<'_> {
    /// The report's `--processes` part from the best round and the best single-process run
    /// (rate, wall time, CPU).
    fn report(&self, best: &Round, job: &Job, single: (f64, Duration, Duration), load: Option<f64>) -> ProcessesReport {
        let wall = best.elapsed.as_secs_f64().max(1e-9);
        let topic = TopicCost {
            records_per_sec: best.topic.records as f64 / wall,
            bytes_per_sec: best.topic.bytes as f64 / wall,
            ..best.topic.clone()
        };
        let total: f64 = best.process_cpu.iter().sum::<f64>() + best.broker_cpu.unwrap_or(0.0);
        let per_event = |seconds: f64| seconds * 1e6 / job.events.max(1) as f64;
        ProcessesReport {
            processes: self.processes,
            broker: self.broker.describe(),
            bootstrap: self.broker.bootstrap(),
            guarantee: if self.exactly_once { "exactly_once" } else { "at_least_once" },
            checkpoint_interval_ms: self.exactly_once.then_some(self.interval_ms),
            repartition_partitions: (self.processes * self.shards) as u32,
            round_startup_seconds: Vec::new(),
            single_process_events_per_sec: single.0,
            round_single_process_events_per_sec: Vec::new(),
            ratio_to_single_process: 0.0,
            single_process_latency_us: None,
            repartition: topic,
            cpu: CpuReport {
                wall_seconds: wall,
                process_cpu_seconds: best.process_cpu.clone(),
                process_checkpoints: best.checkpoints.clone(),
                broker_cpu_seconds: best.broker_cpu,
                cpu_by_thread: best.cpu_by_thread.clone(),
                cpu_us_per_event: per_event(total),
                single_process_wall_seconds: single.1.as_secs_f64(),
                single_process_cpu_seconds: single.2.as_secs_f64(),
                single_process_cpu_us_per_event: per_event(single.2.as_secs_f64()),
            },
            load_average: load,
        }
    }

    /// Both sides open-loop at half the N-process best rate for `--latency-seconds`.
    fn latency_phase(&self, report: &mut PipelineReport, procs: &mut ProcessesReport) -> anyhow::Result<()> {
        let args = self.args;
        let rate = ((report.events_per_sec / 2.0) as u64).max(1);
        let events = ((rate as f64 * args.latency_seconds) as u64).max(1);
        let job = paced_job(args, rate, events)?;
        let round;
        (round, report.machine_wake_latency_us) =
            WakeProbe::around(!args.no_wake_probe, || self.round("lat", &job, true))?;
        round.tally.check(&job, &format!("{} processes (latency phase)", self.processes))?;
        if let Some(l) = &round.latency {
            keep_latency(args, report, l, rate)?;
        }
        report.latency_rate = Some(rate);
        let single = pipeline_sluice::run(&job, self.shards, true).context("the single-process latency phase")?;
        procs.single_process_latency_us = single.latency.as_ref().map(LatencyRecorder::summary);
        Ok(())
    }

    /// One N-process run of `job` (`paced`: on its schedule, recording result latencies)
    /// through a fresh repartition topic named after `name`.
    fn round(&self, name: &str, job: &Job, paced: bool) -> anyhow::Result<Round> {
        let bootstrap = self.broker.bootstrap();
        let id = format!("sluice-bench-{}-{name}", std::process::id());
        let topic = format!("{id}-through");
        let partitions = (self.processes * self.shards) as u32;
        broker::create_topic(&bootstrap, &topic, partitions)?;
        let started = Instant::now();
        let (tx, rx) = mpsc::channel();
        let mut children = Instances(Vec::new());
        for instance in 0..self.processes {
            let spec = ChildSpec {
                bootstrap: bootstrap.clone(),
                job_id: id.clone(),
                topic: topic.clone(),
                instance: instance as u32,
                instances: self.processes as u32,
                shards: self.shards,
                events: job.events,
                paced,
                ps_per_event: job.ps_per_event,
                warmup_ms: job.warmup.as_millis() as u64,
                out_of_orderness_ms: job.out_of_orderness_ms,
                batch: job.batch,
                pin: job.pin,
                exactly_once: self.exactly_once,
                checkpoint_interval_ms: self.interval_ms,
                checkpoint_dir: self.dir.path().join(format!("{name}-checkpoints-{instance}")),
            };
            children.0.push(spawn(instance, &spec, &tx)?);
        }
        drop(tx);
        let ready_cpu = children.wait_for(&rx, "READY", started + READY_TIMEOUT)?;
        let startup = started.elapsed();
        let broker_before = self.broker.cpu_seconds();
        let go = Instant::now();
        let epoch = SystemTime::now() + PACED_START_DELAY;
        let epoch_ns = epoch.duration_since(SystemTime::UNIX_EPOCH).context("the clock is before 1970")?.as_nanos();
        for c in &mut children.0 {
            writeln!(c.stdin, "go {epoch_ns}").context("telling an instance to go")?;
        }
        let done = children.wait_for(&rx, "DONE", go + ROUND_TIMEOUT)?;
        let ended = done.iter().map(|(at, _)| *at).max().context("no instance")?;
        let broker_cpu = broker_before.zip(self.broker.cpu_seconds()).map(|(a, b)| b - a);
        let mut round = Round {
            elapsed: if paced { ended.saturating_duration_since(go + PACED_START_DELAY) } else { ended - go },
            startup,
            tally: Tally::default(),
            latency: None,
            topic: TopicCost::default(),
            process_cpu: Vec::new(),
            checkpoints: Vec::new(),
            broker_cpu,
            cpu_by_thread: Default::default(),
        };
        for (_, line) in &done {
            let end: ChildEnd = serde_json::from_str(line).context("an instance's DONE line")?;
            round.tally.merge(&Tally { results: end.results, sum: end.sum, wrong: end.wrong });
            round.checkpoints.push(end.checkpoints);
            if let Some(hex) = &end.latency_hex {
                round.latency.get_or_insert_with(LatencyRecorder::new).merge_hex(hex)?;
            }
            for (thread, s) in end.cpu_by_thread {
                *round.cpu_by_thread.entry(thread).or_insert(0.0) += s;
            }
        }
        for (c, (_, ready)) in children.0.iter_mut().zip(&ready_cpu) {
            let total = c.reap()?;
            round.process_cpu.push(total - ready.parse::<f64>().unwrap_or(0.0));
        }
        if !paced {
            round.tally.check(job, &format!("{} processes", self.processes))?;
        }
        round.topic = broker::read_back(&bootstrap, &topic, partitions)?;
        broker::delete_topic(&bootstrap, &topic);
        Ok(round)
    }
}

/// One instance: its process and its stdin.
struct Instance {
    index: usize,
    child: Child,
    stdin: ChildStdin,
    reaped: bool,
    /// Its stdout has ended (it exited, or is about to).
    closed: bool,
}

impl Instance {
    /// Waits for it to exit; its whole CPU (user + system) in seconds, from `wait4`.
    fn reap(&mut self) -> anyhow::Result<f64> {
        let pid = libc::pid_t::try_from(self.child.id()).context("a pid")?;
        let mut status = 0;
        // SAFETY: `rusage` is a plain C struct, zeroed is a valid value; wait4 writes
        // `status` and `usage` for the child `pid`, which this process started and has not
        // reaped (`reaped` is set below, and `Drop` skips reaped children). Exercised by
        // every --processes run (bench/tests/pipeline_processes.rs).
        let (got, usage) = unsafe {
            let mut usage: libc::rusage = std::mem::zeroed();
            let got = libc::wait4(pid, &mut status, 0, &mut usage);
            (got, usage)
        };
        ensure!(got == pid, "waiting for instance {}: {}", self.index, std::io::Error::last_os_error());
        self.reaped = true;
        ensure!(
            libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
            "instance {} exited with status {status} (its stderr is above)",
            self.index
        );
        let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
        Ok(tv(usage.ru_utime) + tv(usage.ru_stime))
    }
}

/// The round's instances, killed and reaped when dropped unless they were reaped.
struct Instances(Vec<Instance>);

impl Drop for Instances {
    fn drop(&mut self) {
        for c in self.0.iter_mut().filter(|c| !c.reaped) {
            let _ = c.child.kill();
            let _ = c.child.wait();
        }
    }
}

impl Instances {
    /// Waits until every instance has printed `WORD rest`: each one's (arrival, rest), in
    /// instance order. Fails if one closes its stdout (exits) first or the deadline passes.
    fn wait_for(
        &mut self,
        rx: &mpsc::Receiver<Line>,
        word: &str,
        deadline: Instant,
    ) -> anyhow::Result<Vec<(Instant, String)>> {
        let mut got: Vec<Option<(Instant, String)>> = vec![None; self.0.len()];
        while got.iter().any(Option::is_none) {
            match rx.recv_timeout(Duration::from_millis(100)) {
                Ok((i, at, Some(line))) => {
                    if let Some(rest) = line.strip_prefix(word) {
                        got[i] = Some((at, rest.trim().to_string()));
                    }
                }
                // Its stdout ended: every line it printed came before this.
                Ok((i, _, None)) => self.0[i].closed = true,
                Err(mpsc::RecvTimeoutError::Timeout) => {}
                Err(mpsc::RecvTimeoutError::Disconnected) => bail!("every instance closed its stdout before {word}"),
            }
            if let Some(i) = (0..self.0.len()).find(|&i| self.0[i].closed && got[i].is_none()) {
                bail!("instance {i} exited before it said {word} (its stderr is above)");
            }
            ensure!(Instant::now() < deadline, "the instances did not all say {word} in time");
        }
        Ok(got.into_iter().flatten().collect())
    }
}

/// A line an instance printed, with its arrival; `None` once its stdout has ended.
type Line = (usize, Instant, Option<String>);

/// Starts instance `index` in the child mode; its stdout lines go to `tx`.
fn spawn(index: usize, spec: &ChildSpec, tx: &mpsc::Sender<Line>) -> anyhow::Result<Instance> {
    let exe = std::env::current_exe().context("finding this binary")?;
    let mut child = Command::new(exe)
        .args(["pipeline-child", "--spec", &serde_json::to_string(spec)?])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .context("starting an instance")?;
    let stdin = child.stdin.take().context("an instance's stdin")?;
    let stdout = child.stdout.take().context("an instance's stdout")?;
    let tx = tx.clone();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send((index, Instant::now(), Some(line))).is_err() {
                return;
            }
        }
        let _ = tx.send((index, Instant::now(), None));
    });
    Ok(Instance { index, child, stdin, reaped: false, closed: false })
}
