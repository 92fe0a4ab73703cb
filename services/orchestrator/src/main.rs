//! `baton-orchestrator`: serves `baton.v1.Orchestrator` (see the crate docs).

/// mimalloc instead of the system allocator: the runtime allocates many
/// small, short-lived objects across threads; on the pipeline benchmark's
/// fan-out it took 53 ms down to 34 ms (see docs/performance.md).
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> anyhow::Result<()> {
    baton_common::runtime::disable_transparent_huge_pages();
    baton_common::service::main::<baton_orchestrator::config::Config, _, _>(
        "baton-orchestrator",
        env!("CARGO_PKG_VERSION"),
        "Baton's orchestrator: runs agents and streams their events",
        baton_orchestrator::run,
    )
}
