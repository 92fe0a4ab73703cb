//! Rust client for Baton's gRPC API.
//!
//! This crate depends on the generated API types only, never on the service
//! crates: [`OrchestratorClient`] runs agents and answers their questions,
//! [`StoreClient`] reads and writes the context store.
//!
//! ```no_run
//! # async fn demo() -> Result<(), baton_client::Error> {
//! let store = baton_client::StoreClient::connect("http://127.0.0.1:50052").await?;
//! let trace = "4bf92f3577b34da6a3ce929d0e0e4736";
//! let v = store.put(trace, "notes/plan", b"step 1".to_vec()).await?.version;
//! let slot = store.get(trace, "notes/plan").await?;
//! assert_eq!(slot.value, b"step 1");
//! # let _ = v; Ok(()) }
//! ```

pub mod balance;
mod error;
mod orchestrator;
mod store;
pub mod tls;

pub use balance::lazy_channel;
pub use baton_proto::v1 as pb;
pub use error::Error;
pub use orchestrator::{Events, OrchestratorClient};
pub use store::{DeleteSelection, MetadataHook, PutEntry, PutOptions, StoreClient};
pub use tls::ClientTls;

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
/// see [`tls`]).
pub async fn channel_with(
    endpoint: impl Into<String>,
    tls: &ClientTls,
) -> Result<tonic::transport::Channel, Error> {
    let endpoint = with_scheme(endpoint.into());
    if endpoint.starts_with(balance::DNS_SCHEME) {
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

/// `host:port` as `http://host:port`; anything with a scheme (or a
/// `dns:///` target) as it is.
pub fn with_scheme(endpoint: String) -> String {
    if endpoint.contains("://") || endpoint.starts_with(balance::DNS_SCHEME) {
        endpoint
    } else {
        format!("http://{endpoint}")
    }
}

/// An error and its sources, `transport error: … : Connection refused`,
/// without repeating a source its parent already quotes.
pub fn cause_chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let text = s.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        source = s.source();
    }
    out
}
