//! The `main` every service binary runs: parse `--config`, `--set` and
//! `--print-config`, load and validate the config, build the runtime it asks
//! for, start logging, bind, and run until SIGTERM or SIGINT.
//!
//! `--print-config` prints a config that only lacks what serving needs (a
//! credential, say), with a note on stderr, and exits 0; a wrong value
//! fails as it does at start.

use std::{future::Future, net::SocketAddr, path::PathBuf};

use anyhow::Context;
use clap::{CommandFactory, FromArgMatches, Parser};
use serde::{Serialize, de::DeserializeOwned};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::logging::LogConfig;

/// What `main` needs to know of a service's config.
pub trait ServiceConfig: Serialize + DeserializeOwned + Default {
    /// Prefix of the environment variables the service reads.
    const ENV_PREFIX: &'static str;
    /// Why a config of the service is refused (its message names the
    /// field).
    type Invalid: std::fmt::Display;
    /// Checks the whole config; returns the first problem. A wrong value is
    /// reported before anything the config lacks to serve (see
    /// [`ServiceConfig::incomplete`]).
    fn validate(&self) -> Result<(), Self::Invalid>;
    /// Whether `invalid` only says that the config lacks something the
    /// service needs to serve (a credential), every value in it being
    /// well-formed: `--print-config` prints such a config, with a note on
    /// stderr, where a wrong value fails. None does by default.
    fn incomplete(invalid: &Self::Invalid) -> bool {
        let _ = invalid;
        false
    }
    /// Where to listen.
    fn listen(&self) -> SocketAddr;
    /// Runtime worker threads (see [`crate::runtime::build`]).
    fn worker_threads(&self) -> usize;
    /// Logging.
    fn log(&self) -> &LogConfig;
}

#[derive(Parser)]
struct Args {
    /// A TOML config file.
    #[arg(long, short)]
    config: Option<PathBuf>,
    /// Overrides one config field, `path.to.field=value` (repeatable).
    #[arg(long = "set", value_name = "PATH=VALUE")]
    sets: Vec<String>,
    /// Prints the effective config as TOML and exits.
    #[arg(long)]
    print_config: bool,
    /// Asks the instance listening at this config's `listen` address for its
    /// grpc.health.v1 status (the overall service, `""`) and exits 0 when it
    /// is SERVING, 1 otherwise. For container health checks in images
    /// without a shell (docker compose, `HEALTHCHECK`); Kubernetes uses its
    /// native gRPC probes instead.
    #[arg(long, conflicts_with = "print_config")]
    health: bool,
}

/// Runs a service binary: `run(config, listener, shutdown)` is the service's
/// library entry point, the same one its tests call.
pub fn main<C, F, Fut>(
    name: &'static str,
    version: &'static str,
    about: &'static str,
    run: F,
) -> anyhow::Result<()>
where
    C: ServiceConfig,
    F: FnOnce(C, TcpListener, CancellationToken) -> Fut,
    Fut: Future<Output = anyhow::Result<()>>,
{
    let matches = Args::command()
        .name(name)
        .version(version)
        .about(about)
        .get_matches();
    let args = Args::from_arg_matches(&matches)?;
    let config: C = crate::config::load(
        args.config.as_deref(),
        C::ENV_PREFIX,
        std::env::vars(),
        &args.sets,
    )?;
    if let Err(e) = config.validate() {
        // A config that only lacks what serving needs (the default one of
        // a service that requires a credential) is still worth printing.
        if !(args.print_config && C::incomplete(&e)) {
            anyhow::bail!("invalid config: {e}");
        }
        eprintln!("note: the service would not start with this config: {e}");
    }
    if args.print_config {
        let text = crate::config::to_toml(&config).context("cannot print the config")?;
        print!("{text}");
        return Ok(());
    }
    if args.health {
        return check_health(config.listen());
    }
    let runtime =
        crate::runtime::build(config.worker_threads()).context("cannot start the runtime")?;
    runtime.block_on(async move {
        let _telemetry = crate::logging::init(name, config.log())?;
        let listen = config.listen();
        let listener = TcpListener::bind(listen)
            .await
            .with_context(|| format!("cannot listen on {listen}"))?;
        let shutdown = crate::shutdown::on_signal();
        run(config, listener, shutdown).await
    })
}

/// The address to probe for a server listening on `listen`: an unspecified
/// IP (`0.0.0.0`, `::`) is reached over loopback.
pub fn probe_address(listen: SocketAddr) -> SocketAddr {
    let ip = match listen.ip() {
        std::net::IpAddr::V4(ip) if ip.is_unspecified() => std::net::Ipv4Addr::LOCALHOST.into(),
        std::net::IpAddr::V6(ip) if ip.is_unspecified() => std::net::Ipv6Addr::LOCALHOST.into(),
        ip => ip,
    };
    SocketAddr::new(ip, listen.port())
}

/// `--health`: one grpc.health.v1 Check of the local instance, 3 s deadline.
fn check_health(listen: SocketAddr) -> anyhow::Result<()> {
    use tonic_health::pb::{
        HealthCheckRequest, health_check_response::ServingStatus, health_client::HealthClient,
    };
    let addr = probe_address(listen);
    let runtime = crate::runtime::build(1).context("cannot start the runtime")?;
    let status = runtime.block_on(async move {
        let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))?
            .connect_timeout(std::time::Duration::from_secs(3))
            .timeout(std::time::Duration::from_secs(3))
            .connect()
            .await
            .with_context(|| format!("cannot connect to {addr}"))?;
        let response = HealthClient::new(channel)
            .check(HealthCheckRequest {
                service: String::new(),
            })
            .await
            .with_context(|| format!("health check of {addr} failed"))?;
        anyhow::Ok(response.into_inner().status)
    })?;
    if status == ServingStatus::Serving as i32 {
        println!("{addr}: SERVING");
        Ok(())
    } else {
        let name = ServingStatus::try_from(status)
            .map(|s| s.as_str_name())
            .unwrap_or("UNKNOWN");
        anyhow::bail!("{addr}: {name}")
    }
}

#[cfg(test)]
mod tests {
    use super::probe_address;

    #[test]
    fn an_unspecified_listen_address_is_probed_over_loopback() {
        let p = |s: &str| probe_address(s.parse().expect("addr")).to_string();
        assert_eq!(p("0.0.0.0:50051"), "127.0.0.1:50051");
        assert_eq!(p("[::]:50052"), "[::1]:50052");
        assert_eq!(p("10.1.2.3:7"), "10.1.2.3:7");
    }
}
