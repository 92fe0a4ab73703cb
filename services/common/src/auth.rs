//! Credentials both services read: tenants, API keys files and service
//! tokens, each kept in a file that is re-read when it changes.
//!
//! - An **API keys file** (a Kubernetes Secret mounted as a file, say) has
//!   one key per line, `<tenant> <key>`; blank lines and `#` comments are
//!   skipped. Tenant names are `[a-z0-9_-]{1,64}`; keys are 16 to 256
//!   printable ASCII characters without spaces, and each may appear once. A
//!   key names its caller's tenant.
//! - A **service token file** holds one token (16 to 4096 printable ASCII
//!   characters; surrounding whitespace is ignored): the credential the
//!   orchestrator presents to the context store, which then trusts the
//!   tenant the call states in [`TENANT_HEADER`].
//!
//! Both are read at start (a bad file stops the service, naming the line)
//! and again every `reload` when the file's modification time or length
//! changed, so rotating a Secret needs no restart; a bad file at a reload is
//! logged and the previous contents stay.

use std::{
    collections::HashMap,
    path::{Path, PathBuf},
    sync::{Arc, RwLock},
    time::{Duration, SystemTime},
};

use tonic::{Request, Status};

/// The metadata in which a service credential states the tenant of a call.
pub const TENANT_HEADER: &str = "baton-tenant";

/// The tenant a call was authenticated as (a request extension). `""` is
/// the tenant of every call when authentication is off.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct Tenant(pub String);

impl Tenant {
    /// The tenant's name.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for Tenant {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// Whether `name` is a tenant name: `[a-z0-9_-]{1,64}`.
pub fn valid_tenant(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-')
}

/// The tenant of `extensions`: the one the credential named, or `""` when
/// authentication is off.
pub fn tenant_of(extensions: &tonic::Extensions) -> &str {
    extensions.get::<Tenant>().map_or("", |t| t.0.as_str())
}

/// The tenant a call states in [`TENANT_HEADER`]: `""` when absent,
/// `INVALID_ARGUMENT` naming the header when it is not a tenant name.
pub fn stated_tenant<T>(request: &Request<T>) -> Result<Tenant, Status> {
    let Some(value) = request.metadata().get(TENANT_HEADER) else {
        return Ok(Tenant::default());
    };
    match value.to_str() {
        Ok(name) if valid_tenant(name) => Ok(Tenant(name.to_owned())),
        _ => {
            let mut status =
                Status::invalid_argument(format!("{TENANT_HEADER}: must be [a-z0-9_-]{{1,64}}"));
            status.metadata_mut().insert(
                "baton-field",
                tonic::metadata::MetadataValue::from_static(TENANT_HEADER),
            );
            Err(status)
        }
    }
}

/// Why the text of a credentials file (API keys or a service token) is
/// refused; the message names the line.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Malformed {
    /// A line of an API keys file is not two words.
    #[error("line {0}: expected `<tenant> <key>`")]
    NotTenantAndKey(usize),
    /// A line names no valid tenant.
    #[error("line {line}: tenant {tenant:?} must be [a-z0-9_-]{{1,64}}")]
    Tenant {
        /// The line (from 1).
        line: usize,
        /// The tenant it names.
        tenant: String,
    },
    /// A key is too short, too long or not printable.
    #[error("line {line}: the key of {tenant:?} must be 16 to 256 printable ASCII characters")]
    Key {
        /// The line (from 1).
        line: usize,
        /// The tenant of the key.
        tenant: String,
    },
    /// A key is listed twice.
    #[error("line {0}: this key is already listed")]
    DuplicateKey(usize),
    /// An API keys file without a key.
    #[error("no keys (lines of `<tenant> <key>`)")]
    NoKeys,
    /// A service token is too short, too long or not printable.
    #[error("the token must be 16 to 4096 printable ASCII characters")]
    Token,
}

/// Why a credentials file cannot be used: it cannot be read, or its text
/// is [`Malformed`]. The message names the setting and the file.
#[derive(Debug, thiserror::Error)]
pub enum FileError {
    /// The file cannot be read.
    #[error("{what} {}: {source}", path.display())]
    Read {
        /// The setting naming the file (`auth.api_keys_file`, say).
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The file's text is refused.
    #[error("{what} {}: {source}", path.display())]
    Malformed {
        /// The setting naming the file.
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        source: Malformed,
    },
}

/// Parses an API keys file: key → tenant. Errors name the line.
pub fn parse_keys(text: &str) -> Result<HashMap<String, String>, Malformed> {
    let mut keys = HashMap::new();
    for (i, raw) in text.lines().enumerate() {
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let n = i + 1;
        let mut parts = line.split_whitespace();
        let (Some(tenant), Some(key), None) = (parts.next(), parts.next(), parts.next()) else {
            return Err(Malformed::NotTenantAndKey(n));
        };
        if !valid_tenant(tenant) {
            return Err(Malformed::Tenant {
                line: n,
                tenant: tenant.to_owned(),
            });
        }
        if !(16..=256).contains(&key.len()) || !key.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(Malformed::Key {
                line: n,
                tenant: tenant.to_owned(),
            });
        }
        if keys.insert(key.to_owned(), tenant.to_owned()).is_some() {
            return Err(Malformed::DuplicateKey(n));
        }
    }
    if keys.is_empty() {
        return Err(Malformed::NoKeys);
    }
    Ok(keys)
}

/// Parses a service token file.
pub fn parse_token(text: &str) -> Result<String, Malformed> {
    let token = text.trim();
    if !(16..=4096).contains(&token.len()) || !token.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(Malformed::Token);
    }
    Ok(token.to_owned())
}

/// What tells a changed file: modification time and length.
type Stamp = Option<(SystemTime, u64)>;

fn stamp(path: &Path) -> Stamp {
    std::fs::metadata(path)
        .ok()
        .and_then(|m| Some((m.modified().ok()?, m.len())))
}

/// The contents of a file, parsed, re-read when the file changes.
pub struct Reloaded<T> {
    /// What the file is, for messages (`auth.api_keys_file`, say).
    what: &'static str,
    path: PathBuf,
    parse: fn(&str) -> Result<T, Malformed>,
    current: RwLock<(Arc<T>, Stamp)>,
    /// With [`Reloaded::refreshing`]: how often [`Reloaded::current`] looks
    /// at the file, and when it last did.
    refresh: Option<(Duration, std::sync::Mutex<std::time::Instant>)>,
}

/// The API keys in force: key → tenant.
pub type ApiKeys = Reloaded<HashMap<String, String>>;

/// A service token in force.
pub type ServiceToken = Reloaded<String>;

impl<T: Send + Sync + 'static> Reloaded<T> {
    /// Reads `path` (`what` names the setting in messages).
    pub fn load(
        what: &'static str,
        path: &Path,
        parse: fn(&str) -> Result<T, Malformed>,
    ) -> Result<Arc<Self>, FileError> {
        Self::read_first(what, path, parse, None)
    }

    /// Like [`Reloaded::load`], but [`Reloaded::current`] itself re-reads
    /// the file when it changed, at most every `every` (for a holder with
    /// no task of its own to do it).
    pub fn refreshing(
        what: &'static str,
        path: &Path,
        parse: fn(&str) -> Result<T, Malformed>,
        every: Duration,
    ) -> Result<Arc<Self>, FileError> {
        let refresh = Some((every, std::sync::Mutex::new(std::time::Instant::now())));
        Self::read_first(what, path, parse, refresh)
    }

    fn read_first(
        what: &'static str,
        path: &Path,
        parse: fn(&str) -> Result<T, Malformed>,
        refresh: Option<(Duration, std::sync::Mutex<std::time::Instant>)>,
    ) -> Result<Arc<Self>, FileError> {
        let (value, stamp) = read(what, path, parse)?;
        Ok(Arc::new(Self {
            what,
            path: path.to_owned(),
            parse,
            current: RwLock::new((Arc::new(value), stamp)),
            refresh,
        }))
    }

    /// The contents in force.
    pub fn current(&self) -> Arc<T> {
        if let Some((every, last)) = &self.refresh {
            let due = {
                let mut last = last.lock().unwrap_or_else(|e| e.into_inner());
                let due = last.elapsed() >= *every;
                if due {
                    *last = std::time::Instant::now();
                }
                due
            };
            if due {
                self.reload();
            }
        }
        self.current
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .0
            .clone()
    }

    /// Reads the file again if it changed since the last read.
    pub fn reload(&self) {
        let now = stamp(&self.path);
        if now.is_some() && now == self.current.read().unwrap_or_else(|e| e.into_inner()).1 {
            return;
        }
        match read(self.what, &self.path, self.parse) {
            Ok((value, stamp)) => {
                tracing::info!(file = %self.path.display(), what = self.what, "reloaded");
                *self.current.write().unwrap_or_else(|e| e.into_inner()) = (Arc::new(value), stamp);
            }
            Err(e) => {
                tracing::warn!(error = %e, "{} not reloaded; the previous contents stay", self.what)
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
        let file = self.clone();
        tasks.spawn(async move {
            loop {
                tokio::select! {
                    _ = shutdown.cancelled() => return,
                    _ = tokio::time::sleep(every) => file.reload(),
                }
            }
        });
    }
}

fn read<T>(
    what: &'static str,
    path: &Path,
    parse: fn(&str) -> Result<T, Malformed>,
) -> Result<(T, Stamp), FileError> {
    let stamp = stamp(path);
    let text = std::fs::read_to_string(path).map_err(|source| FileError::Read {
        what,
        path: path.to_owned(),
        source,
    })?;
    let value = parse(&text).map_err(|source| FileError::Malformed {
        what,
        path: path.to_owned(),
        source,
    })?;
    Ok((value, stamp))
}

/// Loads an API keys file.
pub fn load_api_keys(what: &'static str, path: &Path) -> Result<Arc<ApiKeys>, FileError> {
    ApiKeys::load(what, path, parse_keys)
}

/// Loads a service token file.
pub fn load_service_token(what: &'static str, path: &Path) -> Result<Arc<ServiceToken>, FileError> {
    ServiceToken::load(what, path, parse_token)
}

/// The bearer credential of `request`: `UNAUTHENTICATED` when it has none.
pub fn bearer<T>(request: &Request<T>) -> Result<&str, Status> {
    let header = request.metadata().get("authorization").ok_or_else(|| {
        Status::unauthenticated("authorization: missing; send `authorization: Bearer <API key>`")
    })?;
    header
        .to_str()
        .ok()
        .and_then(|v| {
            v.strip_prefix("Bearer ")
                .or_else(|| v.strip_prefix("bearer "))
        })
        .map(str::trim)
        .ok_or_else(|| Status::unauthenticated("authorization: expected `Bearer <API key>`"))
}

impl ApiKeys {
    /// The tenant of `request`'s bearer key.
    pub fn authenticate<T>(&self, request: &Request<T>) -> Result<Tenant, Status> {
        let key = bearer(request)?;
        self.tenant_of_key(key)
            .ok_or_else(|| Status::unauthenticated("authorization: unknown API key"))
    }

    /// The tenant `key` names, if it is a key in force.
    pub fn tenant_of_key(&self, key: &str) -> Option<Tenant> {
        self.current().get(key).map(|t| Tenant(t.clone()))
    }
}

impl ServiceToken {
    /// Whether `presented` is the token in force (compared in time
    /// independent of where the two differ).
    pub fn matches(&self, presented: &str) -> bool {
        let token = self.current();
        let (a, b) = (token.as_bytes(), presented.as_bytes());
        a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_keys_file_is_checked_line_by_line() {
        let keys = parse_keys("# tenants\nacme  0123456789abcdef\n\nglobex fedcba9876543210-x\n")
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
            let err = parse_keys(text).expect_err(text).to_string();
            assert!(err.contains(why), "{text:?}: {err}");
        }
        // At the limits: 16 and 256 characters, a 64-character tenant.
        assert!(parse_keys(&format!("{} {}", "t".repeat(64), "k".repeat(16))).is_ok());
        assert!(parse_keys(&format!("{} {}", "t".repeat(65), "k".repeat(16))).is_err());
        assert!(parse_keys(&format!("t {}", "k".repeat(256))).is_ok());
    }

    #[test]
    fn a_token_is_16_to_4096_printable_characters() {
        assert_eq!(
            parse_token(&format!("  {}\n", "t".repeat(16))).expect("at the minimum"),
            "t".repeat(16)
        );
        assert!(parse_token(&"t".repeat(15)).is_err());
        assert!(parse_token(&"t".repeat(4096)).is_ok());
        assert!(parse_token(&"t".repeat(4097)).is_err());
        assert!(parse_token("0123456789 abcdef").is_err());
    }

    fn with(name: &'static str, value: &str) -> Request<()> {
        let mut r = Request::new(());
        r.metadata_mut().insert(name, value.parse().expect("ascii"));
        r
    }

    #[test]
    fn bearer_keys_name_the_tenant_and_files_reload() {
        let dir = std::env::temp_dir().join(format!("baton-auth-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("mkdir");
        let file = dir.join("keys");
        std::fs::write(&file, "acme 0123456789abcdef\n").expect("write");
        let keys = load_api_keys("auth.api_keys_file", &file).expect("load");
        let auth = |v: &str| with("authorization", v);
        assert_eq!(
            keys.authenticate(&auth("Bearer 0123456789abcdef"))
                .expect("known"),
            Tenant("acme".into())
        );
        for (r, why) in [
            (Request::new(()), "missing"),
            (auth("Basic 0123456789abcdef"), "expected `Bearer"),
            (auth("Bearer 0123456789abcdeX"), "unknown API key"),
        ] {
            let s = keys.authenticate(&r).expect_err(why);
            assert_eq!(s.code(), tonic::Code::Unauthenticated);
            assert!(s.message().contains(why), "{}", s.message());
        }
        // A rotated file is picked up; a broken one keeps the previous keys.
        std::thread::sleep(Duration::from_millis(20));
        std::fs::write(&file, "acme 1111111111111111\n").expect("rotate");
        keys.reload();
        assert!(keys.authenticate(&auth("Bearer 1111111111111111")).is_ok());
        assert!(keys.authenticate(&auth("Bearer 0123456789abcdef")).is_err());
        std::thread::sleep(Duration::from_millis(20));
        std::fs::write(&file, "broken\n").expect("break");
        keys.reload();
        assert!(keys.authenticate(&auth("Bearer 1111111111111111")).is_ok());

        let token_file = dir.join("token");
        std::fs::write(&token_file, "s3rvice-token-0123\n").expect("write");
        let token = load_service_token("store.token_file", &token_file).expect("token");
        assert!(token.matches("s3rvice-token-0123"));
        assert!(!token.matches("s3rvice-token-0124"));
        assert!(!token.matches("s3rvice-token-012"));
        // A refreshing token picks a rotation up by itself.
        let fresh = ServiceToken::refreshing(
            "store.token_file",
            &token_file,
            parse_token,
            Duration::from_millis(1),
        )
        .expect("refreshing");
        std::thread::sleep(Duration::from_millis(20));
        std::fs::write(&token_file, "r0tated-token-0123456\n").expect("rotate");
        std::thread::sleep(Duration::from_millis(5));
        assert!(fresh.matches("r0tated-token-0123456"));
        let err = load_service_token("store.token_file", &dir.join("absent"))
            .err()
            .expect("absent");
        assert!(matches!(err, FileError::Read { .. }), "{err}");
        assert!(err.to_string().starts_with("store.token_file "), "{err}");
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn a_stated_tenant_must_be_a_tenant_name() {
        assert_eq!(
            stated_tenant(&Request::new(())).expect("none"),
            Tenant::default()
        );
        assert_eq!(
            stated_tenant(&with(TENANT_HEADER, "acme")).expect("acme"),
            Tenant("acme".into())
        );
        for bad in ["Acme", "a/b", &"t".repeat(65)] {
            let s = stated_tenant(&with(TENANT_HEADER, bad)).expect_err(bad);
            assert_eq!(s.code(), tonic::Code::InvalidArgument);
            assert!(s.message().contains(TENANT_HEADER), "{}", s.message());
        }
    }
}
