//! Isolation: one trace's slots, versions, quotas and watches never reach another trace, nor another tenant's trace of the same id.

use std::sync::Arc;

use baton_common::{auth::Tenant, ids::TraceId};

use super::support::{key, next_change, put, scope};
use crate::{ChangeKind, ContextStore, Error, Scope};

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
