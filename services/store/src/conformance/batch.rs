//! Batched writes and deletes: all or nothing, one revision and one change per entry.

use std::{sync::Arc, time::Duration};

use super::support::{key, next_change, put, scope};
use crate::{ChangeKind, ContextStore, Error, Key, Put, Scope, Selection, now_ms};

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
