//! `sluice serve` with a SASL listener beside a plaintext one, against real clients: kcat
//! (Debian's, librdkafka) and confluent-kafka log in with SCRAM-SHA-512, SCRAM-SHA-256 and
//! PLAIN; a wrong password, an unknown user and a client that does not log in read and
//! write nothing; users added while the server runs log in at once, and users survive a
//! restart. The listener's own checks (every API before the login, re-authentication)
//! are engine/tests/kafka_sasl.rs.

mod common;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};

use common::{kcat, script, stop};

fn sluice(args: &[&str], dir: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_sluice")).args(args).arg("--data-dir").arg(dir).output().expect("sluice runs")
}

/// Starts `sluice serve --shards 1` with `options`; returns the child and each
/// listener's address, in `--listen` order, its protocol prefix left out.
fn serve_with(dir: &Path, options: &[&str]) -> (Child, Vec<String>) {
    let mut server = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["serve", "--data-dir"])
        .arg(dir)
        .args(["--shards", "1"])
        .args(options)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("sluice serve starts");
    let mut out = BufReader::new(server.stdout.take().expect("stdout"));
    let addrs = (0..options.iter().filter(|o| **o == "--listen").count())
        .map(|_| {
            let mut l = String::new();
            out.read_line(&mut l).expect("a line");
            let addr = l.trim().strip_prefix("listening on ").unwrap_or_else(|| panic!("{l:?}"));
            addr.rsplit("://").next().unwrap_or(addr).to_string()
        })
        .collect();
    (server, addrs)
}

/// `sluice serve` with a plaintext listener and a SASL_PLAINTEXT one; the child and both
/// addresses.
fn serve(dir: &Path) -> (Child, String, String) {
    let (server, addrs) = serve_with(dir, &["--listen", "127.0.0.1:0", "--listen", "SASL_PLAINTEXT://127.0.0.1:0"]);
    (server, addrs[0].clone(), addrs[1].clone())
}

fn sasl_args<'a>(broker: &'a str, mechanism: &'a str, user: &'a str, password: &'a str) -> Vec<String> {
    [
        "-b",
        broker,
        "-X",
        "security.protocol=SASL_PLAINTEXT",
        "-X",
        &format!("sasl.mechanism={mechanism}"),
        "-X",
        &format!("sasl.username={user}"),
        "-X",
        &format!("sasl.password={password}"),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

fn kcat_with(common: &[String], more: &[&str], stdin: &str) -> Output {
    let mut args: Vec<&str> = common.iter().map(String::as_str).collect();
    args.extend_from_slice(more);
    kcat(&args, stdin)
}

/// The records of `topic`, read through the plaintext listener.
fn records(plain: &str, topic: &str) -> Vec<String> {
    let out = kcat(&["-b", plain, "-C", "-t", topic, "-o", "beginning", "-e", "-q", "-f", "%k=%s\n"], "");
    String::from_utf8_lossy(&out.stdout).lines().map(str::to_string).collect()
}

#[test]
fn sasl_clients_log_in_with_each_mechanism_and_bad_logins_touch_nothing() {
    let dir = common::data_dir("security", "sasl");
    std::fs::create_dir_all(&dir).expect("dir");
    let out = sluice(&["user", "add", "alice", "--password", "alice-secret"], &dir);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let (server, plain, sasl) = serve(&dir);
    // The topic, made through the plaintext (loopback) listener.
    let made = kcat(&["-b", &plain, "-P", "-t", "secure", "-K", ":"], "seed:0\n");
    assert!(made.status.success(), "{}", String::from_utf8_lossy(&made.stderr));
    for mechanism in ["SCRAM-SHA-512", "SCRAM-SHA-256", "PLAIN"] {
        let args = sasl_args(&sasl, mechanism, "alice", "alice-secret");
        let out = kcat_with(&args, &["-P", "-t", "secure", "-K", ":"], &format!("{mechanism}:hello\n"));
        assert!(out.status.success(), "{mechanism}: {}", String::from_utf8_lossy(&out.stderr));
        let read = kcat_with(&args, &["-C", "-t", "secure", "-o", "beginning", "-e", "-q", "-f", "%k\n"], "");
        let keys = String::from_utf8_lossy(&read.stdout);
        assert!(keys.lines().any(|k| k == mechanism), "{mechanism} read back: {keys}");
    }
    assert_eq!(records(&plain, "secure").len(), 4);
    // A wrong password, an unknown user, a client that does not log in: each fails and
    // appends nothing.
    let bad = [
        sasl_args(&sasl, "SCRAM-SHA-512", "alice", "wrong"),
        sasl_args(&sasl, "PLAIN", "alice", "wrong"),
        sasl_args(&sasl, "SCRAM-SHA-256", "mallory", "alice-secret"),
        vec!["-b".to_string(), sasl.clone()],
    ];
    for args in &bad {
        let out = kcat_with(args, &["-P", "-t", "secure", "-K", ":", "-X", "message.timeout.ms=3000"], "bad:1\n");
        assert!(!out.status.success(), "{args:?} produced");
        let read = kcat_with(args, &["-L", "-m", "3"], "");
        assert!(!read.status.success(), "{args:?} read metadata: {}", String::from_utf8_lossy(&read.stdout));
    }
    assert_eq!(records(&plain, "secure").len(), 4, "nothing appended by a failed login");
    // confluent-kafka, with each mechanism and a group consumer, as a user added while
    // the server runs.
    let out = sluice(&["user", "add", "bob", "--password", "bob-secret"], &dir);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    script("confluent_sasl.py", &[&sasl, "secure-py", "bob", "bob-secret"]);
    // Deleting a user: the next login fails.
    let out = sluice(&["user", "delete", "bob"], &dir);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let out = kcat_with(&sasl_args(&sasl, "PLAIN", "bob", "bob-secret"), &["-L", "-m", "3"], "");
    assert!(!out.status.success(), "a deleted user logged in");
    stop(server);
    // The users survive a restart.
    let listed = sluice(&["user", "list"], &dir);
    let text = String::from_utf8_lossy(&listed.stdout);
    assert_eq!(text.lines().filter(|l| l.starts_with("alice\t")).count(), 3, "{text}");
    assert!(!text.contains("bob"), "{text}");
    let (server, _, sasl) = serve(&dir);
    let out = kcat_with(&sasl_args(&sasl, "SCRAM-SHA-512", "alice", "alice-secret"), &["-L", "-m", "5"], "");
    assert!(out.status.success(), "after a restart: {}", String::from_utf8_lossy(&out.stderr));
    stop(server);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn serve_refuses_to_let_anyone_in_from_outside_loopback_unless_told() {
    let dir = common::data_dir("security", "refuse");
    let out = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["serve", "--data-dir"])
        .arg(&dir)
        .args(["--shards", "1", "--listen", "0.0.0.0:0"])
        .output()
        .expect("runs");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
    assert!(err.contains("--allow-plaintext"), "{err}");
    // Security flags no listener would use are refused in one line, not ignored.
    for flags in [&["--sasl-mechanism", "PLAIN"][..], &["--max-reauth-ms", "60000"]] {
        let out = Command::new(env!("CARGO_BIN_EXE_sluice"))
            .args(["serve", "--data-dir"])
            .arg(&dir)
            .args(["--shards", "1", "--listen", "127.0.0.1:0"])
            .args(flags)
            .output()
            .expect("runs");
        assert!(!out.status.success(), "{flags:?} accepted");
        assert_eq!(String::from_utf8_lossy(&out.stderr).trim().lines().count(), 1, "{flags:?}: {out:?}");
    }
    // Users are checked: a bad name, an empty password, too few iterations.
    std::fs::create_dir_all(&dir).expect("dir");
    for args in [
        &["user", "add", "", "--password", "x"][..],
        &["user", "add", "carol", "--password", ""],
        &["user", "add", "carol", "--password", "x", "--iterations", "10"],
        &["user", "add", "carol", "--password", "x", "--mechanism", "GSSAPI"],
        &["user", "delete", "nobody"],
    ] {
        let out = sluice(args, &dir);
        assert!(!out.status.success(), "{args:?} succeeded");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(err.trim().lines().count(), 1, "{args:?}: one line: {err}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// A certificate authority, certificates it signs, and files for them.
struct Pki {
    dir: std::path::PathBuf,
}

impl Pki {
    /// Writes `ca.pem`, `server.pem`/`server.key` (for 127.0.0.1 and localhost),
    /// `writer.pem`/`writer.key` (a client, CN=writer,O=sluice tests), `expired.pem`/
    /// `expired.key` (a client whose certificate ended in 2021) and `stranger.pem`/
    /// `stranger.key` (a client signed by another CA).
    fn make(dir: &Path) -> Pki {
        use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, KeyUsagePurpose};
        std::fs::create_dir_all(dir).expect("pki dir");
        let write = |name: &str, text: String| std::fs::write(dir.join(name), text).expect("write pem");
        let ca_params = |cn: &str| {
            let mut p = CertificateParams::new(Vec::<String>::new()).expect("params");
            p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
            p.distinguished_name.push(DnType::CommonName, cn);
            p.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::DigitalSignature];
            p
        };
        let (ca_key, other_key) = (KeyPair::generate().expect("key"), KeyPair::generate().expect("key"));
        let ca_cert = ca_params("sluice test CA").self_signed(&ca_key).expect("ca");
        write("ca.pem", ca_cert.pem());
        let ca = Issuer::new(ca_params("sluice test CA"), ca_key);
        let other = Issuer::new(ca_params("another CA"), other_key);
        let leaf = |name: &str, sans: Vec<String>, cn: &str, issuer: &Issuer<'_, KeyPair>, expired: bool| {
            let mut p = CertificateParams::new(sans).expect("params");
            p.distinguished_name.push(DnType::OrganizationName, "sluice tests");
            p.distinguished_name.push(DnType::CommonName, cn);
            if expired {
                p.not_before = rcgen::date_time_ymd(2020, 1, 1);
                p.not_after = rcgen::date_time_ymd(2021, 1, 1);
            }
            let key = KeyPair::generate().expect("key");
            write(&format!("{name}.pem"), p.signed_by(&key, issuer).expect("signed").pem());
            write(&format!("{name}.key"), key.serialize_pem());
        };
        leaf("server", vec!["localhost".into(), "127.0.0.1".into()], "localhost", &ca, false);
        leaf("writer", vec![], "writer", &ca, false);
        leaf("expired", vec![], "expired", &ca, true);
        leaf("stranger", vec![], "stranger", &other, false);
        Pki { dir: dir.to_path_buf() }
    }

    fn path(&self, name: &str) -> String {
        self.dir.join(name).display().to_string()
    }

    /// kcat's settings for a client with certificate `name` on an SSL listener.
    fn client(&self, broker: &str, name: &str) -> Vec<String> {
        [
            "-b".to_string(),
            broker.to_string(),
            "-X".into(),
            "security.protocol=SSL".into(),
            "-X".into(),
            format!("ssl.ca.location={}", self.path("ca.pem")),
            "-X".into(),
            format!("ssl.certificate.location={}", self.path(&format!("{name}.pem"))),
            "-X".into(),
            format!("ssl.key.location={}", self.path(&format!("{name}.key"))),
        ]
        .into()
    }
}

#[test]
fn tls_clients_connect_over_sasl_ssl_and_mutual_tls_and_bad_certificates_are_refused() {
    let dir = common::data_dir("security", "tls");
    std::fs::create_dir_all(&dir).expect("dir");
    let pki = Pki::make(&dir.join("pki"));
    let out = sluice(&["user", "add", "alice", "--password", "alice-secret"], &dir);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let (cert, key, ca) = (pki.path("server.pem"), pki.path("server.key"), pki.path("ca.pem"));
    let (server, addrs) = serve_with(
        &dir,
        &[
            ["--listen", "127.0.0.1:0", "--listen", "SASL_SSL://127.0.0.1:0", "--listen", "SSL://127.0.0.1:0"]
                .as_slice(),
            &["--tls-cert", &cert, "--tls-key", &key, "--tls-client-ca", &ca],
        ]
        .concat(),
    );
    let (plain, sasl_ssl, ssl) = (addrs[0].clone(), addrs[1].clone(), addrs[2].clone());
    // SASL_SSL with SCRAM-SHA-512: kcat writes and reads.
    let mut sasl = sasl_args(&sasl_ssl, "SCRAM-SHA-512", "alice", "alice-secret");
    sasl[3] = "security.protocol=SASL_SSL".into();
    sasl.extend(["-X".to_string(), format!("ssl.ca.location={}", pki.path("ca.pem"))]);
    let produced = kcat_with(&sasl, &["-P", "-t", "tls", "-K", ":"], "sasl-ssl:1\n");
    assert!(produced.status.success(), "{}", String::from_utf8_lossy(&produced.stderr));
    let read = kcat_with(&sasl, &["-C", "-t", "tls", "-o", "beginning", "-e", "-q", "-f", "%k\n"], "");
    assert_eq!(String::from_utf8_lossy(&read.stdout).trim(), "sasl-ssl", "{}", String::from_utf8_lossy(&read.stderr));
    // Mutual TLS with the writer's certificate: kcat writes and reads.
    let writer = pki.client(&ssl, "writer");
    let produced = kcat_with(&writer, &["-P", "-t", "tls", "-K", ":"], "mtls:2\n");
    assert!(produced.status.success(), "{}", String::from_utf8_lossy(&produced.stderr));
    assert_eq!(records(&plain, "tls"), ["sasl-ssl=1", "mtls=2"]);
    // confluent-kafka over both.
    let ca = format!("ssl.ca.location={}", pki.path("ca.pem"));
    script("confluent_sasl.py", &[&sasl_ssl, "tls-py", "alice", "alice-secret", "security.protocol=SASL_SSL", &ca]);
    let (cert, key) = (
        format!("ssl.certificate.location={}", pki.path("writer.pem")),
        format!("ssl.key.location={}", pki.path("writer.key")),
    );
    script("confluent_tls.py", &[&ssl, "tls-mtls-py", "security.protocol=SSL", &ca, &cert, &key]);
    // Refused: a plaintext client on each TLS listener, an expired and an untrusted client
    // certificate, and a TLS client without a certificate on the mutual listener.
    let mut no_cert = pki.client(&ssl, "writer");
    no_cert.truncate(6);
    let refused = [
        vec!["-b".to_string(), sasl_ssl.clone()],
        vec!["-b".to_string(), ssl.clone()],
        pki.client(&ssl, "expired"),
        pki.client(&ssl, "stranger"),
        no_cert,
    ];
    for args in &refused {
        let out = kcat_with(args, &["-P", "-t", "tls", "-K", ":", "-X", "message.timeout.ms=3000"], "bad:3\n");
        assert!(!out.status.success(), "{args:?} produced");
        let meta = kcat_with(args, &["-L", "-m", "3"], "");
        assert!(!meta.status.success(), "{args:?} read metadata: {}", String::from_utf8_lossy(&meta.stdout));
    }
    assert_eq!(records(&plain, "tls").len(), 2, "nothing appended by a refused client");
    // The client certificate names the principal the ACLs see: a rule for the writer's
    // subject (the first rule turns the checks on) lets it write `tls`, and nothing else,
    // from this host; a rule for another host does not count.
    // RFC 2253, as `openssl x509 -subject -nameopt RFC2253` and Java's X500Principal write
    // it (rcgen stores the common name first, so it comes last).
    let writer_principal = "User:O=sluice tests,CN=writer";
    acl(
        &dir,
        &["add", "--principal", writer_principal, "--operation", "Write", "--topic", "tls", "--host", "127.0.0.1"],
    );
    acl(
        &dir,
        &["add", "--principal", writer_principal, "--operation", "Write", "--topic", "elsewhere", "--host", "10.9.9.9"],
    );
    acl(&dir, &["add", "--principal", "User:ANONYMOUS", "--operation", "Read", "--topic", "tls"]);
    let ok = kcat_with(&writer, &["-P", "-t", "tls", "-K", ":"], "mtls:4\n");
    assert!(ok.status.success(), "{}", String::from_utf8_lossy(&ok.stderr));
    for t in ["elsewhere", "other"] {
        let denied = kcat_with(&writer, &["-P", "-t", t, "-K", ":", "-X", "message.timeout.ms=3000"], "mtls:5\n");
        assert!(!denied.status.success(), "the writer's certificate wrote {t}");
    }
    assert_eq!(records(&plain, "tls").len(), 3);
    stop(server);
    let _ = std::fs::remove_dir_all(&dir);
}

/// `sluice serve --authorizer acl` with a SASL listener: returns the child and the SASL
/// listener's address.
fn serve_with_acls(dir: &Path) -> (Child, String) {
    let options = ["--listen", "SASL_PLAINTEXT://127.0.0.1:0", "--authorizer", "acl", "--super-user", "User:admin"];
    let (server, addrs) = serve_with(dir, &options);
    (server, addrs[0].clone())
}

fn acl(dir: &Path, args: &[&str]) {
    let mut all = vec!["acl"];
    all.extend_from_slice(args);
    let out = sluice(&all, dir);
    assert!(out.status.success(), "sluice acl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn acls_decide_what_each_principal_may_do_deny_wins_and_they_survive_a_restart() {
    let dir = common::data_dir("security", "acls");
    std::fs::create_dir_all(&dir).expect("dir");
    for (user, pw) in [("admin", "admin-pw"), ("alice", "alice-pw"), ("bob", "bob-pw")] {
        let out = sluice(&["user", "add", user, "--password", pw, "--mechanism", "SCRAM-SHA-512"], &dir);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    }
    acl(&dir, &["add", "--principal", "User:alice", "--operation", "Write", "--topic", "orders"]);
    acl(&dir, &["add", "--principal", "User:alice", "--operation", "Read", "--topic", "orders"]);
    acl(&dir, &["add", "--principal", "User:alice", "--operation", "Read", "--group", "readers"]);
    acl(&dir, &["add", "--principal", "User:*", "--operation", "Read", "--topic", "ord", "--prefixed"]);
    acl(&dir, &["add", "--principal", "User:bob", "--operation", "Read", "--topic", "orders", "--deny"]);
    let (server, addr) = serve_with_acls(&dir);
    let as_user = |u: &str, pw: &str| sasl_args(&addr, "SCRAM-SHA-512", u, pw);
    let (admin, alice, bob) = (as_user("admin", "admin-pw"), as_user("alice", "alice-pw"), as_user("bob", "bob-pw"));
    // The super user makes both topics.
    for t in ["orders", "secret"] {
        let out = kcat_with(&admin, &["-P", "-t", t, "-K", ":"], "seed:0\n");
        assert!(out.status.success(), "admin seeds {t}: {}", String::from_utf8_lossy(&out.stderr));
    }
    let count = |t: &str| {
        let out = kcat_with(&admin, &["-C", "-t", t, "-o", "beginning", "-e", "-q"], "");
        String::from_utf8_lossy(&out.stdout).lines().count()
    };
    // alice writes orders, not secret (TOPIC_AUTHORIZATION_FAILED, nothing appended).
    let out = kcat_with(&alice, &["-P", "-t", "orders", "-K", ":"], "a:1\n");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let out = kcat_with(&alice, &["-P", "-t", "secret", "-K", ":", "-X", "message.timeout.ms=4000"], "a:2\n");
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("Topic authorization failed"), "{out:?}");
    assert_eq!((count("orders"), count("secret")), (2, 1));
    // bob: everyone may read topics starting with "ord", but his deny rule wins.
    let out = kcat_with(&bob, &["-C", "-t", "orders", "-o", "beginning", "-e", "-q", "-m", "5"], "");
    assert_eq!(String::from_utf8_lossy(&out.stdout).lines().count(), 0, "bob read orders");
    let out = kcat_with(&alice, &["-C", "-t", "orders", "-o", "beginning", "-e", "-q"], "");
    assert_eq!(String::from_utf8_lossy(&out.stdout).lines().count(), 2, "alice reads orders");
    // A group needs its own Read rule; a transactional producer its transactional id's
    // Write, which counts from the next request once added.
    script("confluent_acls.py", &[&addr, "alice", "alice-pw", "group-denied", "orders", "strangers"]);
    script("confluent_acls.py", &[&addr, "alice", "alice-pw", "txn-denied", "orders", "tx-alice"]);
    acl(&dir, &["add", "--principal", "User:alice", "--operation", "Write", "--transactional-id", "tx-alice"]);
    script("confluent_acls.py", &[&addr, "alice", "alice-pw", "txn-ok", "orders", "tx-alice"]);
    // Kafka's ACL APIs: the super user may, alice may not.
    script("confluent_acls.py", &[&addr, "admin", "admin-pw", "acl-api", "orders"]);
    script("confluent_acls.py", &[&addr, "alice", "alice-pw", "acl-api-denied", "orders"]);
    // Kafka's user APIs manage the same users.
    script("confluent_acls.py", &[&addr, "admin", "admin-pw", "scram-api", "dave", "dave-pw"]);
    stop(server);
    // After a restart the rules still hold.
    let (server, addr) = serve_with_acls(&dir);
    let alice = sasl_args(&addr, "SCRAM-SHA-512", "alice", "alice-pw");
    let out = kcat_with(&alice, &["-P", "-t", "secret", "-K", ":", "-X", "message.timeout.ms=4000"], "a:3\n");
    assert!(!out.status.success(), "alice wrote secret after a restart");
    let out = kcat_with(&alice, &["-P", "-t", "orders", "-K", ":"], "a:4\n");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    stop(server);
    let listed = sluice(&["acl", "list"], &dir);
    assert_eq!(String::from_utf8_lossy(&listed.stdout).lines().count(), 6);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn acls_turn_on_with_the_first_rule_under_the_default_authorizer() {
    let dir = common::data_dir("security", "acl-auto");
    let (server, plain, _) = serve(&dir);
    // No rule yet: everyone may do everything, as without an authorizer.
    let out = kcat(&["-b", &plain, "-P", "-t", "open", "-K", ":"], "k:1\n");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    // The first rule, added while the server runs, counts from the next request: the
    // anonymous principal may read the topic now, and nothing else.
    acl(&dir, &["add", "--principal", "User:ANONYMOUS", "--operation", "Read", "--topic", "open"]);
    let out = kcat(&["-b", &plain, "-P", "-t", "open", "-K", ":", "-X", "message.timeout.ms=3000"], "k:2\n");
    assert!(!out.status.success(), "written after the first rule");
    assert_eq!(records(&plain, "open"), ["k=1"]);
    // Removing it turns the checks off again.
    acl(&dir, &["remove", "--principal", "User:ANONYMOUS", "--operation", "Read", "--topic", "open"]);
    let out = kcat(&["-b", &plain, "-P", "-t", "open", "-K", ":"], "k:3\n");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    stop(server);
    let _ = std::fs::remove_dir_all(&dir);
}
