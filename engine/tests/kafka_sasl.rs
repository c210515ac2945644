//! SASL on the Kafka listener over raw TCP: what a connection may do before, during and
//! after its login, re-authentication (KIP-368), and the listener settings refused at
//! start. Real clients (kcat, confluent-kafka) log in through `sluice serve` in the
//! facade's tests/kafka_security.rs.

mod common;

use std::io::{Read, Write};
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use common::kafka::{RawClient, Served};
use futures_lite::future::block_on;
use kafka_protocol::messages::*;
use kafka_protocol::protocol::{Encodable, StrBytes};
use sluice_engine::kafka::KafkaConfig;
use sluice_engine::kafka::dispatch::SUPPORTED;
use sluice_engine::security::scram::MIN_ITERATIONS;
use sluice_engine::security::{LiveUsers, Mechanism, SecurityProtocol, UserStore};
use sluice_engine::{OwnedRecord, TopicConfig};
use sluice_io::{PartitionId, Timestamp};

fn s(x: &str) -> StrBytes {
    StrBytes::from_string(x.to_string())
}

/// A listener speaking SASL_PLAINTEXT, with users alice (pw-a) and bob (pw-b).
fn sasl_served(name: &str, max_reauth: Option<Duration>) -> Served {
    let users_dir = common::data_dir("kafka_sasl_users", name);
    let store = UserStore::at(&users_dir);
    store.upsert("alice", "pw-a", &Mechanism::ALL, MIN_ITERATIONS).expect("alice");
    store.upsert("bob", "pw-b", &[Mechanism::Plain], MIN_ITERATIONS).expect("bob");
    let mut kafka = KafkaConfig::new("127.0.0.1:0".parse().expect("address"));
    kafka.protocol = SecurityProtocol::SaslPlaintext;
    kafka.users = Some(Arc::new(LiveUsers::new(store).expect("users")));
    kafka.max_reauth = max_reauth;
    // The users' directory lives as long as the test's.
    std::mem::forget(users_dir);
    Served::launch("kafka_sasl", name, 1, kafka)
}

fn handshake(c: &mut RawClient, mechanism: &str) -> SaslHandshakeResponse {
    let mut req = SaslHandshakeRequest::default();
    req.mechanism = s(mechanism);
    c.call(ApiKey::SaslHandshake, 1, &req)
}

fn authenticate(c: &mut RawClient, message: &[u8]) -> SaslAuthenticateResponse {
    let mut req = SaslAuthenticateRequest::default();
    req.auth_bytes = Bytes::copy_from_slice(message);
    c.call(ApiKey::SaslAuthenticate, 2, &req)
}

fn login_plain(c: &mut RawClient, user: &str, password: &str) -> SaslAuthenticateResponse {
    assert_eq!(handshake(c, "PLAIN").error_code, 0);
    authenticate(c, format!("\0{user}\0{password}").as_bytes())
}

/// Metadata of every topic.
fn metadata(c: &mut RawClient) -> MetadataResponse {
    let mut req = MetadataRequest::default();
    req.topics = None;
    c.call(ApiKey::Metadata, 12, &req)
}

/// Whether the server closed the connection (rather than answer) within 10 s.
fn closed(stream: &mut std::net::TcpStream) -> bool {
    stream.set_read_timeout(Some(Duration::from_secs(10))).expect("timeout");
    let mut b = [0u8; 1];
    match stream.read(&mut b) {
        Ok(0) => true,
        Ok(_) => false,
        Err(e) => matches!(e.kind(), std::io::ErrorKind::ConnectionReset | std::io::ErrorKind::BrokenPipe),
    }
}

/// A request body of `api` at `version`: for the ones with an effect, one that would
/// have it (create a topic, delete one, append, delete records, add partitions).
fn request(api: ApiKey, version: i16) -> Vec<u8> {
    let mut buf = BytesMut::new();
    let topic = TopicName(s("kept"));
    let r = match api {
        ApiKey::Produce => {
            let mut p = produce_request::PartitionProduceData::default();
            let mut batch = BytesMut::new();
            kafka_protocol::records::RecordBatchEncoder::encode(
                &mut batch,
                &[kafka_protocol::records::Record {
                    transactional: false,
                    control: false,
                    partition_leader_epoch: 0,
                    producer_id: -1,
                    producer_epoch: -1,
                    timestamp_type: kafka_protocol::records::TimestampType::Creation,
                    offset: 0,
                    sequence: -1,
                    timestamp: 1,
                    key: None,
                    value: Some(Bytes::from_static(b"sneaked in")),
                    headers: Default::default(),
                    delete_horizon: false,
                }],
                &kafka_protocol::records::RecordEncodeOptions {
                    version: 2,
                    compression: kafka_protocol::records::Compression::None,
                },
            )
            .expect("batch");
            p.records = Some(batch.freeze());
            let mut t = produce_request::TopicProduceData::default();
            t.name = topic;
            t.partition_data = vec![p];
            let mut r = ProduceRequest::default();
            r.acks = -1;
            r.timeout_ms = 1000;
            r.topic_data = vec![t];
            r.encode(&mut buf, version).map_err(|e| e.to_string())
        }
        ApiKey::CreateTopics => {
            let mut t = create_topics_request::CreatableTopic::default();
            t.name = TopicName(s("made"));
            t.num_partitions = 1;
            t.replication_factor = 1;
            let mut r = CreateTopicsRequest::default();
            r.topics = vec![t];
            r.timeout_ms = 1000;
            r.encode(&mut buf, version).map_err(|e| e.to_string())
        }
        ApiKey::DeleteTopics => {
            let mut r = DeleteTopicsRequest::default();
            if version >= 6 {
                let mut t = delete_topics_request::DeleteTopicState::default();
                t.name = Some(topic);
                r.topics = vec![t];
            } else {
                r.topic_names = vec![topic];
            }
            r.encode(&mut buf, version).map_err(|e| e.to_string())
        }
        ApiKey::DeleteRecords => {
            let mut p = delete_records_request::DeleteRecordsPartition::default();
            p.offset = 1;
            let mut t = delete_records_request::DeleteRecordsTopic::default();
            t.name = topic;
            t.partitions = vec![p];
            let mut r = DeleteRecordsRequest::default();
            r.topics = vec![t];
            r.encode(&mut buf, version).map_err(|e| e.to_string())
        }
        ApiKey::CreatePartitions => {
            let mut t = create_partitions_request::CreatePartitionsTopic::default();
            t.name = topic;
            t.count = 3;
            let mut r = CreatePartitionsRequest::default();
            r.topics = vec![t];
            r.encode(&mut buf, version).map_err(|e| e.to_string())
        }
        other => default_request(other, &mut buf, version),
    };
    r.unwrap_or_else(|e| panic!("encoding {api:?} v{version}: {e}"));
    buf.to_vec()
}

/// Encodes the default request of `api`.
fn default_request(api: ApiKey, buf: &mut BytesMut, version: i16) -> Result<(), String> {
    macro_rules! each {
        ($($key:ident => $ty:ty),* $(,)?) => {
            match api {
                $(ApiKey::$key => <$ty>::default().encode(buf, version).map_err(|e| e.to_string()),)*
                other => panic!("no request for {other:?}"),
            }
        };
    }
    each!(
        Fetch => FetchRequest,
        ListOffsets => ListOffsetsRequest,
        Metadata => MetadataRequest,
        OffsetCommit => OffsetCommitRequest,
        OffsetFetch => OffsetFetchRequest,
        FindCoordinator => FindCoordinatorRequest,
        JoinGroup => JoinGroupRequest,
        Heartbeat => HeartbeatRequest,
        LeaveGroup => LeaveGroupRequest,
        SyncGroup => SyncGroupRequest,
        DescribeGroups => DescribeGroupsRequest,
        ListGroups => ListGroupsRequest,
        InitProducerId => InitProducerIdRequest,
        AddPartitionsToTxn => AddPartitionsToTxnRequest,
        AddOffsetsToTxn => AddOffsetsToTxnRequest,
        EndTxn => EndTxnRequest,
        TxnOffsetCommit => TxnOffsetCommitRequest,
        DescribeConfigs => DescribeConfigsRequest,
        AlterConfigs => AlterConfigsRequest,
        IncrementalAlterConfigs => IncrementalAlterConfigsRequest,
        DescribeCluster => DescribeClusterRequest,
        DeleteGroups => DeleteGroupsRequest,
        OffsetDelete => OffsetDeleteRequest,
        ConsumerGroupHeartbeat => ConsumerGroupHeartbeatRequest,
        ConsumerGroupDescribe => ConsumerGroupDescribeRequest,
        DescribeUserScramCredentials => DescribeUserScramCredentialsRequest,
        AlterUserScramCredentials => AlterUserScramCredentialsRequest,
    )
}

#[test]
fn every_api_before_sasl_authentication_is_refused_unanswered_and_without_effect() {
    let served = sasl_served("before_auth", None);
    let h = served.handle();
    seed_kept(&h);
    let free = [ApiKey::ApiVersions, ApiKey::SaslHandshake, ApiKey::SaslAuthenticate];
    let mut sent = 0;
    for (api, min, mut stream) in send_each_api(&served, &free) {
        assert!(closed(&mut stream), "{api:?} v{min} before authentication was answered");
        sent += 1;
    }
    assert!(sent >= 30, "{sent} APIs tried");
    assert_kept_unchanged(&h);
    // ApiVersions is answered before authentication, and a login then opens the rest.
    let mut c = RawClient::connect(served.addr(), "late");
    let versions: ApiVersionsResponse = c.call(ApiKey::ApiVersions, 3, &ApiVersionsRequest::default());
    assert_eq!(versions.error_code, 0);
    assert_eq!(login_plain(&mut c, "alice", "pw-a").error_code, 0);
    assert_eq!(metadata(&mut c).topics.len(), 1);
}

#[test]
fn a_failed_login_is_answered_then_the_connection_closes() {
    let served = sasl_served("failures", None);
    // Wrong password, unknown user, a user without the mechanism (bob has PLAIN only).
    for (mechanism, message) in [
        ("PLAIN", &b"\0alice\0wrong"[..]),
        ("PLAIN", b"\0mallory\0pw"),
        ("PLAIN", b"bob\0alice\0pw-a"),
        ("SCRAM-SHA-512", b"n,,n=bob,r=abcdefgh"),
        ("SCRAM-SHA-256", b"junk"),
    ] {
        let mut c = RawClient::connect(served.addr(), "bad");
        assert_eq!(handshake(&mut c, mechanism).error_code, 0);
        let resp = authenticate(&mut c, message);
        assert_eq!(resp.error_code, 58, "{mechanism} {message:?}: SASL_AUTHENTICATION_FAILED");
        let mut stream = c.into_stream();
        assert!(closed(&mut stream), "{mechanism} {message:?}: closed after the failure");
    }
    // A mechanism not offered: UNSUPPORTED_SASL_MECHANISM with the list, then closed.
    let mut c = RawClient::connect(served.addr(), "gssapi");
    let resp = handshake(&mut c, "GSSAPI");
    assert_eq!(resp.error_code, 33);
    let offered: Vec<&str> = resp.mechanisms.iter().map(|m| m.as_str()).collect();
    assert_eq!(offered, ["SCRAM-SHA-512", "SCRAM-SHA-256", "PLAIN"]);
    assert!(closed(&mut c.into_stream()));
    // SaslAuthenticate before SaslHandshake: ILLEGAL_SASL_STATE, then closed.
    let mut c = RawClient::connect(served.addr(), "early");
    assert_eq!(authenticate(&mut c, b"\0alice\0pw-a").error_code, 34);
    assert!(closed(&mut c.into_stream()));
    // The listener still serves a good login.
    let mut c = RawClient::connect(served.addr(), "good");
    assert_eq!(login_plain(&mut c, "alice", "pw-a").error_code, 0);
    assert_eq!(metadata(&mut c).brokers.len(), 1);
}

#[test]
fn re_authentication_kip_368_renews_a_login_and_an_expired_one_closes_the_connection() {
    let lifetime = Duration::from_millis(600);
    let served = sasl_served("reauth", Some(lifetime));
    let mut c = RawClient::connect(served.addr(), "reauth");
    let resp = login_plain(&mut c, "alice", "pw-a");
    assert_eq!((resp.error_code, resp.session_lifetime_ms), (0, 600));
    assert_eq!(metadata(&mut c).brokers.len(), 1);
    std::thread::sleep(lifetime + Duration::from_millis(100));
    // Expired, but a re-authentication on the same connection is still allowed...
    assert_eq!(login_plain(&mut c, "alice", "pw-a").error_code, 0);
    assert_eq!(metadata(&mut c).brokers.len(), 1, "renewed");
    // ...as the same user only.
    let resp = login_plain(&mut c, "bob", "pw-b");
    assert_eq!(resp.error_code, 58, "a re-authentication may not change the principal");
    assert!(closed(&mut c.into_stream()));
    // A connection that lets its login expire is closed at its next request.
    let mut c = RawClient::connect(served.addr(), "lapsed");
    assert_eq!(login_plain(&mut c, "alice", "pw-a").error_code, 0);
    std::thread::sleep(lifetime + Duration::from_millis(100));
    let mut header = RequestHeader::default();
    header.request_api_key = ApiKey::Metadata as i16;
    header.request_api_version = 12;
    let mut buf = BytesMut::new();
    header.encode(&mut buf, ApiKey::Metadata.request_header_version(12)).expect("header");
    MetadataRequest::default().encode(&mut buf, 12).expect("body");
    let mut frame = (buf.len() as i32).to_be_bytes().to_vec();
    frame.extend_from_slice(&buf);
    let mut stream = c.into_stream();
    stream.write_all(&frame).expect("send");
    assert!(closed(&mut stream), "an expired login's request closes the connection");
}

#[test]
fn listeners_that_cannot_work_or_would_let_anyone_in_are_refused_at_start() {
    let dir = common::data_dir("kafka_sasl", "refused");
    let engine = block_on(sluice_engine::Engine::open(sluice_engine::EngineConfig {
        shards: Some(1),
        ..sluice_engine::EngineConfig::new(&*dir)
    }))
    .expect("engine");
    let start = |kafka: KafkaConfig| sluice_engine::kafka::KafkaServer::start(engine.handle(), kafka);
    // PLAINTEXT outside loopback: refused, unless allowed.
    let open = KafkaConfig::new("0.0.0.0:0".parse().unwrap());
    let err = start(open.clone()).expect_err("refused").to_string();
    assert!(err.contains("allow-plaintext") && err.contains("0.0.0.0"), "{err}");
    let mut allowed = open;
    allowed.allow_plaintext = true;
    start(allowed).expect("allowed explicitly").shutdown();
    // SASL outside loopback needs no permission, but needs users.
    let mut sasl = KafkaConfig::new("0.0.0.0:0".parse().unwrap());
    sasl.protocol = SecurityProtocol::SaslPlaintext;
    let err = start(sasl.clone()).expect_err("no users").to_string();
    assert!(err.contains("SASL users"), "{err}");
    sasl.users = Some(Arc::new(LiveUsers::new(UserStore::at(&dir)).expect("users")));
    let server = start(sasl).expect("SASL outside loopback");
    server.shutdown();
    // A second listener on the same port as the first, and TLS (not built yet).
    let mut two = KafkaConfig::new("127.0.0.1:19999".parse().unwrap());
    two.more_listeners.push(sluice_engine::kafka::ListenerConfig {
        addr: "127.0.0.1:19999".parse().unwrap(),
        protocol: SecurityProtocol::Plaintext,
        advertise: None,
    });
    assert!(start(two).expect_err("same port twice").to_string().contains("two listeners"));
    let mut tls = KafkaConfig::new("127.0.0.1:0".parse().unwrap());
    tls.protocol = SecurityProtocol::SaslSsl;
    assert!(start(tls).expect_err("no TLS yet").to_string().contains("TLS"));
    // Settings no listener would use are refused, not ignored.
    let mut reauth = KafkaConfig::new("127.0.0.1:0".parse().unwrap());
    reauth.max_reauth = Some(Duration::from_secs(60));
    assert!(start(reauth).expect_err("no SASL listener").to_string().contains("max_reauth"));
    block_on(engine.shutdown()).expect("shutdown");
}

#[test]
fn with_acls_on_every_api_is_answered_for_a_principal_without_rules_and_nothing_changes() {
    let rules_dir = common::data_dir("kafka_sasl_acls", "none");
    let authorizer =
        sluice_engine::security::Authorizer::new(sluice_engine::security::AclStore::at(&rules_dir), vec![], false)
            .expect("authorizer");
    let mut kafka = KafkaConfig::new("127.0.0.1:0".parse().expect("address"));
    kafka.authorizer = Some(Arc::new(authorizer));
    let served = Served::launch("kafka_sasl", "acls_none", 1, kafka);
    let h = served.handle();
    seed_kept(&h);
    let mut answered = 0;
    for (api, min, mut stream) in send_each_api(&served, &[ApiKey::SaslHandshake, ApiKey::SaslAuthenticate]) {
        let mut size = [0u8; 4];
        stream.read_exact(&mut size).unwrap_or_else(|e| panic!("{api:?} v{min} was not answered: {e}"));
        answered += 1;
    }
    assert!(answered >= 33, "{answered} APIs answered");
    assert_kept_unchanged(&h);
    // A rule made by a request refused for want of Alter on the cluster is not stored.
    let store = sluice_engine::security::AclStore::at(&rules_dir);
    assert!(store.load().expect("acls").bindings().is_empty());
}

/// A topic `kept` with one partition and one record, for the requests to leave alone.
fn seed_kept(h: &sluice_engine::EngineHandle) {
    block_on(h.create_topic("kept", 1, Some(TopicConfig::default()))).expect("topic");
    block_on(h.append("kept", PartitionId(0), vec![OwnedRecord::new(None, "v", Timestamp(1))], Default::default()))
        .expect("append");
}

/// Nothing happened: no topic made, the kept one not deleted, grown, cut or appended to.
fn assert_kept_unchanged(h: &sluice_engine::EngineHandle) {
    let topics = h.list_topics();
    assert!(!topics.contains(&"made".to_string()), "{topics:?}");
    assert!(topics.contains(&"kept".to_string()), "{topics:?}");
    assert_eq!(h.describe_topic("kept").expect("kept").shards.len(), 1);
    let (start, end) = block_on(h.offsets("kept", PartitionId(0))).expect("offsets");
    assert_eq!((start.0, end.0), (0, 1));
}

/// Sends each supported API but those in `skip`, at its lowest version, each on a
/// connection of its own, with a request that would change `kept` or make `made` where
/// the API can; the connections, to see what the server does.
fn send_each_api(served: &Served, skip: &[ApiKey]) -> Vec<(ApiKey, i16, std::net::TcpStream)> {
    let mut out = Vec::new();
    for &(api, min, _) in SUPPORTED.iter().filter(|(a, _, _)| !skip.contains(a)) {
        let mut header = RequestHeader::default();
        header.request_api_key = api as i16;
        header.request_api_version = min;
        header.correlation_id = 7;
        header.client_id = Some(s("intruder"));
        let mut buf = BytesMut::new();
        header.encode(&mut buf, api.request_header_version(min)).expect("header");
        let body = match api {
            ApiKey::ApiVersions => Vec::new(),
            ApiKey::DescribeAcls | ApiKey::CreateAcls | ApiKey::DeleteAcls => acl_request(api, min),
            _ => request(api, min),
        };
        buf.extend_from_slice(&body);
        let mut frame = (buf.len() as i32).to_be_bytes().to_vec();
        frame.extend_from_slice(&buf);
        let mut stream = std::net::TcpStream::connect(served.addr()).expect("connects");
        stream.set_read_timeout(Some(Duration::from_secs(10))).expect("timeout");
        stream.write_all(&frame).expect("send");
        out.push((api, min, stream));
    }
    out
}

fn acl_request(api: ApiKey, version: i16) -> Vec<u8> {
    let mut buf = BytesMut::new();
    let pattern = if version >= 1 { 3 } else { 0 };
    match api {
        ApiKey::CreateAcls => {
            let mut c = create_acls_request::AclCreation::default();
            (c.resource_type, c.resource_name, c.resource_pattern_type) = (2, s("kept"), pattern);
            (c.principal, c.host, c.operation, c.permission_type) = (s("User:ANONYMOUS"), s("*"), 2, 3);
            let mut r = CreateAclsRequest::default();
            r.creations = vec![c];
            r.encode(&mut buf, version)
        }
        ApiKey::DeleteAcls => {
            let mut f = delete_acls_request::DeleteAclsFilter::default();
            (f.resource_type_filter, f.pattern_type_filter, f.operation, f.permission_type) = (1, pattern.max(1), 1, 1);
            let mut r = DeleteAclsRequest::default();
            r.filters = vec![f];
            r.encode(&mut buf, version)
        }
        _ => {
            let mut r = DescribeAclsRequest::default();
            (r.resource_type_filter, r.pattern_type_filter, r.operation, r.permission_type) = (1, pattern.max(1), 1, 1);
            r.encode(&mut buf, version)
        }
    }
    .expect("encodes");
    buf.to_vec()
}
