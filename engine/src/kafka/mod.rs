//! A Kafka-protocol listener over the engine: Kafka clients (librdkafka, kafka-python, the
//! Java client) produce to and consume from sluice's partition logs as from one broker.
//!
//! - [`listener`]: one glommio executor per shard core, each with its own `SO_REUSEPORT`
//!   socket on the same address, so the kernel spreads connections over the cores; a
//!   connection lives on the executor that accepted it. Frames are capped, read with
//!   deadlines, and answered in request order with a bounded number in flight.
//! - [`dispatch`]: request headers, the ApiVersions table (and its v0 fallback), decoding
//!   with the `kafka-protocol` crate and encoding the responses.
//! - `context`: what every request handler may reach (the handle, the configuration and
//!   the listener-wide state); handlers take it, never the listener.
//! - [`data`] (Produce, Fetch, ListOffsets), [`admin`] (Metadata, CreateTopics,
//!   DeleteTopics, CreatePartitions, DeleteRecords, DescribeCluster, FindCoordinator,
//!   InitProducerId), [`configs`] (DescribeConfigs, AlterConfigs, IncrementalAlterConfigs),
//!   [`groups`] (Kafka's classic consumer group protocol and KIP-848's, run by the
//!   engine's group coordinator; membership, offsets and group admin requests in
//!   `groups::{membership, consumer, offsets, admin}`).
//! - `transactions`: the transaction coordinator (transactional ids, AddPartitionsToTxn,
//!   AddOffsetsToTxn, TxnOffsetCommit, EndTxn writing the markers), its state persisted
//!   in the internal topic `__transaction_state` and recovered when the listener starts;
//!   its requests in `transactions::requests`.
//! - [`stable`]: last stable offsets and aborted transactions for read_committed Fetch.
//! - [`records`]: Kafka's record batch v2 to and from sluice's records, CRC-32C checked.
//! - [`guard`]: every request body is walked by its schema, and counts checked against
//!   the bytes left, before the protocol crate decodes it (its decoder would allocate
//!   what a hostile count claims).
//!
//! Contract: the listener never touches a partition log. Every request reaches the owning
//! shard through the [`EngineHandle`](crate::EngineHandle), as host code's do; the
//! listener's executors only parse, wait and encode. A bad frame closes its connection
//! (or gets the protocol's error code) and nothing else.

mod acls;
pub mod admin;
mod authz;
pub mod child;
pub mod compression;
pub mod configs;
mod context;
pub mod data;
pub mod dispatch;
pub mod errors;
pub mod groups;
pub mod guard;
mod join;
pub mod listener;
mod listeners;
mod observe;
pub mod records;
mod sasl;
mod session;
mod stable;
mod transactions;
mod users;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use crate::security::{Authorizer, LiveUsers, Mechanism, SecurityProtocol, TlsSettings};

pub use listener::KafkaServer;
pub use transactions::{TRANSACTION_STATE_TOPIC, TRANSACTION_TIMEOUT_MS_MAX};

/// The node id sluice reports for itself: the only broker of its cluster.
pub const NODE_ID: i32 = 0;

/// The cluster id sluice reports (Metadata, DescribeCluster).
pub const CLUSTER_ID: &str = "sluice";

/// How the listener is set up.
#[derive(Clone, Debug)]
pub struct KafkaConfig {
    /// Where to listen; loopback unless told otherwise.
    pub listen: SocketAddr,
    /// The host and port clients are told to connect to (Metadata, FindCoordinator);
    /// `None` means the bound address.
    pub advertise: Option<(String, u16)>,
    /// Listener executors of their own, each pinned to a shard's core; at least 1.
    /// Ignored when `on_shards` is set.
    pub executors: usize,
    /// Accept and serve connections on the engine's shard executors themselves (one
    /// `SO_REUSEPORT` socket per shard, through [`EngineHandle::run_on`]) instead of on
    /// executors of their own: thread-per-core, no thread beside the shards.
    ///
    /// [`EngineHandle::run_on`]: crate::EngineHandle::run_on
    pub on_shards: bool,
    /// The largest request frame accepted; a larger one closes the connection (Kafka's
    /// `socket.request.max.bytes`).
    pub max_request_bytes: usize,
    /// The most requests of one connection being handled at once (responses still go out
    /// in request order).
    pub max_in_flight_per_connection: usize,
    /// The most open connections per executor; more are closed on accept.
    pub max_connections_per_executor: usize,
    /// How long a frame may take to arrive once its first byte has (a slow client is cut
    /// off after this).
    pub frame_timeout: Duration,
    /// How long a response write may block on a client that does not read.
    pub write_timeout: Duration,
    /// A connection with no request for this long is closed (`connections.max.idle.ms`).
    pub idle_timeout: Duration,
    /// The longest a Fetch may wait for data, whatever the client asks.
    pub max_fetch_wait: Duration,
    /// Partitions of a topic created without a count: auto-created, or by CreateTopics
    /// with -1 (Kafka's `num.partitions`, default 1).
    pub num_partitions: u32,
    /// Whether a Metadata request for an unknown topic (one that allows it) creates it
    /// with `num_partitions` partitions; when false, it gets UNKNOWN_TOPIC_OR_PARTITION
    /// (Kafka's `auto.create.topics.enable`, default true).
    pub auto_create_topics: bool,
    /// The longest transaction timeout InitProducerId accepts; a longer one gets
    /// INVALID_TRANSACTION_TIMEOUT (Kafka's `transaction.max.timeout.ms`, default 15
    /// minutes).
    pub transaction_max_timeout_ms: i32,
    /// How long the first rebalance of an empty consumer group waits for more members
    /// before it answers (again while more keep joining, within the rebalance timeout),
    /// so that consumers started together share the first generation instead of each
    /// joining a new one (Kafka's `group.initial.rebalance.delay.ms`). Zero here, as
    /// Kafka's shipped `server.properties` sets it, so a lone consumer starts at once;
    /// Kafka's built-in default is 3 s.
    pub group_initial_rebalance_delay: Duration,
    /// How often a KIP-848 consumer (`group.protocol=consumer`) heartbeats, as the
    /// ConsumerGroupHeartbeat answer tells it; it learns of rebalances this often (Kafka's
    /// `group.consumer.heartbeat.interval.ms`, default 5 s).
    pub consumer_heartbeat_interval: Duration,
    /// How long a KIP-848 consumer may go without a heartbeat before it is fenced and its
    /// partitions reassigned (Kafka's `group.consumer.session.timeout.ms`, default 45 s).
    pub consumer_session_timeout: Duration,
    /// The security protocol of `listen` (PLAINTEXT by default).
    pub protocol: SecurityProtocol,
    /// More listeners beside `listen`, each with its own address and protocol (Kafka's
    /// `listeners`); they share everything else.
    pub more_listeners: Vec<ListenerConfig>,
    /// The SASL mechanisms SASL listeners offer (all three by default).
    pub sasl_mechanisms: Vec<Mechanism>,
    /// The users SASL listeners check logins against; required when a listener uses SASL
    /// (`sluice serve` reads the data directory's, `sluice user` manages them).
    pub users: Option<Arc<LiveUsers>>,
    /// How long a SASL login lasts (Kafka's `connections.max.reauth.ms`): clients are
    /// told, re-authenticate before it ends (KIP-368), and a connection that has not is
    /// closed at its next request. `None`: a login lasts as long as its connection.
    pub max_reauth: Option<Duration>,
    /// The ACL authorizer: every request is checked against its rules (deny wins, super
    /// users pass). `None`: every client may do everything, as a Kafka broker without
    /// `authorizer.class.name`.
    pub authorizer: Option<Arc<Authorizer>>,
    /// The certificate and key of SSL and SASL_SSL listeners, and the CA of client
    /// certificates for mutual TLS on SSL listeners; required when a listener uses TLS.
    pub tls: Option<TlsSettings>,
    /// Let a listener on an address other than loopback serve clients that do not
    /// authenticate (PLAINTEXT, or SSL without client certificates). Off: such a
    /// listener is refused at start.
    pub allow_plaintext: bool,
}

/// A listener beside the first: its address, protocol and advertised address.
#[derive(Clone, Debug)]
pub struct ListenerConfig {
    /// Where it listens (port 0 picks one).
    pub addr: SocketAddr,
    /// How its clients connect.
    pub protocol: SecurityProtocol,
    /// The host and port its clients are told to connect to; `None` means the bound one.
    pub advertise: Option<(String, u16)>,
}

impl KafkaConfig {
    /// Defaults for everything but the address.
    #[must_use]
    pub fn new(listen: SocketAddr) -> KafkaConfig {
        KafkaConfig {
            listen,
            advertise: None,
            executors: 1,
            on_shards: false,
            max_request_bytes: 100 << 20,
            max_in_flight_per_connection: 16,
            max_connections_per_executor: 4096,
            frame_timeout: Duration::from_secs(30),
            write_timeout: Duration::from_secs(30),
            idle_timeout: Duration::from_secs(600),
            max_fetch_wait: Duration::from_secs(30),
            num_partitions: 1,
            auto_create_topics: true,
            transaction_max_timeout_ms: TRANSACTION_TIMEOUT_MS_MAX,
            group_initial_rebalance_delay: Duration::ZERO,
            consumer_heartbeat_interval: Duration::from_secs(5),
            consumer_session_timeout: Duration::from_secs(45),
            protocol: SecurityProtocol::Plaintext,
            more_listeners: Vec::new(),
            sasl_mechanisms: Mechanism::ALL.to_vec(),
            users: None,
            max_reauth: None,
            tls: None,
            authorizer: None,
            allow_plaintext: false,
        }
    }
}

/// Why the listener could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum KafkaError {
    /// The address could not be bound.
    #[error("binding the Kafka listener to {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// A listener executor could not start.
    #[error("starting Kafka listener executor {executor}: {reason}")]
    Executor {
        /// Its index.
        executor: usize,
        /// What glommio said.
        reason: String,
    },
    /// A setting is out of range.
    #[error("invalid Kafka listener configuration: {0}")]
    Config(String),
    /// The transaction state of the last run could not be read or finished.
    #[error("recovering the Kafka listener's transactions: {0}")]
    Transactions(#[source] crate::EngineError),
}
