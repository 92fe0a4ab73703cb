//! The `baton store` commands, run as a person would, against a real store.

use std::process::{Command, Output};

use baton_context_store::config::Backend;
use baton_e2e::{RedisServer, StoreServer};

fn baton(endpoint: &str, args: &[&str], stdin: Option<&[u8]>) -> Output {
    use std::io::Write;
    let mut child = Command::new(env!("CARGO_BIN_EXE_baton"))
        .args(["store", "--endpoint", endpoint])
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn baton");
    let mut input = child.stdin.take().expect("stdin");
    input
        .write_all(stdin.unwrap_or_default())
        .expect("write stdin");
    drop(input);
    child.wait_with_output().expect("baton output")
}

fn json(out: &Output) -> serde_json::Value {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("a JSON line")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn store_commands_round_trip_and_report_errors() {
    let redis = RedisServer::start().expect("redis-server");
    let server = StoreServer::start(StoreServer::config(Backend::Redis, Some(redis.url())))
        .await
        .expect("store");
    let ep = server.endpoint();
    let t = "4bf92f3577b34da6a3ce929d0e0e4736";
    let endpoint = ep.clone();
    let trace = t.to_owned();
    tokio::task::spawn_blocking(move || {
        let ep = endpoint.as_str();
        let t = trace.as_str();
        let put = json(&baton(
            ep,
            &[
                "put",
                t,
                "notes/plan",
                "step 1",
                "--ttl",
                "10m",
                "--content-type",
                "text/plain",
            ],
            None,
        ));
        assert_eq!(put["version"], 1);
        let put = json(&baton(ep, &["put", t, "raw", "-"], Some(b"from stdin")));
        assert_eq!(put["version"], 2);

        let got = baton(ep, &["get", t, "raw"], None);
        assert_eq!(got.stdout, b"from stdin");
        let meta = json(&baton(ep, &["get", t, "notes/plan", "--meta"], None));
        assert_eq!(meta["content_type"], "text/plain");
        assert_eq!(meta["size_bytes"], 6);

        let list = baton(ep, &["list", t, "--prefix", "notes/"], None);
        let lines: Vec<serde_json::Value> = String::from_utf8_lossy(&list.stdout)
            .lines()
            .map(|l| serde_json::from_str(l).expect("json"))
            .collect();
        assert_eq!(lines.len(), 2, "one slot, then usage");
        assert_eq!(lines[0]["key"], "notes/plan");
        assert_eq!(lines[1]["used_keys"], 2);

        let stale = baton(ep, &["put", t, "raw", "x", "--expected-version", "1"], None);
        assert!(!stale.status.success());
        let err = String::from_utf8_lossy(&stale.stderr);
        assert!(
            err.starts_with("error: Aborted: expected_version:"),
            "{err}"
        );
        assert_eq!(err.lines().count(), 1, "one line, no backtrace: {err}");

        let bad = baton(ep, &["get", "NOT-A-TRACE", "k"], None);
        assert!(String::from_utf8_lossy(&bad.stderr).contains("InvalidArgument: trace_id"));

        assert_eq!(json(&baton(ep, &["delete", t, "raw"], None))["version"], 3);
        assert_eq!(json(&baton(ep, &["clear", t], None))["deleted"], 1);
        let missing = baton(ep, &["get", t, "notes/plan"], None);
        assert!(String::from_utf8_lossy(&missing.stderr).contains("NotFound"));
    })
    .await
    .expect("cli checks");
    server.shutdown().await.expect("shutdown");
}
