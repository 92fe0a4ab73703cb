//! The chaos test, short: a real cluster (Redis, a context store, three
//! durable orchestrator replicas) under 30 s of faults — kills, pauses
//! shorter and longer than the lease, drains — while ten clients run the
//! example agents and pipeline through it, once with peer forwarding and
//! once without; then every run is checked (see `baton_e2e::chaos`).
//! Bounded: each run stops by itself within about a minute.
//!
//! `BATON_CHAOS_SEED=N` replays a seed (printed first on every run);
//! `BATON_BIN_DIR` runs other binaries than the ones this crate builds.
//! The soak is `baton-bench chaos`.

use baton_e2e::chaos::{self, Binaries, Options};

/// The binaries `BATON_BIN_DIR` names, else the ones this crate builds
/// (the services' own `main`, so `cargo test -p baton-e2e` is never stale).
fn binaries() -> Binaries {
    match Binaries::from_env() {
        Some(found) => found.expect("BATON_BIN_DIR holds the binaries"),
        None => Binaries {
            orchestrator: env!("CARGO_BIN_EXE_baton-e2e-orchestrator").into(),
            context_store: env!("CARGO_BIN_EXE_baton-e2e-context-store").into(),
        },
    }
}

async fn chaos_run(peers: bool) {
    let seed = chaos::seed_from_env().expect("seed");
    let options = Options::short(seed, peers, binaries());
    let summary = chaos::run(&options).await.expect("the chaos run");
    assert!(summary.runs_started > 0, "no run started:\n{summary}");
    // The faults happened, and did something: every kind at least once
    // (the nemesis takes each once first), and runs were taken over.
    for (kind, n) in &summary.faults {
        assert!(*n > 0, "no {kind} fault:\n{summary}");
    }
    assert!(summary.resumes > 0, "no run resumed:\n{summary}");
    assert!(summary.runs_completed > 0, "no run completed:\n{summary}");
    // The answers that race: rivals, and the client's late second answers.
    assert!(summary.rivals > 0, "no rival answered:\n{summary}");
    assert!(summary.late > 0, "no late second answer:\n{summary}");
    // Answers near a short deadline, and the context store read back.
    assert!(summary.tight_runs > 0, "no tight run:\n{summary}");
    assert!(
        summary.near_before + summary.near_after > 0,
        "no answer near a deadline:\n{summary}"
    );
    assert!(summary.store_slots > 0, "no slot checked:\n{summary}");
    assert!(
        summary.conversations > 0 && summary.conversation_messages > 0,
        "no conversation checked:\n{summary}"
    );
    let lines: Vec<String> = summary.violations.iter().map(|v| v.to_string()).collect();
    assert!(
        lines.is_empty(),
        "{} violations (seed {seed}, peers {}; the summary is above, replica logs in {}):\n{}",
        lines.len(),
        if peers { "on" } else { "off" },
        summary.logs.display(),
        lines.join("\n")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn durable_runs_keep_every_rule_under_faults_with_peers() {
    chaos_run(true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn durable_runs_keep_every_rule_under_faults_without_peers() {
    chaos_run(false).await;
}
