//! Several orchestrator replicas behind one address: a run lives on the
//! replica that started it, and its run-scoped calls (ResolveApproval,
//! SubmitInput, CancelRun, GetRun, WatchRun) work on any replica, which asks
//! its peers (`peers.endpoints`).

use std::time::Duration;

use baton_client::pb::{self, run_event::Payload};
use baton_e2e::{EXAMPLE_AGENTS, OrchestratorServer, agent_request, free_addr, wait_for};
use futures::StreamExt;

const AGENTS: &str = r#"
scripts:
  slow:
    - text: "working"
      delay: 30s
    - text: "done"
  clerk:
    - text: "filing"
      calls:
        - tool: write_context
          args: {key: files/last, value: "{{input}}"}
    - text: "Filed. {{results}}"
agents:
  slow:
    model: scripted:slow
  clerk:
    model: scripted:clerk
    tools: [write_context]
    approvals:
      write_context: always
"#;

/// Two replicas that know each other (each lists both addresses, itself
/// included, as a headless Service would resolve).
async fn pair(agents: &str) -> (OrchestratorServer, OrchestratorServer) {
    pair_with(agents, Duration::from_secs(2)).await
}

async fn pair_with(agents: &str, timeout: Duration) -> (OrchestratorServer, OrchestratorServer) {
    let (a, b) = (free_addr().expect("port"), free_addr().expect("port"));
    let peers = vec![a.to_string(), format!("dns:///localhost:{}", b.port())];
    let start = |listen| {
        let peers = peers.clone();
        OrchestratorServer::start(agents, None, move |c| {
            c.listen = listen;
            c.peers.endpoints = peers;
            c.peers.timeout = timeout;
        })
    };
    let first = start(a).await.expect("replica a");
    let second = start(b).await.expect("replica b");
    assert_eq!((first.addr, second.addr), (a, b));
    (first, second)
}

#[tokio::test]
async fn run_scoped_calls_reach_the_replica_running_the_run() {
    let (a, b) = pair(AGENTS).await;
    let on_a = a.client().await.expect("client a");
    let on_b = b.client().await.expect("client b");

    // An approval asked on A, answered through B.
    let mut stream = on_a
        .run_agent(agent_request("clerk", "invoice 9"))
        .await
        .expect("run");
    let mut seen = Vec::new();
    let asked = wait_for(&mut stream, &mut seen, |e| {
        matches!(e.payload, Some(Payload::ApprovalRequested(_)))
    })
    .await;
    let Some(Payload::ApprovalRequested(q)) = &asked.payload else {
        unreachable!()
    };
    let run_id = asked.run_id.clone();

    let state = on_b.get_run(&run_id).await.expect("GetRun through b");
    assert_eq!(state.status(), pb::RunStatus::Running);
    assert_eq!(state.trace_id, asked.trace_id);

    // WatchRun through B replays what A's stream has seen, then goes live.
    let mut watch = on_b.watch_run(&run_id, 0, None).await.expect("watch via b");

    on_b.resolve_approval(&run_id, &q.approval_id, true, "ok")
        .await
        .expect("ResolveApproval through b");
    let done = wait_for(&mut stream, &mut seen, |e| {
        matches!(e.payload, Some(Payload::RunCompleted(_)))
    })
    .await;
    let Some(Payload::RunCompleted(c)) = &done.payload else {
        unreachable!()
    };
    assert_eq!(c.output, "Filed. wrote files/last at version 1");

    let mut watched = Vec::new();
    while let Some(e) = tokio::time::timeout(Duration::from_secs(10), watch.next())
        .await
        .expect("watch ends")
    {
        watched.push(e.expect("event"));
    }
    let seqs = |v: &[pb::RunEvent]| v.iter().map(|e| e.seq).collect::<Vec<_>>();
    assert_eq!(
        seqs(&watched),
        seqs(&seen),
        "WatchRun through b = A's own stream"
    );

    // Answering again through B: A's own refusal comes back, not NOT_FOUND.
    let again = on_b
        .resolve_approval(&run_id, &q.approval_id, true, "")
        .await
        .expect_err("twice");
    assert_eq!(again.code(), tonic::Code::FailedPrecondition, "{again}");
    let state = on_b.get_run(&run_id).await.expect("GetRun through b");
    assert_eq!(state.status(), pb::RunStatus::Completed);

    // CancelRun through A of a run on B.
    let mut slow = on_b
        .run_agent(agent_request("slow", "x"))
        .await
        .expect("slow run");
    let first = wait_for(&mut slow, &mut Vec::new(), |_| true).await;
    let status = on_a
        .cancel(&first.run_id, "enough")
        .await
        .expect("cancel via a");
    assert_eq!(status, pb::RunStatus::Cancelled);
    let end = wait_for(&mut slow, &mut Vec::new(), |e| {
        matches!(e.payload, Some(Payload::RunCancelled(_)))
    })
    .await;
    assert_eq!(end.run_id, first.run_id);

    // A run nobody has: NOT_FOUND naming run_id, after asking both.
    let missing = on_b
        .get_run("0190f5a2-7b3c-7d4e-8f10-1a2b3c4d5e6f")
        .await
        .expect_err("unknown");
    assert_eq!(missing.code(), tonic::Code::NotFound);
    assert_eq!(missing.field(), Some("run_id"));
    // Exactly this: a forwarded call is never forwarded again (a loop would
    // end in "did not answer").
    assert_eq!(
        missing.message(),
        "run_id: no run \"0190f5a2-7b3c-7d4e-8f10-1a2b3c4d5e6f\" on any of the 2 orchestrator replicas"
    );
    a.shutdown().await.expect("a");
    b.shutdown().await.expect("b");
}

#[tokio::test]
async fn a_replica_that_is_gone_is_skipped_and_forwarding_is_off_by_default() {
    let (a, b) = pair(EXAMPLE_AGENTS).await;
    let on_a = a.client().await.expect("client a");
    b.shutdown().await.expect("b gone");
    let missing = on_a
        .get_run("0190f5a2-7b3c-7d4e-8f10-1a2b3c4d5e6f")
        .await
        .expect_err("unknown");
    // Nothing listens where it was: it runs nothing.
    assert_eq!(missing.code(), tonic::Code::NotFound, "{missing}");
    assert!(
        missing
            .message()
            .contains("on any of the 2 orchestrator replicas"),
        "{missing}"
    );

    // Without peers, a replica answers from its own runs only.
    let single = OrchestratorServer::start(EXAMPLE_AGENTS, None, |_| {})
        .await
        .expect("single");
    let err = single
        .client()
        .await
        .expect("client")
        .get_run("0190f5a2-7b3c-7d4e-8f10-1a2b3c4d5e6f")
        .await
        .expect_err("unknown");
    assert_eq!(err.code(), tonic::Code::NotFound);
    assert!(err.message().contains("on this orchestrator"), "{err}");
    a.shutdown().await.expect("a");
    single.shutdown().await.expect("single");
}

#[tokio::test]
async fn peers_are_checked_at_start() {
    let err = OrchestratorServer::start(EXAMPLE_AGENTS, None, |c| {
        c.peers.endpoints = vec!["dns:///orchestrator".into()];
    })
    .await
    .err()
    .expect("refused");
    assert!(err.to_string().contains("peers.endpoints[0]"), "{err}");
}

#[tokio::test]
async fn a_relayed_watch_outlives_the_forwarding_deadline() {
    let (a, b) = pair_with(AGENTS, Duration::from_millis(300)).await;
    let on_a = a.client().await.expect("client a");
    let on_b = b.client().await.expect("client b");
    let mut slow = on_a
        .run_agent(agent_request("slow", "x"))
        .await
        .expect("slow run on a");
    let first = wait_for(&mut slow, &mut Vec::new(), |_| true).await;
    let mut watch = on_b
        .watch_run(&first.run_id, 0, None)
        .await
        .expect("watch via b");
    // Four times the peers' deadline later, the relayed stream is still on.
    tokio::time::sleep(Duration::from_millis(1200)).await;
    on_a.cancel(&first.run_id, "enough").await.expect("cancel");
    let mut last = None;
    while let Some(e) = tokio::time::timeout(Duration::from_secs(10), watch.next())
        .await
        .expect("watch ends")
    {
        last = Some(e.expect("no error on the relayed stream"));
    }
    assert!(
        matches!(last.and_then(|e| e.payload), Some(Payload::RunCancelled(_))),
        "the relayed stream ends with the run"
    );
    a.shutdown().await.expect("a");
    b.shutdown().await.expect("b");
}
