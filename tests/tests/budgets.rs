//! Budgets (issue 46): a run's budget and an agent's, enforced before each
//! model call across the run's tree — at the limit a call goes ahead with
//! its `max_tokens` capped at what is left, one token under it the run
//! fails naming the budget; `finish` answers once more without tools from
//! a reserve kept for it; `ask` asks a person (answered over HTTP) and goes
//! on with more, or fails when denied; 50 parallel sub-agent calls against
//! a budget for ten spend no more than it; a cost budget refuses a model
//! without a price; bad budgets are refused naming the field.

use baton_client::{OrchestratorClient, pb, pb::run_event::Payload};
use baton_e2e::OrchestratorServer;
use futures::StreamExt;
use tonic::Code;

/// `boss` asks `helper`, then answers; every turn's usage is the script's
/// (a scripted model's input estimate is exactly its script's).
const AGENTS: &str = r#"
scripts:
  boss:
    - calls: [{tool: helper, args: {task: "help"}}]
      usage: {input_tokens: 100, output_tokens: 20}
    - text: "the final answer, in full"
      usage: {input_tokens: 200, output_tokens: 30}
  helper:
    - text: "helped"
      usage: {input_tokens: 50, output_tokens: 10}
agents:
  boss: {model: "scripted:boss", tools: [helper]}
  helper: {model: "scripted:helper"}
"#;

/// 100 + 20, 50 + 10, then 200 + 30.
const WHOLE: u64 = 410;
/// What is spent before the last call.
const BEFORE_LAST: u64 = 180;

fn request(agent: &str, budget: Option<pb::Budget>) -> pb::RunAgentRequest {
    pb::RunAgentRequest {
        agent: agent.into(),
        input: "x".into(),
        limits: Some(pb::RunLimits {
            budget,
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn tokens(n: u64) -> Option<pb::Budget> {
    Some(pb::Budget {
        tokens: Some(n),
        cost: None,
    })
}

async fn run(client: &OrchestratorClient, r: pb::RunAgentRequest) -> Vec<pb::RunEvent> {
    let mut stream = client.run_agent(r).await.expect("run");
    let mut out = Vec::new();
    while let Some(e) = stream.next().await {
        out.push(e.expect("event"));
    }
    out
}

fn last(log: &[pb::RunEvent]) -> &Payload {
    log.last()
        .and_then(|e| e.payload.as_ref())
        .expect("a last event")
}

fn spent(u: &Option<pb::Usage>) -> u64 {
    u.as_ref().map_or(0, |u| u.input_tokens + u.output_tokens)
}

fn turns(log: &[pb::RunEvent], agent: &str) -> Vec<pb::MessageCompleted> {
    log.iter()
        .filter(|e| e.agent == agent)
        .filter_map(|e| match &e.payload {
            Some(Payload::MessageCompleted(m)) => Some(m.clone()),
            _ => None,
        })
        .collect()
}

fn exhausted(log: &[pb::RunEvent]) -> Vec<pb::BudgetExhausted> {
    log.iter()
        .filter_map(|e| match &e.payload {
            Some(Payload::BudgetExhausted(b)) => Some(b.clone()),
            _ => None,
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_budget_holds_at_its_limit_and_fails_one_token_under_naming_itself() {
    let server = OrchestratorServer::start(AGENTS, None, |_| {})
        .await
        .expect("orchestrator");
    let client = server.client().await.expect("client");

    // Exactly what the run needs: it completes, uncut, having spent it all.
    let log = run(&client, request("boss", tokens(WHOLE))).await;
    let Payload::RunCompleted(done) = last(&log) else {
        panic!("{:?}", last(&log))
    };
    assert_eq!(spent(&done.usage), WHOLE);
    assert_eq!(done.output, "the final answer, in full");

    // Room for the last call's input and one output token: it goes ahead
    // with max_tokens capped at 1, and the answer is cut there.
    let log = run(&client, request("boss", tokens(BEFORE_LAST + 201))).await;
    let Payload::RunCompleted(done) = last(&log) else {
        panic!("{:?}", last(&log))
    };
    assert_eq!(
        spent(&done.usage),
        BEFORE_LAST + 201,
        "never over the budget"
    );
    let boss = turns(&log, "boss");
    assert_eq!(boss[1].finish_reason, "length");
    assert_eq!(spent(&boss[1].usage), 201);
    assert_eq!(done.output, "the ", "cut at 1 token (4 bytes)");

    // One token less: the call does not fit, and the run fails naming the
    // budget, its limit, what was spent and what the call needed.
    let log = run(&client, request("boss", tokens(BEFORE_LAST + 200))).await;
    let Payload::RunFailed(failed) = last(&log) else {
        panic!("{:?}", last(&log))
    };
    assert_eq!(failed.code, Code::ResourceExhausted as i32);
    assert_eq!(
        failed.message,
        "budget run exhausted: 180 of 380 tokens spent, the next model call needs at least 201"
    );
    let said = exhausted(&log);
    assert_eq!(said.len(), 1);
    assert_eq!(
        (
            said[0].budget.as_str(),
            said[0].action.as_str(),
            said[0].tokens_limit,
            said[0].tokens_spent
        ),
        ("run", "fail", 380, 180)
    );
    // GetRun shows the failure and the spend.
    let got = client.get_run(&log[0].run_id).await.expect("get");
    assert_eq!(got.status(), pb::RunStatus::Failed);
    assert_eq!(spent(&got.usage), BEFORE_LAST);
    server.shutdown().await.expect("shutdown");
}

/// `worker` writes until its budget leaves only the reserve for its last
/// answer, which it then writes without tools.
const FINISHING: &str = r#"
scripts:
  worker:
    - text: "my findings so far"
      calls: [{tool: note, args: {task: "more"}}]
      usage: {input_tokens: 100, output_tokens: 10}
      repeat: 10
  note:
    - text: "a note"
      usage: {input_tokens: 1, output_tokens: 1}
      repeat: 100
agents:
  worker:
    model: "scripted:worker"
    tools: [note]
    budget: {tokens: 250, on_exhausted: finish, finish_reserve: 120}
  note: {model: "scripted:note"}
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn finish_answers_once_more_without_tools_from_the_reserve_kept_for_it() {
    let server = OrchestratorServer::start(FINISHING, None, |_| {})
        .await
        .expect("orchestrator");
    let client = server.client().await.expect("client");
    let log = run(&client, request("worker", None)).await;
    let Payload::RunCompleted(done) = last(&log) else {
        panic!("{:?}", last(&log))
    };
    // Turn 1: 100 + 10 (+ the note's 2) of the 250 less the 120 kept for
    // the last answer. Turn 2 (101 at least) no longer fits in the 18 left
    // above the reserve: the agent finishes with the reserve, no tools.
    let worker = turns(&log, "worker");
    assert_eq!(worker.len(), 2, "{worker:?}");
    assert_eq!(worker[0].tool_calls.len(), 1);
    assert!(
        worker[1].tool_calls.is_empty(),
        "the last call calls nothing"
    );
    assert_eq!(done.output, "my findings so far");
    let said = exhausted(&log);
    assert_eq!(said.len(), 1);
    assert_eq!(said[0].action, "finish");
    assert_eq!(said[0].budget, "agent worker in root");
    assert!(spent(&done.usage) <= 250, "{:?}", done.usage);
    server.shutdown().await.expect("shutdown");
}

/// `worker` needs three turns of 110; its budget holds two; a person is
/// asked for 250 more.
const ASKING: &str = r#"
scripts:
  worker:
    - calls: [{tool: note, args: {task: "a"}}]
      usage: {input_tokens: 100, output_tokens: 10}
      repeat: 2
    - text: "done with more"
      usage: {input_tokens: 100, output_tokens: 10}
  note:
    - text: "n"
      usage: {input_tokens: 0, output_tokens: 0}
      repeat: 10
agents:
  worker:
    model: "scripted:worker"
    tools: [note]
    budget: {tokens: 250, on_exhausted: ask, ask_more: {tokens: 250}}
    a2a: true
    mcp: true
  note: {model: "scripted:note"}
"#;

/// Starts `worker` detached; answers its budget's approval over HTTP with
/// `approved`; the run's end.
async fn ask_and_answer(
    server: &OrchestratorServer,
    approved: bool,
) -> (Vec<pb::RunEvent>, pb::ApprovalRequested) {
    let client = server.client().await.expect("client");
    let mut stream = client
        .run_agent(request("worker", None))
        .await
        .expect("run");
    let mut log = Vec::new();
    let mut asked = None;
    while let Some(e) = stream.next().await {
        let e = e.expect("event");
        if let Some(Payload::ApprovalRequested(a)) = &e.payload {
            asked = Some(a.clone());
            let url = format!(
                "{}/v1/runs/{}/approvals/{}",
                server.endpoint(),
                e.run_id,
                urlencoding(&a.approval_id)
            );
            let answered = reqwest::Client::new()
                .post(url)
                .json(&serde_json::json!({"approved": approved, "reason": if approved { "" } else { "enough" }}))
                .send()
                .await
                .expect("POST");
            assert!(
                answered.status().is_success(),
                "{:?}",
                answered.text().await
            );
        }
        log.push(e);
    }
    (log, asked.expect("an approval was asked"))
}

fn urlencoding(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ask_raises_the_budget_when_a_person_approves_and_fails_when_denied() {
    let server = OrchestratorServer::start(ASKING, None, |_| {})
        .await
        .expect("orchestrator");
    let (log, asked) = ask_and_answer(&server, true).await;
    assert_eq!(asked.tool, "raise_budget");
    let args: serde_json::Value = serde_json::from_str(&asked.arguments_json).expect("json");
    assert_eq!(args["budget"], "agent worker in root");
    assert_eq!(
        args["tokens"],
        serde_json::json!({"limit": 250, "spent": 220, "more": 250})
    );
    let Payload::RunCompleted(done) = last(&log) else {
        panic!("{:?}", last(&log))
    };
    assert_eq!(done.output, "done with more");
    assert_eq!(spent(&done.usage), 330);
    assert_eq!(exhausted(&log)[0].action, "ask");

    let (log, _) = ask_and_answer(&server, false).await;
    let Payload::RunFailed(failed) = last(&log) else {
        panic!("{:?}", last(&log))
    };
    assert_eq!(failed.code, Code::ResourceExhausted as i32);
    assert!(
        failed
            .message
            .starts_with("budget agent worker in root exhausted: 220 of 250 tokens spent")
            && failed
                .message
                .ends_with("a raise was not given: raise_budget was denied: enough"),
        "{}",
        failed.message
    );
    server.shutdown().await.expect("shutdown");
}

/// `boss` asks 50 `worker`s at once; each worker's call reserves its input
/// (150) and its max_tokens (100).
const FAN_OUT: &str = r#"
scripts:
  boss:
    - calls: [REPLACE]
      usage: {input_tokens: 100, output_tokens: 50}
    - text: "never"
      usage: {input_tokens: 100, output_tokens: 10}
  worker:
    - text: "w"
      delay: 200ms
      usage: {input_tokens: 150, output_tokens: 100}
agents:
  boss: {model: "scripted:boss", tools: [worker]}
  worker: {model: "scripted:worker", settings: {max_tokens: 100}}
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_parallel_sub_agents_spend_no_more_than_a_budget_for_ten() {
    let calls = vec![r#"{tool: worker, args: {task: "w"}}"#; 50].join(", ");
    let yaml = FAN_OUT.replace("REPLACE", &calls);
    let server = OrchestratorServer::start(&yaml, None, |_| {})
        .await
        .expect("orchestrator");
    let client = server.client().await.expect("client");
    // The boss's first turn and ten workers' worst cases.
    let limit = 150 + 10 * 250;
    let log = run(&client, request("boss", tokens(limit))).await;
    let answered = turns(&log, "worker").len();
    let refused = log
        .iter()
        .filter(|e| matches!(&e.payload, Some(Payload::ToolCallCompleted(t)) if t.error.contains("budget run exhausted")))
        .count();
    assert_eq!(
        (answered, refused),
        (10, 40),
        "ten fit, forty were refused before they called"
    );
    let Payload::RunFailed(failed) = last(&log) else {
        panic!("{:?}", last(&log))
    };
    assert_eq!(failed.code, Code::ResourceExhausted as i32);
    let got = client.get_run(&log[0].run_id).await.expect("get");
    assert_eq!(
        spent(&got.usage),
        limit,
        "spent all of it and not one token more"
    );
    server.shutdown().await.expect("shutdown");
}

/// The same fan-out without `max_tokens` (OpenAI's default): each
/// worker's worst case is its model's output limit (1,000 here, the agents
/// file's `default_max_output_tokens`), four times what it writes.
const FAN_OUT_UNBOUNDED: &str = r#"
default_max_output_tokens: 1000
scripts:
  boss:
    - calls: [REPLACE]
      usage: {input_tokens: 100, output_tokens: 50}
    - text: "never"
      usage: {input_tokens: 100, output_tokens: 10}
  worker:
    - text: "w"
      delay: 100ms
      usage: {input_tokens: 150, output_tokens: 100}
agents:
  boss: {model: "scripted:boss", tools: [worker]}
  worker: {model: "scripted:worker"}
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_max_tokens_fifty_parallel_sub_agents_spend_most_of_a_budget_for_ten_and_never_more()
 {
    let calls = vec![r#"{tool: worker, args: {task: "w"}}"#; 50].join(", ");
    let yaml = FAN_OUT_UNBOUNDED.replace("REPLACE", &calls);
    let server = OrchestratorServer::start(&yaml, None, |_| {})
        .await
        .expect("orchestrator");
    let client = server.client().await.expect("client");
    // The boss's first turn and ten workers' real spend.
    let limit = 150 + 10 * 250;
    let log = run(&client, request("boss", tokens(limit))).await;
    let answered = turns(&log, "worker").len();
    let got = client.get_run(&log[0].run_id).await.expect("get");
    let spent = spent(&got.usage);
    eprintln!(
        "50 workers without max_tokens, a budget for ten: {answered} answered, {spent} of {limit} tokens spent"
    );
    // A call whose worst case does not fit beside calls in flight waits
    // for them instead of reserving everything left or being refused.
    assert!(answered >= 9, "{answered} answered");
    assert!(
        spent * 10 >= limit * 9 && spent <= limit,
        "spent {spent} of {limit}"
    );
    let Payload::RunFailed(failed) = last(&log) else {
        panic!("{:?}", last(&log))
    };
    assert_eq!(failed.code, Code::ResourceExhausted as i32);
    server.shutdown().await.expect("shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cost_budget_refuses_a_model_without_a_price_and_bad_budgets_are_refused_naming_the_field()
 {
    let server = OrchestratorServer::start(AGENTS, None, |_| {})
        .await
        .expect("orchestrator");
    let client = server.client().await.expect("client");
    let log = run(
        &client,
        request(
            "boss",
            Some(pb::Budget {
                tokens: None,
                cost: Some(1.0),
            }),
        ),
    )
    .await;
    let Payload::RunFailed(failed) = last(&log) else {
        panic!("{:?}", last(&log))
    };
    assert_eq!(failed.code, Code::ResourceExhausted as i32);
    assert!(
        failed.message.contains("model scripted:boss has no price"),
        "{}",
        failed.message
    );

    for (budget, field) in [
        (
            pb::Budget {
                tokens: Some(0),
                cost: None,
            },
            "limits.budget.tokens",
        ),
        (
            pb::Budget {
                tokens: None,
                cost: Some(-1.0),
            },
            "limits.budget.cost",
        ),
        (
            pb::Budget {
                tokens: None,
                cost: Some(f64::NAN),
            },
            "limits.budget.cost",
        ),
    ] {
        let Err(e) = client.run_agent(request("boss", Some(budget))).await else {
            panic!("started with a bad budget");
        };
        assert_eq!(e.code(), Code::InvalidArgument);
        assert!(e.message().starts_with(field), "{e:?}");
    }
    // Over HTTP, the JSON field is named.
    let refused = reqwest::Client::new()
        .post(format!("{}/v1/runs", server.endpoint()))
        .json(&serde_json::json!({"agent": "boss", "input": "x", "limits": {"budget": {"tokens": 0}}}))
        .send()
        .await
        .expect("POST");
    assert_eq!(refused.status(), 400);
    let body: serde_json::Value = refused.json().await.expect("json");
    assert_eq!(body["field"], "limits.budget.tokens", "{body}");
    // Nothing started.
    let runs = client
        .list_runs(pb::RunStatus::Unspecified, 100, "")
        .await
        .expect("list");
    assert_eq!(runs.runs.len(), 1, "only the unpriced run started");

    let refused = |yaml: String| async move {
        match OrchestratorServer::start(&yaml, None, |_| {}).await {
            Ok(_) => panic!("started with {yaml}"),
            Err(e) => format!("{e:#}"),
        }
    };
    let agent = |extra: &str| {
        format!(
            "scripts: {{a: [{{text: ok}}]}}\nagents: {{a: {{model: \"scripted:a\", {extra}}}}}\n"
        )
    };
    for (extra, says) in [
        (
            "budget: {tokens: 0}",
            "agents.a.budget.tokens: must be at least 1",
        ),
        (
            "budget: {cost: -2}",
            "agents.a.budget.cost: -2 is not a positive amount",
        ),
        ("budget: {cost: lots}", "budget"),
        ("budget: {on_exhausted: pray}", "on_exhausted"),
        (
            "budget: {finish_reserve: 0}",
            "agents.a.budget.finish_reserve: must be at least 1",
        ),
        (
            "fallbacks: [\"nope:x\"]",
            "agents.a.fallbacks[0]: \"nope:x\": unknown provider",
        ),
        (
            "fallbacks: [\"scripted:a\"]",
            "agents.a.fallbacks[0]: \"scripted:a\" is the agent's own model",
        ),
    ] {
        let e = refused(agent(extra)).await;
        assert!(e.contains(says), "{extra}: {e}");
    }
    server.shutdown().await.expect("shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn finish_and_ask_begin_one_token_under_the_limit_of_the_call_and_not_at_it() {
    // finish: after 112 spent, the second turn needs 101 above the 120 kept
    // for the last answer: 333 lets it go (capped at 1 token), 332 finishes.
    for (limit, finishes) in [(333, false), (332, true)] {
        let yaml = FINISHING.replace("tokens: 250,", &format!("tokens: {limit},"));
        let server = OrchestratorServer::start(&yaml, None, |_| {})
            .await
            .expect("orchestrator");
        let log = run(
            &server.client().await.expect("client"),
            request("worker", None),
        )
        .await;
        assert!(
            matches!(last(&log), Payload::RunCompleted(_)),
            "{:?}",
            last(&log)
        );
        let said: Vec<String> = exhausted(&log).into_iter().map(|b| b.action).collect();
        assert_eq!(
            said,
            if finishes {
                vec!["finish".to_owned()]
            } else {
                vec![]
            },
            "{limit}"
        );
        server.shutdown().await.expect("shutdown");
    }
    // ask: after 220 spent, the third turn needs 101: 321 lets it go, 320
    // asks a person (answered no here: the run fails).
    for (limit, asks) in [(321, false), (320, true)] {
        let yaml = ASKING.replace("tokens: 250,", &format!("tokens: {limit},"));
        let server = OrchestratorServer::start(&yaml, None, |_| {})
            .await
            .expect("orchestrator");
        let log = if asks {
            ask_and_answer(&server, false).await.0
        } else {
            run(
                &server.client().await.expect("client"),
                request("worker", None),
            )
            .await
        };
        let asked = log
            .iter()
            .any(|e| matches!(&e.payload, Some(Payload::ApprovalRequested(_))));
        assert_eq!(asked, asks, "{limit}");
        assert_eq!(
            matches!(last(&log), Payload::RunCompleted(_)),
            !asks,
            "{limit}"
        );
        server.shutdown().await.expect("shutdown");
    }
}

/// A2A and MCP show an `ask` as any approval: an A2A task stops at
/// `INPUT_REQUIRED` asking to approve `raise_budget`, and "approve" on the
/// task lets the run go on with more; an MCP client that can answer is
/// asked (elicitation) and its yes or no is the answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ask_is_an_approval_over_a2a_and_mcp() {
    use baton_e2e::mcp_clients::{Sdk, client, url};
    let server = OrchestratorServer::start(ASKING, None, |_| {})
        .await
        .expect("orchestrator");
    let send = |message: serde_json::Value| {
        let endpoint = format!("{}/a2a/worker", server.endpoint());
        async move {
            let body = serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "SendMessage",
                "params": {"message": message}});
            reqwest::Client::new()
                .post(endpoint)
                .header("A2A-Version", "1.0")
                .json(&body)
                .send()
                .await
                .expect("SendMessage")
                .json::<serde_json::Value>()
                .await
                .expect("JSON-RPC answer")
        }
    };
    let asked = send(serde_json::json!({"messageId": "m1", "role": "ROLE_USER",
        "parts": [{"text": "x"}]}))
    .await;
    let task = &asked["result"]["task"];
    assert_eq!(
        task["status"]["state"], "TASK_STATE_INPUT_REQUIRED",
        "{asked}"
    );
    let question = task["status"]["message"]["parts"][0]["text"]
        .as_str()
        .unwrap_or_default();
    assert!(question.contains("raise_budget"), "{question}");
    let id = task["id"].as_str().expect("task id");
    let done = send(
        serde_json::json!({"messageId": "m2", "role": "ROLE_USER", "taskId": id,
        "parts": [{"text": "approve"}]}),
    )
    .await;
    let task = &done["result"]["task"];
    assert_eq!(task["status"]["state"], "TASK_STATE_COMPLETED", "{done}");
    assert_eq!(task["artifacts"][0]["parts"][0]["text"], "done with more");

    let out = client(
        Sdk::Python,
        &url(&server),
        &["call", "worker", "x", "--approve"],
    )
    .await;
    assert_eq!(out.text(), "done with more");
    let message = out.line("elicit")["message"].as_str().unwrap_or_default();
    assert!(message.contains("raise_budget"), "{message}");
    let out = client(
        Sdk::Python,
        &url(&server),
        &["call", "worker", "x", "--deny"],
    )
    .await;
    assert_eq!(out.result()["isError"], true, "{:?}", out.result());
    assert!(
        out.text().contains("a raise was not given"),
        "{}",
        out.text()
    );
    server.shutdown().await.expect("shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_that_asks_for_more_never_asks_to_raise_the_runs_own_budget() {
    let yaml = r#"
scripts:
  frugal:
    - text: "checking"
      usage: {input_tokens: 400, output_tokens: 100}
agents:
  frugal: {model: "scripted:frugal", budget: {tokens: 600, on_exhausted: ask, ask_more: {tokens: 1000}}}
"#;
    let server = OrchestratorServer::start(yaml, None, |_| {})
        .await
        .expect("orchestrator");
    let client = server.client().await.expect("client");
    // The caller's cap of 300 is below the first call's 401: the run
    // fails, and nobody is asked to raise it.
    let log = run(&client, request("frugal", tokens(300))).await;
    assert!(
        !log.iter()
            .any(|e| matches!(e.payload, Some(Payload::ApprovalRequested(_)))),
        "nobody was asked"
    );
    let x = exhausted(&log);
    assert_eq!((x.len(), x[0].action.as_str()), (1, "fail"), "{x:?}");
    let Payload::RunFailed(failed) = last(&log) else {
        panic!("{:?}", last(&log))
    };
    assert_eq!(failed.code, Code::ResourceExhausted as i32);
    assert!(
        failed.message.starts_with(
            "budget run exhausted: 0 of 300 tokens spent, the next model call needs at least 401"
        ),
        "{}",
        failed.message
    );
    server.shutdown().await.expect("shutdown");
}
