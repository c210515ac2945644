//! Who a Kafka client is: the listeners' security protocols, TLS (`tls.rs`), SASL
//! mechanisms (`scram.rs`), the users they check against (`users.rs`), and what each
//! principal may do (`acl.rs`). The Kafka listener
//! (`kafka/sasl.rs`) runs the exchanges; the `sluice user` command manages the users.
//! Nothing here depends on the listener.

pub mod acl;
pub mod scram;
pub mod tls;
pub mod users;

mod files;

use std::path::PathBuf;

pub use acl::{AclBinding, AclStore, Authorizer};
pub use scram::{Credential, Mechanism};
pub use tls::TlsSettings;
pub use users::{LiveUsers, UserStore, Users};

/// Why a security file or setting was refused.
#[derive(Debug, thiserror::Error)]
pub enum SecurityError {
    /// Reading or writing a file failed.
    #[error("{action} {}: {source}", path.display())]
    Io {
        /// What was being done.
        action: &'static str,
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// A file that is not what it should be.
    #[error("{} is damaged: {reason}", path.display())]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// A user name or other name that cannot be used.
    #[error("{0}")]
    InvalidName(String),
    /// A credential could not be made.
    #[error(transparent)]
    Credential(#[from] scram::CredentialError),
}

/// A listener's security protocol, by Kafka's names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SecurityProtocol {
    /// No encryption, no authentication.
    Plaintext,
    /// TLS; a client certificate, when the listener asks for one, names the principal.
    Ssl,
    /// SASL without encryption.
    SaslPlaintext,
    /// SASL over TLS.
    SaslSsl,
}

impl SecurityProtocol {
    /// Kafka's name.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            SecurityProtocol::Plaintext => "PLAINTEXT",
            SecurityProtocol::Ssl => "SSL",
            SecurityProtocol::SaslPlaintext => "SASL_PLAINTEXT",
            SecurityProtocol::SaslSsl => "SASL_SSL",
        }
    }

    /// Whether clients authenticate with SASL.
    #[must_use]
    pub fn sasl(self) -> bool {
        matches!(self, SecurityProtocol::SaslPlaintext | SecurityProtocol::SaslSsl)
    }

    /// Whether the connection is TLS.
    #[must_use]
    pub fn tls(self) -> bool {
        matches!(self, SecurityProtocol::Ssl | SecurityProtocol::SaslSsl)
    }
}

impl std::fmt::Display for SecurityProtocol {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for SecurityProtocol {
    type Err = String;

    fn from_str(s: &str) -> Result<SecurityProtocol, String> {
        [SecurityProtocol::Plaintext, SecurityProtocol::Ssl, SecurityProtocol::SaslPlaintext, SecurityProtocol::SaslSsl]
            .into_iter()
            .find(|p| p.name().eq_ignore_ascii_case(s))
            .ok_or_else(|| format!("unknown security protocol {s:?} (PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL)"))
    }
}

/// Who a connection acts as, in Kafka's form `User:NAME` (`User:ANONYMOUS` before or
/// without authentication).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Principal(pub String);

impl Principal {
    /// The principal of a connection nobody authenticated on.
    #[must_use]
    pub fn anonymous() -> Principal {
        Principal("User:ANONYMOUS".into())
    }

    /// The principal of a user who authenticated.
    #[must_use]
    pub fn user(name: &str) -> Principal {
        Principal(format!("User:{name}"))
    }
}

impl std::fmt::Display for Principal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}
