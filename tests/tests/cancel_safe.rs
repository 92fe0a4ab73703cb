//! What a call takes across an `.await` is given back when it is dropped
//! (issue 55): a run whose caller hangs up mid-call gives back its hold on
//! its tenant's day budget (in memory and in Redis), a hold whose replica
//! died lapses, and a cancelled breaker probe lets the next call probe.
//! Counted where they live: at a fake OpenAI-compatible provider, in Redis
//! and on the server's `/metrics`.

use std::time::{Duration, Instant};

use baton_client::{OrchestratorClient, pb, pb::run_event::Payload};
use baton_e2e::{
    OrchestratorServer, RedisServer, eventually,
    openai::{FakeOpenAi, Reply, finish, text, usage},
};
use futures::StreamExt;

fn answer(words: &str) -> Reply {
    Reply::Stream(vec![text(words), finish("stop"), usage(10, 3)])
}

/// `talker` on the fake provider, whose breaker opens after two failures
/// for two seconds.
fn agents(provider: &FakeOpenAi) -> String {
    format!(
        r#"
providers:
  fake:
    kind: openai
    base_url: "{}"
    api_key_env: ""
    max_retries: 0
    breaker: {{failures: 2, window: 60s, cooldown: 2s}}
agents:
  talker: {{model: "fake:gpt-test"}}
"#,
        provider.base_url()
    )
}

fn request() -> pb::RunAgentRequest {
    pb::RunAgentRequest {
        agent: "talker".into(),
        input: "hi".into(),
        ..Default::default()
    }
}

/// Runs `talker` to its end: its last event.
async fn run(client: &OrchestratorClient) -> Payload {
    let mut stream = client.run_agent(request()).await.expect("run");
    let mut last = None;
    while let Some(e) = stream.next().await {
        last = e.expect("event").payload;
    }
    last.expect("a last event")
}

/// Starts `talker`, waits for its call to reach the provider (its
/// `n`-th request), then hangs up like a caller gone after a second; the
/// run's id, once the run has ended cancelled.
async fn hang_up_mid_call(client: &OrchestratorClient, provider: &FakeOpenAi, n: usize) -> String {
    let mut stream = client.run_agent(request()).await.expect("run");
    let first = stream.next().await.expect("an event").expect("event");
    let started = Instant::now();
    while provider.requests().len() < n {
        assert!(started.elapsed() < Duration::from_secs(10), "no call came");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    drop(stream);
    let id = first.run_id;
    eventually("the run ends cancelled", || async {
        client
            .get_run(&id)
            .await
            .is_ok_and(|r| r.status == pb::RunStatus::Cancelled as i32)
    })
    .await;
    id
}

/// A metric's value on `/metrics` for the default tenant or provider
/// `fake` (0 when not reported yet).
async fn metric(addr: std::net::SocketAddr, name: &str) -> f64 {
    let body = reqwest::get(format!("http://{addr}/metrics"))
        .await
        .expect("scrape")
        .text()
        .await
        .expect("body");
    body.lines()
        .find(|l| l.starts_with(&format!("{name}{{")))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0)
}

/// The day's counters of the default tenant in Redis: tokens spent and
/// held, and the holds in flight.
fn day_in_redis(redis: &RedisServer) -> (String, String, String) {
    let day = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_millis()
        / 86_400_000;
    let key = format!("baton:quota:{{-}}:spend:day:{day}");
    let field = |f: &str| redis.cli(&["HGET", &key, f]).expect("HGET");
    (
        field("t"),
        field("ht"),
        redis
            .cli(&["ZCARD", "baton:quota:{-}:holds"])
            .expect("ZCARD"),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_whose_caller_hangs_up_mid_call_gives_back_its_hold_on_the_tenants_day_budget() {
    let redis = RedisServer::start().expect("redis-server");
    for durable in [false, true] {
        // The first call never answers in time; the next ones do.
        let provider = FakeOpenAi::start(vec![
            Reply::Slow(Duration::from_secs(30), Box::new(answer("late"))),
            answer("after the cancel"),
        ])
        .await
        .expect("provider");
        let metrics = baton_e2e::free_addr().expect("port");
        let url = redis.url();
        let server = OrchestratorServer::start(&agents(&provider), None, |c| {
            if durable {
                baton_e2e::durable_runs(url)(c);
            }
            c.quotas.default.model_tokens_per_day = Some(5000);
            c.telemetry.metrics_listen = metrics.to_string();
        })
        .await
        .expect("orchestrator");
        let client = server.client().await.expect("client");
        hang_up_mid_call(&client, &provider, 1).await;
        // Nothing is held once the call is gone...
        assert_eq!(
            metric(metrics, "baton_tenant_model_tokens_held").await,
            0.0,
            "durable: {durable}"
        );
        if durable {
            eventually("the hold is given back in Redis", || async {
                let (_, held, holds) = day_in_redis(&redis);
                held == "0" && holds == "0"
            })
            .await;
        }
        // ...so the tenant's next run asks with its whole worst case (the
        // model's output limit: no max_tokens is set), and completes.
        let began = Instant::now();
        let end = run(&client).await;
        assert!(
            matches!(&end, Payload::RunCompleted(c) if c.output == "after the cancel"),
            "durable: {durable}: {end:?}"
        );
        assert!(began.elapsed() < Duration::from_secs(5), "it did not wait");
        let requests = provider.requests();
        assert_eq!(requests.len(), 2, "durable: {durable}");
        assert_eq!(requests[1].body["max_tokens"], 4096, "durable: {durable}");
        if durable {
            // Spent: the second call's 13 tokens (the first streamed
            // nothing), held: nothing.
            eventually("the call is settled in Redis", || async {
                day_in_redis(&redis) == ("13".into(), "0".into(), "0".into())
            })
            .await;
            redis.cli(&["FLUSHALL"]).expect("flush");
        }
        server.shutdown().await.expect("shutdown");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hold_left_by_a_replica_that_died_lapses_and_is_given_back() {
    let redis = RedisServer::start().expect("redis-server");
    let provider = FakeOpenAi::start(vec![answer("whole")])
        .await
        .expect("provider");
    let server = OrchestratorServer::start(&agents(&provider), None, |c| {
        baton_e2e::durable_runs(redis.url())(c);
        c.quotas.default.model_tokens_per_day = Some(5000);
    })
    .await
    .expect("orchestrator");
    // What a replica killed mid-call leaves: 4,900 tokens held by a hold it
    // no longer renews (it lapsed a moment ago).
    let day = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_millis()
        / 86_400_000;
    let key = format!("baton:quota:{{-}}:spend:day:{day}");
    let lapsed = redis.cli(&["TIME"]).expect("TIME");
    let secs: u64 = lapsed
        .lines()
        .next()
        .unwrap_or("0")
        .trim()
        .parse()
        .unwrap_or(0);
    let lapsed_ms = (secs * 1000).saturating_sub(1).to_string();
    redis
        .cli(&["HSET", &key, "t", "0", "c", "0", "ht", "4900", "hc", "0"])
        .expect("HSET");
    redis
        .cli(&["ZADD", "baton:quota:{-}:holds", &lapsed_ms, "dead.1"])
        .expect("ZADD");
    redis
        .cli(&[
            "HSET",
            "baton:quota:{-}:holds:of",
            "dead.1",
            &format!("4900\n0\n{key}"),
        ])
        .expect("HSET");
    let client = server.client().await.expect("client");
    let end = run(&client).await;
    assert!(matches!(&end, Payload::RunCompleted(_)), "{end:?}");
    // The call was asked with its whole worst case: the lapsed hold was
    // given back first.
    assert_eq!(provider.requests()[0].body["max_tokens"], 4096);
    eventually("the call is settled in Redis", || async {
        day_in_redis(&redis) == ("13".into(), "0".into(), "0".into())
    })
    .await;
    server.shutdown().await.expect("shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_breaker_probe_lets_the_next_call_probe() {
    let redis = RedisServer::start().expect("redis-server");
    for durable in [false, true] {
        let provider = FakeOpenAi::start(vec![
            Reply::Status {
                code: 500,
                retry_after: None,
            },
            Reply::Status {
                code: 500,
                retry_after: None,
            },
            // The probe, cancelled before it answers.
            Reply::Slow(Duration::from_secs(30), Box::new(answer("late"))),
            answer("healthy again"),
        ])
        .await
        .expect("provider");
        let metrics = baton_e2e::free_addr().expect("port");
        let url = redis.url();
        let server = OrchestratorServer::start(&agents(&provider), None, |c| {
            if durable {
                baton_e2e::durable_runs(url)(c);
            }
            c.telemetry.metrics_listen = metrics.to_string();
        })
        .await
        .expect("orchestrator");
        let client = server.client().await.expect("client");
        // Two failures open the breaker for two seconds.
        for _ in 0..2 {
            let end = run(&client).await;
            assert!(matches!(end, Payload::RunFailed(_)), "{end:?}");
        }
        assert_eq!(metric(metrics, "baton_model_breaker_open").await, 1.0);
        tokio::time::sleep(Duration::from_millis(2100)).await;
        // The probe's caller hangs up mid-probe.
        hang_up_mid_call(&client, &provider, 3).await;
        assert_eq!(metric(metrics, "baton_model_breaker_probing").await, 0.0);
        if durable {
            eventually("the shared probe is given back", || async {
                redis
                    .cli(&["EXISTS", "baton:breaker:{66616b65}:probe"])
                    .is_ok_and(|n| n == "0")
            })
            .await;
        }
        // The next call probes, reaches the provider, and closes it.
        let end = run(&client).await;
        assert!(
            matches!(&end, Payload::RunCompleted(c) if c.output == "healthy again"),
            "durable: {durable}: {end:?}"
        );
        assert_eq!(provider.requests().len(), 4, "durable: {durable}");
        assert_eq!(metric(metrics, "baton_model_breaker_open").await, 0.0);
        if durable {
            redis.cli(&["FLUSHALL"]).expect("flush");
        }
        server.shutdown().await.expect("shutdown");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_whose_lease_lapsed_mid_call_sends_nothing_more() {
    let redis = RedisServer::start().expect("redis-server");
    // The provider answers 503 (retry after a second) three times, then
    // answers: the provider's retries would go on for three seconds.
    let busy = || Reply::Status {
        code: 503,
        retry_after: Some("1"),
    };
    let provider = FakeOpenAi::start(vec![busy(), busy(), busy(), answer("late")])
        .await
        .expect("provider");
    let yaml = agents(&provider).replace("max_retries: 0", "max_retries: 3");
    let server = OrchestratorServer::start(&yaml, None, |c| {
        baton_e2e::durable_runs(redis.url())(c);
        c.runs.lease = Duration::from_millis(900);
    })
    .await
    .expect("orchestrator");
    let client = server.client().await.expect("client");
    let mut stream = client.run_agent(request()).await.expect("run");
    stream.next().await.expect("an event").expect("event");
    let started = Instant::now();
    while provider.requests().is_empty() {
        assert!(started.elapsed() < Duration::from_secs(10), "no call came");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // Redis stops answering: the replica cannot renew its lease, so it
    // must assume another replica runs the run, and stop calling.
    redis.freeze();
    tokio::time::sleep(Duration::from_millis(3500)).await;
    let sent = provider.requests().len();
    redis.thaw();
    assert_eq!(sent, 1, "no retry went out once the lease lapsed");
    drop(stream);
    server.shutdown().await.expect("shutdown");
}
