//! The `main` every service binary runs: parse `--config`, `--set` and
//! `--print-config`, load and validate the config, build the runtime it asks
//! for, start logging, bind, and run until SIGTERM or SIGINT.

use std::{future::Future, net::SocketAddr, path::PathBuf};

use anyhow::Context;
use clap::{CommandFactory, FromArgMatches, Parser};
use serde::{Serialize, de::DeserializeOwned};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::telemetry::LogConfig;

/// What `main` needs to know of a service's config.
pub trait ServiceConfig: Serialize + DeserializeOwned + Default {
    /// Prefix of the environment variables the service reads.
    const ENV_PREFIX: &'static str;
    /// Checks the whole config; returns the first problem, naming the field.
    fn validate(&self) -> Result<(), String>;
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
    config
        .validate()
        .map_err(|e| anyhow::anyhow!("invalid config: {e}"))?;
    if args.print_config {
        let text = crate::config::to_toml(&config)
            .map_err(|e| anyhow::anyhow!("cannot print the config: {e}"))?;
        print!("{text}");
        return Ok(());
    }
    let runtime =
        crate::runtime::build(config.worker_threads()).context("cannot start the runtime")?;
    runtime.block_on(async move {
        let _telemetry =
            crate::telemetry::init(name, config.log()).map_err(|e| anyhow::anyhow!(e))?;
        let listen = config.listen();
        let listener = TcpListener::bind(listen)
            .await
            .with_context(|| format!("cannot listen on {listen}"))?;
        let shutdown = crate::shutdown::on_signal();
        run(config, listener, shutdown).await
    })
}
