//! TLS for the gRPC servers (rustls), with certificate files that are read
//! again when they change (cert-manager renews a Secret, the kubelet updates
//! the mounted files, the next handshakes use the new ones: no restart).
//!
//! `tls.cert_file` + `tls.key_file` (PEM) turn TLS on for the service's whole
//! port (gRPC, gRPC-web, health, reflection); `tls.client_ca_file` also
//! requires every client to present a certificate that CA signed (mTLS).
//! The files are checked every `tls.reload` (modification time and length)
//! on the next handshake; a change that does not make a valid config is
//! logged and the previous one stays. ALPN offers `h2` and `http/1.1` (the
//! latter for gRPC-web from browsers).

use std::{
    path::{Path, PathBuf},
    sync::{Arc, Mutex, RwLock},
    time::{Duration, Instant, SystemTime},
};

use rustls::pki_types::{CertificateDer, PrivateKeyDer, pem::PemObject};
use serde::{Deserialize, Serialize};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::server::TlsStream;
use tokio_stream::wrappers::ReceiverStream;

/// The `tls` section of a service's config.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TlsConfig {
    /// The server's certificate chain (PEM); with `key_file`, the port
    /// speaks TLS only.
    pub cert_file: PathBuf,
    /// The server's private key (PEM).
    pub key_file: PathBuf,
    /// When set: clients must present a certificate this CA (PEM) signed.
    pub client_ca_file: PathBuf,
    /// How often the files are checked for changes.
    #[serde(with = "crate::config::duration")]
    pub reload: Duration,
}

impl Default for TlsConfig {
    fn default() -> Self {
        Self {
            cert_file: PathBuf::new(),
            key_file: PathBuf::new(),
            client_ca_file: PathBuf::new(),
            reload: Duration::from_secs(30),
        }
    }
}

fn set(p: &Path) -> bool {
    !p.as_os_str().is_empty()
}

impl TlsConfig {
    /// Whether the port speaks TLS.
    pub fn enabled(&self) -> bool {
        set(&self.cert_file)
    }

    /// Checks the section.
    pub fn validate(&self) -> Result<(), TlsError> {
        if set(&self.cert_file) != set(&self.key_file) {
            return Err(TlsError::CertWithoutKey);
        }
        if set(&self.client_ca_file) && !self.enabled() {
            return Err(TlsError::ClientCaWithoutCert);
        }
        if self.reload.is_zero() {
            return Err(TlsError::Reload);
        }
        Ok(())
    }
}

/// Why a `tls` section is refused, or the files it names do not make a
/// server config; the message names the field (and the file).
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// Only one of `cert_file` and `key_file` is set.
    #[error("tls.cert_file and tls.key_file go together: set both or neither")]
    CertWithoutKey,
    /// `client_ca_file` without a certificate of the server's own.
    #[error("tls.client_ca_file needs tls.cert_file and tls.key_file")]
    ClientCaWithoutCert,
    /// `reload` is zero.
    #[error("tls.reload must be positive")]
    Reload,
    /// A PEM file cannot be read or parsed.
    #[error("{field} {}: {source}", path.display())]
    Pem {
        /// The setting naming the file.
        field: String,
        /// The file.
        path: PathBuf,
        /// Why.
        source: rustls::pki_types::pem::Error,
    },
    /// A certificate file holds no certificate.
    #[error("{field} {}: no certificate in it", path.display())]
    NoCertificate {
        /// The setting naming the file.
        field: String,
        /// The file.
        path: PathBuf,
    },
    /// The client CA is not a usable trust anchor.
    #[error("tls.client_ca_file {}: {source}", path.display())]
    ClientCa {
        /// The file.
        path: PathBuf,
        /// Why.
        source: rustls::Error,
    },
    /// No client verifier can be built from the client CA.
    #[error("tls.client_ca_file {}: {source}", path.display())]
    ClientVerifier {
        /// The file.
        path: PathBuf,
        /// Why.
        source: rustls::server::VerifierBuilderError,
    },
    /// The certificate and key do not go together.
    #[error("tls.cert_file / tls.key_file: {0}")]
    KeyPair(rustls::Error),
}

/// Installs the process's rustls crypto provider (aws-lc-rs) once.
pub fn crypto_provider() {
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
}

/// Reads a PEM certificate chain; errors name `field` and the file.
pub fn read_certs(field: &str, path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let pem = |source| TlsError::Pem {
        field: field.to_owned(),
        path: path.to_owned(),
        source,
    };
    let certs = CertificateDer::pem_file_iter(path)
        .and_then(|i| i.collect::<Result<Vec<_>, _>>())
        .map_err(pem)?;
    if certs.is_empty() {
        return Err(TlsError::NoCertificate {
            field: field.to_owned(),
            path: path.to_owned(),
        });
    }
    Ok(certs)
}

fn read_key(field: &str, path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    PrivateKeyDer::from_pem_file(path).map_err(|source| TlsError::Pem {
        field: field.to_owned(),
        path: path.to_owned(),
        source,
    })
}

fn server_config(c: &TlsConfig) -> Result<rustls::ServerConfig, TlsError> {
    crypto_provider();
    let certs = read_certs("tls.cert_file", &c.cert_file)?;
    let key = read_key("tls.key_file", &c.key_file)?;
    let builder = rustls::ServerConfig::builder();
    let builder = if set(&c.client_ca_file) {
        let mut roots = rustls::RootCertStore::empty();
        for ca in read_certs("tls.client_ca_file", &c.client_ca_file)? {
            roots.add(ca).map_err(|source| TlsError::ClientCa {
                path: c.client_ca_file.clone(),
                source,
            })?;
        }
        let verifier = rustls::server::WebPkiClientVerifier::builder(Arc::new(roots))
            .build()
            .map_err(|source| TlsError::ClientVerifier {
                path: c.client_ca_file.clone(),
                source,
            })?;
        builder.with_client_cert_verifier(verifier)
    } else {
        builder.with_no_client_auth()
    };
    let mut config = builder
        .with_single_cert(certs, key)
        .map_err(TlsError::KeyPair)?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(config)
}

type Stamps = [Option<(SystemTime, u64)>; 3];

fn stamps(c: &TlsConfig) -> Stamps {
    let one = |p: &Path| {
        std::fs::metadata(p)
            .ok()
            .and_then(|m| Some((m.modified().ok()?, m.len())))
    };
    [one(&c.cert_file), one(&c.key_file), one(&c.client_ca_file)]
}

/// A server's TLS: the config in force, rebuilt when its files change.
pub struct ServerTls {
    config: TlsConfig,
    current: RwLock<(Arc<rustls::ServerConfig>, Stamps)>,
    checked: Mutex<Instant>,
}

impl ServerTls {
    /// Reads the files of `config`; `None` when TLS is off. A bad file is an
    /// error naming it.
    pub fn load(config: &TlsConfig) -> Result<Option<Arc<Self>>, TlsError> {
        if !config.enabled() {
            return Ok(None);
        }
        let stamps = stamps(config);
        let server = server_config(config)?;
        Ok(Some(Arc::new(Self {
            config: config.clone(),
            current: RwLock::new((Arc::new(server), stamps)),
            checked: Mutex::new(Instant::now()),
        })))
    }

    /// Whether clients must present certificates.
    pub fn verifies_clients(&self) -> bool {
        set(&self.config.client_ca_file)
    }

    /// The config for the next handshake (re-read first when the files
    /// changed and `tls.reload` has passed since the last look).
    fn acceptor(&self) -> tokio_rustls::TlsAcceptor {
        let due = {
            let mut checked = self.checked.lock().unwrap_or_else(|e| e.into_inner());
            let due = checked.elapsed() >= self.config.reload;
            if due {
                *checked = Instant::now();
            }
            due
        };
        if due {
            let now = stamps(&self.config);
            let changed = now != self.current.read().unwrap_or_else(|e| e.into_inner()).1;
            if changed {
                match server_config(&self.config) {
                    Ok(fresh) => {
                        tracing::info!(file = %self.config.cert_file.display(), "TLS certificates reloaded");
                        *self.current.write().unwrap_or_else(|e| e.into_inner()) =
                            (Arc::new(fresh), now);
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "TLS files changed but do not make a valid config; the previous one stays")
                    }
                }
            }
        }
        let config = self
            .current
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .0
            .clone();
        tokio_rustls::TlsAcceptor::from(config)
    }
}

/// How long a client may take over its handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// The TLS connections of `listener`: each accepted TCP connection does
/// its handshake in a task of its own (a slow client holds up no other);
/// a failed handshake is logged at debug and dropped. Accepting stops when
/// the stream is dropped.
pub fn incoming(
    listener: TcpListener,
    tls: Arc<ServerTls>,
) -> ReceiverStream<Result<TlsStream<TcpStream>, std::io::Error>> {
    let (tx, rx) = tokio::sync::mpsc::channel(64);
    tokio::spawn(async move {
        loop {
            let accepted = tokio::select! {
                _ = tx.closed() => return,
                a = listener.accept() => a,
            };
            let (tcp, peer) = match accepted {
                Ok(a) => a,
                Err(e) => {
                    // Out of file descriptors, say: wait a little, go on.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            };
            let _ = tcp.set_nodelay(true);
            let acceptor = tls.acceptor();
            let tx = tx.clone();
            tokio::spawn(async move {
                match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
                    Ok(Ok(stream)) => {
                        let _ = tx.send(Ok(stream)).await;
                    }
                    Ok(Err(e)) => tracing::debug!(%peer, error = %e, "TLS handshake failed"),
                    Err(_) => tracing::debug!(%peer, "TLS handshake timed out"),
                }
            });
        }
    });
    ReceiverStream::new(rx)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_section_is_checked() {
        let mut c = TlsConfig::default();
        c.validate().expect("off");
        assert!(!c.enabled());
        c.cert_file = "/c.pem".into();
        assert!(
            c.validate()
                .expect_err("no key")
                .to_string()
                .contains("tls.key_file")
        );
        c.key_file = "/k.pem".into();
        c.validate().expect("both");
        c = TlsConfig {
            client_ca_file: "/ca.pem".into(),
            ..TlsConfig::default()
        };
        assert!(
            c.validate()
                .expect_err("ca alone")
                .to_string()
                .contains("tls.client_ca_file")
        );
        let err = ServerTls::load(&TlsConfig {
            cert_file: "/nonexistent/c.pem".into(),
            key_file: "/nonexistent/k.pem".into(),
            ..TlsConfig::default()
        })
        .err()
        .expect("missing files")
        .to_string();
        assert!(err.starts_with("tls.cert_file /nonexistent/c.pem"), "{err}");
    }
}
