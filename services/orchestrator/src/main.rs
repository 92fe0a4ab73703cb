//! `baton-orchestrator`: serves `baton.v1.Orchestrator` (see the crate docs).

/// mimalloc instead of the system allocator: the runtime allocates many
/// small, short-lived objects across threads; on the pipeline benchmark's
/// fan-out it took 53 ms down to 34 ms (see docs/performance.md).
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> anyhow::Result<()> {
    baton_orchestrator::main()
}
