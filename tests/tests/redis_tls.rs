//! Both services reach Redis over TLS (`rediss://`): a real `redis-server`
//! listening with `--tls-port`, certificates generated here (a CA, the
//! server's, a client certificate: the server requires one, as Redis does
//! by default), never committed.

use std::{sync::Arc, time::Duration};

use baton_client::pb::run_event::Payload;
use baton_e2e::{OrchestratorServer, RedisServer, pki::TestPki};
use baton_store::{
    ContextStore,
    conformance::{self, CASES},
    redis::{RedisConfig, RedisStore},
};
use futures::StreamExt;

fn tls_config(port: u16, pki: &TestPki) -> RedisConfig {
    RedisConfig {
        url: format!("rediss://127.0.0.1:{port}"),
        ca_file: pki.ca.clone(),
        cert_file: pki.client_cert.clone(),
        key_file: pki.client_key.clone(),
        timeout: Duration::from_secs(2),
        ..RedisConfig::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_store_passes_every_conformance_case_over_tls() {
    let pki = TestPki::generate("redis").expect("pki");
    let (_redis, port) = RedisServer::start_tls(&pki).expect("redis-server with TLS");
    let store: Arc<dyn ContextStore> =
        Arc::new(RedisStore::new(&tls_config(port, &pki), conformance::limits()).expect("store"));
    store.ping().await.expect("Redis answers over TLS");
    // Every case, watches (their own pub/sub connection) included.
    for (name, case) in CASES {
        eprintln!("tls: {name}");
        case(store.clone()).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_over_tls_refuses_what_it_should() {
    let pki = TestPki::generate("redis").expect("pki");
    let (_redis, port) = RedisServer::start_tls(&pki).expect("redis-server with TLS");
    let refused = |config: RedisConfig| async move {
        let store = RedisStore::new(&config, conformance::limits()).expect("store");
        store.ping().await.expect_err("refused")
    };
    let good = tls_config(port, &pki);
    // Without a client certificate (Redis's tls-auth-clients yes).
    refused(RedisConfig {
        cert_file: Default::default(),
        key_file: Default::default(),
        ..good.clone()
    })
    .await;
    // With the system's roots, which do not know the test CA.
    refused(RedisConfig {
        ca_file: Default::default(),
        ..good.clone()
    })
    .await;
    // Plaintext to the TLS port.
    refused(RedisConfig {
        url: format!("redis://127.0.0.1:{port}"),
        ..RedisConfig::default()
    })
    .await;
    // Certificates with a plaintext URL are a config error.
    let err = RedisConfig {
        url: format!("redis://127.0.0.1:{port}"),
        ..good.clone()
    }
    .validate()
    .expect_err("plaintext URL with certificates")
    .to_string();
    assert!(err.contains("rediss://"), "{err}");
    // A file that cannot be read is a config error naming it.
    let err = RedisConfig {
        ca_file: pki.dir().join("missing.pem"),
        ..good
    }
    .validate()
    .expect_err("missing file")
    .to_string();
    assert!(err.contains("redis.ca_file"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn durable_runs_are_kept_in_redis_over_tls() {
    let pki = TestPki::generate("redis").expect("pki");
    let (redis, port) = RedisServer::start_tls(&pki).expect("redis-server with TLS");
    let config = tls_config(port, &pki);
    let server = OrchestratorServer::start(
        r#"
scripts:
  hello: [{text: "hello over TLS"}]
agents:
  hello: {model: "scripted:hello"}
"#,
        None,
        move |c| {
            c.runs.store = baton_orchestrator::config::RunStoreMode::Redis;
            c.runs.redis = config;
        },
    )
    .await
    .expect("orchestrator");
    let client = server.client().await.expect("client");
    let events: Vec<_> = client
        .run_agent(baton_e2e::agent_request("hello", "x"))
        .await
        .expect("run")
        .map(|e| e.expect("event"))
        .collect()
        .await;
    let run_id = events[0].run_id.clone();
    assert!(matches!(
        events.last().and_then(|e| e.payload.as_ref()),
        Some(Payload::RunCompleted(c)) if c.output == "hello over TLS"
    ));
    // Read back through the plain port: the log is in Redis.
    let logged: usize = redis
        .cli(&["XLEN", &format!("baton:run:{{{run_id}}}:log")])
        .expect("xlen")
        .trim()
        .parse()
        .expect("a count");
    assert_eq!(logged, events.len());
    server.shutdown().await.expect("shutdown");
}
