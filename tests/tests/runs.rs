//! Runs as things of their own: ListRuns (per tenant, by status, newest
//! first, a page at a time, bad pages refused by field) and detached runs
//! (they outlive their caller's stream and are followed with WatchRun and
//! ended with CancelRun).

use std::{path::PathBuf, time::Duration};

use baton_client::{
    OrchestratorClient,
    pb::{self, run_event::Payload},
};
use baton_e2e::{OrchestratorServer, events};
use futures::StreamExt;
use tonic::Code;

const ACME: &str = "acme-key-0123456789";
const GLOBEX: &str = "globex-key-9876543210";

const AGENTS: &str = r#"
scripts:
  quick: [{text: "done: {{input}}"}]
  slow: [{calls: [{tool: sleep, args: {ms: 600}}]}, {text: "slept on {{input}}"}]
  forever: [{calls: [{tool: sleep, args: {ms: 60000}}]}, {text: never}]
agents:
  quick: {model: "scripted:quick"}
  slow: {model: "scripted:slow", tools: [sleep]}
  forever: {model: "scripted:forever", tools: [sleep]}
"#;

fn keys_file(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("baton-runs-e2e-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("mkdir");
    let path = dir.join("api-keys");
    std::fs::write(&path, format!("acme {ACME}\nglobex {GLOBEX}\n")).expect("write keys");
    path
}

async fn client(server: &OrchestratorServer, key: &str) -> OrchestratorClient {
    server
        .client()
        .await
        .expect("client")
        .with_api_key(key)
        .expect("ascii key")
}

fn request(agent: &str, input: &str, detach: bool) -> pb::RunAgentRequest {
    pb::RunAgentRequest {
        agent: agent.into(),
        input: input.into(),
        detach,
        ..Default::default()
    }
}

/// Runs `agent` to its end; its run id.
async fn finish(client: &OrchestratorClient, agent: &str, input: &str) -> String {
    let events = client
        .run_agent_to_end(request(agent, input, false))
        .await
        .expect("run");
    assert!(events::is_terminal(events.last().expect("events")));
    events[0].run_id.clone()
}

/// Every run id of the caller's list, page by page.
async fn all_pages(
    client: &OrchestratorClient,
    status: pb::RunStatus,
    page_size: i32,
) -> (Vec<String>, usize) {
    let (mut ids, mut pages, mut token) = (Vec::new(), 0, String::new());
    loop {
        let page = client
            .list_runs(status, page_size, &token)
            .await
            .expect("page");
        pages += 1;
        let limit = if page_size == 0 {
            100
        } else {
            page_size as usize
        };
        assert!(page.runs.len() <= limit);
        ids.extend(page.runs.into_iter().map(|r| r.run_id));
        if page.next_page_token.is_empty() {
            return (ids, pages);
        }
        token = page.next_page_token;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_runs_is_per_tenant_newest_first_by_status_and_paged() {
    let file = keys_file("list");
    let server = OrchestratorServer::start(AGENTS, None, |c| {
        c.auth.api_keys_file = file.clone();
    })
    .await
    .expect("orchestrator");
    let acme = client(&server, ACME).await;
    let globex = client(&server, GLOBEX).await;

    let mut finished = Vec::new();
    for i in 0..5 {
        finished.push(finish(&acme, "quick", &format!("job {i}")).await);
    }
    let other = finish(&globex, "quick", "theirs").await;
    let mut running = acme
        .run_agent(request("forever", "x", false))
        .await
        .expect("run");
    let running_id = running.next().await.expect("open").expect("event").run_id;

    // Newest first: the running one, then the finished ones backwards.
    let mut newest_first = vec![running_id.clone()];
    newest_first.extend(finished.iter().rev().cloned());
    for (size, pages) in [(2, 3), (6, 1), (5, 2), (0, 1)] {
        let (ids, n) = all_pages(&acme, pb::RunStatus::Unspecified, size).await;
        assert_eq!(ids, newest_first, "page_size {size}");
        assert_eq!(n, pages, "pages of {size}");
    }
    let (ids, _) = all_pages(&acme, pb::RunStatus::Completed, 2).await;
    assert_eq!(ids, newest_first[1..]);
    let (ids, _) = all_pages(&acme, pb::RunStatus::Running, 2).await;
    assert_eq!(ids, std::slice::from_ref(&running_id));
    let (ids, _) = all_pages(&acme, pb::RunStatus::Failed, 2).await;
    assert!(ids.is_empty());
    // Another tenant sees only its own run.
    let (ids, _) = all_pages(&globex, pb::RunStatus::Unspecified, 10).await;
    assert_eq!(ids, [other]);

    let page = acme
        .list_runs(pb::RunStatus::Unspecified, 1, "")
        .await
        .expect("page");
    let summary = &page.runs[0];
    assert_eq!(
        (
            summary.run_id.as_str(),
            summary.target.as_str(),
            summary.status(),
            summary.kind(),
            summary.detached
        ),
        (
            running_id.as_str(),
            "forever",
            pb::RunStatus::Running,
            pb::RunKind::Agent,
            false
        )
    );
    assert!(summary.started_at.is_some() && summary.ended_at.is_none());
    assert!(summary.last_seq >= 3, "{summary:?}");

    // The page size is bounded: 1000 and above list as 1000.
    for size in [1000, 1001, i32::MAX] {
        let page = acme
            .list_runs(pb::RunStatus::Unspecified, size, "")
            .await
            .expect("large page");
        assert_eq!(page.runs.len(), 6);
    }
    // Bad pages are refused by field, and change nothing.
    let raw = acme.raw();
    let bad = |status: i32, page_size: i32, page_token: &str| {
        let mut raw = raw.clone();
        let request = pb::ListRunsRequest {
            status,
            page_size,
            page_token: page_token.into(),
            waiting: false,
            failing_scores: false,
        };
        let mut request = tonic::Request::new(request);
        request.metadata_mut().insert(
            "authorization",
            format!("Bearer {ACME}").parse().expect("ascii"),
        );
        async move { raw.list_runs(request).await.expect_err("refused") }
    };
    for (status, size, token, field) in [
        (0, -1, "", "page_size"),
        (99, 0, "", "status"),
        (0, 0, "nope", "page_token"),
        (0, 0, "v1.not-a-uuid", "page_token"),
    ] {
        let err = bad(status, size, token).await;
        assert_eq!(err.code(), Code::InvalidArgument, "{err:?}");
        assert!(err.message().starts_with(field), "{field}: {err:?}");
    }
    running.next().await.expect("still open").expect("event");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_detached_run_outlives_its_callers_stream() {
    let server = OrchestratorServer::start(AGENTS, None, |_| {})
        .await
        .expect("orchestrator");
    let client = server.client().await.expect("client");

    // Attached: closing the stream cancels the run.
    let mut attached = client
        .run_agent(request("slow", "a", false))
        .await
        .expect("run");
    let attached_id = attached.next().await.expect("open").expect("event").run_id;
    drop(attached);
    // Detached: it goes on alone.
    let mut detached = client
        .run_agent(request("slow", "b", true))
        .await
        .expect("run");
    let detached_id = detached.next().await.expect("open").expect("event").run_id;
    drop(detached);

    let watched: Vec<pb::RunEvent> = client
        .watch_run(&detached_id, 0, None)
        .await
        .expect("watch")
        .map(|e| e.expect("event"))
        .collect()
        .await;
    match watched.last().and_then(|e| e.payload.as_ref()) {
        Some(Payload::RunCompleted(c)) => assert_eq!(c.output, "slept on b"),
        other => panic!("the detached run completes: {other:?}"),
    }
    events::check_stream_rules(&watched);
    let got = client.get_run(&attached_id).await.expect("get");
    assert_eq!(
        (got.status(), got.error_message.as_str()),
        (pb::RunStatus::Cancelled, "client disconnected")
    );
    let page = client
        .list_runs(pb::RunStatus::Unspecified, 10, "")
        .await
        .expect("list");
    let detached_flags: Vec<(String, bool)> = page
        .runs
        .iter()
        .map(|r| (r.run_id.clone(), r.detached))
        .collect();
    assert_eq!(detached_flags, [(detached_id, true), (attached_id, false)]);

    // A detached run ends with CancelRun, from any caller of its tenant.
    let mut forever = client
        .run_agent(request("forever", "c", true))
        .await
        .expect("run");
    let id = forever.next().await.expect("open").expect("event").run_id;
    drop(forever);
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(
        client.get_run(&id).await.expect("get").status(),
        pb::RunStatus::Running
    );
    assert_eq!(
        client.cancel(&id, "enough").await.expect("cancel"),
        pb::RunStatus::Cancelled
    );
    let last = client
        .watch_run(&id, 0, None)
        .await
        .expect("watch")
        .map(|e| e.expect("event"))
        .collect::<Vec<_>>()
        .await;
    match last.last().and_then(|e| e.payload.as_ref()) {
        Some(Payload::RunCancelled(c)) => assert_eq!(c.reason, "cancelled by request: enough"),
        other => panic!("{other:?}"),
    }
}
