//! The HTTP/JSON + SSE face, with a plain HTTP client (reqwest), against a
//! real orchestrator on a loopback port: the routes, the JSON mapping,
//! event streams (attached, detached, resumed from a seq or
//! `Last-Event-ID`), approvals and questions answered over HTTP, errors
//! that name the field and change nothing, the body limit at and just over
//! it, keys and tenants, and a disconnected attached caller cancelling its
//! run.

use std::time::Duration;

use baton_e2e::{EXAMPLE_AGENTS, OrchestratorServer};
use futures::StreamExt as _;
use reqwest::{StatusCode, header};
use serde_json::{Value, json};

/// One SSE frame.
#[derive(Debug, Clone)]
struct Frame {
    id: Option<u64>,
    event: String,
    data: Value,
}

/// Reads frames off an SSE response until `stop` says so or it ends.
async fn frames_until(
    response: reqwest::Response,
    mut stop: impl FnMut(&Frame) -> bool,
) -> Vec<Frame> {
    let mut out = Vec::new();
    let mut buf = String::new();
    let mut body = response.bytes_stream();
    while let Some(chunk) = tokio::time::timeout(Duration::from_secs(10), body.next())
        .await
        .expect("an SSE chunk within 10 s")
    {
        buf.push_str(std::str::from_utf8(&chunk.expect("chunk")).expect("utf-8"));
        while let Some(end) = buf.find("\n\n") {
            let block: String = buf.drain(..end + 2).collect();
            let mut frame = Frame {
                id: None,
                event: "message".into(),
                data: Value::Null,
            };
            let mut data = false;
            for line in block.lines() {
                if let Some(v) = line.strip_prefix("id: ") {
                    frame.id = Some(v.parse().expect("numeric id"));
                } else if let Some(v) = line.strip_prefix("event: ") {
                    frame.event = v.to_owned();
                } else if let Some(v) = line.strip_prefix("data: ") {
                    frame.data = serde_json::from_str(v).expect("JSON data");
                    data = true;
                }
            }
            if !data {
                continue;
            }
            let done = stop(&frame);
            out.push(frame);
            if done {
                return out;
            }
        }
    }
    out
}

fn terminal(f: &Frame) -> bool {
    matches!(
        f.event.as_str(),
        "runCompleted" | "runFailed" | "runCancelled" | "error"
    )
}

struct Api {
    base: String,
    http: reqwest::Client,
    key: Option<String>,
}

impl Api {
    fn new(server: &OrchestratorServer, key: Option<&str>) -> Self {
        Self {
            base: server.endpoint(),
            http: reqwest::Client::new(),
            key: key.map(str::to_owned),
        }
    }

    fn req(&self, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        let r = self.http.request(method, format!("{}{path}", self.base));
        match &self.key {
            Some(k) => r.bearer_auth(k),
            None => r,
        }
    }

    async fn get(&self, path: &str) -> (StatusCode, Value) {
        let r = self
            .req(reqwest::Method::GET, path)
            .send()
            .await
            .expect("GET");
        (r.status(), r.json().await.unwrap_or(Value::Null))
    }

    async fn post(&self, path: &str, body: &Value) -> (StatusCode, Value) {
        let r = self
            .req(reqwest::Method::POST, path)
            .json(body)
            .send()
            .await
            .expect("POST");
        (r.status(), r.json().await.unwrap_or(Value::Null))
    }

    async fn stream(&self, path: &str, body: Option<&Value>) -> reqwest::Response {
        let method = if body.is_some() {
            reqwest::Method::POST
        } else {
            reqwest::Method::GET
        };
        let mut r = self
            .req(method, path)
            .header(header::ACCEPT, "text/event-stream");
        if let Some(b) = body {
            r = r.json(b);
        }
        let response = r.send().await.expect("stream");
        assert_eq!(response.status(), StatusCode::OK);
        assert_eq!(
            response.headers()[header::CONTENT_TYPE],
            "text/event-stream"
        );
        response
    }
}

/// A path segment, percent-encoded (question ids hold `/`).
fn enc(segment: &str) -> String {
    segment
        .bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' | b':' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

fn seqs(frames: &[Frame]) -> Vec<u64> {
    frames.iter().filter_map(|f| f.id).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_over_http_streams_the_same_events_as_grpc_in_the_json_mapping() {
    let server = OrchestratorServer::start(EXAMPLE_AGENTS, None, |_| {})
        .await
        .expect("orchestrator");
    let api = Api::new(&server, None);

    let (status, agents) = api.get("/v1/agents").await;
    assert_eq!(status, StatusCode::OK);
    assert!(
        agents["agents"]
            .as_array()
            .expect("agents")
            .iter()
            .any(|a| a["name"] == "researcher")
    );

    // Attached: the stream is the run's events, numbered from 1 without a
    // gap, each `event:` the payload's key in `data`.
    let response = api
        .stream(
            "/v1/runs",
            Some(&json!({"agent": "researcher", "input": "the history of Rust"})),
        )
        .await;
    let frames = frames_until(response, terminal).await;
    let ids = seqs(&frames);
    assert_eq!(ids, (1..=ids.len() as u64).collect::<Vec<_>>());
    for f in &frames {
        assert!(f.data.get(&f.event).is_some(), "{f:?}");
        assert_eq!(
            f.data["seq"],
            f.id.expect("id").to_string(),
            "uint64 as text"
        );
    }
    assert_eq!(frames[0].event, "runStarted");
    let last = frames.last().expect("frames");
    assert_eq!(last.event, "runCompleted", "{last:?}");
    assert!(
        frames
            .iter()
            .any(|f| f.data["contextId"] == "root.summarizer.1.fact_checker.1"),
        "nested contexts travel with their ids"
    );
    let run_id = last.data["runId"].as_str().expect("runId").to_owned();

    // GetRun and ListRuns answer in the JSON mapping.
    let (status, run) = api.get(&format!("/v1/runs/{run_id}")).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(run["status"], "RUN_STATUS_COMPLETED");
    assert_eq!(run["lastSeq"], last.id.expect("id").to_string());
    assert!(run["startedAt"].as_str().expect("a time").ends_with('Z'));
    let (_, page) = api.get("/v1/runs?page_size=1").await;
    assert_eq!(page["runs"][0]["runId"], run_id);

    // The finished run's events again, from a seq and from Last-Event-ID.
    let again = frames_until(
        api.stream(&format!("/v1/runs/{run_id}/events?after_seq=5"), None)
            .await,
        terminal,
    )
    .await;
    assert_eq!(seqs(&again), ids[5..].to_vec());
    let resumed = api
        .req(reqwest::Method::GET, &format!("/v1/runs/{run_id}/events"))
        .header("Last-Event-ID", "7")
        .send()
        .await
        .expect("resume");
    assert_eq!(
        seqs(&frames_until(resumed, terminal).await),
        ids[7..].to_vec()
    );
    // Filtered as WatchRun filters.
    let top = frames_until(
        api.stream(
            &format!("/v1/runs/{run_id}/events?max_depth=0&kinds=RUN_STARTED&kinds=RUN_COMPLETED"),
            None,
        )
        .await,
        terminal,
    )
    .await;
    let kinds: Vec<&str> = top.iter().map(|f| f.event.as_str()).collect();
    assert_eq!(kinds, ["runStarted", "runCompleted"]);

    // Detached: the answer is the run's ids, and the run goes on.
    let (status, started) = api
        .post("/v1/runs", &json!({"agent": "assistant", "input": "hello"}))
        .await;
    assert_eq!(status, StatusCode::OK, "{started}");
    let id = started["runId"].as_str().expect("runId");
    assert_eq!(started["traceId"].as_str().expect("traceId").len(), 32);
    let done = frames_until(
        api.stream(&format!("/v1/runs/{id}/events"), None).await,
        terminal,
    )
    .await;
    assert_eq!(done.last().expect("end").event, "runCompleted");

    // A pipeline over HTTP.
    let pipeline = json!({"pipeline": {"name": "two", "mode": "PIPELINE_MODE_SEQUENTIAL", "steps": [
        {"id": "a", "agent": "assistant", "task": "one", "outputTo": "first"},
        {"id": "b", "agent": "assistant", "task": "two: {{first}}"}]}});
    let frames = frames_until(
        api.stream("/v1/pipelines:run", Some(&pipeline)).await,
        terminal,
    )
    .await;
    assert_eq!(frames.last().expect("end").event, "runCompleted");
    assert!(frames.iter().any(|f| f.event == "pipelineCompleted"));
    // Each step says what it waited for: a client draws the graph from
    // the events alone.
    let waits: Vec<Value> = frames
        .iter()
        .filter(|f| f.event == "stepStarted")
        .map(|f| f.data["stepStarted"]["dependsOn"].clone())
        .collect();
    assert_eq!(waits, [Value::Null, json!(["a"])]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn approvals_and_questions_are_answered_over_http() {
    let server = OrchestratorServer::start(EXAMPLE_AGENTS, None, |_| {})
        .await
        .expect("orchestrator");
    let api = Api::new(&server, None);

    // A question: answered by text.
    let (_, started) = api
        .post(
            "/v1/runs",
            &json!({"agent": "interviewer", "input": "a trip"}),
        )
        .await;
    let id = started["runId"].as_str().expect("runId").to_owned();
    let asked = frames_until(
        api.stream(&format!("/v1/runs/{id}/events"), None).await,
        |f| f.event == "inputRequested",
    )
    .await;
    let request = &asked.last().expect("asked").data["inputRequested"];
    assert_eq!(request["options"], json!(["Paris", "Lisbon"]));
    let input_id = enc(request["inputId"].as_str().expect("inputId"));
    let (status, body) = api
        .post(
            &format!("/v1/runs/{id}/inputs/{input_id}"),
            &json!({"text": "Lisbon"}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{input_id}: {body}");
    let rest = frames_until(
        api.stream(&format!("/v1/runs/{id}/events"), None).await,
        terminal,
    )
    .await;
    let end = rest.last().expect("end");
    assert_eq!(
        end.data["runCompleted"]["output"],
        "Planning a trip to Lisbon."
    );
    // Answered twice: refused, naming the field.
    let (status, err) = api
        .post(
            &format!("/v1/runs/{id}/inputs/{input_id}"),
            &json!({"text": "Paris"}),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{err}");
    assert_eq!(err["code"], "FAILED_PRECONDITION");

    // An approval at depth 2: approved over HTTP.
    let (_, started) = api
        .post(
            "/v1/runs",
            &json!({"agent": "support", "input": "refund order 42", "approvalMode": "APPROVAL_MODE_ASK"}),
        )
        .await;
    let id = started["runId"].as_str().expect("runId").to_owned();
    let asked = frames_until(
        api.stream(&format!("/v1/runs/{id}/events"), None).await,
        |f| f.event == "approvalRequested",
    )
    .await;
    let approval = enc(
        asked.last().expect("asked").data["approvalRequested"]["approvalId"]
            .as_str()
            .expect("approvalId"),
    );
    let (status, body) = api
        .post(
            &format!("/v1/runs/{id}/approvals/{approval}"),
            &json!({"approved": true, "reason": "checked"}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let rest = frames_until(
        api.stream(&format!("/v1/runs/{id}/events"), None).await,
        terminal,
    )
    .await;
    assert!(
        rest.iter().any(
            |f| f.event == "approvalResolved" && f.data["approvalResolved"]["approved"] == true
        )
    );

    // Cancel.
    let (_, started) = api
        .post(
            "/v1/runs",
            &json!({"agent": "interviewer", "input": "a trip"}),
        )
        .await;
    let id = started["runId"].as_str().expect("runId").to_owned();
    frames_until(
        api.stream(&format!("/v1/runs/{id}/events"), None).await,
        |f| f.event == "inputRequested",
    )
    .await;
    let (status, body) = api
        .post(
            &format!("/v1/runs/{id}:cancel"),
            &json!({"reason": "changed my mind"}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["status"], "RUN_STATUS_CANCELLED");
    let (_, run) = api.get(&format!("/v1/runs/{id}")).await;
    assert_eq!(run["status"], "RUN_STATUS_CANCELLED");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_is_refused_naming_the_field_and_starts_nothing() {
    let server = OrchestratorServer::start(EXAMPLE_AGENTS, None, |_| {})
        .await
        .expect("orchestrator");
    let api = Api::new(&server, None);
    let cases = [
        (json!({"agent": "nobody", "input": "x"}), "agent"),
        (json!({"agent": "assistant", "input": 5}), "input"),
        (
            json!({"agent": "assistant", "input": "x", "limits": {"maxDepth": "deep"}}),
            "limits.maxDepth",
        ),
        (
            json!({"agent": "assistant", "input": "x", "colour": "red"}),
            "colour",
        ),
        (
            json!({"agent": "assistant", "input": "x", "approvalMode": "SOMETIMES"}),
            "approvalMode",
        ),
        (
            json!({"agent": "assistant", "input": "x", "limits": {"maxDepth": 99}}),
            "limits.max_depth",
        ),
        (
            json!({"agent": "assistant", "input": "x", "limits": {"runTimeout": "soon"}}),
            "limits.runTimeout",
        ),
        (
            json!({"agent": "assistant", "input": "x", "runContextJson": "[1]"}),
            "run_context_json",
        ),
    ];
    for (body, field) in cases {
        let (status, err) = api.post("/v1/runs", &body).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body} -> {err}");
        assert_eq!(err["code"], "INVALID_ARGUMENT", "{err}");
        assert_eq!(err["field"], field, "{body} -> {err}");
        assert!(
            err["message"].as_str().expect("message").starts_with(field),
            "{err}"
        );
    }
    let (_, page) = api.get("/v1/runs").await;
    assert_eq!(page["runs"], Value::Null, "nothing started: {page}");

    // Queries and paths.
    let (status, err) = api.get("/v1/runs?page_size=many").await;
    assert_eq!(
        (status, err["field"].clone()),
        (StatusCode::BAD_REQUEST, json!("page_size"))
    );
    let (status, err) = api.get("/v1/runs?colour=red").await;
    assert_eq!(
        (status, err["field"].clone()),
        (StatusCode::BAD_REQUEST, json!("colour"))
    );
    let (status, err) = api.get("/v1/runs/not-a-run").await;
    assert_eq!(
        (status, err["field"].clone()),
        (StatusCode::BAD_REQUEST, json!("run_id"))
    );
    let missing = "0190f5a2-7b3c-7d4e-8f10-1a2b3c4d5e6f";
    let (status, err) = api.get(&format!("/v1/runs/{missing}")).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{err}");
    assert_eq!(err["code"], "NOT_FOUND");
    let (status, err) = api.get("/v1/nothing-here").await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{err}");
    let (status, err) = api
        .post(&format!("/v1/runs/{missing}/inputs/i1"), &json!({}))
        .await;
    assert_eq!(
        (status, err["field"].clone()),
        (StatusCode::BAD_REQUEST, json!("text"))
    );

    // The body limit: at it, a body that is only too big for JSON; just
    // over it, refused for its size.
    let limit = 4 * 1024 * 1024;
    let padding = |n: usize| {
        let text = format!(
            "{{\"agent\":\"assistant\",\"input\":\"{}\"}}",
            "x".repeat(n)
        );
        text
    };
    let base = padding(0).len();
    let at = api
        .req(reqwest::Method::POST, "/v1/runs")
        .header(header::CONTENT_TYPE, "application/json")
        .body(padding(limit - base))
        .send()
        .await
        .expect("at the limit");
    assert_ne!(
        at.status(),
        StatusCode::TOO_MANY_REQUESTS,
        "exactly the limit is taken"
    );
    let over = api
        .req(reqwest::Method::POST, "/v1/runs")
        .header(header::CONTENT_TYPE, "application/json")
        .body(padding(limit - base + 1))
        .send()
        .await
        .expect("over the limit");
    assert_eq!(over.status(), StatusCode::TOO_MANY_REQUESTS);
    let err: Value = over.json().await.expect("json");
    assert_eq!(err["field"], "body");

    // The OpenAPI document lists every route the face serves.
    let (status, doc) = api.get("/v1/openapi.json").await;
    assert_eq!(status, StatusCode::OK);
    for route in baton_orchestrator::http::routes::ROUTES {
        assert!(
            doc["paths"][route.path][route.method.to_ascii_lowercase()].is_object(),
            "{} {}",
            route.method,
            route.path
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_name_tenants_over_http_too() {
    let dir = std::env::temp_dir().join(format!("baton-http-keys-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("mkdir");
    let file = dir.join("api-keys");
    std::fs::write(
        &file,
        "acme acme-key-0123456789\nglobex globex-key-9876543210\n",
    )
    .expect("keys");
    let server = OrchestratorServer::start(EXAMPLE_AGENTS, None, |c| {
        c.auth.api_keys_file = file.clone();
    })
    .await
    .expect("orchestrator");
    let anonymous = Api::new(&server, None);
    let (status, err) = anonymous.get("/v1/agents").await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{err}");
    assert_eq!(err["code"], "UNAUTHENTICATED");
    let (status, _) = Api::new(&server, Some("nope")).get("/v1/agents").await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);

    let acme = Api::new(&server, Some("acme-key-0123456789"));
    let globex = Api::new(&server, Some("globex-key-9876543210"));
    let (_, started) = acme
        .post(
            "/v1/runs",
            &json!({"agent": "interviewer", "input": "a trip"}),
        )
        .await;
    let id = started["runId"].as_str().expect("runId").to_owned();
    let (status, _) = globex.get(&format!("/v1/runs/{id}")).await;
    assert_eq!(
        status,
        StatusCode::NOT_FOUND,
        "another tenant's run is not there"
    );
    let (_, page) = globex.get("/v1/runs").await;
    assert_eq!(page["runs"], Value::Null);
    let (_, page) = acme.get("/v1/runs").await;
    assert_eq!(page["runs"][0]["runId"], id);
    let (status, _) = globex
        .post(&format!("/v1/runs/{id}:cancel"), &json!({}))
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, body) = acme
        .post(&format!("/v1/runs/{id}:cancel"), &json!({}))
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_attached_caller_that_goes_away_cancels_its_run() {
    let server = OrchestratorServer::start(EXAMPLE_AGENTS, None, |_| {})
        .await
        .expect("orchestrator");
    let api = Api::new(&server, None);
    let response = api
        .stream(
            "/v1/runs",
            Some(&json!({"agent": "interviewer", "input": "a trip"})),
        )
        .await;
    let frames = frames_until(response, |f| f.event == "inputRequested").await;
    let id = frames[0].data["runId"].as_str().expect("runId").to_owned();
    // The response (and its connection) is dropped here.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    loop {
        let (_, run) = api.get(&format!("/v1/runs/{id}")).await;
        if run["status"] == "RUN_STATUS_CANCELLED" {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "still {run}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_traces_slots_are_listed_and_watched_in_the_callers_tenant() {
    let server = OrchestratorServer::start(EXAMPLE_AGENTS, None, |_| {})
        .await
        .expect("orchestrator");
    let api = Api::new(&server, None);
    // The run continues the caller's trace, so the watch can start first.
    let trace = "4bf92f3577b34da6a3ce929d0e0e4736";
    let watch = api
        .stream(&format!("/v1/traces/{trace}/slots:watch"), None)
        .await;
    let started = api
        .req(reqwest::Method::POST, "/v1/runs")
        .header("traceparent", format!("00-{trace}-00f067aa0ba902b7-01"))
        .json(&json!({"agent": "researcher", "input": "rust"}))
        .send()
        .await
        .expect("start");
    let started: Value = started.json().await.expect("json");
    assert_eq!(started["traceId"], trace);
    let changes = frames_until(watch, |f| f.event == "change").await;
    let change = &changes.last().expect("a change").data;
    assert_eq!(change["kind"], "SLOT_CHANGE_KIND_PUT");
    assert_eq!(change["key"], "research/topic");

    let (status, listing) = api.get(&format!("/v1/traces/{trace}/slots")).await;
    assert_eq!(status, StatusCode::OK, "{listing}");
    assert_eq!(listing["slots"][0]["key"], "research/topic");
    assert!(listing["slots"][0]["version"].is_string());
    let (status, err) = api.get("/v1/traces/not-a-trace/slots").await;
    assert_eq!(
        (status, err["field"].clone()),
        (StatusCode::BAD_REQUEST, json!("trace_id"))
    );
}
