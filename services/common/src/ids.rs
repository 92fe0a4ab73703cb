//! Identifiers that cross service boundaries, validated once at the edge.

use std::fmt;

/// A W3C / OpenTelemetry trace id: 32 lowercase hex characters, not all zeros.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TraceId(String);

/// Why a string is not a valid [`TraceId`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TraceIdError {
    /// The string is empty.
    #[error("must not be empty")]
    Empty,
    /// The string is not 32 characters long.
    #[error("must be 32 lowercase hex characters, got {0} characters")]
    Length(usize),
    /// The string has a character outside `[0-9a-f]`.
    #[error("must be 32 lowercase hex characters, found {0:?}")]
    Character(char),
    /// The string is all zeros, which W3C reserves as invalid.
    #[error("must not be all zeros")]
    AllZeros,
}

impl TraceId {
    /// Parses and validates a trace id.
    pub fn parse(s: &str) -> Result<Self, TraceIdError> {
        if s.is_empty() {
            return Err(TraceIdError::Empty);
        }
        if let Some(c) = s.chars().find(|c| !matches!(c, '0'..='9' | 'a'..='f')) {
            return Err(TraceIdError::Character(c));
        }
        if s.len() != 32 {
            return Err(TraceIdError::Length(s.len()));
        }
        if s.bytes().all(|b| b == b'0') {
            return Err(TraceIdError::AllZeros);
        }
        Ok(Self(s.to_owned()))
    }

    /// A new random trace id (122 random bits from the OS, like a v4 UUID).
    pub fn random() -> Self {
        Self(uuid::Uuid::new_v4().simple().to_string())
    }

    /// The id as 32 lowercase hex characters.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for TraceId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for TraceId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "TraceId({})", self.0)
    }
}

/// FNV-1a of `bytes`, from `seed` (0 for the plain hash): a stable,
/// non-cryptographic hash for ids and tags derived from text (a card's
/// ETag, a question's id, a context's trace).
pub fn fnv1a(seed: u64, bytes: impl IntoIterator<Item = u8>) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325 ^ seed;
    for b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_valid_and_rejects_each_malformation() {
        assert!(TraceId::parse("4bf92f3577b34da6a3ce929d0e0e4736").is_ok());
        assert_eq!(TraceId::parse(""), Err(TraceIdError::Empty));
        assert_eq!(TraceId::parse("abc"), Err(TraceIdError::Length(3)));
        assert_eq!(
            TraceId::parse("4BF92F3577B34DA6A3CE929D0E0E4736"),
            Err(TraceIdError::Character('B'))
        );
        assert_eq!(
            TraceId::parse("4bf92f3577b34da6a3ce929d0e0e47361"),
            Err(TraceIdError::Length(33))
        );
        assert_eq!(TraceId::parse(&"0".repeat(32)), Err(TraceIdError::AllZeros));
    }

    #[test]
    fn random_ids_are_valid_and_distinct() {
        let a = TraceId::random();
        let b = TraceId::random();
        assert!(TraceId::parse(a.as_str()).is_ok());
        assert_ne!(a, b);
    }
}
