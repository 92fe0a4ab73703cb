//! Limits at and just over their value: value size, the trace's byte and key quotas, TTL bounds, and expiry releasing quota.

use std::{sync::Arc, time::Duration};

use super::support::{key, put, scope};
use crate::{ContextStore, Error, now_ms};

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
