//! `sluice serve`: the engine and its Kafka listener over a data directory.

use std::io::Write;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use clap::Args;
use futures_lite::future::block_on;
use sluice_engine::security::acl::{AclStore, Authorizer};
use sluice_engine::security::{LiveUsers, Mechanism, Principal, SecurityProtocol, TlsSettings, UserStore};
use sluice_engine::{Engine, EngineConfig};

use crate::{DataDir, signals};

#[derive(Debug, Args)]
pub(crate) struct ServeArgs {
    #[command(flatten)]
    dir: DataDir,
    /// A listener: `HOST:PORT` (PLAINTEXT) or `PROTOCOL://HOST:PORT` with Kafka's
    /// PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL; repeat for several (loopback unless told otherwise;
    /// port 0 picks one). Default: 127.0.0.1:9092.
    #[arg(long = "listen", value_name = "[PROTOCOL://]HOST:PORT")]
    listen: Vec<Listen>,
    /// The `HOST:PORT` clients of the first listener are told to connect to, if not its
    /// address.
    #[arg(long, value_name = "HOST:PORT")]
    advertise: Option<String>,
    /// The SASL mechanisms SASL listeners offer (repeat for several; default all three:
    /// SCRAM-SHA-512, SCRAM-SHA-256, PLAIN). Users: `sluice user add`.
    #[arg(long = "sasl-mechanism", value_name = "MECHANISM")]
    sasl_mechanisms: Vec<Mechanism>,
    /// How long a SASL login lasts, in milliseconds (Kafka's connections.max.reauth.ms):
    /// clients re-authenticate before it ends, or their connection is closed. Default:
    /// as long as the connection.
    #[arg(long, value_name = "MS", value_parser = clap::value_parser!(u64).range(1..=i64::MAX as u64))]
    max_reauth_ms: Option<u64>,
    /// The server's certificate chain (PEM, its own first), for SSL and SASL_SSL listeners.
    #[arg(long, value_name = "PEM", requires = "tls_key")]
    tls_cert: Option<std::path::PathBuf>,
    /// The server's private key (PEM), for SSL and SASL_SSL listeners.
    #[arg(long, value_name = "PEM", requires = "tls_cert")]
    tls_key: Option<std::path::PathBuf>,
    /// The CA that signs client certificates (PEM): SSL listeners then require a client
    /// certificate, whose subject names the principal (mutual TLS).
    #[arg(long, value_name = "PEM", requires = "tls_cert")]
    tls_client_ca: Option<std::path::PathBuf>,
    /// Whether requests are checked against the data directory's ACLs (`sluice acl`; deny
    /// wins, a resource no rule names is denied): `auto` (the default) once there is a rule
    /// or a super user, from the next request after the first rule is added; `acl` always
    /// (with no rule, only super users may do anything); `none` never.
    #[arg(long, value_name = "auto|acl|none", default_value = "auto", value_parser = ["auto", "acl", "none"])]
    authorizer: String,
    /// A principal the ACLs do not apply to (`User:NAME`; repeat for several; Kafka's
    /// super.users). Giving one turns the ACLs on under `--authorizer auto`.
    #[arg(long = "super-user", value_name = "User:NAME")]
    super_users: Vec<String>,
    /// Let any principal do anything on a resource no rule names (Kafka's
    /// allow.everyone.if.no.acl.found).
    #[arg(long)]
    allow_everyone_if_no_acl_found: bool,
    /// Serve clients that do not authenticate (PLAINTEXT, or SSL without client
    /// certificates) on an address outside loopback; refused without this.
    #[arg(long)]
    allow_plaintext: bool,
    /// Shards (and listener executors); one per CPU by default.
    #[arg(allow_negative_numbers = true, long)]
    shards: Option<usize>,
    /// Serve connections on the shards' own executors instead of on listener executors of
    /// their own (thread-per-core; see tuning.md for what it measured)
    #[arg(long)]
    on_shards: bool,
    /// How often each shard applies retention, compaction and segment.ms rolls to its
    /// partitions, in milliseconds (Kafka's log.retention.check.interval.ms).
    #[arg(allow_negative_numbers = true, long, value_name = "MS", default_value_t = 300_000, value_parser = clap::value_parser!(u64).range(1..))]
    retention_check_ms: u64,
    /// Partitions of a topic created without a count: auto-created, or by CreateTopics
    /// with -1 (Kafka's num.partitions).
    #[arg(allow_negative_numbers = true, long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    num_partitions: u32,
    /// Whether a client's Metadata request for an unknown topic creates it (Kafka's
    /// auto.create.topics.enable); with false it gets UNKNOWN_TOPIC_OR_PARTITION.
    #[arg(long, value_name = "BOOL", default_value_t = true, action = clap::ArgAction::Set)]
    auto_create_topics: bool,
    /// The longest transaction timeout a transactional producer may ask for, in
    /// milliseconds (Kafka's transaction.max.timeout.ms); a longer one gets
    /// INVALID_TRANSACTION_TIMEOUT.
    #[arg(allow_negative_numbers = true, long, value_name = "MS", default_value_t = 900_000, value_parser = clap::value_parser!(i32).range(1..))]
    transaction_max_timeout_ms: i32,
    /// How long an empty consumer group's first rebalance waits for more members, in
    /// milliseconds (Kafka's group.initial.rebalance.delay.ms, whose built-in default is
    /// 3000); 0 answers a lone consumer at once.
    #[arg(allow_negative_numbers = true, long, value_name = "MS", default_value_t = 0, value_parser = clap::value_parser!(u64).range(0..=i32::MAX as u64))]
    group_initial_rebalance_delay_ms: u64,
    /// Serve Prometheus metrics at http://ADDR/metrics (loopback unless told otherwise;
    /// port 0 picks one); printed as `metrics on ADDR` before `listening on`.
    #[arg(long, value_name = "ADDR")]
    metrics_listen: Option<std::net::SocketAddr>,
}

/// `sluice serve`: the engine and its Kafka listener, until SIGINT or SIGTERM.
pub(crate) fn serve(a: &ServeArgs) -> Result<()> {
    use sluice_engine::kafka::{KafkaConfig, KafkaServer, ListenerConfig};
    let advertise = match &a.advertise {
        None => None,
        Some(s) => {
            let (host, port) = s.rsplit_once(':').with_context(|| format!("--advertise {s:?} is not HOST:PORT"))?;
            let port: u16 = port.parse().with_context(|| format!("--advertise {s:?}: bad port"))?;
            Some((host.to_string(), port))
        }
    };
    let listens = if a.listen.is_empty() { vec![Listen::default()] } else { a.listen.clone() };
    let (first, rest) = listens.split_first().expect("at least one listener");
    if !a.sasl_mechanisms.is_empty() && !listens.iter().any(|l| l.protocol.sasl()) {
        anyhow::bail!("--sasl-mechanism needs a SASL_PLAINTEXT or SASL_SSL listener");
    }
    let tls = match (&a.tls_cert, &a.tls_key) {
        (Some(cert), Some(key)) => {
            Some(TlsSettings::from_pem_files(cert, key, a.tls_client_ca.as_deref()).context("reading the TLS files")?)
        }
        _ => None,
    };
    // Before any thread starts, so every thread inherits the mask and only the wait
    // below sees these signals.
    let signals = signals::block_termination()?;
    let mut config = EngineConfig::new(&a.dir.data_dir);
    config.shards = a.shards;
    config.retention_check = Duration::from_millis(a.retention_check_ms);
    let engine = block_on(Engine::open(config)).with_context(|| format!("opening {}", a.dir.data_dir.display()))?;
    let mut kafka = KafkaConfig::new(first.addr);
    kafka.protocol = first.protocol;
    kafka.more_listeners =
        rest.iter().map(|l| ListenerConfig { addr: l.addr, protocol: l.protocol, advertise: None }).collect();
    kafka.advertise = advertise;
    if !a.sasl_mechanisms.is_empty() {
        kafka.sasl_mechanisms = a.sasl_mechanisms.clone();
    }
    kafka.max_reauth = a.max_reauth_ms.map(Duration::from_millis);
    kafka.allow_plaintext = a.allow_plaintext;
    kafka.tls = tls;
    kafka.authorizer = authorizer(a)?;
    // Kafka's user APIs (Describe/AlterUserScramCredentials) manage them whether or not a
    // listener logs clients in with SASL yet.
    let users = LiveUsers::new(UserStore::at(&a.dir.data_dir)).context("reading the SASL users")?;
    if listens.iter().any(|l| l.protocol.sasl()) && users.current().0.is_empty() {
        eprintln!(
            "sluice serve: no SASL users in {} yet: every SASL login fails until `sluice user add` makes one",
            UserStore::at(&a.dir.data_dir).path().display()
        );
    }
    kafka.users = Some(Arc::new(users));
    kafka.executors = engine.shards();
    kafka.on_shards = a.on_shards;
    kafka.num_partitions = a.num_partitions;
    kafka.auto_create_topics = a.auto_create_topics;
    kafka.transaction_max_timeout_ms = a.transaction_max_timeout_ms;
    kafka.group_initial_rebalance_delay = Duration::from_millis(a.group_initial_rebalance_delay_ms);
    let server = match KafkaServer::start(engine.handle(), kafka) {
        Ok(s) => s,
        Err(e) => {
            let _ = block_on(engine.shutdown());
            return Err(e.into());
        }
    };
    let metrics = match a.metrics_listen.map(|addr| engine.handle().serve_metrics(addr)).transpose() {
        Ok(m) => m,
        Err(e) => {
            server.shutdown();
            let _ = block_on(engine.shutdown());
            return Err(e).context("starting the metrics endpoint");
        }
    };
    if let Some(m) = &metrics {
        println!("metrics on {}", m.local_addr());
    }
    // One line per listener; a PLAINTEXT one without its protocol, as before listeners
    // had protocols.
    for (addr, l) in server.local_addrs().iter().zip(&listens) {
        match l.protocol {
            SecurityProtocol::Plaintext => println!("listening on {addr}"),
            p => println!("listening on {p}://{addr}"),
        }
    }
    std::io::stdout().flush()?;
    let signal = signals::wait(&signals)?;
    eprintln!("sluice serve: signal {signal}, shutting down");
    server.shutdown();
    // The metrics endpoint answers 503 while the engine shuts down, then stops.
    let stopped = block_on(engine.shutdown()).context("shutting down");
    drop(metrics);
    stopped
}

/// One `--listen`: an address and its security protocol.
#[derive(Clone, Debug)]
struct Listen {
    addr: std::net::SocketAddr,
    protocol: SecurityProtocol,
}

impl Default for Listen {
    fn default() -> Listen {
        Listen { addr: ([127, 0, 0, 1], 9092).into(), protocol: SecurityProtocol::Plaintext }
    }
}

impl std::str::FromStr for Listen {
    type Err = String;

    fn from_str(s: &str) -> Result<Listen, String> {
        let (protocol, addr) = match s.split_once("://") {
            Some((p, addr)) => (p.parse::<SecurityProtocol>()?, addr),
            None => (SecurityProtocol::Plaintext, s),
        };
        let addr = addr.parse().map_err(|e| format!("{addr:?} is not HOST:PORT with a numeric host: {e}"))?;
        Ok(Listen { addr, protocol })
    }
}

/// The ACL authorizer `--authorizer` asks for, with its super users.
fn authorizer(a: &ServeArgs) -> Result<Option<Arc<Authorizer>>> {
    if a.authorizer == "none" {
        if !a.super_users.is_empty() || a.allow_everyone_if_no_acl_found {
            anyhow::bail!("--super-user and --allow-everyone-if-no-acl-found mean nothing with --authorizer none");
        }
        return Ok(None);
    }
    let mut supers = Vec::new();
    for s in &a.super_users {
        match s.strip_prefix("User:") {
            Some(name) if !name.is_empty() => supers.push(Principal(s.clone())),
            _ => anyhow::bail!("--super-user {s:?} is not User:NAME"),
        }
    }
    let store = AclStore::at(&a.dir.data_dir);
    let authorizer = Authorizer::new(store, supers, a.allow_everyone_if_no_acl_found).context("reading the ACLs")?;
    let authorizer = if a.authorizer == "auto" { authorizer.only_with_rules() } else { authorizer };
    Ok(Some(Arc::new(authorizer)))
}
