//! The context-store conformance suite against every backend: in memory, a
//! real redis-server, and a real three-node Redis Cluster.

use std::sync::Arc;

use baton_e2e::{RedisCluster, RedisServer};
use baton_store::{
    ContextStore,
    conformance::{self, CASES},
    memory::MemoryStore,
    redis::{RedisConfig, RedisStore},
};

fn redis_store(config: RedisConfig) -> Arc<dyn ContextStore> {
    Arc::new(RedisStore::new(&config, conformance::limits()).expect("redis store"))
}

macro_rules! per_case {
    ($($case:ident),* $(,)?) => {
        mod memory {
            use super::*;
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $case() {
                    conformance::$case(Arc::new(MemoryStore::new(conformance::limits()))).await;
                }
            )*
        }
        mod redis_single {
            use super::*;
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $case() {
                    let redis = RedisServer::start().expect("redis-server");
                    let store = redis_store(RedisConfig { url: redis.url(), ..RedisConfig::default() });
                    conformance::$case(store).await;
                }
            )*
        }
    };
}

baton_store::conformance_cases!(per_case);

/// One cluster for the whole suite (each case uses its own random traces, so
/// they cannot see each other); cases run one after another.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_cluster_passes_every_case() {
    let cluster = RedisCluster::start().expect("redis cluster");
    let store = redis_store(RedisConfig {
        cluster_urls: cluster.urls(),
        ..RedisConfig::default()
    });
    for (name, case) in CASES {
        eprintln!("cluster: {name}");
        case(store.clone()).await;
    }
}

/// Traces land on different cluster nodes (hash tags spread them), and each
/// tenant's trace's keys stay on one node (half the traces here are of the
/// tenant `""`, half of `acme`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_spreads_traces_and_keeps_each_trace_on_one_slot() {
    use baton_common::{auth::Tenant, ids::TraceId};
    use baton_store::{Key, Put, Scope};
    let cluster = RedisCluster::start().expect("redis cluster");
    let store = redis_store(RedisConfig {
        cluster_urls: cluster.urls(),
        ..RedisConfig::default()
    });
    let mut nodes_used = std::collections::BTreeSet::new();
    for i in 0..12 {
        let t = TraceId::random();
        let (scope, tag) = if i % 2 == 0 {
            (Scope::of_trace(t.clone()), t.to_string())
        } else {
            (
                Scope::new(Tenant("acme".into()), t.clone()),
                format!("acme/{t}"),
            )
        };
        for k in ["a", "b/c"] {
            store
                .put(Put::new(
                    scope.clone(),
                    Key::parse("key", k, 256).expect("key"),
                    b"v".to_vec(),
                ))
                .await
                .expect("put");
        }
        // Find which node holds the trace's keys: exactly one has them all.
        let mut holders = Vec::new();
        for url in cluster.urls() {
            let mut conn = redis::Client::open(url.as_str())
                .expect("client")
                .get_connection()
                .expect("conn");
            let keys: Vec<String> = redis::cmd("KEYS")
                .arg(format!("baton:{{{tag}}}:*"))
                .query(&mut conn)
                .expect("keys");
            if !keys.is_empty() {
                holders.push((url.clone(), keys.len()));
            }
        }
        assert_eq!(holders.len(), 1, "trace {t} keys on one node: {holders:?}");
        assert_eq!(holders[0].1, 5, "meta, exp, info and two slots");
        nodes_used.insert(holders[0].0.clone());
    }
    assert!(
        nodes_used.len() >= 2,
        "12 random traces spread over nodes: {nodes_used:?}"
    );
}

/// Every key the Redis backend creates has a TTL, whatever the sequence of
/// calls: nothing can leak for ever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_never_leaves_a_key_without_ttl() {
    use std::time::Duration;

    use baton_common::{auth::Tenant, ids::TraceId};
    use baton_store::{Key, Put, Scope};
    use futures::StreamExt;
    let redis = RedisServer::start().expect("redis-server");
    let store = redis_store(RedisConfig {
        url: redis.url(),
        ..RedisConfig::default()
    });
    let key = |k: &str| Key::parse("key", k, 256).expect("key");
    let t = Scope::new(Tenant("acme".into()), TraceId::random());
    let mut w = store.watch(&t, "").await.expect("watch");
    store
        .put(Put::new(t.clone(), key("a"), b"1".to_vec()))
        .await
        .expect("put");
    let mut short = Put::new(t.clone(), key("b"), b"2".to_vec());
    short.ttl = Some(Duration::from_millis(100));
    store.put(short).await.expect("put");
    store.delete(&t, &key("a"), None).await.expect("delete");
    tokio::time::sleep(Duration::from_millis(200)).await;
    store
        .put(Put::new(t.clone(), key("c"), b"3".to_vec()))
        .await
        .expect("put purges b");
    store.clear(&t).await.expect("clear");
    store.list(&t, "").await.expect("list");
    // Calls on traces that never had a slot must not create anything.
    let unknown = Scope::of_trace(TraceId::random());
    assert_eq!(store.clear(&unknown).await.expect("clear unknown"), 0);
    assert!(store.delete(&unknown, &key("x"), None).await.is_err());
    assert!(store.get(&unknown, &key("x")).await.is_err());
    store.list(&unknown, "").await.expect("list unknown");
    drop(store.watch(&unknown, "").await.expect("watch unknown"));
    assert!(w.next().await.is_some());

    let mut conn = redis::Client::open(redis.url())
        .expect("client")
        .get_connection()
        .expect("conn");
    let keys: Vec<String> = redis::cmd("KEYS").arg("*").query(&mut conn).expect("keys");
    assert!(
        !keys.is_empty(),
        "the trace's bookkeeping is kept for its retention"
    );
    for k in keys {
        let pttl: i64 = redis::cmd("PTTL").arg(&k).query(&mut conn).expect("pttl");
        assert!(pttl > 0, "{k} has no TTL ({pttl})");
        assert!(
            !k.contains(unknown.trace_id.as_str()),
            "{k} was created for a trace that never had a slot"
        );
    }
}
