//! Per-tenant store quotas (`quotas.bytes`, `quotas.keys` across all of a
//! tenant's traces) through the context-store service, on the memory and
//! the Redis backend: at the limit a write succeeds, just over it the write
//! is `RESOURCE_EXHAUSTED` naming the quota and changes nothing; deletes,
//! clears and expiries give the quota back; another tenant's usage is its
//! own; the per-tenant metrics follow; batched writes and deletes count
//! the same way, a refused batch reserving nothing.

use std::{path::PathBuf, time::Duration};

use baton_client::{DeleteSelection, Error, PutEntry, PutOptions, StoreClient};
use baton_context_store::{auth::AuthMode, config::Backend, quota::StoreQuota};
use baton_e2e::{RedisServer, StoreServer, scrape};
use tonic::Code;

const ACME: &str = "acme-key-0123456789";
const GLOBEX: &str = "globex-key-9876543210";

fn trace(n: u8) -> String {
    format!("{:032x}", u128::from(n) + 0x1000)
}

fn keys_file(name: &str) -> PathBuf {
    let dir =
        std::env::temp_dir().join(format!("baton-store-quotas-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("mkdir");
    let path = dir.join("api-keys");
    std::fs::write(&path, format!("acme {ACME}\nglobex {GLOBEX}\n")).expect("keys");
    path
}

async fn client(endpoint: &str, key: &str) -> StoreClient {
    StoreClient::connect(endpoint.to_owned())
        .await
        .expect("connect")
        .with_api_key(key)
        .expect("ascii")
}

#[track_caller]
fn assert_quota<T: std::fmt::Debug>(r: Result<T, Error>, quota: &str, tenant: &str) {
    let e = r.expect_err("over the quota");
    assert_eq!(e.code(), Code::ResourceExhausted, "{e}");
    assert!(
        e.message().contains(&format!("quotas.{quota}")) && e.message().contains(tenant),
        "names the quota and the tenant: {e}"
    );
}

async fn scenario(backend: Backend, redis: Option<String>, name: &str) {
    let metrics = baton_e2e::free_addr().expect("port");
    let mut config = StoreServer::config(backend, redis);
    config.auth.mode = AuthMode::Keys;
    config.auth.api_keys_file = keys_file(name);
    config.telemetry.metrics_listen = metrics.to_string();
    config.quotas.default = StoreQuota {
        bytes: Some(100),
        keys: Some(3),
    };
    config.quotas.tenants.insert(
        "globex".into(),
        StoreQuota {
            bytes: None,
            keys: Some(5),
        },
    );
    let server = StoreServer::start(config).await.expect("store");
    let endpoint = server.endpoint();
    let acme = client(&endpoint, ACME).await;
    let globex = client(&endpoint, GLOBEX).await;

    // Three traces, 100 bytes and 3 keys: exactly acme's quotas.
    acme.put(&trace(1), "a", vec![b'a'; 40]).await.expect("a");
    acme.put(&trace(2), "b", vec![b'b'; 40]).await.expect("b");
    acme.put(&trace(3), "c", vec![b'c'; 20]).await.expect("c");
    // One byte more, in any trace: refused, nothing changed.
    assert_quota(
        acme.put(&trace(3), "c", vec![b'C'; 21]).await,
        "bytes",
        "tenant acme",
    );
    let c = acme.get(&trace(3), "c").await.expect("c is as it was");
    assert_eq!(c.value, vec![b'c'; 20]);
    // Smaller: fine (90 bytes). A fourth key: refused on keys.
    acme.put(&trace(3), "c", vec![b'c'; 10])
        .await
        .expect("shrinks");
    assert_quota(
        acme.put(&trace(4), "d", vec![b'd'; 1]).await,
        "keys",
        "tenant acme",
    );
    assert!(
        acme.get(&trace(4), "d").await.is_err(),
        "the refused slot does not exist"
    );
    let text = scrape(metrics).await;
    assert!(
        text.contains(r#"baton_store_tenant_keys{tenant="acme"} 3"#)
            && text.contains(r#"baton_store_tenant_bytes{tenant="acme"} 90"#),
        "{text}"
    );
    assert!(
        text.contains(r#"baton_store_tenant_quota_refusals_total{tenant="acme",quota="keys"} 1"#),
        "{text}"
    );

    // globex has its own usage and its own key quota (5).
    for n in 0..5 {
        globex
            .put(&trace(1), &format!("k{n}"), vec![b'g'; 10])
            .await
            .expect("globex under its quota");
    }
    assert_quota(
        globex.put(&trace(9), "k5", vec![b'g'; 1]).await,
        "keys",
        "tenant globex",
    );

    // A delete gives its key and bytes back.
    acme.delete(&trace(1), "a", None).await.expect("delete");
    acme.put(&trace(4), "d", vec![b'd'; 49])
        .await
        .expect("room again");
    // So does a clear of a trace (99 bytes, 3 keys before it).
    assert_quota(
        acme.put(&trace(5), "e", vec![b'e'; 1]).await,
        "keys",
        "tenant acme",
    );
    acme.clear(&trace(2)).await.expect("clear");
    // And an expiry: a short-lived slot fills the last key, then ends.
    let short = PutOptions {
        ttl: Some(Duration::from_millis(300)),
        ..PutOptions::default()
    };
    acme.put_with(&trace(5), "e", vec![b'e'; 1], short)
        .await
        .expect("e");
    assert_quota(
        acme.put(&trace(6), "f", vec![b'f'; 1]).await,
        "keys",
        "tenant acme",
    );
    tokio::time::sleep(Duration::from_millis(400)).await;
    acme.put(&trace(6), "f", vec![b'f'; 1])
        .await
        .expect("the expired slot no longer counts");

    // A write refused by the backend (a version mismatch) reserves
    // nothing: the quota still has room for exactly one more byte.
    let cas = PutOptions {
        expected_version: Some(999),
        ..PutOptions::default()
    };
    let e = acme
        .put_with(&trace(6), "f", vec![b'f'; 38], cas)
        .await
        .expect_err("version mismatch");
    assert_eq!(e.code(), Code::Aborted, "{e}");
    // Usage now: c 10 + d 49 + f 1 = 60 bytes.
    acme.put(&trace(6), "f", vec![b'f'; 41])
        .await
        .expect("at 100 bytes");
    assert_quota(
        acme.put(&trace(6), "f", vec![b'f'; 42]).await,
        "bytes",
        "tenant acme",
    );

    // Batches: a batched delete gives its slots back (59 bytes, 2 keys
    // left); a batch that would take a third and fourth key is refused
    // whole and reserves nothing; one exactly at the quotas is written.
    let gone = acme
        .delete_many(&trace(6), DeleteSelection::Keys(vec!["f".into()]))
        .await
        .expect("delete_many");
    assert_eq!(gone.deleted, 1);
    assert_quota(
        acme.put_many(
            &trace(7),
            vec![
                PutEntry::new("g", vec![b'g'; 20]),
                PutEntry::new("h", vec![b'h'; 21]),
            ],
        )
        .await,
        "keys",
        "tenant acme",
    );
    assert!(
        acme.get(&trace(7), "g").await.is_err(),
        "nothing of it written"
    );
    acme.put_many(&trace(7), vec![PutEntry::new("g", vec![b'g'; 41])])
        .await
        .expect("at 100 bytes and 3 keys");
    assert_quota(
        acme.put_many(&trace(7), vec![PutEntry::new("g", vec![b'g'; 42])])
            .await,
        "bytes",
        "tenant acme",
    );
    server.shutdown().await.expect("shutdown");
}

#[tokio::test]
async fn tenant_quotas_on_the_memory_backend() {
    scenario(Backend::Memory, None, "memory").await;
}

#[tokio::test]
async fn tenant_quotas_on_the_redis_backend() {
    let redis = RedisServer::start().expect("redis-server");
    scenario(Backend::Redis, Some(redis.url()), "redis").await;
}
