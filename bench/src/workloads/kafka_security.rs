//! `sluice-bench kafka --security sasl_ssl`: the same kcat producers through a SASL_SSL
//! listener (TLS, then a SCRAM-SHA-512 login) as through the plaintext one, alternating
//! in each round, so the cost of security is a ratio within one run: throughput and the
//! server's CPU per record for both.
//!
//! The certificate authority and the server's certificate are made for the run (rcgen),
//! and the user in the run's data directory; nothing outside the work directory is
//! touched.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use futures_lite::future::block_on;
use serde::Serialize;
use sluice_engine::kafka::{KafkaConfig, KafkaServer, ListenerConfig};
use sluice_engine::{EngineHandle, TopicConfig};

use super::kafka::{KafkaArgs, cpu, stored, through_kcat};
use crate::harness::Table;
use sluice_engine::security::scram::MIN_ITERATIONS;
use sluice_engine::security::{LiveUsers, Mechanism, SecurityProtocol, TlsSettings, UserStore};

/// Which listeners the Kafka run goes through.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Security {
    /// The plaintext listener only.
    Plaintext,
    /// The plaintext listener and a SASL_SSL one (SCRAM-SHA-512), alternating.
    #[value(name = "sasl_ssl")]
    SaslSsl,
}

/// A SASL_SSL listener's setup for the run: its files, and kcat's settings for it.
#[derive(Debug)]
pub(super) struct Secure {
    ca: PathBuf,
    password: String,
}

const USER: &str = "bench";

impl Secure {
    /// Makes the CA, the server's certificate and the user under `dir`, and adds a
    /// SASL_SSL listener to `config`.
    pub(super) fn set_up(dir: &Path, config: &mut KafkaConfig) -> anyhow::Result<Secure> {
        use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, KeyUsagePurpose};
        let pki = dir.join("pki");
        std::fs::create_dir_all(&pki)?;
        let mut ca_params = CertificateParams::new(Vec::<String>::new())?;
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params.distinguished_name.push(DnType::CommonName, "sluice-bench CA");
        ca_params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::DigitalSignature];
        let ca_key = KeyPair::generate()?;
        let ca_cert = ca_params.self_signed(&ca_key)?;
        let ca = Issuer::new(ca_params, ca_key);
        let server_key = KeyPair::generate()?;
        let server = CertificateParams::new(vec!["127.0.0.1".to_string(), "localhost".to_string()])?
            .signed_by(&server_key, &ca)?;
        let (ca_pem, cert, key) = (pki.join("ca.pem"), pki.join("server.pem"), pki.join("server.key"));
        std::fs::write(&ca_pem, ca_cert.pem())?;
        std::fs::write(&cert, server.pem())?;
        std::fs::write(&key, server_key.serialize_pem())?;
        config.tls = Some(TlsSettings::from_pem_files(&cert, &key, None).context("the run's TLS files")?);
        let password = format!("bench-{}", std::process::id());
        let store = UserStore::at(dir);
        store.upsert(USER, &password, &[Mechanism::ScramSha512], MIN_ITERATIONS)?;
        config.users = Some(Arc::new(LiveUsers::new(store)?));
        config.more_listeners.push(ListenerConfig {
            addr: "127.0.0.1:0".parse()?,
            protocol: SecurityProtocol::SaslSsl,
            advertise: None,
        });
        Ok(Secure { ca: ca_pem, password })
    }

    /// kcat's settings for the SASL_SSL listener.
    pub(super) fn kcat_args(&self) -> Vec<String> {
        [
            "security.protocol=SASL_SSL".to_string(),
            format!("ssl.ca.location={}", self.ca.display()),
            "sasl.mechanism=SCRAM-SHA-512".to_string(),
            format!("sasl.username={USER}"),
            format!("sasl.password={}", self.password),
        ]
        .into_iter()
        .flat_map(|x| ["-X".to_string(), x])
        .collect()
    }
}

impl Secure {
    /// One SASL_SSL run of a round: the same kcat producers through the SASL_SSL listener
    /// (`server`'s second), into a fresh topic, its rate and CPU added to `sums`.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn round(
        &self,
        handle: &EngineHandle,
        server: &KafkaServer,
        (round, partitions): (u64, u32),
        args: &KafkaArgs,
        topic: &TopicConfig,
        dir: &Path,
        sums: &mut SecureRounds,
    ) -> anyhow::Result<()> {
        let name = format!("sasl-ssl-{round}");
        block_on(handle.create_topic(&name, partitions, Some(topic.clone())))?;
        let (self_before, children_before) = (cpu(libc::RUSAGE_SELF), cpu(libc::RUSAGE_CHILDREN));
        let addr = server.local_addrs()[1].to_string();
        let (rate, making_inputs) = through_kcat(&addr, &name, args, dir, &self.kcat_args())?;
        sums.rates.push(rate);
        sums.listener_cpu += cpu(libc::RUSAGE_SELF).saturating_sub(self_before).saturating_sub(making_inputs);
        sums.kcat_cpu += cpu(libc::RUSAGE_CHILDREN).saturating_sub(children_before);
        anyhow::ensure!(stored(handle, &name, partitions)? == args.records, "the SASL_SSL run lost records");
        Ok(())
    }
}

/// The SASL_SSL run's figures beside the plaintext run's.
#[derive(Debug, Clone, Default, Serialize)]
pub struct SecureFigures {
    /// Through the SASL_SSL listener with kcat: records per second (the median round).
    pub sasl_ssl_records_per_s: f64,
    /// The median of the rounds' SASL_SSL / plaintext ratios.
    pub sasl_ssl_over_plaintext: f64,
    /// Every round's SASL_SSL rate, in order.
    pub round_sasl_ssl_records_per_s: Vec<f64>,
    /// CPU of this process (engine and listener, TLS included) per record, SASL_SSL run.
    pub sasl_ssl_listener_cpu_us_per_record: f64,
    /// CPU of the kcat processes per record, SASL_SSL run.
    pub sasl_ssl_kcat_cpu_us_per_record: f64,
}

impl SecureFigures {
    /// The report's rows for them.
    pub(super) fn rows(&self, table: &mut Table) {
        table.row("kcat produce via SASL_SSL", format!("{:.0}", self.sasl_ssl_records_per_s), "records/s");
        table.row("SASL_SSL / plaintext", format!("{:.2}", self.sasl_ssl_over_plaintext), "");
        let cpu = format!("{:.3}", self.sasl_ssl_listener_cpu_us_per_record);
        table.row("cpu, listener + engine, SASL_SSL", cpu, "us/record");
        table.row("cpu, kcat, SASL_SSL", format!("{:.3}", self.sasl_ssl_kcat_cpu_us_per_record), "us/record");
    }
}

/// Sums over the rounds of the SASL_SSL runs.
#[derive(Debug, Default)]
pub(super) struct SecureRounds {
    pub(super) rates: Vec<f64>,
    pub(super) listener_cpu: Duration,
    pub(super) kcat_cpu: Duration,
}

impl SecureRounds {
    /// The figures, from the rounds and the plaintext rounds' rates.
    pub(super) fn figures(self, plaintext: &[f64], records: u64) -> SecureFigures {
        let per_record = |d: Duration| d.as_secs_f64() * 1e6 / (records * self.rates.len().max(1) as u64) as f64;
        let ratios: Vec<f64> = self.rates.iter().zip(plaintext).map(|(s, p)| s / p).collect();
        SecureFigures {
            sasl_ssl_records_per_s: crate::harness::median(&self.rates),
            sasl_ssl_over_plaintext: crate::harness::median(&ratios),
            sasl_ssl_listener_cpu_us_per_record: per_record(self.listener_cpu),
            sasl_ssl_kcat_cpu_us_per_record: per_record(self.kcat_cpu),
            round_sasl_ssl_records_per_s: self.rates,
        }
    }
}
