//! Who may call the context store, and as which tenant.
//!
//! Every `baton.v1.ContextStore` call is authenticated (health, reflection
//! and gRPC-web preflight are not); a call's tenant is the namespace of the
//! slots it reaches (`baton_store::key::Scope`):
//!
//! - **the service credential** (`auth.service_token_file`, presented as
//!   `authorization: Bearer <token>`; or, with `tls.client_ca_file`, a
//!   client certificate that CA signed, on a call with no bearer
//!   credential): the orchestrator, which states the tenant of each call in
//!   `baton-tenant` (absent: the tenant `""`);
//! - **a client API key** (`auth.api_keys_file`, the orchestrator's format):
//!   the key fixes the tenant and `baton-tenant` is ignored, so a key of one
//!   tenant reaches another tenant's slots no more than a key that names a
//!   trace it never wrote — they behave as if they did not exist;
//! - anything else: `UNAUTHENTICATED`.
//!
//! `auth.mode = "none"` turns the checks off — for `baton up` and tests on
//! one trusted machine; the store then logs a warning at start and a call's
//! tenant is whatever its `baton-tenant` states. It must be set explicitly:
//! a store with `auth.mode = "keys"` (the default) and neither file nor a
//! client CA refuses to start, naming the settings.

use std::{path::PathBuf, sync::Arc, time::Duration};

use baton_common::auth::{ApiKeys, ServiceToken, Tenant, bearer, stated_tenant};
use serde::{Deserialize, Serialize};
use tokio_util::{sync::CancellationToken, task::TaskTracker};
use tonic::{Request, Status};

/// How calls are authenticated.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AuthMode {
    /// A credential is required (see the module docs).
    #[default]
    Keys,
    /// Nothing is checked (one trusted machine: `baton up`, tests).
    None,
}

/// The `auth` section of the context store's config.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AuthConfig {
    /// `keys` (the default) or `none`.
    pub mode: AuthMode,
    /// Client API keys, `<tenant> <key>` lines (empty: none accepted).
    pub api_keys_file: PathBuf,
    /// The service token the orchestrator presents (empty: none accepted).
    pub service_token_file: PathBuf,
    /// How often the files are checked for changes.
    #[serde(with = "baton_common::config::duration")]
    pub reload: Duration,
}

impl Default for AuthConfig {
    fn default() -> Self {
        Self {
            mode: AuthMode::Keys,
            api_keys_file: PathBuf::new(),
            service_token_file: PathBuf::new(),
            reload: Duration::from_secs(30),
        }
    }
}

/// Why the `auth` section is refused, or the files it names cannot be
/// loaded; the message names the setting.
#[derive(Debug, thiserror::Error)]
pub enum AuthError {
    /// `auth.reload` is zero.
    #[error("auth.reload must be positive")]
    Reload,
    /// Calls must be authenticated but nothing can authenticate them: the
    /// config is well-formed, it only lacks a credential.
    #[error(
        "auth: the store authenticates every call, but no credential is configured: set auth.service_token_file (the orchestrator's token), auth.api_keys_file (clients' keys) or tls.client_ca_file (mTLS), or auth.mode = \"none\" on one trusted machine"
    )]
    NoCredential,
    /// A keys or token file cannot be read, or is malformed.
    #[error(transparent)]
    File(#[from] baton_common::auth::FileError),
}

impl AuthConfig {
    /// Checks the section; `client_ca` tells whether the server verifies
    /// client certificates (a service credential of its own). A bad value
    /// is reported before a missing credential.
    pub fn validate(&self, client_ca: bool) -> Result<(), AuthError> {
        if self.reload.is_zero() {
            return Err(AuthError::Reload);
        }
        let none = self.api_keys_file.as_os_str().is_empty()
            && self.service_token_file.as_os_str().is_empty()
            && !client_ca;
        if self.mode == AuthMode::Keys && none {
            return Err(AuthError::NoCredential);
        }
        Ok(())
    }
}

/// The credentials in force.
#[derive(Clone)]
pub struct Credentials {
    mode: AuthMode,
    keys: Option<Arc<ApiKeys>>,
    token: Option<Arc<ServiceToken>>,
    /// Whether a verified client certificate is the service credential.
    client_certs: bool,
}

impl Credentials {
    /// No checks (`auth.mode = "none"`).
    pub fn none() -> Self {
        Self {
            mode: AuthMode::None,
            keys: None,
            token: None,
            client_certs: false,
        }
    }

    /// Reads the files `config` names (a bad file is an error naming it)
    /// and re-reads them every `config.reload` until `shutdown`.
    pub fn load(
        config: &AuthConfig,
        client_certs: bool,
        shutdown: &CancellationToken,
        tasks: &TaskTracker,
    ) -> Result<Self, AuthError> {
        if config.mode == AuthMode::None {
            tracing::warn!(
                "auth.mode is \"none\": every caller may read and write every tenant's slots; use it only on one trusted machine"
            );
            return Ok(Self::none());
        }
        let keys = (!config.api_keys_file.as_os_str().is_empty())
            .then(|| baton_common::auth::load_api_keys("auth.api_keys_file", &config.api_keys_file))
            .transpose()?;
        let token = (!config.service_token_file.as_os_str().is_empty())
            .then(|| {
                baton_common::auth::load_service_token(
                    "auth.service_token_file",
                    &config.service_token_file,
                )
            })
            .transpose()?;
        if let Some(k) = &keys {
            k.watch(config.reload, shutdown.clone(), tasks);
        }
        if let Some(t) = &token {
            t.watch(config.reload, shutdown.clone(), tasks);
        }
        Ok(Self {
            mode: config.mode,
            keys,
            token,
            client_certs,
        })
    }

    /// The tenant of `request`, or why it is refused.
    pub fn authenticate<T>(&self, request: &Request<T>) -> Result<Tenant, Status> {
        if self.mode == AuthMode::None {
            return stated_tenant(request);
        }
        if self.client_certs
            && request.metadata().get("authorization").is_none()
            && request.peer_certs().is_some_and(|c| !c.is_empty())
        {
            // The handshake verified it against tls.client_ca_file.
            return stated_tenant(request);
        }
        let presented = bearer(request)?;
        if let Some(token) = &self.token
            && token.matches(presented)
        {
            return stated_tenant(request);
        }
        if let Some(tenant) = self.keys.as_ref().and_then(|k| k.tenant_of_key(presented)) {
            return Ok(tenant);
        }
        Err(Status::unauthenticated(
            "authorization: unknown credential; send a service token or a client API key",
        ))
    }
}

/// The interceptor that authenticates every store call.
#[derive(Clone)]
pub struct Authenticate(pub Credentials);

impl tonic::service::Interceptor for Authenticate {
    fn call(&mut self, mut request: Request<()>) -> Result<Request<()>, Status> {
        let tenant = self.0.authenticate(&request)?;
        request.extensions_mut().insert(tenant);
        Ok(request)
    }
}
