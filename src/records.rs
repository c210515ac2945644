//! `sluice produce` and `sluice consume`: stdin lines to records, records to stdout lines.

use std::io::{BufRead, Write};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use clap::Args;
use futures_lite::future::block_on;
use sluice_engine::{
    Consumer, EngineHandle, GroupConsumer, GroupOptions, OffsetReset, OwnedHeader, OwnedRecord, SeekTo,
};
use sluice_io::{Offset, PartitionId, Timestamp};

use crate::{DataDir, signals, with_engine};

#[derive(Debug, Args)]
pub(crate) struct ProduceArgs {
    /// The topic.
    topic: String,
    #[command(flatten)]
    dir: DataDir,
    /// Print each record's partition and offset.
    #[arg(long)]
    verbose: bool,
    /// A header every record gets: NAME=VALUE, or NAME alone for a null value (as kcat's
    /// -H). Repeatable; names may repeat.
    #[arg(long = "header", value_name = "NAME=VALUE")]
    headers: Vec<String>,
    /// A line with an empty value (`key<TAB>`) sends a null value: a tombstone, which
    /// compaction removes with the key's earlier records.
    #[arg(long)]
    null_empty: bool,
}

#[derive(Debug, Args)]
pub(crate) struct ConsumeArgs {
    /// The topic.
    topic: String,
    #[command(flatten)]
    dir: DataDir,
    /// Start at the first offset held (the default is the end: only new records).
    #[arg(long, conflicts_with_all = ["offset", "timestamp"])]
    from_beginning: bool,
    /// Start at this offset (with --partition, or in every partition).
    #[arg(allow_negative_numbers = true, long, conflicts_with = "timestamp")]
    offset: Option<u64>,
    /// Start at the first record at or after this event time (ms since the epoch).
    #[arg(allow_negative_numbers = true, long)]
    timestamp: Option<i64>,
    /// Read only this partition.
    #[arg(allow_negative_numbers = true, long)]
    partition: Option<u32>,
    /// Stop after this many records.
    #[arg(allow_negative_numbers = true, long)]
    max: Option<u64>,
    /// Keep waiting for new records instead of stopping at the end.
    #[arg(long)]
    follow: bool,
    /// Consume as a member of this group: its partitions start at the group's committed
    /// offsets (else per --from-beginning), and the positions are committed at the end.
    #[arg(long, conflicts_with_all = ["offset", "timestamp", "partition"])]
    group: Option<String>,
    /// Print each record's headers as a fifth column: NAME=VALUE pairs joined by ','
    /// (NAME alone for a null value).
    #[arg(long)]
    headers: bool,
    /// Print this for a null key or value (the default prints nothing, as for an empty one).
    #[arg(long, value_name = "TEXT")]
    null: Option<String>,
}

/// Runs `sluice produce`.
pub(crate) fn run_produce(a: &ProduceArgs) -> Result<()> {
    with_engine(&a.dir, |h| produce(h, a))
}

/// Runs `sluice consume`, as a group member with `--group`.
pub(crate) fn run_consume(a: &ConsumeArgs) -> Result<()> {
    if a.group.is_some() {
        // Blocked before the engine's threads start, so that SIGINT and SIGTERM reach
        // the loop below (which commits what was printed) instead of ending the process.
        let signals = signals::block_termination()?;
        with_engine(&a.dir, |h| consume_group(h, a, &signals))
    } else {
        with_engine(&a.dir, |h| consume(h, a))
    }
}

/// A line of `sluice produce`'s input: `key<TAB>value`, or a value alone.
fn key_value(line: &str) -> (Option<&[u8]>, &[u8]) {
    match line.split_once('\t') {
        Some((k, v)) => (Some(k.as_bytes()), v.as_bytes()),
        None => (None, line.as_bytes()),
    }
}

/// `sluice produce`. Each line is checked before anything after it is sent: a bad line
/// stops the run with every line before it written and none after, and the error names
/// the line and how many records were written, so a retry can start after them.
fn produce(h: &EngineHandle, a: &ProduceArgs) -> Result<()> {
    let limit = h.describe_topic(&a.topic)?.config.max_record_bytes;
    let headers: Vec<OwnedHeader> = a
        .headers
        .iter()
        .map(|h| match h.split_once('=') {
            Some((k, v)) => OwnedHeader::new(k, v),
            None => OwnedHeader { key: h.clone(), value: None },
        })
        .collect();
    let header_bytes: usize = headers.iter().map(|h| h.key.len() + h.value.as_ref().map_or(0, Vec::len)).sum();
    let stdin = std::io::stdin();
    let mut out = std::io::stdout().lock();
    // Sends go out a window at a time, so that a window shares batches and fsyncs.
    const WINDOW: usize = 1000;
    let mut lines = stdin.lock().lines();
    let mut written = 0u64;
    loop {
        let first_line = written + 1;
        let window: Vec<String> = lines
            .by_ref()
            .take(WINDOW)
            .collect::<std::io::Result<_>>()
            .with_context(|| format!("reading stdin after line {written} ({written} records written)"))?;
        if window.is_empty() {
            break;
        }
        let size = |line: &str| {
            let (k, v) = key_value(line);
            k.map_or(0, <[u8]>::len) + v.len() + header_bytes
        };
        let bad = window.iter().position(|l| size(l) > limit);
        let now = Timestamp::now();
        let sends = window[..bad.unwrap_or(window.len())].iter().map(|line| {
            let (key, value) = key_value(line);
            let value = (!(a.null_empty && value.is_empty())).then(|| value.to_vec());
            let record = OwnedRecord { key: key.map(<[u8]>::to_vec), value, event_time: now, headers: headers.clone() };
            h.send_record(&a.topic, record)
        });
        let results = block_on(join_all(sends.collect()));
        let failed = results.iter().position(Result::is_err);
        for (p, off) in results.iter().filter_map(|r| r.as_ref().ok()) {
            written += 1;
            if a.verbose {
                writeln!(out, "{p}\t{off}")?;
            }
        }
        if let Some(i) = failed {
            let e = results.into_iter().nth(i).and_then(Result::err).expect("an error at i");
            bail!("line {}: {e}; {written} records written", first_line + i as u64);
        }
        if let Some(i) = bad {
            bail!(
                "line {}: a record of {} bytes exceeds topic {:?}'s limit of {limit} bytes; {written} records written (every line before it), none after",
                first_line + i as u64,
                size(&window[i]),
                a.topic
            );
        }
    }
    if !a.verbose {
        eprintln!("produced {written} records to {}", a.topic);
    }
    Ok(())
}

/// Awaits every future, concurrently, in order.
async fn join_all<F: std::future::Future>(futures: Vec<F>) -> Vec<F::Output> {
    let mut futures: Vec<_> = futures.into_iter().map(|f| Some(Box::pin(f))).collect();
    let mut outputs: Vec<Option<F::Output>> = futures.iter().map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut pending = false;
        for (slot, out) in futures.iter_mut().zip(outputs.iter_mut()) {
            if let Some(f) = slot {
                match f.as_mut().poll(cx) {
                    std::task::Poll::Ready(v) => {
                        *out = Some(v);
                        *slot = None;
                    }
                    std::task::Poll::Pending => pending = true,
                }
            }
        }
        if pending { std::task::Poll::Pending } else { std::task::Poll::Ready(()) }
    })
    .await;
    outputs.into_iter().map(|o| o.expect("every future finished")).collect()
}

fn consume(h: &EngineHandle, a: &ConsumeArgs) -> Result<()> {
    let mut consumer = Consumer::new(h.clone(), 1 << 20);
    let mut parts = consumer.partitions_of(&a.topic)?;
    if let Some(p) = a.partition.map(PartitionId) {
        if !parts.iter().any(|(_, q)| *q == p) {
            bail!("partition {p} out of range: topic {:?} has {} partitions", a.topic, parts.len());
        }
        parts.retain(|(_, q)| *q == p);
    }
    let start = match (a.from_beginning, a.offset, a.timestamp) {
        (true, _, _) => SeekTo::Earliest,
        (_, Some(o), _) => SeekTo::Offset(Offset(o)),
        (_, _, Some(t)) => SeekTo::Timestamp(Timestamp(t)),
        _ => SeekTo::Latest,
    };
    block_on(consumer.assign(&parts, start))?;
    let ends: Vec<(String, PartitionId, Offset)> =
        parts.iter().map(|(t, p)| Ok((t.clone(), *p, block_on(h.offsets(t, *p))?.1))).collect::<Result<_>>()?;
    let mut left = a.max.unwrap_or(u64::MAX);
    let mut out = std::io::stdout().lock();
    while left > 0 {
        let caught_up = ends.iter().all(|(t, p, end)| consumer.positions()[&(t.clone(), *p)] >= *end);
        if caught_up && !a.follow {
            break;
        }
        let wait = if a.follow { Duration::from_millis(500) } else { Duration::ZERO };
        print_records(&mut out, a, &block_on(consumer.poll(wait))?, &mut left, &mut Default::default())?;
    }
    Ok(())
}

/// `sluice consume --group`: prints records and commits the position after the last one
/// printed when it stops: at the end (without --follow), after --max records, on SIGINT or
/// SIGTERM, and when stdout closes.
fn consume_group(h: &EngineHandle, a: &ConsumeArgs, signals: &libc::sigset_t) -> Result<()> {
    let group = a.group.as_deref().expect("called with a group");
    let options = GroupOptions {
        reset: if a.from_beginning { OffsetReset::Earliest } else { OffsetReset::Latest },
        ..GroupOptions::default()
    };
    let mut member = block_on(GroupConsumer::join(h.clone(), group, &[a.topic.as_str()], options, None))?;
    let mut left = a.max.unwrap_or(u64::MAX);
    let mut out = std::io::stdout().lock();
    // The next offset after the last record printed, per partition: what gets committed.
    let mut done = std::collections::BTreeMap::new();
    let mut read = || -> Result<()> {
        while left > 0 {
            if let Some(signal) = signals::pending(signals)? {
                eprintln!("sluice consume: signal {signal}, committing and leaving the group");
                break;
            }
            let mut caught_up = true;
            for (t, p, at) in member.positions() {
                caught_up &= at >= block_on(h.offsets(&t, p))?.1;
            }
            if caught_up && !a.follow {
                break;
            }
            let wait = if a.follow { Duration::from_millis(500) } else { Duration::ZERO };
            print_records(&mut out, a, &block_on(member.poll(wait))?, &mut left, &mut done)?;
        }
        Ok(())
    };
    // What was printed is committed however the reading ended (a closed stdout too).
    let result = read();
    let offsets: Vec<(String, PartitionId, Offset)> = done.into_iter().map(|((t, p), o)| (t, p, o)).collect();
    block_on(member.commit_offsets(&offsets))?;
    block_on(member.leave())?;
    result
}

/// Prints polled records as `partition<TAB>offset<TAB>key<TAB>value` (and headers with
/// `--headers`), at most `left` of
/// them, noting in `done` the offset after the last one printed per partition.
fn print_records(
    out: &mut impl Write,
    a: &ConsumeArgs,
    polled: &[sluice_engine::Polled],
    left: &mut u64,
    done: &mut std::collections::BTreeMap<(String, PartitionId), Offset>,
) -> Result<()> {
    for p in polled {
        for r in p.batches.records() {
            if *left == 0 {
                return Ok(());
            }
            let r = r?;
            let null = a.null.as_deref().unwrap_or_default();
            let text =
                |b: Option<&[u8]>| b.map_or_else(|| null.to_string(), |b| String::from_utf8_lossy(b).into_owned());
            write!(out, "{}\t{}\t{}\t{}", p.partition, r.offset(), text(r.key()), text(r.value()))?;
            if a.headers {
                let headers: Vec<String> = r
                    .headers()
                    .map(|h| match h.value {
                        Some(v) => format!("{}={}", h.key, String::from_utf8_lossy(v)),
                        None => h.key.to_string(),
                    })
                    .collect();
                write!(out, "\t{}", headers.join(","))?;
            }
            writeln!(out)?;
            done.insert((p.topic.clone(), p.partition), r.offset().plus(1));
            *left -= 1;
        }
    }
    Ok(())
}
