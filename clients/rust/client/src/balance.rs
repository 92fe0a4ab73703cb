//! Channels to one address or to every address a DNS name resolves to.
//!
//! gRPC keeps one HTTP/2 connection open and sends every call over it, so a
//! client of a Kubernetes ClusterIP Service talks to one pod for as long as
//! the connection lives, however many replicas there are. A target written
//! the way gRPC names it, `dns:///name:port`, gets one connection per
//! address the name resolves to (a headless Service resolves to every ready
//! pod) and spreads calls over them (tower's power-of-two-choices on
//! in-flight calls). The name is resolved again every [`DNS_REFRESH`]:
//! new addresses are added, vanished ones removed. When a lookup fails or
//! returns nothing, the addresses already known are kept: a stale address
//! fails its calls fast with `UNAVAILABLE`, while an empty set would make
//! calls wait.

use std::{collections::HashSet, future::Future, net::SocketAddr, pin::Pin, time::Duration};

use tonic::transport::{Channel, Endpoint, channel::Change};

use crate::{error::Error, tls::ClientTls};

/// How often a `dns:///` target is resolved again.
pub const DNS_REFRESH: Duration = Duration::from_secs(5);

pub use crate::target::DNS_SCHEME;

/// How long connecting to one address may take: a black-holed address fails
/// its calls with `UNAVAILABLE` after this, instead of the kernel's minutes.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Resolves `host`, `port` to addresses (see [`lazy_channel_with`]).
pub type Resolve = dyn Fn(String, u16) -> Pin<Box<dyn Future<Output = std::io::Result<Vec<SocketAddr>>> + Send>>
    + Send
    + Sync;

/// A channel to `target` that connects on first use and reconnects by
/// itself: `http://host:port` (or `https://`) is one connection;
/// `dns:///host:port` balances over every address of `host` (see the module
/// docs). Needs a Tokio runtime for `dns:///` targets.
pub fn lazy_channel(target: &str) -> Result<Channel, Error> {
    lazy_channel_tls(target, &ClientTls::default())
}

/// [`lazy_channel`] with TLS settings (see [`crate::tls`]).
pub fn lazy_channel_tls(target: &str, tls: &ClientTls) -> Result<Channel, Error> {
    lazy_channel_full(
        target,
        tls,
        std::sync::Arc::new(system_resolve),
        DNS_REFRESH,
    )
}

/// [`lazy_channel`] with a resolver and refresh interval of the caller's
/// (tests use a resolver they can change).
pub fn lazy_channel_with(
    target: &str,
    resolve: std::sync::Arc<Resolve>,
    refresh: Duration,
) -> Result<Channel, Error> {
    lazy_channel_full(target, &ClientTls::default(), resolve, refresh)
}

fn lazy_channel_full(
    target: &str,
    tls: &ClientTls,
    resolve: std::sync::Arc<Resolve>,
    refresh: Duration,
) -> Result<Channel, Error> {
    let bad = |message: String| Error::Connect {
        endpoint: target.to_owned(),
        message,
    };
    let (host, port) = match Target::parse(target).map_err(|e| bad(e.to_string()))? {
        Target::One(endpoint) => {
            let mut endpoint = *endpoint;
            if tls.applies_to(target) {
                let domain = endpoint.uri().host().unwrap_or_default().to_owned();
                endpoint = endpoint
                    .tls_config(tls.config(target, &domain)?)
                    .map_err(|e| bad(e.to_string()))?;
            }
            return Ok(endpoint
                .tcp_nodelay(true)
                .connect_timeout(CONNECT_TIMEOUT)
                .connect_lazy());
        }
        Target::Dns { host, port } => (host, port),
    };
    // Every address is checked against the name, not the address.
    let tls_config = if tls.applies_to(target) {
        let config = tls.config(target, &host)?;
        // Checked once here, so every address below takes it.
        Endpoint::from_static("https://127.0.0.1:1")
            .tls_config(config.clone())
            .map_err(|e| bad(e.to_string()))?;
        Some(config)
    } else {
        None
    };
    let (channel, changes) = Channel::balance_channel::<SocketAddr>(64);
    tokio::spawn(async move {
        let mut known: HashSet<SocketAddr> = HashSet::new();
        loop {
            match resolve(host.clone(), port).await {
                Ok(found) if !found.is_empty() => {
                    let found: HashSet<SocketAddr> = found.into_iter().collect();
                    for gone in known.difference(&found) {
                        if changes.send(Change::Remove(*gone)).await.is_err() {
                            return;
                        }
                    }
                    for new in found.difference(&known) {
                        let scheme = if tls_config.is_some() {
                            "https"
                        } else {
                            "http"
                        };
                        let mut endpoint = Endpoint::from_shared(format!("{scheme}://{new}"))
                            .expect("a socket address makes a valid URI")
                            .tcp_nodelay(true)
                            .connect_timeout(CONNECT_TIMEOUT);
                        if let Some(c) = &tls_config
                            && let Ok(e) = endpoint.clone().tls_config(c.clone())
                        {
                            endpoint = e;
                        }
                        if changes.send(Change::Insert(*new, endpoint)).await.is_err() {
                            return;
                        }
                    }
                    known = found;
                }
                // Keep what is known (see the module docs).
                Ok(_) | Err(_) => {}
            }
            tokio::select! {
                // Every clone of the channel is gone.
                _ = changes.closed() => return,
                _ = tokio::time::sleep(refresh) => {}
            }
        }
    });
    Ok(channel)
}

/// Checks that `target` is a target [`lazy_channel`] takes; the error says
/// what is wrong. Needs no runtime (for config validation).
pub fn check_target(target: &str) -> Result<(), TargetError> {
    Target::parse(target).map(|_| ())
}

/// What is wrong with a `host:port` (what follows `dns:///`, or the
/// authority of a target's URI).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HostPortError {
    /// No `:port` after the name.
    #[error("needs a port: host:port or dns:///host:port")]
    NoPort,
    /// A URI without an explicit port.
    #[error("needs a port: http://host:port or dns:///host:port")]
    NoUriPort,
    /// What follows the last `:` is not a port number.
    #[error("{0:?} is not a port")]
    NotAPort(String),
    /// Nothing before the `:port`.
    #[error("needs a host name")]
    NoHost,
}

/// Why a target is refused; the message names the target.
#[derive(Debug, thiserror::Error)]
pub enum TargetError {
    /// It is not a URI (and not a `dns:///` target).
    #[error("{target:?}: {source}")]
    NotAUri {
        /// The target.
        target: String,
        /// What the URI parser said.
        source: tonic::transport::Error,
    },
    /// Its name or port is missing or malformed.
    #[error("{target:?}: {source}")]
    HostPort {
        /// The target.
        target: String,
        /// What is wrong with it.
        source: HostPortError,
    },
}

/// A target, parsed: one endpoint, or a name whose every address is one.
#[derive(Debug)]
pub enum Target {
    /// `http://host:port` or `https://host:port`: one connection.
    One(Box<Endpoint>),
    /// `dns:///host:port`: every address `host` resolves to.
    Dns {
        /// The name to resolve.
        host: String,
        /// The port of every address.
        port: u16,
    },
}

impl Target {
    /// Parses a target as [`lazy_channel`] takes it; the error names the
    /// target and what is wrong.
    pub fn parse(target: &str) -> Result<Self, TargetError> {
        let Some(name) = target.strip_prefix(DNS_SCHEME) else {
            return Endpoint::from_shared(target.to_owned())
                .map(|e| Target::One(Box::new(e)))
                .map_err(|source| TargetError::NotAUri {
                    target: target.to_owned(),
                    source,
                });
        };
        let (host, port) = host_port(name).map_err(|source| TargetError::HostPort {
            target: target.to_owned(),
            source,
        })?;
        Ok(Target::Dns { host, port })
    }

    /// The host and port the target names (of the name to resolve, or of
    /// the endpoint's URI); an error when the URI has no explicit port.
    pub fn host_port(&self) -> Result<(String, u16), HostPortError> {
        match self {
            Target::Dns { host, port } => Ok((host.clone(), *port)),
            Target::One(endpoint) => {
                let uri = endpoint.uri();
                let host = uri
                    .host()
                    .filter(|h| !h.is_empty())
                    .ok_or(HostPortError::NoHost)?;
                let port = uri.port_u16().ok_or(HostPortError::NoUriPort)?;
                Ok((
                    host.trim_start_matches('[')
                        .trim_end_matches(']')
                        .to_owned(),
                    port,
                ))
            }
        }
    }
}

/// Splits `host:port` (`[v6]:port` too): what follows `dns:///` in a target,
/// or an address list entry. The error says what is missing.
pub fn host_port(name: &str) -> Result<(String, u16), HostPortError> {
    let (host, port) = name.rsplit_once(':').ok_or(HostPortError::NoPort)?;
    let port: u16 = port
        .parse()
        .map_err(|_| HostPortError::NotAPort(port.to_owned()))?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    if host.is_empty() {
        return Err(HostPortError::NoHost);
    }
    Ok((host.to_owned(), port))
}

fn system_resolve(
    host: String,
    port: u16,
) -> Pin<Box<dyn Future<Output = std::io::Result<Vec<SocketAddr>>> + Send>> {
    Box::pin(async move {
        Ok(tokio::net::lookup_host((host.as_str(), port))
            .await?
            .collect())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn bad_targets_are_refused_with_the_reason() {
        for (target, why) in [
            ("dns:///store", "needs a port"),
            ("dns:///store:http", "is not a port"),
            ("dns:///:50052", "needs a host"),
            ("not a uri", "invalid"),
        ] {
            let err = lazy_channel(target).expect_err(target);
            assert!(
                err.message().to_lowercase().contains(why),
                "{target}: {err}"
            );
        }
        assert!(matches!(
            check_target("dns:///store"),
            Err(TargetError::HostPort {
                source: HostPortError::NoPort,
                ..
            })
        ));
        assert_eq!(
            check_target("dns:///store:http")
                .expect_err("no port")
                .to_string(),
            r#""dns:///store:http": "http" is not a port"#
        );
        assert!(check_target("dns:///store:50052").is_ok());
        assert!(lazy_channel("http://127.0.0.1:1").is_ok());
        assert!(lazy_channel("dns:///localhost:1").is_ok());
        assert!(lazy_channel("dns:///[::1]:1").is_ok());
    }
}
