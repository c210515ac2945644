//! One connection's standing: the client's address, who it authenticated as, and where
//! its SASL exchange is. A connection of a SASL listener may send only ApiVersions,
//! SaslHandshake and SaslAuthenticate until its login succeeds (anything else closes it
//! unanswered, as Kafka's broker does), and again only those once its login has expired
//! (`KafkaConfig::max_reauth`) until it logs in again (KIP-368).

use std::cell::{Cell, RefCell};
use std::sync::Arc;
use std::time::Instant;

use kafka_protocol::messages::ApiKey;

use crate::security::scram::ScramServer;
use crate::security::{Mechanism, Principal, SecurityProtocol};

/// One connection's standing.
#[derive(Debug)]
pub(crate) struct Session {
    /// The peer as DescribeGroups reports it (Kafka's `client_host`).
    pub(crate) host: Arc<str>,
    principal: RefCell<Option<Principal>>,
    pub(crate) exchange: RefCell<Exchange>,
    expires: Cell<Option<Instant>>,
    /// A SaslHandshake v0 was answered: the next frames are the mechanism's messages
    /// without Kafka's request header, until the login ends.
    raw: Cell<bool>,
}

/// Where the connection's SASL exchange is.
#[derive(Debug)]
pub(crate) enum Exchange {
    /// None under way: SaslHandshake comes next.
    Idle,
    /// SaslHandshake chose the mechanism: SaslAuthenticate comes next.
    Handshaken(Mechanism),
    /// A SCRAM exchange after its first message.
    Scram(ScramServer),
}

impl Session {
    /// A new connection from `host` on a listener speaking `protocol`: not authenticated
    /// yet on a SASL listener; on any other, the principal its client certificate named
    /// (mutual TLS), or anonymous.
    pub(crate) fn new(host: Arc<str>, protocol: SecurityProtocol, certified: Option<Principal>) -> Session {
        let principal = (!protocol.sasl()).then(|| certified.unwrap_or_else(Principal::anonymous));
        Session {
            host,
            principal: RefCell::new(principal),
            exchange: RefCell::new(Exchange::Idle),
            expires: Cell::new(None),
            raw: Cell::new(false),
        }
    }

    /// Who the connection acts as, once it has authenticated.
    pub(crate) fn principal(&self) -> Option<Principal> {
        self.principal.borrow().clone()
    }

    /// Records a successful login as `principal`, lasting until `expires`.
    pub(crate) fn logged_in(&self, principal: Principal, expires: Option<Instant>) {
        *self.principal.borrow_mut() = Some(principal);
        self.expires.set(expires);
    }

    /// Whether frames are bare SASL messages now (after a SaslHandshake v0).
    pub(crate) fn raw_tokens(&self) -> bool {
        self.raw.get()
    }

    /// Starts or ends the bare-message mode of SaslHandshake v0.
    pub(crate) fn set_raw_tokens(&self, on: bool) {
        self.raw.set(on);
    }

    /// Why a request of `api` may not be served now, if it may not.
    pub(crate) fn refusal(&self, api: ApiKey) -> Option<String> {
        if matches!(api, ApiKey::ApiVersions | ApiKey::SaslHandshake | ApiKey::SaslAuthenticate) {
            return None;
        }
        if self.principal.borrow().is_none() {
            return Some(format!("{api:?} before SASL authentication"));
        }
        if self.expires.get().is_some_and(|at| Instant::now() >= at) {
            return Some(format!("{api:?} after the SASL login expired (max_reauth) without re-authentication"));
        }
        None
    }
}
