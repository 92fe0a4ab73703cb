//! Client authentication with API keys from a file (a mounted Secret): calls
//! without a known key are UNAUTHENTICATED, a key names a tenant, a run is
//! invisible to other tenants, a rotated file is picked up without a
//! restart, and replicas forwarding run-scoped calls keep the caller's key.

use std::{path::PathBuf, time::Duration};

use baton_client::{
    OrchestratorClient,
    pb::{self, run_event::Payload},
};
use baton_e2e::{EXAMPLE_AGENTS, OrchestratorServer, agent_request, free_addr, wait_for};
use futures::StreamExt;
use tonic::Code;
use tonic_health::pb::{HealthCheckRequest, health_client::HealthClient};

const ACME: &str = "acme-key-0123456789";
const GLOBEX: &str = "globex-key-9876543210";

fn keys_file(name: &str, text: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("baton-auth-e2e-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("mkdir");
    let path = dir.join("api-keys");
    std::fs::write(&path, text).expect("write keys");
    path
}

async fn with_key(server: &OrchestratorServer, key: &str) -> OrchestratorClient {
    server
        .client()
        .await
        .expect("client")
        .with_api_key(key)
        .expect("ascii key")
}

async fn approval(events: &mut baton_client::Events) -> pb::RunEvent {
    wait_for(events, &mut Vec::new(), |e| {
        matches!(e.payload, Some(Payload::ApprovalRequested(_)))
    })
    .await
}

#[tokio::test]
async fn keys_name_tenants_and_a_run_belongs_to_its_tenant() {
    let file = keys_file("tenants", &format!("# who\nacme {ACME}\nglobex {GLOBEX}\n"));
    let server = OrchestratorServer::start(EXAMPLE_AGENTS, None, |c| {
        c.auth.api_keys_file = file.clone();
        c.auth.reload = Duration::from_millis(100);
    })
    .await
    .expect("orchestrator");

    // No key, a malformed header, an unknown key: refused before anything.
    let anonymous = server.client().await.expect("client");
    let err = anonymous.list_agents().await.expect_err("no key");
    assert_eq!(err.code(), Code::Unauthenticated);
    assert!(err.message().contains("authorization: missing"), "{err}");
    let err = with_key(&server, "not-a-known-key-at-all")
        .await
        .list_agents()
        .await
        .expect_err("unknown key");
    assert_eq!(err.code(), Code::Unauthenticated);
    assert!(err.message().contains("unknown API key"), "{err}");
    let err = anonymous
        .run_agent(agent_request("researcher", "x"))
        .await
        .err()
        .expect("no run without a key");
    assert_eq!(err.code(), Code::Unauthenticated);
    assert_eq!(server.core.runs().running(), 0, "nothing started");

    // Health needs no key (probes, load balancers).
    let channel = baton_client::channel(server.endpoint())
        .await
        .expect("channel");
    let health = HealthClient::new(channel)
        .check(HealthCheckRequest {
            service: String::new(),
        })
        .await
        .expect("health without a key");
    assert_eq!(health.into_inner().status, 1);

    // acme's run, with an approval pending: invisible to globex.
    let acme = with_key(&server, ACME).await;
    let globex = with_key(&server, GLOBEX).await;
    assert!(!acme.list_agents().await.expect("agents").agents.is_empty());
    let mut stream = acme
        .run_agent(agent_request("support", "order 7"))
        .await
        .expect("run");
    let asked = approval(&mut stream).await;
    let Some(Payload::ApprovalRequested(q)) = &asked.payload else {
        unreachable!()
    };
    let run_id = asked.run_id.clone();
    let nf = |r: Result<(), baton_client::Error>| {
        let e = r.expect_err("another tenant's run");
        assert_eq!(e.code(), Code::NotFound, "{e}");
        assert_eq!(e.field(), Some("run_id"));
    };
    nf(globex.get_run(&run_id).await.map(|_| ()));
    nf(globex
        .resolve_approval(&run_id, &q.approval_id, true, "mine now")
        .await);
    nf(globex.cancel(&run_id, "no").await.map(|_| ()));
    nf(globex.watch_run(&run_id, 0, None).await.map(|_| ()));
    assert_eq!(
        acme.get_run(&run_id).await.expect("own run").status(),
        pb::RunStatus::Running,
        "globex changed nothing"
    );
    acme.resolve_approval(&run_id, &q.approval_id, true, "ok")
        .await
        .expect("resolve");
    let mut last = None;
    while let Some(e) = stream.next().await {
        last = Some(e.expect("event"));
    }
    assert!(matches!(
        last.and_then(|e| e.payload),
        Some(Payload::RunCompleted(_))
    ));

    // Rotation: the new file is read within the reload interval; the old
    // key stops working. A broken file keeps the keys in force.
    std::fs::write(
        &file,
        format!("acme acme-rotated-key-000000\nglobex {GLOBEX}\n"),
    )
    .expect("rotate");
    let rotated = with_key(&server, "acme-rotated-key-000000").await;
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while rotated.list_agents().await.is_err() {
        assert!(
            std::time::Instant::now() < deadline,
            "rotation not picked up"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        acme.list_agents().await.expect_err("old key").code(),
        Code::Unauthenticated
    );
    std::fs::write(&file, "garbage\n").expect("break");
    tokio::time::sleep(Duration::from_millis(400)).await;
    rotated
        .list_agents()
        .await
        .expect("keys kept after a broken file");
    // acme's run is still acme's under the rotated key.
    assert_eq!(
        rotated
            .get_run(&run_id)
            .await
            .expect("same tenant")
            .status(),
        pb::RunStatus::Completed
    );
    server.shutdown().await.expect("shutdown");
}

#[tokio::test]
async fn forwarded_calls_keep_the_callers_tenant() {
    let file = keys_file("peers", &format!("acme {ACME}\nglobex {GLOBEX}\n"));
    let (a, b) = (free_addr().expect("port"), free_addr().expect("port"));
    let start = |listen| {
        let file = file.clone();
        OrchestratorServer::start(EXAMPLE_AGENTS, None, move |c| {
            c.listen = listen;
            c.peers.endpoints = vec![a.to_string(), b.to_string()];
            c.auth.api_keys_file = file;
        })
    };
    let first = start(a).await.expect("a");
    let second = start(b).await.expect("b");
    let mut stream = with_key(&first, ACME)
        .await
        .run_agent(agent_request("support", "order 8"))
        .await
        .expect("run on a");
    let asked = approval(&mut stream).await;
    let on_b_acme = with_key(&second, ACME).await;
    let on_b_globex = with_key(&second, GLOBEX).await;
    assert_eq!(
        on_b_acme
            .get_run(&asked.run_id)
            .await
            .expect("acme via b")
            .status(),
        pb::RunStatus::Running
    );
    let e = on_b_globex
        .get_run(&asked.run_id)
        .await
        .expect_err("globex via b");
    assert_eq!(e.code(), Code::NotFound);
    first.shutdown().await.expect("a");
    second.shutdown().await.expect("b");
}
