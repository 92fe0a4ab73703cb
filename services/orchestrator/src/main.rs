//! `baton-orchestrator`: serves `baton.v1.Orchestrator` (see the crate docs).

use std::path::PathBuf;

use anyhow::Context;
use baton_orchestrator::config::{Config, ENV_PREFIX};
use clap::Parser;

/// Baton's orchestrator: runs agents and streams their events.
#[derive(Parser)]
#[command(version, about)]
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

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let config: Config = baton_common::config::load(
        args.config.as_deref(),
        ENV_PREFIX,
        std::env::vars(),
        &args.sets,
    )?;
    config
        .validate()
        .map_err(|e| anyhow::anyhow!("invalid config: {e}"))?;
    if args.print_config {
        let text = baton_common::config::to_toml(&config)
            .map_err(|e| anyhow::anyhow!("cannot print the config: {e}"))?;
        print!("{text}");
        return Ok(());
    }
    let runtime =
        baton_common::runtime::build(config.worker_threads).context("cannot start the runtime")?;
    runtime.block_on(async move {
        let _telemetry = baton_common::telemetry::init("baton-orchestrator", &config.log)
            .map_err(|e| anyhow::anyhow!(e))?;
        let listener = tokio::net::TcpListener::bind(config.listen)
            .await
            .with_context(|| format!("cannot listen on {}", config.listen))?;
        let shutdown = baton_common::shutdown::on_signal();
        baton_orchestrator::run(config, listener, shutdown).await
    })
}
