//! The listeners a Kafka server opens: their settings checked before anything starts
//! (ranges, SASL users, TLS settings, no unauthenticated listener outside loopback unless
//! allowed), each listener's advertised address, and the TLS handshake of a connection.

use std::net::SocketAddr;

use super::context::Context;
use super::{KafkaConfig, KafkaError};
use crate::security::{Principal, SecurityProtocol, TlsSettings};

/// Refuses settings out of their ranges, before anything starts.
pub(super) fn validate(config: &KafkaConfig) -> Result<(), KafkaError> {
    if config.executors == 0 || config.executors > 1024 {
        return Err(KafkaError::Config(format!("executors must be within 1..=1024, not {}", config.executors)));
    }
    if config.max_request_bytes < 64 || config.max_request_bytes > (1 << 30) {
        return Err(KafkaError::Config(format!(
            "max_request_bytes must be within 64..=1 GiB, not {}",
            config.max_request_bytes
        )));
    }
    if config.max_in_flight_per_connection == 0 || config.max_connections_per_executor == 0 {
        return Err(KafkaError::Config("in-flight and connection limits must be positive".into()));
    }
    let max = crate::engine::PARTITIONS_MAX;
    if config.num_partitions == 0 || config.num_partitions > max {
        return Err(KafkaError::Config(format!(
            "num_partitions must be within 1..={max}, not {}",
            config.num_partitions
        )));
    }
    if config.transaction_max_timeout_ms < 1 {
        return Err(KafkaError::Config(format!(
            "transaction_max_timeout_ms must be positive, not {}",
            config.transaction_max_timeout_ms
        )));
    }
    let (beat, session) = (config.consumer_heartbeat_interval, config.consumer_session_timeout);
    if beat.is_zero() || beat >= session || beat.as_millis() > i32::MAX as u128 {
        return Err(KafkaError::Config(format!(
            "consumer_heartbeat_interval ({beat:?}) must be positive and below consumer_session_timeout \
             ({session:?}), as Kafka requires"
        )));
    }
    validate_security(config)
}

/// Refuses listeners that cannot work (SASL without users, TLS without certificates) or
/// that would let anyone in from outside the machine without `allow_plaintext`.
fn validate_security(config: &KafkaConfig) -> Result<(), KafkaError> {
    let mut seen = std::collections::HashSet::new();
    for (addr, protocol) in listeners(config) {
        if addr.port() != 0 && !seen.insert(addr) {
            return Err(KafkaError::Config(format!("two listeners on {addr}")));
        }
        if protocol.tls() && config.tls.is_none() {
            return Err(KafkaError::Config(format!(
                "the {protocol} listener on {addr} needs a TLS certificate and key (--tls-cert, --tls-key)"
            )));
        }
        if protocol.sasl() && (config.users.is_none() || config.sasl_mechanisms.is_empty()) {
            return Err(KafkaError::Config(format!(
                "the {protocol} listener on {addr} needs SASL users and at least one mechanism"
            )));
        }
        // SASL authenticates; so does SSL with client certificates (mutual TLS).
        let mutual = config.tls.as_ref().is_some_and(crate::security::TlsSettings::mutual);
        let authenticates = protocol.sasl() || (protocol == SecurityProtocol::Ssl && mutual);
        if !authenticates && !addr.ip().is_loopback() && !config.allow_plaintext {
            return Err(KafkaError::Config(format!(
                "refusing to serve {protocol} on {addr}, outside loopback, to clients that do not \
                 authenticate: use SASL_PLAINTEXT, SASL_SSL or SSL with client certificates there, or allow it explicitly \
                 (sluice serve --allow-plaintext)"
            )));
        }
    }
    // Settings no listener would use are refused, not ignored.
    let all = listeners(config);
    if config.max_reauth.is_some() && !all.iter().any(|(_, p)| p.sasl()) {
        return Err(KafkaError::Config("max_reauth (--max-reauth-ms) needs a SASL listener".into()));
    }
    if config.tls.is_some() && !all.iter().any(|(_, p)| p.tls()) {
        return Err(KafkaError::Config("TLS settings (--tls-cert) need an SSL or SASL_SSL listener".into()));
    }
    if config.tls.as_ref().is_some_and(crate::security::TlsSettings::mutual)
        && !all.iter().any(|(_, p)| *p == SecurityProtocol::Ssl)
    {
        return Err(KafkaError::Config(
            "a client CA (--tls-client-ca) needs an SSL listener (SASL_SSL listeners do not ask for client certificates)"
                .into(),
        ));
    }
    if let Some(reauth) = config.max_reauth
        && (reauth.is_zero() || reauth.as_millis() > i64::MAX as u128)
    {
        return Err(KafkaError::Config(format!("max_reauth must be positive, not {reauth:?}")));
    }
    Ok(())
}

/// Every listener's address and protocol, `listen` first.
pub(super) fn listeners(config: &KafkaConfig) -> Vec<(SocketAddr, SecurityProtocol)> {
    std::iter::once((config.listen, config.protocol))
        .chain(config.more_listeners.iter().map(|l| (l.addr, l.protocol)))
        .collect()
}

/// Every listener's advertised host and port, `listen` first: as configured, or the
/// bound address (`127.0.0.1` for an unspecified one).
pub(super) fn advertised(config: &KafkaConfig, bound: &[SocketAddr]) -> Vec<(String, i32)> {
    let configured = std::iter::once(&config.advertise).chain(config.more_listeners.iter().map(|l| &l.advertise));
    configured
        .zip(bound)
        .map(|(configured, addr)| match configured {
            Some((host, port)) => (host.clone(), i32::from(*port)),
            None if addr.ip().is_unspecified() => ("127.0.0.1".to_string(), i32::from(addr.port())),
            None => (addr.ip().to_string(), i32::from(addr.port())),
        })
        .collect()
}

/// Runs the TLS handshake of a new connection (within `frame_timeout`); the encrypted
/// stream and, on an SSL listener with client certificates, the principal the client's
/// certificate names. `None` (the connection is dropped, the failure logged and counted)
/// if the handshake fails: a plaintext client, an untrusted or expired certificate.
pub(super) async fn tls_handshake(
    ctx: &Context,
    tls: &TlsSettings,
    stream: glommio::net::TcpStream,
    host: &str,
) -> Option<(futures_rustls::server::TlsStream<glommio::net::TcpStream>, Option<Principal>)> {
    let accept = tls.acceptor(ctx.protocol.sasl()).accept(stream);
    let failed = |why: String| {
        super::observe::refused(super::observe::Refusal::TlsHandshake);
        ctx.errors.report(format_args!("TLS handshake with {host} failed: {why}"));
        None
    };
    let stream = match futures_lite::future::or(async { Some(accept.await) }, async {
        glommio::timer::sleep(ctx.config.frame_timeout).await;
        None
    })
    .await
    {
        Some(Ok(s)) => s,
        Some(Err(e)) => return failed(e.to_string()),
        None => return failed(format!("not done within {:?} (frame_timeout)", ctx.config.frame_timeout)),
    };
    let certified = match stream.get_ref().1.peer_certificates().and_then(|c| c.first()) {
        Some(cert) if !ctx.protocol.sasl() => match crate::security::tls::principal_of(cert) {
            Some(p) => Some(p),
            None => return failed("the client certificate's subject cannot be read".into()),
        },
        _ => None,
    };
    Some((stream, certified))
}
