//! The job the multi-process tests run, shared by `engine/tests/multi_process.rs` and the
//! `sluice` package's `tests/serve_job.rs` (which include this file): the input, the
//! single-process reference, the output reader and the checks.

use std::{
    collections::{BTreeMap, BTreeSet},
    io::{BufRead, BufReader},
    process::{Child, Command, Stdio},
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, Ordering},
    },
    task::{Context, Poll},
    time::{Duration, Instant},
};

use rdkafka::{
    Message, Offset, TopicPartitionList,
    consumer::{BaseConsumer, Consumer},
};
use sluice_engine::dataflow::{Generator, Pipeline, PipelineConfig, Source, WatermarkStrategy, Windows};
use sluice_io::EventTime;

pub const EVENTS: u64 = 6_000;
pub const KEYS: u64 = 24;
/// The repartition topic's partitions.
pub const PARTITIONS: u32 = 6;

/// A result line: key, window start, count.
pub type Count = (u64, i64, u64);

pub fn event(i: u64) -> (u64, u64) {
    ((i * 7919) % KEYS, i)
}

pub fn time(r: &(u64, u64)) -> EventTime {
    EventTime::from_millis(r.1 as i64 * 10)
}

/// The job in one process, with a plain `key_by`: the reference.
pub fn single_process() -> Vec<Count> {
    let out: Arc<Mutex<Vec<Count>>> = Arc::default();
    let sink = out.clone();
    Pipeline::new(PipelineConfig::with_shards(1))
        .run(move |scope| {
            let sink = sink.clone();
            scope
                .source(
                    Generator::new(scope.shard(), scope.shards(), EVENTS, event),
                    WatermarkStrategy::bounded_out_of_orderness(Duration::from_secs(1), time),
                )
                .key_by(|r: &(u64, u64)| r.0)
                .window(Windows::tumbling(Duration::from_secs(1)))
                .count()
                .for_each(move |e| sink.lock().unwrap().push((e.value.key, e.value.window.start.0, e.value.value)));
        })
        .expect("the single-process job runs");
    let mut out = std::mem::take(&mut *out.lock().unwrap());
    out.sort_unstable();
    out
}

/// The job's processes, killed (SIGKILL) and reaped when dropped, also when an assertion
/// fails.
pub struct Children(pub Vec<Child>);

impl Drop for Children {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Fails with the differences unless `got`, sorted, is `expected`.
pub fn compare(output: &Output, expected: &[Count]) {
    let mut got = output.counts.clone();
    got.sort_unstable();
    if got != expected {
        let (g, e): (BTreeSet<Count>, BTreeSet<Count>) =
            (got.iter().copied().collect(), expected.iter().copied().collect());
        let missing: Vec<&Count> = e.difference(&g).take(10).collect();
        let extra: Vec<(&Count, Option<&u32>)> = g.difference(&e).take(10).map(|c| (c, output.by.get(c))).collect();
        let mut seen = BTreeMap::<Count, usize>::new();
        got.iter().for_each(|c| *seen.entry(*c).or_default() += 1);
        let twice: Vec<&Count> = seen.iter().filter(|(_, n)| **n > 1).map(|(c, _)| c).take(10).collect();
        panic!(
            "the committed {} counts differ from the single process's {}; missing (first 10): {missing:?}; not \
             expected (first 10, with the instance that wrote it): {extra:?}; more than once (first 10): {twice:?}",
            got.len(),
            expected.len()
        );
    }
}

/// The output topic, read `read_committed` from its start.
pub struct Output {
    consumer: BaseConsumer,
    pub counts: Vec<Count>,
    /// The instance that wrote each count.
    by: BTreeMap<Count, u32>,
}

impl Output {
    /// Topic `topic`'s partition 0, read `read_committed` from its start.
    pub fn of(bootstrap: &str, topic: &str) -> Output {
        let consumer: BaseConsumer = rdkafka::ClientConfig::new()
            .set("bootstrap.servers", bootstrap)
            .set("group.id", "mp-out-reader")
            .set("isolation.level", "read_committed")
            .set("enable.auto.commit", "false")
            .create()
            .expect("the output consumer starts");
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition_offset(topic, 0, Offset::Beginning).expect("partition 0");
        consumer.assign(&tpl).expect("assigned");
        Output { consumer, counts: Vec::new(), by: BTreeMap::new() }
    }

    pub fn total(&self) -> u64 {
        self.counts.iter().map(|c| c.2).sum()
    }

    /// Takes what has been committed, waiting up to `wait` for the first record.
    pub fn poll(&mut self, wait: Duration) {
        let mut timeout = wait;
        while let Some(m) = self.consumer.poll(timeout) {
            // Transient (a dropped connection): the consumer reconnects by itself.
            let Ok(m) = m else { continue };
            let line = std::str::from_utf8(m.payload().unwrap_or_default()).expect("utf-8");
            let f: Vec<u64> = line.split_whitespace().map(|x| x.parse().expect("a number")).collect();
            self.counts.push((f[0], f[1] as i64, f[2]));
            self.by.insert((f[0], f[1] as i64, f[2]), f[3] as u32);
            timeout = Duration::ZERO;
        }
    }
}

/// A [`Generator`] released by `go` and paced to its rate from then (waiting on a
/// glommio timer); its positions are the generator's.
pub struct Paced<G> {
    inner: G,
    go: Arc<AtomicBool>,
    /// Records a second.
    rate: u64,
    started: Option<Instant>,
    emitted: u64,
    timer: Option<glommio::timer::Timer>,
}

impl<G> Paced<G> {
    /// `inner`, released by `go`, at `rate` records a second.
    pub fn new(inner: G, go: Arc<AtomicBool>, rate: u64) -> Self {
        Paced { inner, go, rate, started: None, emitted: 0, timer: None }
    }
}

impl<T: 'static, G: Source<T>> Source<T> for Paced<G> {
    fn splits(&self) -> usize {
        1
    }

    fn poll_next(&mut self, cx: &mut Context<'_>, out: &mut Vec<T>, max: usize) -> Poll<Option<usize>> {
        use std::{future::Future, pin::Pin};
        loop {
            if self.go.load(Ordering::Acquire) {
                let started = *self.started.get_or_insert_with(Instant::now);
                let due = (started.elapsed().as_millis() as u64 * self.rate / 1000).saturating_sub(self.emitted);
                if due > 0 {
                    let before = out.len();
                    let polled = self.inner.poll_next(cx, out, max.min(due as usize));
                    self.emitted += (out.len() - before) as u64;
                    self.timer = None;
                    return polled;
                }
            }
            let timer = self.timer.get_or_insert_with(|| glommio::timer::Timer::new(Duration::from_millis(20)));
            if Pin::new(timer).poll(cx).is_pending() {
                return Poll::Pending;
            }
            self.timer = None;
        }
    }

    fn positions(&self) -> Option<Vec<(u64, i64)>> {
        self.inner.positions()
    }

    fn restore(
        &mut self,
        positions: &std::collections::HashMap<u64, i64>,
    ) -> Result<(), sluice_engine::dataflow::UserError> {
        self.inner.restore(positions)
    }
}

/// This test binary, to be started again as a child with `env` set to `spec`.
pub fn this_test(env: &str, spec: String) -> Command {
    let mut command = Command::new(std::env::current_exe().expect("the test binary"));
    command.env(env, spec);
    command
}

/// Starts `command` with its stdin and stdout piped, handing each line it prints to
/// `on_line` on a thread of its own.
pub fn spawn_reading(mut command: Command, mut on_line: impl FnMut(&str) + Send + 'static) -> Child {
    let mut child = command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("the child starts");
    let stdout = child.stdout.take().expect("piped");
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            on_line(&line);
        }
    });
    child
}
