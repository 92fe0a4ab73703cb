//! `dns:///host:port` targets: one connection per address the name resolves
//! to, calls spread over them, addresses followed as the name changes — what
//! the Kubernetes manifests use between the orchestrator and the context
//! store (a headless Service).

use std::{
    net::SocketAddr,
    sync::{Arc, Mutex},
    time::Duration,
};

use baton_client::{StoreClient, balance::lazy_channel_with};
use baton_context_store::config::Backend;
use baton_e2e::StoreServer;
use baton_orchestrator::remote_store::RemoteStore;
use baton_store::{ContextStore as _, Key, parse_trace_id};

const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";

async fn keys_on(server: &StoreServer, prefix: &str) -> usize {
    StoreClient::connect(server.endpoint())
        .await
        .expect("connect")
        .list(TRACE, prefix)
        .await
        .expect("list")
        .slots
        .len()
}

#[tokio::test]
async fn calls_spread_over_every_address_and_follow_the_name() {
    let a = StoreServer::start(StoreServer::config(Backend::Memory, None))
        .await
        .expect("store a");
    let b = StoreServer::start(StoreServer::config(Backend::Memory, None))
        .await
        .expect("store b");
    let addresses: Arc<Mutex<std::io::Result<Vec<SocketAddr>>>> =
        Arc::new(Mutex::new(Ok(vec![a.addr, b.addr])));
    let lookups = addresses.clone();
    let resolve = Arc::new(move |host: String, port: u16| {
        assert_eq!((host.as_str(), port), ("store.baton.svc", 50052));
        let answer = match &*lookups.lock().expect("lock") {
            Ok(found) => Ok(found.clone()),
            Err(e) => Err(std::io::Error::new(e.kind(), e.to_string())),
        };
        Box::pin(async move { answer })
            as std::pin::Pin<Box<dyn std::future::Future<Output = _> + Send>>
    });
    let channel = lazy_channel_with(
        "dns:///store.baton.svc:50052",
        resolve,
        Duration::from_millis(50),
    )
    .expect("channel");
    let client = StoreClient::new(channel);

    // Both addresses get calls. Sequential calls: p2c picks among ready
    // connections at random, so 60 calls all on one side would be a 1 in
    // 2^59 chance.
    for i in 0..60 {
        client
            .put(TRACE, &format!("both/{i}"), b"x".to_vec())
            .await
            .expect("put");
    }
    let (on_a, on_b) = (keys_on(&a, "both/").await, keys_on(&b, "both/").await);
    assert_eq!(on_a + on_b, 60);
    assert!(on_a > 0 && on_b > 0, "a {on_a}, b {on_b}");

    // The name now resolves to b only: a is dropped at the next refresh.
    *addresses.lock().expect("lock") = Ok(vec![b.addr]);
    tokio::time::sleep(Duration::from_millis(300)).await;
    for i in 0..20 {
        client
            .put(TRACE, &format!("b-only/{i}"), b"x".to_vec())
            .await
            .expect("put");
    }
    assert_eq!(keys_on(&a, "b-only/").await, 0);
    assert_eq!(keys_on(&b, "b-only/").await, 20);

    // A failing lookup, then an empty answer, keep what is known.
    *addresses.lock().expect("lock") = Err(std::io::Error::other("SERVFAIL"));
    tokio::time::sleep(Duration::from_millis(200)).await;
    client
        .put(TRACE, "kept/1", b"x".to_vec())
        .await
        .expect("put");
    *addresses.lock().expect("lock") = Ok(Vec::new());
    tokio::time::sleep(Duration::from_millis(200)).await;
    client
        .put(TRACE, "kept/2", b"x".to_vec())
        .await
        .expect("put");
    assert_eq!(keys_on(&b, "kept/").await, 2);

    // A new address joins.
    *addresses.lock().expect("lock") = Ok(vec![a.addr, b.addr]);
    tokio::time::sleep(Duration::from_millis(300)).await;
    for i in 0..60 {
        client
            .put(TRACE, &format!("again/{i}"), b"x".to_vec())
            .await
            .expect("put");
    }
    assert!(keys_on(&a, "again/").await > 0);
}

#[tokio::test]
async fn the_orchestrators_remote_store_resolves_a_real_name() {
    let store = StoreServer::start(StoreServer::config(Backend::Memory, None))
        .await
        .expect("store");
    let target = format!("dns:///localhost:{}", store.addr.port());
    let remote = RemoteStore::new(&target, Default::default(), Duration::from_secs(5))
        .expect("remote store");
    let trace = parse_trace_id(TRACE).expect("trace id");
    let key = Key::parse("key", "notes", 256).expect("key");
    remote
        .put(baton_store::Put::new(
            baton_store::Scope::of_trace(trace),
            key,
            b"hello".to_vec(),
        ))
        .await
        .expect("put through dns:///localhost");
    assert_eq!(keys_on(&store, "notes").await, 1);
}

#[tokio::test]
async fn a_store_that_does_not_answer_fails_the_call_at_the_deadline() {
    // A listener that accepts connections and never speaks HTTP/2.
    let silent = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = silent.local_addr().expect("addr");
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = silent.accept().await {
            held.push(socket);
        }
    });
    let remote = RemoteStore::new(
        &format!("http://{addr}"),
        Default::default(),
        Duration::from_millis(300),
    )
    .expect("remote store");
    let started = std::time::Instant::now();
    let key = Key::parse("key", "notes", 256).expect("key");
    let err = remote
        .get(
            &baton_store::Scope::of_trace(parse_trace_id(TRACE).expect("trace id")),
            &key,
        )
        .await
        .expect_err("no answer");
    assert!(
        matches!(err, baton_store::error::Error::Unavailable(ref m) if m.contains("did not answer within 300ms")),
        "{err:?}"
    );
    assert!(started.elapsed() < Duration::from_secs(2));
}
