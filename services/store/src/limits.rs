//! The store's [`Limits`] (value size, per-trace quotas, key length, TTL
//! bounds) and the per-call checks every backend runs before it writes:
//! [`Limits::check_put`], [`Limits::check_batch`],
//! [`Limits::check_selection`]. Quotas are checked by the backends
//! themselves, atomically with the write.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::{
    batch::{MAX_BATCH, Selection},
    error::{Error, Result},
    key::{Scope, validate_key_chars},
    slot::{MAX_CONTENT_TYPE_LEN, Put},
};

/// The store's limits. Every one is configurable; the defaults are the
/// product's (DESIGN.md §6).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Limits {
    /// Largest value, in bytes (default 1 MiB).
    pub max_value_bytes: u64,
    /// Most bytes of values per trace (default 64 MiB).
    pub max_trace_bytes: u64,
    /// Most live slots per trace (default 4096).
    pub max_trace_keys: u64,
    /// Longest key, in characters (default 256).
    pub max_key_len: usize,
    /// TTL of a put that sets none (default 1 h).
    #[serde(with = "baton_common::config::duration")]
    pub default_ttl: Duration,
    /// Longest TTL a put may set (default 7 days).
    #[serde(with = "baton_common::config::duration")]
    pub max_ttl: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_value_bytes: 1 << 20,
            max_trace_bytes: 64 << 20,
            max_trace_keys: 4096,
            max_key_len: 256,
            default_ttl: Duration::from_secs(3600),
            max_ttl: Duration::from_secs(7 * 24 * 3600),
        }
    }
}

/// Why a `limits` section is refused; the message names the field.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum LimitsError {
    /// `max_value_bytes` is 0 or over Redis' string limit.
    #[error("limits.max_value_bytes must be between 1 and 536870912 (Redis' string limit)")]
    MaxValueBytes,
    /// `max_trace_bytes` is below `max_value_bytes`.
    #[error("limits.max_trace_bytes must be at least limits.max_value_bytes")]
    MaxTraceBytes,
    /// `max_trace_keys` is 0.
    #[error("limits.max_trace_keys must be at least 1")]
    MaxTraceKeys,
    /// `max_key_len` is 0 or over 1024.
    #[error("limits.max_key_len must be between 1 and 1024")]
    MaxKeyLen,
    /// `max_ttl` is under a millisecond.
    #[error("limits.max_ttl must be positive")]
    MaxTtl,
    /// `default_ttl` is under a millisecond or over `max_ttl`.
    #[error("limits.default_ttl must be positive and at most limits.max_ttl")]
    DefaultTtl,
}

impl Limits {
    /// Checks the limits are coherent.
    pub fn validate(&self) -> std::result::Result<(), LimitsError> {
        if self.max_value_bytes == 0 || self.max_value_bytes > 512 << 20 {
            return Err(LimitsError::MaxValueBytes);
        }
        if self.max_trace_bytes < self.max_value_bytes {
            return Err(LimitsError::MaxTraceBytes);
        }
        if self.max_trace_keys == 0 {
            return Err(LimitsError::MaxTraceKeys);
        }
        if self.max_key_len == 0 || self.max_key_len > 1024 {
            return Err(LimitsError::MaxKeyLen);
        }
        if self.max_ttl.as_millis() == 0 {
            return Err(LimitsError::MaxTtl);
        }
        if self.default_ttl.as_millis() == 0 || self.default_ttl > self.max_ttl {
            return Err(LimitsError::DefaultTtl);
        }
        Ok(())
    }

    /// Validates a put against the per-call limits (value size, TTL, content
    /// type) and resolves its TTL. Quotas are checked by the backend,
    /// atomically with the write.
    pub fn check_put(&self, put: &Put) -> Result<Duration> {
        let size = put.value.len() as u64;
        if size > self.max_value_bytes {
            return Err(Error::ValueTooLarge {
                size,
                limit: self.max_value_bytes,
            });
        }
        validate_content_type(&put.content_type)?;
        match put.ttl {
            None => Ok(self.default_ttl),
            Some(ttl) if ttl.as_millis() == 0 => {
                Err(Error::invalid("ttl", "must be positive (at least 1ms)"))
            }
            Some(ttl) if ttl > self.max_ttl => Err(Error::invalid(
                "ttl",
                format!(
                    "{} is over the maximum of {}",
                    baton_common::config::duration::format(ttl),
                    baton_common::config::duration::format(self.max_ttl)
                ),
            )),
            Some(ttl) => Ok(ttl),
        }
    }

    /// Validates a batched write: 1 to [`MAX_BATCH`] entries of `scope`, each
    /// key once, each entry as [`Limits::check_put`] does; returns each
    /// entry's TTL. Errors name the entry.
    pub fn check_batch(&self, scope: &Scope, puts: &[Put]) -> Result<Vec<Duration>> {
        if puts.is_empty() {
            return Err(Error::invalid("entries", "must not be empty"));
        }
        if puts.len() > MAX_BATCH {
            return Err(Error::invalid(
                "entries",
                format!("{} entries is over the limit of {MAX_BATCH}", puts.len()),
            ));
        }
        let mut seen = std::collections::HashSet::with_capacity(puts.len());
        puts.iter()
            .enumerate()
            .map(|(i, put)| {
                let in_entry = |e| Error::in_entry(i, put.key.as_str(), e);
                if put.scope != *scope {
                    return Err(Error::Internal(format!(
                        "entries[{i}]: a batch of {scope} holds a put of {}",
                        put.scope
                    )));
                }
                if !seen.insert(put.key.as_str()) {
                    return Err(in_entry(Error::invalid(
                        "key",
                        "appears twice in the batch",
                    )));
                }
                self.check_put(put).map_err(in_entry)
            })
            .collect()
    }

    /// Validates a batched delete's selection: 1 to [`MAX_BATCH`] keys, or a
    /// non-empty prefix.
    pub fn check_selection(&self, selection: &Selection) -> Result<()> {
        match selection {
            Selection::Keys(keys) if keys.is_empty() => Err(Error::invalid(
                "keys",
                "set keys or prefix (Clear removes every slot)",
            )),
            Selection::Keys(keys) if keys.len() > MAX_BATCH => Err(Error::invalid(
                "keys",
                format!("{} keys is over the limit of {MAX_BATCH}", keys.len()),
            )),
            Selection::Prefix(p) if p.is_empty() => Err(Error::invalid(
                "prefix",
                "must not be empty (Clear removes every slot)",
            )),
            Selection::Prefix(p) => validate_key_chars("prefix", p, self.max_key_len),
            Selection::Keys(_) => Ok(()),
        }
    }
}

fn validate_content_type(ct: &str) -> Result<()> {
    if ct.len() > MAX_CONTENT_TYPE_LEN {
        return Err(Error::invalid(
            "content_type",
            format!(
                "is {} characters long, the limit is {MAX_CONTENT_TYPE_LEN}",
                ct.len()
            ),
        ));
    }
    if let Some(c) = ct.chars().find(|c| !(' '..='~').contains(c)) {
        return Err(Error::invalid(
            "content_type",
            format!("has the character {c:?}; only printable ASCII is allowed"),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod batch_tests {
    use baton_common::ids::TraceId;

    use super::*;
    use crate::key::Key;

    fn puts(scope: &Scope, n: usize) -> Vec<Put> {
        (0..n)
            .map(|i| {
                Put::new(
                    scope.clone(),
                    Key::parse("key", &format!("k{i}"), 256).expect("key"),
                    "v",
                )
            })
            .collect()
    }

    #[test]
    fn a_batch_holds_max_batch_entries_and_keys_not_one_more() {
        let limits = Limits::default();
        let scope = Scope::of_trace(TraceId::random());
        assert_eq!(
            limits
                .check_batch(&scope, &puts(&scope, MAX_BATCH))
                .expect("at the limit")
                .len(),
            MAX_BATCH
        );
        let err = limits
            .check_batch(&scope, &puts(&scope, MAX_BATCH + 1))
            .expect_err("over");
        assert_eq!(err.field().as_deref(), Some("entries"));
        let keys = |n: usize| Selection::Keys(puts(&scope, n).into_iter().map(|p| p.key).collect());
        assert!(limits.check_selection(&keys(MAX_BATCH)).is_ok());
        let err = limits
            .check_selection(&keys(MAX_BATCH + 1))
            .expect_err("over");
        assert_eq!(err.field().as_deref(), Some("keys"));
        let err = limits
            .check_selection(&Selection::Prefix("bad prefix".into()))
            .expect_err("bad");
        assert_eq!(err.field().as_deref(), Some("prefix"));
    }

    #[test]
    fn bad_limits_are_named_by_field() {
        let mut l = Limits::default();
        l.default_ttl = l.max_ttl + Duration::from_secs(1);
        assert_eq!(
            l.validate().expect_err("ttl").to_string(),
            "limits.default_ttl must be positive and at most limits.max_ttl"
        );
        assert_eq!(Limits::default().validate(), Ok(()));
    }
}
