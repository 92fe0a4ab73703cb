//! `baton-orchestrator` as the end-to-end tests run it: the same `main`
//! (baton_common's service main over `baton_orchestrator::run`, mimalloc),
//! built as a target of this crate so that `cargo test -p baton-e2e`
//! builds it too and its tests never run a stale binary (a test only sees
//! `CARGO_BIN_EXE_*` of its own package). The chaos test runs it.

/// As the service binary (see services/orchestrator/src/main.rs).
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> anyhow::Result<()> {
    baton_orchestrator::main()
}
