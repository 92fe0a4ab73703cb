//! The real `baton-context-store` binary: configured by environment, ready
//! only once Redis answers, serving reflection (v1 and v1alpha), health and
//! gRPC-web, and draining on SIGTERM.

use std::{
    io::{BufRead, BufReader},
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use baton_client::StoreClient;
use baton_e2e::RedisServer;
use futures::StreamExt;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tonic_health::pb::{
    HealthCheckRequest, health_check_response::ServingStatus, health_client::HealthClient,
};

struct Binary {
    child: Child,
    addr: String,
}

impl Drop for Binary {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts the binary on port 0 and reads the address it logs.
fn spawn(redis_url: &str) -> Binary {
    let mut child = Command::new(env!("CARGO_BIN_EXE_baton-context-store"))
        .env("BATON_STORE_LISTEN", "127.0.0.1:0")
        .env("BATON_STORE_AUTH__MODE", "none")
        .env("BATON_STORE_TELEMETRY__METRICS_LISTEN", "")
        .env("BATON_STORE_REDIS__URL", redis_url)
        .env("BATON_STORE_REDIS__TIMEOUT", "300ms")
        .env("BATON_STORE_HEALTH_INTERVAL", "100ms")
        .env("BATON_STORE_LOG__FORMAT", "json")
        .env_remove("RUST_LOG")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn baton-context-store");
    let stdout = child.stdout.take().expect("stdout");
    let mut lines = BufReader::new(stdout).lines();
    let addr = loop {
        let line = lines
            .next()
            .expect("the binary logs before exiting")
            .expect("utf-8 log line");
        let v: serde_json::Value = serde_json::from_str(&line).expect("log lines are JSON");
        if v["message"] == "context store listening" {
            break v["addr"].as_str().expect("addr field").to_owned();
        }
    };
    // Keep draining the logs so the child never blocks on a full pipe.
    std::thread::spawn(move || for _ in lines {});
    Binary { child, addr }
}

/// Runs `baton-context-store --health` against the instance at `addr` (what
/// docker compose's health check runs); returns success and what it printed.
fn health_flag(addr: &str) -> (bool, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_baton-context-store"))
        .arg("--health")
        .env("BATON_STORE_LISTEN", addr)
        .env("BATON_STORE_AUTH__MODE", "none")
        .env("BATON_STORE_TELEMETRY__METRICS_LISTEN", "")
        .output()
        .expect("run --health");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

async fn status(endpoint: &str, service: &str) -> i32 {
    let channel = baton_client::channel(endpoint.to_owned())
        .await
        .expect("channel");
    HealthClient::new(channel)
        .check(HealthCheckRequest {
            service: service.into(),
        })
        .await
        .map(|r| r.into_inner().status)
        .unwrap_or(-1)
}

async fn wait_for(endpoint: &str, want: ServingStatus) {
    let deadline = Instant::now() + Duration::from_secs(15);
    while status(endpoint, "").await != want as i32
        || status(endpoint, "baton.v1.ContextStore").await != want as i32
    {
        assert!(Instant::now() < deadline, "health never became {want:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn binary_is_ready_only_with_redis_and_serves_reflection_web_and_drains() {
    let mut redis = RedisServer::start().expect("redis-server");
    redis.stop();
    let mut bin = spawn(&redis.url());
    let endpoint = format!("http://{}", bin.addr);

    // Redis is down: the process serves health, but is not ready.
    wait_for(&endpoint, ServingStatus::NotServing).await;
    assert_eq!(
        status(&endpoint, baton_common::server::LIVENESS).await,
        ServingStatus::Serving as i32,
        "alive while not ready, so a liveness probe does not restart it"
    );
    let (ok, out) = health_flag(&bin.addr);
    assert!(!ok, "--health fails while not ready: {out}");
    assert!(out.contains("NOT_SERVING"), "{out}");
    redis.restart().expect("start redis on its port");
    wait_for(&endpoint, ServingStatus::Serving).await;
    let (ok, out) = health_flag(&bin.addr);
    assert!(ok, "--health succeeds once ready: {out}");
    assert!(out.contains("SERVING"), "{out}");

    reflection_lists_the_services(&endpoint).await;
    grpc_web_put_over_http1(&bin.addr).await;

    // SIGTERM drains: open watches end with UNAVAILABLE, the process exits 0.
    let client = StoreClient::connect(endpoint.clone())
        .await
        .expect("connect");
    let mut watch = client
        .watch("4bf92f3577b34da6a3ce929d0e0e4736", "")
        .await
        .expect("watch");
    let pid = bin.child.id().to_string();
    assert!(
        Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .expect("kill")
            .success()
    );
    let end = tokio::time::timeout(Duration::from_secs(10), watch.next())
        .await
        .expect("watch ends");
    assert!(
        matches!(end, Some(Err(ref e)) if e.code() == tonic::Code::Unavailable),
        "{end:?}"
    );
    let deadline = Instant::now() + Duration::from_secs(15);
    let exit = loop {
        if let Some(s) = bin.child.try_wait().expect("wait") {
            break s;
        }
        assert!(
            Instant::now() < deadline,
            "the binary did not exit after SIGTERM"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(exit.success(), "clean exit after SIGTERM: {exit}");
}

async fn reflection_lists_the_services(endpoint: &str) {
    use tonic_reflection::pb::v1alpha;
    let channel = baton_client::channel(endpoint.to_owned())
        .await
        .expect("channel");

    let names = baton_e2e::reflected_services(endpoint).await;
    for want in ["baton.v1.ContextStore", "grpc.health.v1.Health"] {
        assert!(
            names.iter().any(|n| n == want),
            "v1 lists {want}: {names:?}"
        );
    }

    let mut client = v1alpha::server_reflection_client::ServerReflectionClient::new(channel);
    let req = v1alpha::ServerReflectionRequest {
        host: String::new(),
        message_request: Some(
            v1alpha::server_reflection_request::MessageRequest::FileContainingSymbol(
                "baton.v1.ContextStore".into(),
            ),
        ),
    };
    let mut resp = client
        .server_reflection_info(futures::stream::iter([req]))
        .await
        .expect("v1alpha")
        .into_inner();
    let msg = resp.next().await.expect("a reply").expect("ok");
    let Some(v1alpha::server_reflection_response::MessageResponse::FileDescriptorResponse(files)) =
        msg.message_response
    else {
        panic!("unexpected v1alpha reply");
    };
    assert!(
        !files.file_descriptor_proto.is_empty(),
        "v1alpha returns the descriptor of baton.v1.ContextStore"
    );
}

/// A browser-style gRPC-web call over plain HTTP/1.1, no proxy.
async fn grpc_web_put_over_http1(addr: &str) {
    use prost::Message;
    let req = baton_client::pb::PutRequest {
        trace_id: "4bf92f3577b34da6a3ce929d0e0e4736".into(),
        key: "from-browser".into(),
        value: b"hi".to_vec(),
        ..Default::default()
    };
    let payload = req.encode_to_vec();
    let mut body = vec![0u8];
    body.extend_from_slice(&(payload.len() as u32).to_be_bytes());
    body.extend_from_slice(&payload);
    let head = format!(
        "POST /baton.v1.ContextStore/Put HTTP/1.1\r\nHost: {addr}\r\ncontent-type: application/grpc-web+proto\r\nx-grpc-web: 1\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        body.len()
    );
    let mut stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
    stream.write_all(head.as_bytes()).await.expect("write head");
    stream.write_all(&body).await.expect("write body");
    let mut response = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), stream.read_to_end(&mut response))
        .await
        .expect("response in time")
        .expect("read");
    let text = String::from_utf8_lossy(&response);
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    assert!(text.contains("application/grpc-web"), "{text}");
    assert!(
        text.contains("grpc-status:0"),
        "the trailer frame reports OK: {text}"
    );

    let client = StoreClient::connect(format!("http://{addr}"))
        .await
        .expect("connect");
    let slot = client
        .get("4bf92f3577b34da6a3ce929d0e0e4736", "from-browser")
        .await
        .expect("written via gRPC-web");
    assert_eq!(slot.value, b"hi");
}

/// Runs `baton-context-store --print-config` with only `env` in its
/// environment; whether it succeeded, its stdout and its stderr.
fn print_config(env: &[(&str, &str)]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_baton-context-store"))
        .arg("--print-config")
        .env_clear()
        .envs(env.iter().copied())
        .output()
        .expect("run --print-config");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn print_config_prints_a_config_that_only_lacks_a_credential_and_refuses_a_wrong_one() {
    // The defaults require a credential and configure none: the store
    // would not start, but its configuration is printed, and stderr says
    // what is missing.
    let (ok, out, err) = print_config(&[]);
    assert!(ok, "--print-config of the defaults succeeds: {err}");
    assert!(out.contains("listen = \"0.0.0.0:50052\""), "{out}");
    assert!(
        out.contains("[auth]") && out.contains("mode = \"keys\""),
        "{out}"
    );
    assert!(
        err.starts_with("note: ") && err.contains("auth.service_token_file"),
        "{err}"
    );

    // With a credential there is nothing to note.
    let (ok, out, err) = print_config(&[("BATON_STORE_AUTH__MODE", "none")]);
    assert!(
        ok && out.contains("mode = \"none\"") && err.is_empty(),
        "{err}"
    );

    // A wrong value fails, named, whether or not a credential is missing.
    for env in [
        &[("BATON_STORE_LIMITS__MAX_TRACE_KEYS", "0")][..],
        &[
            ("BATON_STORE_LIMITS__MAX_TRACE_KEYS", "0"),
            ("BATON_STORE_AUTH__MODE", "none"),
        ][..],
    ] {
        let (ok, out, err) = print_config(env);
        assert!(!ok && out.is_empty(), "{env:?}: {out}");
        assert!(
            err.contains("invalid config: limits.max_trace_keys must be at least 1"),
            "{env:?}: {err}"
        );
    }
}
