//! TLS on both gRPC servers (rustls), with certificates this test makes
//! (`baton_e2e::pki`): clients reach them over `https://` checking a CA;
//! plaintext and unknown CAs are refused; the orchestrator reaches a store
//! that requires client certificates with its own (the service credential,
//! stating each run's tenant); renewed certificate files are used without a
//! restart.

use std::{path::Path, time::Duration};

use baton_client::{ClientTls, OrchestratorClient, StoreClient, pb::run_event::Payload};
use baton_common::tls::TlsConfig;
use baton_context_store::{auth::AuthMode, config::Backend};
use baton_e2e::{OrchestratorServer, StoreServer, agent_request, eventually, pki::TestPki};
use futures::StreamExt;

fn server_tls(pki: &TestPki, client_ca: bool) -> TlsConfig {
    TlsConfig {
        cert_file: pki.server_cert.clone(),
        key_file: pki.server_key.clone(),
        client_ca_file: if client_ca {
            pki.ca.clone()
        } else {
            Default::default()
        },
        reload: Duration::from_millis(100),
    }
}

fn trusting(ca: &Path) -> ClientTls {
    ClientTls {
        ca_file: Some(ca.to_owned()),
        ..ClientTls::default()
    }
}

const AGENTS: &str = r#"
scripts:
  keeper:
    - calls: [{tool: write_context, args: {key: plan, value: "over TLS"}}]
    - text: "kept"
agents:
  keeper: {model: "scripted:keeper", tools: [write_context]}
"#;

const TRACE: &str = "8af92f3577b34da6a3ce929d0e0e4736";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn both_servers_speak_tls_and_the_store_takes_the_orchestrators_certificate() {
    let pki = TestPki::generate("baton").expect("pki");
    // The store requires a client certificate of the CA, and has no other
    // credential: the orchestrator's certificate is its service credential.
    let mut store_config = StoreServer::config(Backend::Memory, None);
    store_config.auth.mode = AuthMode::Keys;
    store_config.tls = server_tls(&pki, true);
    let store = StoreServer::start(store_config).await.expect("store");
    let store_https = format!("https://localhost:{}", store.addr.port());

    let (endpoint, ca, cert, key) = (
        store_https.clone(),
        pki.ca.clone(),
        pki.client_cert.clone(),
        pki.client_key.clone(),
    );
    let (tls, keys_dir) = (server_tls(&pki, false), tempfile::tempdir().expect("dir"));
    let keys = keys_dir.path().join("keys");
    std::fs::write(&keys, "acme acme-key-0123456789\n").expect("keys");
    let orchestrator = OrchestratorServer::start(AGENTS, None, move |c| {
        c.tls = tls;
        c.auth.api_keys_file = keys;
        c.store.mode = baton_orchestrator::config::StoreMode::Remote;
        c.store.endpoint = endpoint;
        c.store.tls.ca_file = ca;
        c.store.tls.cert_file = cert;
        c.store.tls.key_file = key;
    })
    .await
    .expect("orchestrator");
    let orch_https = format!("https://localhost:{}", orchestrator.addr.port());

    // A client that trusts the CA runs an agent over TLS; the agent's write
    // reaches the store over mTLS, in the tenant of the run.
    let client = OrchestratorClient::connect_with(orch_https.clone(), &trusting(&pki.ca))
        .await
        .expect("https client")
        .with_api_key("acme-key-0123456789")
        .expect("ascii");
    let traceparent = format!("00-{TRACE}-00f067aa0ba902b7-01");
    let mut stream = client
        .run_agent_traced(agent_request("keeper", "go"), Some(&traceparent))
        .await
        .expect("run over TLS");
    let mut write = None;
    while let Some(e) = stream.next().await {
        if let Some(Payload::ToolCallCompleted(t)) = e.expect("event").payload {
            write = Some(t);
        }
    }
    let write = write.expect("the tool ran");
    assert_eq!(write.error, "", "the write reached the store over mTLS");

    let mut mtls = trusting(&pki.ca);
    mtls.cert_file = Some(pki.client_cert.clone());
    mtls.key_file = Some(pki.client_key.clone());
    let as_acme = StoreClient::connect_with(store_https.clone(), &mtls)
        .await
        .expect("store over mTLS")
        .with_metadata(std::sync::Arc::new(|md| {
            md.insert("baton-tenant", "acme".parse().expect("ascii"));
        }));
    let slot = as_acme.get(TRACE, "plan").await.expect("acme's slot");
    assert_eq!(slot.value, b"over TLS");

    // Refused: plaintext to a TLS port; a client that does not trust the
    // CA (the system's roots); the store without a client certificate.
    let plain = OrchestratorClient::connect(orchestrator.endpoint()).await;
    let refused = match plain {
        Err(e) => e.to_string(),
        Ok(c) => c.list_agents().await.expect_err("plaintext").to_string(),
    };
    assert!(!refused.is_empty());
    let stranger =
        OrchestratorClient::connect_with(orch_https.clone(), &ClientTls::default()).await;
    let refused = match stranger {
        Err(e) => e.to_string(),
        Ok(c) => c.list_agents().await.expect_err("unknown CA").to_string(),
    };
    assert!(
        refused.to_lowercase().contains("certificate") || refused.contains("transport"),
        "{refused}"
    );
    let no_cert = match StoreClient::connect_with(store_https.clone(), &trusting(&pki.ca)).await {
        Err(e) => e.to_string(),
        Ok(c) => c
            .get(TRACE, "plan")
            .await
            .expect_err("no client certificate")
            .to_string(),
    };
    assert!(!no_cert.contains("over TLS"), "{no_cert}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renewed_certificate_files_are_used_without_a_restart() {
    let first = TestPki::generate("first").expect("pki");
    let second = TestPki::generate("second").expect("pki");
    // The server's files live in a directory of their own, rewritten in
    // place as cert-manager and the kubelet would.
    let dir = tempfile::tempdir().expect("dir");
    let (cert, key) = (dir.path().join("tls.crt"), dir.path().join("tls.key"));
    std::fs::copy(&first.server_cert, &cert).expect("cert");
    std::fs::copy(&first.server_key, &key).expect("key");
    let mut config = StoreServer::config(Backend::Memory, None);
    config.tls = TlsConfig {
        cert_file: cert.clone(),
        key_file: key.clone(),
        client_ca_file: Default::default(),
        reload: Duration::from_millis(100),
    };
    let store = StoreServer::start(config).await.expect("store");
    let https = format!("https://localhost:{}", store.addr.port());
    let works = |ca: std::path::PathBuf| {
        let https = https.clone();
        async move {
            match StoreClient::connect_with(https, &trusting(&ca)).await {
                Ok(c) => c.list(TRACE, "").await.is_ok(),
                Err(_) => false,
            }
        }
    };
    assert!(
        works(first.ca.clone()).await,
        "the first certificate serves"
    );
    assert!(!works(second.ca.clone()).await, "not yet the second");

    // A broken renewal keeps the certificate in force.
    std::fs::write(&cert, "not a certificate").expect("break");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        works(first.ca.clone()).await,
        "a broken file changes nothing"
    );

    std::fs::copy(&second.server_key, &key).expect("renew key");
    std::fs::copy(&second.server_cert, &cert).expect("renew cert");
    let ca = second.ca.clone();
    eventually("the renewed certificate serves", || works(ca.clone())).await;
    assert!(!works(first.ca.clone()).await, "the old one is gone");
}

/// Agents whose `searcher` calls `web_search` on the tool server `rusty`
/// reached over TLS with `tls` (the agents file's lines).
fn tool_agents(endpoint: &str, tls: &str) -> String {
    format!(
        r#"
tool_servers:
  rusty:
    endpoint: "{endpoint}"
    tools: [web_search]
{tls}
scripts:
  searcher: [{{calls: [{{tool: web_search, args: {{query: "tls"}}}}]}}, {{text: "found: {{{{results}}}}"}}]
agents:
  searcher: {{model: "scripted:searcher", tools: [web_search]}}
"#
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_orchestrator_calls_tool_servers_over_tls_with_its_client_certificate() {
    let pki = TestPki::generate("toolhost").expect("pki");
    let host = baton_e2e::toolhost::TestToolHost::start_tls(&pki, true)
        .await
        .expect("tool host");
    let tls = format!(
        "    tls: {{ca_file: \"{}\", cert_file: \"{}\", key_file: \"{}\"}}",
        pki.ca.display(),
        pki.client_cert.display(),
        pki.client_key.display(),
    );
    let server = OrchestratorServer::start(&tool_agents(&host.tls_endpoint(), &tls), None, |_| {})
        .await
        .expect("orchestrator");
    let client = server.client().await.expect("client");
    let events = client
        .run_agent_to_end(agent_request("searcher", "x"))
        .await
        .expect("run");
    match events.last().and_then(|e| e.payload.clone()) {
        Some(Payload::RunCompleted(c)) => {
            assert!(c.output.starts_with("found: "), "{c:?}");
            assert!(!c.output.contains("error"), "{c:?}");
        }
        other => panic!("expected RunCompleted, got {other:?}"),
    }
    let reached = || host.seen.requests.lock().expect("lock").len();
    assert_eq!(reached(), 1, "the call reached the server");

    // Without its CA (system roots) or without a client certificate, the
    // handshake fails: a tool error, nothing reaches the server.
    for tls in [
        String::new(),
        format!("    tls: {{ca_file: \"{}\"}}", pki.ca.display()),
    ] {
        let server =
            OrchestratorServer::start(&tool_agents(&host.tls_endpoint(), &tls), None, |_| {})
                .await
                .expect("orchestrator");
        let events = server
            .client()
            .await
            .expect("client")
            .run_agent_to_end(agent_request("searcher", "x"))
            .await
            .expect("run");
        let failed = events.iter().any(
            |e| matches!(&e.payload, Some(Payload::ToolCallCompleted(t)) if !t.error.is_empty()),
        );
        assert!(failed, "the tool call fails with {tls:?}: {events:?}");
    }
    assert_eq!(reached(), 1, "nothing more reached the server");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn probes_use_a_plaintext_health_port_when_the_main_port_speaks_tls() {
    let pki = TestPki::generate("probes").expect("pki");
    let health = baton_e2e::free_addr().expect("port");
    let mut config = StoreServer::config(Backend::Memory, None);
    config.tls = server_tls(&pki, true);
    config.server.health_listen = health.to_string();
    let store = StoreServer::start(config).await.expect("store");
    // What the kubelet's gRPC probe does: plaintext grpc.health.v1.
    eventually("the health port answers SERVING", || async {
        baton_e2e::health(&format!("http://{health}"), "baton.v1.ContextStore").await
            == tonic_health::pb::health_check_response::ServingStatus::Serving as i32
    })
    .await;
    // It serves health only: the store's own API is not there.
    let on_health_port = StoreClient::connect(format!("http://{health}"))
        .await
        .expect("connect");
    let e = on_health_port
        .list(TRACE, "")
        .await
        .expect_err("no store API on the health port");
    assert_eq!(e.code(), tonic::Code::Unimplemented, "{e}");
    // The main port still refuses plaintext.
    assert!(
        StoreClient::connect(store.endpoint()).await.is_err()
            || StoreClient::connect(store.endpoint())
                .await
                .expect("lazy")
                .list(TRACE, "")
                .await
                .is_err()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_forward_run_scoped_calls_to_each_other_over_tls() {
    const ASKER: &str = r#"
scripts:
  asker:
    - calls: [{tool: write_context, args: {key: "k", value: "v"}}]
    - text: "done"
agents:
  asker:
    model: "scripted:asker"
    tools: [write_context]
    approvals: {write_context: always}
"#;
    let pki = TestPki::generate("peers").expect("pki");
    let (a_addr, b_addr) = (
        baton_e2e::free_addr().expect("port"),
        baton_e2e::free_addr().expect("port"),
    );
    let peers = vec![
        format!("localhost:{}", a_addr.port()),
        format!("localhost:{}", b_addr.port()),
    ];
    let replica = |addr: std::net::SocketAddr| {
        let (pki_tls, peers, ca) = (server_tls(&pki, false), peers.clone(), pki.ca.clone());
        OrchestratorServer::start(ASKER, None, move |c| {
            c.listen = addr;
            c.tls = pki_tls;
            c.peers.endpoints = peers;
            c.peers.tls.enabled = true;
            c.peers.tls.ca_file = ca;
        })
    };
    let a = replica(a_addr).await.expect("a");
    let b = replica(b_addr).await.expect("b");
    let connect = |addr: std::net::SocketAddr| {
        let ca = pki.ca.clone();
        async move {
            OrchestratorClient::connect_with(
                format!("https://localhost:{}", addr.port()),
                &trusting(&ca),
            )
            .await
            .expect("connect")
        }
    };
    let (on_a, on_b) = (connect(a.addr).await, connect(b.addr).await);
    let mut events = on_a
        .run_agent(agent_request("asker", "x"))
        .await
        .expect("run");
    let asked = baton_e2e::wait_for(&mut events, &mut Vec::new(), |e| {
        matches!(e.payload, Some(Payload::ApprovalRequested(_)))
    })
    .await;
    let Some(Payload::ApprovalRequested(q)) = asked.payload else {
        unreachable!()
    };
    // b does not run it: it asks a over TLS.
    on_b.resolve_approval(&asked.run_id, &q.approval_id, true, "ok")
        .await
        .expect("forwarded over TLS");
    let mut last = None;
    while let Some(e) = events.next().await {
        last = Some(e.expect("event"));
    }
    assert!(
        matches!(last.and_then(|e| e.payload), Some(Payload::RunCompleted(_))),
        "the run completes"
    );
    drop(b);
}
