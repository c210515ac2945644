//! CreateAcls, DescribeAcls and DeleteAcls: Kafka's ACL APIs over the authorizer's rules
//! (`meta/acls.json`, the same file `sluice acl` changes). Without an authorizer they
//! answer SECURITY_DISABLED, as Kafka's broker does. The screen (`authz/admin.rs`) has
//! checked Alter (create, delete) or Describe on the cluster first.

use kafka_protocol::messages::{
    CreateAclsRequest, CreateAclsResponse, DeleteAclsRequest, DeleteAclsResponse, DescribeAclsRequest,
    DescribeAclsResponse, create_acls_response, delete_acls_response, describe_acls_response,
};
use kafka_protocol::protocol::StrBytes;

use super::context::Context;
use crate::security::acl::{AclBinding, Operation, PatternType, Permission, ResourceType};

const SECURITY_DISABLED: i16 = 54;
const INVALID_REQUEST: i16 = 42;
const CLUSTER_AUTHORIZATION_FAILED: i16 = 31;
const UNKNOWN_SERVER_ERROR: i16 = -1;

fn text(s: impl Into<String>) -> StrBytes {
    StrBytes::from_string(s.into())
}

/// A rule from the fields of a creation, or why it cannot be one.
fn binding(
    kind: i8,
    name: &str,
    pattern: i8,
    principal: &str,
    host: &str,
    op: i8,
    permission: i8,
) -> Result<AclBinding, String> {
    let resource_type = ResourceType::from_code(kind).ok_or_else(|| format!("resource type {kind}"))?;
    let pattern = match pattern {
        3 => PatternType::Literal,
        4 => PatternType::Prefixed,
        p => return Err(format!("pattern type {p} (LITERAL or PREFIXED only)")),
    };
    let operation = Operation::from_code(op).ok_or_else(|| format!("operation {op}"))?;
    let permission = match permission {
        2 => Permission::Deny,
        3 => Permission::Allow,
        p => return Err(format!("permission type {p}")),
    };
    let b = AclBinding {
        resource_type,
        resource_name: name.to_string(),
        pattern,
        principal: principal.to_string(),
        host: host.to_string(),
        operation,
        permission,
    };
    b.validate().map_err(|e| e.to_string())?;
    Ok(b)
}

/// Handles CreateAcls: each creation stored, or refused with its reason.
pub(crate) fn create(ctx: &Context, req: &CreateAclsRequest) -> CreateAclsResponse {
    let mut resp = CreateAclsResponse::default();
    for c in &req.creations {
        let mut r = create_acls_response::AclCreationResult::default();
        let made = binding(
            c.resource_type,
            c.resource_name.as_str(),
            c.resource_pattern_type,
            c.principal.as_str(),
            c.host.as_str(),
            c.operation,
            c.permission_type,
        );
        match (made, ctx.config.authorizer.as_ref()) {
            (_, None) => r.error_code = SECURITY_DISABLED,
            (Err(e), _) => (r.error_code, r.error_message) = (INVALID_REQUEST, Some(text(e))),
            (Ok(b), Some(a)) => {
                if let Err(e) = a.store().add(&[b]) {
                    (r.error_code, r.error_message) = (UNKNOWN_SERVER_ERROR, Some(text(e.to_string())));
                }
            }
        }
        resp.results.push(r);
    }
    resp
}

/// A filter of DescribeAcls or DeleteAcls.
struct Filter {
    kind: i8,
    name: Option<String>,
    pattern: i8,
    principal: Option<String>,
    host: Option<String>,
    op: i8,
    permission: i8,
}

impl Filter {
    fn matches(&self, b: &AclBinding) -> bool {
        let name_ok = match (self.pattern, &self.name) {
            (_, None) => true,
            // MATCH: the rules that apply to a resource of this name.
            (2, Some(n)) => match b.pattern {
                PatternType::Literal => b.resource_name == *n || b.resource_name == "*",
                PatternType::Prefixed => n.starts_with(&b.resource_name),
            },
            (_, Some(n)) => b.resource_name == *n,
        };
        let pattern_ok = match self.pattern {
            1 | 2 => true,
            p => b.pattern.code() == p,
        };
        (self.kind == 1 || b.resource_type.code() == self.kind)
            && name_ok
            && pattern_ok
            && self.principal.as_ref().is_none_or(|p| *p == b.principal)
            && self.host.as_ref().is_none_or(|h| *h == b.host)
            && (self.op == 1 || b.operation.code() == self.op)
            && (self.permission == 1 || b.permission.code() == self.permission)
    }
}

/// Handles DescribeAcls: the rules the filter matches, grouped by resource pattern.
pub(crate) fn describe(ctx: &Context, req: &DescribeAclsRequest, version: i16) -> DescribeAclsResponse {
    let mut resp = DescribeAclsResponse::default();
    let Some(a) = ctx.config.authorizer.as_ref() else {
        resp.error_code = SECURITY_DISABLED;
        return resp;
    };
    let filter = Filter {
        kind: req.resource_type_filter,
        name: req.resource_name_filter.as_ref().map(|s| s.to_string()),
        pattern: if version == 0 { 3 } else { req.pattern_type_filter },
        principal: req.principal_filter.as_ref().map(|s| s.to_string()),
        host: req.host_filter.as_ref().map(|s| s.to_string()),
        op: req.operation,
        permission: req.permission_type,
    };
    let mut groups: std::collections::BTreeMap<(i8, String, i8), Vec<describe_acls_response::AclDescription>> =
        std::collections::BTreeMap::new();
    for b in a.acls().0.bindings().iter().filter(|b| filter.matches(b)) {
        let mut d = describe_acls_response::AclDescription::default();
        d.principal = text(&b.principal);
        d.host = text(&b.host);
        d.operation = b.operation.code();
        d.permission_type = b.permission.code();
        groups.entry((b.resource_type.code(), b.resource_name.clone(), b.pattern.code())).or_default().push(d);
    }
    for ((kind, name, pattern), acls) in groups {
        let mut r = describe_acls_response::DescribeAclsResource::default();
        (r.resource_type, r.resource_name, r.pattern_type, r.acls) = (kind, text(name), pattern, acls);
        resp.resources.push(r);
    }
    resp
}

/// Handles DeleteAcls: each filter's matching rules removed and listed.
pub(crate) fn delete(ctx: &Context, req: &DeleteAclsRequest, version: i16) -> DeleteAclsResponse {
    let mut resp = DeleteAclsResponse::default();
    for f in &req.filters {
        let mut r = delete_acls_response::DeleteAclsFilterResult::default();
        let Some(a) = ctx.config.authorizer.as_ref() else {
            r.error_code = SECURITY_DISABLED;
            resp.filter_results.push(r);
            continue;
        };
        let filter = Filter {
            kind: f.resource_type_filter,
            name: f.resource_name_filter.as_ref().map(|s| s.to_string()),
            pattern: if version == 0 { 3 } else { f.pattern_type_filter },
            principal: f.principal_filter.as_ref().map(|s| s.to_string()),
            host: f.host_filter.as_ref().map(|s| s.to_string()),
            op: f.operation,
            permission: f.permission_type,
        };
        match a.store().remove(|b| filter.matches(b)) {
            Err(e) => (r.error_code, r.error_message) = (UNKNOWN_SERVER_ERROR, Some(text(e.to_string()))),
            Ok(gone) => {
                for b in gone {
                    let mut m = delete_acls_response::DeleteAclsMatchingAcl::default();
                    (m.resource_type, m.resource_name, m.pattern_type) =
                        (b.resource_type.code(), text(b.resource_name), b.pattern.code());
                    (m.principal, m.host) = (text(b.principal), text(b.host));
                    (m.operation, m.permission_type) = (b.operation.code(), b.permission.code());
                    r.matching_acls.push(m);
                }
            }
        }
        resp.filter_results.push(r);
    }
    resp
}

/// CreateAcls from a principal without Alter on the cluster.
pub(crate) fn create_denied(req: &CreateAclsRequest) -> kafka_protocol::messages::ResponseKind {
    let mut resp = CreateAclsResponse::default();
    for _ in &req.creations {
        let mut r = create_acls_response::AclCreationResult::default();
        r.error_code = CLUSTER_AUTHORIZATION_FAILED;
        resp.results.push(r);
    }
    kafka_protocol::messages::ResponseKind::CreateAcls(resp)
}

/// DeleteAcls from a principal without Alter on the cluster.
pub(crate) fn delete_denied(req: &DeleteAclsRequest) -> kafka_protocol::messages::ResponseKind {
    let mut resp = DeleteAclsResponse::default();
    for _ in &req.filters {
        let mut r = delete_acls_response::DeleteAclsFilterResult::default();
        r.error_code = CLUSTER_AUTHORIZATION_FAILED;
        resp.filter_results.push(r);
    }
    kafka_protocol::messages::ResponseKind::DeleteAcls(resp)
}

/// DescribeAcls from a principal without Describe on the cluster.
pub(crate) fn describe_denied() -> kafka_protocol::messages::ResponseKind {
    let mut resp = DescribeAclsResponse::default();
    resp.error_code = CLUSTER_AUTHORIZATION_FAILED;
    kafka_protocol::messages::ResponseKind::DescribeAcls(resp)
}
