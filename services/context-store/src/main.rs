//! `baton-context-store`: serves `baton.v1.ContextStore` (see the crate docs).

/// mimalloc instead of the system allocator: the runtime allocates many
/// small, short-lived objects across threads; on the pipeline benchmark's
/// fan-out it took 53 ms down to 34 ms (see docs/performance.md).
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> anyhow::Result<()> {
    baton_common::runtime::disable_transparent_huge_pages();
    baton_common::service::main::<baton_context_store::config::Config, _, _>(
        "baton-context-store",
        env!("CARGO_PKG_VERSION"),
        "Baton's context store: trace-scoped key/value slots on Redis or in memory",
        baton_context_store::run,
    )
}
