//! The listener's metrics: what each listener executor counts, in [`owned`] cells only it
//! writes (a scrape runs on another thread and only reads them), found through a
//! thread-local set when the executor starts accepting.
//!
//! Counted: connections (accepted, open, refused by the connection limit), frames and
//! requests refused (too large, too slow, malformed: each closes its connection), bytes
//! in and out, requests and their latency by API (from the frame's arrival to its response
//! being ready, not counting the time it waits behind earlier responses of its
//! connection), and the error codes of every response by API, counted as Kafka's
//! `RequestMetrics` `ErrorsPerSec` counts them (each partition's or resource's code,
//! `NONE` included); transactions committed, aborted and timed out. The open
//! transactions are counted at the scrape, under the coordinator's lock.
//!
//! Every label comes from a fixed table (the APIs of [`SUPPORTED`], Kafka's error names,
//! the refusal reasons), never from a client, so the series are bounded.
//!
//! [`owned`]: crate::metrics::owned
//! [`SUPPORTED`]: super::dispatch::SUPPORTED

use std::cell::RefCell;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use futures_lite::Future;
use kafka_protocol::messages::{ApiKey, ResponseKind};

use super::context::Shared;
use super::dispatch::{Handled, SUPPORTED};
use crate::metrics::owned::{OwnedCounter, OwnedHistogram};
use crate::metrics::{Families, Labels, MetricSource};

/// Error codes counted apart: Kafka's run from -1 to about 130; any other is counted as
/// the last slot.
const CODES: usize = 134;

fn code_slot(code: i16) -> usize {
    usize::try_from(i32::from(code) + 1).map_or(CODES - 1, |i| i.min(CODES - 1))
}

/// Why the listener closed a connection on a client's account.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Refusal {
    /// The connection limit of the executor was reached (closed on accept).
    ConnectionLimit,
    /// A frame over `max_request_bytes`, or too short to hold a header.
    FrameSize,
    /// A frame that did not arrive within `frame_timeout`, or a connection idle too long.
    Timeout,
    /// A request that did not decode, or of an unknown API or version.
    Malformed,
    /// A request before the connection's SASL login, or after it expired.
    Unauthenticated,
    /// A SASL login that failed (unknown user, wrong password, bad exchange).
    AuthenticationFailed,
    /// A TLS handshake that failed (a plaintext client, an untrusted or expired client
    /// certificate) or did not finish within `frame_timeout`.
    TlsHandshake,
}

const REFUSALS: [&str; 7] = [
    "connection_limit",
    "frame_size",
    "timeout",
    "malformed",
    "unauthenticated",
    "authentication_failed",
    "tls_handshake",
];

/// One listener executor's counts.
#[derive(Debug)]
pub(crate) struct ExecutorCells {
    accepted: OwnedCounter,
    open: OwnedCounter,
    refused: [OwnedCounter; REFUSALS.len()],
    bytes_in: OwnedCounter,
    bytes_out: OwnedCounter,
    requests: Vec<OwnedCounter>,
    latency: Vec<OwnedHistogram>,
    /// `SUPPORTED.len() * CODES` counters: API index major.
    errors: Vec<OwnedCounter>,
    txn_committed: OwnedCounter,
    txn_aborted: OwnedCounter,
    txn_timed_out: OwnedCounter,
    /// Operations the ACLs denied (each resource of a request counts once).
    denied: OwnedCounter,
}

impl Default for ExecutorCells {
    fn default() -> Self {
        let apis = SUPPORTED.len();
        ExecutorCells {
            accepted: OwnedCounter::default(),
            open: OwnedCounter::default(),
            refused: Default::default(),
            bytes_in: OwnedCounter::default(),
            bytes_out: OwnedCounter::default(),
            requests: (0..apis).map(|_| OwnedCounter::default()).collect(),
            latency: (0..apis).map(|_| OwnedHistogram::default()).collect(),
            errors: (0..apis * CODES).map(|_| OwnedCounter::default()).collect(),
            txn_committed: OwnedCounter::default(),
            denied: OwnedCounter::default(),
            txn_aborted: OwnedCounter::default(),
            txn_timed_out: OwnedCounter::default(),
        }
    }
}

thread_local! {
    static LOCAL: RefCell<Option<Arc<ExecutorCells>>> = const { RefCell::new(None) };
}

/// Runs `f` on this executor's cells, if it is a listener executor (else does nothing).
fn with(f: impl FnOnce(&ExecutorCells)) {
    LOCAL.with(|l| {
        if let Some(cells) = l.borrow().as_ref() {
            f(cells);
        }
    });
}

fn api_index(api: ApiKey) -> Option<usize> {
    SUPPORTED.iter().position(|(k, _, _)| *k == api)
}

/// The executors of one listener, for the scrape.
#[derive(Debug, Default)]
pub(crate) struct ListenerMetrics {
    executors: Mutex<Vec<Arc<ExecutorCells>>>,
}

impl ListenerMetrics {
    /// Makes the cells of the executor this runs on (listener executor `index`).
    pub(crate) fn executor_started(&self, index: usize) {
        let cells = Arc::new(ExecutorCells::default());
        let mut executors = self.executors.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if executors.len() <= index {
            executors.resize_with(index + 1, || Arc::new(ExecutorCells::default()));
        }
        executors[index] = cells.clone();
        LOCAL.with(|l| *l.borrow_mut() = Some(cells));
    }
}

/// A connection accepted.
pub(crate) fn connection_opened() {
    with(|c| {
        c.accepted.add(1);
        c.open.add(1);
    });
}

/// A connection ended.
pub(crate) fn connection_closed() {
    with(|c| c.open.sub(1));
}

/// A connection closed on the client's account.
pub(crate) fn refused(why: Refusal) {
    with(|c| c.refused[why as usize].add(1));
}

/// Counts an operation the ACLs denied.
pub(crate) fn denied() {
    with(|c| c.denied.add(1));
}

/// A frame of `n` bytes (its size prefix included) read.
pub(crate) fn bytes_in(n: usize) {
    with(|c| c.bytes_in.add(n as u64));
}

/// A response of `n` bytes written.
pub(crate) fn bytes_out(n: usize) {
    with(|c| c.bytes_out.add(n as u64));
}

/// A transaction ended by EndTxn (`commit`), or aborted at its timeout (`timed_out`).
pub(crate) fn transaction_ended(commit: bool, timed_out: bool) {
    with(|c| match (commit, timed_out) {
        (_, true) => c.txn_timed_out.add(1),
        (true, false) => c.txn_committed.add(1),
        (false, false) => c.txn_aborted.add(1),
    });
}

/// Counts a frame that was not a request this listener handles, if it closes its
/// connection.
pub(crate) fn unparsed(handled: Handled) -> Handled {
    if matches!(handled, Handled::Close(_)) {
        refused(Refusal::Malformed);
    }
    handled
}

/// Counts a request of `api` and times it until its response is ready.
pub(crate) fn request(api: ApiKey, handled: Handled) -> Handled {
    let Some(i) = api_index(api) else { return handled };
    with(|c| c.requests[i].add(1));
    let started = Instant::now();
    let done = move || with(|c| c.latency[i].record(started.elapsed()));
    match handled {
        Handled::Close(reason) => {
            refused(Refusal::Malformed);
            Handled::Close(reason)
        }
        Handled::Ready(reply) => {
            done();
            Handled::Ready(reply)
        }
        Handled::Last(reply) => {
            done();
            Handled::Last(reply)
        }
        Handled::Working(work) => Handled::Working(timed(work, done)),
        Handled::Ordered { work, queued } => Handled::Ordered { work: timed(work, done), queued },
    }
}

fn timed<T: 'static>(
    work: Pin<Box<dyn Future<Output = T>>>,
    done: impl FnOnce() + 'static,
) -> Pin<Box<dyn Future<Output = T>>> {
    Box::pin(async move {
        let out = work.await;
        done();
        out
    })
}

/// Counts the error codes a response of `api` carries.
pub(crate) fn response(api: ApiKey, body: &ResponseKind) {
    let Some(i) = api_index(api) else { return };
    with(|c| error_codes(body, |code| c.errors[i * CODES + code_slot(code)].add(1)));
}

/// Every error code in a response, as Kafka's `AbstractResponse::errorCounts` lists them.
fn error_codes(body: &ResponseKind, mut f: impl FnMut(i16)) {
    use ResponseKind as R;
    match body {
        R::Produce(r) => r.responses.iter().flat_map(|t| &t.partition_responses).for_each(|p| f(p.error_code)),
        R::Fetch(r) => {
            f(r.error_code);
            r.responses.iter().flat_map(|t| &t.partitions).for_each(|p| f(p.error_code));
        }
        R::ListOffsets(r) => r.topics.iter().flat_map(|t| &t.partitions).for_each(|p| f(p.error_code)),
        R::Metadata(r) => {
            for t in &r.topics {
                f(t.error_code);
                t.partitions.iter().for_each(|p| f(p.error_code));
            }
        }
        R::OffsetCommit(r) => r.topics.iter().flat_map(|t| &t.partitions).for_each(|p| f(p.error_code)),
        R::OffsetFetch(r) => {
            if r.groups.is_empty() {
                f(r.error_code);
                r.topics.iter().flat_map(|t| &t.partitions).for_each(|p| f(p.error_code));
            }
            for g in &r.groups {
                f(g.error_code);
                g.topics.iter().flat_map(|t| &t.partitions).for_each(|p| f(p.error_code));
            }
        }
        R::FindCoordinator(r) => {
            if r.coordinators.is_empty() {
                f(r.error_code);
            }
            r.coordinators.iter().for_each(|c| f(c.error_code));
        }
        R::JoinGroup(r) => f(r.error_code),
        R::Heartbeat(r) => f(r.error_code),
        R::LeaveGroup(r) => {
            f(r.error_code);
            r.members.iter().for_each(|m| f(m.error_code));
        }
        R::SyncGroup(r) => f(r.error_code),
        R::DescribeGroups(r) => r.groups.iter().for_each(|g| f(g.error_code)),
        R::ListGroups(r) => f(r.error_code),
        R::ApiVersions(r) => f(r.error_code),
        R::CreateTopics(r) => r.topics.iter().for_each(|t| f(t.error_code)),
        R::DeleteTopics(r) => r.responses.iter().for_each(|t| f(t.error_code)),
        R::DeleteRecords(r) => r.topics.iter().flat_map(|t| &t.partitions).for_each(|p| f(p.error_code)),
        R::InitProducerId(r) => f(r.error_code),
        R::AddPartitionsToTxn(r) => {
            r.results_by_topic_v3_and_below
                .iter()
                .flat_map(|t| &t.results_by_partition)
                .for_each(|p| f(p.partition_error_code));
        }
        R::AddOffsetsToTxn(r) => f(r.error_code),
        R::EndTxn(r) => f(r.error_code),
        R::TxnOffsetCommit(r) => r.topics.iter().flat_map(|t| &t.partitions).for_each(|p| f(p.error_code)),
        R::DescribeConfigs(r) => r.results.iter().for_each(|x| f(x.error_code)),
        R::AlterConfigs(r) => r.responses.iter().for_each(|x| f(x.error_code)),
        R::IncrementalAlterConfigs(r) => r.responses.iter().for_each(|x| f(x.error_code)),
        R::CreatePartitions(r) => r.results.iter().for_each(|x| f(x.error_code)),
        R::DescribeCluster(r) => f(r.error_code),
        R::DeleteGroups(r) => r.results.iter().for_each(|x| f(x.error_code)),
        R::OffsetDelete(r) => {
            f(r.error_code);
            r.topics.iter().flat_map(|t| &t.partitions).for_each(|p| f(p.error_code));
        }
        _ => {}
    }
}

/// Kafka's name of an error code (`UNKNOWN_TOPIC_OR_PARTITION`), `NONE` for 0, `UNKNOWN`
/// for a code outside its table.
fn error_name(code: i16) -> String {
    if code == 0 {
        return "NONE".to_string();
    }
    let Some(e) = kafka_protocol::error::ResponseError::try_from_code(code) else { return "UNKNOWN".to_string() };
    // The crate's variants are Kafka's names in camel case; a code it does not know is
    // `Unknown(code)`.
    let camel = format!("{e:?}");
    if camel.contains('(') {
        return "UNKNOWN".to_string();
    }
    let mut out = String::with_capacity(camel.len() + 8);
    for (i, ch) in camel.chars().enumerate() {
        if ch.is_ascii_uppercase() && i > 0 {
            out.push('_');
        }
        out.push(ch.to_ascii_uppercase());
    }
    out
}

fn api_name(i: usize) -> String {
    format!("{:?}", SUPPORTED[i].0)
}

impl MetricSource for Shared {
    fn collect(&self, out: &mut Families) {
        let executors = self.metrics.executors.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone();
        for (x, c) in executors.iter().enumerate() {
            let l = || -> Labels { vec![("executor", x.to_string())] };
            out.counter(
                "sluice_kafka_connections_accepted_total",
                "Connections a listener executor accepted",
                l(),
                c.accepted.get(),
            );
            out.gauge("sluice_kafka_connections_open", "Connections open on a listener executor", l(), c.open.get());
            out.counter("sluice_kafka_received_bytes_total", "Request bytes received (frames)", l(), c.bytes_in.get());
            out.counter("sluice_kafka_sent_bytes_total", "Response bytes sent", l(), c.bytes_out.get());
            out.counter(
                "sluice_kafka_authorization_denied_total",
                "Operations the ACLs denied (each resource of a request once)",
                l(),
                c.denied.get(),
            );
            for (reason, n) in REFUSALS.iter().zip(c.refused.iter()) {
                out.counter(
                    "sluice_kafka_refused_total",
                    "Connections the listener closed on a client's account, by reason",
                    vec![("reason", (*reason).to_string())],
                    n.get(),
                );
            }
            for i in 0..SUPPORTED.len() {
                let n = c.requests[i].get();
                if n == 0 {
                    continue;
                }
                out.counter("sluice_kafka_requests_total", "Requests handled, by API", vec![("api", api_name(i))], n);
                out.histogram(
                    "sluice_kafka_request_duration_seconds",
                    "Requests from their arrival to their response being ready, by API",
                    vec![("api", api_name(i))],
                    &c.latency[i].counts(),
                );
                for slot in 0..CODES {
                    let n = c.errors[i * CODES + slot].get();
                    if n > 0 {
                        let code = i16::try_from(slot as i32 - 1).unwrap_or(i16::MAX);
                        let name = if slot == CODES - 1 { "UNKNOWN".to_string() } else { error_name(code) };
                        out.counter(
                            "sluice_kafka_response_errors_total",
                            "Error codes in responses (each partition's or resource's, NONE included), by API",
                            vec![("api", api_name(i)), ("error", name)],
                            n,
                        );
                    }
                }
            }
            out.counter(
                "sluice_kafka_transactions_committed_total",
                "Transactions committed by EndTxn",
                vec![],
                c.txn_committed.get(),
            );
            out.counter(
                "sluice_kafka_transactions_aborted_total",
                "Transactions aborted by EndTxn",
                vec![],
                c.txn_aborted.get(),
            );
            out.counter(
                "sluice_kafka_transactions_timed_out_total",
                "Transactions aborted by the coordinator at their timeout",
                vec![],
                c.txn_timed_out.get(),
            );
        }
        out.gauge(
            "sluice_kafka_transactions_open",
            "Transactions open now (begun by AddPartitionsToTxn or AddOffsetsToTxn, not yet ended)",
            vec![],
            self.txns.open_count(),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_names_are_kafkas() {
        assert_eq!(error_name(0), "NONE");
        assert_eq!(error_name(3), "UNKNOWN_TOPIC_OR_PARTITION");
        assert_eq!(error_name(-1), "UNKNOWN_SERVER_ERROR");
        assert_eq!(error_name(9999), "UNKNOWN");
        assert_eq!(code_slot(-1), 0);
        assert_eq!(code_slot(i16::MAX), CODES - 1);
        assert_eq!(code_slot(i16::MIN), CODES - 1);
    }
}
