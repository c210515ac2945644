//! A bounds check of every request body before the protocol crate decodes it.
//!
//! `kafka-protocol` 0.18 sizes a vector from an array's count before reading a single
//! element (`Vec::with_capacity(n)`), so a 12-byte Metadata request claiming 2^31 topics
//! makes it ask for ~150 GB, and a failed allocation aborts the process (upstream
//! kafka-protocol-rs pull requests #152, #161 and #200). This module walks the body by
//! the schema of each API at the versions the listener supports, checks that every
//! count is no larger than the bytes left (every element takes at least one byte), and
//! refuses the request otherwise, before anything is allocated from it.
//!
//! The schemas below mirror the crate's generated decoders field by field; a test
//! encodes a request of every supported API and version with the crate and checks that
//! the walk accepts it and ends exactly at its end.

/// A field's wire type.
#[derive(Clone, Copy, Debug)]
enum T {
    I8,
    I16,
    I32,
    I64,
    Uuid,
    /// A (nullable) string: i16 length, or a compact length in flexible versions.
    Str,
    /// (Nullable) bytes: i32 length, or a compact length in flexible versions.
    Bytes,
    /// An array of i32.
    ArrI32,
    /// An array of strings.
    ArrStr,
    /// An array of structs with these fields (each with tagged fields when flexible).
    Arr(&'static [F]),
}

/// A field present in versions `min..=max`.
#[derive(Clone, Copy, Debug)]
struct F {
    t: T,
    min: i16,
    max: i16,
}

const fn all(t: T) -> F {
    F { t, min: 0, max: i16::MAX }
}

const fn since(min: i16, t: T) -> F {
    F { t, min, max: i16::MAX }
}

const fn until(max: i16, t: T) -> F {
    F { t, min: 0, max }
}

const fn between(min: i16, max: i16, t: T) -> F {
    F { t, min, max }
}

use T::{Arr, ArrI32, ArrStr, Bytes, I8, I16, I32, I64, Str, Uuid};

const PRODUCE: &[F] =
    &[all(Str), all(I16), all(I32), all(Arr(&[until(12, Str), since(13, Uuid), all(Arr(&[all(I32), all(Bytes)]))]))];
const FETCH: &[F] = &[
    until(14, I32),
    all(I32),
    all(I32),
    all(I32),
    all(I8),
    since(7, I32),
    since(7, I32),
    all(Arr(&[
        until(12, Str),
        since(13, Uuid),
        all(Arr(&[all(I32), since(9, I32), all(I64), since(12, I32), since(5, I64), all(I32)])),
    ])),
    since(7, Arr(&[between(7, 12, Str), since(13, Uuid), all(ArrI32)])),
    since(11, Str),
];
const LIST_OFFSETS: &[F] =
    &[all(I32), since(2, I8), all(Arr(&[all(Str), all(Arr(&[all(I32), since(4, I32), all(I64)]))])), since(10, I32)];
const METADATA: &[F] = &[all(Arr(&[since(10, Uuid), all(Str)])), since(4, I8), between(8, 10, I8), since(8, I8)];
const OFFSET_COMMIT: &[F] = &[
    all(Str),
    all(I32),
    all(Str),
    since(7, Str),
    until(4, I64),
    all(Arr(&[all(Str), all(Arr(&[all(I32), all(I64), since(6, I32), all(Str)]))])),
];
const OFFSET_FETCH: &[F] = &[
    until(7, Str),
    until(7, Arr(&[all(Str), all(ArrI32)])),
    since(8, Arr(&[all(Str), since(9, Str), since(9, I32), all(Arr(&[all(Str), all(ArrI32)]))])),
    since(7, I8),
];
const FIND_COORDINATOR: &[F] = &[until(3, Str), since(1, I8)];
const JOIN_GROUP: &[F] = &[
    all(Str),
    all(I32),
    since(1, I32),
    all(Str),
    since(5, Str),
    all(Str),
    all(Arr(&[all(Str), all(Bytes)])),
    since(8, Str),
];
const HEARTBEAT: &[F] = &[all(Str), all(I32), all(Str), since(3, Str)];
const LEAVE_GROUP: &[F] = &[all(Str), until(2, Str), since(3, Arr(&[all(Str), all(Str), since(5, Str)]))];
const SYNC_GROUP: &[F] =
    &[all(Str), all(I32), all(Str), since(3, Str), since(5, Str), since(5, Str), all(Arr(&[all(Str), all(Bytes)]))];
const DESCRIBE_GROUPS: &[F] = &[all(ArrStr), since(3, I8)];
const LIST_GROUPS: &[F] = &[since(4, ArrStr), since(5, ArrStr)];
const API_VERSIONS: &[F] = &[since(3, Str), since(3, Str)];
const CREATE_TOPICS: &[F] = &[
    all(Arr(&[all(Str), all(I32), all(I16), all(Arr(&[all(I32), all(ArrI32)])), all(Arr(&[all(Str), all(Str)]))])),
    all(I32),
    since(1, I8),
];
const DELETE_TOPICS: &[F] = &[since(6, Arr(&[all(Str), all(Uuid)])), until(5, ArrStr), all(I32)];
const DELETE_RECORDS: &[F] = &[all(Arr(&[all(Str), all(Arr(&[all(I32), all(I64)]))])), all(I32)];
const INIT_PRODUCER_ID: &[F] = &[all(Str), all(I32), since(3, I64), since(3, I16)];
// Versions 0-3 only (4 batches transactions for brokers).
const ADD_PARTITIONS_TO_TXN: &[F] =
    &[until(3, Str), until(3, I64), until(3, I16), until(3, Arr(&[all(Str), all(ArrI32)]))];
const ADD_OFFSETS_TO_TXN: &[F] = &[all(Str), all(I64), all(I16), all(Str)];
const END_TXN: &[F] = &[all(Str), all(I64), all(I16), all(I8)];
const DELETE_GROUPS: &[F] = &[all(ArrStr)];
const OFFSET_DELETE: &[F] = &[all(Str), all(Arr(&[all(Str), all(Arr(&[all(I32)]))]))];
const TXN_OFFSET_COMMIT: &[F] = &[
    all(Str),
    all(Str),
    all(I64),
    all(I16),
    since(3, I32),
    since(3, Str),
    since(3, Str),
    all(Arr(&[all(Str), all(Arr(&[all(I32), all(I64), since(2, I32), all(Str)]))])),
];
const DESCRIBE_CONFIGS: &[F] = &[all(Arr(&[all(I8), all(Str), all(ArrStr)])), all(I8), since(3, I8)];
const ALTER_CONFIGS: &[F] = &[all(Arr(&[all(I8), all(Str), all(Arr(&[all(Str), all(Str)]))])), all(I8)];
const CREATE_PARTITIONS: &[F] = &[all(Arr(&[all(Str), all(I32), all(Arr(&[all(ArrI32)]))])), all(I32), all(I8)];
const INCREMENTAL_ALTER_CONFIGS: &[F] =
    &[all(Arr(&[all(I8), all(Str), all(Arr(&[all(Str), all(I8), all(Str)]))])), all(I8)];
const DESCRIBE_CLUSTER: &[F] = &[all(I8), since(1, I8), since(2, I8)];
const CONSUMER_GROUP_HEARTBEAT: &[F] = &[
    all(Str),
    all(Str),
    all(I32),
    all(Str),
    all(Str),
    all(I32),
    all(ArrStr),
    since(1, Str),
    all(Str),
    all(Arr(&[all(Uuid), all(ArrI32)])),
];
const CONSUMER_GROUP_DESCRIBE: &[F] = &[all(ArrStr), all(I8)];
const SASL_HANDSHAKE: &[F] = &[all(Str)];
const ACL_FILTER: &[F] = &[all(I8), all(Str), since(1, I8), all(Str), all(Str), all(I8), all(I8)];
const DESCRIBE_ACLS: &[F] = ACL_FILTER;
const CREATE_ACLS: &[F] = &[all(Arr(ACL_FILTER))];
const DELETE_ACLS: &[F] = &[all(Arr(ACL_FILTER))];
const DESCRIBE_USER_SCRAM_CREDENTIALS: &[F] = &[all(Arr(&[all(Str)]))];
const ALTER_USER_SCRAM_CREDENTIALS: &[F] =
    &[all(Arr(&[all(Str), all(I8)])), all(Arr(&[all(Str), all(I8), all(I32), all(Bytes), all(Bytes)]))];
const SASL_AUTHENTICATE: &[F] = &[all(Bytes)];

/// The schema of an API's request body and the first version that is flexible.
fn schema(api_key: i16) -> Option<(&'static [F], i16)> {
    Some(match api_key {
        0 => (PRODUCE, 9),
        1 => (FETCH, 12),
        2 => (LIST_OFFSETS, 6),
        3 => (METADATA, 9),
        8 => (OFFSET_COMMIT, 8),
        9 => (OFFSET_FETCH, 6),
        10 => (FIND_COORDINATOR, 3),
        11 => (JOIN_GROUP, 6),
        12 => (HEARTBEAT, 4),
        13 => (LEAVE_GROUP, 4),
        14 => (SYNC_GROUP, 4),
        15 => (DESCRIBE_GROUPS, 5),
        16 => (LIST_GROUPS, 3),
        18 => (API_VERSIONS, 3),
        19 => (CREATE_TOPICS, 5),
        20 => (DELETE_TOPICS, 4),
        21 => (DELETE_RECORDS, 2),
        22 => (INIT_PRODUCER_ID, 2),
        24 => (ADD_PARTITIONS_TO_TXN, 3),
        25 => (ADD_OFFSETS_TO_TXN, 3),
        26 => (END_TXN, 3),
        28 => (TXN_OFFSET_COMMIT, 3),
        32 => (DESCRIBE_CONFIGS, 4),
        33 => (ALTER_CONFIGS, 2),
        37 => (CREATE_PARTITIONS, 2),
        44 => (INCREMENTAL_ALTER_CONFIGS, 1),
        60 => (DESCRIBE_CLUSTER, 0),
        42 => (DELETE_GROUPS, 2),
        68 => (CONSUMER_GROUP_HEARTBEAT, 0),
        69 => (CONSUMER_GROUP_DESCRIBE, 0),
        36 => (SASL_AUTHENTICATE, 2),
        29 => (DESCRIBE_ACLS, 2),
        30 => (CREATE_ACLS, 2),
        31 => (DELETE_ACLS, 2),
        50 => (DESCRIBE_USER_SCRAM_CREDENTIALS, 0),
        51 => (ALTER_USER_SCRAM_CREDENTIALS, 0),
        // Never flexible.
        47 => (OFFSET_DELETE, i16::MAX),
        17 => (SASL_HANDSHAKE, i16::MAX),
        _ => return None,
    })
}

/// Why a request body was refused before decoding, with the byte it was found at.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Malformed {
    /// A field runs past the end of the body.
    #[error("a field of {bytes} bytes at byte {at} runs past the end ({left} left)")]
    PastEnd {
        /// Where the field starts.
        at: usize,
        /// Its claimed size.
        bytes: usize,
        /// Bytes left in the body.
        left: usize,
    },
    /// An unsigned varint of more than 5 bytes.
    #[error("an unsigned varint longer than 5 bytes at byte {at}")]
    LongVarint {
        /// Where it ends.
        at: usize,
    },
    /// A negative length other than -1 (null).
    #[error("a negative length {length} at byte {at}")]
    NegativeLength {
        /// Where it ends.
        at: usize,
        /// The length.
        length: i64,
    },
    /// An array claiming more elements than bytes left.
    #[error("an array of {elements} elements at byte {at} with {left} bytes left")]
    LongArray {
        /// Where its count ends.
        at: usize,
        /// The claimed count.
        elements: usize,
        /// Bytes left in the body.
        left: usize,
    },
    /// The listener has no schema for the API.
    #[error("no schema for API key {api_key}")]
    NoSchema {
        /// The API key.
        api_key: i16,
    },
}

struct Walk<'a> {
    bytes: &'a [u8],
    at: usize,
    version: i16,
    flexible: bool,
}

impl Walk<'_> {
    fn left(&self) -> usize {
        self.bytes.len() - self.at
    }

    fn skip(&mut self, n: usize) -> Result<(), Malformed> {
        if n > self.left() {
            return Err(Malformed::PastEnd { at: self.at, bytes: n, left: self.left() });
        }
        self.at += n;
        Ok(())
    }

    fn fixed<const N: usize>(&mut self) -> Result<[u8; N], Malformed> {
        let start = self.at;
        self.skip(N)?;
        let mut b = [0u8; N];
        b.copy_from_slice(&self.bytes[start..self.at]);
        Ok(b)
    }

    fn uvarint(&mut self) -> Result<u64, Malformed> {
        let mut v = 0u64;
        for i in 0..5 {
            let [b] = self.fixed::<1>()?;
            v |= u64::from(b & 0x7f) << (7 * i);
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(Malformed::LongVarint { at: self.at })
    }

    /// A length or count: `None` for null.
    fn length(&mut self, wide: bool) -> Result<Option<usize>, Malformed> {
        if self.flexible {
            return Ok(self.uvarint()?.checked_sub(1).map(|n| n as usize));
        }
        let n = if wide {
            i64::from(i32::from_be_bytes(self.fixed()?))
        } else {
            i64::from(i16::from_be_bytes(self.fixed()?))
        };
        match n {
            -1 => Ok(None),
            n if n < 0 => Err(Malformed::NegativeLength { at: self.at, length: n }),
            n => Ok(Some(n as usize)),
        }
    }

    fn count(&mut self) -> Result<usize, Malformed> {
        let n = self.length(true)?.unwrap_or(0);
        if n > self.left() {
            return Err(Malformed::LongArray { at: self.at, elements: n, left: self.left() });
        }
        Ok(n)
    }

    fn tagged(&mut self) -> Result<(), Malformed> {
        if self.flexible {
            let n = self.uvarint()?;
            for _ in 0..n {
                self.uvarint()?;
                let size = self.uvarint()?;
                self.skip(size as usize)?;
            }
        }
        Ok(())
    }

    fn fields(&mut self, fields: &[F]) -> Result<(), Malformed> {
        let version = self.version;
        for f in fields.iter().filter(|f| (f.min..=f.max).contains(&version)) {
            match f.t {
                I8 => self.skip(1)?,
                I16 => self.skip(2)?,
                I32 => self.skip(4)?,
                I64 => self.skip(8)?,
                Uuid => self.skip(16)?,
                Str => {
                    let n = self.length(false)?.unwrap_or(0);
                    self.skip(n)?;
                }
                Bytes => {
                    let n = self.length(true)?.unwrap_or(0);
                    self.skip(n)?;
                }
                ArrI32 => {
                    let n = self.count()?;
                    let bytes =
                        n.checked_mul(4).ok_or(Malformed::LongArray { at: self.at, elements: n, left: self.left() })?;
                    self.skip(bytes)?;
                }
                ArrStr => {
                    for _ in 0..self.count()? {
                        let n = self.length(false)?.unwrap_or(0);
                        self.skip(n)?;
                    }
                }
                Arr(inner) => {
                    for _ in 0..self.count()? {
                        self.fields(inner)?;
                        self.tagged()?;
                    }
                }
            }
        }
        Ok(())
    }
}

/// Checks a request body (after its header) of `api_key` at `version`. Returns the bytes
/// the body's fields take (anything after them is ignored by the decoder).
pub fn check_body(api_key: i16, version: i16, body: &[u8]) -> Result<usize, Malformed> {
    let (fields, flexible_from) = schema(api_key).ok_or(Malformed::NoSchema { api_key })?;
    let mut w = Walk { bytes: body, at: 0, version, flexible: version >= flexible_from };
    w.fields(fields)?;
    w.tagged()?;
    Ok(w.at)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kafka::dispatch::SUPPORTED;
    use bytes::BytesMut;
    use kafka_protocol::messages::*;
    use kafka_protocol::protocol::{Encodable, StrBytes};

    fn enc<M: Encodable>(m: &M, buf: &mut BytesMut, version: i16) -> Result<(), String> {
        m.encode(buf, version).map_err(|e| e.to_string())
    }

    fn s(x: &str) -> StrBytes {
        StrBytes::from_string(x.to_string())
    }

    /// A request of `api` with one element in every array, encoded at `version`.
    fn sample(api: ApiKey, version: i16) -> Vec<u8> {
        let mut buf = BytesMut::new();
        let topic = TopicName(s("topic"));
        let r: Result<(), String> = match api {
            ApiKey::Produce => {
                let mut p = produce_request::PartitionProduceData::default();
                p.records = Some(bytes::Bytes::from_static(b"0123456789"));
                let mut t = produce_request::TopicProduceData::default();
                t.name = topic;
                t.partition_data = vec![p];
                let mut r = ProduceRequest::default();
                r.topic_data = vec![t];
                enc(&r, &mut buf, version)
            }
            ApiKey::Fetch => {
                let mut t = fetch_request::FetchTopic::default();
                t.topic = topic.clone();
                t.partitions = vec![fetch_request::FetchPartition::default()];
                let mut r = FetchRequest::default();
                r.topics = vec![t];
                if version >= 7 {
                    let mut f = fetch_request::ForgottenTopic::default();
                    f.topic = topic;
                    f.partitions = vec![1, 2];
                    r.forgotten_topics_data = vec![f];
                }
                enc(&r, &mut buf, version)
            }
            ApiKey::ListOffsets => {
                let mut t = list_offsets_request::ListOffsetsTopic::default();
                t.name = topic;
                t.partitions = vec![list_offsets_request::ListOffsetsPartition::default()];
                let mut r = ListOffsetsRequest::default();
                r.topics = vec![t];
                enc(&r, &mut buf, version)
            }
            ApiKey::Metadata => {
                let mut t = metadata_request::MetadataRequestTopic::default();
                t.name = Some(topic);
                let mut r = MetadataRequest::default();
                r.topics = Some(vec![t]);
                enc(&r, &mut buf, version)
            }
            ApiKey::OffsetCommit => {
                let mut t = offset_commit_request::OffsetCommitRequestTopic::default();
                t.name = topic;
                t.partitions = vec![offset_commit_request::OffsetCommitRequestPartition::default()];
                let mut r = OffsetCommitRequest::default();
                r.group_id = GroupId(s("g"));
                r.topics = vec![t];
                enc(&r, &mut buf, version)
            }
            ApiKey::OffsetFetch => {
                let mut r = OffsetFetchRequest::default();
                if version >= 8 {
                    let mut t = offset_fetch_request::OffsetFetchRequestTopics::default();
                    t.name = topic;
                    t.partition_indexes = vec![0, 1];
                    let mut g = offset_fetch_request::OffsetFetchRequestGroup::default();
                    g.group_id = GroupId(s("g"));
                    g.topics = Some(vec![t]);
                    r.groups = vec![g];
                } else {
                    let mut t = offset_fetch_request::OffsetFetchRequestTopic::default();
                    t.name = topic;
                    t.partition_indexes = vec![0, 1];
                    r.group_id = GroupId(s("g"));
                    r.topics = Some(vec![t]);
                }
                enc(&r, &mut buf, version)
            }
            ApiKey::DeleteGroups => {
                let mut r = DeleteGroupsRequest::default();
                r.groups_names = vec![GroupId(s("g")), GroupId(s("roundrobin,range"))];
                enc(&r, &mut buf, version)
            }
            ApiKey::OffsetDelete => {
                let mut t = offset_delete_request::OffsetDeleteRequestTopic::default();
                t.name = topic;
                t.partitions = vec![offset_delete_request::OffsetDeleteRequestPartition::default()];
                let mut r = OffsetDeleteRequest::default();
                r.group_id = GroupId(s("g"));
                r.topics = vec![t];
                enc(&r, &mut buf, version)
            }
            ApiKey::FindCoordinator => {
                let mut r = FindCoordinatorRequest::default();
                r.key = s("g");
                enc(&r, &mut buf, version)
            }
            ApiKey::JoinGroup => {
                let mut p = join_group_request::JoinGroupRequestProtocol::default();
                p.name = s("range");
                p.metadata = bytes::Bytes::from_static(b"meta");
                let mut r = JoinGroupRequest::default();
                r.group_id = GroupId(s("g"));
                r.protocol_type = s("consumer");
                r.protocols = vec![p];
                enc(&r, &mut buf, version)
            }
            ApiKey::Heartbeat => enc(&HeartbeatRequest::default(), &mut buf, version),
            ApiKey::LeaveGroup => {
                let mut r = LeaveGroupRequest::default();
                if version >= 3 {
                    r.members = vec![leave_group_request::MemberIdentity::default()];
                }
                enc(&r, &mut buf, version)
            }
            ApiKey::SyncGroup => {
                let mut a = sync_group_request::SyncGroupRequestAssignment::default();
                a.member_id = s("m");
                a.assignment = bytes::Bytes::from_static(b"assignment");
                let mut r = SyncGroupRequest::default();
                r.assignments = vec![a];
                enc(&r, &mut buf, version)
            }
            ApiKey::DescribeGroups => {
                let mut r = DescribeGroupsRequest::default();
                r.groups = vec![GroupId(s("g")), GroupId(s("h"))];
                enc(&r, &mut buf, version)
            }
            ApiKey::ListGroups => {
                let mut r = ListGroupsRequest::default();
                if version >= 4 {
                    r.states_filter = vec![s("Stable")];
                }
                if version >= 5 {
                    r.types_filter = vec![s("classic")];
                }
                enc(&r, &mut buf, version)
            }
            ApiKey::ApiVersions => enc(&ApiVersionsRequest::default(), &mut buf, version),
            ApiKey::DescribeUserScramCredentials => {
                let mut u = describe_user_scram_credentials_request::UserName::default();
                u.name = s("alice");
                let mut r = DescribeUserScramCredentialsRequest::default();
                r.users = Some(vec![u]);
                enc(&r, &mut buf, version)
            }
            ApiKey::AlterUserScramCredentials => {
                let mut d = alter_user_scram_credentials_request::ScramCredentialDeletion::default();
                (d.name, d.mechanism) = (s("bob"), 1);
                let mut u = alter_user_scram_credentials_request::ScramCredentialUpsertion::default();
                (u.name, u.mechanism, u.iterations) = (s("alice"), 2, 4096);
                (u.salt, u.salted_password) = (bytes::Bytes::from_static(b"salt"), bytes::Bytes::from_static(b"pw"));
                let mut r = AlterUserScramCredentialsRequest::default();
                (r.deletions, r.upsertions) = (vec![d], vec![u]);
                enc(&r, &mut buf, version)
            }
            ApiKey::DescribeAcls => {
                let mut r = DescribeAclsRequest::default();
                r.resource_type_filter = 2;
                r.resource_name_filter = Some(s("t"));
                r.pattern_type_filter = if version >= 1 { 3 } else { 0 };
                r.principal_filter = Some(s("User:a"));
                r.host_filter = Some(s("*"));
                r.operation = 3;
                r.permission_type = 3;
                enc(&r, &mut buf, version)
            }
            ApiKey::CreateAcls => {
                let mut c = create_acls_request::AclCreation::default();
                c.resource_type = 2;
                c.resource_name = s("t");
                c.resource_pattern_type = if version >= 1 { 3 } else { 0 };
                c.principal = s("User:a");
                c.host = s("*");
                c.operation = 3;
                c.permission_type = 3;
                let mut r = CreateAclsRequest::default();
                r.creations = vec![c];
                enc(&r, &mut buf, version)
            }
            ApiKey::DeleteAcls => {
                let mut f = delete_acls_request::DeleteAclsFilter::default();
                f.resource_type_filter = 2;
                f.resource_name_filter = Some(s("t"));
                f.pattern_type_filter = if version >= 1 { 3 } else { 0 };
                f.principal_filter = Some(s("User:a"));
                f.host_filter = Some(s("*"));
                f.operation = 3;
                f.permission_type = 3;
                let mut r = DeleteAclsRequest::default();
                r.filters = vec![f];
                enc(&r, &mut buf, version)
            }
            ApiKey::SaslHandshake => {
                let mut r = SaslHandshakeRequest::default();
                r.mechanism = s("SCRAM-SHA-512");
                enc(&r, &mut buf, version)
            }
            ApiKey::SaslAuthenticate => {
                let mut r = SaslAuthenticateRequest::default();
                r.auth_bytes = bytes::Bytes::from_static(b"n,,n=user,r=abc");
                enc(&r, &mut buf, version)
            }
            ApiKey::CreateTopics => {
                let mut a = create_topics_request::CreatableReplicaAssignment::default();
                a.broker_ids = vec![BrokerId(0)];
                let mut c = create_topics_request::CreatableTopicConfig::default();
                c.name = s("retention.ms");
                c.value = Some(s("1000"));
                let mut t = create_topics_request::CreatableTopic::default();
                t.name = topic;
                t.assignments = vec![a];
                t.configs = vec![c];
                let mut r = CreateTopicsRequest::default();
                r.topics = vec![t];
                enc(&r, &mut buf, version)
            }
            ApiKey::DeleteRecords => {
                let mut p = delete_records_request::DeleteRecordsPartition::default();
                p.offset = 7;
                let mut t = delete_records_request::DeleteRecordsTopic::default();
                t.name = topic;
                t.partitions = vec![p];
                let mut r = DeleteRecordsRequest::default();
                r.topics = vec![t];
                enc(&r, &mut buf, version)
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
                enc(&r, &mut buf, version)
            }
            ApiKey::InitProducerId => enc(&InitProducerIdRequest::default(), &mut buf, version),
            ApiKey::AddPartitionsToTxn => {
                let mut t = add_partitions_to_txn_request::AddPartitionsToTxnTopic::default();
                t.name = topic;
                t.partitions = vec![0, 1];
                let mut r = AddPartitionsToTxnRequest::default();
                r.v3_and_below_transactional_id = TransactionalId(s("tx"));
                r.v3_and_below_topics = vec![t];
                enc(&r, &mut buf, version)
            }
            ApiKey::AddOffsetsToTxn => {
                let mut r = AddOffsetsToTxnRequest::default();
                r.transactional_id = TransactionalId(s("tx"));
                r.group_id = GroupId(s("g"));
                enc(&r, &mut buf, version)
            }
            ApiKey::EndTxn => {
                let mut r = EndTxnRequest::default();
                r.transactional_id = TransactionalId(s("tx"));
                r.committed = true;
                enc(&r, &mut buf, version)
            }
            ApiKey::TxnOffsetCommit => {
                let mut p = txn_offset_commit_request::TxnOffsetCommitRequestPartition::default();
                p.committed_metadata = Some(s("m"));
                let mut t = txn_offset_commit_request::TxnOffsetCommitRequestTopic::default();
                t.name = topic;
                t.partitions = vec![p];
                let mut r = TxnOffsetCommitRequest::default();
                r.transactional_id = TransactionalId(s("tx"));
                r.group_id = GroupId(s("g"));
                if version >= 3 {
                    r.generation_id = 4;
                    r.member_id = s("member");
                    r.group_instance_id = Some(s("instance"));
                }
                r.topics = vec![t];
                enc(&r, &mut buf, version)
            }
            ApiKey::DescribeConfigs => {
                let mut res = describe_configs_request::DescribeConfigsResource::default();
                res.resource_type = 2;
                res.resource_name = s("topic");
                res.configuration_keys = Some(vec![s("retention.ms"), s("cleanup.policy")]);
                let mut r = DescribeConfigsRequest::default();
                r.resources = vec![res];
                r.include_synonyms = true;
                r.include_documentation = version >= 3;
                enc(&r, &mut buf, version)
            }
            ApiKey::AlterConfigs => {
                let mut c = alter_configs_request::AlterableConfig::default();
                c.name = s("retention.ms");
                c.value = Some(s("1000"));
                let mut res = alter_configs_request::AlterConfigsResource::default();
                res.resource_type = 2;
                res.resource_name = s("topic");
                res.configs = vec![c];
                let mut r = AlterConfigsRequest::default();
                r.resources = vec![res];
                enc(&r, &mut buf, version)
            }
            ApiKey::IncrementalAlterConfigs => {
                let mut c = incremental_alter_configs_request::AlterableConfig::default();
                c.name = s("cleanup.policy");
                c.config_operation = 2;
                c.value = Some(s("compact"));
                let mut res = incremental_alter_configs_request::AlterConfigsResource::default();
                res.resource_type = 2;
                res.resource_name = s("topic");
                res.configs = vec![c];
                let mut r = IncrementalAlterConfigsRequest::default();
                r.resources = vec![res];
                r.validate_only = true;
                enc(&r, &mut buf, version)
            }
            ApiKey::CreatePartitions => {
                let mut a = create_partitions_request::CreatePartitionsAssignment::default();
                a.broker_ids = vec![BrokerId(0)];
                let mut t = create_partitions_request::CreatePartitionsTopic::default();
                t.name = topic;
                t.count = 3;
                t.assignments = Some(vec![a]);
                let mut r = CreatePartitionsRequest::default();
                r.topics = vec![t];
                enc(&r, &mut buf, version)
            }
            ApiKey::DescribeCluster => {
                let mut r = DescribeClusterRequest::default();
                r.include_cluster_authorized_operations = true;
                if version >= 2 {
                    r.include_fenced_brokers = true;
                }
                enc(&r, &mut buf, version)
            }
            ApiKey::ConsumerGroupHeartbeat => {
                let mut r = ConsumerGroupHeartbeatRequest::default();
                r.group_id = GroupId(s("g"));
                r.member_id = s("m");
                r.instance_id = Some(s("i"));
                r.rack_id = Some(s("r"));
                r.subscribed_topic_names = Some(vec![topic]);
                if version >= 1 {
                    r.subscribed_topic_regex = Some(s("t.*"));
                }
                r.server_assignor = Some(s("uniform"));
                let mut tp = consumer_group_heartbeat_request::TopicPartitions::default();
                tp.topic_id = uuid::Uuid::new_v4();
                tp.partitions = vec![0, 1];
                r.topic_partitions = Some(vec![tp]);
                enc(&r, &mut buf, version)
            }
            ApiKey::ConsumerGroupDescribe => {
                let mut r = ConsumerGroupDescribeRequest::default();
                r.group_ids = vec![GroupId(s("g")), GroupId(s("h"))];
                r.include_authorized_operations = true;
                enc(&r, &mut buf, version)
            }
            other => panic!("no sample for {other:?}"),
        };
        r.unwrap_or_else(|e| panic!("encoding {api:?} v{version}: {e}"));
        buf.to_vec()
    }

    #[test]
    fn every_supported_request_walks_to_its_end() {
        for &(api, min, max) in SUPPORTED {
            for version in min..=max {
                let body = sample(api, version);
                assert_eq!(
                    check_body(api as i16, version, &body),
                    Ok(body.len()),
                    "{api:?} v{version} ({} bytes)",
                    body.len()
                );
                // Every strict prefix is refused (nothing is optional at the end).
                for cut in 0..body.len() {
                    assert!(check_body(api as i16, version, &body[..cut]).is_err(), "{api:?} v{version} cut at {cut}");
                }
            }
        }
    }

    #[test]
    fn counts_larger_than_the_bytes_left_are_refused() {
        assert!(check_body(3, 1, &[0x7f, 0xff, 0xff, 0xff]).is_err());
        assert!(check_body(3, 9, &[0xff, 0xff, 0xff, 0xff, 0x0f, 0]).is_err());
        assert!(check_body(15, 0, &[0, 0, 0, 3, 0, 1, b'a']).is_err());
        assert_eq!(check_body(3, 1, &[0xff, 0xff, 0xff, 0xff]), Ok(4), "a null topic list");
    }
}
