//! Per-tenant quotas of the orchestrator (`quotas.default`,
//! `quotas.tenants.<name>`), each at and just over its limit: runs not
//! ended, runs waiting for people, model tokens per hour, model tokens and
//! cost per UTC day (reserved before each call, so parallel calls cannot
//! overspend them). Over a quota the
//! call is `RESOURCE_EXHAUSTED` naming it, and nothing starts; with durable
//! runs the quotas hold across replicas (a parked run, in no replica's
//! memory, still counts).

use std::{path::PathBuf, time::Duration};

use baton_client::{
    Error, Events, OrchestratorClient,
    pb::{self, run_event::Payload},
};
use baton_e2e::{OrchestratorServer, RedisServer, eventually, wait_for};
use baton_orchestrator::config::{Config, RunQuota};
use futures::StreamExt;
use tonic::Code;

const ACME: &str = "acme-key-0123456789";
const GLOBEX: &str = "globex-key-9876543210";

const AGENTS: &str = r#"
scripts:
  asker:
    - calls: [{tool: write_context, args: {key: "k", value: "v"}}]
      usage: {input_tokens: 1, output_tokens: 1}
    - text: "done"
      usage: {input_tokens: 1, output_tokens: 1}
  spender:
    - text: "spent"
      usage: {input_tokens: 60, output_tokens: 40}
  pricey:
    - text: "spent"
      delay: 100ms
      usage: {input_tokens: 60, output_tokens: 40}
  greedy:
    - calls: [{tool: sleep, args: {ms: 1}}]
      usage: {input_tokens: 100, output_tokens: 50}
    - text: "never said"
      usage: {input_tokens: 1, output_tokens: 1}
  sleeper:
    - calls: [{tool: sleep, args: {ms: 3000}}]
      usage: {input_tokens: 1, output_tokens: 1}
    - text: "slept"
      usage: {input_tokens: 1, output_tokens: 1}
prices:
  "scripted:pricey": {input: 1000, output: 1000}
agents:
  pricey: {model: "scripted:pricey", settings: {max_tokens: 40}}
  asker:
    model: "scripted:asker"
    tools: [write_context]
    approvals: {write_context: always}
  spender: {model: "scripted:spender"}
  greedy: {model: "scripted:greedy", tools: [sleep]}
  sleeper: {model: "scripted:sleeper", tools: [sleep]}
"#;

fn keys_file(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("baton-quotas-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("mkdir");
    let path = dir.join("api-keys");
    std::fs::write(&path, format!("acme {ACME}\nglobex {GLOBEX}\n")).expect("keys");
    path
}

fn quota(runs: Option<u64>, parked: Option<u64>, tokens: Option<u64>) -> RunQuota {
    RunQuota {
        concurrent_runs: runs,
        parked_runs: parked,
        model_tokens_per_hour: tokens,
        ..Default::default()
    }
}

/// An orchestrator with API keys for acme and globex, configured further by
/// `configure`.
async fn server(name: &str, configure: impl FnOnce(&mut Config)) -> OrchestratorServer {
    let keys = keys_file(name);
    OrchestratorServer::start(AGENTS, None, move |c| {
        c.auth.api_keys_file = keys;
        configure(c);
    })
    .await
    .expect("orchestrator")
}

async fn as_tenant(server: &OrchestratorServer, key: &str) -> OrchestratorClient {
    server
        .client()
        .await
        .expect("client")
        .with_api_key(key)
        .expect("ascii")
}

fn request(agent: &str) -> pb::RunAgentRequest {
    pb::RunAgentRequest {
        agent: agent.into(),
        input: "x".into(),
        ..Default::default()
    }
}

/// Starts a run that asks for approval; its stream, run id and question.
async fn asking(client: &OrchestratorClient) -> (Events, String, String) {
    let mut events = client.run_agent(request("asker")).await.expect("admitted");
    let asked = wait_for(&mut events, &mut Vec::new(), |e| {
        matches!(e.payload, Some(Payload::ApprovalRequested(_)))
    })
    .await;
    let Some(Payload::ApprovalRequested(q)) = asked.payload else {
        unreachable!()
    };
    (events, asked.run_id, q.approval_id)
}

/// The status of a refused start.
async fn refused(client: &OrchestratorClient, agent: &str) -> Error {
    client
        .run_agent(request(agent))
        .await
        .err()
        .expect("the run is refused")
}

#[track_caller]
fn assert_quota(e: &Error, quota: &str, tenant: &str) {
    assert_eq!(e.code(), Code::ResourceExhausted, "{e}");
    assert!(
        e.message().contains(&format!("quotas.{quota}")) && e.message().contains(tenant),
        "names the quota and tenant: {e}"
    );
}

async fn to_end(mut events: Events) -> pb::RunEvent {
    let mut last = None;
    while let Some(e) = events.next().await {
        last = Some(e.expect("event"));
    }
    last.expect("a terminal event")
}

fn metrics(server: &OrchestratorServer) -> String {
    baton_common::metrics::render(&server.core.metrics().registry)
}

#[tokio::test]
async fn concurrent_runs_per_tenant_at_and_over_the_limit() {
    let server = server("runs", |c| {
        c.quotas.default = quota(Some(2), None, None);
        c.quotas
            .tenants
            .insert("globex".into(), quota(Some(3), None, None));
    })
    .await;
    let acme = as_tenant(&server, ACME).await;
    let globex = as_tenant(&server, GLOBEX).await;

    // acme: two runs (its limit) wait; a third is refused, nothing starts.
    let (first, first_id, first_q) = asking(&acme).await;
    let (_second, _, _) = asking(&acme).await;
    let e = refused(&acme, "spender").await;
    assert_quota(&e, "concurrent_runs", "tenant acme");
    assert!(e.message().contains("(2)"), "{e}");
    assert_eq!(server.core.runs().running(), 2, "nothing started");

    // globex's own limit (3), apart from acme's.
    let mut globex_runs = Vec::new();
    for _ in 0..3 {
        globex_runs.push(asking(&globex).await);
    }
    assert_quota(
        &refused(&globex, "spender").await,
        "concurrent_runs",
        "tenant globex",
    );

    let text = metrics(&server);
    assert!(
        text.contains(r#"baton_tenant_runs{tenant="acme"} 2"#),
        "{text}"
    );
    assert!(
        text.contains(r#"baton_tenant_runs{tenant="globex"} 3"#),
        "{text}"
    );
    assert!(
        text.contains(r#"baton_quota_refusals_total{tenant="acme",quota="concurrent_runs"} 1"#),
        "{text}"
    );

    // One of acme's runs ends: acme may start one more.
    acme.resolve_approval(&first_id, &first_q, true, "ok")
        .await
        .expect("approve");
    let end = to_end(first).await;
    assert!(
        matches!(end.payload, Some(Payload::RunCompleted(_))),
        "{end:?}"
    );
    eventually("acme's ended run no longer counts", || async {
        acme.run_agent(request("spender")).await.is_ok()
    })
    .await;
}

#[tokio::test]
async fn runs_waiting_for_people_stop_new_runs_of_their_tenant() {
    let server = server("parked", |c| {
        c.quotas
            .tenants
            .insert("acme".into(), quota(None, Some(1), None));
    })
    .await;
    let acme = as_tenant(&server, ACME).await;
    let globex = as_tenant(&server, GLOBEX).await;

    // Nothing waits: acme may start runs.
    assert!(matches!(
        to_end(acme.run_agent(request("spender")).await.expect("admitted"))
            .await
            .payload,
        Some(Payload::RunCompleted(_))
    ));
    // One run waits for a person (the limit): the next is refused.
    let (waiting, run_id, question) = asking(&acme).await;
    let e = refused(&acme, "spender").await;
    assert_quota(&e, "parked_runs", "tenant acme");
    assert!(e.message().contains("wait for a person"), "{e}");
    assert!(
        metrics(&server).contains(r#"baton_tenant_runs_waiting{tenant="acme"} 1"#),
        "{}",
        metrics(&server)
    );
    // globex has no such quota.
    let (_g, _, _) = asking(&globex).await;
    let (_g2, _, _) = asking(&globex).await;

    // Answered: acme's run no longer waits, and acme may start runs again.
    acme.resolve_approval(&run_id, &question, true, "ok")
        .await
        .expect("approve");
    to_end(waiting).await;
    let end = to_end(acme.run_agent(request("spender")).await.expect("admitted")).await;
    assert!(
        matches!(end.payload, Some(Payload::RunCompleted(_))),
        "{end:?}"
    );
}

#[tokio::test]
async fn model_tokens_per_hour_refuse_new_runs_and_the_next_model_turn() {
    let server = server("tokens", |c| {
        c.quotas.default = quota(None, None, Some(200));
        c.quotas
            .tenants
            .insert("globex".into(), quota(None, None, Some(150)));
    })
    .await;
    let acme = as_tenant(&server, ACME).await;
    let globex = as_tenant(&server, GLOBEX).await;

    // acme: 100 tokens a run; after two it used its 200.
    for _ in 0..2 {
        let end = to_end(acme.run_agent(request("spender")).await.expect("admitted")).await;
        assert!(
            matches!(end.payload, Some(Payload::RunCompleted(_))),
            "{end:?}"
        );
    }
    let e = refused(&acme, "spender").await;
    assert_quota(&e, "model_tokens_per_hour", "tenant acme");
    assert!(e.message().contains("200 model tokens"), "{e}");

    // globex: the first turn uses all 150; the second is not asked, and the
    // run fails naming the quota.
    let end = to_end(globex.run_agent(request("greedy")).await.expect("admitted")).await;
    match end.payload {
        Some(Payload::RunFailed(f)) => {
            assert_eq!(f.code, Code::ResourceExhausted as i32, "{f:?}");
            assert!(f.message.contains("quotas.model_tokens_per_hour"), "{f:?}");
        }
        other => panic!("expected RunFailed, got {other:?}"),
    }
    let text = metrics(&server);
    assert!(
        text.contains(r#"baton_tenant_model_tokens_total{tenant="acme"} 200"#),
        "{text}"
    );
    assert!(
        text.contains(r#"baton_tenant_model_tokens_total{tenant="globex"} 150"#),
        "{text}"
    );
}

/// Two replicas sharing runs in Redis: the quotas hold across them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_durable_runs_quotas_hold_across_replicas_and_parked_runs_count() {
    let redis = RedisServer::start().expect("redis-server");
    let replica = |name: &'static str| {
        let durable = baton_e2e::durable_runs(redis.url());
        server(name, move |c| {
            durable(c);
            c.runs.lease = Duration::from_secs(1);
            c.runs.park_after = Duration::from_millis(200);
            c.quotas
                .tenants
                .insert("acme".into(), quota(Some(2), Some(1), None));
            c.quotas
                .tenants
                .insert("globex".into(), quota(None, None, Some(200)));
        })
    };
    let a = replica("durable-a").await;
    let b = replica("durable-b").await;
    let (acme_a, acme_b) = (as_tenant(&a, ACME).await, as_tenant(&b, ACME).await);

    // A detached run waits for a person on a, and is parked: no replica
    // holds it, yet acme is at parked_runs (1) on b too.
    let mut parked_request = request("asker");
    parked_request.detach = true;
    let mut events = acme_a.run_agent(parked_request).await.expect("admitted");
    let asked = wait_for(&mut events, &mut Vec::new(), |e| {
        matches!(e.payload, Some(Payload::ApprovalRequested(_)))
    })
    .await;
    drop(events);
    let Some(Payload::ApprovalRequested(q)) = asked.payload else {
        unreachable!()
    };
    eventually("the run is parked", || async {
        a.core.runs().running() == 0
    })
    .await;
    assert_quota(
        &refused(&acme_b, "sleeper").await,
        "parked_runs",
        "tenant acme",
    );

    // Answered on b: it resumes, ends, and acme may start runs again.
    acme_b
        .resolve_approval(&asked.run_id, &q.approval_id, true, "ok")
        .await
        .expect("approve");
    eventually("the parked run ends", || async {
        acme_b
            .get_run(&asked.run_id)
            .await
            .is_ok_and(|r| r.status == pb::RunStatus::Completed as i32)
    })
    .await;

    // concurrent_runs (2) across replicas: one run on each, a third on
    // either is refused.
    let one = acme_a
        .run_agent(request("sleeper"))
        .await
        .expect("admitted");
    let two = acme_b
        .run_agent(request("sleeper"))
        .await
        .expect("admitted");
    assert_quota(
        &refused(&acme_a, "sleeper").await,
        "concurrent_runs",
        "tenant acme",
    );
    to_end(one).await;
    to_end(two).await;
    eventually("ended runs no longer count", || async {
        acme_a.run_agent(request("spender")).await.is_ok()
    })
    .await;

    // model_tokens_per_hour (200) across replicas: 100 on each, then none.
    let (globex_a, globex_b) = (as_tenant(&a, GLOBEX).await, as_tenant(&b, GLOBEX).await);
    to_end(
        globex_a
            .run_agent(request("spender"))
            .await
            .expect("admitted"),
    )
    .await;
    to_end(
        globex_b
            .run_agent(request("spender"))
            .await
            .expect("admitted"),
    )
    .await;
    assert_quota(
        &refused(&globex_a, "spender").await,
        "model_tokens_per_hour",
        "tenant globex",
    );
}

fn day_budget(tokens: Option<u64>, cost: Option<f64>) -> RunQuota {
    RunQuota {
        model_tokens_per_day: tokens,
        model_cost_per_day: cost.map(|c| baton_orchestrator::config::Money((c * 1e9) as u64)),
        ..Default::default()
    }
}

/// Runs `agent` for `client` to its end; whether it completed, and its
/// failure's message.
async fn outcome(client: &OrchestratorClient, agent: &str) -> Result<(), String> {
    let end = to_end(client.run_agent(request(agent)).await.expect("admitted")).await;
    match end.payload {
        Some(Payload::RunCompleted(_)) => Ok(()),
        Some(Payload::RunFailed(f)) => {
            assert_eq!(f.code, Code::ResourceExhausted as i32, "{f:?}");
            Err(f.message)
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn model_budgets_per_day_hold_at_their_limit_and_refuse_one_token_over() {
    // Each spender call is 60 in (the script's estimate) and 40 out.
    let server = server("per-day", |c| {
        c.quotas.default = day_budget(Some(200), None);
        // globex's budget leaves room for 60 in and 39 out after one run:
        // its second call is capped, not refused.
        c.quotas
            .tenants
            .insert("globex".into(), day_budget(Some(199), None));
    })
    .await;
    let acme = as_tenant(&server, ACME).await;
    let globex = as_tenant(&server, GLOBEX).await;
    // acme: 100 + 100 = its 200; the third call needs 61.
    assert_eq!(outcome(&acme, "spender").await, Ok(()));
    assert_eq!(outcome(&acme, "spender").await, Ok(()));
    let e = outcome(&acme, "spender")
        .await
        .expect_err("over the day's budget");
    assert_eq!(
        e,
        "quotas.model_tokens_per_day: tenant acme: 200 of 200 tokens spent this UTC day; the next model call needs at least 61"
    );
    // globex: 100, then 60 in and 39 out (capped): 199.
    assert_eq!(outcome(&globex, "spender").await, Ok(()));
    assert_eq!(outcome(&globex, "spender").await, Ok(()));
    assert!(outcome(&globex, "spender").await.is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cost_budget_per_day_holds_for_parallel_calls_across_replicas() {
    let redis = RedisServer::start().expect("redis-server");
    let replica = |name: &'static str| {
        let durable = baton_e2e::durable_runs(redis.url());
        server(name, move |c| {
            durable(c);
            // pricey: 1000 per million tokens, 100 tokens a call at most
            // (60 in, 40 out): 0.1 a call; the day holds four calls.
            c.quotas.default = day_budget(None, Some(0.4));
        })
    };
    let (a, b) = (replica("cost-a").await, replica("cost-b").await);
    let (on_a, on_b) = (as_tenant(&a, ACME).await, as_tenant(&b, ACME).await);
    // Ten calls at once on two replicas: four fit the day, six are refused
    // before they call.
    let runs: Vec<_> = (0..10)
        .map(|i| {
            let client = if i % 2 == 0 {
                on_a.clone()
            } else {
                on_b.clone()
            };
            tokio::spawn(async move { outcome(&client, "pricey").await })
        })
        .collect();
    let mut done = 0;
    let mut refused = Vec::new();
    for r in runs {
        match r.await.expect("run") {
            Ok(()) => done += 1,
            Err(m) => refused.push(m),
        }
    }
    eprintln!(
        "10 parallel calls on 2 replicas against a day's budget for 4: {done} ran, {} refused",
        refused.len()
    );
    assert_eq!((done, refused.len()), (4, 6), "{refused:?}");
    assert!(
        refused[0].starts_with("quotas.model_cost_per_day: tenant acme: "),
        "{}",
        refused[0]
    );
}
