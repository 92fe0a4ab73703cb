//! Prices and cost (issue 46, first part): a priced model's calls carry
//! their cost beside their tokens on every face that shows usage (each
//! model turn's event, the agent's and the run's end, GetRun and ListRuns
//! over gRPC and HTTP), a model without a price shows tokens only and is
//! counted unpriced, the OpenAI provider's cached prompt tokens are priced
//! at the cached price of LiteLLM's price map, and a bad price is refused
//! at start, naming the field.

use baton_client::{OrchestratorClient, pb, pb::run_event::Payload};
use baton_e2e::{
    OrchestratorServer,
    openai::{FakeOpenAi, Reply, finish, text},
};
use futures::StreamExt;
use serde_json::{Value, json};

/// `boss` (priced) asks `helper` (unpriced) and answers.
const AGENTS: &str = r#"
prices:
  scripted:boss: {input: 2.5, output: 10, cached_input: 1.25, currency: USD}
scripts:
  boss:
    - calls: [{tool: helper, args: {task: "help"}}]
      usage: {input_tokens: 2000, cached_input_tokens: 1000, output_tokens: 500}
    - text: "done"
      usage: {input_tokens: 100, output_tokens: 10}
  helper:
    - text: "helped"
      usage: {input_tokens: 7, output_tokens: 3}
agents:
  boss: {model: "scripted:boss", tools: [helper]}
  helper: {model: "scripted:helper"}
"#;

/// 1,000 fresh prompt tokens at 2.5/M, 1,000 cached at 1.25/M, 500 out at
/// 10/M: 0.00875; then 100 in and 10 out: 0.00035.
const FIRST: u64 = 8_750_000;
const SECOND: u64 = 350_000;

async fn events(client: &OrchestratorClient, agent: &str) -> Vec<pb::RunEvent> {
    let mut stream = client
        .run_agent(pb::RunAgentRequest {
            agent: agent.into(),
            input: "x".into(),
            ..Default::default()
        })
        .await
        .expect("run");
    let mut out = Vec::new();
    while let Some(e) = stream.next().await {
        out.push(e.expect("event"));
    }
    out
}

/// The usage of the run whose events are `log`, which completed.
fn run_usage(log: &[pb::RunEvent]) -> pb::Usage {
    match log.last().and_then(|e| e.payload.as_ref()) {
        Some(Payload::RunCompleted(c)) => c.usage.clone().expect("usage"),
        other => panic!("ended with {other:?}"),
    }
}

/// GET `url` (no key: the test servers have none), as JSON.
async fn get_json(http: &reqwest::Client, url: &str) -> Value {
    http.get(url)
        .send()
        .await
        .expect("GET")
        .json()
        .await
        .expect("json")
}

fn cost(u: &pb::Usage) -> (u64, &str, u64) {
    (u.cost_nanos, u.currency.as_str(), u.unpriced_model_calls)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_priced_call_carries_its_cost_on_every_face_and_an_unpriced_one_none() {
    let server = OrchestratorServer::start(AGENTS, None, |_| {})
        .await
        .expect("orchestrator");
    let client = server.client().await.expect("client");
    let log = events(&client, "boss").await;
    let turns: Vec<(String, pb::Usage)> = log
        .iter()
        .filter_map(|e| match &e.payload {
            Some(Payload::MessageCompleted(m)) => Some((e.agent.clone(), m.usage.clone()?)),
            _ => None,
        })
        .collect();
    let by = |agent: &str| -> Vec<&pb::Usage> {
        turns
            .iter()
            .filter(|(a, _)| a == agent)
            .map(|(_, u)| u)
            .collect()
    };
    let boss = by("boss");
    assert_eq!(cost(boss[0]), (FIRST, "USD", 0));
    assert_eq!(boss[0].cached_input_tokens, 1_000);
    assert_eq!(cost(boss[1]), (SECOND, "USD", 0));
    // No price: tokens, no cost, counted unpriced.
    let helper = by("helper");
    assert_eq!(cost(helper[0]), (0, "", 1));
    assert_eq!(helper[0].input_tokens, 7);

    let run = run_usage(&log);
    assert_eq!(cost(&run), (FIRST + SECOND, "USD", 1));
    assert_eq!(
        (run.input_tokens, run.output_tokens, run.model_calls),
        (2_107, 513, 3)
    );
    // The helper's agent end carries its own usage; the boss's, the tree's.
    let agent_ends: Vec<(String, pb::Usage)> = log
        .iter()
        .filter_map(|e| match &e.payload {
            Some(Payload::AgentCompleted(a)) => Some((e.context_id.clone(), a.usage.clone()?)),
            _ => None,
        })
        .collect();
    let root = &agent_ends
        .iter()
        .find(|(c, _)| c == "root")
        .expect("root")
        .1;
    assert_eq!(cost(root), (FIRST + SECOND, "USD", 1));

    // GetRun and ListRuns, over gRPC.
    let run_id = log[0].run_id.clone();
    let got = client.get_run(&run_id).await.expect("get");
    assert_eq!(
        got.usage.as_ref().map(cost),
        Some((FIRST + SECOND, "USD", 1))
    );
    let listed = client
        .list_runs(pb::RunStatus::Unspecified, 10, "")
        .await
        .expect("list");
    let summary = listed
        .runs
        .iter()
        .find(|r| r.run_id == run_id)
        .expect("listed");
    assert_eq!(
        summary.usage.as_ref().map(cost),
        Some((FIRST + SECOND, "USD", 1))
    );

    // And over HTTP, in proto3 JSON (64-bit integers are strings).
    let http = reqwest::Client::new();
    let got = get_json(&http, &format!("{}/v1/runs/{run_id}", server.endpoint())).await;
    assert_eq!(
        got["usage"]["costNanos"],
        json!((FIRST + SECOND).to_string()),
        "{got}"
    );
    assert_eq!(got["usage"]["currency"], "USD");
    assert_eq!(got["usage"]["unpricedModelCalls"], "1");
    let page = get_json(&http, &format!("{}/v1/runs", server.endpoint())).await;
    assert_eq!(
        page["runs"][0]["usage"]["costNanos"],
        json!((FIRST + SECOND).to_string()),
        "{page}"
    );
    server.shutdown().await.expect("shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cached_prompt_tokens_of_the_openai_provider_are_priced_from_litellms_price_map() {
    let dir = tempfile::tempdir().expect("dir");
    let prices = dir.path().join("model_prices_and_context_window.json");
    std::fs::write(
        &prices,
        json!({
            "sample_spec": {"input_cost_per_token": "set me", "mode": "chat"},
            "gpt-test": {
                "input_cost_per_token": 2.5e-06,
                "output_cost_per_token": 1e-05,
                "cache_read_input_token_cost": 1.25e-06,
                "litellm_provider": "openai"
            }
        })
        .to_string(),
    )
    .expect("write");
    let usage = json!({
        "choices": [],
        "usage": {
            "prompt_tokens": 2000, "completion_tokens": 500, "total_tokens": 2500,
            "prompt_tokens_details": {"cached_tokens": 1000}
        }
    });
    let fake = FakeOpenAi::start(vec![Reply::Stream(vec![text("hi"), finish("stop"), usage])])
        .await
        .expect("fake openai");
    let agents = format!(
        r#"
prices_file: "{}"
providers:
  openai: {{base_url: "{}", api_key_env: TEST_OPENAI_KEY, timeout: 5s}}
agents:
  gpt: {{model: "openai:gpt-test"}}
"#,
        prices.display(),
        fake.base_url()
    );
    let server =
        OrchestratorServer::start_with_env(&agents, None, |_| {}, &[("TEST_OPENAI_KEY", "sk")])
            .await
            .expect("orchestrator");
    let client = server.client().await.expect("client");
    let log = events(&client, "gpt").await;
    let run = run_usage(&log);
    assert_eq!(run.cached_input_tokens, 1_000);
    assert_eq!(cost(&run), (FIRST, "USD", 0));
    server.shutdown().await.expect("shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_price_or_prices_file_is_refused_at_start_naming_the_field() {
    let refused = |yaml: String| async move {
        match OrchestratorServer::start(&yaml, None, |_| {}).await {
            Ok(_) => panic!("started with {yaml}"),
            Err(e) => format!("{e:#}"),
        }
    };
    let base = "scripts: {a: [{text: ok}]}\nagents: {a: {model: \"scripted:a\"}}\n";
    let e = refused(format!(
        "{base}prices: {{\"scripted:a\": {{input: cheap, output: 1}}}}"
    ))
    .await;
    assert!(e.contains("prices") && e.contains("input"), "{e}");
    let e = refused(format!(
        "{base}prices: {{\"scripted:a\": {{input: -1, output: 1}}}}"
    ))
    .await;
    assert!(e.contains("prices.\"scripted:a\".input"), "{e}");
    let e = refused(format!("{base}prices_file: /nonexistent/prices.json")).await;
    assert!(e.contains("prices_file: cannot read"), "{e}");
    let dir = tempfile::tempdir().expect("dir");
    let bad = dir.path().join("bad.json");
    std::fs::write(&bad, "{not json").expect("write");
    let e = refused(format!("{base}prices_file: \"{}\"", bad.display())).await;
    assert!(e.contains("is not a JSON object of models"), "{e}");
    // At the edge: a price of 0 is a price (cost 0, counted priced).
    let server = OrchestratorServer::start(
        &format!("{base}prices: {{\"scripted:a\": {{input: 0, output: 0}}}}"),
        None,
        |_| {},
    )
    .await
    .expect("a price of 0 is valid");
    let client = server.client().await.expect("client");
    let log = events(&client, "a").await;
    let run = run_usage(&log);
    assert_eq!(cost(&run), (0, "USD", 0));
    server.shutdown().await.expect("shutdown");
}

/// A durable run waiting for a person after a priced sub-agent finished,
/// handed over by its replica's drain to another, which resumes it from
/// its journal and takes the answer:
/// the run's totals still hold what the sub-agent spent (its turns are
/// not walked again, its call's record carries them).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resumed_run_keeps_what_its_finished_sub_agents_spent() {
    const PAYER: &str = r#"
prices:
  scripted:boss: {input: 2.5, output: 10}
  scripted:helper: {input: 1, output: 2}
scripts:
  boss:
    - calls: [{tool: helper, args: {task: "help"}}]
      usage: {input_tokens: 1000, output_tokens: 100}
    - calls: [{tool: write_context, args: {key: paid, value: "yes"}}]
      usage: {input_tokens: 1000, output_tokens: 100}
    - text: "paid"
      usage: {input_tokens: 1000, output_tokens: 100}
  helper:
    - text: "helped"
      usage: {input_tokens: 500, output_tokens: 50}
agents:
  boss: {model: "scripted:boss", tools: [helper, write_context], approvals: {write_context: always}}
  helper: {model: "scripted:helper"}
"#;
    let redis = baton_e2e::RedisServer::start().expect("redis-server");
    let start = || {
        let durable = baton_e2e::durable_runs(redis.url());
        OrchestratorServer::start(PAYER, None, move |c| {
            durable(c);
            c.runs.lease = std::time::Duration::from_secs(1);
        })
    };
    let owner = start().await.expect("owner");
    let other = start().await.expect("other");
    let on = owner.client().await.expect("client");
    let mut stream = on
        .run_agent(pb::RunAgentRequest {
            agent: "boss".into(),
            input: "x".into(),
            detach: true,
            ..Default::default()
        })
        .await
        .expect("run");
    let (mut run_id, mut approval) = (String::new(), String::new());
    while let Some(e) = stream.next().await {
        let e = e.expect("event");
        run_id.clone_from(&e.run_id);
        if let Some(Payload::ApprovalRequested(a)) = e.payload {
            approval = a.approval_id;
            break;
        }
    }
    drop(stream);
    // The owner drains: the run is handed over, and the other replica
    // claims it and resumes it, then takes the answer.
    owner.shutdown().await.expect("shutdown");
    let read = other.client().await.expect("client");
    baton_e2e::eventually("the other replica takes the answer", || async {
        read.resolve_approval(&run_id, &approval, true, "ok")
            .await
            .is_ok()
    })
    .await;
    let mut watch = read.watch_run(&run_id, 0, None).await.expect("watch");
    let mut log = Vec::new();
    while let Some(e) = watch.next().await {
        log.push(e.expect("event"));
    }
    assert!(
        log.iter()
            .any(|e| matches!(e.payload, Some(Payload::RunResumed(_)))),
        "the run was resumed"
    );
    let run = run_usage(&log);
    // boss: 3 × (1000 in at 2.5/M + 100 out at 10/M) = 3 × 3,500,000;
    // helper: 500 in at 1/M + 50 out at 2/M = 600,000.
    assert_eq!(
        (run.model_calls, run.cost_nanos, run.currency.as_str()),
        (4, 3 * 3_500_000 + 600_000, "USD")
    );
    other.shutdown().await.expect("shutdown");
}

/// `lead` runs a pipeline of two `worker` steps as a tool.
const PIPELINE_AGENTS: &str = r#"
prices:
  scripted:worker: {input: 1000, output: 1000}
scripts:
  lead:
    - calls:
        - tool: run_pipeline
          args:
            mode: parallel
            steps:
              - {id: one, agent: worker, task: "a"}
              - {id: two, agent: worker, task: "b"}
      usage: {input_tokens: 10, output_tokens: 5}
    - text: "both done"
      usage: {input_tokens: 20, output_tokens: 5}
  worker:
    - text: "worked"
      usage: {input_tokens: 100, output_tokens: 50}
agents:
  lead: {model: "scripted:lead", tools: [run_pipeline]}
  worker: {model: "scripted:worker"}
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pipeline_run_as_a_tool_counts_in_its_callers_usage() {
    let server = OrchestratorServer::start(PIPELINE_AGENTS, None, |_| {})
        .await
        .expect("orchestrator");
    let client = server.client().await.expect("client");
    let log = events(&client, "lead").await;
    let lead_done = log
        .iter()
        .find_map(|e| match &e.payload {
            Some(Payload::AgentCompleted(a)) if e.context_id == "root" => a.usage.clone(),
            _ => None,
        })
        .expect("lead's end");
    // Its own two turns (40 tokens) and the two steps (150 each).
    assert_eq!(
        (
            lead_done.input_tokens + lead_done.output_tokens,
            lead_done.model_calls
        ),
        (340, 4)
    );
    // The steps' cost: 300 tokens at 1000 a million.
    assert_eq!(
        (lead_done.cost_nanos, lead_done.unpriced_model_calls),
        (300_000_000, 2)
    );
    assert_eq!(
        run_usage(&log),
        lead_done,
        "the run's totals are the root agent's"
    );
    server.shutdown().await.expect("shutdown");
}
