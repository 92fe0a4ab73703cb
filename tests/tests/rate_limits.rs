//! Provider rate limits (issue 46): one sliding window for every replica.
//! Two durable replicas on one `redis-server` never send a provider more
//! calls in a window than its limit (counted at the provider); one tenant's
//! burst does not starve another tenant's call (the waiting calls go
//! through one tenant after another); a call that waits says so in an
//! event; a limit of zero is refused at start, naming the field.

use std::time::{Duration, Instant};

use baton_client::{OrchestratorClient, pb, pb::run_event::Payload};
use baton_e2e::{
    OrchestratorServer, RedisServer, durable_runs,
    openai::{FakeOpenAi, Recorded, Reply, finish, text, usage},
};
use futures::StreamExt;

fn answers(n: usize) -> Vec<Reply> {
    (0..n)
        .map(|i| {
            Reply::Stream(vec![
                text(&format!("answer {i}")),
                finish("stop"),
                usage(10, 3),
            ])
        })
        .collect()
}

fn agents(base_url: &str, limit: &str) -> String {
    format!(
        r#"
providers:
  p: {{kind: openai, base_url: "{base_url}", api_key_env: "", max_retries: 0, rate_limit: {limit}}}
agents:
  talker: {{model: "p:m"}}
"#
    )
}

/// Runs `talker` to its end; its events.
async fn run(client: &OrchestratorClient) -> Vec<pb::RunEvent> {
    let mut stream = client
        .run_agent(pb::RunAgentRequest {
            agent: "talker".into(),
            input: "hi".into(),
            ..Default::default()
        })
        .await
        .expect("run");
    let mut out = Vec::new();
    while let Some(e) = stream.next().await {
        out.push(e.expect("event"));
    }
    match out.last().and_then(|e| e.payload.as_ref()) {
        Some(Payload::RunCompleted(_)) => {}
        other => panic!("the run did not complete: {other:?}"),
    }
    out
}

/// The most requests the provider received within any `window` (less a
/// margin for the time between a call let through and its arrival).
fn most_in_a_window(requests: &[Recorded], window: Duration) -> usize {
    let window = window - Duration::from_millis(50);
    let mut at: Vec<Instant> = requests.iter().map(|r| r.at).collect();
    at.sort();
    (0..at.len())
        .map(|i| at[i..].iter().take_while(|t| **t - at[i] < window).count())
        .max()
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_never_send_a_provider_more_than_its_limit_in_any_window() {
    let redis = RedisServer::start().expect("redis");
    let provider = FakeOpenAi::start(answers(12)).await.expect("provider");
    let yaml = agents(
        &provider.base_url(),
        "{requests: 3, tokens: 100000, window: 1s}",
    );
    let (logs, took) = through_two_replicas(&redis, &yaml, 12).await;
    let waited: usize = logs
        .iter()
        .flatten()
        .filter(|e| matches!(&e.payload, Some(Payload::RateLimitWait(w)) if w.provider == "p"))
        .count();
    let requests = provider.requests();
    assert_eq!(requests.len(), 12);
    let most = most_in_a_window(&requests, Duration::from_secs(1));
    eprintln!(
        "12 calls through 2 replicas, limit 3 a second: at most {most} within any second at the provider, {waited} waits, {:?} in all",
        took
    );
    assert!(
        most <= 3,
        "{most} calls within one window, over the limit of 3"
    );
    // Twelve calls at three a second: at least three windows passed.
    assert!(took >= Duration::from_secs(3), "{:?}", took);
    assert!(waited >= 9, "the calls that waited said so ({waited})");
}

/// Runs `talker` `n` times at once through two durable replicas of `yaml`
/// on `redis`, alternating; each run's events, and how long they took
/// (from when both replicas were up).
async fn through_two_replicas(
    redis: &RedisServer,
    yaml: &str,
    n: usize,
) -> (Vec<Vec<pb::RunEvent>>, Duration) {
    let a = OrchestratorServer::start(yaml, None, durable_runs(redis.url()))
        .await
        .expect("replica a");
    let b = OrchestratorServer::start(yaml, None, durable_runs(redis.url()))
        .await
        .expect("replica b");
    let (on_a, on_b) = (a.client().await.expect("a"), b.client().await.expect("b"));
    let began = Instant::now();
    let runs: Vec<_> = (0..n)
        .map(|i| {
            let client = if i % 2 == 0 {
                on_a.clone()
            } else {
                on_b.clone()
            };
            tokio::spawn(async move { run(&client).await })
        })
        .collect();
    let mut logs = Vec::with_capacity(n);
    for r in runs {
        logs.push(r.await.expect("run"));
    }
    let took = began.elapsed();
    a.shutdown().await.expect("a");
    b.shutdown().await.expect("b");
    (logs, took)
}

/// A replica leases a limit's permits a batch at a time (a twentieth of
/// the limit's calls, at most 16, for a tenth of its window, at most a
/// second): 32 calls in a burst take two leases of 16, not 32 round trips
/// to Redis, and every call is counted in the shared window.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_leases_a_limits_permits_a_batch_at_a_time() {
    let redis = RedisServer::start().expect("redis");
    let provider = FakeOpenAi::start(answers(32)).await.expect("provider");
    let yaml = agents(&provider.base_url(), "{requests: 1000, window: 60s}");
    let a = OrchestratorServer::start(&yaml, None, durable_runs(redis.url()))
        .await
        .expect("replica");
    let client = a.client().await.expect("client");
    let runs: Vec<_> = (0..32)
        .map(|_| {
            let client = client.clone();
            tokio::spawn(async move { run(&client).await })
        })
        .collect();
    for r in runs {
        r.await.expect("run");
    }
    assert_eq!(provider.requests().len(), 32);
    // The provider `p`'s window: one entry per call counted, each named by
    // the lease that counted it.
    let counted = redis
        .cli(&["ZRANGE", "baton:ratelimit:{70}:r", "0", "-1"])
        .expect("redis-cli");
    let counted: Vec<&str> = counted.lines().filter(|l| !l.is_empty()).collect();
    let mut leases: Vec<&str> = counted
        .iter()
        .filter_map(|m| m.split_once('#').map(|(lease, _)| lease))
        .collect();
    leases.sort_unstable();
    leases.dedup();
    eprintln!(
        "32 calls: {} permits counted in {} leases",
        counted.len(),
        leases.len()
    );
    assert!(counted.len() >= 32, "{counted:?}");
    assert!(
        (2..=4).contains(&leases.len()),
        "32 calls took {} leases: {leases:?}",
        leases.len()
    );
    a.shutdown().await.expect("replica");
}

/// Leases stay exact across replicas: with a limit of 40 calls in 2 s
/// (leases of 2 calls), 100 calls through two replicas at once never reach
/// the provider more than 40 within any 2 s; and a token limit leased the
/// same way (400 in 2 s; each call reserves its input estimate and its
/// `max_tokens` of 5, and uses 13) never sees more than 400 / 13 calls.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leased_permits_never_let_two_replicas_over_the_limit() {
    for (limit, most, what) in [
        ("{requests: 40, window: 2s}", 40, "calls"),
        ("{tokens: 400, window: 2s}", 30, "tokens"),
    ] {
        let redis = RedisServer::start().expect("redis");
        let provider = FakeOpenAi::start(answers(100)).await.expect("provider");
        let yaml = agents(&provider.base_url(), limit).replace(
            r#"talker: {model: "p:m"}"#,
            r#"talker: {model: "p:m", settings: {max_tokens: 5}}"#,
        );
        let (_, took) = through_two_replicas(&redis, &yaml, 100).await;
        let requests = provider.requests();
        assert_eq!(requests.len(), 100);
        let seen = most_in_a_window(&requests, Duration::from_secs(2));
        eprintln!(
            "{what}: 100 calls through 2 replicas, limit {limit}: at most {seen} calls within any 2 s at the provider, {:?} in all",
            took
        );
        assert!(seen <= most, "{what}: {seen} calls within one window");
    }
}

const ACME: &str = "acme-key-0123456789abcdef";
const GLOBEX: &str = "globex-key-0123456789abcdef";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_tenants_burst_does_not_starve_another_tenants_call() {
    let provider = FakeOpenAi::start(answers(9)).await.expect("provider");
    let dir = tempfile::tempdir().expect("dir");
    let keys = dir.path().join("api-keys");
    std::fs::write(&keys, format!("acme {ACME}\nglobex {GLOBEX}\n")).expect("keys");
    let server = OrchestratorServer::start(
        &agents(&provider.base_url(), "{requests: 2, window: 1s}"),
        None,
        move |c| c.auth.api_keys_file = keys,
    )
    .await
    .expect("orchestrator");
    let client = |key: &'static str| {
        let server = &server;
        async move {
            server
                .client()
                .await
                .expect("client")
                .with_api_key(key)
                .expect("ascii")
        }
    };
    let (acme, globex) = (client(ACME).await, client(GLOBEX).await);
    let began = Instant::now();
    // Acme's burst of eight: two go at once, six wait.
    let burst: Vec<_> = (0..8)
        .map(|_| {
            let acme = acme.clone();
            tokio::spawn(async move {
                run(&acme).await;
                began.elapsed()
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(200)).await;
    // Globex's one call, behind acme's six.
    let log = run(&globex).await;
    let globex_done = began.elapsed();
    let mut acme_done = Vec::new();
    for b in burst {
        acme_done.push(b.await.expect("acme"));
    }
    acme_done.sort();
    eprintln!("acme's burst of 8 ended at {acme_done:?}; globex's one call at {globex_done:?}");
    // Round robin: globex goes in the next window, beside acme's third
    // call, not after acme's eighth (four windows in).
    assert!(
        globex_done < Duration::from_millis(2500),
        "globex waited {globex_done:?} behind acme's burst"
    );
    assert!(
        *acme_done.last().expect("acme") >= Duration::from_secs(3),
        "{acme_done:?}"
    );
    let waited = log.iter().find_map(|e| match &e.payload {
        Some(Payload::RateLimitWait(w)) => Some(w.clone()),
        _ => None,
    });
    let waited = waited.expect("globex's call said it waited");
    assert_eq!(
        (waited.provider.as_str(), waited.model.as_str()),
        ("p", "p:m")
    );
    assert!(waited.ahead >= 1, "{waited:?}");
    assert!(most_in_a_window(&provider.requests(), Duration::from_secs(1)) <= 2);
    server.shutdown().await.expect("shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_limit_of_zero_or_a_window_too_short_is_refused_naming_the_field() {
    for (limit, says) in [
        (
            "{requests: 0}",
            "providers.p.rate_limit.requests: must be more than 0",
        ),
        (
            "{tokens: 0}",
            "providers.p.rate_limit.tokens: must be more than 0",
        ),
        (
            "{window: 1s}",
            "providers.p.rate_limit.requests: set requests, tokens, or both",
        ),
        (
            "{requests: 5, window: 10ms}",
            "providers.p.rate_limit.window: must be at least 100ms",
        ),
        ("{requests: 5, per: 1m}", "unknown field `per`"),
    ] {
        match OrchestratorServer::start(&agents("http://127.0.0.1:1/v1", limit), None, |_| {}).await
        {
            Ok(_) => panic!("started with rate_limit {limit}"),
            Err(e) => {
                let e = format!("{e:#}");
                assert!(e.contains(says), "{limit}: {e}");
            }
        }
    }
    // At the edge: a limit of 1 is a limit.
    let provider = FakeOpenAi::start(answers(1)).await.expect("provider");
    let server = OrchestratorServer::start(
        &agents(&provider.base_url(), "{requests: 1, window: 100ms}"),
        None,
        |_| {},
    )
    .await
    .expect("a limit of 1 in 100ms is valid");
    run(&server.client().await.expect("client")).await;
    server.shutdown().await.expect("shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_breaker_opened_by_failures_on_two_replicas_is_open_on_both() {
    let redis = RedisServer::start().expect("redis");
    let a = FakeOpenAi::start(vec![
        Reply::Status {
            code: 500,
            retry_after: None,
        },
        Reply::Status {
            code: 500,
            retry_after: None,
        },
        Reply::Stream(vec![text("a is back"), finish("stop"), usage(10, 3)]),
        Reply::Stream(vec![text("a again"), finish("stop"), usage(10, 3)]),
    ])
    .await
    .expect("a");
    let b = FakeOpenAi::start(answers(4)).await.expect("b");
    let yaml = format!(
        r#"
providers:
  a: {{kind: openai, base_url: "{}", api_key_env: "", max_retries: 0, breaker: {{failures: 2, window: 60s, cooldown: 2s}}}}
  b: {{kind: openai, base_url: "{}", api_key_env: "", max_retries: 0}}
agents:
  talker: {{model: "a:m", fallbacks: ["b:m"]}}
"#,
        a.base_url(),
        b.base_url()
    );
    let one = OrchestratorServer::start(&yaml, None, durable_runs(redis.url()))
        .await
        .expect("replica one");
    let two = OrchestratorServer::start(&yaml, None, durable_runs(redis.url()))
        .await
        .expect("replica two");
    let (on_one, on_two) = (
        one.client().await.expect("one"),
        two.client().await.expect("two"),
    );
    let answered_by = |log: &[pb::RunEvent]| {
        log.iter()
            .find_map(|e| match &e.payload {
                Some(Payload::MessageCompleted(m)) => Some((
                    m.model.clone(),
                    m.skipped
                        .iter()
                        .map(|s| s.reason.clone())
                        .collect::<Vec<_>>(),
                )),
                _ => None,
            })
            .expect("a model turn")
    };
    // One failure on each replica: two for the breaker they share.
    assert_eq!(
        answered_by(&run(&on_one).await),
        ("b:m".to_owned(), vec!["unavailable".to_owned()])
    );
    let opened = Instant::now();
    assert_eq!(
        answered_by(&run(&on_two).await),
        ("b:m".to_owned(), vec!["unavailable".to_owned()])
    );
    // Replica one counted one failure itself; within a second it sees the
    // breaker open and sends a nothing.
    tokio::time::sleep(Duration::from_millis(1200)).await;
    assert_eq!(
        answered_by(&run(&on_one).await),
        ("b:m".to_owned(), vec!["breaker_open".to_owned()])
    );
    assert_eq!(
        a.requests().len(),
        2,
        "an open breaker sends nothing, on any replica"
    );
    // After the cool-down one replica probes, a answers: closed for both.
    tokio::time::sleep(
        (opened + Duration::from_millis(2200)).saturating_duration_since(Instant::now()),
    )
    .await;
    assert_eq!(answered_by(&run(&on_two).await), ("a:m".to_owned(), vec![]));
    tokio::time::sleep(Duration::from_millis(1100)).await;
    assert_eq!(answered_by(&run(&on_one).await), ("a:m".to_owned(), vec![]));
    one.shutdown().await.expect("one");
    two.shutdown().await.expect("two");
}

/// A provider that answers 429 (retry after no time) and then 200, under a
/// limit of two calls a second: its retries go through the limit too, so
/// it never receives more than two requests in any second — the 429s
/// counted — on one replica or two sharing Redis.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_providers_retries_are_counted_in_its_rate_limit() {
    let redis = RedisServer::start().expect("redis");
    for durable in [false, true] {
        let mut replies = Vec::new();
        for i in 0..6 {
            replies.push(Reply::Status {
                code: 429,
                retry_after: Some("0"),
            });
            replies.extend(answers(1).into_iter().map(|r| match r {
                Reply::Stream(mut c) => {
                    c[0] = text(&format!("answer {i}"));
                    Reply::Stream(c)
                }
                other => other,
            }));
        }
        let provider = FakeOpenAi::start(replies).await.expect("provider");
        // The replies go out in order, whichever run asks: a run may be
        // answered 429 several times in a row. Six retries outlast the six
        // 429s there are, so every run completes.
        let yaml = agents(&provider.base_url(), "{requests: 2, window: 1s}")
            .replace("max_retries: 0", "max_retries: 6");
        let url = redis.url();
        let server = OrchestratorServer::start(&yaml, None, move |c| {
            if durable {
                durable_runs(url)(c);
            }
            c.runs.model_timeout = Duration::from_secs(20);
        })
        .await
        .expect("orchestrator");
        let client = server.client().await.expect("client");
        let began = Instant::now();
        let runs: Vec<_> = (0..6)
            .map(|_| {
                let client = client.clone();
                tokio::spawn(async move { run(&client).await })
            })
            .collect();
        for r in runs {
            r.await.expect("run");
        }
        let requests = provider.requests();
        let most = most_in_a_window(&requests, Duration::from_secs(1));
        eprintln!(
            "durable {durable}: 6 runs, {} requests (a 429 then a 200 each) in {:.1?}, at most {most} in any second",
            requests.len(),
            began.elapsed()
        );
        assert_eq!(requests.len(), 12, "every run retried once");
        assert!(most <= 2, "{most} requests within a second");
        if durable {
            redis.cli(&["FLUSHALL"]).expect("flush");
        }
        server.shutdown().await.expect("shutdown");
    }
}

/// A replica leases a batch of a limit's permits and uses one: when the
/// lease's hold ends, the fifteen it did not use go back to the shared
/// window (an idle replica strands none).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leases_unused_permits_go_back_when_its_hold_ends() {
    let redis = RedisServer::start().expect("redis");
    let provider = FakeOpenAi::start(answers(1)).await.expect("provider");
    let yaml = agents(&provider.base_url(), "{requests: 1000, window: 10s}");
    let server = OrchestratorServer::start(&yaml, None, durable_runs(redis.url()))
        .await
        .expect("orchestrator");
    let client = server.client().await.expect("client");
    // 1000 calls a window: a lease of 16 (a twentieth, at most 16), held
    // for a tenth of the window (1 s).
    let counted = || {
        redis
            .cli(&["ZCARD", "baton:ratelimit:{70}:r"])
            .expect("ZCARD")
            .parse::<u64>()
            .expect("a count")
    };
    // The batch is seen only within the lease's 1 s hold: on a machine so
    // busy that a run takes longer, try again (each try leaves its one
    // used permit counted for the window).
    let mut seen = false;
    for attempt in 0..3u64 {
        let began = Instant::now();
        run(&client).await;
        let during = counted();
        if began.elapsed() < Duration::from_millis(800) {
            assert_eq!(during, attempt + 16, "the lease counts its batch");
            seen = true;
        }
        baton_e2e::eventually("the unused permits go back", || async {
            counted() == attempt + 1
        })
        .await;
        if seen {
            break;
        }
    }
    assert!(seen, "no try ran within the lease's hold of 1 s");
    server.shutdown().await.expect("shutdown");
}
