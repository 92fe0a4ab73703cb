//! `baton-context-store`: serves `baton.v1.ContextStore` (see the crate docs).

fn main() -> anyhow::Result<()> {
    baton_common::service::main::<baton_context_store::config::Config, _, _>(
        "baton-context-store",
        env!("CARGO_PKG_VERSION"),
        "Baton's context store: trace-scoped key/value slots on Redis or in memory",
        baton_context_store::run,
    )
}
