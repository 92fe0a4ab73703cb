//! After the faults: wait (bounded) for every run to end, then ask every
//! replica about every run — GetRun and a whole WatchRun(after_seq = 0),
//! each within the check deadline — and about itself: its
//! `baton_runs_active` gauge and how often its log says a run moved to
//! another replica. The checker compares the answers; this module only
//! collects them.

use std::{
    collections::HashMap,
    net::SocketAddr,
    path::PathBuf,
    time::{Duration, Instant},
};

use baton_client::{OrchestratorClient, pb};
use futures::StreamExt;

use super::cluster::read_log;
use crate::events::is_terminal;

/// How many calls of the survey run at once.
const PARALLEL: usize = 48;

/// The least time runs are given to end once the clients are done.
const AT_LEAST: Duration = Duration::from_secs(5);

/// What one replica said of one run.
#[derive(Debug, Clone)]
pub struct ReplicaView {
    /// GetRun's answer, or why there is none.
    pub get: Result<pb::GetRunResponse, String>,
    /// WatchRun(0) read to its end, or why it did not end in time; `None`
    /// when not asked (the run had not ended).
    pub log: Option<Result<Vec<pb::RunEvent>, String>>,
}

/// What one replica said of itself.
#[derive(Debug, Clone)]
pub struct ReplicaState {
    /// Its name.
    pub name: String,
    /// `baton_runs_active`, or why it could not be read.
    pub runs_active: Result<f64, String>,
    /// What it still holds for calls once every run ended (each of
    /// [`HELD`] that is not 0), or why it could not be read.
    pub held: Result<Vec<(&'static str, f64)>, String>,
    /// Its log's lines saying "another replica owns this run now", by
    /// run id.
    pub moved: HashMap<String, usize>,
}

/// The replicas as the survey reaches them.
pub struct Target {
    /// Clients, by replica index.
    pub clients: Vec<OrchestratorClient>,
    /// Names, by replica index.
    pub names: Vec<String>,
    /// Metrics addresses, by replica index.
    pub metrics: Vec<SocketAddr>,
    /// Log files, by replica index.
    pub logs: Vec<PathBuf>,
}

/// Polls until every run in `ids` is ended on some replica (GetRun), a
/// replica after another, until `until` and at least [`AT_LEAST`] more
/// and once on every replica (a client that was shown a stale end left
/// early); the runs still not ended.
pub async fn await_ends(
    target: &Target,
    ids: &[String],
    until: Instant,
    timeout: Duration,
) -> Vec<String> {
    let until = until.max(Instant::now() + AT_LEAST);
    let mut open: Vec<String> = ids.to_vec();
    let mut round = 0usize;
    while !open.is_empty() {
        let client = &target.clients[round % target.clients.len()];
        round += 1;
        let statuses: Vec<(String, bool)> = futures::stream::iter(open.clone())
            .map(|id| async move {
                let ended = matches!(
                    tokio::time::timeout(timeout, client.get_run(&id)).await,
                    Ok(Ok(r)) if !matches!(r.status(), pb::RunStatus::Running | pb::RunStatus::Unspecified)
                );
                (id, ended)
            })
            .buffer_unordered(PARALLEL)
            .collect()
            .await;
        open = statuses
            .into_iter()
            .filter(|(_, ended)| !ended)
            .map(|(id, _)| id)
            .collect();
        open.sort();
        if Instant::now() >= until && round >= target.clients.len() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    open
}

/// GetRun and (for ended runs, `ended(id)`) WatchRun(0) of every run on
/// every replica: by run id, one view per replica.
pub async fn runs(
    target: &Target,
    ids: &[String],
    ended: impl Fn(&str) -> bool,
    timeout: Duration,
) -> HashMap<String, Vec<ReplicaView>> {
    let asks: Vec<(String, usize, bool)> = ids
        .iter()
        .flat_map(|id| {
            let watch = ended(id);
            (0..target.clients.len()).map(move |r| (id.clone(), r, watch))
        })
        .collect();
    let views: Vec<(String, usize, ReplicaView)> = futures::stream::iter(asks)
        .map(|(id, r, watch)| async move {
            let client = &target.clients[r];
            let get = match tokio::time::timeout(timeout, client.get_run(&id)).await {
                Ok(Ok(g)) => Ok(g),
                Ok(Err(e)) => Err(format!("{:?}: {}", e.code(), e.message())),
                Err(_) => Err(format!("no answer within {timeout:?}")),
            };
            let log = if watch {
                Some(whole_log(client, &id, timeout).await)
            } else {
                None
            };
            (id, r, ReplicaView { get, log })
        })
        .buffer_unordered(PARALLEL)
        .collect()
        .await;
    let mut out: HashMap<String, Vec<Option<ReplicaView>>> = HashMap::new();
    for (id, r, view) in views {
        let slots = out
            .entry(id)
            .or_insert_with(|| vec![None; target.clients.len()]);
        slots[r] = Some(view);
    }
    out.into_iter()
        .map(|(id, slots)| (id, slots.into_iter().flatten().collect()))
        .collect()
}

/// WatchRun(0) of an ended run, read within `timeout` to its end: the
/// stream must close after the terminal event (an error or silence after
/// it is reported too).
async fn whole_log(
    client: &OrchestratorClient,
    run_id: &str,
    timeout: Duration,
) -> Result<Vec<pb::RunEvent>, String> {
    let request = pb::WatchRunRequest {
        run_id: run_id.to_owned(),
        after_seq: 0,
        filter: None,
    };
    let mut events = Vec::new();
    let read = async {
        let mut stream = client
            .raw()
            .watch_run(request)
            .await
            .map_err(|e| format!("{:?}: {}", e.code(), e.message()))?
            .into_inner();
        while let Some(e) = stream.next().await {
            match e {
                Ok(e) => events.push(e),
                Err(e) => {
                    return Err(format!(
                        "broke after {} events{}: {:?}: {}",
                        events.len(),
                        ended(&events),
                        e.code(),
                        e.message()
                    ));
                }
            }
        }
        Ok(())
    };
    match tokio::time::timeout(timeout, read).await {
        Ok(Ok(())) => Ok(events),
        Ok(Err(e)) => Err(e),
        Err(_) => Err(format!(
            "did not close within {timeout:?}: {} events{}",
            events.len(),
            ended(&events)
        )),
    }
}

/// `, the terminal one among them` when `events` hold a terminal event.
fn ended(events: &[pb::RunEvent]) -> &'static str {
    if events.iter().any(is_terminal) {
        ", the terminal one among them"
    } else {
        ""
    }
}

/// Each replica's gauge (read until it is 0, up to `timeout`, when
/// `all_ended`) and log lines about runs that moved.
pub async fn replicas(
    target: &Target,
    ids: &[String],
    all_ended: bool,
    timeout: Duration,
) -> Vec<ReplicaState> {
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(2))
        .build()
        .unwrap_or_default();
    let mut out = Vec::new();
    for (r, name) in target.names.iter().enumerate() {
        let deadline = Instant::now() + timeout;
        let (runs_active, held) = loop {
            let read = runs_active(&http, target.metrics[r]).await;
            let held = held(&http, target.metrics[r]).await;
            let settled =
                matches!(read, Ok(v) if v == 0.0) && matches!(&held, Ok(h) if h.is_empty());
            if !all_ended || settled || Instant::now() >= deadline {
                break (read, held);
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        };
        let log = read_log(&target.logs[r]);
        let mut moved: HashMap<String, usize> = HashMap::new();
        for line in log
            .lines()
            .filter(|l| l.contains("another replica owns this run now"))
        {
            if let Some(id) = ids.iter().find(|id| line.contains(id.as_str())) {
                *moved.entry(id.clone()).or_insert(0) += 1;
            }
        }
        out.push(ReplicaState {
            name: name.clone(),
            runs_active,
            held,
            moved,
        });
    }
    out
}

/// What a replica holds for model calls in flight, by gauge: tokens of
/// tenants' period budgets, breaker probes, calls waiting for a rate limit.
pub const HELD: [&str; 3] = [
    "baton_tenant_model_tokens_held",
    "baton_model_breaker_probing",
    "baton_rate_limit_queue",
];

/// The gauges of [`HELD`] at `addr` that are not 0 (summed over labels).
async fn held(
    http: &reqwest::Client,
    addr: SocketAddr,
) -> Result<Vec<(&'static str, f64)>, String> {
    let text = http
        .get(format!("http://{addr}/metrics"))
        .send()
        .await
        .map_err(|e| e.to_string())?
        .text()
        .await
        .map_err(|e| e.to_string())?;
    Ok(HELD
        .iter()
        .map(|name| {
            let sum: f64 = text
                .lines()
                .filter(|l| l.starts_with(&format!("{name}{{")))
                .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
                .sum();
            (*name, sum)
        })
        .filter(|(_, v)| *v != 0.0)
        .collect())
}

/// The `baton_runs_active` gauge at `addr`.
async fn runs_active(http: &reqwest::Client, addr: SocketAddr) -> Result<f64, String> {
    let text = http
        .get(format!("http://{addr}/metrics"))
        .send()
        .await
        .map_err(|e| e.to_string())?
        .text()
        .await
        .map_err(|e| e.to_string())?;
    text.lines()
        .find_map(|l| l.strip_prefix("baton_runs_active "))
        .ok_or_else(|| "no baton_runs_active in /metrics".to_owned())?
        .trim()
        .parse::<f64>()
        .map_err(|e| e.to_string())
}
