//! Channels to a server, and what every call on them carries: the one way
//! [`crate::OrchestratorClient`] and [`crate::StoreClient`] connect.

use crate::{
    balance,
    error::{Error, cause_chain},
    target::{DNS_SCHEME, with_scheme},
    tls::ClientTls,
};

/// `authorization: Bearer <key>`, or an error when `key` is not printable
/// ASCII.
pub(crate) fn bearer(key: &str) -> Result<tonic::metadata::AsciiMetadataValue, Error> {
    format!("Bearer {key}").parse().map_err(|_| Error::Connect {
        endpoint: String::new(),
        message: "the API key must be printable ASCII".into(),
    })
}

/// Opens a channel to `endpoint` (`http://host:port`), connecting now; a
/// `dns:///host:port` target is balanced over every address of the name and
/// connects on first use (see [`balance`]).
pub async fn channel(endpoint: impl Into<String>) -> Result<tonic::transport::Channel, Error> {
    channel_with(endpoint, &ClientTls::default()).await
}

/// [`channel`] with TLS settings (an `https://` endpoint always speaks TLS;
/// see [`crate::tls`]).
pub async fn channel_with(
    endpoint: impl Into<String>,
    tls: &ClientTls,
) -> Result<tonic::transport::Channel, Error> {
    let endpoint = with_scheme(endpoint.into());
    if endpoint.starts_with(DNS_SCHEME) {
        return balance::lazy_channel_tls(&endpoint, tls);
    }
    let mut e =
        tonic::transport::Endpoint::from_shared(endpoint.clone()).map_err(|e| Error::Connect {
            endpoint: endpoint.clone(),
            message: e.to_string(),
        })?;
    if tls.applies_to(&endpoint) {
        let domain = e.uri().host().unwrap_or_default().to_owned();
        e = e
            .tls_config(tls.config(&endpoint, &domain)?)
            .map_err(|err| Error::Connect {
                endpoint: endpoint.clone(),
                message: err.to_string(),
            })?;
    }
    e.tcp_nodelay(true)
        .connect()
        .await
        .map_err(|e| Error::Connect {
            endpoint,
            message: cause_chain(&e),
        })
}
