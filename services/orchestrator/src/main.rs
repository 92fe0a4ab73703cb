//! `baton-orchestrator`: serves `baton.v1.Orchestrator` (see the crate docs).

fn main() -> anyhow::Result<()> {
    baton_common::service::main::<baton_orchestrator::config::Config, _, _>(
        "baton-orchestrator",
        env!("CARGO_PKG_VERSION"),
        "Baton's orchestrator: runs agents and streams their events",
        baton_orchestrator::run,
    )
}
