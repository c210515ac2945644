//! TLS for the Kafka listener: the server's certificate chain and key from PEM files, and,
//! with a client CA, mutual TLS whose client certificate names the principal.
//!
//! rustls with the ring provider, TLS 1.2 and 1.3. With a client CA, SSL listeners require
//! a client certificate signed by it (Kafka's `ssl.client.auth=required`) and the
//! connection acts as `User:` followed by the certificate's subject, written as Kafka's
//! default principal builder writes it (RFC 2253, most specific first: `User:CN=writer,O=acme`);
//! SASL_SSL listeners do not ask for one (the SASL login names the principal).

use std::path::Path;
use std::sync::Arc;

use rustls::ServerConfig;
use rustls::server::WebPkiClientVerifier;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

use super::{Principal, SecurityError};

/// The listener's TLS settings, ready to accept connections.
#[derive(Clone)]
pub struct TlsSettings {
    /// For SASL_SSL listeners, and SSL ones without a client CA: no client certificate.
    pub(crate) server_auth: Arc<ServerConfig>,
    /// For SSL listeners when a client CA is given: a client certificate it signed.
    pub(crate) mutual: Option<Arc<ServerConfig>>,
}

impl std::fmt::Debug for TlsSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsSettings").field("mutual", &self.mutual.is_some()).finish_non_exhaustive()
    }
}

fn bad(path: &Path, reason: impl std::fmt::Display) -> SecurityError {
    SecurityError::Corrupt { path: path.to_path_buf(), reason: reason.to_string() }
}

fn certificates(path: &Path) -> Result<Vec<CertificateDer<'static>>, SecurityError> {
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| bad(path, format!("not a PEM file of certificates: {e}")))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| bad(path, format!("not a PEM file of certificates: {e}")))?;
    if certs.is_empty() {
        return Err(bad(path, "holds no certificate"));
    }
    Ok(certs)
}

impl TlsSettings {
    /// Reads the server's certificate chain (`cert`, PEM, the server's own first) and
    /// private key (`key`, PEM: PKCS#8, PKCS#1 or SEC1), and the CA that signs client
    /// certificates (`client_ca`, PEM) if mutual TLS is wanted.
    ///
    /// # Errors
    ///
    /// A file that cannot be read or holds nothing usable, or a key that does not match
    /// the certificate.
    pub fn from_pem_files(cert: &Path, key: &Path, client_ca: Option<&Path>) -> Result<TlsSettings, SecurityError> {
        let chain = certificates(cert)?;
        let key_der = PrivateKeyDer::from_pem_file(key).map_err(|e| bad(key, format!("no private key: {e}")))?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = || {
            ServerConfig::builder_with_provider(provider.clone())
                .with_safe_default_protocol_versions()
                .map_err(|e| bad(cert, e))
        };
        let server_auth = builder()?
            .with_no_client_auth()
            .with_single_cert(chain.clone(), key_der.clone_key())
            .map_err(|e| bad(key, format!("does not go with {}: {e}", cert.display())))?;
        let mutual = match client_ca {
            None => None,
            Some(ca) => {
                let mut roots = rustls::RootCertStore::empty();
                for c in certificates(ca)? {
                    roots.add(c).map_err(|e| bad(ca, format!("not a usable CA certificate: {e}")))?;
                }
                let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone())
                    .build()
                    .map_err(|e| bad(ca, e))?;
                let config = builder()?
                    .with_client_cert_verifier(verifier)
                    .with_single_cert(chain, key_der)
                    .map_err(|e| bad(key, format!("does not go with {}: {e}", cert.display())))?;
                Some(Arc::new(config))
            }
        };
        Ok(TlsSettings { server_auth: Arc::new(server_auth), mutual })
    }

    /// Whether SSL listeners require client certificates (a client CA was given).
    #[must_use]
    pub fn mutual(&self) -> bool {
        self.mutual.is_some()
    }

    /// The acceptor for a listener: mutual on SSL when a client CA was given.
    pub(crate) fn acceptor(&self, sasl: bool) -> futures_rustls::TlsAcceptor {
        let config = match (&self.mutual, sasl) {
            (Some(m), false) => m.clone(),
            _ => self.server_auth.clone(),
        };
        futures_rustls::TlsAcceptor::from(config)
    }
}

/// The principal a client certificate names: `User:` and its subject as Kafka writes it
/// (RFC 2253: the most specific RDN first, `,` between them, `+` within one, special
/// characters escaped with `\`). `None` if the certificate cannot be read.
#[must_use]
pub fn principal_of(cert: &[u8]) -> Option<Principal> {
    let (_, parsed) = x509_parser::parse_x509_certificate(cert).ok()?;
    let registry = x509_parser::objects::oid_registry();
    let mut rdns = Vec::new();
    for rdn in parsed.subject().iter() {
        let mut parts = Vec::new();
        for attr in rdn.iter() {
            let name = x509_parser::objects::oid2abbrev(attr.attr_type(), registry)
                .map(str::to_string)
                .unwrap_or_else(|_| attr.attr_type().to_id_string());
            let value = attr.as_str().ok()?;
            parts.push(format!("{name}={}", escape(value)));
        }
        rdns.push(parts.join("+"));
    }
    rdns.reverse();
    Some(Principal(format!("User:{}", rdns.join(","))))
}

/// RFC 2253's escaping of an attribute value.
fn escape(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    let last = value.chars().count().saturating_sub(1);
    for (i, c) in value.chars().enumerate() {
        let special = matches!(c, ',' | '+' | '"' | '\\' | '<' | '>' | ';')
            || (i == 0 && (c == '#' || c == ' '))
            || (i == last && c == ' ');
        if special {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_certificate_names_its_principal_as_kafka_does() {
        let mut params = rcgen::CertificateParams::new(vec!["client".into()]).unwrap();
        params.distinguished_name = rcgen::DistinguishedName::new();
        params.distinguished_name.push(rcgen::DnType::CountryName, "US");
        params.distinguished_name.push(rcgen::DnType::OrganizationName, "Acme, Inc");
        params.distinguished_name.push(rcgen::DnType::CommonName, "writer");
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = params.self_signed(&key).unwrap();
        let p = principal_of(cert.der()).unwrap();
        assert_eq!(p.0, "User:CN=writer,O=Acme\\, Inc,C=US");
        assert!(principal_of(b"not a certificate").is_none());
    }

    #[test]
    fn pem_files_that_do_not_fit_are_refused_with_the_file_named() {
        let dir = std::env::temp_dir().join(format!("sluice-tls-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec!["localhost".into()]).unwrap().self_signed(&key).unwrap();
        let other = rcgen::KeyPair::generate().unwrap();
        let (c, k, o, junk) = (dir.join("c.pem"), dir.join("k.pem"), dir.join("o.pem"), dir.join("junk.pem"));
        std::fs::write(&c, cert.pem()).unwrap();
        std::fs::write(&k, key.serialize_pem()).unwrap();
        std::fs::write(&o, other.serialize_pem()).unwrap();
        std::fs::write(&junk, "hello").unwrap();
        assert!(TlsSettings::from_pem_files(&c, &k, None).is_ok());
        assert!(TlsSettings::from_pem_files(&c, &k, Some(&c)).unwrap().mutual());
        let mismatched = TlsSettings::from_pem_files(&c, &o, None).unwrap_err().to_string();
        assert!(mismatched.contains("o.pem"), "{mismatched}");
        let no_cert = TlsSettings::from_pem_files(&junk, &k, None).unwrap_err().to_string();
        assert!(no_cert.contains("junk.pem"), "{no_cert}");
        assert!(TlsSettings::from_pem_files(&c, &junk, None).is_err());
        assert!(TlsSettings::from_pem_files(&dir.join("missing.pem"), &k, None).is_err());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
