//! How the orchestrator speaks TLS to the servers it calls (the context
//! store, its peer replicas, tool servers): a config section shared by
//! their settings.

use serde::{Deserialize, Serialize};

/// How the orchestrator speaks TLS to a server it calls (the context
/// store, a tool server).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TlsClient {
    /// TLS for a `dns:///` endpoint too.
    pub enabled: bool,
    /// The CA (PEM) the server's certificate is checked against; empty: the
    /// system's roots.
    pub ca_file: std::path::PathBuf,
    /// A client certificate (PEM) to present (to a store with
    /// `tls.client_ca_file`, it is the service credential).
    pub cert_file: std::path::PathBuf,
    /// Its key (PEM).
    pub key_file: std::path::PathBuf,
}

impl TlsClient {
    /// The client's TLS settings.
    pub fn client(&self) -> baton_client::ClientTls {
        let path = |p: &std::path::PathBuf| (!p.as_os_str().is_empty()).then(|| p.clone());
        baton_client::ClientTls {
            enabled: self.enabled,
            ca_file: path(&self.ca_file),
            cert_file: path(&self.cert_file),
            key_file: path(&self.key_file),
        }
    }
}
