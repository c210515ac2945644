//! Authorization of each request against the ACLs (`security::acl`), before its handler
//! runs: as Kafka's broker checks them, per API.
//!
//! A request is screened ([`screen`]): what the principal may not do is taken out of it
//! (a topic of a Produce, a group of a DescribeGroups) and answered with Kafka's
//! authorization error for it (TOPIC_AUTHORIZATION_FAILED, GROUP_AUTHORIZATION_FAILED,
//! TRANSACTIONAL_ID_AUTHORIZATION_FAILED, CLUSTER_AUTHORIZATION_FAILED), put into the
//! handler's response by a patch; a request the principal may not make at all is answered
//! at once with its error and never reaches its handler. Handlers do not know the ACLs.
//! Without an authorizer every request passes untouched. An API the screen does not know
//! closes the connection when an authorizer is set (nothing passes unchecked). Each denial
//! is counted and logged (rate limited).

mod admin;
mod data;
mod groups;

use std::rc::Rc;
use std::sync::Arc;

use kafka_protocol::messages::{RequestKind, ResponseKind};

use super::context::Context;
use super::session::Session;
use crate::security::Principal;
use crate::security::acl::{Acls, Authorizer, Operation, ResourceType};

/// Puts the answers for what was taken out of a request into its handler's response.
pub(crate) type Patch = Box<dyn FnOnce(&mut ResponseKind)>;

/// What the screen made of a request.
pub(crate) enum Screened {
    /// Handle this (what is left of the request), then apply the patch to the response.
    Go(Box<RequestKind>, Option<Patch>),
    /// Answer this at once: nothing of the request is allowed.
    Answer(Box<ResponseKind>),
    /// Close the connection: an API the screen does not know, with an authorizer set.
    Close(String),
}

/// Who asks, from where, and the rules as they are now.
#[derive(Clone)]
pub(crate) struct Authz {
    inner: Option<Rc<Inner>>,
}

struct Inner {
    authorizer: Arc<Authorizer>,
    acls: Arc<Acls>,
    principal: Principal,
    host: String,
    ctx: Arc<Context>,
}

impl Authz {
    /// The checks for a request of `session`'s connection (none without an authorizer).
    pub(crate) fn new(ctx: &Arc<Context>, session: &Session) -> Authz {
        let Some(authorizer) = ctx.config.authorizer.clone() else { return Authz { inner: None } };
        let (acls, error) = authorizer.acls();
        if let Some(e) = error {
            ctx.errors.report(format_args!("reading the ACLs (the last good copy is used): {e}"));
        }
        if !authorizer.enforcing(&acls) {
            return Authz { inner: None };
        }
        let principal = session.principal().unwrap_or_else(Principal::anonymous);
        // Kafka's host in ACLs is the bare address; the session keeps Kafka's `/address`.
        let host = session.host.trim_start_matches('/').to_string();
        Authz { inner: Some(Rc::new(Inner { authorizer, acls, principal, host, ctx: ctx.clone() })) }
    }

    /// Whether an authorizer is set.
    pub(crate) fn on(&self) -> bool {
        self.inner.is_some()
    }

    /// Whether the principal may do `op` on the resource; a denial is counted and logged.
    pub(crate) fn allows(&self, op: Operation, kind: ResourceType, name: &str) -> bool {
        let Some(i) = &self.inner else { return true };
        match i.authorizer.authorize(&i.acls, &i.principal, &i.host, op, kind, name) {
            Ok(()) => true,
            Err(denied) => {
                super::observe::denied();
                i.ctx.errors.report(format_args!("denied: {denied} (from {})", i.host));
                false
            }
        }
    }

    /// Whether the principal may do `op` on the resource, without counting or logging a
    /// denial (for filters that leave out what may not be seen, as Metadata's list).
    pub(crate) fn quietly_allows(&self, op: Operation, kind: ResourceType, name: &str) -> bool {
        let Some(i) = &self.inner else { return true };
        i.authorizer.authorize(&i.acls, &i.principal, &i.host, op, kind, name).is_ok()
    }

    /// Whether the principal may do `op` on the cluster, or on the topic `topic`: Kafka's
    /// rule for creating a topic (Create on either).
    pub(crate) fn allows_on_cluster_or(&self, op: Operation, kind: ResourceType, name: &str) -> bool {
        self.quietly_allows(op, ResourceType::Cluster, crate::security::acl::CLUSTER) || self.allows(op, kind, name)
    }

    /// Whether an idempotent producer may start: IdempotentWrite on the cluster, or Write
    /// on some topic (Kafka's rule since KIP-679).
    pub(crate) fn allows_idempotent_write(&self) -> bool {
        let Some(i) = &self.inner else { return true };
        if self.quietly_allows(Operation::IdempotentWrite, ResourceType::Cluster, crate::security::acl::CLUSTER) {
            return true;
        }
        let topics = i.ctx.engine.list_topics();
        if topics.iter().any(|t| self.quietly_allows(Operation::Write, ResourceType::Topic, t)) {
            return true;
        }
        self.allows(Operation::IdempotentWrite, ResourceType::Cluster, crate::security::acl::CLUSTER)
    }

    /// The listener's context (topic names by id, the ACL store).
    pub(crate) fn ctx(&self) -> Option<&Arc<Context>> {
        self.inner.as_ref().map(|i| &i.ctx)
    }
}

/// Screens a request: see the module documentation.
pub(crate) fn screen(authz: &Authz, request: RequestKind) -> Screened {
    if !authz.on() {
        return Screened::Go(Box::new(request), None);
    }
    match request {
        RequestKind::ApiVersions(_) | RequestKind::SaslHandshake(_) | RequestKind::SaslAuthenticate(_) => {
            Screened::Go(Box::new(request), None)
        }
        RequestKind::Produce(r) => data::produce(authz, r),
        RequestKind::Fetch(r) => data::fetch(authz, r),
        RequestKind::ListOffsets(r) => data::list_offsets(authz, r),
        RequestKind::Metadata(r) => data::metadata(authz, r),
        other => match groups::screen(authz, other) {
            Ok(screened) => screened,
            Err(other) => admin::screen(authz, *other),
        },
    }
}

/// Kafka's authorization error codes.
pub(crate) mod code {
    pub(crate) const TOPIC: i16 = 29;
    pub(crate) const GROUP: i16 = 30;
    pub(crate) const CLUSTER: i16 = 31;
    pub(crate) const TRANSACTIONAL_ID: i16 = 53;
}
