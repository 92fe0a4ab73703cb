//! Client authentication: bearer API keys that name a tenant.
//!
//! With `auth.api_keys_file` set, every `baton.v1.Orchestrator` call must
//! carry `authorization: Bearer <key>` with a key from that file, or it is
//! refused with `UNAUTHENTICATED` before the service sees it (health,
//! reflection and gRPC-web preflight are not affected). The key names the
//! caller's tenant; a run belongs to the tenant that started it, and its
//! run-scoped calls (approvals, inputs, cancel, GetRun, WatchRun) from any
//! other tenant are `NOT_FOUND`, exactly as for a run that does not exist.
//!
//! The file's format and how it is reloaded (every `auth.reload`) are
//! [`baton_common::auth`]'s; the context store reads the same format.
//!
//! Without `auth.api_keys_file` nothing is checked and every caller is the
//! tenant `""` (one trusted network, `baton up`).
//!
//! The tenant of a run is also the namespace of its slots: every call the
//! orchestrator makes to the context store states it (`baton-tenant`, under
//! the orchestrator's service token), so a `traceparent` naming another
//! tenant's trace links spans but reaches none of that tenant's slots.

use std::{path::PathBuf, sync::Arc, time::Duration};

pub use baton_common::auth::{ApiKeys, Tenant, tenant_of};
use serde::{Deserialize, Serialize};
use tonic::{Request, Status};

/// The `auth` section of the config.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AuthConfig {
    /// The API keys file; empty: no authentication.
    pub api_keys_file: PathBuf,
    /// How often the file is checked for changes.
    #[serde(with = "baton_common::config::duration")]
    pub reload: Duration,
}

impl Default for AuthConfig {
    fn default() -> Self {
        Self {
            api_keys_file: PathBuf::new(),
            reload: Duration::from_secs(30),
        }
    }
}

/// Why the `auth` section is refused, or the keys file it names cannot be
/// loaded; the message names the setting.
#[derive(Debug, thiserror::Error)]
pub enum AuthError {
    /// `auth.reload` is zero.
    #[error("auth.reload must be positive")]
    Reload,
    /// The keys file cannot be read, or is malformed.
    #[error(transparent)]
    File(#[from] baton_common::auth::FileError),
}

impl AuthConfig {
    /// Checks the section.
    pub fn validate(&self) -> Result<(), AuthError> {
        if self.reload.is_zero() {
            return Err(AuthError::Reload);
        }
        Ok(())
    }
}

/// Loads `config.api_keys_file`; `None` when authentication is off.
pub fn load(config: &AuthConfig) -> Result<Option<Arc<ApiKeys>>, AuthError> {
    if config.api_keys_file.as_os_str().is_empty() {
        return Ok(None);
    }
    Ok(Some(baton_common::auth::load_api_keys(
        "auth.api_keys_file",
        &config.api_keys_file,
    )?))
}

/// The interceptor that authenticates every call (see the module docs).
#[derive(Clone)]
pub struct Authenticate(pub Option<Arc<ApiKeys>>);

impl tonic::service::Interceptor for Authenticate {
    fn call(&mut self, mut request: Request<()>) -> Result<Request<()>, Status> {
        if let Some(keys) = &self.0 {
            let tenant = keys.authenticate(&request)?;
            request.extensions_mut().insert(tenant);
        }
        Ok(request)
    }
}
