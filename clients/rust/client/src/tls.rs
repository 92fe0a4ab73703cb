//! TLS towards Baton's servers.
//!
//! An `https://` endpoint speaks TLS, checking the server's certificate
//! against the system's roots, or against the CA of [`ClientTls::ca_file`]
//! when set; a `dns:///` target does when [`ClientTls::enabled`] is set
//! (every address is then checked against the name, not the address). With
//! [`ClientTls::cert_file`] and [`ClientTls::key_file`] the client presents
//! a certificate (a server with `tls.client_ca_file` requires one). Files
//! are read when the channel is made.

use std::path::PathBuf;

use tonic::transport::{Certificate, ClientTlsConfig, Identity};

use crate::{error::Error, target::DNS_SCHEME};

/// How a client speaks TLS (see the module docs).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClientTls {
    /// TLS for `dns:///` targets too (`https://` always speaks it).
    pub enabled: bool,
    /// The CA (PEM) server certificates are checked against; `None`: the
    /// system's roots.
    pub ca_file: Option<PathBuf>,
    /// This client's certificate (PEM), for mTLS.
    pub cert_file: Option<PathBuf>,
    /// This client's key (PEM), for mTLS.
    pub key_file: Option<PathBuf>,
}

fn read(endpoint: &str, what: &str, path: &PathBuf) -> Result<Vec<u8>, Error> {
    std::fs::read(path).map_err(|e| Error::Connect {
        endpoint: endpoint.to_owned(),
        message: format!("{what} {}: {e}", path.display()),
    })
}

impl ClientTls {
    /// Whether a channel to `target` speaks TLS.
    pub fn applies_to(&self, target: &str) -> bool {
        target.starts_with("https://") || (self.enabled && target.starts_with(DNS_SCHEME))
    }

    /// The tonic config for a server named `domain` (`endpoint` names the
    /// target in errors).
    pub fn config(&self, endpoint: &str, domain: &str) -> Result<ClientTlsConfig, Error> {
        let mut config = ClientTlsConfig::new().domain_name(domain);
        config = match &self.ca_file {
            Some(ca) => {
                config.ca_certificate(Certificate::from_pem(read(endpoint, "CA file", ca)?))
            }
            None => config.with_native_roots(),
        };
        match (&self.cert_file, &self.key_file) {
            (Some(cert), Some(key)) => Ok(config.identity(Identity::from_pem(
                read(endpoint, "certificate file", cert)?,
                read(endpoint, "key file", key)?,
            ))),
            (None, None) => Ok(config),
            _ => Err(Error::Connect {
                endpoint: endpoint.to_owned(),
                message: "a client certificate needs both its certificate and its key file".into(),
            }),
        }
    }
}
