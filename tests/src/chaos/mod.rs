//! A Jepsen-style chaos test of durable runs: a real cluster (one
//! `redis-server`, one context store, three `baton-orchestrator` replicas
//! keeping runs in Redis), a nemesis that kills, pauses and drains
//! replicas one at a time, a workload of concurrent clients running the
//! example agents and pipeline through it — starting runs detached,
//! following them from random replicas, answering their questions — and a
//! checker that judges, once the faults stop and every replica is back,
//! what the clients saw and what every replica says of every run.
//!
//! One seed drives every choice of the nemesis and the workload (the
//! timing of a run never repeats exactly); it is printed first, and
//! `BATON_CHAOS_SEED` replays it. [`run`] is the entry point: the test
//! suite runs [`Options::short`] (`tests/tests/chaos.rs`), the soak
//! [`Options::long`] (`baton-bench chaos`).
//!
//! The modules: `options` ([`Options`], [`Binaries`]), `rng` and
//! `summary` are leaves; `cluster` runs the processes; `nemesis` injects
//! faults into it; `items` holds the workload's agents, pipeline and
//! expected outputs, `workload` the clients, which write the `history`
//! (`calls`: what they answer with, and an answer sent once; `questions`:
//! what the events ask; `deadline`: tight runs, answered near a short
//! deadline); `survey` asks every replica about every run afterwards;
//! `checker` (with `answers`, rule (e)) judges history and survey, and
//! `store` (rule (i)) the context store against the runs' logs,
//! `conversations` (rule (j)) the clients' conversations against their
//! runs, into the
//! [`Summary`]'s violations. This file only wires them together.

mod answers;
mod calls;
mod checker;
mod cluster;
mod conversations;
mod deadline;
mod history;
mod items;
mod nemesis;
mod options;
mod questions;
mod rng;
mod store;
mod summary;
mod survey;
mod workload;

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use anyhow::Context as _;

pub use cluster::Cluster;
pub use options::{BIN_DIR_VAR, Binaries, Options, SEED_VAR, seed_from_env};
pub use rng::Rng;
pub use summary::{FaultKind, Summary, Violation};

use self::{history::History, workload::Shared};

/// Runs surveyed and checked at once.
const SURVEY_BATCH: usize = 500;

/// Runs one chaos run as `options` say, and checks it: the summary, whose
/// `violations` are empty when every rule held. An error means the run
/// could not be made (a binary missing, a process that would not start),
/// not that a rule broke.
pub async fn run(options: &Options) -> anyhow::Result<Summary> {
    let peers = if options.peers { "on" } else { "off" };
    eprintln!(
        "chaos: seed {seed} (replay with {SEED_VAR}={seed} …), peers {peers}, {:?} of faults, {} clients",
        options.duration,
        options.clients,
        seed = options.seed,
    );
    let wall = Instant::now();
    let dir = tempfile::Builder::new()
        .prefix("baton-chaos-")
        .tempdir()
        .context("cannot make the run's directory")?;
    let agents = dir.path().join("agents.yaml");
    std::fs::write(&agents, items::agents_file()?)?;
    let mut cluster = Cluster::start(options, &agents, dir.path()).await?;
    eprintln!("chaos: cluster up, logs in {}", dir.path().display());

    let history = History::default();
    let began = Instant::now();
    let shared = Arc::new(Shared {
        endpoints: cluster.endpoints(),
        history: history.clone(),
        pipeline: items::research_pipeline()?,
        began,
        start_until: began + options.duration,
        follow_until: began + options.duration + options.heal_wait,
        park_after: options.park_after,
        idle: options.lease + Duration::from_secs(3),
    });
    let mut clients = tokio::task::JoinSet::new();
    for n in 0..options.clients {
        let rng = Rng::fork(options.seed, n as u64 + 1);
        clients.spawn(workload::client(shared.clone(), n, rng));
    }
    let report = nemesis::run(&mut cluster, options, Rng::fork(options.seed, 0), began).await;
    let mut violations = report.violations;
    if let Err(e) = cluster.heal().await {
        violations.push(Violation::cluster("nemesis", format!("cannot heal: {e:#}")));
    }
    eprintln!(
        "chaos: +{:.1}s faults over, every replica up; following the last runs",
        began.elapsed().as_secs_f64()
    );
    let hard = shared.follow_until + Duration::from_secs(5);
    while let Ok(Some(_)) = tokio::time::timeout_at(hard.into(), clients.join_next()).await {}
    clients.abort_all();

    let tracked = history.take();
    let ids: Vec<String> = tracked.iter().map(|t| t.run_id.clone()).collect();
    let target = survey::Target {
        clients: cluster
            .endpoints()
            .iter()
            .map(|e| cluster::lazy_client(e))
            .collect(),
        names: cluster.replicas.iter().map(|r| r.name.clone()).collect(),
        metrics: cluster.replicas.iter().map(|r| r.metrics).collect(),
        logs: cluster.replicas.iter().map(|r| r.log.clone()).collect(),
    };
    let open = survey::await_ends(&target, &ids, shared.follow_until, options.check_timeout).await;
    eprintln!(
        "chaos: +{:.1}s checking {} runs ({} not ended)",
        began.elapsed().as_secs_f64(),
        ids.len(),
        open.len()
    );
    let mut summary = Summary {
        seed: options.seed,
        duration: options.duration,
        peers: options.peers,
        runs_started: tracked.len(),
        logs: dir.path().to_path_buf(),
        ..Summary::default()
    };
    let store = baton_client::StoreClient::connect(cluster.store_endpoint())
        .await
        .context("the context store")?;
    // Chat runs that entered their conversation and ended, with how.
    let mut chats_ended = std::collections::HashMap::new();
    // In batches: a soak's replicas return millions of events.
    for batch in tracked.chunks(SURVEY_BATCH) {
        let ids: Vec<String> = batch.iter().map(|t| t.run_id.clone()).collect();
        let ended = |id: &str| !open.iter().any(|o| o == id);
        let views = survey::runs(&target, &ids, ended, options.check_timeout).await;
        for t in batch {
            let none = Vec::new();
            let seen = views.get(&t.run_id).unwrap_or(&none);
            let (found, facts) = checker::check_run(t, seen, &target.names);
            violations.extend(found);
            if let Some(log) = checker::the_log(seen) {
                let f = store::check(&store, &t.run_id, log, &mut violations).await;
                summary.store_slots += f.slots;
                summary.store_late_writes += f.late_writes;
                if t.tight {
                    summary.closed_by_deadline += deadline::closed(log);
                }
            }
            summary.tight_runs += usize::from(t.tight);
            summary.runs_completed += usize::from(facts.completed);
            if t.item == "chat"
                && let Some(ended) =
                    checker::the_log(seen).and_then(|log| conversations::ended_in(log))
            {
                chats_ended.insert(t.run_id.clone(), ended);
            }
            summary.resumes += facts.resumes;
            *summary.runs_by_item.entry(t.item).or_insert(0) += 1;
            for a in &t.answers {
                if a.late {
                    summary.late += 1;
                    summary.late_refused +=
                        usize::from(matches!(a.outcome, history::Outcome::Refused { .. }));
                    continue;
                }
                if let Some(margin) = a.margin_ms.filter(|_| !a.rival) {
                    *if margin >= 0 {
                        &mut summary.near_before
                    } else {
                        &mut summary.near_after
                    } += 1;
                    summary.near_taken += usize::from(a.outcome == history::Outcome::Ok);
                }
                if a.rival {
                    summary.rivals += 1;
                    summary.rivals_taken += usize::from(a.outcome == history::Outcome::Ok);
                    continue;
                }
                match a.outcome {
                    history::Outcome::Ok => {
                        summary.answers_ok += 1;
                        summary.answers_after_parking += usize::from(a.parked);
                    }
                    history::Outcome::Refused { .. } => summary.answers_refused += 1,
                    history::Outcome::Unknown(_) => summary.answers_unknown += 1,
                }
            }
        }
    }
    let conversations = conversations::check(
        &target.clients,
        options.clients,
        &chats_ended,
        &mut violations,
    )
    .await;
    summary.conversations = conversations.conversations;
    summary.conversation_messages = conversations.messages;
    let states = survey::replicas(&target, &ids, open.is_empty(), Duration::from_secs(3)).await;
    violations.extend(checker::check_replicas(&states, open.is_empty()));
    if open.is_empty() {
        violations.extend(checker::check_redis(cluster.redis()));
    }
    violations.sort();
    summary.violations = violations;
    summary.faults = report.faults;
    summary.failed_starts = history.failed_starts();
    summary.wall = wall.elapsed();
    drop(cluster);
    if summary.violations.is_empty() {
        drop(dir);
    } else {
        // Kept for whoever reads the violations.
        summary.logs = dir.keep();
    }
    eprintln!("{summary}");
    Ok(summary)
}
