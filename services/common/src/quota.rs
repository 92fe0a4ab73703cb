//! Per-tenant quotas in a service config: a `default` set of limits and
//! per-tenant overrides, each a set of optional limits.
//!
//! ```toml
//! [quotas.default]
//! concurrent_runs = 100
//!
//! [quotas.tenants.acme]
//! concurrent_runs = 500        # acme's own; its other limits are the default's
//! ```
//!
//! A limit left out of a tenant's entry is the default's; a limit left out
//! of the default is no limit. `0` is a limit too: nothing is allowed (a
//! way to suspend a tenant). The tenant of unauthenticated calls (`""`,
//! `auth.mode = "none"`) has the default.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// A set of optional limits that can be laid over another (a tenant's
/// entry over the default).
pub trait Limits: Clone + Default {
    /// `self`'s limits where it sets them, `under`'s elsewhere.
    fn over(&self, under: &Self) -> Self;
}

/// Why a `quotas` section is refused; the message names the field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QuotasError {
    /// An entry of `quotas.tenants` is not a tenant name.
    #[error("quotas.tenants.{0}: a tenant is 1 to 64 characters of [a-z0-9_-]")]
    Tenant(String),
}

/// The quotas of every tenant: a default and per-tenant overrides.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Quotas<T> {
    /// The limits of every tenant without an entry of its own.
    pub default: T,
    /// Per-tenant overrides, by tenant name.
    pub tenants: BTreeMap<String, T>,
}

impl<T: Limits> Quotas<T> {
    /// The limits of `tenant`.
    pub fn of(&self, tenant: &str) -> T {
        match self.tenants.get(tenant) {
            Some(own) => own.over(&self.default),
            None => self.default.clone(),
        }
    }

    /// Checks the tenant names.
    pub fn validate(&self) -> Result<(), QuotasError> {
        for name in self.tenants.keys() {
            if !crate::auth::valid_tenant(name) {
                return Err(QuotasError::Tenant(name.clone()));
            }
        }
        Ok(())
    }

    /// Whether any tenant has a limit `set` says is set.
    pub fn any(&self, set: impl Fn(&T) -> bool) -> bool {
        set(&self.default) || self.tenants.values().any(set)
    }
}

/// The message of a call refused by a quota of `tenant` at `limit`, with
/// `what` it holds; the caller names the quota (the status's field).
pub fn exceeded(tenant: &str, limit: u64, what: &str) -> String {
    let who = if tenant.is_empty() {
        "the default tenant".to_owned()
    } else {
        format!("tenant {tenant}")
    };
    format!("{who} is at its quota ({limit}): {what}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Clone, Default, PartialEq, Deserialize)]
    #[serde(default)]
    struct L {
        a: Option<u64>,
        b: Option<u64>,
    }

    impl Limits for L {
        fn over(&self, under: &Self) -> Self {
            Self {
                a: self.a.or(under.a),
                b: self.b.or(under.b),
            }
        }
    }

    #[test]
    fn a_tenants_entry_overrides_only_what_it_sets() {
        let q: Quotas<L> =
            toml::from_str("[default]\na = 1\nb = 2\n[tenants.acme]\nb = 0\n[tenants.globex]\n")
                .expect("quotas");
        assert_eq!(
            q.of("acme"),
            L {
                a: Some(1),
                b: Some(0)
            }
        );
        assert_eq!(q.of("globex"), q.default);
        assert_eq!(q.of("initech"), q.default);
        assert_eq!(q.of(""), q.default);
        assert!(q.validate().is_ok());
        let bad: Quotas<L> = toml::from_str("[tenants.Acme]\na = 1\n").expect("parses");
        assert_eq!(
            bad.validate().expect_err("refused").to_string(),
            "quotas.tenants.Acme: a tenant is 1 to 64 characters of [a-z0-9_-]"
        );
    }
}
