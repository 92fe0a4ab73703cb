//! The run store in Redis (`run::durable`): a run's log and metadata on a
//! real `redis-server` (and a real Redis Cluster), appends fenced by the
//! run's epoch, range reads and blocking tails, the tenant's list, and
//! retention.

use std::time::Duration;

use baton_e2e::{RedisCluster, RedisServer};
use baton_orchestrator::run::durable::{Append, Claim, RedisRuns, RunEnd, RunMeta, now_ms};
use baton_proto::v1::{self as pb, run_event::Payload};
use baton_store::redis::RedisConfig;

fn config(url: &str) -> RedisConfig {
    RedisConfig {
        url: url.to_owned(),
        ..RedisConfig::default()
    }
}

fn meta(tenant: &str) -> RunMeta {
    RunMeta {
        run_id: uuid::Uuid::now_v7().to_string(),
        trace_id: "4bf92f3577b34da6a3ce929d0e0e4736".into(),
        tenant: tenant.into(),
        kind: pb::RunKind::Agent,
        target: "researcher".into(),
        started_ms: now_ms(),
        detached: false,
        status: pb::RunStatus::Running,
        ended_ms: None,
        output: String::new(),
        run_context_json: String::new(),
        usage: pb::Usage::default(),
        error_code: 0,
        error_message: String::new(),
        last_seq: 0,
        waiting_approvals: 0,
        waiting_inputs: 0,
        forked_from: None,
        replay_of: None,
        experiment: None,
        schedule: None,
        scores: Vec::new(),
        replay_strict: false,
        replay_diverged: false,
        conversation: None,
        conversation_end: None,
    }
}

fn event(run_id: &str, seq: u64, text: &str) -> pb::RunEvent {
    pb::RunEvent {
        seq,
        run_id: run_id.into(),
        context_id: "root".into(),
        payload: Some(Payload::TextDelta(pb::TextDelta { text: text.into() })),
        ..Default::default()
    }
}

fn ended(output: &str) -> RunEnd {
    RunEnd {
        status: pb::RunStatus::Completed,
        ended_ms: now_ms(),
        output: output.into(),
        run_context_json: "{}".into(),
        usage: Some(pb::Usage {
            model_calls: 2,
            ..Default::default()
        }),
        error_code: 0,
        error_message: String::new(),
        replay_diverged: false,
        conversation: None,
    }
}

/// A log, its metadata and a fenced writer, on `runs`.
async fn log_and_fencing(runs: &RedisRuns, bump_epoch: impl AsyncFnOnce(&str)) {
    let m = meta("acme");
    let id = m.run_id.clone();
    let epoch = runs
        .create(&m, &[], Duration::from_secs(60))
        .await
        .expect("create");
    let batch: Vec<pb::RunEvent> = (1..=3).map(|s| event(&id, s, &format!("t{s}"))).collect();
    assert_eq!(
        runs.append(&id, epoch, &batch, &[], None, None, &Default::default())
            .await
            .expect("append"),
        Append::Done
    );
    let got = runs.events_after(&id, 0, 100).await.expect("read");
    assert_eq!(got, batch);
    let after_one = runs.events_after(&id, 1, 1).await.expect("read");
    assert_eq!(after_one, batch[1..2]);
    let running = runs.meta(&id).await.expect("meta").expect("known");
    assert_eq!(
        (running.status, running.last_seq, running.target.as_str()),
        (pb::RunStatus::Running, 3, "researcher")
    );

    // Another owner took the run: the old epoch writes nothing, not even
    // its terminal event.
    bump_epoch(&id).await;
    let late = [event(&id, 4, "late")];
    assert_eq!(
        runs.append(
            &id,
            epoch,
            &late,
            &[],
            Some(&ended("stale")),
            None,
            &Default::default()
        )
        .await
        .expect("append"),
        Append::Fenced
    );
    assert_eq!(runs.events_after(&id, 0, 100).await.expect("read"), batch);
    let still = runs.meta(&id).await.expect("meta").expect("known");
    assert_eq!((still.status, still.last_seq), (pb::RunStatus::Running, 3));
    // The new epoch writes.
    assert_eq!(
        runs.append(
            &id,
            epoch + 1,
            &late,
            &[],
            Some(&ended("fresh")),
            None,
            &Default::default()
        )
        .await
        .expect("append"),
        Append::Done
    );
    let done = runs.meta(&id).await.expect("meta").expect("known");
    assert_eq!(
        (
            done.status,
            done.last_seq,
            done.output.as_str(),
            done.usage.model_calls
        ),
        (pb::RunStatus::Completed, 4, "fresh", 2)
    );
    assert!(done.ended_ms.is_some());
    assert!(
        runs.meta("0190f5a2-7b3c-7d4e-8f10-1a2b3c4d5e6f")
            .await
            .expect("meta")
            .is_none()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runs_log_is_appended_in_order_and_fenced_by_its_epoch() {
    let redis = RedisServer::start().expect("redis-server");
    let runs = RedisRuns::new(
        &config(&redis.url()),
        Duration::from_secs(3600),
        "test-replica",
        Duration::from_secs(5),
    )
    .expect("runs");
    assert!(runs.ping().await);
    log_and_fencing(&runs, async |id| {
        redis
            .cli(&["HINCRBY", &format!("baton:run:{{{id}}}:meta"), "epoch", "1"])
            .expect("bump");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_run_store_works_on_a_redis_cluster() {
    let cluster = RedisCluster::start().expect("redis cluster");
    let config = RedisConfig {
        cluster_urls: cluster.urls(),
        ..RedisConfig::default()
    };
    let runs = RedisRuns::new(
        &config,
        Duration::from_secs(3600),
        "test-replica",
        Duration::from_secs(5),
    )
    .expect("runs");
    let client = redis::cluster::ClusterClient::new(cluster.urls()).expect("client");
    let mut conn = client.get_async_connection().await.expect("conn");
    log_and_fencing(&runs, async |id| {
        redis::cmd("HINCRBY")
            .arg(format!("baton:run:{{{id}}}:meta"))
            .arg("epoch")
            .arg(1)
            .query_async::<i64>(&mut conn)
            .await
            .expect("bump");
    })
    .await;
    // More runs, in other slots: listing reads each run's record.
    for _ in 0..5 {
        runs.create(&meta("acme"), &[], Duration::from_secs(60))
            .await
            .expect("create");
    }
    let (listed, more) = runs.list("acme", None, None, 4).await.expect("list");
    assert_eq!((listed.len(), more), (4, true));
    let (all, more) = runs.list("acme", None, None, 10).await.expect("list");
    assert_eq!((all.len(), more), (6, false));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tail_waits_for_the_next_events() {
    let redis = RedisServer::start().expect("redis-server");
    let runs = std::sync::Arc::new(
        RedisRuns::new(
            &config(&redis.url()),
            Duration::from_secs(3600),
            "test-replica",
            Duration::from_secs(5),
        )
        .expect("runs"),
    );
    let m = meta("acme");
    let id = m.run_id.clone();
    let epoch = runs
        .create(&m, &[], Duration::from_secs(60))
        .await
        .expect("create");
    let mut conn = runs
        .tail_connection(Duration::from_secs(2))
        .await
        .expect("tail connection");
    // Nothing yet: the tail waits its time and comes back empty.
    let began = std::time::Instant::now();
    let none = runs
        .tail(&mut conn, &id, 0, Duration::from_millis(200), 10)
        .await
        .expect("tail");
    assert!(none.is_empty());
    assert!(
        began.elapsed() >= Duration::from_millis(180),
        "{:?}",
        began.elapsed()
    );
    // An append while it waits wakes it with exactly the new events.
    let writer = {
        let runs = runs.clone();
        let id = id.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(100)).await;
            let batch = [event(&id, 1, "a"), event(&id, 2, "b")];
            runs.append(&id, epoch, &batch, &[], None, None, &Default::default())
                .await
                .expect("append");
        })
    };
    let began = std::time::Instant::now();
    let got = runs
        .tail(&mut conn, &id, 0, Duration::from_secs(2), 10)
        .await
        .expect("tail");
    assert_eq!(got.iter().map(|e| e.seq).collect::<Vec<_>>(), [1, 2]);
    assert!(began.elapsed() < Duration::from_secs(1));
    writer.await.expect("writer");
    let after = runs
        .tail(&mut conn, &id, 1, Duration::from_millis(50), 10)
        .await
        .expect("tail");
    assert_eq!(after.iter().map(|e| e.seq).collect::<Vec<_>>(), [2]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenants_runs_are_listed_newest_first_and_ended_ones_expire() {
    let redis = RedisServer::start().expect("redis-server");
    let runs = RedisRuns::new(
        &config(&redis.url()),
        Duration::from_millis(300),
        "test-replica",
        Duration::from_secs(5),
    )
    .expect("runs");
    let mut ids = Vec::new();
    for i in 0..5 {
        let m = meta("acme");
        let epoch = runs
            .create(&m, &[], Duration::from_secs(60))
            .await
            .expect("create");
        if i % 2 == 0 {
            runs.append(
                &m.run_id,
                epoch,
                &[event(&m.run_id, 1, "x")],
                &[],
                Some(&ended("ok")),
                None,
                &Default::default(),
            )
            .await
            .expect("end");
        }
        ids.push(m.run_id);
    }
    let theirs = meta("globex");
    runs.create(&theirs, &[], Duration::from_secs(60))
        .await
        .expect("create");
    let newest_first: Vec<String> = ids.iter().rev().cloned().collect();

    let mut seen = Vec::new();
    let mut after: Option<String> = None;
    loop {
        let (page, more) = runs
            .list("acme", None, after.as_deref(), 2)
            .await
            .expect("list");
        seen.extend(page.iter().map(|m| m.run_id.clone()));
        if !more {
            break;
        }
        after = page.last().map(|m| m.run_id.clone());
    }
    assert_eq!(seen, newest_first);
    let (running, _) = runs
        .list("acme", Some(pb::RunStatus::Running), None, 10)
        .await
        .expect("list");
    assert_eq!(
        running
            .iter()
            .map(|m| m.run_id.as_str())
            .collect::<Vec<_>>(),
        [ids[3].as_str(), ids[1].as_str()]
    );
    let (other, _) = runs.list("globex", None, None, 10).await.expect("list");
    assert_eq!(other.len(), 1);

    // Ended runs live `retention`, then are gone from GetRun and the list.
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert!(runs.meta(&ids[0]).await.expect("meta").is_none());
    assert!(
        runs.events_after(&ids[0], 0, 10)
            .await
            .expect("read")
            .is_empty()
    );
    let (left, _) = runs.list("acme", None, None, 10).await.expect("list");
    assert_eq!(
        left.iter().map(|m| m.run_id.as_str()).collect::<Vec<_>>(),
        [ids[3].as_str(), ids[1].as_str()]
    );
    let index: String = redis
        .cli(&["ZCARD", &format!("baton:runs:{}", hex("acme"))])
        .expect("zcard");
    assert_eq!(index.trim(), "2", "expired runs leave the index");
}

fn hex(s: &str) -> String {
    s.bytes().map(|b| format!("{b:02x}")).collect()
}

const AGENTS: &str = r#"
scripts:
  chatty: [{text: "one two three four five six seven eight", deltas: 8}]
  slow: [{calls: [{tool: sleep, args: {ms: 700}}]}, {text: "slept on {{input}}"}]
agents:
  chatty: {model: "scripted:chatty"}
  slow: {model: "scripted:slow", tools: [sleep]}
"#;

/// An orchestrator keeping runs in `redis` (no peers: replicas share
/// nothing but Redis).
async fn durable_replica(redis: &RedisServer) -> baton_e2e::OrchestratorServer {
    baton_e2e::OrchestratorServer::start(AGENTS, None, baton_e2e::durable_runs(redis.url()))
        .await
        .expect("orchestrator")
}

fn agent(agent: &str, input: &str) -> pb::RunAgentRequest {
    pb::RunAgentRequest {
        agent: agent.into(),
        input: input.into(),
        ..Default::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_replica_serves_a_durable_runs_events_status_and_list() {
    use futures::StreamExt;
    let redis = RedisServer::start().expect("redis-server");
    let a = durable_replica(&redis).await;
    let b = durable_replica(&redis).await;
    let on_a = a.client().await.expect("client");
    let on_b = b.client().await.expect("client");
    let store = RedisRuns::new(
        &config(&redis.url()),
        Duration::from_secs(60),
        "test-replica",
        Duration::from_secs(5),
    )
    .expect("runs");

    // Every event a client sees is in Redis already.
    let mut stream = on_a.run_agent(agent("chatty", "x")).await.expect("run");
    let mut seen = Vec::new();
    while let Some(e) = stream.next().await {
        let e = e.expect("event");
        let logged = store
            .events_after(&e.run_id, e.seq - 1, 1)
            .await
            .expect("read");
        assert_eq!(
            logged.first(),
            Some(&e),
            "event {} was logged before it was sent",
            e.seq
        );
        seen.push(e);
    }
    baton_e2e::events::check_stream_rules(&seen);
    let id = seen[0].run_id.clone();
    // Replica B never ran it, has no peers, and knows it all.
    let got = on_b.get_run(&id).await.expect("get on b");
    assert_eq!(
        (got.status(), got.last_seq, got.target.as_str()),
        (pb::RunStatus::Completed, seen.len() as u64, "chatty")
    );
    assert_eq!(got.output, "one two three four five six seven eight");
    let replay: Vec<pb::RunEvent> = on_b
        .watch_run(&id, 0, None)
        .await
        .expect("watch on b")
        .map(|e| e.expect("event"))
        .collect()
        .await;
    assert_eq!(replay, seen, "the same events, byte for byte");
    let tail: Vec<u64> = on_b
        .watch_run(&id, 5, None)
        .await
        .expect("watch on b")
        .map(|e| e.expect("event").seq)
        .collect()
        .await;
    assert_eq!(tail, (6..=seen.len() as u64).collect::<Vec<_>>());

    // A run in progress on A is followed live from B.
    let mut slow = on_a.run_agent(agent("slow", "tides")).await.expect("run");
    let first = slow.next().await.expect("open").expect("event");
    let live: Vec<pb::RunEvent> = on_b
        .watch_run(&first.run_id, 0, None)
        .await
        .expect("watch on b")
        .map(|e| e.expect("event"))
        .collect()
        .await;
    baton_e2e::events::check_stream_rules(&live);
    match live.last().and_then(|e| e.payload.as_ref()) {
        Some(Payload::RunCompleted(c)) => assert_eq!(c.output, "slept on tides"),
        other => panic!("{other:?}"),
    }
    // Both runs are listed by either replica, newest first.
    for client in [&on_a, &on_b] {
        let page = client
            .list_runs(pb::RunStatus::Unspecified, 10, "")
            .await
            .expect("list");
        let ids: Vec<&str> = page.runs.iter().map(|r| r.run_id.as_str()).collect();
        assert_eq!(ids, [first.run_id.as_str(), id.as_str()]);
    }
    let missing = on_b
        .get_run("0190f5a2-7b3c-7d4e-8f10-1a2b3c4d5e6f")
        .await
        .expect_err("unknown");
    assert_eq!(missing.code(), tonic::Code::NotFound);
}

/// The replica that ran a durable run serves its whole log from the run
/// store once its own copy is gone (LOG_RETENTION after the end), like
/// every other replica, for `runs.retention`: it once answered
/// FAILED_PRECONDITION "the run ended more than 60s ago".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_replica_that_ran_a_finished_run_serves_its_log_from_the_run_store() {
    use futures::StreamExt;
    let redis = RedisServer::start().expect("redis-server");
    let server = durable_replica(&redis).await;
    let other = durable_replica(&redis).await;
    let client = server.client().await.expect("client");
    let ran = client
        .run_agent_to_end(agent("chatty", "x"))
        .await
        .expect("run");
    let run_id = ran[0].run_id.clone();
    // Its log here goes as it would a minute after the end; the replica
    // starts other runs (a start sweeps the finished runs' logs).
    server.core.runs().expire_finished_logs_now();
    client
        .run_agent_to_end(agent("chatty", "y"))
        .await
        .expect("another run");
    for (name, replica) in [("the replica that ran it", &server), ("another", &other)] {
        let c = replica.client().await.expect("client");
        let all: Vec<pb::RunEvent> = c
            .watch_run(&run_id, 0, None)
            .await
            .unwrap_or_else(|e| panic!("{name}: {e:?}"))
            .map(|e| e.unwrap_or_else(|e| panic!("{name}: {e:?}")))
            .collect()
            .await;
        assert_eq!(all, ran, "{name} serves the whole log");
        let run = c.get_run(&run_id).await.expect("get");
        assert_eq!(
            (run.status(), run.last_seq),
            (pb::RunStatus::Completed, ran.len() as u64)
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_redis_a_durable_run_does_not_start_or_ends_unavailable() {
    use futures::StreamExt;
    let redis = RedisServer::start().expect("redis-server");
    let server = durable_replica(&redis).await;
    let client = server.client().await.expect("client");

    // Redis hangs mid-run: the stream ends UNAVAILABLE within a few
    // timeouts, and the run stops here, never left hanging.
    // The bare gRPC stream, to see what the server sends (the client's own
    // streams would re-attach and read the run's end from this replica).
    let mut stream = client
        .raw()
        .run_agent(agent("slow", "x"))
        .await
        .expect("run")
        .into_inner();
    let first = stream.next().await.expect("open").expect("event");
    redis.freeze();
    let began = std::time::Instant::now();
    let mut ended = None;
    while let Some(e) = tokio::time::timeout(Duration::from_secs(10), stream.next())
        .await
        .expect("the stream ends")
    {
        if let Err(e) = e {
            ended = Some(e);
        }
    }
    let err = ended.expect("an error ends the stream");
    assert_eq!(err.code(), tonic::Code::Unavailable, "{err:?}");
    assert!(
        began.elapsed() < Duration::from_secs(5),
        "{:?}",
        began.elapsed()
    );
    // A new run cannot be recorded: UNAVAILABLE, and nothing starts.
    let refused = client
        .run_agent(agent("chatty", "x"))
        .await
        .err()
        .expect("refused");
    assert_eq!(refused.code(), tonic::Code::Unavailable, "{refused:?}");
    // The run was dropped here, never ended here: nothing was shown that
    // the log does not have. Once Redis answers again its lease lapses and
    // a replica (this one, the only one) resumes it from its log to its end.
    assert!(
        server.core.runs().get(&first.run_id).is_err(),
        "dropped here"
    );
    assert_eq!(server.core.runs().running(), 0);
    redis.thaw();
    let run = tokio::time::timeout(Duration::from_secs(20), async {
        loop {
            if let Ok(run) = client.get_run(&first.run_id).await
                && run.status() != pb::RunStatus::Running
            {
                return run;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
    .expect("the run is resumed and ends");
    assert_eq!(
        (run.status(), run.output.as_str()),
        (pb::RunStatus::Completed, "slept on x")
    );
    let all: Vec<pb::RunEvent> = client
        .watch_run(&first.run_id, 0, None)
        .await
        .expect("watch")
        .map(|e| e.expect("event"))
        .collect()
        .await;
    baton_e2e::events::check_stream_rules(&all);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lapsed_lease_is_claimed_once_and_fences_the_former_owner() {
    let redis = RedisServer::start().expect("redis-server");
    let lease = Duration::from_millis(400);
    let a = RedisRuns::new(&config(&redis.url()), Duration::from_secs(60), "a", lease).expect("a");
    let b = RedisRuns::new(&config(&redis.url()), Duration::from_secs(60), "b", lease).expect("b");
    let m = meta("acme");
    let id = m.run_id.clone();
    let epoch = a
        .create(&m, &[], Duration::from_secs(60))
        .await
        .expect("create");
    a.append(
        &id,
        epoch,
        &[event(&id, 1, "x")],
        &[],
        None,
        None,
        &Default::default(),
    )
    .await
    .expect("append");

    // While a renews, nothing lapses and b cannot take the run.
    for _ in 0..3 {
        tokio::time::sleep(Duration::from_millis(150)).await;
        assert_eq!(a.renew(&id, epoch, None).await.expect("renew"), Some(false));
        assert!(b.lapsed(10).await.expect("lapsed").is_empty());
        assert_eq!(b.claim(&id).await.expect("claim"), Claim::Owned);
    }
    // a stops renewing: the lease lapses, b claims it (once).
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        b.lapsed(10).await.expect("lapsed"),
        std::slice::from_ref(&id)
    );
    let claimed = b.claim(&id).await.expect("claim");
    let Claim::Claimed {
        epoch: new_epoch,
        previous_owner,
        last_seq,
        trace_id,
    } = claimed
    else {
        panic!("{claimed:?}");
    };
    assert_eq!((new_epoch, previous_owner.as_str(), last_seq), (2, "a", 1));
    assert_eq!(trace_id, m.trace_id);
    assert_eq!(
        b.claim(&id).await.expect("again"),
        Claim::Owned,
        "claimed once"
    );
    // The former owner is fenced: no renewal, no append.
    assert_eq!(a.renew(&id, epoch, None).await.expect("renew"), None);
    assert_eq!(
        a.append(
            &id,
            epoch,
            &[event(&id, 2, "late")],
            &[],
            None,
            None,
            &Default::default()
        )
        .await
        .expect("append"),
        Append::Fenced
    );
    assert_eq!(
        b.renew(&id, new_epoch, None).await.expect("renew"),
        Some(false)
    );
    // Ended runs leave the lease set when met.
    b.append(
        &id,
        new_epoch,
        &[event(&id, 2, "end")],
        &[],
        Some(&ended("x")),
        None,
        &Default::default(),
    )
    .await
    .expect("end");
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        b.lapsed(10).await.expect("lapsed"),
        std::slice::from_ref(&id)
    );
    assert_eq!(b.claim(&id).await.expect("claim"), Claim::Ended);
    assert!(b.lapsed(10).await.expect("lapsed").is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_restarted_without_persistence_fails_running_runs_and_takes_new_ones() {
    use futures::StreamExt;
    let mut redis = RedisServer::start().expect("redis-server");
    let server = durable_replica(&redis).await;
    let client = server.client().await.expect("client");
    let mut stream = client
        .raw()
        .run_agent(agent("slow", "x"))
        .await
        .expect("run")
        .into_inner();
    stream.next().await.expect("open").expect("event");
    // Every key is lost: the running run's next write finds no record.
    redis.restart().expect("restart");
    let began = std::time::Instant::now();
    let mut ended = None;
    while let Some(e) = tokio::time::timeout(Duration::from_secs(10), stream.next())
        .await
        .expect("the stream ends, it never hangs")
    {
        if let Err(e) = e {
            ended = Some(e);
        }
    }
    let err = ended.expect("an error ends the stream");
    assert_eq!(err.code(), tonic::Code::Unavailable, "{err:?}");
    assert!(err.message().contains("gone"), "{err:?}");
    assert!(
        began.elapsed() < Duration::from_secs(5),
        "{:?}",
        began.elapsed()
    );
    // New runs are recorded in the new Redis and complete.
    let events = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            match client.run_agent_to_end(agent("chatty", "x")).await {
                Ok(events) => return events,
                Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        }
    })
    .await
    .expect("a new run completes");
    baton_e2e::events::check_stream_rules(&events);
}

/// Over the HTTP face too: a run started on one replica is read, listed
/// and followed (SSE) on another that shares only Redis.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_replica_answers_a_durable_run_over_http() {
    let redis = RedisServer::start().expect("redis-server");
    let (a, b) = (durable_replica(&redis).await, durable_replica(&redis).await);
    let http = reqwest::Client::new();
    let started: serde_json::Value = http
        .post(format!("{}/v1/runs", a.endpoint()))
        .body(r#"{"agent": "chatty", "input": "go"}"#)
        .send()
        .await
        .expect("start on a")
        .json()
        .await
        .expect("json");
    let run_id = started["runId"].as_str().expect("runId").to_owned();
    // Its events from b, to the end.
    let events = http
        .get(format!("{}/v1/runs/{run_id}/events", b.endpoint()))
        .send()
        .await
        .expect("watch on b")
        .text()
        .await
        .expect("the whole stream");
    let ids: Vec<u64> = events
        .lines()
        .filter_map(|l| l.strip_prefix("id: "))
        .map(|n| n.parse().expect("seq"))
        .collect();
    assert_eq!(ids, (1..=ids.len() as u64).collect::<Vec<_>>());
    assert!(events.contains("event: runCompleted"), "{events}");
    let run: serde_json::Value = http
        .get(format!("{}/v1/runs/{run_id}", b.endpoint()))
        .send()
        .await
        .expect("get on b")
        .json()
        .await
        .expect("json");
    assert_eq!(run["status"], "RUN_STATUS_COMPLETED");
    assert_eq!(run["lastSeq"], ids.len().to_string());
    let page: serde_json::Value = http
        .get(format!("{}/v1/runs", b.endpoint()))
        .send()
        .await
        .expect("list on b")
        .json()
        .await
        .expect("json");
    assert_eq!(page["runs"][0]["runId"], run_id);
}

/// A fork whose start Redis recorded but whose reply was lost: its replica
/// asks again (the same answer), and when it gives the fork up it finds it
/// started after all and runs it — the fork never both fails to its caller
/// and runs. A fork whose start was never recorded is given up: it is not
/// resumable, and no replica runs it.
#[tokio::test]
async fn a_fork_whose_start_reply_was_lost_runs_and_one_never_started_is_given_up() {
    let redis = RedisServer::start().expect("redis-server");
    let runs = RedisRuns::new(
        &config(&redis.url()),
        Duration::from_secs(60),
        "a",
        Duration::from_secs(5),
    )
    .expect("runs");
    let fork = |origin: &str| RunMeta {
        forked_from: Some(baton_orchestrator::run::view::Origin {
            run_id: origin.into(),
            seq: 3,
            edited: false,
        }),
        ..meta("acme")
    };
    let started = fork("o1");
    let epoch = runs
        .create(&started, &[], Duration::from_secs(60))
        .await
        .expect("create");
    assert!(runs.is_starting(&started.run_id).await.expect("starting"));
    // Applied, reply lost, asked again: the same answer.
    assert!(runs.started(&started.run_id, epoch).await.expect("started"));
    assert!(runs.started(&started.run_id, epoch).await.expect("again"));
    assert_eq!(
        runs.abandon_start(&started.run_id, epoch)
            .await
            .expect("abandon"),
        baton_orchestrator::run::durable::Abandon::Started
    );
    let never = fork("o2");
    let epoch = runs
        .create(&never, &[], Duration::from_secs(60))
        .await
        .expect("create");
    assert_eq!(
        runs.abandon_start(&never.run_id, epoch)
            .await
            .expect("abandon"),
        baton_orchestrator::run::durable::Abandon::Abandoned
    );
    // Given up: still starting (a claim ends it failed, never resumes it),
    // and its former owner may no longer write.
    assert!(runs.is_starting(&never.run_id).await.expect("starting"));
    let written = runs
        .append(
            &never.run_id,
            epoch,
            &[event(&never.run_id, 1, "late")],
            &[],
            None,
            None,
            &Default::default(),
        )
        .await
        .expect("append");
    assert_eq!(written, Append::Fenced);
    assert_eq!(
        runs.abandon_start(&never.run_id, epoch)
            .await
            .expect("again"),
        baton_orchestrator::run::durable::Abandon::Lost
    );
}
