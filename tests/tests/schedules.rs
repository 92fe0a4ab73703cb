//! Scheduled runs end to end: a schedule's ticks start detached runs
//! labelled with it (in memory; paused, resumed, deleted); overlap
//! policies against a run that waits for a person; the agents file's
//! schedules; bad input on every field, at and over each limit; and in
//! Redis, real replica processes: a schedule every second for 30 s fires
//! every tick exactly once across a rolling restart of one replica and a
//! SIGKILL of the other.

use std::{
    collections::{BTreeMap, BTreeSet},
    time::{Duration, Instant},
};

use baton_client::{OrchestratorClient, pb};
use baton_e2e::{OrchestratorServer, agent_request};

const AGENTS: &str = r#"
scripts:
  quick:
    - text: "done"
  clerk:
    - text: "filing"
      calls:
        - tool: write_context
          args: {key: files/last, value: "{{input}}"}
    - text: "Filed."
agents:
  quick:
    model: scripted:quick
  clerk:
    model: scripted:clerk
    tools: [write_context]
    approvals:
      write_context: always
"#;

/// Ticks down to a second, looked for every 50 ms.
fn fast(c: &mut baton_orchestrator::config::Config) {
    c.schedules.min_interval = Duration::from_secs(1);
    c.schedules.poll = Duration::from_millis(50);
}

fn every(secs: i64) -> Option<baton_proto::wkt::Duration> {
    Some(baton_proto::wkt::Duration {
        seconds: secs,
        nanos: 0,
    })
}

fn quick_every(secs: i64) -> pb::CreateScheduleRequest {
    pb::CreateScheduleRequest {
        agent: Some(agent_request("quick", "tick")),
        interval: every(secs),
        ..Default::default()
    }
}

fn ms(t: &Option<baton_proto::wkt::Timestamp>) -> i64 {
    t.as_ref()
        .map_or(0, |t| t.seconds * 1000 + i64::from(t.nanos) / 1_000_000)
}

/// Waits until `s`'s recent ticks satisfy `done`; the schedule then.
async fn wait_for(
    client: &OrchestratorClient,
    id: &str,
    within: Duration,
    done: impl Fn(&pb::Schedule) -> bool,
) -> pb::Schedule {
    let deadline = Instant::now() + within;
    loop {
        let s = client.get_schedule(id).await.expect("get");
        if done(&s) {
            return s;
        }
        assert!(Instant::now() < deadline, "not within {within:?}: {s:#?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn fired(s: &pb::Schedule) -> Vec<&pb::ScheduleTick> {
    s.recent
        .iter()
        .filter(|t| t.outcome == pb::ScheduleTickOutcome::Fired as i32)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ticks_start_labelled_runs_and_stop_while_paused_and_once_deleted() {
    let server = OrchestratorServer::start(AGENTS, None, fast)
        .await
        .expect("server");
    let client = server.client().await.expect("client");
    let made = client
        .create_schedule(pb::CreateScheduleRequest {
            description: "every second".into(),
            ..quick_every(1)
        })
        .await
        .expect("create");
    assert!(made.schedule_id.starts_with("sch_"));
    assert_eq!(made.target, "quick");
    assert_eq!(made.next_fire_times.len(), 5);
    let created = ms(&made.created_at);
    assert_eq!(ms(&Some(made.next_fire_times[0])), created + 1000);
    let id = made.schedule_id.clone();
    let s = wait_for(&client, &id, Duration::from_secs(10), |s| {
        fired(s).len() >= 3
    })
    .await;
    // Newest first, one a second, each its own run, labelled.
    let ticks: Vec<i64> = fired(&s).iter().map(|t| ms(&t.tick_at)).collect();
    assert_eq!(ticks[0] - ticks[1], 1000);
    assert_eq!((ticks[1] - created) % 1000, 0);
    for t in fired(&s).iter().skip(1) {
        let run = client.get_run(&t.run_id).await.expect("run");
        assert_eq!(run.schedule_id, id);
        assert_eq!(ms(&run.schedule_tick_at), ms(&t.tick_at));
        assert_eq!(run.target, "quick");
        assert_eq!(run.status, pb::RunStatus::Completed as i32);
        assert_eq!(t.run_status, pb::RunStatus::Completed as i32);
    }

    // Paused: nothing fires, nothing is shown next.
    let paused = client.pause_schedule(&id).await.expect("pause");
    assert!(paused.paused);
    assert!(paused.next_fire_times.is_empty());
    let before = fired(&client.get_schedule(&id).await.expect("get")).len();
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let after = client.get_schedule(&id).await.expect("get");
    assert_eq!(fired(&after).len(), before, "nothing fired while paused");
    // Resumed: from its next tick on, none of the paused ones.
    let resumed_at = baton_orchestrator::run::launch::now_ms();
    let resumed = client.resume_schedule(&id).await.expect("resume");
    assert!(!resumed.paused);
    let s = wait_for(&client, &id, Duration::from_secs(5), |s| {
        fired(s).len() > before
    })
    .await;
    assert!(
        ms(&fired(&s)[0].tick_at) >= resumed_at - 1,
        "no paused tick fired"
    );

    // Deleted: gone, its runs stay.
    let last_run = fired(&s)[0].run_id.clone();
    client.delete_schedule(&id).await.expect("delete");
    let e = client.get_schedule(&id).await.expect_err("gone");
    assert_eq!(e.field(), Some("schedule_id"), "{e}");
    assert_eq!(e.code(), tonic::Code::NotFound);
    assert!(client.list_schedules().await.expect("list").is_empty());
    let run = client.get_run(&last_run).await.expect("its run stays");
    assert_eq!(run.schedule_id, id);
    let count = async || {
        client
            .list_runs(pb::RunStatus::Unspecified, 1000, "")
            .await
            .expect("runs")
            .runs
            .len()
    };
    let runs = count().await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(count().await, runs, "nothing fires once deleted");
    server.shutdown().await.expect("shutdown");
}

/// A run that waits for a person overlaps the next ticks: `skip` records
/// them skipped, `queue_one` keeps one and fires it once the run ends,
/// `allow` fires anyway.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overlap_policies_skip_queue_one_or_allow() {
    let server = OrchestratorServer::start(AGENTS, None, fast)
        .await
        .expect("server");
    let client = server.client().await.expect("client");
    let waiting = |overlap: pb::ScheduleOverlap| {
        let mut run = agent_request("clerk", "file it");
        run.approval_mode = pb::ApprovalMode::Ask as i32;
        pb::CreateScheduleRequest {
            agent: Some(run),
            interval: every(1),
            overlap: overlap as i32,
            ..Default::default()
        }
    };
    let skip = client
        .create_schedule(waiting(pb::ScheduleOverlap::Skip))
        .await
        .expect("skip");
    let queue = client
        .create_schedule(waiting(pb::ScheduleOverlap::QueueOne))
        .await
        .expect("queue");
    let allow = client
        .create_schedule(waiting(pb::ScheduleOverlap::Allow))
        .await
        .expect("allow");
    let outcomes = |s: &pb::Schedule, o: pb::ScheduleTickOutcome| {
        s.recent.iter().filter(|t| t.outcome == o as i32).count()
    };
    let s = wait_for(&client, &skip.schedule_id, Duration::from_secs(10), |s| {
        outcomes(s, pb::ScheduleTickOutcome::Skipped) >= 2
    })
    .await;
    assert_eq!(fired(&s).len(), 1, "one run, the rest skipped: {s:#?}");
    let first = fired(&s)[0].run_id.clone();
    assert!(
        s.recent
            .iter()
            .filter(|t| t.outcome == pb::ScheduleTickOutcome::Skipped as i32)
            .all(|t| t.run_id == first)
    );
    let q = wait_for(&client, &queue.schedule_id, Duration::from_secs(10), |s| {
        outcomes(s, pb::ScheduleTickOutcome::Queued) == 1
            && outcomes(s, pb::ScheduleTickOutcome::Skipped) >= 1
    })
    .await;
    assert_eq!(fired(&q).len(), 1);
    let queued_tick = q
        .recent
        .iter()
        .find(|t| t.outcome == pb::ScheduleTickOutcome::Queued as i32)
        .map(|t| ms(&t.tick_at))
        .expect("queued");
    // The queued tick is the next to fire.
    assert_eq!(ms(&Some(q.next_fire_times[0])), queued_tick);
    // Its run ends (approved): the queued tick fires.
    let run = fired(&q)[0].run_id.clone();
    let mut seen = client.watch_run(&run, 0, None).await.expect("watch");
    use futures::StreamExt as _;
    while let Some(e) = seen.next().await {
        if let Some(pb::run_event::Payload::ApprovalRequested(a)) = e.expect("event").payload {
            client
                .resolve_approval(&run, &a.approval_id, true, "ok")
                .await
                .expect("approve");
        }
    }
    let q = wait_for(&client, &queue.schedule_id, Duration::from_secs(10), |s| {
        fired(s).len() == 2
    })
    .await;
    assert_eq!(
        ms(&fired(&q)[0].tick_at),
        queued_tick,
        "the queued tick fired"
    );
    let a = wait_for(&client, &allow.schedule_id, Duration::from_secs(10), |s| {
        fired(s).len() >= 3
    })
    .await;
    assert_eq!(outcomes(&a, pb::ScheduleTickOutcome::Skipped), 0);
    server.shutdown().await.expect("shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_schedules_are_refused_naming_the_field_and_make_nothing() {
    let server = OrchestratorServer::start(AGENTS, None, |c| {
        fast(c);
        c.schedules.min_interval = Duration::from_secs(5);
        c.schedules.max_per_tenant = 2;
    })
    .await
    .expect("server");
    let client = server.client().await.expect("client");
    let now = baton_orchestrator::run::launch::now_ms();
    let cron = |c: &str, tz: &str| pb::CreateScheduleRequest {
        agent: Some(agent_request("quick", "x")),
        cron: c.into(),
        time_zone: tz.into(),
        ..Default::default()
    };
    let cases: Vec<(pb::CreateScheduleRequest, &str)> = vec![
        (cron("not a cron", ""), "cron"),
        (cron("61 * * * *", ""), "cron"),
        (cron("*/2 * * * * *", ""), "cron"),
        (cron("0 9 * * *", "Europe/Atlantis"), "time_zone"),
        (cron("", ""), "cron"),
        (
            pb::CreateScheduleRequest {
                interval: every(60),
                ..cron("0 9 * * *", "")
            },
            "interval",
        ),
        (quick_every(4), "interval"),
        (
            pb::CreateScheduleRequest {
                end_at: Some(baton_orchestrator::schedule::spec::timestamp(now - 1000)),
                ..cron("0 9 * * *", "UTC")
            },
            "end_at",
        ),
        (
            pb::CreateScheduleRequest {
                agent: None,
                ..cron("0 9 * * *", "")
            },
            "agent",
        ),
        (
            pb::CreateScheduleRequest {
                agent: Some(agent_request("nobody", "x")),
                ..cron("0 9 * * *", "")
            },
            "agent.agent",
        ),
        (
            pb::CreateScheduleRequest {
                agent: Some(agent_request("quick", "")),
                ..cron("0 9 * * *", "")
            },
            "agent.input",
        ),
        (
            pb::CreateScheduleRequest {
                pipeline: Some(pb::RunPipelineRequest::default()),
                ..cron("0 9 * * *", "")
            },
            "pipeline",
        ),
        (
            pb::CreateScheduleRequest {
                agent: None,
                pipeline: Some(pb::RunPipelineRequest::default()),
                ..cron("0 9 * * *", "")
            },
            "pipeline.pipeline",
        ),
        (
            pb::CreateScheduleRequest {
                overlap: 9,
                ..cron("0 9 * * *", "")
            },
            "overlap",
        ),
        (
            pb::CreateScheduleRequest {
                description: "d".repeat(257),
                ..cron("0 9 * * *", "")
            },
            "description",
        ),
    ];
    for (request, field) in cases {
        let e = client.create_schedule(request).await.expect_err(field);
        assert_eq!(e.field(), Some(field), "{e}");
        assert_eq!(e.code(), tonic::Code::InvalidArgument, "{e}");
    }
    assert!(
        client.list_schedules().await.expect("list").is_empty(),
        "nothing made"
    );
    // At the limits: the shortest interval, the longest description, a
    // cron with seconds at the interval, and the tenant's most schedules.
    client
        .create_schedule(pb::CreateScheduleRequest {
            description: "d".repeat(256),
            ..quick_every(5)
        })
        .await
        .expect("at the limits");
    client
        .create_schedule(pb::CreateScheduleRequest {
            paused: true,
            ..cron("*/5 * * * * *", "Asia/Kolkata")
        })
        .await
        .expect("a cron with seconds at the interval");
    let e = client
        .create_schedule(cron("0 9 * * *", ""))
        .await
        .expect_err("over the tenant's most");
    assert_eq!(e.code(), tonic::Code::ResourceExhausted, "{e}");
    assert_eq!(client.list_schedules().await.expect("list").len(), 2);
    let e = client
        .pause_schedule("sch_nope")
        .await
        .expect_err("unknown");
    assert_eq!(
        (e.code(), e.field()),
        (tonic::Code::NotFound, Some("schedule_id"))
    );

    // The HTTP face names the field too.
    let http = reqwest::Client::new();
    let res = http
        .post(format!("http://{}/v1/schedules", server.addr))
        .json(&serde_json::json!({
            "agent": {"agent": "quick", "input": "x"},
            "cron": "0 9 * * *",
            "timeZone": "Nowhere/Town"
        }))
        .send()
        .await
        .expect("post");
    assert_eq!(res.status(), 400);
    let body: serde_json::Value = res.json().await.expect("json");
    assert_eq!(body["field"], "time_zone", "{body}");
    server.shutdown().await.expect("shutdown");
}

const FILE_AGENTS: &str = r#"
scripts:
  quick:
    - text: "done"
agents:
  quick:
    model: scripted:quick
schedules:
  heartbeat:
    description: "a run every second"
    agent: quick
    input: "beat"
    every: 1s
  nightly:
    agent: quick
    input: "night"
    cron: "0 2 * * *"
    time_zone: Europe/Paris
    overlap: queue_one
    missed: run_once
"#;

/// The agents file's schedules fire and are listed, and only the file
/// changes them; a file with a bad schedule is refused naming it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agents_files_schedules_fire_and_only_the_file_changes_them() {
    let server = OrchestratorServer::start(FILE_AGENTS, None, fast)
        .await
        .expect("server");
    let client = server.client().await.expect("client");
    let s = wait_for(&client, "file:heartbeat", Duration::from_secs(10), |s| {
        fired(s).len() >= 2
    })
    .await;
    assert!(s.from_agents_file);
    assert_eq!(s.description, "a run every second");
    let listed = client.list_schedules().await.expect("list");
    let ids: Vec<&str> = listed.iter().map(|s| s.schedule_id.as_str()).collect();
    assert_eq!(ids, ["file:heartbeat", "file:nightly"]);
    let nightly = &listed[1];
    assert_eq!(nightly.time_zone, "Europe/Paris");
    assert_eq!(nightly.overlap, pb::ScheduleOverlap::QueueOne as i32);
    assert_eq!(nightly.missed, pb::ScheduleMissed::RunOnce as i32);
    // Declared again (a reload, a replica starting): it keeps its
    // creation, so its interval's phase, and its ticks.
    baton_orchestrator::app::schedules::declare_from_file(server.core.clone()).await;
    let again = client.get_schedule("file:heartbeat").await.expect("get");
    assert_eq!(again.created_at, s.created_at);
    assert!(fired(&again).len() >= fired(&s).len());
    // Paused in the file: paused; the file's too-short interval left out.
    let catalog = baton_orchestrator::catalog::Catalog::from_yaml(
        &FILE_AGENTS
            .replace("    every: 1s\n", "    every: 1s\n    paused: true\n")
            .replace(
                "    cron: \"0 2 * * *\"\n    time_zone: Europe/Paris\n",
                "    every: 10ms\n",
            ),
    )
    .expect("the file parses");
    let declared = baton_orchestrator::schedule::file::declared(&catalog).expect("declared");
    server
        .core
        .declare_schedules(declared)
        .await
        .expect("declare");
    let listed = client.list_schedules().await.expect("list");
    let ids: Vec<&str> = listed.iter().map(|s| s.schedule_id.as_str()).collect();
    assert_eq!(ids, ["file:heartbeat"], "nightly, at 10ms, left out");
    assert!(listed[0].paused && listed[0].next_fire_times.is_empty());
    for e in [
        client
            .pause_schedule("file:heartbeat")
            .await
            .expect_err("pause"),
        client
            .delete_schedule("file:heartbeat")
            .await
            .expect_err("delete"),
    ] {
        assert_eq!(e.code(), tonic::Code::FailedPrecondition, "{e}");
        assert_eq!(e.field(), Some("schedule_id"));
    }
    server.shutdown().await.expect("shutdown");

    let catalog = baton_orchestrator::catalog::Catalog::from_yaml(
        &FILE_AGENTS.replace("time_zone: Europe/Paris", "time_zone: Europe/Nowhere"),
    )
    .expect("the file parses");
    let e = baton_orchestrator::schedule::file::declared(&catalog).expect_err("refused");
    assert!(e.starts_with("schedules.nightly.time_zone:"), "{e}");
    let catalog = baton_orchestrator::catalog::Catalog::from_yaml(&FILE_AGENTS.replace(
        "agent: quick\n    input: \"night\"",
        "agent: slow\n    input: \"night\"",
    ))
    .expect("the file parses");
    let e = baton_orchestrator::schedule::file::declared(&catalog).expect_err("refused");
    assert!(e.starts_with("schedules.nightly.agent:"), "{e}");
}

/// Every run a schedule started, by its tick (from GetRun), over every
/// page of ListRuns.
async fn runs_by_tick(client: &OrchestratorClient, id: &str) -> BTreeMap<i64, Vec<String>> {
    let mut out: BTreeMap<i64, Vec<String>> = BTreeMap::new();
    let mut token = String::new();
    loop {
        let page = client
            .list_runs(pb::RunStatus::Unspecified, 500, &token)
            .await
            .expect("list runs");
        for r in &page.runs {
            let run = client.get_run(&r.run_id).await.expect("run");
            if run.schedule_id == id {
                out.entry(ms(&run.schedule_tick_at))
                    .or_default()
                    .push(run.run_id);
            }
        }
        if page.next_page_token.is_empty() {
            return out;
        }
        token = page.next_page_token;
    }
}

/// Two replica processes and a schedule every second for 30 s: one
/// replica is restarted gracefully (SIGTERM), then the other is SIGKILLed
/// and started again; every tick from the first to the last fires exactly
/// once, none lost, none doubled.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_tick_fires_once_across_a_rolling_restart_and_a_sigkill() {
    use baton_e2e::chaos::{Binaries, Cluster, Options};
    let binaries = match Binaries::from_env() {
        Some(found) => found.expect("BATON_BIN_DIR holds the binaries"),
        None => Binaries {
            orchestrator: env!("CARGO_BIN_EXE_baton-e2e-orchestrator").into(),
            context_store: env!("CARGO_BIN_EXE_baton-e2e-context-store").into(),
        },
    };
    let mut options = Options::short(1, false, binaries);
    options.extra_env = vec![
        ("BATON_ORCH_SCHEDULES__MIN_INTERVAL".into(), "1s".into()),
        ("BATON_ORCH_SCHEDULES__POLL".into(), "100ms".into()),
        ("BATON_ORCH_SCHEDULES__LEASE".into(), "2s".into()),
    ];
    let dir = tempfile::tempdir().expect("dir");
    let agents = dir.path().join("agents.yaml");
    std::fs::write(&agents, AGENTS).expect("agents");
    let mut cluster = Cluster::start(&options, &agents, dir.path())
        .await
        .expect("cluster");
    // Two replicas.
    cluster.replicas[2].kill();
    let endpoints = cluster.endpoints();
    let c0 = OrchestratorClient::connect(endpoints[0].clone())
        .await
        .expect("r0");
    let c1 = OrchestratorClient::connect(endpoints[1].clone())
        .await
        .expect("r1");
    let made = c0
        .create_schedule(pb::CreateScheduleRequest {
            overlap: pb::ScheduleOverlap::Allow as i32,
            ..quick_every(1)
        })
        .await
        .expect("create");
    let id = made.schedule_id.clone();
    let created = ms(&made.created_at);
    let started = Instant::now();
    // r1 restarted gracefully at ~8 s.
    tokio::time::sleep(Duration::from_secs(8)).await;
    cluster.replicas[1].signal("-TERM").expect("term");
    assert!(
        cluster.replicas[1]
            .exited_within(Duration::from_secs(10))
            .await
    );
    cluster.restart(1).await.expect("r1 again");
    // r0 SIGKILLed at ~18 s, started again after a moment.
    tokio::time::sleep(Duration::from_secs(18).saturating_sub(started.elapsed())).await;
    cluster.replicas[0].kill();
    tokio::time::sleep(Duration::from_secs(1)).await;
    cluster.restart(0).await.expect("r0 again");
    tokio::time::sleep(Duration::from_secs(30).saturating_sub(started.elapsed())).await;
    // Stopped: paused through the other replica; what was due is fired.
    let paused = c1.pause_schedule(&id).await.expect("pause");
    tokio::time::sleep(Duration::from_secs(3)).await;
    let last = paused
        .recent
        .iter()
        .map(|t| ms(&t.tick_at))
        .max()
        .expect("ticks");
    let c0 = OrchestratorClient::connect(endpoints[0].clone())
        .await
        .expect("r0");
    let by_tick = runs_by_tick(&c0, &id).await;
    let doubled: Vec<_> = by_tick.iter().filter(|(_, r)| r.len() > 1).collect();
    assert!(doubled.is_empty(), "ticks fired twice: {doubled:?}");
    let fired: BTreeSet<i64> = by_tick.keys().copied().collect();
    let last = last.max(*fired.last().expect("fired"));
    let expected: BTreeSet<i64> = (1..)
        .map(|k| created + k * 1000)
        .take_while(|t| *t <= last)
        .collect();
    let lost: Vec<_> = expected.difference(&fired).collect();
    assert!(
        lost.is_empty(),
        "ticks lost: {lost:?} of {}",
        expected.len()
    );
    assert!(expected.len() >= 25, "{} ticks in 30 s", expected.len());
    let schedule = c0.get_schedule(&id).await.expect("get");
    assert!(
        schedule
            .recent
            .iter()
            .all(|t| t.outcome == pb::ScheduleTickOutcome::Fired as i32),
        "no tick skipped or missed: {schedule:#?}"
    );
}

/// The window a killed replica leaves: a tick recorded as pending with
/// its run's id, its run started (or not) before the replica died. The
/// replica that takes the schedule over finds the run started and records
/// it, or starts it with that id; either way one run for the tick. A
/// pending tick of before a pause is only looked for: not started.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pending_tick_is_fired_once_whether_or_not_its_run_started() {
    use baton_orchestrator::schedule::{Fired, Starter as _};
    let redis = baton_e2e::RedisServer::start().expect("redis");
    let config = {
        let durable = baton_e2e::durable_runs(redis.url());
        move |c: &mut baton_orchestrator::config::Config| {
            durable(c);
            fast(c);
        }
    };
    let server = OrchestratorServer::start(AGENTS, None, config)
        .await
        .expect("server");
    let client = server.client().await.expect("client");
    let mut conn = redis::Client::open(redis.url())
        .expect("redis")
        .get_multiplexed_async_connection()
        .await
        .expect("conn");
    for (started_before, paused) in [(true, false), (false, false), (false, true)] {
        // Not due for an hour, or paused.
        let made = client
            .create_schedule(pb::CreateScheduleRequest {
                paused,
                ..quick_every(3600)
            })
            .await
            .expect("create");
        let id = made.schedule_id;
        let tick = ms(&made.created_at) + 1000;
        let run_id = uuid::Uuid::now_v7().to_string();
        let stored = server
            .core
            .schedules()
            .stored("", &id)
            .await
            .expect("stored");
        if started_before {
            // The dead replica got as far as starting it.
            assert_eq!(
                server.core.fire(&stored, &run_id, tick).await,
                Fired::Started
            );
            // A second start of the same id is refused by the run store.
            assert_eq!(
                server.core.fire(&stored, &run_id, tick).await,
                Fired::Existed
            );
        }
        let state = serde_json::json!({
            "last_ms": tick - 1000,
            "pending": {"tick_ms": tick, "run_id": run_id},
            "recent": []
        });
        let _: () = redis::cmd("HSET")
            .arg(format!("baton:sch:{{all}}:s:{id}"))
            .arg("state")
            .arg(state.to_string())
            .query_async(&mut conn)
            .await
            .expect("hset");
        if paused {
            // Resumed after the tick: its run is not started now.
            tokio::time::sleep(Duration::from_millis(1100)).await;
            client.resume_schedule(&id).await.expect("resume");
        }
        {
            // Due now, as it was when its replica died.
            let _: () = redis::cmd("ZADD")
                .arg("baton:sch:{all}:due")
                .arg(0)
                .arg(&id)
                .query_async(&mut conn)
                .await
                .expect("zadd");
        }
        let s = wait_for(&client, &id, Duration::from_secs(10), |s| {
            s.recent.iter().any(|t| ms(&t.tick_at) == tick)
        })
        .await;
        let t = s
            .recent
            .iter()
            .find(|t| ms(&t.tick_at) == tick)
            .expect("tick");
        let by_tick = runs_by_tick(&client, &id).await;
        if paused {
            assert_eq!(t.outcome, pb::ScheduleTickOutcome::Refused as i32, "{t:?}");
            assert!(t.message.contains("paused"), "{t:?}");
            assert!(by_tick.is_empty(), "nothing started: {by_tick:?}");
        } else {
            assert_eq!(t.outcome, pb::ScheduleTickOutcome::Fired as i32);
            assert_eq!(t.run_id, run_id);
            assert_eq!(
                by_tick.get(&tick),
                Some(&vec![run_id.clone()]),
                "one run for the tick ({started_before}): {by_tick:?}"
            );
        }
        client.delete_schedule(&id).await.expect("delete");
    }
    server.shutdown().await.expect("shutdown");
}
