//! ACLs: allow and deny rules on topics, groups, transactional ids and the cluster, and
//! the authorizer that applies them as Kafka's `StandardAuthorizer` does.
//!
//! A rule (an [`AclBinding`]) names a resource pattern (type, name, literal or prefixed; the
//! literal name `*` matches every resource of its type), a principal (`User:NAME`, or
//! `User:*` for all), a host (an IP address, or `*`), an operation and allow or deny. A
//! request is allowed when a super user makes it, or when an allow rule matches and no deny
//! rule does (deny wins); Read, Write, Delete and Alter imply Describe, AlterConfigs implies
//! DescribeConfigs, and All stands for every operation. A resource no rule names is denied
//! (Kafka's `allow.everyone.if.no.acl.found=false`) unless the authorizer is told
//! otherwise. The rules live in `meta/acls.json` of the data directory, written as the users
//! file is (`files.rs`) and read again by a running server when it changes.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::{Principal, SecurityError};

/// What a rule protects.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum ResourceType {
    /// A topic.
    Topic,
    /// A consumer group.
    Group,
    /// A transactional id.
    TransactionalId,
    /// The cluster (its name is always `kafka-cluster`).
    Cluster,
}

impl ResourceType {
    /// Kafka's code for it.
    #[must_use]
    pub fn code(self) -> i8 {
        match self {
            ResourceType::Topic => 2,
            ResourceType::Group => 3,
            ResourceType::Cluster => 4,
            ResourceType::TransactionalId => 5,
        }
    }

    /// The type of Kafka's code, if it is one sluice knows.
    #[must_use]
    pub fn from_code(code: i8) -> Option<ResourceType> {
        [ResourceType::Topic, ResourceType::Group, ResourceType::Cluster, ResourceType::TransactionalId]
            .into_iter()
            .find(|t| t.code() == code)
    }
}

/// The cluster resource's one name.
pub const CLUSTER: &str = "kafka-cluster";

/// How a rule's resource name matches.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum PatternType {
    /// The name itself (or every name, for `*`).
    Literal,
    /// Every name that starts with it.
    Prefixed,
}

impl PatternType {
    /// Kafka's code for it.
    #[must_use]
    pub fn code(self) -> i8 {
        match self {
            PatternType::Literal => 3,
            PatternType::Prefixed => 4,
        }
    }
}

/// An operation, by Kafka's names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[allow(missing_docs)]
pub enum Operation {
    All,
    Read,
    Write,
    Create,
    Delete,
    Alter,
    Describe,
    ClusterAction,
    DescribeConfigs,
    AlterConfigs,
    IdempotentWrite,
}

const OPERATIONS: [(Operation, &str, i8); 11] = [
    (Operation::All, "All", 2),
    (Operation::Read, "Read", 3),
    (Operation::Write, "Write", 4),
    (Operation::Create, "Create", 5),
    (Operation::Delete, "Delete", 6),
    (Operation::Alter, "Alter", 7),
    (Operation::Describe, "Describe", 8),
    (Operation::ClusterAction, "ClusterAction", 9),
    (Operation::DescribeConfigs, "DescribeConfigs", 10),
    (Operation::AlterConfigs, "AlterConfigs", 11),
    (Operation::IdempotentWrite, "IdempotentWrite", 12),
];

impl Operation {
    /// Kafka's code for it.
    #[must_use]
    pub fn code(self) -> i8 {
        OPERATIONS.iter().find(|o| o.0 == self).map_or(0, |o| o.2)
    }

    /// The operation of Kafka's code, if it is one sluice knows.
    #[must_use]
    pub fn from_code(code: i8) -> Option<Operation> {
        OPERATIONS.iter().find(|o| o.2 == code).map(|o| o.0)
    }

    /// Kafka's name (`Read`, `DescribeConfigs`, ...).
    #[must_use]
    pub fn name(self) -> &'static str {
        OPERATIONS.iter().find(|o| o.0 == self).map_or("Unknown", |o| o.1)
    }

    /// The operations whose allow rule allows this one: itself, All, and those that
    /// imply it.
    fn allowed_by(self) -> &'static [Operation] {
        use Operation::*;
        match self {
            Describe => &[Describe, Read, Write, Delete, Alter, All],
            DescribeConfigs => &[DescribeConfigs, AlterConfigs, All],
            Read => &[Read, All],
            Write => &[Write, All],
            Create => &[Create, All],
            Delete => &[Delete, All],
            Alter => &[Alter, All],
            ClusterAction => &[ClusterAction, All],
            AlterConfigs => &[AlterConfigs, All],
            IdempotentWrite => &[IdempotentWrite, All],
            All => &[All],
        }
    }
}

impl std::str::FromStr for Operation {
    type Err = String;

    fn from_str(s: &str) -> Result<Operation, String> {
        let key = |x: &str| x.replace(['_', '-'], "").to_ascii_lowercase();
        OPERATIONS.iter().find(|o| key(o.1) == key(s)).map(|o| o.0).ok_or_else(|| {
            let names: Vec<&str> = OPERATIONS.iter().map(|o| o.1).collect();
            format!("unknown operation {s:?} (one of {})", names.join(", "))
        })
    }
}

/// Allow or deny.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Permission {
    /// Deny wins over any allow.
    Deny,
    /// Allows, unless a deny rule matches too.
    Allow,
}

impl Permission {
    /// Kafka's code for it.
    #[must_use]
    pub fn code(self) -> i8 {
        match self {
            Permission::Deny => 2,
            Permission::Allow => 3,
        }
    }
}

/// One rule.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct AclBinding {
    /// What it protects.
    pub resource_type: ResourceType,
    /// The resource name or prefix (`*` with a literal pattern: every one).
    pub resource_name: String,
    /// Literal or prefixed.
    pub pattern: PatternType,
    /// `User:NAME`, or `User:*` for every principal.
    pub principal: String,
    /// An IP address, or `*` for every host.
    pub host: String,
    /// The operation.
    pub operation: Operation,
    /// Allow or deny.
    pub permission: Permission,
}

impl AclBinding {
    /// Checks a rule before it is stored: a `User:` principal, a non-empty resource name,
    /// the cluster named `kafka-cluster`, a host that is `*` or an IP address.
    ///
    /// # Errors
    ///
    /// [`SecurityError::InvalidName`] saying what is wrong.
    pub fn validate(&self) -> Result<(), SecurityError> {
        let bad = |why: String| Err(SecurityError::InvalidName(why));
        match self.principal.strip_prefix("User:") {
            Some(name) if !name.is_empty() => {}
            _ => return bad(format!("principal {:?} is not User:NAME (or User:*)", self.principal)),
        }
        if self.resource_name.is_empty() {
            return bad("an ACL's resource name cannot be empty".into());
        }
        if self.resource_type == ResourceType::Cluster && self.resource_name != CLUSTER {
            return bad(format!("the cluster resource is named {CLUSTER}, not {:?}", self.resource_name));
        }
        if self.host != "*" && self.host.parse::<std::net::IpAddr>().is_err() {
            return bad(format!("host {:?} is neither * nor an IP address", self.host));
        }
        Ok(())
    }

    fn matches_resource(&self, kind: ResourceType, name: &str) -> bool {
        self.resource_type == kind
            && match self.pattern {
                PatternType::Literal => self.resource_name == "*" || self.resource_name == name,
                PatternType::Prefixed => name.starts_with(&self.resource_name),
            }
    }

    fn matches_who(&self, principal: &Principal, host: &str) -> bool {
        (self.principal == principal.0 || self.principal == "User:*") && (self.host == "*" || self.host == host)
    }
}

/// Every rule, as the file held them.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Acls {
    version: u32,
    bindings: Vec<AclBinding>,
}

impl Acls {
    /// The rules, in the order they were added.
    #[must_use]
    pub fn bindings(&self) -> &[AclBinding] {
        &self.bindings
    }
}

/// The ACL file of a data directory.
#[derive(Clone, Debug)]
pub struct AclStore {
    path: PathBuf,
    lock: PathBuf,
}

impl AclStore {
    /// The ACL file of the data directory `data_dir`.
    #[must_use]
    pub fn at(data_dir: &Path) -> AclStore {
        let meta = data_dir.join("meta");
        AclStore { path: meta.join("acls.json"), lock: meta.join("security.lock") }
    }

    /// The file's path.
    #[must_use]
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Reads the rules (none when the file does not exist).
    ///
    /// # Errors
    ///
    /// The file cannot be read, or is not an ACL file.
    pub fn load(&self) -> Result<Acls, SecurityError> {
        super::files::read_json(&self.path)
    }

    /// Adds rules (those already there are kept once); how many were new.
    ///
    /// # Errors
    ///
    /// A rule that does not validate, or the file cannot be written.
    pub fn add(&self, bindings: &[AclBinding]) -> Result<usize, SecurityError> {
        for b in bindings {
            b.validate()?;
        }
        let _lock = super::files::lock(&self.lock)?;
        let mut acls = self.load()?;
        acls.version = 1;
        let before = acls.bindings.len();
        for b in bindings {
            if !acls.bindings.contains(b) {
                acls.bindings.push(b.clone());
            }
        }
        let added = acls.bindings.len() - before;
        if added > 0 {
            super::files::write_json(&self.path, &acls)?;
        }
        Ok(added)
    }

    /// Removes the rules `matches` picks; returns them.
    ///
    /// # Errors
    ///
    /// The file cannot be read or written.
    pub fn remove(&self, matches: impl Fn(&AclBinding) -> bool) -> Result<Vec<AclBinding>, SecurityError> {
        let _lock = super::files::lock(&self.lock)?;
        let mut acls = self.load()?;
        let (gone, kept): (Vec<AclBinding>, Vec<AclBinding>) = acls.bindings.into_iter().partition(|b| matches(b));
        acls.bindings = kept;
        if !gone.is_empty() {
            acls.version = 1;
            super::files::write_json(&self.path, &acls)?;
        }
        Ok(gone)
    }
}

/// The authorizer of a running server: the rules (read again when the file changes), the
/// super users, and what a resource no rule names gets.
#[derive(Debug)]
pub struct Authorizer {
    store: AclStore,
    acls: super::files::Watched<Acls>,
    super_users: Vec<Principal>,
    allow_if_no_acl: bool,
    only_with_rules: bool,
}

/// Why a request was denied, for the log: who, what, on which resource.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Denied {
    /// The principal.
    pub principal: Principal,
    /// The operation.
    pub operation: Operation,
    /// The resource's type.
    pub resource_type: ResourceType,
    /// The resource's name.
    pub resource: String,
}

impl std::fmt::Display for Denied {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} may not {} {:?} {:?}", self.principal, self.operation.name(), self.resource_type, self.resource)
    }
}

impl Authorizer {
    /// An authorizer over the rules of `store`, with `super_users` allowed everything.
    ///
    /// # Errors
    ///
    /// The ACL file exists and cannot be read.
    pub fn new(
        store: AclStore,
        super_users: Vec<Principal>,
        allow_if_no_acl: bool,
    ) -> Result<Authorizer, SecurityError> {
        let acls = super::files::Watched::new(store.path())?;
        Ok(Authorizer { store, acls, super_users, allow_if_no_acl, only_with_rules: false })
    }

    /// Applies the rules only once there are any (or super users): with neither, every
    /// request passes, as without an authorizer. The first rule added, by `sluice acl add`
    /// or CreateAcls, turns the checks on at the next request (`sluice serve`'s default,
    /// `--authorizer auto`).
    #[must_use]
    pub fn only_with_rules(mut self) -> Authorizer {
        self.only_with_rules = true;
        self
    }

    /// Whether the rules are applied now (see [`only_with_rules`](Self::only_with_rules)).
    #[must_use]
    pub fn enforcing(&self, acls: &Acls) -> bool {
        !(self.only_with_rules && self.super_users.is_empty() && acls.bindings.is_empty())
    }

    /// The rules now (read again if the file changed; the last good copy if it cannot be
    /// read, with the error for the log).
    pub fn acls(&self) -> (Arc<Acls>, Option<SecurityError>) {
        self.acls.current()
    }

    /// The store the rules come from (the ACL APIs change it).
    #[must_use]
    pub fn store(&self) -> &AclStore {
        &self.store
    }

    /// Whether `principal`, connected from `host` (an IP address), may do `operation` on
    /// the resource.
    ///
    /// # Errors
    ///
    /// [`Denied`], saying who was denied what.
    pub fn authorize(
        &self,
        acls: &Acls,
        principal: &Principal,
        host: &str,
        operation: Operation,
        resource_type: ResourceType,
        resource: &str,
    ) -> Result<(), Denied> {
        if self.super_users.contains(principal) {
            return Ok(());
        }
        // One pass over the rules, no allocation: this runs for every resource of every
        // request.
        let (mut named, mut denied, mut allowed) = (false, false, false);
        for b in acls.bindings.iter().filter(|b| b.matches_resource(resource_type, resource)) {
            named = true;
            if !b.matches_who(principal, host) {
                continue;
            }
            match b.permission {
                Permission::Deny => denied |= b.operation == operation || b.operation == Operation::All,
                Permission::Allow => allowed |= operation.allowed_by().contains(&b.operation),
            }
        }
        if !denied && (allowed || (!named && self.allow_if_no_acl)) {
            return Ok(());
        }
        Err(Denied { principal: principal.clone(), operation, resource_type, resource: resource.to_string() })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(
        kind: ResourceType,
        name: &str,
        pattern: PatternType,
        who: &str,
        op: Operation,
        p: Permission,
    ) -> AclBinding {
        AclBinding {
            resource_type: kind,
            resource_name: name.into(),
            pattern,
            principal: who.into(),
            host: "*".into(),
            operation: op,
            permission: p,
        }
    }

    #[test]
    fn deny_wins_prefixes_match_and_read_implies_describe() {
        use Operation::*;
        use PatternType::*;
        use Permission::*;
        use ResourceType::*;
        let dir = std::env::temp_dir().join(format!("sluice-acl-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let store = AclStore::at(&dir);
        let rules = [
            rule(Topic, "orders", Literal, "User:alice", Write, Allow),
            rule(Topic, "logs-", Prefixed, "User:*", Read, Allow),
            rule(Topic, "logs-secret", Literal, "User:bob", All, Deny),
            rule(Group, "*", Literal, "User:bob", Read, Allow),
        ];
        assert_eq!(store.add(&rules).unwrap(), 4);
        assert_eq!(store.add(&rules[..1]).unwrap(), 0, "a rule is stored once");
        let auth = Authorizer::new(store.clone(), vec![Principal::user("admin")], false).unwrap();
        let acls = auth.acls().0;
        let (alice, bob, carol) = (Principal::user("alice"), Principal::user("bob"), Principal::user("carol"));
        let can = |p: &Principal, op, kind, name: &str| auth.authorize(&acls, p, "127.0.0.1", op, kind, name).is_ok();
        assert!(can(&alice, Write, Topic, "orders"));
        assert!(can(&alice, Describe, Topic, "orders"), "write implies describe");
        assert!(!can(&alice, Read, Topic, "orders"));
        assert!(!can(&bob, Write, Topic, "orders"));
        assert!(can(&carol, Read, Topic, "logs-app"), "prefixed, every user");
        assert!(can(&bob, Read, Topic, "logs-app"));
        assert!(!can(&bob, Read, Topic, "logs-secret"), "deny wins");
        assert!(can(&carol, Read, Topic, "logs-secret"));
        assert!(can(&bob, Read, Group, "any-group"), "the literal * matches every group");
        assert!(!can(&carol, Read, Group, "any-group"));
        assert!(!can(&carol, Describe, Topic, "unnamed"), "no rule: denied");
        assert!(can(&Principal::user("admin"), Delete, Topic, "orders"), "a super user");
        let open = Authorizer::new(store.clone(), vec![], true).unwrap();
        assert!(open.authorize(&acls, &carol, "h", Describe, Topic, "unnamed").is_ok(), "allow if no ACL found");
        assert!(open.authorize(&acls, &carol, "h", Write, Topic, "orders").is_err(), "but rules still rule");
        // Removing reaches a running authorizer.
        let gone = store.remove(|b| b.permission == Deny).unwrap();
        assert_eq!(gone.len(), 1);
        assert!(auth.authorize(&auth.acls().0, &bob, "h", Read, Topic, "logs-secret").is_ok());
        // Bad rules are refused.
        let mut bad = rules[0].clone();
        bad.principal = "alice".into();
        assert!(store.add(&[bad]).is_err());
        let mut bad = rules[0].clone();
        bad.host = "not-an-ip".into();
        assert!(store.add(&[bad]).is_err());
        let bad = rule(Cluster, "other", Literal, "User:a", Alter, Allow);
        assert!(store.add(&[bad]).is_err());
        assert_eq!("describe_configs".parse::<Operation>().unwrap(), DescribeConfigs);
        assert!("fly".parse::<Operation>().is_err());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
