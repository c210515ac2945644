//! DescribeUserScramCredentials and AlterUserScramCredentials: Kafka's APIs over the SASL
//! users (`meta/users.json`, the file `sluice user` changes). Alter takes the salted
//! password a client derived (`Hi(password, salt, iterations)`), never the password. The
//! screen (`authz/admin.rs`) has checked Describe or Alter on the cluster first; without
//! users configured both answer SECURITY_DISABLED.

use kafka_protocol::messages::{
    AlterUserScramCredentialsRequest, AlterUserScramCredentialsResponse, DescribeUserScramCredentialsRequest,
    DescribeUserScramCredentialsResponse, alter_user_scram_credentials_response,
    describe_user_scram_credentials_response,
};
use kafka_protocol::protocol::StrBytes;

use super::context::Context;
use crate::security::Mechanism;
use crate::security::scram::Credential;

const SECURITY_DISABLED: i16 = 54;
const RESOURCE_NOT_FOUND: i16 = 91;
const DUPLICATE_RESOURCE: i16 = 92;
const UNACCEPTABLE_CREDENTIAL: i16 = 93;
const UNSUPPORTED_SASL_MECHANISM: i16 = 33;
const UNKNOWN_SERVER_ERROR: i16 = -1;

fn text(s: impl Into<String>) -> StrBytes {
    StrBytes::from_string(s.into())
}

/// Kafka's SCRAM mechanism codes: 1 SCRAM-SHA-256, 2 SCRAM-SHA-512.
fn mechanism(code: i8) -> Option<Mechanism> {
    match code {
        1 => Some(Mechanism::ScramSha256),
        2 => Some(Mechanism::ScramSha512),
        _ => None,
    }
}

fn code_of(m: Mechanism) -> Option<i8> {
    match m {
        Mechanism::ScramSha256 => Some(1),
        Mechanism::ScramSha512 => Some(2),
        Mechanism::Plain => None,
    }
}

/// Handles DescribeUserScramCredentials: each user's SCRAM mechanisms and iterations.
pub(crate) fn describe(
    ctx: &Context,
    req: &DescribeUserScramCredentialsRequest,
) -> DescribeUserScramCredentialsResponse {
    let mut resp = DescribeUserScramCredentialsResponse::default();
    let Some(users) = ctx.users.as_ref() else {
        resp.error_code = SECURITY_DISABLED;
        return resp;
    };
    let listed = users.current().0.list();
    let scram = |mechs: &[(Mechanism, u32)]| -> Vec<describe_user_scram_credentials_response::CredentialInfo> {
        mechs
            .iter()
            .filter_map(|&(m, iterations)| {
                let mut c = describe_user_scram_credentials_response::CredentialInfo::default();
                c.mechanism = code_of(m)?;
                c.iterations = i32::try_from(iterations).unwrap_or(i32::MAX);
                Some(c)
            })
            .collect()
    };
    let wanted: Vec<String> = match &req.users {
        None => listed.iter().filter(|(_, m)| !scram(m).is_empty()).map(|(n, _)| n.clone()).collect(),
        Some(names) => names.iter().map(|u| u.name.to_string()).collect(),
    };
    for (i, name) in wanted.iter().enumerate() {
        let mut r = describe_user_scram_credentials_response::DescribeUserScramCredentialsResult::default();
        r.user = text(name.clone());
        if wanted[..i].contains(name) {
            (r.error_code, r.error_message) = (DUPLICATE_RESOURCE, Some(text("user asked for twice")));
        } else {
            match listed.iter().find(|(n, _)| n == name).map(|(_, m)| scram(m)).filter(|c| !c.is_empty()) {
                Some(infos) => r.credential_infos = infos,
                None => (r.error_code, r.error_message) = (RESOURCE_NOT_FOUND, Some(text("no SCRAM credential"))),
            }
        }
        resp.results.push(r);
    }
    resp
}

/// Handles AlterUserScramCredentials: deletions, then upsertions, each answered per user.
pub(crate) fn alter(ctx: &Context, req: &AlterUserScramCredentialsRequest) -> AlterUserScramCredentialsResponse {
    let mut resp = AlterUserScramCredentialsResponse::default();
    let mut answer = |user: &StrBytes, error: i16, message: Option<String>| {
        let mut r = alter_user_scram_credentials_response::AlterUserScramCredentialsResult::default();
        (r.user, r.error_code, r.error_message) = (user.clone(), error, message.map(text));
        resp.results.push(r);
    };
    let Some(users) = ctx.users.as_ref() else {
        for name in req.deletions.iter().map(|d| &d.name).chain(req.upsertions.iter().map(|u| &u.name)) {
            answer(name, SECURITY_DISABLED, None);
        }
        return resp;
    };
    let store = users.store();
    for d in &req.deletions {
        let result = match mechanism(d.mechanism) {
            None => Err((UNSUPPORTED_SASL_MECHANISM, format!("mechanism {}", d.mechanism))),
            Some(m) => match store.remove(d.name.as_str(), Some(m)) {
                Ok(true) => Ok(()),
                Ok(false) => Err((RESOURCE_NOT_FOUND, format!("no {m} credential"))),
                Err(e) => Err((UNKNOWN_SERVER_ERROR, e.to_string())),
            },
        };
        match result {
            Ok(()) => answer(&d.name, 0, None),
            Err((code, message)) => answer(&d.name, code, Some(message)),
        }
    }
    for u in &req.upsertions {
        let result = match mechanism(u.mechanism) {
            None => Err((UNSUPPORTED_SASL_MECHANISM, format!("mechanism {}", u.mechanism))),
            Some(m) => {
                let iterations = u32::try_from(u.iterations).unwrap_or(0);
                match Credential::from_salted(m, &u.salt, &u.salted_password, iterations) {
                    Err(e) => Err((UNACCEPTABLE_CREDENTIAL, e.to_string())),
                    Ok(c) => store
                        .set_credential(u.name.as_str(), m, c)
                        .map_err(|e| (UNACCEPTABLE_CREDENTIAL, e.to_string())),
                }
            }
        };
        match result {
            Ok(()) => answer(&u.name, 0, None),
            Err((code, message)) => answer(&u.name, code, Some(message)),
        }
    }
    resp
}
