//! Webhooks end to end: deliveries of runs' events to a real receiver
//! (`tests/webhooks/receiver.py`) that checks every signature with the
//! PyPI `standardwebhooks` package; retries (500 then 200, a receiver
//! that hangs past the timeout, `Retry-After`), dead letters and their
//! redelivery, secret rotation, bad input on every field, and durable
//! deliveries in Redis: made once with two replicas, and made again with
//! the same `webhook-id` by another replica when the one delivering is
//! SIGKILLed mid-delivery.

use std::time::{Duration, Instant};

use baton_client::{OrchestratorClient, pb};
use baton_e2e::{OrchestratorServer, RedisServer, agent_request, durable_runs, webhooks::Receiver};
use futures::StreamExt;
use serde_json::Value;

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

/// A secret of the caller's own (the Standard Webhooks example's).
const OWN: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

/// Short tries and retries, deliveries to this machine allowed.
fn fast(c: &mut baton_orchestrator::config::Config) {
    c.webhooks.allowed_hosts = vec!["127.0.0.1".into()];
    c.webhooks.timeout = Duration::from_secs(1);
    c.webhooks.retry_initial = Duration::from_millis(200);
    c.webhooks.retry_max = Duration::from_secs(1);
    c.webhooks.retry_for = Duration::from_secs(5);
    c.webhooks.poll = Duration::from_millis(100);
}

/// Runs `agent` to its end, approving what it asks; its events.
async fn run_to_end(
    client: &OrchestratorClient,
    mut request: pb::RunAgentRequest,
) -> Vec<pb::RunEvent> {
    request.approval_mode = pb::ApprovalMode::Ask as i32;
    let mut events = client.run_agent(request).await.expect("run");
    let mut out = Vec::new();
    while let Some(e) = events.next().await {
        let e = e.expect("event");
        if let Some(pb::run_event::Payload::ApprovalRequested(a)) = &e.payload {
            client
                .resolve_approval(&e.run_id, &a.approval_id, true, "ok")
                .await
                .expect("approve");
        }
        out.push(e);
    }
    out
}

fn types(log: &[Value]) -> Vec<String> {
    log.iter()
        .map(|e| e["type"].as_str().unwrap_or_default().to_owned())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deliveries_are_signed_in_order_retried_and_verified_by_a_standard_webhooks_library() {
    let receiver = Receiver::start();
    let server = OrchestratorServer::start(AGENTS, None, fast)
        .await
        .expect("server");
    let client = server.client().await.expect("client");

    // A tenant's webhook (its secret made by Baton) and a run's own.
    let made = client
        .create_webhook(pb::CreateWebhookRequest {
            url: receiver.url("/tenant"),
            events: vec![
                "run.started".into(),
                "run.waiting".into(),
                "run.completed".into(),
            ],
            description: "tests".into(),
            secret: String::new(),
        })
        .await
        .expect("create");
    assert!(made.secret.starts_with("whsec_"), "{}", made.secret);
    receiver.config("/tenant", &[&made.secret], "ok").await;
    receiver.config("/own", &[OWN], "fail:2").await;
    let mut request = agent_request("clerk", "report 7");
    request.webhooks = vec![pb::RunWebhook {
        url: receiver.url("/own"),
        events: vec!["run.completed".into()],
        secret: OWN.into(),
        ..Default::default()
    }];
    let events = run_to_end(&client, request).await;
    let run_id = events[0].run_id.clone();

    let tenant = receiver
        .wait("/tenant", Duration::from_secs(10), |l| l.len() >= 3)
        .await;
    assert_eq!(
        types(&tenant),
        ["run.started", "run.waiting", "run.completed"]
    );
    for d in &tenant {
        assert_eq!(d["verified"], serde_json::json!([true]), "{d:#}");
        assert_eq!(d["run_id"], run_id.as_str());
        assert!(d["id"].as_str().is_some_and(|i| i.starts_with("msg_")));
    }
    let ids: std::collections::HashSet<&str> =
        tenant.iter().filter_map(|d| d["id"].as_str()).collect();
    assert_eq!(ids.len(), 3, "each delivery its own id");
    // The body is the proto3 JSON mapping of the HTTP API.
    let completed = &tenant[2]["body"];
    assert_eq!(
        completed["data"]["event"]["runCompleted"]["output"],
        "Filed."
    );
    assert_eq!(completed["data"]["kind"], "RUN_KIND_AGENT");
    assert_eq!(completed["data"]["target"], "clerk");
    let waiting = &tenant[1]["body"]["data"]["event"];
    assert!(
        waiting["approvalRequested"]["approvalId"].is_string(),
        "{waiting:#}"
    );

    // 500, 500, then 200: three tries of one delivery, one id.
    let own = receiver
        .wait("/own", Duration::from_secs(10), |l| {
            l.iter().any(|d| d["status"] == 200)
        })
        .await;
    assert_eq!(own.len(), 3, "{own:#?}");
    assert_eq!(
        own.iter()
            .map(|d| d["status"].as_i64().unwrap_or(0))
            .collect::<Vec<_>>(),
        [500, 500, 200]
    );
    assert!(
        own.iter()
            .all(|d| d["id"] == own[0]["id"] && d["verified"] == serde_json::json!([true]))
    );
    assert!(own.iter().all(|d| d["type"] == "run.completed"));
    // With backoff between them (200 ms doubling, the upper half jittered).
    let gap = own[1]["at"].as_f64().unwrap_or(0.0) - own[0]["at"].as_f64().unwrap_or(0.0);
    assert!(gap >= 0.09, "retried after {gap} s");

    // The secrets are nowhere a client reads.
    let got = serde_json::to_string(&client.get_run(&run_id).await.expect("get")).expect("json");
    let watched: Vec<pb::RunEvent> = client
        .watch_run(&run_id, 0, None)
        .await
        .expect("watch")
        .map(|e| e.expect("event"))
        .collect()
        .await;
    let watched = serde_json::to_string(&watched).expect("json");
    let listed = serde_json::to_string(&client.list_webhooks().await.expect("list")).expect("json");
    for secret in [OWN, made.secret.as_str()] {
        let key = &secret[6..];
        for (what, text) in [
            ("GetRun", &got),
            ("WatchRun", &watched),
            ("ListWebhooks", &listed),
        ] {
            assert!(!text.contains(key), "{what} shows a secret");
        }
    }
    server.shutdown().await.expect("shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rotated_secret_signs_beside_the_new_one_until_its_overlap_ends() {
    let receiver = Receiver::start();
    let server = OrchestratorServer::start(AGENTS, None, fast)
        .await
        .expect("server");
    let client = server.client().await.expect("client");
    let made = client
        .create_webhook(pb::CreateWebhookRequest {
            url: receiver.url("/r"),
            events: vec!["run.completed".into()],
            ..Default::default()
        })
        .await
        .expect("create");
    let id = made.webhook.expect("webhook").webhook_id;
    let old = made.secret;
    let rotated = client
        .rotate_webhook_secret(&id, None)
        .await
        .expect("rotate");
    let new = rotated.secret;
    assert_ne!(old, new);
    assert!(
        rotated
            .webhook
            .expect("webhook")
            .previous_secret_expires_at
            .is_some()
    );
    receiver.config("/r", &[&old, &new], "ok").await;
    run_to_end(&client, agent_request("quick", "a")).await;
    let log = receiver
        .wait("/r", Duration::from_secs(10), |l| !l.is_empty())
        .await;
    assert_eq!(
        log[0]["verified"],
        serde_json::json!([true, true]),
        "both secrets verify"
    );
    assert_eq!(
        log[0]["signature"]
            .as_str()
            .unwrap_or_default()
            .split(' ')
            .count(),
        2
    );

    // Rotated again with no overlap: only the newest signs.
    let newest = client
        .rotate_webhook_secret(&id, Some(Duration::ZERO))
        .await
        .expect("rotate")
        .secret;
    receiver.config("/r", &[&new, &newest], "ok").await;
    run_to_end(&client, agent_request("quick", "b")).await;
    let log = receiver
        .wait("/r", Duration::from_secs(10), |l| l.len() >= 2)
        .await;
    assert_eq!(log[1]["verified"], serde_json::json!([false, true]));
    let too_long = client
        .rotate_webhook_secret(&id, Some(Duration::from_secs(8 * 24 * 3600)))
        .await
        .expect_err("over 7 days");
    assert_eq!(too_long.field(), Some("previous_valid_for"), "{too_long}");
    server.shutdown().await.expect("shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hanging_receivers_are_retried_dead_lettered_and_redelivered_with_the_same_id() {
    let receiver = Receiver::start();
    let server = OrchestratorServer::start(AGENTS, None, fast)
        .await
        .expect("server");
    let client = server.client().await.expect("client");
    receiver.config("/once", &[OWN], "hang-once").await;
    receiver.config("/never", &[OWN], "hang").await;
    receiver.config("/busy", &[OWN], "retry-after:2").await;
    let hook = |path: &str| pb::RunWebhook {
        url: receiver.url(path),
        events: vec!["run.completed".into()],
        secret: OWN.into(),
        ..Default::default()
    };
    let mut request = agent_request("quick", "x");
    request.webhooks = vec![hook("/once"), hook("/never"), hook("/busy")];
    let started = Instant::now();
    run_to_end(&client, request).await;

    // Hung past the timeout, then answered: the same delivery again.
    let once = receiver
        .wait("/once", Duration::from_secs(10), |l| l.len() >= 2)
        .await;
    assert_eq!(once[0]["id"], once[1]["id"]);
    assert_eq!(once[1]["status"], 200);

    // 503 with Retry-After: 2 — the next try waits those 2 s.
    let busy = receiver
        .wait("/busy", Duration::from_secs(10), |l| l.len() >= 2)
        .await;
    let waited = busy[1]["at"].as_f64().unwrap_or(0.0) - busy[0]["at"].as_f64().unwrap_or(0.0);
    assert!(waited >= 1.9, "Retry-After: 2 honoured ({waited} s)");

    // Never answered: tried until webhooks.retry_for (5 s), then a dead
    // letter.
    let deadline = Instant::now() + Duration::from_secs(20);
    let dead = loop {
        let dead = client.list_dead_letters(0).await.expect("dead letters");
        if !dead.is_empty() {
            break dead;
        }
        assert!(Instant::now() < deadline, "no dead letter in time");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert!(
        started.elapsed() >= Duration::from_secs(3),
        "given up too early"
    );
    assert_eq!(dead.len(), 1, "{dead:#?}");
    let d = &dead[0];
    assert_eq!(d.r#type, "run.completed");
    assert!(d.attempts >= 2, "{d:?}");
    assert!(
        d.last_error.contains("webhooks.timeout"),
        "{}",
        d.last_error
    );
    assert!(d.webhook_id.is_empty(), "a run's own webhook");
    let tries = receiver.log("/never").await;
    assert!(tries.len() >= 2 && tries.iter().all(|t| t["id"] == d.delivery_id.as_str()));

    // The receiver is back: redelivered, same id, signed again.
    receiver.config("/never", &[OWN], "ok").await;
    client
        .redeliver_dead_letter(&d.delivery_id)
        .await
        .expect("redeliver");
    let again = receiver
        .wait("/never", Duration::from_secs(10), |l| {
            l.iter().any(|t| t["status"] == 200)
        })
        .await;
    let last = again.last().expect("delivered");
    assert_eq!(last["id"], d.delivery_id.as_str());
    assert_eq!(last["verified"], serde_json::json!([true]));
    assert!(client.list_dead_letters(0).await.expect("list").is_empty());
    let gone = client
        .redeliver_dead_letter(&d.delivery_id)
        .await
        .expect_err("not dead any more");
    assert_eq!(gone.field(), Some("delivery_id"));
    server.shutdown().await.expect("shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_webhooks_are_refused_naming_the_field_and_start_nothing() {
    let server = OrchestratorServer::start(AGENTS, None, |c| {
        fast(c);
        c.webhooks.allowed_hosts = vec!["*".into(), "127.0.0.1".into()];
        c.webhooks.max_per_run = 2;
    })
    .await
    .expect("server");
    let client = server.client().await.expect("client");
    let ok = |url: &str| pb::RunWebhook {
        url: url.into(),
        events: vec![],
        secret: OWN.into(),
        ..Default::default()
    };
    let cases: Vec<(Vec<pb::RunWebhook>, &str)> = vec![
        (vec![ok("https://10.1.2.3/x")], "webhooks[0].url"),
        (vec![ok("http://hooks.example.com/x")], "webhooks[0].url"),
        (vec![ok("ftp://127.0.0.1/x")], "webhooks[0].url"),
        (vec![ok("not a url")], "webhooks[0].url"),
        (
            vec![
                ok("https://hooks.example.com/x"),
                pb::RunWebhook {
                    events: vec!["run.done".into()],
                    ..ok("https://hooks.example.com/y")
                },
            ],
            "webhooks[1].events[0]",
        ),
        (
            vec![pb::RunWebhook {
                secret: String::new(),
                ..ok("https://hooks.example.com/x")
            }],
            "webhooks[0].secret",
        ),
        (
            vec![pb::RunWebhook {
                secret: "whsec_short".into(),
                ..ok("https://hooks.example.com/x")
            }],
            "webhooks[0].secret",
        ),
        (
            vec![
                ok("https://a.example.com/"),
                ok("https://b.example.com/"),
                ok("https://c.example.com/"),
            ],
            "webhooks",
        ),
    ];
    for (hooks, field) in cases {
        let mut request = agent_request("quick", "x");
        request.webhooks = hooks;
        let e = match client.run_agent(request).await {
            Err(e) => e,
            Ok(mut s) => match s.next().await {
                Some(Err(e)) => e,
                other => panic!("{field}: started ({:?})", other.map(|e| e.map(|e| e.seq))),
            },
        };
        assert_eq!(e.field(), Some(field), "{e}");
    }
    // At the limit: two webhooks are taken.
    let mut request = agent_request("quick", "x");
    request.webhooks = vec![ok("https://a.example.com/"), ok("http://127.0.0.1:9/")];
    run_to_end(&client, request).await;
    let runs = client
        .list_runs(pb::RunStatus::Unspecified, 0, "")
        .await
        .expect("list");
    assert_eq!(runs.runs.len(), 1, "only the good request started a run");

    // The tenant API.
    let create = |url: &str| pb::CreateWebhookRequest {
        url: url.into(),
        ..Default::default()
    };
    for (request, field) in [
        (create("https://127.0.0.2/x"), "url"),
        (
            pb::CreateWebhookRequest {
                events: vec!["event.nope".into()],
                ..create("https://h.example.com/")
            },
            "events[0]",
        ),
        (
            pb::CreateWebhookRequest {
                description: "d".repeat(257),
                ..create("https://h.example.com/")
            },
            "description",
        ),
        (
            pb::CreateWebhookRequest {
                secret: "nope".into(),
                ..create("https://h.example.com/")
            },
            "secret",
        ),
    ] {
        let e = client.create_webhook(request).await.expect_err(field);
        assert_eq!(e.field(), Some(field), "{e}");
    }
    let at_limit = pb::CreateWebhookRequest {
        description: "d".repeat(256),
        ..create("https://h.example.com/")
    };
    let made = client
        .create_webhook(at_limit)
        .await
        .expect("256 characters is taken");
    let id = made.webhook.expect("webhook").webhook_id;
    assert_eq!(client.list_webhooks().await.expect("list").len(), 1);
    for e in [
        client.get_webhook("wh_nope").await.expect_err("unknown"),
        client.delete_webhook("wh_nope").await.expect_err("unknown"),
    ] {
        assert_eq!(
            (e.code(), e.field()),
            (tonic::Code::NotFound, Some("webhook_id")),
            "{e}"
        );
    }
    let e = client.list_dead_letters(1001).await.expect_err("over 1000");
    assert_eq!(e.field(), Some("page_size"));
    assert!(client.list_dead_letters(1000).await.is_ok());
    client.delete_webhook(&id).await.expect("delete");
    assert!(client.list_webhooks().await.expect("list").is_empty());

    // The HTTP face names the field too.
    let http = reqwest::Client::new();
    let answer = http
        .post(format!("http://{}/v1/webhooks", server.addr))
        .json(&serde_json::json!({"url": "https://10.0.0.1/x"}))
        .send()
        .await
        .expect("post");
    assert_eq!(answer.status(), 400);
    let body: Value = answer.json().await.expect("json");
    assert!(body.to_string().contains("url"), "{body}");
    server.shutdown().await.expect("shutdown");
}

/// Two replicas on one Redis, a tenant webhook, 20 runs started on either:
/// every delivery arrives once (no replica makes another's), in order
/// per run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn durable_deliveries_are_made_once_across_two_replicas_in_order_per_run() {
    let redis = RedisServer::start().expect("redis");
    let receiver = Receiver::start();
    let config = {
        let durable = durable_runs(redis.url());
        move |c: &mut baton_orchestrator::config::Config| {
            durable(c);
            fast(c);
        }
    };
    let a = OrchestratorServer::start(AGENTS, None, config.clone())
        .await
        .expect("a");
    let b = OrchestratorServer::start(AGENTS, None, config)
        .await
        .expect("b");
    let (ca, cb) = (a.client().await.expect("a"), b.client().await.expect("b"));
    let made = ca
        .create_webhook(pb::CreateWebhookRequest {
            url: receiver.url("/d"),
            events: vec![
                "run.started".into(),
                "event.message_completed".into(),
                "run.completed".into(),
            ],
            ..Default::default()
        })
        .await
        .expect("create");
    receiver.config("/d", &[&made.secret], "ok").await;
    // B reads the new subscription within its poll.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut runs = Vec::new();
    for i in 0..20 {
        let client = if i % 2 == 0 { &ca } else { &cb };
        let events = run_to_end(client, agent_request("quick", "x")).await;
        runs.push(events[0].run_id.clone());
    }
    let log = receiver
        .wait("/d", Duration::from_secs(20), |l| l.len() >= 60)
        .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let log = if receiver.log("/d").await.len() > log.len() {
        receiver.log("/d").await
    } else {
        log
    };
    assert_eq!(log.len(), 60, "3 deliveries a run, each once");
    for run in &runs {
        let of: Vec<&Value> = log.iter().filter(|d| d["run_id"] == run.as_str()).collect();
        assert_eq!(
            of.iter()
                .map(|d| d["type"].as_str().unwrap_or_default())
                .collect::<Vec<_>>(),
            ["run.started", "event.message_completed", "run.completed"],
            "in order for {run}"
        );
        assert!(
            of.iter()
                .all(|d| d["verified"] == serde_json::json!([true]))
        );
    }
    // Nothing is left due: a stream marked due while another replica held
    // it is let go at the latest once that claim's lease (2 × timeout +
    // 5 s) lapses and a worker finds it empty.
    let mut c = redis::Client::open(redis.url())
        .expect("redis")
        .get_multiplexed_async_connection()
        .await
        .expect("conn");
    let deadline = Instant::now() + Duration::from_secs(12);
    loop {
        let due: i64 = redis::cmd("ZCARD")
            .arg("baton:wh:due")
            .query_async(&mut c)
            .await
            .expect("zcard");
        if due == 0 {
            break;
        }
        assert!(Instant::now() < deadline, "{due} streams still due");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(
        receiver.log("/d").await.len(),
        60,
        "and nothing delivered twice meanwhile"
    );
    a.shutdown().await.expect("a");
    b.shutdown().await.expect("b");
}

/// A replica SIGKILLed while a delivery is in flight (the receiver holds
/// it): once its lease lapses another replica makes it, with the same
/// `webhook-id`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_killed_mid_delivery_leaves_it_to_another_with_the_same_id() {
    use baton_e2e::chaos::{Binaries, Cluster, Options};
    let binaries = match Binaries::from_env() {
        Some(found) => found.expect("BATON_BIN_DIR holds the binaries"),
        None => Binaries {
            orchestrator: env!("CARGO_BIN_EXE_baton-e2e-orchestrator").into(),
            context_store: env!("CARGO_BIN_EXE_baton-e2e-context-store").into(),
        },
    };
    let receiver = Receiver::start();
    let mut options = Options::short(1, false, binaries);
    options.extra_env = vec![
        (
            "BATON_ORCH_WEBHOOKS__ALLOWED_HOSTS".into(),
            r#"["127.0.0.1"]"#.into(),
        ),
        ("BATON_ORCH_WEBHOOKS__TIMEOUT".into(), "1s".into()),
        ("BATON_ORCH_WEBHOOKS__POLL".into(), "100ms".into()),
    ];
    let dir = tempfile::tempdir().expect("dir");
    let agents = dir.path().join("agents.yaml");
    std::fs::write(&agents, AGENTS).expect("agents");
    let mut cluster = Cluster::start(&options, &agents, dir.path())
        .await
        .expect("cluster");
    // Only r0 is up while the delivery is made.
    cluster.replicas[1].kill();
    cluster.replicas[2].kill();
    let endpoints = cluster.endpoints();
    let c0 = OrchestratorClient::connect(endpoints[0].clone())
        .await
        .expect("r0");
    receiver.config("/k", &[OWN], "hang-once").await;
    let mut request = agent_request("quick", "x");
    request.webhooks = vec![pb::RunWebhook {
        url: receiver.url("/k"),
        events: vec!["run.completed".into()],
        secret: OWN.into(),
        ..Default::default()
    }];
    run_to_end(&c0, request).await;
    let first = receiver
        .wait("/k", Duration::from_secs(10), |l| !l.is_empty())
        .await;
    // r0 holds the delivery (the receiver does not answer): killed.
    cluster.replicas[0].kill();
    let killed = Instant::now();
    cluster.restart(1).await.expect("r1");
    let log = receiver
        .wait("/k", Duration::from_secs(30), |l| {
            l.iter().any(|d| d["status"] == 200)
        })
        .await;
    let done = log.iter().find(|d| d["status"] == 200).expect("delivered");
    assert_eq!(done["id"], first[0]["id"], "the same webhook-id");
    assert_eq!(done["verified"], serde_json::json!([true]));
    assert!(killed.elapsed() < Duration::from_secs(30));
    assert_eq!(log.len(), 2, "made again once: {log:#?}");
}

/// A tenant's webhook declared in the config: delivered to, listed by the
/// API as the config's, and not deletable or rotatable through it; a
/// config whose secret file does not hold a secret is refused at start,
/// naming the field.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_webhook_declared_in_the_config_is_delivered_to_and_kept_by_the_config() {
    let receiver = Receiver::start();
    let dir = tempfile::tempdir().expect("dir");
    let secret_file = dir.path().join("whsec.txt");
    std::fs::write(&secret_file, format!("{OWN}\n")).expect("secret");
    let url = receiver.url("/config");
    let file = secret_file.display().to_string();
    let declared = move |c: &mut baton_orchestrator::config::Config| {
        fast(c);
        c.webhooks.subscriptions = vec![baton_orchestrator::config::webhooks::ConfigSubscription {
            tenant: String::new(),
            url: url.clone(),
            events: vec!["run.completed".into()],
            secret_file: file.clone(),
            description: "ops".into(),
        }];
    };
    let server = OrchestratorServer::start(AGENTS, None, declared.clone())
        .await
        .expect("server");
    let client = server.client().await.expect("client");
    receiver.config("/config", &[OWN], "ok").await;
    run_to_end(&client, agent_request("quick", "x")).await;
    let log = receiver
        .wait("/config", Duration::from_secs(10), |l| !l.is_empty())
        .await;
    assert_eq!(log[0]["verified"], serde_json::json!([true]));
    let listed = client.list_webhooks().await.expect("list");
    assert_eq!(listed.len(), 1);
    assert!(
        listed[0].from_config && listed[0].webhook_id == "config:0",
        "{listed:?}"
    );
    let id = listed[0].webhook_id.clone();
    for e in [
        client.delete_webhook(&id).await.expect_err("config's"),
        client
            .rotate_webhook_secret(&id, None)
            .await
            .expect_err("config's"),
    ] {
        assert_eq!(
            (e.code(), e.field()),
            (tonic::Code::FailedPrecondition, Some("webhook_id")),
            "{e}"
        );
    }
    server.shutdown().await.expect("shutdown");

    // What the server refuses to start with (serve_core builds its
    // webhooks so).
    std::fs::write(&secret_file, "not a secret").expect("secret");
    let mut config = baton_orchestrator::config::Config::default();
    declared(&mut config);
    let refused = baton_orchestrator::webhook::Webhooks::new(&config.webhooks, None)
        .err()
        .expect("refused at start");
    assert!(
        refused.starts_with("webhooks.subscriptions[0].secret_file"),
        "{refused}"
    );
    config.webhooks.subscriptions[0].url = "https://10.0.0.1/x".into();
    let refused = baton_orchestrator::webhook::Webhooks::new(&config.webhooks, None)
        .err()
        .expect("refused at start");
    assert!(
        refused.starts_with("webhooks.subscriptions[0].url"),
        "{refused}"
    );
}

/// A durable run's newer events mark its webhook streams due again; a
/// head waiting out a receiver's `Retry-After` is not tried before it
/// ends (it was, once: each new event cut the wait short).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn newer_events_do_not_cut_a_retry_after_short() {
    let redis = RedisServer::start().expect("redis");
    let receiver = Receiver::start();
    let agents = r#"
scripts:
  slowly:
    - text: "first"
      calls:
        - tool: write_context
          args: {key: k, value: v}
    - text: "second part"
      delay: 1s
agents:
  slowly:
    model: scripted:slowly
    tools: [write_context]
"#;
    let durable = durable_runs(redis.url());
    let server = OrchestratorServer::start(agents, None, move |c| {
        durable(c);
        fast(c);
    })
    .await
    .expect("server");
    let client = server.client().await.expect("client");
    receiver.config("/ra", &[OWN], "retry-after:3").await;
    let mut request = agent_request("slowly", "x");
    request.webhooks = vec![pb::RunWebhook {
        url: receiver.url("/ra"),
        events: vec![
            "run.started".into(),
            "event.text_delta".into(),
            "run.completed".into(),
        ],
        secret: OWN.into(),
        ..Default::default()
    }];
    run_to_end(&client, request).await;
    let log = receiver
        .wait("/ra", Duration::from_secs(15), |l| {
            l.iter().any(|d| d["type"] == "run.completed")
        })
        .await;
    assert_eq!(log[0]["type"], "run.started");
    assert_eq!(log[0]["status"], 503);
    assert_eq!(
        log[1]["id"], log[0]["id"],
        "the head again, then the rest in order"
    );
    let waited = log[1]["at"].as_f64().unwrap_or(0.0) - log[0]["at"].as_f64().unwrap_or(0.0);
    assert!(waited >= 2.9, "Retry-After: 3 waited out ({waited} s)");
    server.shutdown().await.expect("shutdown");
}
