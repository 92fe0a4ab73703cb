//! `baton-bench chaos`: the chaos test's soak — the cluster, nemesis,
//! workload and checker of `baton_e2e::chaos` for `--duration` (30 min by
//! default) with faults every 10–30 s and 40 clients, against the release
//! binaries next to this one (`cargo build --release -p baton-orchestrator
//! -p baton-context-store -p baton-bench`; `BATON_BIN_DIR` names another
//! directory). With `--peers both` it runs once without peer forwarding,
//! then once with it, on the same seed. Any violation makes it exit
//! non-zero.

use std::time::Duration;

use baton_e2e::chaos::{self, Binaries};

/// Peer forwarding in the runs.
#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Peers {
    /// Replicas forward run-scoped calls to each other.
    On,
    /// No forwarding.
    Off,
    /// One run without, then one with.
    Both,
}

/// What to run.
#[derive(clap::Args)]
pub struct Options {
    /// How long faults are injected, per run (`90s`, `30m`, `2h`).
    #[arg(long, default_value = "30m", value_parser = parse_duration)]
    duration: Duration,
    /// Peer forwarding: on, off, or both (two runs).
    #[arg(long, value_enum, default_value_t = Peers::Both)]
    peers: Peers,
    /// The seed (default: BATON_CHAOS_SEED, else a fresh one).
    #[arg(long)]
    seed: Option<u64>,
    /// Concurrent clients.
    #[arg(long, default_value_t = 40)]
    clients: usize,
}

fn parse_duration(s: &str) -> Result<Duration, String> {
    baton_common::config::duration::parse(s).map_err(|e| e.to_string())
}

/// Runs the soak; an error when a rule broke.
pub fn run(o: Options) -> anyhow::Result<()> {
    let seed = match o.seed {
        Some(seed) => seed,
        None => chaos::seed_from_env()?,
    };
    let binaries = Binaries::locate()?;
    let settings: &[bool] = match o.peers {
        Peers::On => &[true],
        Peers::Off => &[false],
        Peers::Both => &[false, true],
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let mut broken = Vec::new();
    for &peers in settings {
        let mut options = chaos::Options::long(seed, peers, o.duration, binaries.clone());
        options.clients = o.clients;
        let summary = rt.block_on(chaos::run(&options))?;
        if !summary.violations.is_empty() {
            broken.push(format!(
                "peers {}: {} violations ({:?}), logs in {}",
                if peers { "on" } else { "off" },
                summary.violations.len(),
                summary.violation_kinds(),
                summary.logs.display()
            ));
        }
    }
    anyhow::ensure!(broken.is_empty(), "seed {seed}: {}", broken.join("; "));
    println!("chaos: seed {seed}: no violation");
    Ok(())
}
