//! How to reach Redis ([`RedisConfig`], the `redis` section of the store's
//! config and `runs.redis` of the orchestrator's), and the checks it passes
//! at start.

use std::{path::PathBuf, time::Duration};

use redis::{IntoConnectionInfo, TlsCertificates};
use serde::{Deserialize, Serialize};

/// How to reach Redis.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RedisConfig {
    /// A single node (or a proxy): `redis://[user:pass@]host:port[/db]`,
    /// `rediss://` for TLS. Ignored when `cluster_urls` is set.
    pub url: String,
    /// Redis Cluster seed nodes; when not empty the cluster client is used.
    pub cluster_urls: Vec<String>,
    /// Prefix of every key and channel the store uses.
    pub key_prefix: String,
    /// Deadline of one Redis command and of one connection attempt.
    #[serde(with = "baton_common::config::duration")]
    pub timeout: Duration,
    /// For `rediss://`: the CA certificate (PEM) Redis's certificate is
    /// checked against; empty: the system's roots.
    pub ca_file: PathBuf,
    /// For `rediss://` to a Redis that wants client certificates
    /// (`tls-auth-clients yes`, its default): this client's certificate
    /// chain and key (PEM); both or neither. Read at start.
    pub cert_file: PathBuf,
    /// See `cert_file`.
    pub key_file: PathBuf,
}

impl Default for RedisConfig {
    fn default() -> Self {
        Self {
            url: "redis://127.0.0.1:6379".into(),
            cluster_urls: Vec::new(),
            key_prefix: "baton".into(),
            timeout: Duration::from_secs(2),
            ca_file: PathBuf::new(),
            cert_file: PathBuf::new(),
            key_file: PathBuf::new(),
        }
    }
}

/// Why a `redis` section is refused; the message names the field (relative
/// to the section: a caller that nests it, like `runs.redis`, prefixes it).
#[derive(Debug, thiserror::Error)]
pub enum RedisConfigError {
    /// A URL does not parse.
    #[error("redis url {url:?}: {source}")]
    Url {
        /// The URL.
        url: String,
        /// What the client library said.
        source: redis::RedisError,
    },
    /// `key_prefix` is empty or holds a brace (braces are hash tags).
    #[error("redis.key_prefix must be non-empty and contain no braces")]
    KeyPrefix,
    /// `timeout` is zero.
    #[error("redis.timeout must be positive")]
    Timeout,
    /// Only one of `cert_file` and `key_file` is set.
    #[error("redis.cert_file and redis.key_file go together")]
    CertWithoutKey,
    /// A certificate or key file cannot be read.
    #[error("redis.{field} {}: {source}", path.display())]
    File {
        /// The setting (`ca_file`, `cert_file`, `key_file`).
        field: &'static str,
        /// The file.
        path: PathBuf,
        /// Why it cannot be read.
        source: std::io::Error,
    },
    /// TLS files are set but a URL is not `rediss://`.
    #[error("redis.ca_file, cert_file and key_file are for rediss:// URLs, not {0:?}")]
    TlsFilesWithPlainUrl(String),
}

impl RedisConfig {
    /// Checks the config is usable; reads the TLS files it names.
    pub fn validate(&self) -> Result<(), RedisConfigError> {
        let urls: Vec<&String> = if self.cluster_urls.is_empty() {
            vec![&self.url]
        } else {
            self.cluster_urls.iter().collect()
        };
        for u in &urls {
            u.as_str()
                .into_connection_info()
                .map_err(|source| RedisConfigError::Url {
                    url: (*u).clone(),
                    source,
                })?;
        }
        if self.key_prefix.is_empty() || self.key_prefix.contains(['{', '}']) {
            return Err(RedisConfigError::KeyPrefix);
        }
        if self.timeout.is_zero() {
            return Err(RedisConfigError::Timeout);
        }
        if self.cert_file.as_os_str().is_empty() != self.key_file.as_os_str().is_empty() {
            return Err(RedisConfigError::CertWithoutKey);
        }
        let tls_files = self.tls_certificates()?.is_some();
        if tls_files && let Some(plain) = urls.iter().find(|u| !u.starts_with("rediss://")) {
            return Err(RedisConfigError::TlsFilesWithPlainUrl((*plain).clone()));
        }
        Ok(())
    }

    /// The certificates this config names for `rediss://` (its CA, its
    /// client certificate), `None` when it names none (system roots, no
    /// client certificate); an error naming the file that cannot be read.
    pub fn tls_certificates(&self) -> Result<Option<TlsCertificates>, RedisConfigError> {
        let read = |field: &'static str, path: &std::path::Path| {
            std::fs::read(path).map_err(|source| RedisConfigError::File {
                field,
                path: path.to_owned(),
                source,
            })
        };
        let root_cert = if self.ca_file.as_os_str().is_empty() {
            None
        } else {
            Some(read("ca_file", &self.ca_file)?)
        };
        let client_tls = if self.cert_file.as_os_str().is_empty() {
            None
        } else {
            Some(redis::ClientTlsConfig {
                client_cert: read("cert_file", &self.cert_file)?,
                client_key: read("key_file", &self.key_file)?,
            })
        };
        Ok(
            (root_cert.is_some() || client_tls.is_some()).then_some(TlsCertificates {
                client_tls,
                root_cert,
            }),
        )
    }
}
