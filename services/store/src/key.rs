//! What names a slot: its [`Key`] inside a tenant's trace ([`Scope`]), and
//! the checks every key, key prefix and trace id passes before it reaches a
//! backend.

use baton_common::{auth::Tenant, ids::TraceId};

use crate::error::{Error, Result};

/// A validated slot key: 1 to `max_key_len` characters of `[A-Za-z0-9._:/-]`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Key(String);

impl Key {
    /// Validates `s` as a key of at most `max_len` characters; errors name
    /// `field`.
    pub fn parse(field: &'static str, s: &str, max_len: usize) -> Result<Self> {
        validate_key_chars(field, s, max_len)?;
        if s.is_empty() {
            return Err(Error::invalid(field, "must not be empty"));
        }
        Ok(Self(s.to_owned()))
    }

    /// The key.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// Checks a key or key prefix (which may be empty) against the key rules.
pub fn validate_key_chars(field: &'static str, s: &str, max_len: usize) -> Result<()> {
    if s.len() > max_len {
        return Err(Error::invalid(
            field,
            format!("is {} characters long, the limit is {max_len}", s.len()),
        ));
    }
    if let Some(c) = s
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | ':' | '/' | '-')))
    {
        return Err(Error::invalid(
            field,
            format!("has the character {c:?}; allowed are A-Z a-z 0-9 . _ : / -"),
        ));
    }
    Ok(())
}

/// Parses a trace id; errors name `trace_id`.
pub fn parse_trace_id(s: &str) -> Result<TraceId> {
    TraceId::parse(s).map_err(|e| Error::invalid("trace_id", e.to_string()))
}

/// The namespace of one trace's slots: a trace of one tenant. The same
/// trace id in two tenants names two disjoint sets of slots (their keys,
/// quotas, revisions and watches are apart); the tenant `""` is the one of
/// every call when authentication is off.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Scope {
    /// The tenant.
    pub tenant: Tenant,
    /// The trace.
    pub trace_id: TraceId,
}

impl Scope {
    /// The trace `trace_id` of `tenant`.
    pub fn new(tenant: Tenant, trace_id: TraceId) -> Self {
        Self { tenant, trace_id }
    }

    /// The trace `trace_id` of the tenant `""`.
    pub fn of_trace(trace_id: TraceId) -> Self {
        Self::new(Tenant::default(), trace_id)
    }
}

impl std::fmt::Display for Scope {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.tenant.as_str().is_empty() {
            write!(f, "{}", self.trace_id)
        } else {
            write!(f, "{}/{}", self.tenant, self.trace_id)
        }
    }
}
