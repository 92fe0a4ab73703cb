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
//! The file (a Kubernetes Secret mounted as a file, say) has one key per
//! line, `<tenant> <key>`; blank lines and `#` comments are skipped. Tenant
//! names are `[a-z0-9_-]{1,64}`; keys are 16 to 256 printable ASCII
//! characters without spaces, and each may appear once. The file is read at
//! start (a bad file stops the service, naming the line) and again every
//! `auth.reload` when it changed, so rotating a Secret needs no restart; a
//! bad file at a reload is logged and the previous keys stay.
//!
//! Without `auth.api_keys_file` nothing is checked and every caller is the
//! tenant `""` (one trusted network, `baton up`).
//!
//! Not built yet (DESIGN.md §9): the context store's own tenant checks (its
//! network policy admits only the orchestrator) and TLS.

use std::{
    collections::HashMap,
    path::{Path, PathBuf},
    sync::{Arc, RwLock},
    time::{Duration, SystemTime},
};

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

impl AuthConfig {
    /// Checks the section; names the field at fault.
    pub fn validate(&self) -> Result<(), String> {
        if self.reload.is_zero() {
            return Err("auth.reload must be positive".into());
        }
        Ok(())
    }
}

/// The tenant a call was authenticated as (a request extension).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Tenant(pub String);

/// The tenant of `extensions`: the one the key named, or `""` when
/// authentication is off.
pub fn tenant_of(extensions: &tonic::Extensions) -> &str {
    extensions.get::<Tenant>().map_or("", |t| t.0.as_str())
}

/// Parses a keys file: key → tenant. Errors name the line.
pub fn parse(text: &str) -> Result<HashMap<String, String>, String> {
    let mut keys = HashMap::new();
    for (i, raw) in text.lines().enumerate() {
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let n = i + 1;
        let mut parts = line.split_whitespace();
        let (Some(tenant), Some(key), None) = (parts.next(), parts.next(), parts.next()) else {
            return Err(format!("line {n}: expected `<tenant> <key>`"));
        };
        if tenant.is_empty()
            || tenant.len() > 64
            || !tenant
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-')
        {
            return Err(format!(
                "line {n}: tenant {tenant:?} must be [a-z0-9_-]{{1,64}}"
            ));
        }
        if !(16..=256).contains(&key.len()) || !key.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(format!(
                "line {n}: the key of {tenant:?} must be 16 to 256 printable ASCII characters"
            ));
        }
        if keys.insert(key.to_owned(), tenant.to_owned()).is_some() {
            return Err(format!("line {n}: this key is already listed"));
        }
    }
    if keys.is_empty() {
        return Err("no keys (lines of `<tenant> <key>`)".into());
    }
    Ok(keys)
}

/// The API keys in force.
pub struct ApiKeys {
    path: PathBuf,
    keys: RwLock<(HashMap<String, String>, Stamp)>,
}

/// What tells a changed file: modification time and length.
type Stamp = Option<(SystemTime, u64)>;

fn stamp(path: &Path) -> Stamp {
    std::fs::metadata(path)
        .ok()
        .and_then(|m| Some((m.modified().ok()?, m.len())))
}

impl ApiKeys {
    /// Reads `config.api_keys_file`; `None` when authentication is off.
    pub fn load(config: &AuthConfig) -> Result<Option<Arc<Self>>, String> {
        if config.api_keys_file.as_os_str().is_empty() {
            return Ok(None);
        }
        let path = config.api_keys_file.clone();
        let (keys, modified) = read(&path)?;
        Ok(Some(Arc::new(Self {
            path,
            keys: RwLock::new((keys, modified)),
        })))
    }

    /// Reads the file again if it changed since the last read.
    pub fn reload(&self) {
        let modified = stamp(&self.path);
        if modified.is_some() && modified == self.keys.read().unwrap_or_else(|e| e.into_inner()).1 {
            return;
        }
        match read(&self.path) {
            Ok(fresh) => {
                tracing::info!(file = %self.path.display(), keys = fresh.0.len(), "API keys reloaded");
                *self.keys.write().unwrap_or_else(|e| e.into_inner()) = fresh;
            }
            Err(e) => {
                tracing::warn!(error = %e, "API keys file not reloaded; the previous keys stay")
            }
        }
    }

    /// Re-reads the file every `every` until `shutdown`.
    pub fn watch(
        self: &Arc<Self>,
        every: Duration,
        shutdown: tokio_util::sync::CancellationToken,
        tasks: &tokio_util::task::TaskTracker,
    ) {
        let keys = self.clone();
        tasks.spawn(async move {
            loop {
                tokio::select! {
                    _ = shutdown.cancelled() => return,
                    _ = tokio::time::sleep(every) => keys.reload(),
                }
            }
        });
    }

    /// The tenant of `request`'s bearer key.
    pub fn authenticate<T>(&self, request: &Request<T>) -> Result<Tenant, Status> {
        let header = request.metadata().get("authorization").ok_or_else(|| {
            Status::unauthenticated(
                "authorization: missing; send `authorization: Bearer <API key>`",
            )
        })?;
        let key = header
            .to_str()
            .ok()
            .and_then(|v| {
                v.strip_prefix("Bearer ")
                    .or_else(|| v.strip_prefix("bearer "))
            })
            .map(str::trim)
            .ok_or_else(|| Status::unauthenticated("authorization: expected `Bearer <API key>`"))?;
        let keys = self.keys.read().unwrap_or_else(|e| e.into_inner());
        keys.0
            .get(key)
            .map(|tenant| Tenant(tenant.clone()))
            .ok_or_else(|| Status::unauthenticated("authorization: unknown API key"))
    }
}

fn read(path: &Path) -> Result<(HashMap<String, String>, Stamp), String> {
    let modified = stamp(path);
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("auth.api_keys_file {}: {e}", path.display()))?;
    let keys = parse(&text).map_err(|e| format!("auth.api_keys_file {}: {e}", path.display()))?;
    Ok((keys, modified))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_keys_file_is_checked_line_by_line() {
        let keys = parse("# tenants\nacme  0123456789abcdef\n\nglobex fedcba9876543210-x\n")
            .expect("parse");
        assert_eq!(
            keys.get("0123456789abcdef").map(String::as_str),
            Some("acme")
        );
        assert_eq!(keys.len(), 2);
        for (text, why) in [
            ("acme", "line 1: expected"),
            ("acme k k2", "line 1: expected"),
            ("Acme 0123456789abcdef", "line 1: tenant \"Acme\""),
            ("acme 0123456789abcde", "16 to 256"),
            (&format!("acme {}", "k".repeat(257)), "16 to 256"),
            (
                "a 0123456789abcdef\nb 0123456789abcdef",
                "line 2: this key is already listed",
            ),
            ("# nothing\n", "no keys"),
        ] {
            let err = parse(text).expect_err(text);
            assert!(err.contains(why), "{text:?}: {err}");
        }
        // At the limits: 16 and 256 characters, a 64-character tenant.
        assert!(parse(&format!("{} {}", "t".repeat(64), "k".repeat(16))).is_ok());
        assert!(parse(&format!("{} {}", "t".repeat(65), "k".repeat(16))).is_err());
        assert!(parse(&format!("t {}", "k".repeat(256))).is_ok());
    }

    #[test]
    fn bearer_keys_name_the_tenant() {
        let dir = std::env::temp_dir().join(format!("baton-auth-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("mkdir");
        let file = dir.join("keys");
        std::fs::write(&file, "acme 0123456789abcdef\n").expect("write");
        let keys = ApiKeys::load(&AuthConfig {
            api_keys_file: file.clone(),
            ..AuthConfig::default()
        })
        .expect("load")
        .expect("on");
        let with = |v: &str| {
            let mut r = Request::new(());
            r.metadata_mut()
                .insert("authorization", v.parse().expect("ascii"));
            r
        };
        assert_eq!(
            keys.authenticate(&with("Bearer 0123456789abcdef"))
                .expect("known"),
            Tenant("acme".into())
        );
        for (r, why) in [
            (Request::new(()), "missing"),
            (with("Basic 0123456789abcdef"), "expected `Bearer"),
            (with("Bearer 0123456789abcdeX"), "unknown API key"),
        ] {
            let s = keys.authenticate(&r).expect_err(why);
            assert_eq!(s.code(), tonic::Code::Unauthenticated);
            assert!(s.message().contains(why), "{}", s.message());
        }
        // A rotated file is picked up; a broken one keeps the previous keys.
        std::thread::sleep(Duration::from_millis(20));
        std::fs::write(&file, "acme 1111111111111111\n").expect("rotate");
        keys.reload();
        assert!(keys.authenticate(&with("Bearer 1111111111111111")).is_ok());
        assert!(keys.authenticate(&with("Bearer 0123456789abcdef")).is_err());
        std::thread::sleep(Duration::from_millis(20));
        std::fs::write(&file, "broken\n").expect("break");
        keys.reload();
        assert!(keys.authenticate(&with("Bearer 1111111111111111")).is_ok());
        assert!(
            ApiKeys::load(&AuthConfig::default())
                .expect("off")
                .is_none()
        );
    }
}
