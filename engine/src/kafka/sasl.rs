//! SaslHandshake and SaslAuthenticate: a connection's login on a SASL listener.
//!
//! SaslHandshake names the mechanism, then SaslAuthenticate carries the mechanism's
//! messages: one for PLAIN, two for SCRAM. After a SaslHandshake v0 (older clients, Kafka
//! before 1.0) the messages come bare instead, each in a length-prefixed frame without a
//! request header, and are answered the same way. A
//! login that fails is answered with SASL_AUTHENTICATION_FAILED and the connection closes,
//! as Kafka's broker does; so does a handshake naming a mechanism the listener does not
//! offer. With `max_reauth` set, the success answer says how long the login lasts
//! (`session_lifetime_ms`), and the client logs in again on the same connection before it
//! ends (KIP-368): as the same user only.

use std::time::Instant;

use bytes::Bytes;
use kafka_protocol::messages::{
    SaslAuthenticateRequest, SaslAuthenticateResponse, SaslHandshakeRequest, SaslHandshakeResponse,
};
use kafka_protocol::protocol::StrBytes;

use super::context::Context;
use super::dispatch::Handled;
use super::errors::code;
use super::observe::{Refusal, refused};
use super::session::{Exchange, Session};
use crate::security::scram::{AuthError, ScramServer, parse_plain};
use crate::security::{Mechanism, Principal};

/// Whether the connection goes on after the answer.
pub(crate) enum After {
    Continue,
    Close,
}

/// Handles SaslHandshake.
pub(crate) fn handshake(
    ctx: &Context,
    session: &Session,
    req: &SaslHandshakeRequest,
    version: i16,
) -> (SaslHandshakeResponse, After) {
    let mut resp = SaslHandshakeResponse::default();
    let offered = if ctx.protocol.sasl() { ctx.config.sasl_mechanisms.as_slice() } else { &[] };
    resp.mechanisms = offered.iter().map(|m| StrBytes::from_static_str(m.name())).collect();
    if !ctx.protocol.sasl() {
        resp.error_code = code::ILLEGAL_SASL_STATE;
        return (resp, After::Continue);
    }
    let mut exchange = session.exchange.borrow_mut();
    if !matches!(*exchange, Exchange::Idle) {
        resp.error_code = code::ILLEGAL_SASL_STATE;
        return (resp, After::Close);
    }
    match req.mechanism.as_str().parse::<Mechanism>() {
        Ok(m) if offered.contains(&m) => {
            *exchange = Exchange::Handshaken(m);
            session.set_raw_tokens(version == 0);
            (resp, After::Continue)
        }
        _ => {
            refused(Refusal::AuthenticationFailed);
            ctx.errors.report(format_args!(
                "SASL handshake from {} refused: mechanism {:?} is not offered",
                session.host,
                req.mechanism.as_str()
            ));
            resp.error_code = code::UNSUPPORTED_SASL_MECHANISM;
            (resp, After::Close)
        }
    }
}

/// Handles SaslAuthenticate: the next message of the exchange the handshake began.
pub(crate) fn authenticate(
    ctx: &Context,
    session: &Session,
    req: &SaslAuthenticateRequest,
) -> (SaslAuthenticateResponse, After) {
    let mut resp = SaslAuthenticateResponse::default();
    let exchange = std::mem::replace(&mut *session.exchange.borrow_mut(), Exchange::Idle);
    let step = match exchange {
        Exchange::Idle => {
            resp.error_code = code::ILLEGAL_SASL_STATE;
            resp.error_message = Some(StrBytes::from_static_str("SaslAuthenticate before SaslHandshake"));
            return (resp, After::Close);
        }
        Exchange::Handshaken(Mechanism::Plain) => plain(ctx, &req.auth_bytes).map(|user| (Vec::new(), Some(user))),
        Exchange::Handshaken(m) => scram(ctx, ScramServer::new(m), &req.auth_bytes, session),
        Exchange::Scram(server) => scram(ctx, server, &req.auth_bytes, session),
    };
    match step {
        Ok((out, None)) => {
            resp.auth_bytes = Bytes::from(out);
            (resp, After::Continue)
        }
        Ok((out, Some(user))) => login(ctx, session, user, out, resp),
        Err(e) => fail(ctx, session, &e, resp),
    }
}

/// A bare SASL message after a SaslHandshake v0: answered with the bare reply in a
/// length-prefixed frame; a failed login closes the connection without a reply, as
/// Kafka's broker does.
pub(crate) fn raw_token(ctx: &Context, session: &Session, frame: &[u8]) -> Handled {
    let mut req = SaslAuthenticateRequest::default();
    req.auth_bytes = Bytes::copy_from_slice(frame);
    let (resp, after) = authenticate(ctx, session, &req);
    if matches!(after, After::Close) || resp.error_code != code::NONE {
        return Handled::Close("a failed SASL login (SaslHandshake v0)".into());
    }
    if !matches!(*session.exchange.borrow(), Exchange::Scram(_)) {
        session.set_raw_tokens(false);
    }
    let mut out = Vec::with_capacity(4 + resp.auth_bytes.len());
    out.extend_from_slice(&u32::try_from(resp.auth_bytes.len()).unwrap_or(u32::MAX).to_be_bytes());
    out.extend_from_slice(&resp.auth_bytes);
    Handled::Ready(Ok(Some(out)))
}

/// One SCRAM step; a first step leaves the exchange in the session for the second.
fn scram(
    ctx: &Context,
    mut server: ScramServer,
    message: &[u8],
    session: &Session,
) -> Result<(Vec<u8>, Option<String>), AuthError> {
    let users = current_users(ctx);
    let mechanism = server.mechanism();
    let (out, user) = server.step(message, |u| users.as_ref()?.credential(u, mechanism))?;
    if user.is_none() {
        *session.exchange.borrow_mut() = Exchange::Scram(server);
    }
    Ok((out, user))
}

/// A PLAIN message checked against the user's PLAIN credential.
fn plain(ctx: &Context, message: &[u8]) -> Result<String, AuthError> {
    let (user, password) = parse_plain(message)?;
    let users = current_users(ctx);
    let credential = users.as_ref().and_then(|u| u.credential(&user, Mechanism::Plain));
    match credential {
        None => Err(AuthError::UnknownUser(user)),
        Some(c) if c.verify(Mechanism::Plain, &password) => Ok(user),
        Some(_) => Err(AuthError::BadCredentials(user)),
    }
}

fn current_users(ctx: &Context) -> Option<std::sync::Arc<crate::security::Users>> {
    let (users, error) = ctx.users.as_ref()?.current();
    if let Some(e) = error {
        ctx.errors.report(format_args!("reading the SASL users (the last good copy is used): {e}"));
    }
    Some(users)
}

fn login(
    ctx: &Context,
    session: &Session,
    user: String,
    out: Vec<u8>,
    mut resp: SaslAuthenticateResponse,
) -> (SaslAuthenticateResponse, After) {
    let principal = Principal::user(&user);
    if let Some(before) = session.principal()
        && before != principal
    {
        // KIP-368: a re-authentication may not change who the connection is.
        let e = AuthError::BadCredentials(format!("{user} (the connection logged in as {before})"));
        return fail(ctx, session, &e, resp);
    }
    let lifetime = ctx.config.max_reauth;
    session.logged_in(principal, lifetime.map(|l| Instant::now() + l));
    resp.auth_bytes = Bytes::from(out);
    resp.session_lifetime_ms = lifetime.map_or(0, |l| i64::try_from(l.as_millis()).unwrap_or(i64::MAX));
    (resp, After::Continue)
}

fn fail(
    ctx: &Context,
    session: &Session,
    e: &AuthError,
    mut resp: SaslAuthenticateResponse,
) -> (SaslAuthenticateResponse, After) {
    refused(Refusal::AuthenticationFailed);
    ctx.errors.report(format_args!("SASL authentication from {} failed: {e}", session.host));
    resp.error_code = code::SASL_AUTHENTICATION_FAILED;
    // The client learns only that it failed, not whether the user exists.
    resp.error_message = Some(StrBytes::from_static_str("Authentication failed: invalid credentials"));
    (resp, After::Close)
}
