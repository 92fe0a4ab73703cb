//! Writes, reads, versions and deletes of single slots, and clearing a trace.

use std::{sync::Arc, time::Duration};

use super::support::{key, put, scope};
use crate::{ContextStore, Error, now_ms};

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
