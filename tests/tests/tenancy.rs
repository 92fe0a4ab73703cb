//! Slots belong to a tenant, and the context store authenticates every call
//! (DESIGN §9): tried as an attacker holding a valid key of another tenant.
//!
//! - The store refuses calls without a credential (health excepted); a
//!   client API key fixes its tenant, whatever `baton-tenant` it sends; the
//!   orchestrator's service token states the tenant per call; a rotated
//!   token is picked up without a restart.
//! - Through the orchestrator on a Redis-backed store: a tenant whose runs
//!   send a `traceparent` naming another tenant's trace reads, lists and
//!   overwrites none of that tenant's slots.

use std::{path::PathBuf, sync::Arc, time::Duration};

use baton_client::{
    Error, OrchestratorClient, StoreClient,
    pb::{self, run_event::Payload},
};
use baton_context_store::{auth::AuthMode, config::Backend};
use baton_e2e::{OrchestratorServer, RedisServer, StoreServer, agent_request, eventually};
use futures::StreamExt;
use tonic::Code;

const ACME: &str = "acme-key-0123456789";
const GLOBEX: &str = "globex-key-9876543210";
const TOKEN: &str = "orchestrator-token-0123456789";
const TRACE: &str = "7af92f3577b34da6a3ce929d0e0e4736";

/// A directory of this test's own with the keys and token files.
fn secrets(name: &str) -> (PathBuf, PathBuf) {
    let dir = std::env::temp_dir().join(format!("baton-tenancy-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("mkdir");
    let keys = dir.join("api-keys");
    std::fs::write(&keys, format!("acme {ACME}\nglobex {GLOBEX}\n")).expect("keys");
    let token = dir.join("token");
    std::fs::write(&token, format!("{TOKEN}\n")).expect("token");
    (keys, token)
}

/// A store on `backend` that authenticates with those files.
async fn store(backend: Backend, redis: Option<String>, files: &(PathBuf, PathBuf)) -> StoreServer {
    let mut config = StoreServer::config(backend, redis);
    config.auth.mode = AuthMode::Keys;
    config.auth.api_keys_file = files.0.clone();
    config.auth.service_token_file = files.1.clone();
    config.auth.reload = Duration::from_millis(100);
    StoreServer::start(config).await.expect("store")
}

/// A store client presenting `key` and, when given, stating `tenant`.
async fn client(endpoint: &str, key: Option<&str>, tenant: Option<&'static str>) -> StoreClient {
    let c = StoreClient::connect(endpoint.to_owned())
        .await
        .expect("connect");
    let c = match key {
        Some(k) => c.with_api_key(k).expect("ascii"),
        None => c,
    };
    match tenant {
        Some(t) => c.with_metadata(Arc::new(move |md| {
            md.insert("baton-tenant", t.parse().expect("ascii"));
        })),
        None => c,
    }
}

#[track_caller]
fn code<T: std::fmt::Debug>(r: Result<T, Error>) -> (Code, String) {
    let e = r.expect_err("the call must fail");
    (e.code(), e.message().to_owned())
}

#[tokio::test]
async fn the_store_authenticates_every_call_and_a_key_fixes_its_tenant() {
    let files = secrets("store");
    let server = store(Backend::Memory, None, &files).await;
    let endpoint = server.endpoint();

    // Nothing, or an unknown credential: refused, nothing written.
    for key in [None, Some("not-a-known-key-at-all")] {
        let anonymous = client(&endpoint, key, Some("acme")).await;
        let (c, m) = code(anonymous.put(TRACE, "k", b"x".to_vec()).await);
        assert_eq!(c, Code::Unauthenticated, "{m}");
        assert!(m.contains("authorization"), "{m}");
        assert_eq!(
            code(anonymous.get(TRACE, "k").await).0,
            Code::Unauthenticated
        );
        assert_eq!(
            code(anonymous.list(TRACE, "").await).0,
            Code::Unauthenticated
        );
        assert_eq!(
            code(anonymous.delete(TRACE, "k", None).await).0,
            Code::Unauthenticated
        );
        assert_eq!(code(anonymous.clear(TRACE).await).0, Code::Unauthenticated);
        assert_eq!(
            code(anonymous.watch(TRACE, "").await.map(|_| ())).0,
            Code::Unauthenticated
        );
    }
    // Health needs none (probes).
    assert_eq!(
        baton_e2e::health(&endpoint, "baton.v1.ContextStore").await,
        tonic_health::pb::health_check_response::ServingStatus::Serving as i32
    );

    let acme = client(&endpoint, Some(ACME), None).await;
    acme.put(TRACE, "secret", b"acme's".to_vec())
        .await
        .expect("acme writes");
    // globex's key on acme's trace id, even stating acme as its tenant:
    // acme's slot does not exist for it.
    for tenant in [None, Some("acme")] {
        let globex = client(&endpoint, Some(GLOBEX), tenant).await;
        assert_eq!(
            code(globex.get(TRACE, "secret").await).0,
            Code::NotFound,
            "{tenant:?}"
        );
        let listing = globex.list(TRACE, "").await.expect("list");
        assert!(
            listing.slots.is_empty() && listing.used_keys == 0,
            "{listing:?}"
        );
        assert_eq!(
            code(globex.delete(TRACE, "secret", None).await).0,
            Code::NotFound
        );
        assert_eq!(globex.clear(TRACE).await.expect("clear"), 0);
    }
    let globex = client(&endpoint, Some(GLOBEX), None).await;
    globex
        .put(TRACE, "secret", b"globex's".to_vec())
        .await
        .expect("globex's own");
    assert_eq!(
        acme.get(TRACE, "secret").await.expect("acme's").value,
        b"acme's"
    );

    // The service token states the tenant per call; without one it is the
    // tenant "" (neither acme nor globex); a bad one is named.
    let as_acme = client(&endpoint, Some(TOKEN), Some("acme")).await;
    assert_eq!(
        as_acme.get(TRACE, "secret").await.expect("as acme").value,
        b"acme's"
    );
    let as_globex = client(&endpoint, Some(TOKEN), Some("globex")).await;
    assert_eq!(
        as_globex
            .get(TRACE, "secret")
            .await
            .expect("as globex")
            .value,
        b"globex's"
    );
    let as_nobody = client(&endpoint, Some(TOKEN), None).await;
    assert_eq!(code(as_nobody.get(TRACE, "secret").await).0, Code::NotFound);
    let bad = client(&endpoint, Some(TOKEN), Some("Not/A-Tenant")).await;
    let (c, m) = code(bad.get(TRACE, "secret").await);
    assert_eq!(c, Code::InvalidArgument);
    assert!(m.contains("baton-tenant"), "{m}");

    // A rotated token file is read again without a restart.
    let rotated = "rotated-token-9876543210";
    std::fs::write(&files.1, rotated).expect("rotate");
    let fresh = client(&endpoint, Some(rotated), Some("acme")).await;
    eventually("the rotated token is accepted", || {
        let fresh = fresh.clone();
        async move { fresh.get(TRACE, "secret").await.is_ok() }
    })
    .await;
    assert_eq!(
        code(as_acme.get(TRACE, "secret").await).0,
        Code::Unauthenticated
    );
}

#[tokio::test]
async fn a_store_without_credentials_refuses_to_start_unless_told_it_is_open() {
    let mut config = StoreServer::config(Backend::Memory, None);
    config.auth.mode = AuthMode::Keys;
    let err = StoreServer::start(config.clone())
        .await
        .err()
        .expect("no credential configured")
        .to_string();
    assert!(
        err.contains("auth.service_token_file") && err.contains("auth.mode"),
        "{err}"
    );
    config.auth.mode = AuthMode::None;
    StoreServer::start(config).await.expect("explicitly open");
}

const AGENTS: &str = r#"
scripts:
  keeper:
    - calls: [{tool: write_context, args: {key: secret, value: "acme's plan"}}]
    - text: "kept"
  reader:
    - calls: [{tool: read_context, args: {key: secret}}]
    - text: "read"
  lister:
    - calls: [{tool: list_context, args: {}}]
    - text: "listed"
  overwriter:
    - calls: [{tool: write_context, args: {key: secret, value: "globex was here"}}]
    - text: "overwritten"
agents:
  keeper: {model: "scripted:keeper", tools: [write_context]}
  reader: {model: "scripted:reader", tools: [read_context]}
  lister: {model: "scripted:lister", tools: [list_context]}
  overwriter: {model: "scripted:overwriter", tools: [write_context]}
"#;

/// Runs `agent` with a `traceparent` naming [`TRACE`]; the result (or
/// error) of its one tool call.
async fn tool_result(client: &OrchestratorClient, agent: &str) -> pb::ToolCallCompleted {
    let traceparent = format!("00-{TRACE}-00f067aa0ba902b7-01");
    let mut stream = client
        .run_agent_traced(agent_request(agent, "go"), Some(&traceparent))
        .await
        .expect("run");
    let mut done = None;
    while let Some(e) = stream.next().await {
        let e = e.expect("event");
        assert_eq!(e.trace_id, TRACE, "the traceparent still links the run");
        if let Some(Payload::ToolCallCompleted(t)) = e.payload {
            done = Some(t);
        }
    }
    done.expect("the tool ran")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_traceparent_of_another_tenants_trace_reaches_none_of_its_slots() {
    let files = secrets("orchestrator");
    let redis = RedisServer::start().expect("redis-server");
    let store = store(Backend::Redis, Some(redis.url()), &files).await;
    let (endpoint, keys, token) = (store.endpoint(), files.0.clone(), files.1.clone());
    let orchestrator = OrchestratorServer::start(AGENTS, None, move |c| {
        c.auth.api_keys_file = keys;
        c.store.mode = baton_orchestrator::config::StoreMode::Remote;
        c.store.endpoint = endpoint;
        c.store.token_file = token;
    })
    .await
    .expect("orchestrator");
    let as_tenant = |key: &'static str| {
        let orchestrator = &orchestrator;
        async move {
            orchestrator
                .client()
                .await
                .expect("client")
                .with_api_key(key)
                .expect("ascii")
        }
    };
    let (acme, globex) = (as_tenant(ACME).await, as_tenant(GLOBEX).await);

    let kept = tool_result(&acme, "keeper").await;
    assert_eq!(kept.error, "", "acme writes its slot");

    // globex, with acme's trace id in its traceparent, finds nothing.
    let read = tool_result(&globex, "reader").await;
    assert!(read.error.contains("does not exist"), "{read:?}");
    assert!(!read.result.contains("acme's plan"), "{read:?}");
    let listed = tool_result(&globex, "lister").await;
    let page: serde_json::Value = serde_json::from_str(&listed.result).expect("JSON");
    assert_eq!(page["slots"].as_array().map(Vec::len), Some(0), "{page}");
    // Its write lands in its own namespace.
    let overwritten = tool_result(&globex, "overwriter").await;
    assert_eq!(overwritten.error, "");
    let read = tool_result(&globex, "reader").await;
    assert!(read.result.contains("globex was here"), "{read:?}");

    // acme's slot is untouched, as acme's own run and the store see it.
    let read = tool_result(&acme, "reader").await;
    assert!(read.result.contains("acme's plan"), "{read:?}");
    let direct = client(&store.endpoint(), Some(ACME), None).await;
    assert_eq!(
        direct.get(TRACE, "secret").await.expect("acme's").value,
        b"acme's plan"
    );

    // Two disjoint sets of Redis keys, each under its tenant's hash tag.
    let mut conn = redis::Client::open(redis.url())
        .expect("client")
        .get_multiplexed_async_connection()
        .await
        .expect("conn");
    for tenant in ["acme", "globex"] {
        let keys: Vec<String> = redis::cmd("KEYS")
            .arg(format!("baton:{{{tenant}/{TRACE}}}:s:*"))
            .query_async(&mut conn)
            .await
            .expect("keys");
        assert_eq!(keys.len(), 1, "{tenant}: {keys:?}");
    }
    let bare: Vec<String> = redis::cmd("KEYS")
        .arg(format!("baton:{{{TRACE}}}:*"))
        .query_async(&mut conn)
        .await
        .expect("keys");
    assert!(
        bare.is_empty(),
        "nothing in the tenant \"\" namespace: {bare:?}"
    );
}
