//! Validation of names that come from outside (topics, groups, producer ids).
//!
//! The rule is Kafka's: 1 to 249 characters from `[a-zA-Z0-9._-]`, and not `.` or `..`.
//! Because such a name becomes part of a path under the data directory, this rule is
//! also what keeps a client from naming a path outside it.

pub use crate::error::{MAX_NAME_CHARS, NameError};

/// The internal compacted topic holding every transactional id's state of the Kafka
/// listener (one partition), as Kafka's of the same name. Named here, with the topic
/// names, because the engine refuses to let clients delete or write internal topics.
pub const TRANSACTION_STATE_TOPIC: &str = "__transaction_state";

/// Checks a name from outside against Kafka's rule.
pub fn validate_name(kind: &'static str, name: &str) -> Result<(), NameError> {
    if name.is_empty() {
        return Err(NameError::Empty { kind });
    }
    if name.len() > MAX_NAME_CHARS {
        return Err(NameError::TooLong { kind, len: name.len() });
    }
    let legal = name.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    if !legal || name == "." || name == ".." {
        return Err(NameError::Invalid { kind, name: name.to_string() });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kafka_rule() {
        for ok in ["a", "orders", "my.topic_v2-x", &"x".repeat(249)] {
            assert_eq!(validate_name("topic", ok), Ok(()), "{ok}");
        }
        assert_eq!(validate_name("topic", ""), Err(NameError::Empty { kind: "topic" }));
        assert!(matches!(validate_name("topic", &"x".repeat(250)), Err(NameError::TooLong { len: 250, .. })));
        for bad in [".", "..", "../etc", "a/b", "a b", "tópico", "a\0b", "/abs"] {
            assert!(matches!(validate_name("topic", bad), Err(NameError::Invalid { .. })), "{bad}");
        }
    }
}
