//! What every connection of the listener shares, and all a request handler may reach:
//! the engine handle, the listener's configuration, and the listener-wide state (the
//! transaction coordinator, the stable-offset index). The handlers take this, never the
//! listener; it depends on the state types only, not on any handler. (Consumer groups
//! keep no state here: their coordinator is the engine's.)

use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::KafkaConfig;
use super::stable::StableIndex;
use super::transactions::TransactionCoordinator;
use crate::engine::EngineHandle;
use crate::security::{LiveUsers, SecurityProtocol};

/// What a request handler reaches: what the whole listener shares (through `Deref`),
/// and the listener (address, security protocol) the connection came in on.
#[derive(Debug)]
pub(crate) struct Context {
    pub(crate) shared: Arc<Shared>,
    /// The host and port clients of this listener are told to connect to.
    pub(crate) advertised: (String, i32),
    /// Its security protocol.
    pub(crate) protocol: SecurityProtocol,
    /// Its bound address.
    pub(crate) addr: SocketAddr,
}

impl std::ops::Deref for Context {
    type Target = Shared;

    fn deref(&self) -> &Shared {
        &self.shared
    }
}

/// What every connection of every listener shares.
#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) engine: EngineHandle,
    pub(crate) config: KafkaConfig,
    /// Each listener's protocol and advertised address, in configuration order.
    pub(crate) listeners: Vec<(SecurityProtocol, SocketAddr, (String, i32))>,
    /// Transactional ids and their transactions (persisted in `__transaction_state`).
    pub(crate) txns: TransactionCoordinator,
    /// Last stable offsets and aborted transactions for read_committed fetches.
    pub(crate) stable: StableIndex,
    /// Connection and request failures, written to stderr with a rate limit.
    pub(crate) errors: ErrorLog,
    /// Each listener executor's counts (`observe.rs`), for the engine's scrape.
    pub(crate) metrics: super::observe::ListenerMetrics,
    /// The SASL users, when a listener authenticates with SASL.
    pub(crate) users: Option<Arc<LiveUsers>>,
}

/// Lines about failed connections and requests: at most [`ErrorLog::BURST`] per
/// [`ErrorLog::WINDOW`] over the whole listener, so a flood of bad clients cannot flood
/// the server's log; the rest are counted, and the next line written says how many were
/// left out.
#[derive(Debug, Default)]
pub(crate) struct ErrorLog {
    window: Mutex<Option<(Instant, u32, u64)>>,
    /// Every failure reported, written or not.
    pub(crate) total: AtomicU64,
}

impl ErrorLog {
    /// Lines written per window.
    pub(crate) const BURST: u32 = 10;
    /// The window.
    pub(crate) const WINDOW: Duration = Duration::from_secs(10);

    /// Writes `line` (after the listener's prefix) unless this window's lines are used up;
    /// true if it was written.
    pub(crate) fn report(&self, line: std::fmt::Arguments<'_>) -> bool {
        self.total.fetch_add(1, Ordering::Relaxed);
        let now = Instant::now();
        let mut w = self.window.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let (start, written, hidden) = w.get_or_insert((now, 0, 0));
        if now.duration_since(*start) >= Self::WINDOW {
            (*start, *written) = (now, 0);
        }
        if *written >= Self::BURST {
            *hidden += 1;
            return false;
        }
        *written += 1;
        let left_out = std::mem::take(hidden);
        if left_out > 0 {
            eprintln!("sluice kafka listener: {line} ({left_out} more failures not shown before this one)");
        } else {
            eprintln!("sluice kafka listener: {line}");
        }
        true
    }
}

/// A client's address as Kafka writes it (Java's `InetAddress.toString()` of an address
/// with no host name): `/127.0.0.1`, or every IPv6 group in hex, `/0:0:0:0:0:0:0:1`.
pub(crate) fn kafka_host(addr: &SocketAddr) -> String {
    match addr.ip() {
        IpAddr::V4(ip) => format!("/{ip}"),
        IpAddr::V6(ip) => {
            let groups: Vec<String> = ip.segments().iter().map(|s| format!("{s:x}")).collect();
            format!("/{}", groups.join(":"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_are_written_as_kafka_writes_them() {
        assert_eq!(kafka_host(&"127.0.0.1:9092".parse().unwrap()), "/127.0.0.1");
        assert_eq!(kafka_host(&"[::1]:9092".parse().unwrap()), "/0:0:0:0:0:0:0:1");
        assert_eq!(kafka_host(&"[fe80::1:2]:1".parse().unwrap()), "/fe80:0:0:0:0:0:1:2");
    }

    #[test]
    fn the_error_log_writes_a_burst_per_window_and_counts_the_rest() {
        let log = ErrorLog::default();
        let written = (0..25).filter(|i| log.report(format_args!("failure {i}"))).count();
        assert_eq!(written, ErrorLog::BURST as usize);
        assert_eq!(log.total.load(Ordering::Relaxed), 25);
        // A new window writes again, first saying how many were left out.
        log.window.lock().unwrap().as_mut().unwrap().0 -= ErrorLog::WINDOW;
        assert!(log.report(format_args!("after the window")));
        assert_eq!(log.window.lock().unwrap().unwrap().2, 0, "the left-out count was said");
    }
}
