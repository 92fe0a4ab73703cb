//! Listings: prefixes, key order, pages and the trace's usage.

use std::sync::Arc;

use super::support::{put, scope};
use crate::{ContextStore, Page, now_ms};

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
