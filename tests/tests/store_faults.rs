//! The context store's promises under Redis faults and at its bounds,
//! through the gRPC API on a real redis-server: a write that answered
//! `UNAVAILABLE` is never applied later (Redis paused, Redis stopped with
//! SIGSTOP), Watch fails fast while Redis hangs and works at once after a
//! restart, a trace at its key quota can be listed page by page, a full
//! Redis is `RESOURCE_EXHAUSTED`, and watches are bounded per trace and per
//! connection. Every test is bounded in time.

use std::time::{Duration, Instant};

use baton_client::{Error, PutOptions, StoreClient};
use baton_context_store::config::Backend;
use baton_e2e::{RedisServer, StoreServer};
use futures::StreamExt;
use tonic::Code;
use tonic_health::pb::health_check_response::ServingStatus;

/// The store's `redis.timeout` in these tests.
const REDIS_TIMEOUT: Duration = Duration::from_millis(500);

fn random_trace() -> String {
    baton_common::ids::TraceId::random().to_string()
}

async fn start(redis: &RedisServer) -> (StoreServer, StoreClient) {
    let mut config = StoreServer::config(Backend::Redis, Some(redis.url()));
    config.redis.timeout = REDIS_TIMEOUT;
    let server = StoreServer::start(config).await.expect("store");
    let client = StoreClient::connect(server.endpoint())
        .await
        .expect("connect");
    wait_ready(&server.endpoint()).await;
    (server, client)
}

async fn wait_ready(endpoint: &str) {
    baton_e2e::eventually("the store is ready", || async {
        baton_e2e::health(endpoint, "baton.v1.ContextStore").await == ServingStatus::Serving as i32
    })
    .await;
}

/// Every slot of `trace`: key, version and value.
async fn snapshot(c: &StoreClient, trace: &str) -> Vec<(String, u64, Vec<u8>)> {
    let mut out = Vec::new();
    for s in c.list(trace, "").await.expect("list").slots {
        let v = c.get(trace, &s.key).await.expect("get").value;
        out.push((s.key, s.version, v));
    }
    out
}

/// The error of a call that must fail (its success type need not be Debug).
#[track_caller]
fn refused<T>(r: Result<T, Error>) -> Error {
    match r {
        Ok(_) => panic!("the call must fail"),
        Err(e) => e,
    }
}

#[derive(Debug, Clone, Copy)]
enum Fault {
    /// `CLIENT PAUSE … ALL`: Redis queues every command until it ends.
    Pause,
    /// SIGSTOP: the process hangs with its connections open.
    Stop,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_that_answered_unavailable_is_never_applied_later() {
    let redis = RedisServer::start().expect("redis-server");
    let (server, c) = start(&redis).await;
    let (t, other) = (random_trace(), random_trace());
    c.put(&t, "cas", b"v1".to_vec()).await.expect("put");
    c.put(&t, "doomed", b"x".to_vec()).await.expect("put");
    c.put(&other, "kept", b"y".to_vec()).await.expect("put");

    for fault in [Fault::Pause, Fault::Stop] {
        let before = (snapshot(&c, &t).await, snapshot(&c, &other).await);
        let cas_version = before.0.iter().find(|s| s.0 == "cas").expect("cas").1;
        match fault {
            Fault::Pause => {
                redis
                    .cli(&["CLIENT", "PAUSE", "2500", "ALL"])
                    .expect("pause");
            }
            Fault::Stop => redis.freeze(),
        }
        // Every kind of write, several at once, while Redis does not answer.
        let started = Instant::now();
        let cas = PutOptions {
            expected_version: Some(cas_version),
            ..Default::default()
        };
        let writes: Vec<Result<(), Error>> = futures::future::join_all((0..17).map(|i| {
            let (c, t, other, cas) = (&c, &t, &other, cas.clone());
            async move {
                match i % 5 {
                    0 => c.put_with(t, "cas", b"v2".to_vec(), cas).await.map(|_| ()),
                    1 => c
                        .put(t, &format!("new{i}"), b"n".to_vec())
                        .await
                        .map(|_| ()),
                    2 => c.delete(t, "doomed", None).await.map(|_| ()),
                    3 => c.clear(other).await.map(|_| ()),
                    _ => c.put(t, "cas", b"plain".to_vec()).await.map(|_| ()),
                }
            }
        }))
        .await;
        let waited = started.elapsed();
        for (i, w) in writes.iter().enumerate() {
            let err = w.as_ref().expect_err("Redis does not answer");
            assert_eq!(err.code(), Code::Unavailable, "{fault:?} write {i}: {err}");
        }
        assert!(
            waited < REDIS_TIMEOUT * 4,
            "{fault:?}: the writes failed after {waited:?}"
        );
        match fault {
            Fault::Pause => tokio::time::sleep(Duration::from_millis(2600)).await,
            Fault::Stop => {
                tokio::time::sleep(Duration::from_millis(300)).await;
                redis.thaw();
            }
        }
        // Whatever Redis had queued has run by now; none of it may act.
        wait_ready(&server.endpoint()).await;
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert_eq!(
            (snapshot(&c, &t).await, snapshot(&c, &other).await),
            before,
            "{fault:?}: nothing changed, then or later"
        );
        // So a client's retry of the compare-and-swap is not ABORTED, and a
        // plain retry bumps the version once.
        let w = c
            .put_with(&t, "cas", b"v2".to_vec(), cas)
            .await
            .expect("the CAS retry succeeds");
        assert!(w.version > cas_version);
    }
    server.shutdown().await.expect("shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_fails_fast_while_redis_hangs_and_the_first_after_a_restart_works() {
    let mut redis = RedisServer::start().expect("redis-server");
    let (server, c) = start(&redis).await;
    // The hub's pub/sub connection exists (one watch came and went).
    drop(c.watch(&random_trace(), "").await.expect("watch"));

    redis.freeze();
    // New watches do not queue behind each other: each fails within
    // redis.timeout of its own start.
    let results = futures::future::join_all((0..5).map(|_| {
        let c = &c;
        async move {
            let began = Instant::now();
            let r = c.watch(&random_trace(), "").await.map(|_| ());
            (r, began.elapsed())
        }
    }))
    .await;
    redis.thaw();
    for (r, took) in results {
        let err = r.expect_err("Redis hangs");
        assert_eq!(err.code(), Code::Unavailable, "{err}");
        assert!(
            took < REDIS_TIMEOUT + Duration::from_millis(400),
            "failed after {took:?}"
        );
    }

    // Restarted while nobody watches: the hub's connection is stale, and the
    // first watch after Redis answers again must work.
    redis.restart().expect("restart");
    let t = random_trace();
    let deadline = Instant::now() + Duration::from_secs(20);
    while c.put(&t, "up", b"1".to_vec()).await.is_err() {
        assert!(Instant::now() < deadline, "Redis never came back");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let mut w = c.watch(&t, "").await.expect("the first watch works");
    c.put(&t, "seen", b"2".to_vec()).await.expect("put");
    let change = tokio::time::timeout(Duration::from_secs(5), w.next())
        .await
        .expect("in time")
        .expect("open")
        .expect("change");
    assert_eq!(change.key, "seen");
    server.shutdown().await.expect("shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trace_at_its_key_quota_with_the_longest_keys_lists_page_by_page() {
    let redis = RedisServer::start().expect("redis-server");
    let (server, c) = start(&redis).await;
    let t = random_trace();
    // 4,096 slots (the default key quota) with 256-character keys (the
    // longest allowed): one List answer would be over 4 MiB.
    let key = |i: usize| format!("{i:05}/{}", "k".repeat(250));
    for chunk in (0..4096).collect::<Vec<_>>().chunks(256) {
        futures::future::try_join_all(chunk.iter().map(|&i| {
            let (c, t, k) = (&c, &t, key(i));
            async move { c.put(t, &k, b"v".to_vec()).await }
        }))
        .await
        .expect("puts within the quotas");
    }
    let mut want: Vec<String> = (0..4096).map(key).collect();
    want.sort();

    // The client follows the pages.
    let all = c.list(&t, "").await.expect("list at the quota");
    let got: Vec<String> = all.slots.iter().map(|s| s.key.clone()).collect();
    assert_eq!(got, want);
    assert_eq!((all.used_keys, all.next_page_token.as_str()), (4096, ""));

    // Pages by hand: the default (and largest) page is 1,000 slots.
    let first = c.list_page(&t, "", 0, "").await.expect("page");
    assert_eq!(first.slots.len(), 1000);
    assert!(!first.next_page_token.is_empty());
    let coerced = c.list_page(&t, "", 5000, "").await.expect("page");
    assert_eq!(
        coerced.slots.len(),
        1000,
        "over the maximum is lowered to it"
    );
    let (mut token, mut keys, mut pages) = (String::new(), Vec::new(), 0);
    loop {
        let page = c.list_page(&t, "", 999, &token).await.expect("page");
        pages += 1;
        keys.extend(page.slots.into_iter().map(|s| s.key));
        if page.next_page_token.is_empty() {
            break;
        }
        token = page.next_page_token;
    }
    assert_eq!((keys, pages), (want.clone(), 5));
    // A prefix pages too; a page of one.
    let one = c.list_page(&t, "0001", 1, "").await.expect("page");
    assert_eq!(one.slots.len(), 1);
    assert_eq!(one.slots[0].key, want[10]);
    let next = c
        .list_page(&t, "0001", 1, &one.next_page_token)
        .await
        .expect("page");
    assert_eq!(next.slots[0].key, want[11]);

    // Bad paging input is INVALID_ARGUMENT naming the field.
    let e = c.list_page(&t, "", -1, "").await.expect_err("negative");
    assert_eq!(
        (e.code(), e.field()),
        (Code::InvalidArgument, Some("page_size"))
    );
    let e = c
        .list_page(&t, "", 0, "garbage")
        .await
        .expect_err("bad token");
    assert_eq!(
        (e.code(), e.field()),
        (Code::InvalidArgument, Some("page_token"))
    );
    let e = c
        .list_page(&t, "0", 0, &first.next_page_token)
        .await
        .expect_err("a token of another listing");
    assert_eq!(
        (e.code(), e.field()),
        (Code::InvalidArgument, Some("page_token"))
    );
    let e = c
        .list_page(&random_trace(), "", 0, &first.next_page_token)
        .await
        .expect_err("a token of another trace");
    assert_eq!(
        (e.code(), e.field()),
        (Code::InvalidArgument, Some("page_token"))
    );
    server.shutdown().await.expect("shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_redis_is_resource_exhausted_and_deletes_still_work() {
    let redis =
        RedisServer::start_with(&["--maxmemory-policy", "noeviction"]).expect("redis-server");
    let (server, c) = start(&redis).await;
    let t = random_trace();
    c.put(&t, "small", b"x".to_vec()).await.expect("put");
    // Fill Redis to its limit: maxmemory just above what it uses now.
    let info = redis.cli(&["INFO", "memory"]).expect("info");
    let used: u64 = info
        .lines()
        .find_map(|l| l.strip_prefix("used_memory:"))
        .and_then(|v| v.trim().parse().ok())
        .expect("used_memory");
    redis
        .cli(&[
            "CONFIG",
            "SET",
            "maxmemory",
            &(used + 64 * 1024).to_string(),
        ])
        .expect("maxmemory");
    let before = snapshot(&c, &t).await;
    let mut refused = None;
    for i in 0..64 {
        match c.put(&t, &format!("big{i}"), vec![7; 256 * 1024]).await {
            Ok(_) => {}
            Err(e) => {
                refused = Some(e);
                break;
            }
        }
    }
    let e = refused.expect("a write is refused once Redis is full");
    assert_eq!(e.code(), Code::ResourceExhausted, "{e}");
    assert!(
        e.message().contains("out of memory") && e.message().contains("maxmemory"),
        "a clear message, not Redis's raw text: {e}"
    );
    assert!(!e.message().contains("OOM command"), "{e}");
    // Deletes and clears still run: they are how memory is freed.
    let after_fill = snapshot(&c, &t).await;
    assert!(after_fill.len() >= before.len());
    c.clear(&t).await.expect("clear works while Redis is full");
    redis
        .cli(&["CONFIG", "SET", "maxmemory", "0"])
        .expect("maxmemory off");
    c.put(&t, "again", b"y".to_vec())
        .await
        .expect("writes again");
    server.shutdown().await.expect("shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watches_are_bounded_per_trace_and_per_connection() {
    let redis = RedisServer::start().expect("redis-server");
    let mut config = StoreServer::config(Backend::Redis, Some(redis.url()));
    config.watches.per_trace = 3;
    config.watches.per_connection = 5;
    let server = StoreServer::start(config).await.expect("store");
    wait_ready(&server.endpoint()).await;
    let c = StoreClient::connect(server.endpoint())
        .await
        .expect("connect");
    let t = random_trace();
    // Per trace: 3 is the limit, the 4th is refused naming trace_id.
    let mut on_t = Vec::new();
    for _ in 0..3 {
        on_t.push(c.watch(&t, "").await.expect("at the limit"));
    }
    let e = refused(c.watch(&t, "").await);
    assert_eq!(
        (e.code(), e.field()),
        (Code::ResourceExhausted, Some("trace_id"))
    );
    assert!(e.message().contains("watches.per_trace"), "{e}");
    // Another connection is still bounded by the trace.
    let other = StoreClient::connect(server.endpoint())
        .await
        .expect("connect");
    assert_eq!(
        refused(other.watch(&t, "").await).code(),
        Code::ResourceExhausted
    );
    // Per connection: 3 + 2 more on other traces is 5, the 6th is refused.
    let mut more = Vec::new();
    for _ in 0..2 {
        more.push(c.watch(&random_trace(), "").await.expect("at the limit"));
    }
    let e = refused(c.watch(&random_trace(), "").await);
    assert_eq!(e.code(), Code::ResourceExhausted);
    assert!(e.message().contains("watches.per_connection"), "{e}");
    // A closed watch gives its place back (the server notices the cancel).
    drop(on_t.pop());
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match c.watch(&t, "").await {
            Ok(w) => {
                on_t.push(w);
                break;
            }
            Err(_) => {
                assert!(Instant::now() < deadline, "the place never came back");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
    server.shutdown().await.expect("shutdown");
}
