//! Kafka's consumer protocol: the subscription and assignment a consumer group's members
//! exchange inside the group protocol's opaque metadata (protocol type `consumer`). The
//! coordinator reads subscriptions (which topics a group consumes, for OffsetDelete and
//! for describing the engine's own groups to Kafka clients) and writes assignments for
//! the engine's own groups. Every count is checked against the bytes before it is used.

use bytes::{BufMut, Bytes, BytesMut};

use crate::group::assignor::TopicPartition;

/// Why a consumer protocol subscription could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SubscriptionError {
    /// It ends in the middle of a field.
    #[error("subscription truncated")]
    Truncated,
    /// A negative version.
    #[error("subscription version {0}")]
    Version(i16),
    /// More topics than its bytes could hold.
    #[error("subscription claims {count} topics in {bytes} bytes")]
    Count {
        /// The claimed count.
        count: i32,
        /// The subscription's size.
        bytes: usize,
    },
    /// A null topic name.
    #[error("a null topic name in a subscription")]
    NullName,
    /// A topic name that is not UTF-8.
    #[error("a topic name that is not UTF-8")]
    NotUtf8,
}

/// Reads the topics of a consumer protocol subscription (any version: the topic list
/// comes first in all of them; what follows is not needed).
pub fn parse_subscription(bytes: &[u8]) -> Result<Vec<String>, SubscriptionError> {
    let mut at = 0usize;
    let mut take = |n: usize| -> Result<&[u8], SubscriptionError> {
        let end = at.checked_add(n).filter(|&e| e <= bytes.len()).ok_or(SubscriptionError::Truncated)?;
        let s = &bytes[at..end];
        at = end;
        Ok(s)
    };
    let version = i16::from_be_bytes(take(2)?.try_into().map_err(|_| SubscriptionError::Truncated)?);
    if version < 0 {
        return Err(SubscriptionError::Version(version));
    }
    let count = i32::from_be_bytes(take(4)?.try_into().map_err(|_| SubscriptionError::Truncated)?);
    if count < 0 || count as usize > bytes.len() / 2 {
        return Err(SubscriptionError::Count { count, bytes: bytes.len() });
    }
    let mut topics = Vec::with_capacity(count as usize);
    for _ in 0..count {
        let len = i16::from_be_bytes(take(2)?.try_into().map_err(|_| SubscriptionError::Truncated)?);
        let len = usize::try_from(len).map_err(|_| SubscriptionError::NullName)?;
        let name = std::str::from_utf8(take(len)?).map_err(|_| SubscriptionError::NotUtf8)?;
        topics.push(name.to_string());
    }
    Ok(topics)
}

/// Writes a consumer protocol subscription (version 0) of `topics`.
pub fn encode_subscription(topics: &[String]) -> Bytes {
    let mut b = BytesMut::new();
    b.put_i16(0);
    b.put_i32(topics.len() as i32);
    for t in topics {
        b.put_i16(t.len() as i16);
        b.put_slice(t.as_bytes());
    }
    b.put_i32(-1); // no user data
    b.freeze()
}

/// Writes a consumer protocol assignment (version 0) of `partitions`.
pub fn encode_assignment(partitions: &[TopicPartition]) -> Bytes {
    let mut by_topic: Vec<(&str, Vec<i32>)> = Vec::new();
    for tp in partitions {
        match by_topic.iter_mut().find(|(t, _)| *t == tp.topic) {
            Some((_, ps)) => ps.push(tp.partition.get() as i32),
            None => by_topic.push((&tp.topic, vec![tp.partition.get() as i32])),
        }
    }
    let mut b = BytesMut::new();
    b.put_i16(0);
    b.put_i32(by_topic.len() as i32);
    for (t, ps) in by_topic {
        b.put_i16(t.len() as i16);
        b.put_slice(t.as_bytes());
        b.put_i32(ps.len() as i32);
        for p in ps {
            b.put_i32(p);
        }
    }
    b.put_i32(-1); // no user data
    b.freeze()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subscriptions_round_trip_and_lies_are_refused() {
        let topics = vec!["orders".to_string(), "a.b-c_d".to_string()];
        assert_eq!(parse_subscription(&encode_subscription(&topics)), Ok(topics));
        assert!(parse_subscription(&[0, 0, 0x7f, 0xff, 0xff, 0xff]).is_err());
        assert!(parse_subscription(&[0, 1, 0, 0, 0, 1, 0, 9, b'x']).is_err());
        assert!(parse_subscription(&[0]).is_err());
    }

    #[test]
    fn assignments_group_partitions_by_topic() {
        let a = encode_assignment(&[
            TopicPartition::new("t", sluice_io::PartitionId(0)),
            TopicPartition::new("u", sluice_io::PartitionId(3)),
            TopicPartition::new("t", sluice_io::PartitionId(2)),
        ]);
        let mut want = BytesMut::new();
        want.put_i16(0);
        want.put_i32(2);
        for (t, ps) in [("t", &[0, 2][..]), ("u", &[3][..])] {
            want.put_i16(1);
            want.put_slice(t.as_bytes());
            want.put_i32(ps.len() as i32);
            for p in ps {
                want.put_i32(*p);
            }
        }
        want.put_i32(-1);
        assert_eq!(a, want.freeze());
    }
}
