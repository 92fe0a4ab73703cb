//! The conformance suite every [`ContextStore`] backend must pass.
//!
//! Each case is a public async function that takes a store built with
//! [`limits()`] and panics on a violation; the end-to-end crate runs every
//! case against the in-memory store, a real `redis-server` and a real Redis
//! Cluster (`tests/tests/conformance.rs`). [`conformance_cases!`] is the one
//! list of them.

use std::{collections::BTreeSet, future::Future, pin::Pin, sync::Arc, time::Duration};

use baton_common::{auth::Tenant, ids::TraceId};
use futures::StreamExt;

use crate::{
    error::Error,
    store::{
        ChangeKind, ChangeStream, ContextStore, Key, Limits, Page, Put, Scope, Selection, now_ms,
    },
};

/// The limits the suite's stores are built with: small, so every limit can be
/// tested at and just over its value quickly.
pub fn limits() -> Limits {
    Limits {
        max_value_bytes: 1024,
        max_trace_bytes: 4096,
        max_trace_keys: 8,
        max_key_len: 256,
        default_ttl: Duration::from_secs(3600),
        max_ttl: Duration::from_secs(7 * 24 * 3600),
    }
}

/// A boxed conformance case.
pub type Case = fn(Arc<dyn ContextStore>) -> Pin<Box<dyn Future<Output = ()> + Send>>;

/// Expands `$m!(case, case, …)` with the name of every case: the one list of
/// cases. [`CASES`] is built from it, and test crates use it to generate one
/// test per case per backend, so no backend can skip a case.
#[macro_export]
macro_rules! conformance_cases {
    ($m:ident) => {
        $m!(
            put_get_roundtrip,
            versions_are_trace_revisions,
            overwrite_keeps_quota_exact,
            compare_and_swap,
            concurrent_cas_writers_one_wins_per_version,
            missing_slots_are_not_found,
            list_by_prefix_sorted_with_usage,
            list_pages_in_byte_order,
            value_limit_at_and_over,
            byte_quota_at_and_over,
            key_quota_at_and_over,
            ttl_bounds,
            ttl_expiry_releases_quota,
            clear_removes_everything,
            watch_delivers_changes_in_order,
            watch_filters_by_prefix,
            watch_reports_expiry,
            traces_are_isolated,
            tenants_are_isolated,
            put_many_writes_each_entry_as_one_change,
            put_many_is_all_or_nothing,
            delete_many_by_keys_and_by_prefix,
        );
    };
}

macro_rules! cases_table {
    ($($name:ident),* $(,)?) => {
        /// Every case, by name.
        pub const CASES: &[(&str, Case)] = &[
            $((stringify!($name), |s| Box::pin($name(s)))),*
        ];
    };
}

conformance_cases!(cases_table);

fn key(s: &str) -> Key {
    Key::parse("key", s, 256).expect("test keys are valid")
}

/// A fresh trace of the tenant `""`.
fn scope() -> Scope {
    Scope::of_trace(TraceId::random())
}

fn put(trace: &Scope, k: &str, value: &[u8]) -> Put {
    Put::new(trace.clone(), key(k), value.to_vec())
}

async fn next_change(stream: &mut ChangeStream) -> crate::store::Change {
    tokio::time::timeout(Duration::from_secs(5), stream.next())
        .await
        .expect("a change within 5s")
        .expect("the stream is open")
        .expect("a change, not an error")
}

/// A put is read back with its value, content type, version and expiry.
pub async fn put_get_roundtrip(store: Arc<dyn ContextStore>) {
    let t = scope();
    let before = now_ms();
    let w = store.put(put(&t, "notes/a", b"hello")).await.expect("put");
    assert_eq!(w.version, 1, "a fresh trace's first write is revision 1");
    let hour = 3_600_000;
    assert!(
        w.expires_at_ms >= before + hour && w.expires_at_ms <= now_ms() + hour,
        "default TTL is 1h"
    );
    let slot = store.get(&t, &key("notes/a")).await.expect("get");
    assert_eq!(slot.value.as_ref(), b"hello");
    assert_eq!(slot.meta.content_type, "application/octet-stream");
    assert_eq!(slot.meta.version, 1);
    assert_eq!(slot.meta.size_bytes, 5);
    assert_eq!(slot.meta.expires_at_ms, w.expires_at_ms);

    let mut p = put(&t, "doc.json", br#"{"x":1}"#);
    p.content_type = "application/json".into();
    p.ttl = Some(Duration::from_secs(60));
    let w = store.put(p).await.expect("put json");
    let slot = store.get(&t, &key("doc.json")).await.expect("get json");
    assert_eq!(slot.meta.content_type, "application/json");
    assert_eq!(slot.meta.expires_at_ms, w.expires_at_ms);
    assert!(w.expires_at_ms <= now_ms() + 60_000);

    // Values are bytes, not text.
    let binary: Vec<u8> = (0..=255).collect();
    store
        .put(put(&t, "bin", &binary))
        .await
        .expect("put binary");
    assert_eq!(
        store
            .get(&t, &key("bin"))
            .await
            .expect("get")
            .value
            .as_ref(),
        &binary[..]
    );
}

/// Every mutation takes the trace's next revision.
pub async fn versions_are_trace_revisions(store: Arc<dyn ContextStore>) {
    let t = scope();
    assert_eq!(store.put(put(&t, "a", b"1")).await.expect("put").version, 1);
    assert_eq!(store.put(put(&t, "b", b"2")).await.expect("put").version, 2);
    assert_eq!(store.put(put(&t, "a", b"3")).await.expect("put").version, 3);
    assert_eq!(store.delete(&t, &key("b"), None).await.expect("delete"), 4);
    assert_eq!(
        store.put(put(&t, "b", b"5")).await.expect("put").version,
        5,
        "not reused after delete"
    );
    assert_eq!(store.get(&t, &key("a")).await.expect("get").meta.version, 3);
}

/// Overwrites replace the old size in the byte quota; the key count stays.
pub async fn overwrite_keeps_quota_exact(store: Arc<dyn ContextStore>) {
    let t = scope();
    store.put(put(&t, "a", &[1; 100])).await.expect("put");
    store.put(put(&t, "a", &[2; 50])).await.expect("overwrite");
    store.put(put(&t, "b", &[3; 10])).await.expect("put");
    let l = store.list(&t, "").await.expect("list");
    assert_eq!((l.used_bytes, l.used_keys), (60, 2));
    store.delete(&t, &key("a"), None).await.expect("delete");
    let l = store.list(&t, "").await.expect("list");
    assert_eq!((l.used_bytes, l.used_keys), (10, 1));
}

/// `expected_version` makes a put or delete conditional, and a mismatch
/// reports the current version and changes nothing.
pub async fn compare_and_swap(store: Arc<dyn ContextStore>) {
    let t = scope();
    let mut p = put(&t, "k", b"v1");
    p.expected_version = Some(0);
    let v1 = store
        .put(p.clone())
        .await
        .expect("create-if-absent")
        .version;

    let err = store.put(p).await.expect_err("slot exists now");
    assert_eq!(
        err,
        Error::VersionMismatch {
            key: "k".into(),
            expected: 0,
            current: Some(v1)
        }
    );

    let mut p = put(&t, "k", b"v2");
    p.expected_version = Some(v1 + 100);
    let err = store.put(p.clone()).await.expect_err("wrong version");
    assert_eq!(
        err,
        Error::VersionMismatch {
            key: "k".into(),
            expected: v1 + 100,
            current: Some(v1)
        }
    );
    assert_eq!(
        store.get(&t, &key("k")).await.expect("get").value.as_ref(),
        b"v1",
        "unchanged"
    );

    p.expected_version = Some(v1);
    let v2 = store.put(p).await.expect("right version").version;
    assert!(v2 > v1);

    let mut p = put(&t, "absent", b"x");
    p.expected_version = Some(7);
    let err = store
        .put(p)
        .await
        .expect_err("absent slot has no version 7");
    assert_eq!(
        err,
        Error::VersionMismatch {
            key: "absent".into(),
            expected: 7,
            current: None
        }
    );
    assert!(matches!(
        store.get(&t, &key("absent")).await,
        Err(Error::NotFound { .. })
    ));

    let err = store
        .delete(&t, &key("k"), Some(v1))
        .await
        .expect_err("stale delete");
    assert_eq!(
        err,
        Error::VersionMismatch {
            key: "k".into(),
            expected: v1,
            current: Some(v2)
        }
    );
    assert_eq!(
        store
            .get(&t, &key("k"))
            .await
            .expect("still there")
            .meta
            .version,
        v2
    );
    store
        .delete(&t, &key("k"), Some(v2))
        .await
        .expect("delete at version");
}

/// Many writers racing on the same version: exactly one wins each round.
pub async fn concurrent_cas_writers_one_wins_per_version(store: Arc<dyn ContextStore>) {
    let t = scope();
    let mut version = store
        .put(put(&t, "counter", b"0"))
        .await
        .expect("seed")
        .version;
    for round in 1..=10u32 {
        let mut handles = Vec::new();
        for writer in 0..16u32 {
            let store = store.clone();
            let t = t.clone();
            handles.push(tokio::spawn(async move {
                let mut p = put(&t, "counter", format!("{round}:{writer}").as_bytes());
                p.expected_version = Some(version);
                store.put(p).await
            }));
        }
        let mut winners = Vec::new();
        for h in handles {
            match h.await.expect("writer task") {
                Ok(w) => winners.push(w.version),
                Err(Error::VersionMismatch {
                    current: Some(_), ..
                }) => {}
                Err(e) => panic!("unexpected error from a CAS writer: {e}"),
            }
        }
        assert_eq!(
            winners.len(),
            1,
            "round {round}: exactly one writer wins, got {winners:?}"
        );
        let slot = store.get(&t, &key("counter")).await.expect("get");
        assert_eq!(slot.meta.version, winners[0]);
        assert!(String::from_utf8_lossy(&slot.value).starts_with(&format!("{round}:")));
        version = winners[0];
    }
}

/// Reads and deletes of missing slots are `NotFound`.
pub async fn missing_slots_are_not_found(store: Arc<dyn ContextStore>) {
    let t = scope();
    assert!(matches!(
        store.get(&t, &key("nope")).await,
        Err(Error::NotFound { .. })
    ));
    assert!(matches!(
        store.delete(&t, &key("nope"), None).await,
        Err(Error::NotFound { .. })
    ));
    store.put(put(&t, "gone", b"x")).await.expect("put");
    store.delete(&t, &key("gone"), None).await.expect("delete");
    assert!(matches!(
        store.get(&t, &key("gone")).await,
        Err(Error::NotFound { .. })
    ));
    assert!(matches!(
        store.delete(&t, &key("gone"), None).await,
        Err(Error::NotFound { .. })
    ));
    assert_eq!(store.list(&t, "").await.expect("list").used_keys, 0);
}

/// Pages follow each other in byte order of the keys (upper case before
/// lower, `.`/`/` before digits), without gaps or repeats, under a prefix
/// too; a full last page says no more follows.
pub async fn list_pages_in_byte_order(store: Arc<dyn ContextStore>) {
    let t = scope();
    let keys = ["b", "B", "a.z", "a/z", "a0", "A", "ab", "a"];
    for k in keys {
        store.put(put(&t, k, b"v")).await.expect("put");
    }
    let mut want: Vec<&str> = keys.to_vec();
    want.sort();
    assert_eq!(want, ["A", "B", "a", "a.z", "a/z", "a0", "ab", "b"]);
    for size in [1, 3, 8, 100] {
        let mut page = Page { after: None, size };
        let mut got = Vec::new();
        loop {
            let l = store.list_page(&t, "", &page).await.expect("page");
            assert!(l.slots.len() <= size);
            assert_eq!(l.used_keys, 8);
            got.extend(l.slots.iter().map(|s| s.key.clone()));
            match l.next_after {
                Some(after) => {
                    assert_eq!(
                        Some(&after),
                        got.last(),
                        "the token continues after the page"
                    );
                    page.after = Some(after);
                }
                None => break,
            }
        }
        assert_eq!(got, want, "page size {size}");
    }
    let l = store
        .list_page(
            &t,
            "a",
            &Page {
                after: Some("a.z".into()),
                size: 2,
            },
        )
        .await
        .expect("page");
    let got: Vec<&str> = l.slots.iter().map(|s| s.key.as_str()).collect();
    assert_eq!(got, ["a/z", "a0"]);
    assert_eq!(l.next_after.as_deref(), Some("a0"));
}

/// List filters by prefix, sorts by key, and reports the whole trace's usage.
pub async fn list_by_prefix_sorted_with_usage(store: Arc<dyn ContextStore>) {
    let t = scope();
    for k in ["steps/b", "steps/a", "other", "steps/c/x"] {
        store.put(put(&t, k, k.as_bytes())).await.expect("put");
    }
    let l = store.list(&t, "steps/").await.expect("list");
    let keys: Vec<&str> = l.slots.iter().map(|s| s.key.as_str()).collect();
    assert_eq!(keys, ["steps/a", "steps/b", "steps/c/x"]);
    assert_eq!(l.used_keys, 4);
    assert_eq!(l.used_bytes, (7 + 7 + 5 + 9) as u64);
    assert_eq!(l.slots[2].size_bytes, 9);
    assert!(
        l.slots
            .iter()
            .all(|s| s.version > 0 && s.expires_at_ms > now_ms())
    );
    assert_eq!(store.list(&t, "").await.expect("list").slots.len(), 4);
    assert!(store.list(&t, "zzz").await.expect("list").slots.is_empty());
    assert_eq!(
        store
            .list(&scope(), "")
            .await
            .expect("empty trace")
            .used_keys,
        0
    );
}

/// A value at the limit is stored; one byte more is refused and stores
/// nothing.
pub async fn value_limit_at_and_over(store: Arc<dyn ContextStore>) {
    let t = scope();
    let limit = store.limits().max_value_bytes as usize;
    store
        .put(put(&t, "at", &vec![7; limit]))
        .await
        .expect("at the limit");
    let err = store
        .put(put(&t, "over", &vec![7; limit + 1]))
        .await
        .expect_err("over the limit");
    assert_eq!(
        err,
        Error::ValueTooLarge {
            size: limit as u64 + 1,
            limit: limit as u64
        }
    );
    assert!(matches!(
        store.get(&t, &key("over")).await,
        Err(Error::NotFound { .. })
    ));
    let err = store
        .put(put(&t, "at", &vec![8; limit + 1]))
        .await
        .expect_err("overwrite over the limit");
    assert!(matches!(err, Error::ValueTooLarge { .. }));
    assert_eq!(
        store.get(&t, &key("at")).await.expect("get").value[0],
        7,
        "unchanged"
    );
    let l = store.list(&t, "").await.expect("list");
    assert_eq!((l.used_bytes, l.used_keys), (limit as u64, 1));
}

/// A trace can hold exactly its byte quota; one byte more is refused.
pub async fn byte_quota_at_and_over(store: Arc<dyn ContextStore>) {
    let t = scope();
    let limits = store.limits().clone();
    let value = limits.max_value_bytes as usize;
    let full = (limits.max_trace_bytes as usize) / value;
    for i in 0..full {
        store
            .put(put(&t, &format!("k{i}"), &vec![1; value]))
            .await
            .expect("within quota");
    }
    assert_eq!(
        store.list(&t, "").await.expect("list").used_bytes,
        limits.max_trace_bytes
    );
    let err = store
        .put(put(&t, "one-more", b"x"))
        .await
        .expect_err("over quota");
    assert!(
        matches!(err, Error::TraceBytesQuota { would_be, limit, size: 1, .. }
            if would_be == limits.max_trace_bytes + 1 && limit == limits.max_trace_bytes),
        "{err:?}"
    );
    assert!(matches!(
        store.get(&t, &key("one-more")).await,
        Err(Error::NotFound { .. })
    ));
    let l = store.list(&t, "").await.expect("list");
    assert_eq!(
        (l.used_bytes, l.used_keys),
        (limits.max_trace_bytes, full as u64),
        "nothing changed"
    );
    // Shrinking one slot makes room for exactly that much.
    store
        .put(put(&t, "k0", &vec![1; value - 10]))
        .await
        .expect("shrink");
    store
        .put(put(&t, "ten", &[2; 10]))
        .await
        .expect("exactly the freed room");
    assert!(matches!(
        store.put(put(&t, "eleven", b"x")).await,
        Err(Error::TraceBytesQuota { .. })
    ));
    // Growing an existing slot by one byte past the quota fails too.
    let err = store
        .put(put(&t, "k0", &vec![1; value - 9]))
        .await
        .expect_err("growth over quota");
    assert!(
        matches!(err, Error::TraceBytesQuota { size, .. } if size == value as u64 - 9),
        "{err:?}"
    );
    assert_eq!(
        store
            .get(&t, &key("k0"))
            .await
            .expect("get")
            .meta
            .size_bytes,
        value as u64 - 10
    );
}

/// A trace can hold exactly its key quota; one more key is refused, but
/// overwriting an existing key is fine.
pub async fn key_quota_at_and_over(store: Arc<dyn ContextStore>) {
    let t = scope();
    let max = store.limits().max_trace_keys;
    for i in 0..max {
        store
            .put(put(&t, &format!("k{i}"), b"v"))
            .await
            .expect("within key quota");
    }
    let err = store
        .put(put(&t, "extra", b"v"))
        .await
        .expect_err("over key quota");
    assert_eq!(
        err,
        Error::TraceKeysQuota {
            trace_id: t.to_string(),
            used: max,
            limit: max
        }
    );
    assert!(matches!(
        store.get(&t, &key("extra")).await,
        Err(Error::NotFound { .. })
    ));
    store
        .put(put(&t, "k0", b"overwrite"))
        .await
        .expect("overwrite at full key quota");
    store.delete(&t, &key("k1"), None).await.expect("delete");
    store
        .put(put(&t, "extra", b"v"))
        .await
        .expect("room after a delete");
    assert_eq!(store.list(&t, "").await.expect("list").used_keys, max);
}

/// TTLs must be positive and at most the maximum.
pub async fn ttl_bounds(store: Arc<dyn ContextStore>) {
    let t = scope();
    let max = store.limits().max_ttl;
    let mut p = put(&t, "k", b"v");
    p.ttl = Some(Duration::ZERO);
    assert!(matches!(
        store.put(p.clone()).await,
        Err(Error::InvalidArgument { field: "ttl", .. })
    ));
    p.ttl = Some(max + Duration::from_millis(1));
    assert!(matches!(
        store.put(p.clone()).await,
        Err(Error::InvalidArgument { field: "ttl", .. })
    ));
    assert!(
        matches!(store.get(&t, &key("k")).await, Err(Error::NotFound { .. })),
        "nothing written"
    );
    p.ttl = Some(max);
    let w = store.put(p).await.expect("at the maximum");
    assert!(w.expires_at_ms >= now_ms() + max.as_millis() as u64 - 5_000);
}

/// Expired slots vanish from reads at once, and their quota comes back.
pub async fn ttl_expiry_releases_quota(store: Arc<dyn ContextStore>) {
    let t = scope();
    let limits = store.limits().clone();
    let value = limits.max_value_bytes as usize;
    let full = (limits.max_trace_bytes as usize) / value;
    for i in 0..full {
        let mut p = put(&t, &format!("short{i}"), &vec![1; value]);
        p.ttl = Some(Duration::from_millis(300));
        store.put(p).await.expect("short-lived put");
    }
    assert!(
        store.put(put(&t, "blocked", b"x")).await.is_err(),
        "quota full"
    );
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert!(matches!(
        store.get(&t, &key("short0")).await,
        Err(Error::NotFound { .. })
    ));
    let l = store.list(&t, "").await.expect("list");
    assert_eq!(
        (l.used_bytes, l.used_keys, l.slots.len()),
        (0, 0, 0),
        "expired slots use nothing"
    );
    for i in 0..full {
        store
            .put(put(&t, &format!("long{i}"), &vec![2; value]))
            .await
            .expect("quota released");
    }
    let l = store.list(&t, "").await.expect("list");
    assert_eq!(
        (l.used_bytes, l.used_keys),
        (limits.max_trace_bytes, full as u64)
    );
    assert!(
        store.put(put(&t, "blocked", b"x")).await.is_err(),
        "and it is exact again"
    );
}

/// Clear removes every slot, resets usage, and versions keep increasing.
pub async fn clear_removes_everything(store: Arc<dyn ContextStore>) {
    let t = scope();
    for k in ["a", "b", "c"] {
        store.put(put(&t, k, b"xyz")).await.expect("put");
    }
    assert_eq!(store.clear(&t).await.expect("clear"), 3);
    let l = store.list(&t, "").await.expect("list");
    assert_eq!((l.used_bytes, l.used_keys, l.slots.len()), (0, 0, 0));
    assert!(matches!(
        store.get(&t, &key("a")).await,
        Err(Error::NotFound { .. })
    ));
    assert_eq!(
        store
            .put(put(&t, "a", b"again"))
            .await
            .expect("put")
            .version,
        5
    );
    assert_eq!(store.clear(&scope()).await.expect("clear empty"), 0);
}

/// Watch delivers puts, deletes and clears in the order they happened.
pub async fn watch_delivers_changes_in_order(store: Arc<dyn ContextStore>) {
    let t = scope();
    let mut w = store.watch(&t, "").await.expect("watch");
    let mut p = put(&t, "a", b"12345");
    p.content_type = "text/plain".into();
    let wa = store.put(p).await.expect("put a");
    store.put(put(&t, "b", b"1")).await.expect("put b");
    store.delete(&t, &key("a"), None).await.expect("delete a");
    store.clear(&t).await.expect("clear");

    let c = next_change(&mut w).await;
    assert_eq!(
        (c.kind, c.key.as_str(), c.version, c.size_bytes),
        (ChangeKind::Put, "a", 1, 5)
    );
    assert_eq!(
        (c.content_type.as_str(), c.expires_at_ms),
        ("text/plain", wa.expires_at_ms)
    );
    let c = next_change(&mut w).await;
    assert_eq!(
        (c.kind, c.key.as_str(), c.version),
        (ChangeKind::Put, "b", 2)
    );
    let c = next_change(&mut w).await;
    assert_eq!(
        (c.kind, c.key.as_str(), c.version),
        (ChangeKind::Deleted, "a", 3)
    );
    let c = next_change(&mut w).await;
    assert_eq!(
        (c.kind, c.key.as_str(), c.version),
        (ChangeKind::Cleared, "", 4)
    );

    // Many changes from concurrent writers arrive in version order.
    let mut handles = Vec::new();
    for i in 0..50 {
        let store = store.clone();
        let t = t.clone();
        handles.push(tokio::spawn(async move {
            store.put(put(&t, &format!("k{}", i % 5), b"v")).await
        }));
    }
    for h in handles {
        h.await.expect("task").expect("put");
    }
    let mut versions = Vec::new();
    for _ in 0..50 {
        versions.push(next_change(&mut w).await.version);
    }
    let sorted: Vec<u64> = versions
        .iter()
        .copied()
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    assert_eq!(
        versions, sorted,
        "changes arrive in version order without duplicates"
    );
    assert_eq!(versions, (5..55).collect::<Vec<u64>>());
}

/// A prefix watch sees only its keys (and clears); other traces never leak in.
pub async fn watch_filters_by_prefix(store: Arc<dyn ContextStore>) {
    let t = scope();
    let other = scope();
    let mut w = store.watch(&t, "steps/").await.expect("watch");
    let mut w2 = store
        .watch(&t, "")
        .await
        .expect("second watcher of the same trace");
    store
        .put(put(&other, "steps/x", b"other trace"))
        .await
        .expect("put");
    store.put(put(&t, "notes", b"n")).await.expect("put");
    store.put(put(&t, "steps/one", b"1")).await.expect("put");
    store.clear(&t).await.expect("clear");
    let c = next_change(&mut w).await;
    assert_eq!((c.kind, c.key.as_str()), (ChangeKind::Put, "steps/one"));
    assert_eq!(next_change(&mut w).await.kind, ChangeKind::Cleared);
    assert_eq!(next_change(&mut w2).await.key, "notes");
    assert_eq!(next_change(&mut w2).await.key, "steps/one");
    drop(w2);
    // The remaining watcher keeps working after the other one left.
    store.put(put(&t, "steps/two", b"2")).await.expect("put");
    assert_eq!(next_change(&mut w).await.key, "steps/two");
}

/// Expiries are reported to watchers (at the latest at the next mutation).
pub async fn watch_reports_expiry(store: Arc<dyn ContextStore>) {
    let t = scope();
    let mut w = store.watch(&t, "").await.expect("watch");
    let mut p = put(&t, "brief", b"x");
    p.ttl = Some(Duration::from_millis(200));
    let v = store.put(p).await.expect("put").version;
    assert_eq!(next_change(&mut w).await.kind, ChangeKind::Put);
    tokio::time::sleep(Duration::from_millis(400)).await;
    store.put(put(&t, "trigger", b"y")).await.expect("put");
    let c = next_change(&mut w).await;
    assert_eq!(
        (c.kind, c.key.as_str(), c.version),
        (ChangeKind::Expired, "brief", v)
    );
    assert_eq!(next_change(&mut w).await.key, "trigger");
}

/// Slots, versions and quotas of one trace are invisible to another.
pub async fn traces_are_isolated(store: Arc<dyn ContextStore>) {
    let a = scope();
    let b = scope();
    store.put(put(&a, "k", b"from a")).await.expect("put a");
    assert!(matches!(
        store.get(&b, &key("k")).await,
        Err(Error::NotFound { .. })
    ));
    assert_eq!(
        store
            .put(put(&b, "k", b"from b"))
            .await
            .expect("put b")
            .version,
        1
    );
    assert_eq!(
        store
            .get(&a, &key("k"))
            .await
            .expect("get a")
            .value
            .as_ref(),
        b"from a"
    );
    let max = store.limits().max_trace_keys;
    for i in 0..max - 1 {
        store
            .put(put(&a, &format!("fill{i}"), b"v"))
            .await
            .expect("fill a");
    }
    assert!(store.put(put(&a, "more", b"v")).await.is_err(), "a is full");
    store
        .put(put(&b, "more", b"v"))
        .await
        .expect("b has its own quota");
    store.clear(&a).await.expect("clear a");
    assert_eq!(store.list(&b, "").await.expect("list b").used_keys, 2);
}

/// The same trace id in two tenants (and in the tenant `""`) names three
/// disjoint sets of slots: reads, lists, versions, quotas, deletes, clears
/// and watches of one never reach another.
pub async fn tenants_are_isolated(store: Arc<dyn ContextStore>) {
    let trace = TraceId::random();
    let tenant = |name: &str| Scope::new(Tenant(name.into()), trace.clone());
    let (acme, globex, none) = (
        tenant("acme"),
        tenant("globex"),
        Scope::of_trace(trace.clone()),
    );
    let mut globex_watch = store.watch(&globex, "").await.expect("watch globex");
    store
        .put(put(&acme, "k", b"acme's"))
        .await
        .expect("put acme");
    for other in [&globex, &none] {
        assert!(
            matches!(
                store.get(other, &key("k")).await,
                Err(Error::NotFound { .. })
            ),
            "{other}: another tenant's slot is not found"
        );
        let listing = store.list(other, "").await.expect("list");
        assert!(
            listing.slots.is_empty() && listing.used_keys == 0,
            "{other}: {listing:?}"
        );
        assert!(
            matches!(
                store.delete(other, &key("k"), None).await,
                Err(Error::NotFound { .. })
            ),
            "{other}: delete finds nothing"
        );
        assert_eq!(store.clear(other).await.expect("clear"), 0, "{other}");
    }
    // Versions are each tenant's own: acme's writes do not advance globex's
    // counter (globex's clear above took a revision of its own).
    let w = store
        .put(put(&globex, "k", b"globex's"))
        .await
        .expect("put globex");
    assert!(
        w.version <= 2,
        "globex's revision {} counts only globex's calls",
        w.version
    );
    // globex's watch saw its own clear (on some backends) and then its own
    // put, never acme's put, which came first.
    let mut change = next_change(&mut globex_watch).await;
    while change.kind == ChangeKind::Cleared {
        change = next_change(&mut globex_watch).await;
    }
    assert_eq!(
        (change.kind, change.key.as_str(), change.version),
        (ChangeKind::Put, "k", w.version),
        "globex sees only its own write"
    );
    // Quotas too: acme filled to its key quota leaves globex's room alone.
    let max = store.limits().max_trace_keys;
    for i in 0..max - 1 {
        store
            .put(put(&acme, &format!("fill{i}"), b"v"))
            .await
            .expect("fill acme");
    }
    assert!(
        store.put(put(&acme, "more", b"v")).await.is_err(),
        "acme is full"
    );
    store
        .put(put(&globex, "more", b"v"))
        .await
        .expect("globex has its own quota");
    assert_eq!(store.clear(&acme).await.expect("clear acme"), max);
    let slot = store
        .get(&globex, &key("k"))
        .await
        .expect("globex's slot stays");
    assert_eq!(slot.value.as_ref(), b"globex's");
    assert_eq!(store.list(&globex, "").await.expect("list").used_keys, 2);
}

/// A batched write: every entry with its own TTL, content type and
/// revision (consecutive, in entry order), one change per entry.
pub async fn put_many_writes_each_entry_as_one_change(store: Arc<dyn ContextStore>) {
    let t = scope();
    // Watching before any write: on Redis Cluster a change published just
    // before a watch began may still reach it.
    let mut w = store.watch(&t, "").await.expect("watch");
    store.put(put(&t, "old", b"1")).await.expect("put");
    assert_eq!(next_change(&mut w).await.version, 1);
    let mut a = put(&t, "a", b"alpha");
    a.content_type = "text/plain".into();
    a.ttl = Some(Duration::from_secs(60));
    let mut old = put(&t, "old", b"22");
    old.expected_version = Some(1);
    let b = put(&t, "b", b"");
    let written = store.put_many(&t, vec![a, old, b]).await.expect("put_many");
    let versions: Vec<u64> = written.iter().map(|w| w.version).collect();
    assert_eq!(versions, vec![2, 3, 4]);
    let now = now_ms();
    assert!(written[0].expires_at_ms <= now + 60_000 && written[0].expires_at_ms > now + 50_000);
    assert!(
        written[2].expires_at_ms > now + 3_000_000,
        "the default TTL"
    );
    let slot = store.get(&t, &key("a")).await.expect("get a");
    assert_eq!(
        (
            slot.value.as_ref(),
            slot.meta.content_type.as_str(),
            slot.meta.version
        ),
        (&b"alpha"[..], "text/plain", 2)
    );
    assert_eq!(
        store
            .get(&t, &key("old"))
            .await
            .expect("get")
            .value
            .as_ref(),
        b"22"
    );
    for (k, v, size) in [("a", 2, 5), ("old", 3, 2), ("b", 4, 0)] {
        let c = next_change(&mut w).await;
        assert_eq!(
            (c.kind, c.key.as_str(), c.version, c.size_bytes),
            (ChangeKind::Put, k, v, size)
        );
    }
    let l = store.list(&t, "").await.expect("list");
    assert_eq!((l.used_bytes, l.used_keys), (7, 3), "usage is exact");
    // The next write takes the next revision.
    assert_eq!(store.put(put(&t, "c", b"x")).await.expect("put").version, 5);
}

/// A batch that fails anywhere writes nothing: a version mismatch, the
/// byte quota, the key quota, a duplicate key, a bad entry; the error names
/// the entry. A batch exactly at the quotas is written.
pub async fn put_many_is_all_or_nothing(store: Arc<dyn ContextStore>) {
    let t = scope();
    let limits = store.limits().clone();
    store.put(put(&t, "x", b"1")).await.expect("put");
    let unchanged = |store: Arc<dyn ContextStore>, t: Scope| async move {
        let l = store.list(&t, "").await.expect("list");
        assert_eq!(
            l.slots.iter().map(|s| s.key.as_str()).collect::<Vec<_>>(),
            vec!["x"],
            "nothing of the batch was written"
        );
        assert_eq!((l.used_bytes, l.used_keys), (1, 1));
    };
    let entry = |e: &Error| match e {
        Error::InEntry { index, key, source } => (*index, key.clone(), (**source).clone()),
        other => panic!("not an entry's error: {other:?}"),
    };

    let mut stale = put(&t, "x", b"2");
    stale.expected_version = Some(7);
    let err = store
        .put_many(&t, vec![put(&t, "a", b"a"), stale])
        .await
        .expect_err("mismatch");
    let (i, k, inner) = entry(&err);
    assert_eq!((i, k.as_str()), (1, "x"));
    assert!(
        matches!(
            inner,
            Error::VersionMismatch {
                current: Some(1),
                expected: 7,
                ..
            }
        ),
        "{inner:?}"
    );
    assert_eq!(err.field().as_deref(), Some("entries[1].expected_version"));
    unchanged(store.clone(), t.clone()).await;

    // Bytes: the whole batch counts; one byte over fails at the entry that
    // goes over.
    let value = limits.max_value_bytes as usize;
    let room = (limits.max_trace_bytes - 1) as usize;
    let mut big = Vec::new();
    let mut left = room;
    while left > 0 {
        let n = left.min(value);
        big.push(put(&t, &format!("b{}", big.len()), &vec![0; n]));
        left -= n;
    }
    let mut over = big.clone();
    let last = over.len() - 1;
    over[last] = put(
        &t,
        &format!("b{last}"),
        &vec![0; over[last].value.len() + 1],
    );
    let err = store.put_many(&t, over).await.expect_err("bytes over");
    let (i, _, inner) = entry(&err);
    assert_eq!(i, last);
    assert!(
        matches!(inner, Error::TraceBytesQuota { would_be, .. } if would_be == limits.max_trace_bytes + 1),
        "{inner:?}"
    );
    unchanged(store.clone(), t.clone()).await;
    assert!(
        (big.len() as u64) < limits.max_trace_keys,
        "the suite's limits"
    );
    store
        .put_many(&t, big.clone())
        .await
        .expect("exactly at the byte quota");
    let l = store.list(&t, "").await.expect("list");
    assert_eq!(l.used_bytes, limits.max_trace_bytes);
    let keys: Vec<Key> = big.iter().map(|p| p.key.clone()).collect();
    store
        .delete_many(&t, &Selection::Keys(keys))
        .await
        .expect("delete them again");
    unchanged(store.clone(), t.clone()).await;

    // Keys: filling the key quota exactly works; one more fails.
    let n = limits.max_trace_keys as usize - 1;
    let fill: Vec<Put> = (0..=n).map(|i| put(&t, &format!("k{i}"), b"")).collect();
    let err = store
        .put_many(&t, fill.clone())
        .await
        .expect_err("keys over");
    let (i, _, inner) = entry(&err);
    assert_eq!(i, n);
    assert!(matches!(inner, Error::TraceKeysQuota { .. }), "{inner:?}");
    unchanged(store.clone(), t.clone()).await;
    let ok = store
        .put_many(&t, fill[..n].to_vec())
        .await
        .expect("exactly at the key quota");
    assert_eq!(ok.len(), n);
    store
        .delete_many(&t, &Selection::Prefix("k".into()))
        .await
        .expect("delete them again");
    unchanged(store.clone(), t.clone()).await;

    // A duplicate key, a value over the limit, a bad TTL: refused before
    // the backend is asked, naming the entry.
    let err = store
        .put_many(&t, vec![put(&t, "d", b"1"), put(&t, "d", b"2")])
        .await
        .expect_err("twice");
    assert_eq!(err.field().as_deref(), Some("entries[1].key"));
    let err = store
        .put_many(&t, vec![put(&t, "v", &vec![0; value + 1])])
        .await
        .expect_err("too large");
    assert_eq!(err.field().as_deref(), Some("entries[0].value"));
    let mut zero = put(&t, "z", b"1");
    zero.ttl = Some(Duration::ZERO);
    let err = store.put_many(&t, vec![zero]).await.expect_err("ttl");
    assert_eq!(err.field().as_deref(), Some("entries[0].ttl"));
    let err = store.put_many(&t, Vec::new()).await.expect_err("empty");
    assert_eq!(err.field().as_deref(), Some("entries"));
    unchanged(store.clone(), t.clone()).await;
    // x, then each batch written and deleted again: two revisions a slot.
    let taken = 1 + 2 * (big.len() as u64 + n as u64);
    assert_eq!(
        store.put(put(&t, "y", b"1")).await.expect("put").version,
        taken + 1,
        "refused batches took no revision"
    );
}

/// A batched delete by keys (absent ones skipped) or by prefix: each slot
/// removed is one change with its own revision, and its quota is released.
pub async fn delete_many_by_keys_and_by_prefix(store: Arc<dyn ContextStore>) {
    let t = scope();
    let mut w = store.watch(&t, "").await.expect("watch");
    for k in ["a/1", "a/2", "b/1", "b/2", "c"] {
        store.put(put(&t, k, b"xy")).await.expect("put");
    }
    for _ in 0..5 {
        next_change(&mut w).await;
    }
    let removed = store
        .delete_many(
            &t,
            &Selection::Keys(vec![key("b/2"), key("nope"), key("a/1")]),
        )
        .await
        .expect("by keys");
    assert_eq!((removed.deleted, removed.version), (2, 7));
    for (k, v) in [("b/2", 6), ("a/1", 7)] {
        let c = next_change(&mut w).await;
        assert_eq!(
            (c.kind, c.key.as_str(), c.version),
            (ChangeKind::Deleted, k, v)
        );
    }
    let removed = store
        .delete_many(&t, &Selection::Prefix("b/".into()))
        .await
        .expect("by prefix");
    assert_eq!((removed.deleted, removed.version), (1, 8));
    let c = next_change(&mut w).await;
    assert_eq!(
        (c.kind, c.key.as_str(), c.version),
        (ChangeKind::Deleted, "b/1", 8)
    );
    let l = store.list(&t, "").await.expect("list");
    assert_eq!(
        l.slots.iter().map(|s| s.key.as_str()).collect::<Vec<_>>(),
        vec!["a/2", "c"]
    );
    assert_eq!((l.used_bytes, l.used_keys), (4, 2));
    // Nothing selected: nothing removed, no revision taken.
    let none = store
        .delete_many(&t, &Selection::Prefix("zzz".into()))
        .await
        .expect("nothing");
    assert_eq!((none.deleted, none.version), (0, 0));
    assert_eq!(store.put(put(&t, "d", b"1")).await.expect("put").version, 9);
    let unknown = store
        .delete_many(&scope(), &Selection::Keys(vec![key("a")]))
        .await
        .expect("unknown trace");
    assert_eq!(unknown.deleted, 0);
    // An empty selection is refused, naming the field.
    let err = store
        .delete_many(&t, &Selection::Prefix(String::new()))
        .await
        .expect_err("empty prefix");
    assert_eq!(err.field().as_deref(), Some("prefix"));
    let err = store
        .delete_many(&t, &Selection::Keys(Vec::new()))
        .await
        .expect_err("no keys");
    assert_eq!(err.field().as_deref(), Some("keys"));
}
