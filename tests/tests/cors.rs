//! gRPC-web from browsers: CORS from the configured origins
//! (`server.cors_allowed_origins`), checked with real HTTP/1.1 preflight
//! and gRPC-web requests, as a browser sends them, on both services.

use baton_e2e::{OrchestratorServer, StoreServer};
use reqwest::{Method, StatusCode};

const ALLOWED: &str = "https://console.example.com";

async fn preflight(endpoint: &str, path: &str, origin: &str) -> reqwest::Response {
    reqwest::Client::new()
        .request(Method::OPTIONS, format!("{endpoint}{path}"))
        .header("origin", origin)
        .header("access-control-request-method", "POST")
        .header(
            "access-control-request-headers",
            "content-type,x-grpc-web,x-user-agent,authorization,traceparent",
        )
        .send()
        .await
        .expect("preflight")
}

fn header<'a>(r: &'a reqwest::Response, name: &str) -> &'a str {
    r.headers()
        .get(name)
        .map(|v| v.to_str().expect("ascii"))
        .unwrap_or("")
}

/// The checks on one service; the gRPC status of the call in its headers
/// (empty when it is in the body).
async fn check(endpoint: &str, path: &str) -> String {
    // An allowed origin: the preflight allows the call and its headers.
    let ok = preflight(endpoint, path, ALLOWED).await;
    assert!(ok.status().is_success(), "{:?}", ok.status());
    assert_eq!(header(&ok, "access-control-allow-origin"), ALLOWED);
    let allowed = header(&ok, "access-control-allow-headers").to_ascii_lowercase();
    for h in ["content-type", "x-grpc-web", "authorization", "traceparent"] {
        assert!(allowed.contains(h), "{h} in {allowed:?}");
    }
    assert!(header(&ok, "access-control-allow-methods").contains("POST"));
    // Another origin gets no allowance: the browser refuses the call.
    let other = preflight(endpoint, path, "https://evil.example").await;
    assert_eq!(header(&other, "access-control-allow-origin"), "");

    // The call itself (an empty message, gRPC-web framed), from the page.
    let call = reqwest::Client::new()
        .post(format!("{endpoint}{path}"))
        .header("origin", ALLOWED)
        .header("content-type", "application/grpc-web+proto")
        .header("x-grpc-web", "1")
        .body(vec![0u8, 0, 0, 0, 0])
        .send()
        .await
        .expect("gRPC-web call");
    assert_eq!(call.status(), StatusCode::OK);
    assert_eq!(header(&call, "access-control-allow-origin"), ALLOWED);
    assert!(
        header(&call, "access-control-expose-headers").contains("grpc-status"),
        "the page reads gRPC's status"
    );
    // gRPC's status: in the headers (a trailers-only answer) or in the
    // trailer frame at the end of the body.
    let in_headers = header(&call, "grpc-status").to_owned();
    let body = call.bytes().await.expect("body");
    let text = String::from_utf8_lossy(&body);
    assert!(
        !in_headers.is_empty() || text.contains("grpc-status:"),
        "a gRPC status: headers {in_headers:?}, body {text:?}"
    );
    in_headers
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn browsers_call_both_services_from_allowed_origins_only() {
    let orchestrator = OrchestratorServer::start("scripts: {}\nagents: {}\n", None, |c| {
        c.server.cors_allowed_origins = vec![ALLOWED.into()]
    })
    .await
    .expect("orchestrator");
    let status = check(
        &orchestrator.endpoint(),
        "/baton.v1.Orchestrator/ListAgents",
    )
    .await;
    assert!(
        status.is_empty() || status == "0",
        "ListAgents answered {status}"
    );

    let mut config = StoreServer::config(baton_context_store::config::Backend::Memory, None);
    config.server.cors_allowed_origins = vec![ALLOWED.into()];
    let store = StoreServer::start(config).await.expect("store");
    // An empty List names no trace: the store's INVALID_ARGUMENT reaches the
    // page (3), which it can read.
    let status = check(&store.endpoint(), "/baton.v1.ContextStore/List").await;
    assert_eq!(status, "3");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_http_api_follows_the_same_origins() {
    let orchestrator = OrchestratorServer::start("scripts: {}\nagents: {}\n", None, |c| {
        c.server.cors_allowed_origins = vec![ALLOWED.into()]
    })
    .await
    .expect("orchestrator");
    let endpoint = orchestrator.endpoint();
    let ok = preflight(&endpoint, "/v1/runs", ALLOWED).await;
    assert!(ok.status().is_success(), "{:?}", ok.status());
    assert_eq!(header(&ok, "access-control-allow-origin"), ALLOWED);
    assert!(
        header(&ok, "access-control-allow-headers")
            .to_ascii_lowercase()
            .contains("authorization")
    );
    let other = preflight(&endpoint, "/v1/runs", "https://evil.example").await;
    assert_eq!(header(&other, "access-control-allow-origin"), "");
    let call = reqwest::Client::new()
        .get(format!("{endpoint}/v1/agents"))
        .header("origin", ALLOWED)
        .send()
        .await
        .expect("GET /v1/agents");
    assert_eq!(call.status(), StatusCode::OK);
    assert_eq!(header(&call, "access-control-allow-origin"), ALLOWED);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_allowed_origins_no_cross_origin_call_is_allowed() {
    let orchestrator = OrchestratorServer::start("scripts: {}\nagents: {}\n", None, |_| {})
        .await
        .expect("orchestrator");
    let r = preflight(
        &orchestrator.endpoint(),
        "/baton.v1.Orchestrator/ListAgents",
        ALLOWED,
    )
    .await;
    assert_eq!(header(&r, "access-control-allow-origin"), "");
    // A malformed origin is a config error naming the field.
    let err = OrchestratorServer::start("scripts: {}\nagents: {}\n", None, |c| {
        c.server.cors_allowed_origins = vec!["https://console.example.com/app".into()]
    })
    .await
    .err()
    .expect("refused");
    assert!(
        err.to_string().contains("server.cors_allowed_origins"),
        "{err}"
    );
}
