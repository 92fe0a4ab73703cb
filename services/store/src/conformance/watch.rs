//! Watch: changes in order, filtered by prefix, expiries reported.

use std::{collections::BTreeSet, sync::Arc, time::Duration};

use super::support::{key, next_change, put, scope};
use crate::{ChangeKind, ContextStore};

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
