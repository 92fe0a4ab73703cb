use std::{collections::BTreeMap, sync::Arc, time::Duration};

use baton_proto::v1 as pb;

use super::{
    Busy, Conversations, Holder,
    memory::MemoryStore,
    store::{Begin, Begun, Finish, Key, Open, Store},
};
use crate::config::conversations::ConversationConfig;

fn key(id: &str) -> Key {
    Key {
        tenant: "acme".into(),
        id: id.into(),
    }
}

fn begin(run: &str, open: Open) -> Begin {
    Begin {
        run_id: run.into(),
        open,
        hold_ms: 60_000,
        ttl_ms: 60_000,
        base: Vec::new(),
        branched_from: String::new(),
    }
}

fn text(role: pb::Role, t: &str) -> pb::ConversationMessage {
    pb::ConversationMessage {
        message: Some(pb::Message {
            role: role as i32,
            content: t.into(),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn finish(run: &str, messages: Vec<pb::ConversationMessage>, count: u32) -> Finish {
    Finish {
        run_id: run.into(),
        fold: 0,
        summary: None,
        messages,
        agent: "a".into(),
        run: pb::ConversationRun {
            run_id: run.into(),
            status: pb::RunStatus::Completed as i32,
            messages: 2,
            ended_at: None,
        },
        count,
        bytes: 0,
        ttl_ms: 60_000,
    }
}

#[tokio::test]
async fn a_turn_is_one_runs_and_its_messages_are_applied_once() {
    let store = MemoryStore::new(10);
    let k = key("c1");
    assert!(matches!(
        store
            .begin(&k, &begin("r1", Open::Existing))
            .await
            .expect("begin"),
        Begun::NotFound
    ));
    assert!(matches!(
        store
            .begin(&k, &begin("r1", Open::New))
            .await
            .expect("begin"),
        Begun::Taken { .. }
    ));
    match store
        .begin(&k, &begin("r2", Open::Existing))
        .await
        .expect("begin")
    {
        Begun::Busy { running, .. } => assert_eq!(running, "r1"),
        other => panic!("not busy: {other:?}"),
    }
    assert!(matches!(
        store
            .begin(&k, &begin("r2", Open::New))
            .await
            .expect("begin"),
        Begun::Exists
    ));
    let added = vec![
        text(pb::Role::User, "hi"),
        text(pb::Role::Assistant, "hello"),
    ];
    assert!(
        store
            .finish(&k, &finish("r1", added.clone(), 2))
            .await
            .expect("finish")
    );
    // Again (a resumed run ending a second time): nothing twice.
    assert!(
        !store
            .finish(&k, &finish("r1", added, 2))
            .await
            .expect("finish")
    );
    let Begun::Taken { messages, meta, .. } = store
        .begin(&k, &begin("r2", Open::Existing))
        .await
        .expect("begin")
    else {
        panic!("not taken");
    };
    assert_eq!(messages.len(), 2);
    assert_eq!(meta.count, 2);
    assert_eq!(meta.running, "r2");
    let page = store.page(&k, 1, 10).await.expect("page").expect("there");
    assert_eq!(page.messages.len(), 1);
    assert_eq!(page.runs.len(), 1);
}

#[tokio::test]
async fn a_fold_drops_the_oldest_and_puts_the_summary_first() {
    let store = MemoryStore::new(10);
    let k = key("c");
    store
        .begin(&k, &begin("r1", Open::New))
        .await
        .expect("begin");
    let four = ["1", "2", "3", "4"]
        .iter()
        .map(|t| text(pb::Role::User, t))
        .collect();
    store
        .finish(&k, &finish("r1", four, 4))
        .await
        .expect("finish");
    store
        .begin(&k, &begin("r2", Open::Existing))
        .await
        .expect("begin");
    let mut f = finish("r2", vec![text(pb::Role::User, "5")], 4);
    f.fold = 2;
    f.summary = Some(super::compact::summary_message("one and two", "r2"));
    store.finish(&k, &f).await.expect("finish");
    let page = store.page(&k, 0, 100).await.expect("page").expect("there");
    let texts: Vec<&str> = page
        .messages
        .iter()
        .map(|m| m.message.as_ref().expect("message").content.as_str())
        .collect();
    assert!(texts[0].contains("one and two"));
    assert_eq!(&texts[1..], ["3", "4", "5"]);
    assert_eq!(page.meta.folded, 2);
}

#[tokio::test]
async fn listing_is_most_recent_first_and_pages_by_cursor() {
    let store = MemoryStore::new(10);
    for id in ["a", "b", "c"] {
        store
            .begin(&key(id), &begin(id, Open::New))
            .await
            .expect("begin");
        store.release(&key(id), id).await.expect("release");
        tokio::time::sleep(Duration::from_millis(3)).await;
    }
    let first = store.list("acme", None, 2).await.expect("list");
    let ids: Vec<&str> = first.iter().map(|m| m.id.as_str()).collect();
    assert_eq!(ids, ["c", "b"]);
    let last = first.last().expect("a last");
    let rest = store
        .list("acme", Some((last.updated_ms, last.id.clone())), 2)
        .await
        .expect("list");
    assert_eq!(
        rest.iter().map(|m| m.id.as_str()).collect::<Vec<_>>(),
        ["a"]
    );
    assert!(
        store
            .list("globex", None, 10)
            .await
            .expect("list")
            .is_empty()
    );
}

#[tokio::test]
async fn the_least_recently_used_goes_at_the_bound_and_the_running_stays() {
    let store = MemoryStore::new(2);
    store
        .begin(&key("a"), &begin("ra", Open::New))
        .await
        .expect("begin");
    store
        .begin(&key("b"), &begin("rb", Open::New))
        .await
        .expect("begin");
    store.release(&key("b"), "rb").await.expect("release");
    // At the bound (2 kept): a third drops b, the one not running.
    store
        .begin(&key("c"), &begin("rc", Open::New))
        .await
        .expect("begin");
    assert!(store.page(&key("a"), 0, 0).await.expect("page").is_some());
    assert!(store.page(&key("b"), 0, 0).await.expect("page").is_none());
    assert!(store.page(&key("c"), 0, 0).await.expect("page").is_some());
}

#[tokio::test]
async fn an_expired_conversation_is_gone() {
    let store = MemoryStore::new(10);
    let k = key("short");
    let mut b = begin("r", Open::New);
    b.ttl_ms = 20;
    store.begin(&k, &b).await.expect("begin");
    store.release(&k, "r").await.expect("release");
    tokio::time::sleep(Duration::from_millis(40)).await;
    assert!(store.page(&k, 0, 0).await.expect("page").is_none());
}

#[tokio::test]
async fn labels_are_set_and_removed() {
    let store = MemoryStore::new(10);
    let k = key("l");
    store
        .begin(&k, &begin("r", Open::New))
        .await
        .expect("begin");
    let mut labels = BTreeMap::from([("team".to_owned(), "x".to_owned())]);
    let meta = store
        .update(&k, Some("Title".into()), &labels)
        .await
        .expect("update")
        .expect("there");
    assert_eq!(meta.title, "Title");
    assert_eq!(meta.labels.get("team").map(String::as_str), Some("x"));
    labels.insert("team".into(), String::new());
    let meta = store
        .update(&k, None, &labels)
        .await
        .expect("update")
        .expect("there");
    assert!(meta.labels.is_empty());
    assert_eq!(meta.title, "Title");
    let runs = store.delete(&k).await.expect("delete").expect("there");
    assert_eq!(runs, ["r"]);
    assert!(store.delete(&k).await.expect("delete").is_none());
}

fn conversations(max_wait: Duration) -> Arc<Conversations> {
    Arc::new(Conversations::new(
        Arc::new(MemoryStore::new(10)),
        ConversationConfig {
            max_wait,
            ..Default::default()
        },
    ))
}

fn never_ended() -> impl Fn(String) -> futures::future::BoxFuture<'static, Holder> + Send + Sync {
    |_| Box::pin(async { Holder::Running })
}

#[tokio::test]
async fn a_waiting_run_takes_the_turn_when_it_is_given_back_and_a_refusing_one_does_not_wait() {
    let c = conversations(Duration::from_secs(5));
    let k = key("w");
    c.take_turn(&k, &begin("r1", Open::New), Busy::Wait, &never_ended())
        .await
        .expect("first");
    let refused = c
        .take_turn(
            &k,
            &begin("r2", Open::Existing),
            Busy::Refuse,
            &never_ended(),
        )
        .await
        .err()
        .expect("refused");
    assert_eq!(refused.code(), tonic::Code::Aborted);
    assert!(refused.to_string().contains("r1"), "{refused}");
    let waiter = {
        let (c, k) = (c.clone(), k.clone());
        tokio::spawn(async move {
            c.take_turn(&k, &begin("r3", Open::Existing), Busy::Wait, &never_ended())
                .await
                .map(|t| t.messages.len())
        })
    };
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(!waiter.is_finished());
    c.finish(&k, &finish("r1", vec![text(pb::Role::User, "x")], 1))
        .await
        .expect("finish");
    let seen = tokio::time::timeout(Duration::from_secs(2), waiter)
        .await
        .expect("in time")
        .expect("joined")
        .expect("taken");
    assert_eq!(seen, 1);
}

#[tokio::test]
async fn a_wait_is_bounded_and_a_turn_of_an_ended_run_is_freed() {
    let c = conversations(Duration::from_millis(100));
    let k = key("b");
    c.take_turn(&k, &begin("r1", Open::New), Busy::Wait, &never_ended())
        .await
        .expect("first");
    let started = std::time::Instant::now();
    let e = c
        .take_turn(&k, &begin("r2", Open::Existing), Busy::Wait, &never_ended())
        .await
        .err()
        .expect("timed out");
    assert_eq!(e.code(), tonic::Code::Aborted);
    assert!(e.to_string().contains("max_wait"), "{e}");
    assert!(started.elapsed() < Duration::from_secs(2));
    let ended = |run: String| -> futures::future::BoxFuture<'static, Holder> {
        Box::pin(async move {
            if run == "r1" {
                Holder::Ended(None)
            } else {
                Holder::Running
            }
        })
    };
    c.take_turn(&k, &begin("r2", Open::Existing), Busy::Wait, &ended)
        .await
        .expect("freed");
}

#[tokio::test]
async fn a_lapsed_hold_of_a_running_run_keeps_the_turn_and_of_an_unknown_one_frees_it() {
    let c = conversations(Duration::from_millis(100));
    let k = key("l");
    // A hold of 1 ms: lapsed at once.
    let short = |run: &str, open| Begin {
        hold_ms: 1,
        ..begin(run, open)
    };
    c.take_turn(&k, &short("r1", Open::New), Busy::Wait, &never_ended())
        .await
        .expect("first");
    tokio::time::sleep(Duration::from_millis(5)).await;
    // Its run still runs (parked, resumed elsewhere): still its turn.
    let e = c
        .take_turn(
            &k,
            &begin("r2", Open::Existing),
            Busy::Refuse,
            &never_ended(),
        )
        .await
        .err()
        .expect("busy");
    assert!(e.to_string().contains("r1"), "{e}");
    // Nobody knows it: the lapsed hold frees the turn.
    let unknown = |_: String| -> futures::future::BoxFuture<'static, Holder> {
        Box::pin(async { Holder::Unknown })
    };
    c.take_turn(&k, &begin("r2", Open::Existing), Busy::Refuse, &unknown)
        .await
        .expect("taken");
    // Unknown but held (registering): busy.
    let e = c
        .take_turn(&k, &begin("r3", Open::Existing), Busy::Refuse, &unknown)
        .await
        .err()
        .expect("busy");
    assert!(e.to_string().contains("r2"), "{e}");
}

#[tokio::test]
async fn a_refusing_sender_does_not_queue_behind_a_waiting_one() {
    let c = conversations(Duration::from_secs(5));
    let k = key("q");
    c.take_turn(&k, &begin("r1", Open::New), Busy::Wait, &never_ended())
        .await
        .expect("first");
    let waiter = {
        let (c, k) = (c.clone(), k.clone());
        tokio::spawn(async move {
            c.take_turn(&k, &begin("r2", Open::Existing), Busy::Wait, &never_ended())
                .await
                .is_ok()
        })
    };
    tokio::time::sleep(Duration::from_millis(50)).await;
    let started = std::time::Instant::now();
    let e = c
        .take_turn(
            &k,
            &begin("r3", Open::Existing),
            Busy::Refuse,
            &never_ended(),
        )
        .await
        .err()
        .expect("refused");
    assert_eq!(e.code(), tonic::Code::Aborted);
    assert!(
        started.elapsed() < Duration::from_millis(300),
        "{:?}",
        started.elapsed()
    );
    waiter.abort();
}

#[test]
fn ids_are_checked() {
    for ok in ["a", "conv-1", "ctx:2.b_c", &"x".repeat(128)] {
        assert!(super::check_id("conversation_id", ok).is_ok(), "{ok}");
    }
    for bad in ["", "a b", "é", &"x".repeat(129)] {
        let e = super::check_id("conversation_id", bad).expect_err(bad);
        assert_eq!(e.field(), Some("conversation_id"));
    }
}

/// A run that ended before its start held its turn (an instant one) gave
/// the turn back already: holding it then is not "the conversation was
/// deleted" (which made an instant run's caller told NOT_FOUND and the run
/// forgotten). Only a conversation gone is.
#[tokio::test]
async fn holding_the_turn_of_a_run_that_ended_already_is_not_a_deletion() {
    let store = MemoryStore::new(10);
    let k = key("instant");
    assert!(matches!(
        store
            .begin(&k, &begin("r1", Open::New))
            .await
            .expect("begin"),
        Begun::Taken { .. }
    ));
    assert!(store.hold(&k, "r1", 1000).await.expect("hold"), "its own");
    assert!(
        store
            .finish(&k, &finish("r1", Vec::new(), 0))
            .await
            .expect("finish")
    );
    assert!(
        store.hold(&k, "r1", 1000).await.expect("hold"),
        "ended before it was held: nothing to hold, not deleted"
    );
    store.delete(&k).await.expect("delete");
    assert!(!store.hold(&k, "r1", 1000).await.expect("hold"), "deleted");
}
