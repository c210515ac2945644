//! SASL mechanisms: SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802, RFC 7677) on the server's
//! side, and PLAIN (RFC 4616) checked against a stored SCRAM-style credential.
//!
//! A credential is what SCRAM stores: a random salt, an iteration count, and the stored
//! and server keys derived from the password; never the password itself. A PLAIN login
//! derives the same keys from the password it is sent and compares (in constant time).

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use hmac::{Hmac, Mac};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256, Sha512};
use subtle::ConstantTimeEq;

/// A SASL mechanism the listener speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Mechanism {
    /// PLAIN: the password in the clear (use it only over TLS).
    Plain,
    /// SCRAM-SHA-256.
    ScramSha256,
    /// SCRAM-SHA-512.
    ScramSha512,
}

impl Mechanism {
    /// Every mechanism, in the order they are listed to clients.
    pub const ALL: [Mechanism; 3] = [Mechanism::ScramSha512, Mechanism::ScramSha256, Mechanism::Plain];

    /// Kafka's name of it (`sasl.mechanism`).
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Mechanism::Plain => "PLAIN",
            Mechanism::ScramSha256 => "SCRAM-SHA-256",
            Mechanism::ScramSha512 => "SCRAM-SHA-512",
        }
    }

    /// The hash its credentials are derived with (PLAIN's: SHA-512).
    fn hash(self) -> Hash {
        match self {
            Mechanism::ScramSha256 => Hash::Sha256,
            Mechanism::Plain | Mechanism::ScramSha512 => Hash::Sha512,
        }
    }
}

impl std::fmt::Display for Mechanism {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Mechanism {
    type Err = String;

    fn from_str(s: &str) -> Result<Mechanism, String> {
        Mechanism::ALL.into_iter().find(|m| m.name() == s).ok_or_else(|| {
            format!("unknown SASL mechanism {s:?} (sluice speaks SCRAM-SHA-512, SCRAM-SHA-256 and PLAIN)")
        })
    }
}

#[derive(Clone, Copy, Debug)]
enum Hash {
    Sha256,
    Sha512,
}

impl Hash {
    fn digest(self, data: &[u8]) -> Vec<u8> {
        match self {
            Hash::Sha256 => Sha256::digest(data).to_vec(),
            Hash::Sha512 => Sha512::digest(data).to_vec(),
        }
    }

    fn hmac(self, key: &[u8], data: &[u8]) -> Vec<u8> {
        match self {
            Hash::Sha256 => {
                let mut mac = Hmac::<Sha256>::new_from_slice(key).expect("HMAC takes a key of any length");
                mac.update(data);
                mac.finalize().into_bytes().to_vec()
            }
            Hash::Sha512 => {
                let mut mac = Hmac::<Sha512>::new_from_slice(key).expect("HMAC takes a key of any length");
                mac.update(data);
                mac.finalize().into_bytes().to_vec()
            }
        }
    }

    /// RFC 5802's Hi(): PBKDF2 with this hash's HMAC.
    fn hi(self, password: &[u8], salt: &[u8], iterations: u32) -> Vec<u8> {
        match self {
            Hash::Sha256 => pbkdf2::pbkdf2_hmac_array::<Sha256, 32>(password, salt, iterations).to_vec(),
            Hash::Sha512 => pbkdf2::pbkdf2_hmac_array::<Sha512, 64>(password, salt, iterations).to_vec(),
        }
    }
}

/// The fewest iterations a credential may be made with (Kafka's minimum for SCRAM).
pub const MIN_ITERATIONS: u32 = 4096;
/// The most (Kafka's maximum): more makes each login cost the server seconds.
pub const MAX_ITERATIONS: u32 = 16384;

/// What is stored for one user and mechanism: salt, iterations and the two keys.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Credential {
    /// The random salt, base64.
    pub salt: String,
    /// PBKDF2 iterations.
    pub iterations: u32,
    /// H(HMAC(SaltedPassword, "Client Key")), base64.
    pub stored_key: String,
    /// HMAC(SaltedPassword, "Server Key"), base64.
    pub server_key: String,
}

impl std::fmt::Debug for Credential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credential").field("iterations", &self.iterations).finish_non_exhaustive()
    }
}

/// Why a credential could not be made.
#[derive(Debug, thiserror::Error)]
pub enum CredentialError {
    /// The iteration count is outside Kafka's bounds.
    #[error("{0} iterations is outside {MIN_ITERATIONS}..={MAX_ITERATIONS}")]
    Iterations(u32),
    /// An empty password.
    #[error("the password is empty")]
    EmptyPassword,
    /// The OS gave no random bytes.
    #[error("no random bytes for the salt: {0}")]
    Random(String),
}

impl Credential {
    /// A credential for `password` with a fresh random salt.
    ///
    /// # Errors
    ///
    /// An iteration count outside [`MIN_ITERATIONS`]..=[`MAX_ITERATIONS`], an empty
    /// password, or no randomness from the OS.
    pub fn new(mechanism: Mechanism, password: &str, iterations: u32) -> Result<Credential, CredentialError> {
        if !(MIN_ITERATIONS..=MAX_ITERATIONS).contains(&iterations) {
            return Err(CredentialError::Iterations(iterations));
        }
        if password.is_empty() {
            return Err(CredentialError::EmptyPassword);
        }
        let mut salt = [0u8; 32];
        getrandom::fill(&mut salt).map_err(|e| CredentialError::Random(e.to_string()))?;
        Ok(Credential::with_salt(mechanism, password, &salt, iterations))
    }

    fn with_salt(mechanism: Mechanism, password: &str, salt: &[u8], iterations: u32) -> Credential {
        let (stored, server) = keys(mechanism.hash(), password, salt, iterations);
        Credential {
            salt: B64.encode(salt),
            iterations,
            stored_key: B64.encode(stored),
            server_key: B64.encode(server),
        }
    }

    /// A credential from a salted password a client derived itself (Kafka's
    /// AlterUserScramCredentials sends `Hi(password, salt, iterations)`, never the
    /// password).
    ///
    /// # Errors
    ///
    /// An iteration count outside Kafka's bounds, or an empty salt or salted password.
    pub fn from_salted(
        mechanism: Mechanism,
        salt: &[u8],
        salted_password: &[u8],
        iterations: u32,
    ) -> Result<Credential, CredentialError> {
        if !(MIN_ITERATIONS..=MAX_ITERATIONS).contains(&iterations) {
            return Err(CredentialError::Iterations(iterations));
        }
        if salt.is_empty() || salted_password.is_empty() {
            return Err(CredentialError::EmptyPassword);
        }
        let hash = mechanism.hash();
        let client_key = hash.hmac(salted_password, b"Client Key");
        Ok(Credential {
            salt: B64.encode(salt),
            iterations,
            stored_key: B64.encode(hash.digest(&client_key)),
            server_key: B64.encode(hash.hmac(salted_password, b"Server Key")),
        })
    }

    /// Whether `password` is the one this credential was made from (PLAIN's check).
    #[must_use]
    pub fn verify(&self, mechanism: Mechanism, password: &str) -> bool {
        let (Ok(salt), Ok(stored)) = (B64.decode(&self.salt), B64.decode(&self.stored_key)) else {
            return false;
        };
        let (mine, _) = keys(mechanism.hash(), password, &salt, self.iterations);
        mine.ct_eq(&stored).into()
    }
}

/// The stored key and the server key of a password.
fn keys(hash: Hash, password: &str, salt: &[u8], iterations: u32) -> (Vec<u8>, Vec<u8>) {
    let salted = hash.hi(password.as_bytes(), salt, iterations);
    let client_key = hash.hmac(&salted, b"Client Key");
    (hash.digest(&client_key), hash.hmac(&salted, b"Server Key"))
}

/// Why an exchange failed. The client is told only that authentication failed.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum AuthError {
    /// A message that does not follow the mechanism's grammar.
    #[error("malformed {0}")]
    Malformed(&'static str),
    /// Channel binding, or an extension sluice does not support (delegation tokens).
    #[error("unsupported: {0}")]
    Unsupported(&'static str),
    /// No such user, or none with this mechanism.
    #[error("unknown user {0:?}")]
    UnknownUser(String),
    /// The proof or password does not match.
    #[error("invalid credentials for {0:?}")]
    BadCredentials(String),
}

/// The server's side of one SCRAM exchange: client-first in, server-first out,
/// client-final in, server-final out.
#[derive(Debug)]
pub struct ScramServer {
    mechanism: Mechanism,
    state: ScramState,
}

#[derive(Debug)]
enum ScramState {
    Start,
    SentFirst { user: String, credential: Credential, client_first_bare: String, server_first: String, nonce: String },
    Done,
}

impl ScramServer {
    /// A new exchange for a SCRAM mechanism.
    #[must_use]
    pub fn new(mechanism: Mechanism) -> ScramServer {
        ScramServer { mechanism, state: ScramState::Start }
    }

    /// The mechanism of the exchange.
    #[must_use]
    pub fn mechanism(&self) -> Mechanism {
        self.mechanism
    }

    /// The next step: the client's message in, the server's answer out, and the user
    /// once the exchange has succeeded (after the second step). `lookup` finds a user's
    /// credential for this mechanism.
    ///
    /// # Errors
    ///
    /// Why the exchange failed; it cannot go on after an error.
    pub fn step(
        &mut self,
        message: &[u8],
        lookup: impl FnOnce(&str) -> Option<Credential>,
    ) -> Result<(Vec<u8>, Option<String>), AuthError> {
        match std::mem::replace(&mut self.state, ScramState::Done) {
            ScramState::Start => {
                let mut nonce = [0u8; 24];
                getrandom::fill(&mut nonce).map_err(|_| AuthError::Unsupported("no randomness for a nonce"))?;
                self.first(message, &B64.encode(nonce), lookup).map(|out| (out, None))
            }
            ScramState::SentFirst { user, credential, client_first_bare, server_first, nonce } => {
                let exchange = Exchange { user, credential, client_first_bare, server_first, nonce };
                let out = exchange.finish(self.mechanism, message)?;
                Ok((out, Some(exchange.user)))
            }
            ScramState::Done => Err(AuthError::Malformed("message after the exchange ended")),
        }
    }

    fn first(
        &mut self,
        message: &[u8],
        server_nonce: &str,
        lookup: impl FnOnce(&str) -> Option<Credential>,
    ) -> Result<Vec<u8>, AuthError> {
        let text = std::str::from_utf8(message).map_err(|_| AuthError::Malformed("client-first message"))?;
        // gs2-header: no channel binding ("n"), or "y" (the client could bind but thinks
        // the server cannot); an authzid, if given, must be the user itself.
        let (cbind, rest) = text.split_once(',').ok_or(AuthError::Malformed("client-first message"))?;
        let (authzid, bare) = rest.split_once(',').ok_or(AuthError::Malformed("client-first message"))?;
        match cbind {
            "n" | "y" => {}
            _ if cbind.starts_with("p=") => return Err(AuthError::Unsupported("channel binding")),
            _ => return Err(AuthError::Malformed("gs2 header")),
        }
        let mut fields = bare.split(',');
        let user = fields.next().and_then(|f| f.strip_prefix("n=")).ok_or(AuthError::Malformed("user name"))?;
        let user = sasl_name(user)?;
        let client_nonce =
            fields.next().and_then(|f| f.strip_prefix("r=")).ok_or(AuthError::Malformed("client nonce"))?;
        if client_nonce.is_empty() {
            return Err(AuthError::Malformed("client nonce"));
        }
        if fields.any(|f| f.starts_with("tokenauth=")) {
            return Err(AuthError::Unsupported("delegation tokens"));
        }
        if let Some(z) = authzid.strip_prefix("a=")
            && sasl_name(z)? != user
        {
            return Err(AuthError::Unsupported("an authorization id other than the user"));
        }
        let credential = lookup(&user).ok_or_else(|| AuthError::UnknownUser(user.clone()))?;
        let nonce = format!("{client_nonce}{server_nonce}");
        let server_first = format!("r={nonce},s={},i={}", credential.salt, credential.iterations);
        let out = server_first.clone().into_bytes();
        self.state =
            ScramState::SentFirst { user, credential, client_first_bare: bare.to_string(), server_first, nonce };
        Ok(out)
    }
}

struct Exchange {
    user: String,
    credential: Credential,
    client_first_bare: String,
    server_first: String,
    nonce: String,
}

impl Exchange {
    fn finish(&self, mechanism: Mechanism, message: &[u8]) -> Result<Vec<u8>, AuthError> {
        let text = std::str::from_utf8(message).map_err(|_| AuthError::Malformed("client-final message"))?;
        let (without_proof, proof) = text.rsplit_once(",p=").ok_or(AuthError::Malformed("client proof"))?;
        let mut fields = without_proof.split(',');
        let binding =
            fields.next().and_then(|f| f.strip_prefix("c=")).ok_or(AuthError::Malformed("channel binding"))?;
        let binding = B64.decode(binding).map_err(|_| AuthError::Malformed("channel binding"))?;
        // Without channel binding the client sends back its gs2 header.
        if !(binding.starts_with(b"n,") || binding.starts_with(b"y,")) {
            return Err(AuthError::Unsupported("channel binding"));
        }
        let nonce = fields.next().and_then(|f| f.strip_prefix("r=")).ok_or(AuthError::Malformed("nonce"))?;
        // librdkafka before 2.6.1 sends its own nonce once more in front of the one the
        // server sent (its #4895); Kafka accepts a nonce that ends with the right one since
        // 3.8.1 (apache/kafka commit 0a00456), and so does sluice. The proof covers the
        // message as sent.
        if !nonce.ends_with(&self.nonce) {
            return Err(AuthError::BadCredentials(self.user.clone()));
        }
        let proof = B64.decode(proof).map_err(|_| AuthError::Malformed("client proof"))?;
        let hash = mechanism.hash();
        let stored =
            B64.decode(&self.credential.stored_key).map_err(|_| AuthError::BadCredentials(self.user.clone()))?;
        let server_key =
            B64.decode(&self.credential.server_key).map_err(|_| AuthError::BadCredentials(self.user.clone()))?;
        let auth_message = format!("{},{},{}", self.client_first_bare, self.server_first, without_proof);
        let client_signature = hash.hmac(&stored, auth_message.as_bytes());
        if proof.len() != client_signature.len() {
            return Err(AuthError::BadCredentials(self.user.clone()));
        }
        let client_key: Vec<u8> = proof.iter().zip(&client_signature).map(|(a, b)| a ^ b).collect();
        if !bool::from(hash.digest(&client_key).ct_eq(&stored)) {
            return Err(AuthError::BadCredentials(self.user.clone()));
        }
        let server_signature = hash.hmac(&server_key, auth_message.as_bytes());
        Ok(format!("v={}", B64.encode(server_signature)).into_bytes())
    }
}

/// A `saslname` decoded: `=2C` is a comma, `=3D` an equals sign, any other `=` is wrong.
fn sasl_name(s: &str) -> Result<String, AuthError> {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(i) = rest.find('=') {
        out.push_str(&rest[..i]);
        match rest.get(i..i + 3) {
            Some("=2C") => out.push(','),
            Some("=3D") => out.push('='),
            _ => return Err(AuthError::Malformed("user name")),
        }
        rest = &rest[i + 3..];
    }
    out.push_str(rest);
    if out.is_empty() {
        return Err(AuthError::Malformed("user name"));
    }
    Ok(out)
}

/// A PLAIN message (`[authzid] NUL authcid NUL password`) split into the user and the
/// password; an authzid, if given, must be the user.
///
/// # Errors
///
/// A message that is not three NUL-separated UTF-8 parts with a user and a password.
pub fn parse_plain(message: &[u8]) -> Result<(String, String), AuthError> {
    let text = std::str::from_utf8(message).map_err(|_| AuthError::Malformed("PLAIN message"))?;
    let mut parts = text.split('\0');
    let (Some(authzid), Some(user), Some(password), None) = (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(AuthError::Malformed("PLAIN message"));
    };
    if user.is_empty() || password.is_empty() {
        return Err(AuthError::Malformed("PLAIN message"));
    }
    if !authzid.is_empty() && authzid != user {
        return Err(AuthError::Unsupported("an authorization id other than the user"));
    }
    Ok((user.to_string(), password.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 7677's example exchange, byte for byte.
    #[test]
    fn scram_sha_256_follows_the_rfc_7677_example() {
        let salt = B64.decode("W22ZaJ0SNY7soEsUEjb6gQ==").unwrap();
        let credential = Credential::with_salt(Mechanism::ScramSha256, "pencil", &salt, 4096);
        let mut server = ScramServer::new(Mechanism::ScramSha256);
        let first = server
            .first(b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO", "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0", |u| {
                (u == "user").then(|| credential.clone())
            })
            .unwrap();
        assert_eq!(
            String::from_utf8(first).unwrap(),
            "r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
        );
        let last = b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=";
        let (out, user) = server.step(last, |_| None).unwrap();
        assert_eq!(String::from_utf8(out).unwrap(), "v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=");
        assert_eq!(user.as_deref(), Some("user"));
    }

    #[test]
    fn a_wrong_proof_an_unknown_user_and_channel_binding_fail() {
        let salt = B64.decode("W22ZaJ0SNY7soEsUEjb6gQ==").unwrap();
        let credential = Credential::with_salt(Mechanism::ScramSha256, "pencil", &salt, 4096);
        let mut server = ScramServer::new(Mechanism::ScramSha256);
        server.first(b"n,,n=user,r=abc", "def", |_| Some(credential.clone())).unwrap();
        let bad = b"c=biws,r=abcdef,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=";
        assert_eq!(server.step(bad, |_| None).unwrap_err(), AuthError::BadCredentials("user".into()));
        assert!(server.step(bad, |_| None).is_err(), "no step after a failure");
        let mut server = ScramServer::new(Mechanism::ScramSha256);
        assert_eq!(server.step(b"n,,n=nobody,r=abc", |_| None).unwrap_err(), AuthError::UnknownUser("nobody".into()));
        let mut server = ScramServer::new(Mechanism::ScramSha256);
        let refused = server.step(b"p=tls-unique,,n=user,r=abc", |_| Some(credential.clone()));
        assert_eq!(refused.unwrap_err(), AuthError::Unsupported("channel binding"));
        let mut server = ScramServer::new(Mechanism::ScramSha256);
        let token = server.step(b"n,,n=user,r=abc,tokenauth=true", |_| Some(credential.clone()));
        assert_eq!(token.unwrap_err(), AuthError::Unsupported("delegation tokens"));
        for junk in [&b""[..], b"n,,", b"n,,r=abc", b"x,,n=user,r=abc", b"n,,n=a=b,r=abc", b"\xff\xfe"] {
            assert!(ScramServer::new(Mechanism::ScramSha512).step(junk, |_| Some(credential.clone())).is_err());
        }
    }

    #[test]
    fn plain_checks_the_password_against_the_stored_keys() {
        let c = Credential::new(Mechanism::Plain, "s3cret", MIN_ITERATIONS).unwrap();
        assert!(c.verify(Mechanism::Plain, "s3cret"));
        assert!(!c.verify(Mechanism::Plain, "s3cret "));
        assert_eq!(parse_plain(b"\0alice\0pw").unwrap(), ("alice".into(), "pw".into()));
        assert_eq!(parse_plain(b"alice\0alice\0pw").unwrap(), ("alice".into(), "pw".into()));
        assert!(parse_plain(b"bob\0alice\0pw").is_err());
        assert!(parse_plain(b"\0alice\0").is_err());
        assert!(parse_plain(b"alice").is_err());
        assert!(Credential::new(Mechanism::ScramSha512, "x", 100).is_err());
        assert!(Credential::new(Mechanism::ScramSha512, "", 4096).is_err());
        // A client's salted password makes the same keys as the password would.
        let salt = b"salt-of-sixteen!";
        let salted = Hash::Sha512.hi(b"pw", salt, 4096);
        let from_client = Credential::from_salted(Mechanism::ScramSha512, salt, &salted, 4096).unwrap();
        assert_eq!(from_client, Credential::with_salt(Mechanism::ScramSha512, "pw", salt, 4096));
        assert!(Credential::from_salted(Mechanism::ScramSha512, salt, &salted, 1).is_err());
        assert_eq!(sasl_name("a=2Cb=3Dc").unwrap(), "a,b=c");
        assert_eq!("SCRAM-SHA-512".parse::<Mechanism>().unwrap(), Mechanism::ScramSha512);
        assert!("GSSAPI".parse::<Mechanism>().is_err());
    }
}
