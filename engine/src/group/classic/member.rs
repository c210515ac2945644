//! A classic group's member: what it joined with and what it waits for.

use std::time::{Duration, Instant};

use bytes::Bytes;

use super::{Protocol, Ticket};

#[derive(Debug)]
pub(super) struct Member {
    pub(super) instance: Option<String>,
    pub(super) client_id: String,
    pub(super) client_host: String,
    pub(super) session_timeout: Duration,
    pub(super) rebalance_timeout: Duration,
    pub(super) protocols: Vec<Protocol>,
    pub(super) assignment: Bytes,
    /// A JoinGroup waiting for the rebalance to complete.
    pub(super) awaiting_join: Option<Ticket>,
    /// A SyncGroup waiting for the leader's assignment.
    pub(super) awaiting_sync: Option<Ticket>,
    /// Joined and not yet answered once: it expires after [`NEW_MEMBER_JOIN_TIMEOUT`](super::NEW_MEMBER_JOIN_TIMEOUT)
    /// even while it waits.
    pub(super) is_new: bool,
    /// When it is removed unless it is heard from (or waits in a join or sync).
    pub(super) expires: Instant,
}

impl Member {
    pub(super) fn metadata(&self, protocol: Option<&str>) -> Bytes {
        protocol
            .and_then(|name| self.protocols.iter().find(|p| p.name == name))
            .map(|p| p.metadata.clone())
            .unwrap_or_default()
    }

    pub(super) fn matches(&self, protocols: &[Protocol]) -> bool {
        self.protocols == protocols
    }

    /// Whether its session is kept alive without heartbeats: a known member waiting in a
    /// join or a sync cannot heartbeat (its client waits for the answer).
    pub(super) fn kept_alive(&self) -> bool {
        !self.is_new && (self.awaiting_join.is_some() || self.awaiting_sync.is_some())
    }

    pub(super) fn heard(&mut self, now: Instant) {
        self.expires = now + self.session_timeout;
    }
}
