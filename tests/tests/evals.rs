//! Evaluations end to end: a recorded run saved as a case passes against
//! the unchanged agent with its tools answered from the recording (the
//! tool server receives nothing), and fails naming the call and the
//! closest recorded one once the prompt makes the model call a tool
//! differently; faults injected; a custom scorer tool; repeats' pass@k and
//! pass^k; bad datasets refused naming file, line and field on gRPC and
//! HTTP with nothing run; limits at and over; a dropped experiment cancels
//! its runs and keeps what finished; a durable experiment's record and
//! labelled runs read from another replica; an LLM judge on LiteLLM.

use std::{
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

use baton_client::{OrchestratorClient, pb};
use baton_e2e::{
    OrchestratorServer, RedisServer, durable_runs,
    openai::{FakeOpenAi, Reply, finish, text, tool_fragment, usage},
    servers::{LITELLM_KEY, LiteLlm},
    toolhost::TestToolHost,
};
use futures::StreamExt as _;
use serde_json::{Value, json};
use tonic::Code;

/// The models: `researcher` calls web_search (its query the input, "en
/// français" when its instructions say French) and the sub-agent
/// `searcher` (which searches for the background), then answers with what
/// they returned; `coin` answers heads and tails in turn; `greeter` greets
/// Ada.
async fn provider() -> FakeOpenAi {
    let flips = Arc::new(AtomicU64::new(0));
    let calls = Arc::new(AtomicU64::new(0));
    FakeOpenAi::answering(move |body: &Value| {
        let messages = body["messages"].as_array().cloned().unwrap_or_default();
        let content = |role: &str| {
            messages
                .iter()
                .find(|m| m["role"] == role)
                .and_then(|m| m["content"].as_str())
                .unwrap_or("")
                .to_owned()
        };
        let (system, input) = (content("system"), content("user"));
        let answered = messages.iter().any(|m| m["role"] == "tool");
        let results: Vec<String> = messages
            .iter()
            .filter(|m| m["role"] == "tool")
            .filter_map(|m| m["content"].as_str().map(str::to_owned))
            .collect();
        let call = |i: u32, name: &str, args: Value| {
            let id = format!("call_{}", calls.fetch_add(1, Ordering::Relaxed));
            tool_fragment(i, Some(&id), Some(name), &args.to_string())
        };
        let mut chunks = match body["model"].as_str().unwrap_or("") {
            "researcher" if !answered => {
                let query = if system.contains("French") {
                    format!("{input} en français")
                } else {
                    input.clone()
                };
                vec![
                    call(0, "web_search", json!({"query": query})),
                    call(1, "searcher", json!({"task": input})),
                    finish("tool_calls"),
                ]
            }
            "researcher" => vec![
                text(&format!("research: {}", results.join("; "))),
                finish("stop"),
            ],
            "searcher" if !answered => vec![
                call(
                    0,
                    "web_search",
                    json!({"query": format!("background of {input}")}),
                ),
                finish("tool_calls"),
            ],
            "searcher" => vec![
                text(&format!("background: {}", results.join("; "))),
                finish("stop"),
            ],
            "coin" => {
                let n = flips.fetch_add(1, Ordering::Relaxed);
                vec![
                    text(if n.is_multiple_of(2) {
                        "heads"
                    } else {
                        "tails"
                    }),
                    finish("stop"),
                ]
            }
            "greeter" => vec![text("Hello Ada, nice to meet you."), finish("stop")],
            other => vec![text(&format!("no model {other}")), finish("stop")],
        };
        chunks.push(usage(10, 5));
        Reply::Stream(chunks)
    })
    .await
    .expect("provider")
}

fn agents(toolhost: &str, provider: &FakeOpenAi, instructions: &str) -> String {
    agents_with(toolhost, provider, instructions, "")
}

/// [`agents`], with `more_providers` (lines under `providers:`).
fn agents_with(
    toolhost: &str,
    provider: &FakeOpenAi,
    instructions: &str,
    more_providers: &str,
) -> String {
    format!(
        r#"
providers:
{more_providers}  fake: {{kind: openai, base_url: "{}", api_key_env: "", max_retries: 0}}
tool_servers:
  remote:
    endpoint: "{toolhost}"
    tools: [web_search, score_answer, hang]
agents:
  researcher: {{model: "fake:researcher", tools: [web_search, searcher], instructions: "{instructions}"}}
  searcher: {{model: "fake:searcher", tools: [web_search]}}
  coin: {{model: "fake:coin"}}
  greeter: {{model: "fake:greeter"}}
  waiter: {{model: "scripted:waiter", tools: [hang]}}
scripts:
  waiter: [{{calls: [{{tool: hang, args: {{}}}}]}}, {{text: "done"}}]
"#,
        provider.base_url()
    )
}

/// Runs an experiment of `dataset` (named `name`) to its end: its record.
async fn experiment(
    client: &OrchestratorClient,
    name: &str,
    dataset: &str,
    agent: &str,
    repeat: u32,
) -> Result<pb::Experiment, tonic::Status> {
    let events = client
        .run_experiment(pb::RunExperimentRequest {
            dataset: dataset.into(),
            dataset_name: name.into(),
            agent: agent.into(),
            repeat,
            ..Default::default()
        })
        .await
        .map_err(status)?;
    let mut events = Box::pin(events);
    let mut scored = 0;
    loop {
        let next = tokio::time::timeout(Duration::from_secs(60), events.next())
            .await
            .expect("the experiment went on");
        match next.expect("an end").map_err(status)?.event {
            Some(pb::experiment_event::Event::CaseScored(_)) => scored += 1,
            Some(pb::experiment_event::Event::Ended(e)) => {
                assert_eq!(e.cases.len(), scored, "each case told once");
                return Ok(e);
            }
            _ => {}
        }
    }
}

fn status(e: baton_client::Error) -> tonic::Status {
    match e {
        baton_client::Error::Status(s) => s,
        other => tonic::Status::unknown(other.to_string()),
    }
}

fn reasons(c: &pb::CaseResult) -> String {
    c.tries
        .iter()
        .flat_map(|t| {
            t.scores
                .iter()
                .map(|s| format!("{}: {}", s.scorer, s.reason))
                .chain([t.error.clone()])
        })
        .collect::<Vec<_>>()
        .join(" | ")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recorded_run_saved_as_a_case_passes_with_recorded_tools_and_fails_when_the_prompt_changes()
 {
    let host = TestToolHost::start().await.expect("tool host");
    let provider = provider().await;
    let server = OrchestratorServer::start(
        &agents(&host.endpoint(), &provider, "Research the topic."),
        None,
        |_| {},
    )
    .await
    .expect("orchestrator");
    let client = server.client().await.expect("client");
    let searches = || {
        host.seen
            .requests
            .lock()
            .expect("seen")
            .iter()
            .filter(|r| r.tool == "web_search")
            .count()
    };

    // A run, recorded: two searches, one at depth 1.
    let events = client
        .run_agent_to_end(baton_e2e::agent_request("researcher", "tides"))
        .await
        .expect("run");
    let run_id = events[0].run_id.clone();
    assert_eq!(searches(), 2);

    // Saved both ways: a reference to the run, and inline.
    let by_ref = client.save_case(&run_id, false).await.expect("save");
    let inline = client.save_case(&run_id, true).await.expect("save inline");
    let case: Value = serde_json::from_str(&inline).expect("json");
    assert_eq!(case["input"], "tides");
    assert_eq!(case["tools"], "recorded");
    assert!(
        case["expected"]
            .as_str()
            .is_some_and(|e| e.starts_with("research: 3 results for tides")),
        "{case}"
    );
    let recorded = case["recording"]["calls"].as_array().expect("calls inline");
    let queries: Vec<&str> = recorded
        .iter()
        .filter_map(|c| c["arguments"]["query"].as_str())
        .collect();
    assert_eq!(recorded.len(), 2, "only the calls that left Baton: {case}");
    assert!(
        queries.contains(&"tides") && queries.contains(&"background of tides"),
        "{queries:?}"
    );
    let tools: Vec<&str> = case["expected_tools"]["calls"]
        .as_array()
        .expect("calls")
        .iter()
        .filter_map(|c| c["tool"].as_str())
        .collect();
    assert_eq!(
        tools.iter().filter(|t| **t == "web_search").count(),
        2,
        "{tools:?}"
    );
    assert!(tools.contains(&"searcher"));

    // Against the unchanged agent: both pass, and no search is made.
    let by_ref_case = by_ref.replace("\"id\":\"run-", "\"id\":\"ref-run-");
    let dataset = format!("{by_ref_case}\n{inline}\n");
    let e = experiment(&client, "saved.jsonl", &dataset, "", 1)
        .await
        .expect("experiment");
    assert_eq!(e.status, pb::ExperimentStatus::Completed as i32);
    for c in &e.cases {
        assert!(c.passed, "{}: {}", c.case_id, reasons(c));
    }
    assert_eq!(searches(), 2, "the recording answered every search");
    // Its runs are ordinary runs, labelled with it.
    let run = client
        .get_run(&e.cases[0].tries[0].run_id)
        .await
        .expect("get run");
    assert_eq!(run.experiment_id, e.id);
    assert_eq!(
        client.get_experiment(&e.id).await.expect("get").cases.len(),
        2
    );
    assert_eq!(
        client
            .get_experiment("saved.jsonl")
            .await
            .err()
            .map(|e| status(e).code()),
        Some(Code::NotFound),
        "named by its generated name, not the file's"
    );

    // The prompt changed: the model searches differently; the case fails
    // naming the call and the closest recorded one, and nothing is sent.
    let changed = OrchestratorServer::start(
        &agents(
            &host.endpoint(),
            &provider,
            "Research the topic, in French.",
        ),
        None,
        |_| {},
    )
    .await
    .expect("orchestrator");
    let changed_client = changed.client().await.expect("client");
    let e = experiment(
        &changed_client,
        "saved.jsonl",
        &format!("{inline}\n"),
        "",
        1,
    )
    .await
    .expect("experiment");
    let c = &e.cases[0];
    assert!(!c.passed);
    let why = reasons(c);
    assert!(
        why.contains(r#"the recording has no call web_search({"query":"tides en français"}); closest recorded: web_search({"query":"tides"})"#),
        "{why}"
    );
    assert_eq!(searches(), 2, "a call the recording lacks is not made");

    // live_when_unrecorded: that call goes live (the tool server gets it);
    // the answer differs, so exact fails; the trajectory still names it.
    let live = inline.replace(
        "\"tools\":\"recorded\"",
        "\"tools\":\"live_when_unrecorded\"",
    );
    let e = experiment(&changed_client, "saved.jsonl", &format!("{live}\n"), "", 1)
        .await
        .expect("experiment");
    assert!(!e.cases[0].passed);
    assert_eq!(searches(), 3, "only the unrecorded call went live");
    let why = reasons(&e.cases[0]);
    assert!(
        why.contains("exact: expected \"research: 3 results for tides"),
        "{why}"
    );
    assert!(
        why.contains("trajectory: 3 of 3 expected calls") || why.contains("trajectory:"),
        "{why}"
    );

    // A fault on top of the recording: the search fails, the agent copes.
    let faulty = json!({
        "id": "search-down", "agent": "researcher", "input": "tides",
        "recording": case["recording"], "faults": [{"tool": "web_search", "error": "search is down"}],
        "scorers": [{"kind": "contains", "value": "search is down"}]
    });
    let slow = json!({
        "id": "search-slow", "agent": "researcher", "input": "tides",
        "recording": case["recording"], "faults": [{"tool": "web_search", "delay_ms": 300}],
        "expected": case["expected"]
    });
    // A custom scorer: a tool server's tool given the case and the result.
    let custom = json!({
        "id": "custom", "agent": "researcher", "input": "tides", "recording": case["recording"],
        "labels": {"must_name": "background of tides"},
        "scorers": [{"kind": "tool", "tool": "score_answer"}]
    });
    let custom_fails = json!({
        "id": "custom-fails", "agent": "researcher", "input": "tides", "recording": case["recording"],
        "labels": {"must_name": "mussels"},
        "scorers": [{"kind": "tool", "tool": "score_answer", "name": "names-it"}]
    });
    let dataset = [faulty, slow, custom, custom_fails]
        .iter()
        .map(Value::to_string)
        .collect::<Vec<_>>()
        .join("\n");
    let e = experiment(&client, "faults.jsonl", &dataset, "", 1)
        .await
        .expect("experiment");
    let by_id = |id: &str| e.cases.iter().find(|c| c.case_id == id).expect("case");
    assert!(
        by_id("search-down").passed,
        "{}",
        reasons(by_id("search-down"))
    );
    let slow = by_id("search-slow");
    assert!(slow.passed, "{}", reasons(slow));
    let took = slow.tries[0].duration.expect("duration");
    assert!(
        took.seconds > 0 || took.nanos >= 300_000_000,
        "the late answer took its delay: {took:?}"
    );
    assert!(by_id("custom").passed, "{}", reasons(by_id("custom")));
    let fails = by_id("custom-fails");
    assert!(!fails.passed);
    assert_eq!(reasons(fails), "names-it: does not name \"mussels\" | ");
    assert_eq!(searches(), 3, "faults and scorers called no search");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn repeats_give_pass_at_k_and_pass_hat_k_and_a_flaky_case_is_within_noise() {
    let host = TestToolHost::start().await.expect("tool host");
    let provider = provider().await;
    let server = OrchestratorServer::start(&agents(&host.endpoint(), &provider, "x"), None, |_| {})
        .await
        .expect("orchestrator");
    let client = server.client().await.expect("client");
    let dataset = "{\"id\": \"flip\", \"input\": \"flip\", \"expected\": \"heads\"}\n{\"id\": \"greet\", \"agent\": \"greeter\", \"input\": \"hi, I am Ada\", \"scorers\": [{\"kind\": \"contains\", \"value\": \"Ada\"}]}\n";
    let a = experiment(&client, "coin.jsonl", dataset, "coin", 4)
        .await
        .expect("a");
    let flip = &a.cases[0];
    assert_eq!(flip.tries.len(), 4);
    assert_eq!(flip.pass_rate, 0.5);
    assert!(flip.pass_at_k && !flip.passed);
    assert!(flip.pass_rate_low < 0.5 && flip.pass_rate_high > 0.5);
    let t = a.totals.expect("totals");
    assert_eq!(
        (t.cases, t.passed, t.failed, t.tries, t.tries_passed),
        (2, 1, 1, 8, 6)
    );
    assert_eq!((t.pass_at_k, t.pass_hat_k), (1.0, 0.5));
    let b = experiment(&client, "coin.jsonl", dataset, "coin", 4)
        .await
        .expect("b");
    let c = client
        .compare_experiments(&a.id, &b.id, 0.0)
        .await
        .expect("compare");
    assert!(!c.regressed, "a flaky case is not a regression: {c:?}");
    let listed = client.list_experiments(1, "").await.expect("list");
    assert_eq!(listed.experiments.len(), 1);
    assert_eq!(listed.experiments[0].id, b.id, "newest first");
    assert!(
        listed.experiments[0].cases.is_empty(),
        "lists carry no cases"
    );
    let next = client
        .list_experiments(1, &listed.next_page_token)
        .await
        .expect("page 2");
    assert_eq!(next.experiments[0].id, a.id);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_datasets_and_requests_are_refused_naming_file_line_and_field_and_run_nothing() {
    let host = TestToolHost::start().await.expect("tool host");
    let provider = provider().await;
    let server = OrchestratorServer::start(&agents(&host.endpoint(), &provider, "x"), None, |_| {})
        .await
        .expect("orchestrator");
    let client = server.client().await.expect("client");
    let good = "{\"input\": \"hi\", \"expected\": \"x\"}";
    let refused = |dataset: String, request: pb::RunExperimentRequest| {
        let client = client.clone();
        async move {
            let r = client
                .run_experiment(pb::RunExperimentRequest {
                    dataset,
                    dataset_name: "cases.jsonl".into(),
                    agent: "greeter".into(),
                    ..request
                })
                .await;
            let s = status(r.err().expect("refused"));
            assert_eq!(s.code(), Code::InvalidArgument, "{}", s.message());
            s.message().to_owned()
        }
    };
    let one = |case: Value| case.to_string();
    let cases = [
        (
            format!("{good}\n{{\"input\": \"a\",\n"),
            "dataset: cases.jsonl:2: EOF while parsing a value",
        ),
        (
            format!(
                "{good}\n{}",
                json!({"input": "a", "agent": "reseacher", "expected": "x"})
            ),
            "dataset: cases.jsonl:2: agent: unknown agent or group \"reseacher\"",
        ),
        (
            format!(
                "{good}\n\n{}",
                json!({"input": "a", "scorers": [{"kind": "regex", "pattern": "("}]})
            ),
            "dataset: cases.jsonl:3: scorers[0].pattern: regex parse error",
        ),
        (
            one(
                json!({"input": "a", "scorers": [{"kind": "json_schema", "schema": {"type": "nope"}}]}),
            ),
            "dataset: cases.jsonl:1: scorers[0].schema: not a JSON Schema",
        ),
        (
            one(
                json!({"input": "a", "scorers": [{"kind": "judge", "model": "nowhere:x", "rubric": "r"}]}),
            ),
            "dataset: cases.jsonl:1: scorers[0].model: \"nowhere:x\": unknown provider \"nowhere\"",
        ),
        (
            one(json!({"input": "a", "scorers": [{"kind": "tool", "tool": "no_such_tool"}]})),
            "dataset: cases.jsonl:1: scorers[0].tool: no tool server or MCP server of this orchestrator has a tool \"no_such_tool\"",
        ),
        (
            one(json!({"input": "a", "expected": "x", "recording": {"run_id": "nope"}})),
            "dataset: cases.jsonl:1: recording.run_id: is not a run id",
        ),
        (
            one(
                json!({"input": "a", "expected": "x", "recording": {"run_id": "0190f5a2-7b3c-7d4e-8f10-1a2b3c4d5e6f"}}),
            ),
            "dataset: cases.jsonl:1: recording.run_id: no run 0190f5a2-7b3c-7d4e-8f10-1a2b3c4d5e6f",
        ),
        (
            one(
                json!({"input": "a", "expected": "x", "expected_tools": [{"tool": "s", "args": {"q": {"approx": "x"}}}]}),
            ),
            "dataset: cases.jsonl:1: expected_tools[0].args.q.approx: must be a number",
        ),
    ];
    for (dataset, said) in cases {
        let message = refused(dataset, Default::default()).await;
        assert!(message.starts_with(said), "{message}\n  wanted: {said}");
    }
    // YAML names its lines too.
    let r = client
        .run_experiment(pb::RunExperimentRequest {
            dataset: "cases:\n  - input: a\n    expected: b\n  - input: c\n    expectd: d\n".into(),
            dataset_name: "cases.yaml".into(),
            agent: "greeter".into(),
            ..Default::default()
        })
        .await;
    let s = status(r.err().expect("refused"));
    assert!(
        s.message()
            .starts_with("dataset: cases.yaml:4: expectd: unknown field `expectd`"),
        "{}",
        s.message()
    );

    // Limits, at and just over.
    let at = |repeat, concurrency| pb::RunExperimentRequest {
        repeat,
        concurrency,
        ..Default::default()
    };
    assert_eq!(refused(good.into(), at(21, 0)).await, "repeat: at most 20");
    assert_eq!(
        refused(good.into(), at(0, 65)).await,
        "concurrency: at most 64"
    );
    let max = 3 << 20;
    let pad = |n: usize| format!("{good}\n#{}\n", "x".repeat(n - good.len() - 3));
    assert_eq!(pad(max).len(), max);
    let r = client
        .run_experiment(pb::RunExperimentRequest {
            dataset: pad(max + 1),
            agent: "greeter".into(),
            ..Default::default()
        })
        .await;
    let s = status(r.err().expect("refused"));
    assert_eq!(
        (s.code(), s.message()),
        (Code::ResourceExhausted, "dataset: over 3145728 bytes")
    );
    assert_eq!(
        client
            .list_runs(pb::RunStatus::Unspecified, 100, "")
            .await
            .expect("runs")
            .runs
            .len(),
        0,
        "nothing ran"
    );
    for (dataset, repeat, concurrency) in [(pad(max), 20, 64)] {
        let e = experiment_with(&client, dataset, repeat, concurrency).await;
        assert_eq!(e.cases[0].tries.len(), 20);
    }

    // HTTP: the same refusal, naming the field.
    let http = reqwest::Client::new();
    let response = http
        .post(format!("{}/v1/experiments", server.endpoint()))
        .json(&json!({"dataset": "{\"input\": 3}", "datasetName": "web.jsonl", "agent": "greeter"}))
        .send()
        .await
        .expect("post");
    assert_eq!(response.status(), reqwest::StatusCode::BAD_REQUEST);
    let body: Value = response.json().await.expect("json");
    assert_eq!(body["field"], "dataset", "{body}");
    assert!(
        body["message"].as_str().is_some_and(
            |m| m.contains("web.jsonl:1: input: invalid type: integer `3`, expected a string")
        ),
        "{body}"
    );
    // And an experiment through HTTP: detached, then read.
    let response = http
        .post(format!("{}/v1/experiments", server.endpoint()))
        .json(&json!({"dataset": "{\"input\": \"hi\", \"scorers\": [{\"kind\": \"contains\", \"value\": \"Ada\"}]}", "datasetName": "web.jsonl", "agent": "greeter", "name": "web"}))
        .send()
        .await
        .expect("post");
    assert_eq!(response.status(), reqwest::StatusCode::OK);
    let started: Value = response.json().await.expect("json");
    assert_eq!(started["name"], "web");
    let id = started["experimentId"].as_str().expect("id").to_owned();
    let mut record = Value::Null;
    for _ in 0..100 {
        record = http
            .get(format!("{}/v1/experiments/web", server.endpoint()))
            .send()
            .await
            .expect("get")
            .json()
            .await
            .expect("json");
        if record["status"] == "EXPERIMENT_STATUS_COMPLETED" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(record["id"], id.as_str());
    assert_eq!(record["cases"][0]["passed"], true, "{record}");
    let compared: Value = http
        .get(format!(
            "{}/v1/experiments/{id}:compare?candidate=web",
            server.endpoint()
        ))
        .send()
        .await
        .expect("compare")
        .json()
        .await
        .expect("json");
    assert_eq!(
        compared["cases"][0]["kind"], "CASE_CHANGE_KIND_SAME",
        "{compared}"
    );
}

async fn experiment_with(
    client: &OrchestratorClient,
    dataset: String,
    repeat: u32,
    concurrency: u32,
) -> pb::Experiment {
    let mut events = Box::pin(
        client
            .run_experiment(pb::RunExperimentRequest {
                dataset,
                agent: "greeter".into(),
                repeat,
                concurrency,
                ..Default::default()
            })
            .await
            .expect("at the limits"),
    );
    while let Some(e) = events.next().await {
        if let Some(pb::experiment_event::Event::Ended(e)) = e.expect("event").event {
            return e;
        }
    }
    panic!("no end");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_experiment_cancels_its_runs_and_keeps_what_finished() {
    let host = TestToolHost::start().await.expect("tool host");
    let provider = provider().await;
    let server = OrchestratorServer::start(&agents(&host.endpoint(), &provider, "x"), None, |_| {})
        .await
        .expect("orchestrator");
    let client = server.client().await.expect("client");
    // One quick case, then four whose tool never answers.
    let mut dataset = String::from(
        "{\"id\": \"quick\", \"agent\": \"greeter\", \"input\": \"hi\", \"scorers\": [{\"kind\": \"contains\", \"value\": \"Ada\"}]}\n",
    );
    for i in 0..4 {
        dataset.push_str(&format!(
            "{{\"id\": \"stuck-{i}\", \"input\": \"wait\", \"expected\": \"done\"}}\n"
        ));
    }
    let mut events = Box::pin(
        client
            .run_experiment(pb::RunExperimentRequest {
                dataset,
                agent: "waiter".into(),
                concurrency: 5,
                name: "dropped".into(),
                ..Default::default()
            })
            .await
            .expect("experiment"),
    );
    loop {
        let e = tokio::time::timeout(Duration::from_secs(20), events.next())
            .await
            .expect("went on");
        if let Some(pb::experiment_event::Event::CaseScored(c)) =
            e.expect("event").expect("ok").event
        {
            assert_eq!(c.case_id, "quick");
            break;
        }
    }
    // Four runs wait on the tool.
    let running = || async {
        client
            .list_runs(pb::RunStatus::Running, 100, "")
            .await
            .expect("runs")
            .runs
            .len()
    };
    for _ in 0..100 {
        if running().await == 4 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(running().await, 4);
    drop(events);
    // Nothing left running; the record keeps the case that finished.
    let mut kept = None;
    for _ in 0..200 {
        let e = client.get_experiment("dropped").await.expect("record");
        if e.status == pb::ExperimentStatus::Cancelled as i32 && running().await == 0 {
            kept = Some(e);
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    let e = kept.expect("cancelled, nothing running");
    assert_eq!(e.cases.len(), 1);
    assert_eq!(e.cases[0].case_id, "quick");
    let cancelled = client
        .list_runs(pb::RunStatus::Cancelled, 100, "")
        .await
        .expect("runs")
        .runs
        .len();
    assert_eq!(cancelled, 4, "each waiting run was cancelled");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_durable_experiment_is_kept_in_redis_and_read_from_another_replica() {
    let redis = RedisServer::start().expect("redis");
    let host = TestToolHost::start().await.expect("tool host");
    let provider = provider().await;
    let yaml = agents(&host.endpoint(), &provider, "Research the topic.");
    let a = OrchestratorServer::start(&yaml, None, durable_runs(redis.url()))
        .await
        .expect("a");
    let b = OrchestratorServer::start(&yaml, None, durable_runs(redis.url()))
        .await
        .expect("b");
    let (ca, cb) = (a.client().await.expect("a"), b.client().await.expect("b"));
    let events = ca
        .run_agent_to_end(baton_e2e::agent_request("researcher", "tides"))
        .await
        .expect("run");
    let run_id = events[0].run_id.clone();
    // Saved on the other replica, from Redis; its recording read there too.
    let case = cb.save_case(&run_id, false).await.expect("save");
    let searches = || host.seen.requests.lock().expect("seen").len();
    let before = searches();
    let e = experiment(&cb, "durable.jsonl", &format!("{case}\n"), "", 2)
        .await
        .expect("experiment");
    assert!(e.cases[0].passed, "{}", reasons(&e.cases[0]));
    assert_eq!(searches(), before, "answered from the recording in Redis");
    let on_a = ca
        .get_experiment(&e.id)
        .await
        .expect("read on the other replica");
    assert_eq!(on_a.cases.len(), 1);
    assert_eq!(on_a.status, pb::ExperimentStatus::Completed as i32);
    let run = ca
        .get_run(&on_a.cases[0].tries[1].run_id)
        .await
        .expect("run");
    assert_eq!(run.experiment_id, e.id, "labelled in the run store");
    assert_eq!(
        ca.list_experiments(0, "")
            .await
            .expect("list")
            .experiments
            .len(),
        1
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_llm_judge_scores_on_litellm_counts_its_cost_and_reports_its_agreement() {
    let proxy = tokio::task::spawn_blocking(LiteLlm::start)
        .await
        .expect("join")
        .expect("LiteLLM proxy");
    let host = TestToolHost::start().await.expect("tool host");
    let provider = provider().await;
    let yaml = agents_with(
        &host.endpoint(),
        &provider,
        "x",
        &format!(
            "  proxy: {{kind: openai, base_url: \"{}\", api_key_env: LITELLM_KEY, max_retries: 0}}\n",
            proxy.base_url()
        ),
    );
    let server =
        OrchestratorServer::start_with_env(&yaml, None, |_| {}, &[("LITELLM_KEY", LITELLM_KEY)])
            .await
            .expect("orchestrator");
    let client = server.client().await.expect("client");
    let dataset = [
        json!({"id": "kind", "input": "hi, I am Ada", "expected": "Hello Ada",
               "scorers": [{"kind": "judge", "model": "proxy:judge", "rubric": "Greets the person by name.", "repeat": 3, "threshold": 0.7}]}),
        json!({"id": "cited", "input": "hi, I am Ada",
               "scorers": [{"kind": "judge", "name": "cites", "model": "proxy:harsh-judge", "rubric": "Cites a source."}]}),
        json!({"id": "judge-down", "input": "hi, I am Ada",
               "scorers": [{"kind": "judge", "model": "proxy:failing", "rubric": "Anything."}]}),
    ]
    .iter()
    .map(Value::to_string)
    .collect::<Vec<_>>()
    .join("\n");
    let e = experiment(&client, "judged.jsonl", &dataset, "greeter", 1)
        .await
        .expect("experiment");
    let kind = &e.cases[0];
    assert!(kind.passed, "{}", reasons(kind));
    let s = &kind.tries[0].scores[0];
    assert_eq!(
        (s.scorer.as_str(), s.score, s.agreement),
        ("judge", 0.9, 1.0)
    );
    assert_eq!(s.reason, "The answer greets the person by name.");
    let usage = kind.tries[0].usage.clone().expect("usage");
    assert_eq!(
        usage.model_calls, 4,
        "the agent's call and the judge's three"
    );
    let cited = &e.cases[1];
    assert!(!cited.passed);
    assert_eq!(
        reasons(cited),
        "cites: The answer does not cite a source. | "
    );
    // A judge that does not answer is an error of the try, not a failure
    // of the agent.
    let down = &e.cases[2];
    assert!(!down.passed && down.tries.is_empty(), "{down:?}");
    assert_eq!(down.errored_tries, 1);
    assert!(
        down.error
            .starts_with("scorer judge could not score: the judge did not answer:"),
        "{}",
        down.error
    );
    // The judge was asked with its rubric and the answer.
    let judged: Vec<Value> = proxy
        .recorded()
        .into_iter()
        .filter(|r| r["model"] == "judge")
        .collect();
    assert_eq!(judged.len(), 3);
    let said = judged[0]["messages"].to_string();
    assert!(
        said.contains("Greets the person by name.")
            && said.contains("Hello Ada, nice to meet you."),
        "{said}"
    );
    assert!(
        e.usage.clone().expect("usage").model_calls >= 6,
        "the agents' calls and the judges' counted"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_that_does_not_read_holds_no_run_back() {
    let host = TestToolHost::start().await.expect("tool host");
    let provider = provider().await;
    let server = OrchestratorServer::start(&agents(&host.endpoint(), &provider, "x"), None, |_| {})
        .await
        .expect("orchestrator");
    let client = server.client().await.expect("client");
    let dataset: String = (0..40)
        .map(|i| format!("{{\"id\": \"c{i}\", \"input\": \"hi {i}\", \"scorers\": [{{\"kind\": \"contains\", \"value\": \"Ada\"}}]}}\n"))
        .collect();
    // Started, and its stream left unread.
    let events = client
        .run_experiment(pb::RunExperimentRequest {
            dataset,
            agent: "greeter".into(),
            name: "unread".into(),
            concurrency: 4,
            ..Default::default()
        })
        .await
        .expect("experiment");
    let mut done = false;
    for _ in 0..200 {
        let e = client.get_experiment("unread").await.expect("record");
        if e.status == pb::ExperimentStatus::Completed as i32 {
            assert_eq!(e.cases.len(), 40);
            done = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(done, "the experiment ended while nobody read its stream");
    let completed = client
        .list_runs(pb::RunStatus::Completed, 100, "")
        .await
        .expect("runs")
        .runs
        .len();
    assert_eq!(completed, 40);
    // Read now, everything is there, the end last.
    let all: Vec<_> = Box::pin(events).collect().await;
    assert_eq!(all.len(), 42, "started, 40 cases, ended");
    // A running experiment cannot be compared; an unknown one is named.
    let s = status(
        client
            .compare_experiments("unread", "nope", 0.0)
            .await
            .expect_err("refused"),
    );
    assert_eq!(
        (s.code(), s.message()),
        (Code::NotFound, "candidate: no experiment \"nope\"")
    );
    let Err(refused) = client
        .run_experiment(pb::RunExperimentRequest {
            dataset: "{\"input\": \"a\", \"expected\": \"b\"}".into(),
            agent: "greeter".into(),
            name: "exp-mine".into(),
            ..Default::default()
        })
        .await
    else {
        panic!("a name like an id is refused");
    };
    let s = status(refused);
    assert_eq!(
        s.message(),
        "name: must not start with `exp-` (experiments' ids do)"
    );
}

/// Live scoring: `greeter` scores every run (sample 1) three ways, `coin`
/// none of them (sample 0.0001: no run id of these falls under it); the
/// scores are on GetRun and ListRuns, a failing one found with
/// `failing_scores`, counted on /metrics; on Redis, read from another
/// replica.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn live_runs_of_an_agent_with_scoring_are_scored_as_they_end() {
    let redis = RedisServer::start().expect("redis");
    let host = TestToolHost::start().await.expect("tool host");
    let provider = provider().await;
    let yaml = agents(&host.endpoint(), &provider, "x")
        .replace(
            "greeter: {model: \"fake:greeter\"}",
            "greeter:\n    model: \"fake:greeter\"\n    scoring:\n      sample: 1\n      scorers:\n        - {kind: contains, value: Ada}\n        - {kind: regex, name: polite, pattern: \"(?i)please\"}\n        - {kind: tool, tool: score_answer}",
        )
        .replace(
            "coin: {model: \"fake:coin\"}",
            "coin:\n    model: \"fake:coin\"\n    scoring: {sample: 0.0001, scorers: [{kind: contains, value: heads}]}",
        );
    for durable in [false, true] {
        let url = redis.url();
        let metrics = baton_e2e::free_addr().expect("port");
        let a = OrchestratorServer::start(&yaml, None, move |c| {
            c.telemetry.metrics_listen = metrics.to_string();
            if durable {
                durable_runs(url)(c);
            }
        })
        .await
        .expect("a");
        let client = a.client().await.expect("client");
        let events = client
            .run_agent_to_end(baton_e2e::agent_request("greeter", "hi, I am Ada"))
            .await
            .expect("run");
        let run_id = events[0].run_id.clone();
        let mut scored = None;
        for _ in 0..100 {
            let run = client.get_run(&run_id).await.expect("get");
            if !run.scores.is_empty() {
                scored = Some(run);
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let run = scored.expect("scored as it ended");
        let said: Vec<(String, bool)> = run
            .scores
            .iter()
            .map(|s| (s.scorer.clone(), s.passed))
            .collect();
        assert_eq!(
            said,
            [
                ("contains".to_owned(), true),
                ("polite".to_owned(), false),
                ("tool".to_owned(), false)
            ],
            "{:?}",
            run.scores
        );
        assert_eq!(
            run.scores[1].reason,
            "the answer does not match /(?i)please/: \"Hello Ada, nice to meet you.\""
        );
        // Listed, and found among the failing.
        let failing = client.list_failing_runs(0, "").await.expect("list");
        assert_eq!(failing.runs.len(), 1, "{failing:?}");
        assert_eq!(failing.runs[0].scores.len(), 3);
        // A run outside the sample is not scored.
        let coin = client
            .run_agent_to_end(baton_e2e::agent_request("coin", "flip"))
            .await
            .expect("run");
        tokio::time::sleep(Duration::from_millis(300)).await;
        let run = client.get_run(&coin[0].run_id).await.expect("get");
        assert!(run.scores.is_empty(), "{:?}", run.scores);
        if durable {
            // Kept in Redis: another replica reads them.
            let b = OrchestratorServer::start(&yaml, None, durable_runs(redis.url()))
                .await
                .expect("b");
            let on_b = b
                .client()
                .await
                .expect("b")
                .get_run(&run_id)
                .await
                .expect("get on b");
            assert_eq!(on_b.scores.len(), 3);
        } else {
            let metrics = reqwest::get(format!("http://{metrics}/metrics"))
                .await
                .expect("metrics")
                .text()
                .await
                .expect("text");
            assert!(
                metrics.contains("baton_live_scores_total{agent=\"greeter\",scorer=\"polite\",passed=\"false\"} 1"),
                "{metrics}"
            );
        }
    }
}

/// Reads an experiment's events to its `ended` record (at most 60 s).
async fn read_to_end<E: std::fmt::Debug>(
    events: impl futures::Stream<Item = Result<pb::ExperimentEvent, E>>,
) -> pb::Experiment {
    let mut events = std::pin::pin!(events);
    loop {
        let next = tokio::time::timeout(Duration::from_secs(60), events.next())
            .await
            .expect("went on");
        if let Some(pb::experiment_event::Event::Ended(e)) =
            next.expect("an end").expect("ok").event
        {
            return e;
        }
    }
}

/// An experiment's budget is one reservation for all its runs: sixteen
/// at once against a provider without `max_tokens` in the request (the
/// model's output limit is the worst case) spend no more than it, counted
/// at the provider, and the cases past it are errors that say so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_experiments_runs_draw_from_one_budget_and_never_spend_past_it() {
    let provider = provider().await;
    let yaml = format!(
        r#"
default_max_output_tokens: 40
providers:
  fake: {{kind: openai, base_url: "{}", api_key_env: "", max_retries: 0}}
agents:
  greeter: {{model: "fake:greeter"}}
"#,
        provider.base_url()
    );
    let server = OrchestratorServer::start(&yaml, None, |_| {})
        .await
        .expect("orchestrator");
    let client = server.client().await.expect("client");
    let mut dataset = String::new();
    for i in 0..40 {
        dataset.push_str(&format!(
            "{{\"id\": \"c{i}\", \"input\": \"hi\", \"scorers\": [{{\"kind\": \"contains\", \"value\": \"Ada\"}}]}}\n"
        ));
    }
    // Each call spends 15 at the provider (10 in, 5 out): room for ten.
    let limit = 150;
    let events = client
        .run_experiment(pb::RunExperimentRequest {
            dataset,
            agent: "greeter".into(),
            concurrency: 16,
            name: "budgeted".into(),
            budget: Some(pb::ExperimentBudget {
                tokens: limit,
                cost: 0.0,
            }),
            ..Default::default()
        })
        .await
        .expect("experiment");
    let ended = read_to_end(events).await;
    let at_provider = provider.requests().len() as u64 * 15;
    let passed = ended.cases.iter().filter(|c| c.passed).count();
    let spent: Vec<&str> = ended
        .cases
        .iter()
        .filter(|c| c.error.starts_with("the experiment's budget "))
        .map(|c| c.case_id.as_str())
        .collect();
    eprintln!(
        "40 cases, 16 at once, a budget of {limit}: {at_provider} tokens at the provider, {passed} passed, {} refused",
        spent.len()
    );
    assert!(at_provider <= limit, "{at_provider} of {limit}");
    // Every call the provider answered is a case that passed; the rest
    // were refused by the budget, not failed.
    assert_eq!(passed as u64 * 15, at_provider);
    assert!(passed >= 5, "{passed} passed");
    assert_eq!(passed + spent.len(), 40, "{:?}", ended.cases);
    let usage = ended.usage.clone().unwrap_or_default();
    assert_eq!(usage.input_tokens + usage.output_tokens, at_provider);
    // Nothing is left held or running.
    let running = client
        .list_runs(pb::RunStatus::Running, 100, "")
        .await
        .expect("runs")
        .runs
        .len();
    assert_eq!(running, 0);

    // The same through a pipeline: a step refused by the experiment's
    // budget fails its pipeline, and the try is an error, not a failure.
    let mut dataset = String::from(
        "{\"dataset\": {\"pipeline\": {\"name\": \"greet\", \"steps\": [{\"id\": \"g\", \"agent\": \"greeter\", \"task\": \"{{input}}\"}]}}}\n",
    );
    for i in 0..40 {
        dataset.push_str(&format!(
            "{{\"id\": \"p{i}\", \"input\": \"hi\", \"scorers\": [{{\"kind\": \"contains\", \"value\": \"Ada\"}}]}}\n"
        ));
    }
    let before = provider.requests().len() as u64;
    let events = Box::pin(
        client
            .run_experiment(pb::RunExperimentRequest {
                dataset,
                concurrency: 16,
                name: "budgeted-pipelines".into(),
                budget: Some(pb::ExperimentBudget {
                    tokens: limit,
                    cost: 0.0,
                }),
                ..Default::default()
            })
            .await
            .expect("experiment"),
    );
    let ended = read_to_end(events).await;
    let at_provider = (provider.requests().len() as u64 - before) * 15;
    let passed = ended.cases.iter().filter(|c| c.passed).count();
    let errors = ended
        .cases
        .iter()
        .filter(|c| c.error.starts_with("the experiment's budget "))
        .count();
    assert!(at_provider <= limit, "{at_provider} of {limit}");
    assert_eq!(passed as u64 * 15, at_provider);
    assert_eq!(passed + errors, 40, "{:?}", ended.cases);

    // A cost budget cannot bound a model without a price: refused.
    let refused = client
        .run_experiment(pb::RunExperimentRequest {
            dataset: "{\"input\": \"hi\", \"expected\": \"x\"}".into(),
            agent: "greeter".into(),
            budget: Some(pb::ExperimentBudget {
                tokens: 0,
                cost: 1.0,
            }),
            ..Default::default()
        })
        .await
        .map_err(status)
        .err()
        .expect("refused");
    assert_eq!(refused.code(), Code::InvalidArgument);
    assert!(
        refused.message().contains(
            "budget.cost: model fake:greeter has no price, so a cost budget cannot bound it"
        ),
        "{}",
        refused.message()
    );
    server.shutdown().await.expect("shutdown");
}

/// Waits until `n` runs are running (at most 4 s).
async fn until_running(client: &OrchestratorClient, n: usize) {
    let mut running = 0;
    for _ in 0..200 {
        running = client
            .list_runs(pb::RunStatus::Running, 100, "")
            .await
            .expect("runs")
            .runs
            .len();
        if running == n {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let all = client
        .list_runs(pb::RunStatus::Unspecified, 100, "")
        .await
        .expect("runs");
    panic!("never {n} running: {running}; {:?}", all.runs);
}

/// A quick case, then four whose tool never answers.
fn stuck_dataset() -> String {
    let mut dataset = String::from(
        "{\"id\": \"quick\", \"agent\": \"greeter\", \"input\": \"hi\", \"scorers\": [{\"kind\": \"contains\", \"value\": \"Ada\"}]}\n",
    );
    for i in 0..4 {
        dataset.push_str(&format!(
            "{{\"id\": \"stuck-{i}\", \"input\": \"wait\", \"expected\": \"done\"}}\n"
        ));
    }
    dataset
}

/// CancelExperiment stops an experiment started over HTTP without a
/// stream (which nothing else could stop), keeping the case that
/// finished; a second cancel, an unknown one and a blank name are refused
/// naming the field; on Redis, another replica than the one running it
/// cancels it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_experiment_stops_it_on_whichever_replica_runs_it_and_keeps_what_finished() {
    let host = TestToolHost::start().await.expect("tool host");
    let provider = provider().await;
    let yaml = agents(&host.endpoint(), &provider, "x");
    let server = OrchestratorServer::start(&yaml, None, |_| {})
        .await
        .expect("orchestrator");
    let client = server.client().await.expect("client");
    let http = reqwest::Client::new();
    let response = http
        .post(format!("{}/v1/experiments", server.endpoint()))
        .json(&json!({"dataset": stuck_dataset(), "datasetName": "stuck.jsonl", "agent": "waiter", "name": "stuck", "concurrency": 5}))
        .send()
        .await
        .expect("post");
    assert_eq!(response.status(), reqwest::StatusCode::OK);
    until_running(&client, 4).await;
    let cancelled: Value = http
        .post(format!("{}/v1/experiments/stuck:cancel", server.endpoint()))
        .send()
        .await
        .expect("cancel")
        .json()
        .await
        .expect("json");
    assert_eq!(
        cancelled["status"], "EXPERIMENT_STATUS_CANCELLED",
        "{cancelled}"
    );
    assert_eq!(cancelled["cases"].as_array().map(Vec::len), Some(1));
    assert_eq!(cancelled["cases"][0]["caseId"], "quick");
    until_running(&client, 0).await;
    let stopped = client
        .list_runs(pb::RunStatus::Cancelled, 100, "")
        .await
        .expect("runs")
        .runs
        .len();
    assert_eq!(stopped, 4, "each waiting run was cancelled");
    // Refusals name the field and change nothing.
    let again = client
        .cancel_experiment("stuck")
        .await
        .map_err(status)
        .expect_err("ended");
    assert_eq!(again.code(), Code::FailedPrecondition);
    assert!(
        again.message().contains("experiment")
            && again
                .message()
                .contains("is cancelled: only a running experiment can be cancelled"),
        "{}",
        again.message()
    );
    let unknown = client
        .cancel_experiment("nope")
        .await
        .map_err(status)
        .expect_err("unknown");
    assert_eq!(unknown.code(), Code::NotFound);
    let blank = client
        .cancel_experiment("")
        .await
        .map_err(status)
        .expect_err("blank");
    assert_eq!(blank.code(), Code::InvalidArgument);
    assert!(
        blank.message().contains("experiment"),
        "{}",
        blank.message()
    );
    let response = http
        .post(format!("{}/v1/experiments/stuck:cancel", server.endpoint()))
        .send()
        .await
        .expect("cancel");
    assert_eq!(response.status(), reqwest::StatusCode::BAD_REQUEST);
    let body: Value = response.json().await.expect("json");
    assert_eq!(body["field"], "experiment", "{body}");
    server.shutdown().await.expect("shutdown");

    // Two replicas on Redis: started on a, cancelled through b.
    let redis = RedisServer::start().expect("redis");
    let a = OrchestratorServer::start(&yaml, None, durable_runs(redis.url()))
        .await
        .expect("a");
    let b = OrchestratorServer::start(&yaml, None, durable_runs(redis.url()))
        .await
        .expect("b");
    let (ca, cb) = (a.client().await.expect("a"), b.client().await.expect("b"));
    let events = Box::pin(
        ca.run_experiment(pb::RunExperimentRequest {
            dataset: stuck_dataset(),
            agent: "waiter".into(),
            concurrency: 5,
            name: "far".into(),
            ..Default::default()
        })
        .await
        .expect("experiment"),
    );
    until_running(&ca, 4).await;
    let asked = std::time::Instant::now();
    let record = cb.cancel_experiment("far").await.expect("cancel");
    eprintln!("cancelled from the other replica in {:?}", asked.elapsed());
    assert_eq!(record.status, pb::ExperimentStatus::Cancelled as i32);
    assert_eq!(record.cases.len(), 1);
    // The stream of the one who started it ends with the record.
    let ended = read_to_end(events).await;
    assert_eq!(ended.status, pb::ExperimentStatus::Cancelled as i32);
    until_running(&ca, 0).await;
}

/// A pipeline as a case's target — the dataset's default, or the case's
/// own — runs as a pipeline run labelled with the experiment, its input in
/// the `input` slot; a bad pipeline is refused naming the line and field.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipelines_are_targets_of_cases_and_bad_ones_are_refused_naming_the_field() {
    let host = TestToolHost::start().await.expect("tool host");
    let provider = provider().await;
    let server = OrchestratorServer::start(&agents(&host.endpoint(), &provider, "x"), None, |_| {})
        .await
        .expect("orchestrator");
    let client = server.client().await.expect("client");
    let dataset = r#"{"dataset": {"pipeline": {"name": "greet-then-flip", "steps": [{"id": "greet", "agent": "greeter", "task": "{{input}}", "output_to": "greeting"}, {"id": "flip", "agent": "coin", "task": "flip after {{greeting}}"}]}}}
{"id": "default", "input": "hi", "scorers": [{"kind": "regex", "pattern": "^(heads|tails)$"}]}
{"id": "own", "pipeline": {"name": "just-greet", "steps": [{"id": "g", "agent": "greeter", "task": "{{input}}"}]}, "input": "hello", "scorers": [{"kind": "contains", "value": "Ada"}]}
{"id": "agent", "agent": "greeter", "input": "hi", "scorers": [{"kind": "contains", "value": "Ada"}]}
"#;
    let e = experiment(&client, "pipelines.jsonl", dataset, "", 1)
        .await
        .expect("experiment");
    let targets: Vec<(&str, &str, bool)> = e
        .cases
        .iter()
        .map(|c| (c.case_id.as_str(), c.target.as_str(), c.passed))
        .collect();
    assert_eq!(
        targets,
        [
            ("default", "pipeline greet-then-flip", true),
            ("own", "pipeline just-greet", true),
            ("agent", "greeter", true)
        ],
        "{:?}",
        e.cases.iter().map(reasons).collect::<Vec<_>>()
    );
    let run = client
        .get_run(&e.cases[0].tries[0].run_id)
        .await
        .expect("run");
    assert_eq!(run.kind, pb::RunKind::Pipeline as i32);
    assert_eq!(run.experiment_id, e.id);
    assert!(
        e.models.iter().any(|m| m == "fake:coin"),
        "the pipeline's models: {:?}",
        e.models
    );

    // A researcher run saved as a case, run as a one-step pipeline with
    // its tools answered from the recording: the tool server gets nothing.
    let events = client
        .run_agent_to_end(baton_e2e::agent_request("researcher", "tides"))
        .await
        .expect("run");
    let mut case: Value = serde_json::from_str(
        &client
            .save_case(&events[0].run_id, true)
            .await
            .expect("save"),
    )
    .expect("json");
    let case = case.as_object_mut().expect("object");
    case.remove("agent");
    case.insert(
        "pipeline".into(),
        json!({"name": "research", "steps": [{"id": "r", "agent": "researcher", "task": "{{input}}"}]}),
    );
    let searches = || host.seen.requests.lock().expect("seen").len();
    let before = searches();
    let e = experiment(
        &client,
        "recorded.jsonl",
        &format!("{}\n", Value::Object(case.clone())),
        "",
        1,
    )
    .await
    .expect("experiment");
    assert!(e.cases[0].passed, "{}", reasons(&e.cases[0]));
    assert_eq!(searches(), before, "answered from the recording");

    // Refused, naming the line and field; nothing runs.
    let before = provider.requests().len();
    for (dataset, said) in [
        (
            r#"{"input": "x", "expected": "y", "pipeline": {"steps": [{"id": "a", "agent": "reseacher", "task": "t"}]}}"#,
            "bad.jsonl:1: pipeline.steps[0].agent: ",
        ),
        (
            r#"{"input": "x", "expected": "y", "pipeline": {"steps": [{"id": "a", "agent": "greeter", "tsk": "t"}]}}"#,
            "bad.jsonl:1: pipeline.steps[0].tsk: unknown field `tsk`, expected one of `id`, `agent`, `task`",
        ),
        (
            r#"{"input": "x", "expected": "y", "pipeline": {"initial_slots": {"input": "z"}, "steps": [{"id": "a", "agent": "greeter", "task": "t"}]}}"#,
            "bad.jsonl:1: pipeline.initial_slots.input: is the case's input",
        ),
        (
            r#"{"input": "x", "expected": "y", "agent": "greeter", "pipeline": {"steps": []}}"#,
            "bad.jsonl:1: pipeline: give `agent` or `pipeline`, not both",
        ),
        (
            r#"{"input": "x", "expected": "y", "pipeline": "research.yaml"}"#,
            "bad.jsonl:1: pipeline: must be an object",
        ),
        (
            r#"{"messages": ["a", "b"], "expected": "y", "pipeline": {"steps": [{"id": "a", "agent": "greeter", "task": "t"}]}}"#,
            "bad.jsonl:1: messages: a pipeline case takes one `input`",
        ),
        (
            "{\"dataset\": {\"pipeline\": {\"mode\": \"sideways\", \"steps\": [{\"id\": \"a\", \"agent\": \"greeter\", \"task\": \"t\"}]}}}\n{\"input\": \"x\", \"expected\": \"y\"}",
            "bad.jsonl: dataset.pipeline: ",
        ),
    ] {
        let refused = experiment(&client, "bad.jsonl", dataset, "", 1)
            .await
            .expect_err("refused");
        eprintln!("refused: {}", refused.message());
        assert_eq!(
            refused.code(),
            Code::InvalidArgument,
            "{}",
            refused.message()
        );
        assert!(
            refused.message().contains(said),
            "{said} in {}",
            refused.message()
        );
    }
    assert_eq!(provider.requests().len(), before, "nothing ran");
}
