//! The context store through its gRPC API, on a real redis-server, with the
//! product's default limits: bad input, limits at and just over their values,
//! CAS, expiry, Watch, and surviving a Redis restart.

use std::time::{Duration, Instant};

use baton_client::{Error, PutOptions, StoreClient, pb};
use baton_context_store::config::Backend;
use baton_e2e::{RedisServer, StoreServer, eventually};
use futures::StreamExt;
use tonic::Code;

const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const MIB: usize = 1 << 20;

struct Env {
    _redis: RedisServer,
    server: StoreServer,
    client: StoreClient,
}

async fn redis_env() -> Env {
    let redis = RedisServer::start().expect("redis-server");
    let server = StoreServer::start(StoreServer::config(Backend::Redis, Some(redis.url())))
        .await
        .expect("store");
    let client = StoreClient::connect(server.endpoint())
        .await
        .expect("connect");
    Env {
        _redis: redis,
        server,
        client,
    }
}

fn random_trace() -> String {
    baton_common::ids::TraceId::random().to_string()
}

#[track_caller]
fn assert_status(result: Result<impl std::fmt::Debug, Error>, code: Code, field: &str) -> Error {
    let err = result.expect_err("the call must fail");
    assert_eq!(err.code(), code, "{err}");
    assert_eq!(err.field(), Some(field), "{err}");
    assert!(
        err.message().starts_with(field),
        "the message names the field: {err}"
    );
    err
}

/// The trace's whole state, to check a failed call changed nothing.
async fn snapshot(client: &StoreClient, trace: &str) -> (pb::ListResponse, Vec<Vec<u8>>) {
    let list = client.list(trace, "").await.expect("list");
    let mut values = Vec::new();
    for s in &list.slots {
        values.push(client.get(trace, &s.key).await.expect("get").value);
    }
    (list, values)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_trace_ids_are_invalid_argument_on_every_rpc() {
    let env = redis_env().await;
    let c = &env.client;
    c.put(TRACE, "seed", b"x".to_vec()).await.expect("seed");
    let before = snapshot(c, TRACE).await;
    let bad = [
        "",
        "abc",
        "4BF92F3577B34DA6A3CE929D0E0E4736",
        "4bf92f3577b34da6a3ce929d0e0e473",
        "4bf92f3577b34da6a3ce929d0e0e47366",
        "4bf92f3577b34da6a3ce929d0e0e473g",
        "00000000000000000000000000000000",
    ];
    for t in bad {
        assert_status(
            c.put(t, "seed", b"y".to_vec()).await,
            Code::InvalidArgument,
            "trace_id",
        );
        assert_status(c.get(t, "seed").await, Code::InvalidArgument, "trace_id");
        assert_status(c.list(t, "").await, Code::InvalidArgument, "trace_id");
        assert_status(
            c.delete(t, "seed", None).await,
            Code::InvalidArgument,
            "trace_id",
        );
        assert_status(c.clear(t).await, Code::InvalidArgument, "trace_id");
        assert_status(
            c.watch(t, "").await.map(|_| ()),
            Code::InvalidArgument,
            "trace_id",
        );
    }
    assert_eq!(snapshot(c, TRACE).await, before, "nothing changed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_at_and_over_the_length_limit_and_bad_characters() {
    let env = redis_env().await;
    let c = &env.client;
    let t = random_trace();
    let at = "k".repeat(256);
    c.put(&t, &at, b"v".to_vec())
        .await
        .expect("256 characters is the limit");
    let before = snapshot(c, &t).await;
    let over = "k".repeat(257);
    assert_status(
        c.put(&t, &over, b"v".to_vec()).await,
        Code::InvalidArgument,
        "key",
    );
    assert_status(c.get(&t, &over).await, Code::InvalidArgument, "key");
    assert_status(
        c.delete(&t, &over, None).await,
        Code::InvalidArgument,
        "key",
    );
    for k in ["", "a b", "a*b", "ключ", "a\nb", "{tag}", "a?b"] {
        assert_status(
            c.put(&t, k, b"v".to_vec()).await,
            Code::InvalidArgument,
            "key",
        );
    }
    assert_status(
        c.list(&t, "bad prefix").await,
        Code::InvalidArgument,
        "prefix",
    );
    assert_status(
        c.watch(&t, "bad*prefix").await.map(|_| ()),
        Code::InvalidArgument,
        "prefix",
    );
    for k in ["A-z_0.9:/x", "steps/research/out", "a"] {
        c.put(&t, k, b"v".to_vec())
            .await
            .expect("allowed characters");
        c.delete(&t, k, None).await.expect("delete");
    }
    assert_eq!(snapshot(c, &t).await, before, "nothing changed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn value_at_and_over_one_mib() {
    let env = redis_env().await;
    let c = &env.client;
    let t = random_trace();
    c.put(&t, "at", vec![1; MIB])
        .await
        .expect("1 MiB is the limit");
    assert_eq!(c.get(&t, "at").await.expect("get").value.len(), MIB);
    let before = snapshot(c, &t).await;
    let err = assert_status(
        c.put(&t, "over", vec![1; MIB + 1]).await,
        Code::ResourceExhausted,
        "value",
    );
    assert!(
        err.message().contains("1048577") && err.message().contains("1048576"),
        "{err}"
    );
    assert_status(
        c.put(&t, "at", vec![2; MIB + 1]).await,
        Code::ResourceExhausted,
        "value",
    );
    assert_eq!(snapshot(c, &t).await, before, "nothing changed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn byte_quota_of_64_mib_at_and_over() {
    let env = redis_env().await;
    let c = &env.client;
    let t = random_trace();
    for i in 0..64 {
        c.put(&t, &format!("chunk{i}"), vec![b'x'; MIB])
            .await
            .expect("within 64 MiB");
    }
    let before = snapshot(c, &t).await;
    assert_eq!(before.0.used_bytes, 64 * MIB as u64);
    let err = assert_status(
        c.put(&t, "one-byte-more", b"x".to_vec()).await,
        Code::ResourceExhausted,
        "value",
    );
    assert!(err.message().contains("quota"), "{err}");
    assert_eq!(snapshot(c, &t).await, before, "nothing changed");
    // Overwriting with the same size keeps it exactly at the quota.
    c.put(&t, "chunk0", vec![b'y'; MIB])
        .await
        .expect("same size overwrite");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn key_quota_of_4096_at_and_over() {
    let env = redis_env().await;
    let c = &env.client;
    let t = random_trace();
    let mut pending = futures::stream::iter((0..4096).map(|i| {
        let c = c.clone();
        let t = t.clone();
        async move { c.put(&t, &format!("k{i}"), b"v".to_vec()).await }
    }))
    .buffer_unordered(32);
    while let Some(r) = pending.next().await {
        r.expect("within 4096 keys");
    }
    let before = c.list(&t, "").await.expect("list");
    assert_eq!(before.used_keys, 4096);
    let err = assert_status(
        c.put(&t, "k4096", b"v".to_vec()).await,
        Code::ResourceExhausted,
        "key",
    );
    assert!(err.message().contains("4096"), "{err}");
    assert_eq!(
        c.list(&t, "").await.expect("list"),
        before,
        "nothing changed"
    );
    c.put(&t, "k0", b"overwrite".to_vec())
        .await
        .expect("overwriting at the key quota");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ttl_zero_negative_and_over_seven_days() {
    let env = redis_env().await;
    let c = &env.client;
    let t = random_trace();
    let raw = |seconds: i64, nanos: i32| pb::PutRequest {
        trace_id: t.clone(),
        key: "k".into(),
        value: b"v".to_vec(),
        ttl: Some(baton_proto::wkt::Duration { seconds, nanos }),
        ..Default::default()
    };
    let seven_days = 7 * 86_400;
    for (s, n) in [
        (0, 0),
        (-1, 0),
        (0, -5),
        (seven_days, 1_000_000),
        (seven_days + 1, 0),
        (0, 1),
    ] {
        let r = c.raw().put(raw(s, n)).await.map_err(Error::from);
        assert_status(r, Code::InvalidArgument, "ttl");
    }
    assert_eq!(
        c.list(&t, "").await.expect("list").used_keys,
        0,
        "nothing written"
    );
    c.raw()
        .put(raw(seven_days, 0))
        .await
        .expect("exactly 7 days is allowed");
    c.raw()
        .put(raw(0, 1_000_000))
        .await
        .expect("1ms is allowed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn content_type_limits() {
    let env = redis_env().await;
    let c = &env.client;
    let t = random_trace();
    let opts = |ct: String| PutOptions {
        content_type: ct,
        ..Default::default()
    };
    c.put_with(&t, "k", b"v".to_vec(), opts("a".repeat(128)))
        .await
        .expect("128 is the limit");
    assert_status(
        c.put_with(&t, "k", b"v".to_vec(), opts("a".repeat(129)))
            .await,
        Code::InvalidArgument,
        "content_type",
    );
    assert_status(
        c.put_with(&t, "k", b"v".to_vec(), opts("text/plain\n".into()))
            .await,
        Code::InvalidArgument,
        "content_type",
    );
    assert_eq!(
        c.get(&t, "k")
            .await
            .expect("get")
            .slot
            .expect("slot")
            .content_type,
        "a".repeat(128)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_expected_version_is_aborted_with_the_current_version() {
    let env = redis_env().await;
    let c = &env.client;
    let t = random_trace();
    let v = c.put(&t, "k", b"one".to_vec()).await.expect("put").version;
    let cas = |expected| PutOptions {
        expected_version: Some(expected),
        ..Default::default()
    };
    let err = c
        .put_with(&t, "k", b"two".to_vec(), cas(v + 1))
        .await
        .expect_err("stale");
    assert_eq!(err.code(), Code::Aborted);
    assert_eq!(err.field(), Some("expected_version"));
    assert_eq!(err.current_version(), Some(v));
    assert!(err.message().contains(&format!("at version {v}")), "{err}");
    let err = c
        .put_with(&t, "k", b"two".to_vec(), cas(0))
        .await
        .expect_err("exists");
    assert_eq!(
        (err.code(), err.current_version()),
        (Code::Aborted, Some(v))
    );
    let err = c
        .put_with(&t, "absent", b"x".to_vec(), cas(3))
        .await
        .expect_err("absent");
    assert_eq!((err.code(), err.current_version()), (Code::Aborted, None));
    let err = c
        .delete(&t, "k", Some(v + 1))
        .await
        .expect_err("stale delete");
    assert_eq!(
        (err.code(), err.current_version()),
        (Code::Aborted, Some(v))
    );
    assert_eq!(
        c.get(&t, "k").await.expect("get").value,
        b"one",
        "nothing changed"
    );
    let v2 = c
        .put_with(&t, "k", b"two".to_vec(), cas(v))
        .await
        .expect("right version")
        .version;
    c.delete(&t, "k", Some(v2))
        .await
        .expect("delete at version");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_and_expired_slots_are_not_found() {
    let env = redis_env().await;
    let c = &env.client;
    let t = random_trace();
    assert_status(c.get(&t, "missing").await, Code::NotFound, "key");
    assert_status(c.delete(&t, "missing", None).await, Code::NotFound, "key");
    let short = PutOptions {
        ttl: Some(Duration::from_millis(150)),
        ..Default::default()
    };
    c.put_with(&t, "brief", b"x".to_vec(), short)
        .await
        .expect("put");
    assert!(c.get(&t, "brief").await.is_ok());
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_status(c.get(&t, "brief").await, Code::NotFound, "key");
    assert_status(c.delete(&t, "brief", None).await, Code::NotFound, "key");
    assert_eq!(c.list(&t, "").await.expect("list").used_keys, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_streams_puts_and_deletes_in_order_and_ends_on_shutdown() {
    let env = redis_env().await;
    let c = &env.client;
    let t = random_trace();
    let mut w = c.watch(&t, "").await.expect("watch");
    let v1 = c.put(&t, "a", b"1".to_vec()).await.expect("put").version;
    let v2 = c.put(&t, "b", b"22".to_vec()).await.expect("put").version;
    let v3 = c.delete(&t, "a", None).await.expect("delete");
    let mut got = Vec::new();
    for _ in 0..3 {
        let ev = tokio::time::timeout(Duration::from_secs(5), w.next())
            .await
            .expect("in time")
            .expect("open")
            .expect("ok");
        got.push((ev.kind(), ev.key, ev.version, ev.size_bytes));
    }
    use pb::SlotChangeKind::*;
    assert_eq!(
        got,
        vec![
            (Put, "a".into(), v1, 1),
            (Put, "b".into(), v2, 2),
            (Deleted, "a".into(), v3, 0)
        ]
    );

    env.server.shutdown().await.expect("clean shutdown");
    let end = tokio::time::timeout(Duration::from_secs(5), w.next())
        .await
        .expect("stream ends in time");
    match end {
        Some(Err(e)) => assert_eq!(e.code(), Code::Unavailable, "{e}"),
        other => panic!("expected UNAVAILABLE at shutdown, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_backend_serves_the_same_api() {
    let server = StoreServer::start(StoreServer::config(Backend::Memory, None))
        .await
        .expect("store");
    let c = StoreClient::connect(server.endpoint())
        .await
        .expect("connect");
    let t = random_trace();
    let v = c.put(&t, "k", b"v".to_vec()).await.expect("put").version;
    assert_eq!(
        c.get(&t, "k")
            .await
            .expect("get")
            .slot
            .expect("slot")
            .version,
        v
    );
    assert_status(
        c.put(&t, "k", vec![0; MIB + 1]).await,
        Code::ResourceExhausted,
        "value",
    );
    server.shutdown().await.expect("shutdown");
}

async fn health(endpoint: &str) -> i32 {
    baton_e2e::health(endpoint, "baton.v1.ContextStore").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_going_away_is_unavailable_and_coming_back_heals_without_restart() {
    use tonic_health::pb::health_check_response::ServingStatus;
    let mut redis = RedisServer::start().expect("redis-server");
    let server = StoreServer::start(StoreServer::config(Backend::Redis, Some(redis.url())))
        .await
        .expect("store");
    let endpoint = server.endpoint();
    let c = StoreClient::connect(endpoint.clone())
        .await
        .expect("connect");
    let t = random_trace();
    eventually("ready", || async {
        health(&endpoint).await == ServingStatus::Serving as i32
    })
    .await;
    c.put(&t, "before", b"x".to_vec())
        .await
        .expect("put while up");
    let mut w = c.watch(&t, "").await.expect("watch");

    redis.stop();
    let started = Instant::now();
    let err = c
        .put(&t, "during", b"x".to_vec())
        .await
        .expect_err("redis is down");
    assert_eq!(err.code(), Code::Unavailable, "{err}");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "fails fast: {:?}",
        started.elapsed()
    );
    assert_eq!(
        c.get(&t, "before").await.expect_err("down").code(),
        Code::Unavailable
    );
    let broken = tokio::time::timeout(Duration::from_secs(10), w.next())
        .await
        .expect("watch ends");
    assert!(
        matches!(broken, Some(Err(ref e)) if e.code() == Code::Unavailable),
        "{broken:?}"
    );
    eventually("not ready", || async {
        health(&endpoint).await == ServingStatus::NotServing as i32
    })
    .await;

    redis.restart().expect("restart on the same port");
    eventually("calls work again", || async {
        c.put(&t, "after", b"y".to_vec()).await.is_ok()
    })
    .await;
    assert_eq!(c.get(&t, "after").await.expect("get").value, b"y");
    eventually("ready again", || async {
        health(&endpoint).await == ServingStatus::Serving as i32
    })
    .await;
    // Watch works again too.
    let mut w = c.watch(&t, "").await.expect("watch again");
    c.put(&t, "watched", b"z".to_vec()).await.expect("put");
    // A put of "after" that timed out while Redis was away may have been
    // queued and sent again after the reconnect: its script refuses to act
    // past the call's deadline, so the next change is the watched one.
    let ev = tokio::time::timeout(Duration::from_secs(5), w.next())
        .await
        .expect("in time")
        .expect("open")
        .expect("ok");
    assert_eq!(ev.key, "watched");
    server.shutdown().await.expect("shutdown");
}

/// A batch holds 1000 entries (or keys) and not one more, through the
/// service on Redis; a refused batch changes nothing, and a bad entry is
/// named by its index.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batches_at_and_over_1000_entries() {
    use baton_client::{DeleteSelection, PutEntry};
    let env = redis_env().await;
    let c = &env.client;
    let t = random_trace();
    let entries = |n: usize| -> Vec<PutEntry> {
        (0..n)
            .map(|i| PutEntry::new(format!("k{i:04}"), "v"))
            .collect()
    };
    let written = c
        .put_many(&t, entries(1000))
        .await
        .expect("1000 is the limit");
    assert_eq!(written.len(), 1000);
    let before = snapshot(c, &t).await;
    let err = assert_status(
        c.put_many(&t, entries(1001)).await,
        Code::InvalidArgument,
        "entries",
    );
    assert!(err.message().contains("1001"), "{err}");
    let mut bad = entries(3);
    bad[2].key = "no spaces".into();
    assert_status(
        c.put_many(&t, bad).await,
        Code::InvalidArgument,
        "entries[2].key",
    );
    let keys = |n: usize| DeleteSelection::Keys((0..n).map(|i| format!("k{i:04}")).collect());
    assert_status(
        c.delete_many(&t, keys(1001)).await,
        Code::InvalidArgument,
        "keys",
    );
    assert_status(
        c.delete_many(&t, DeleteSelection::Prefix(String::new()))
            .await,
        Code::InvalidArgument,
        "keys",
    );
    assert_eq!(snapshot(c, &t).await, before, "nothing changed");
    let gone = c.delete_many(&t, keys(1000)).await.expect("1000 keys");
    assert_eq!(gone.deleted, 1000);
    assert!(c.list(&t, "").await.expect("list").slots.is_empty());
}
