//! The official MCP SDKs' clients, as the tests of Baton's MCP server
//! (`tests/tests/mcp_server.rs`, `mcp_rounds.rs`) drive them:
//! `tests/mcp/client.py` on the Python `mcp` SDK (from
//! `.tools/servers-venv`) and `tests/mcp/client.mjs` on
//! `@modelcontextprotocol/sdk` (from `.tools/node_modules`), both
//! installed by `./tests/run`, with the same command line and the same JSON
//! lines; and the orchestrator they talk to.

use std::{process::Stdio, time::Duration};

use baton_client::pb;
use baton_orchestrator::app::{Caller, Orchestrator};
use serde_json::Value;
use tokio::task::JoinHandle;

use crate::{EXAMPLE_AGENTS, OrchestratorServer, eventually, servers::servers_python};

/// The longest one client run may take.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(60);

/// The example agents, plus `slow` (served over MCP), which takes 30 s to
/// answer.
pub fn mcp_agents() -> String {
    EXAMPLE_AGENTS
        .replacen(
            "\nscripts:\n",
            "\nscripts:\n  slow:\n    - text: \"worked on {{input}}\"\n      delay: 30s\n",
            1,
        )
        .replacen(
            "\nagents:\n",
            "\nagents:\n  slow:\n    description: Takes its time.\n    model: scripted:slow\n    mcp: true\n",
            1,
        )
}

/// What one `client.py` run printed, and how it exited.
#[derive(Debug)]
pub struct Output {
    /// Its exit code (3: it printed an error).
    pub code: i32,
    /// The JSON lines it printed.
    pub lines: Vec<Value>,
    /// What it printed on stderr.
    pub stderr: String,
}

impl Output {
    /// The first line that has `key`.
    #[track_caller]
    pub fn line(&self, key: &str) -> &Value {
        self.lines
            .iter()
            .find_map(|l| l.get(key))
            .unwrap_or_else(|| panic!("no {key:?} line: {:?}\n{}", self.lines, self.stderr))
    }

    /// Every line that has `key`.
    pub fn all(&self, key: &str) -> Vec<&Value> {
        self.lines.iter().filter_map(|l| l.get(key)).collect()
    }

    /// The call's result (the run must have answered).
    #[track_caller]
    pub fn result(&self) -> &Value {
        assert_eq!(
            self.code, 0,
            "client.py failed: {:?}\n{}",
            self.lines, self.stderr
        );
        self.line("result")
    }

    /// The result's text.
    #[track_caller]
    pub fn text(&self) -> &str {
        self.result()["content"][0]["text"]
            .as_str()
            .unwrap_or_default()
    }

    /// The error a failed run printed.
    #[track_caller]
    pub fn error(&self) -> &Value {
        assert_eq!(
            self.code, 3,
            "client.py should have failed: {:?}\n{}",
            self.lines, self.stderr
        );
        self.line("error")
    }
}

/// The two clients.
#[derive(Debug, Clone, Copy)]
pub enum Sdk {
    /// `tests/mcp/client.py` on the Python `mcp` SDK.
    Python,
    /// `tests/mcp/client.mjs` on `@modelcontextprotocol/sdk`.
    TypeScript,
}

/// Both clients.
pub const SDKS: [Sdk; 2] = [Sdk::Python, Sdk::TypeScript];

/// `.tools/node_modules`, with the TypeScript SDK in it.
fn node_modules() -> std::path::PathBuf {
    let dir = crate::servers::repo_root().join(".tools/node_modules");
    assert!(
        dir.join("@modelcontextprotocol/sdk/package.json").exists(),
        "@modelcontextprotocol/sdk is not installed in {}: run ./tests/run once (it installs the test clients into .tools/)",
        dir.display()
    );
    dir
}

/// Runs `sdk`'s client on `URL args…` to its end.
pub async fn client(sdk: Sdk, url: &str, args: &[&str]) -> Output {
    let dir = crate::servers::repo_root().join("tests/mcp");
    let mut cmd = match sdk {
        Sdk::Python => {
            let mut cmd = tokio::process::Command::new(servers_python());
            cmd.arg(dir.join("client.py"))
                .env("PYTHONDONTWRITEBYTECODE", "1");
            cmd
        }
        Sdk::TypeScript => {
            let mut cmd = tokio::process::Command::new("node");
            cmd.arg(dir.join("client.mjs"))
                .env("NODE_PATH", node_modules());
            cmd
        }
    };
    cmd.arg(url)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let child = cmd.spawn().expect("start the client");
    let out = tokio::time::timeout(CALL_TIMEOUT, child.wait_with_output())
        .await
        .unwrap_or_else(|_| panic!("{sdk:?} client {args:?} did not end within {CALL_TIMEOUT:?}"))
        .expect("the client's output");
    let stdout = String::from_utf8_lossy(&out.stdout);
    Output {
        code: out.status.code().unwrap_or(-1),
        lines: stdout
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
            .collect(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// A ListRuns query of every run.
pub fn all_runs() -> baton_orchestrator::request::RunsQuery {
    baton_orchestrator::request::RunsQuery {
        status: None,
        waiting: false,
        failing_scores: false,
        after: None,
        size: 100,
    }
}

/// The MCP endpoint of `server`.
pub fn url(server: &OrchestratorServer) -> String {
    format!("{}/mcp", server.endpoint())
}

/// A caller of tenant `name` ("": no keys).
pub fn tenant(name: &str) -> Caller {
    Caller {
        tenant: name.into(),
        ..Default::default()
    }
}

/// The orchestrator on [`mcp_agents`], configured by `configure`.
pub async fn start(
    configure: impl FnOnce(&mut baton_orchestrator::config::Config),
) -> OrchestratorServer {
    OrchestratorServer::start(&mcp_agents(), None, configure)
        .await
        .expect("orchestrator")
}

/// Run `id` (of `caller`'s tenant) once it has ended.
pub async fn ended(
    server: &OrchestratorServer,
    caller: &Caller,
    id: &str,
) -> baton_orchestrator::run::view::RunView {
    eventually("the run ends", || async {
        server
            .core
            .get(caller, id)
            .await
            .is_ok_and(|v| v.status != pb::RunStatus::Running)
    })
    .await;
    server.core.get(caller, id).await.expect("the run")
}

/// Waits until `caller` has a run running on `core` while `call` (a
/// client's run) goes on. A loaded machine may take seconds to start a
/// client, so this waits as long as a call may take; a client that ended
/// first fails the test with what it printed.
pub async fn until_running(core: &Orchestrator, caller: &Caller, call: &mut JoinHandle<Output>) {
    let deadline = tokio::time::Instant::now() + CALL_TIMEOUT;
    loop {
        let running = core
            .list(caller, &all_runs())
            .await
            .is_ok_and(|p| p.runs.iter().any(|r| r.status == pb::RunStatus::Running));
        if running {
            return;
        }
        if call.is_finished() {
            let out = call.await.expect("the client");
            panic!(
                "the client ended before its run was seen running: {:?}\n{}",
                out.lines, out.stderr
            );
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no run running within {CALL_TIMEOUT:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The JSON-RPC message answering request `id` in an SSE body.
#[track_caller]
pub fn sse_answer(body: &str, id: u64) -> Value {
    body.lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .filter_map(|d| serde_json::from_str::<Value>(d.trim()).ok())
        .find(|m| m["id"] == id)
        .unwrap_or_else(|| panic!("no answer to {id} in {body}"))
}

/// A 2025-11-25 session over plain HTTP (no SDK): what the SDKs' errors
/// would hide, or what they cannot send.
pub struct RawSession {
    http: reqwest::Client,
    key: Option<String>,
    /// Its `Mcp-Session-Id`.
    pub id: String,
}

impl RawSession {
    /// `initialize` (with `capabilities`) then `notifications/initialized`
    /// at `url`, with API key `key` when given.
    pub async fn open(url: &str, key: Option<&str>, capabilities: Value) -> Self {
        let mut session = Self {
            http: reqwest::Client::new(),
            key: key.map(str::to_owned),
            id: String::new(),
        };
        let init = session
            .post(
                url,
                serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                "protocolVersion": "2025-11-25", "capabilities": capabilities,
                "clientInfo": {"name": "raw", "version": "0"}}}),
            )
            .await
            .expect("initialize");
        session.id = init
            .headers()
            .get("mcp-session-id")
            .and_then(|v| v.to_str().ok())
            .expect("a session id")
            .to_owned();
        drop(init.text().await);
        let initialized = session
            .post(
                url,
                serde_json::json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
            )
            .await
            .expect("initialized");
        assert_eq!(initialized.status(), 202);
        session
    }

    /// POSTs `body` in the session to `url` (any replica's endpoint).
    pub fn post(
        &self,
        url: &str,
        body: Value,
    ) -> impl Future<Output = reqwest::Result<reqwest::Response>> + use<> {
        let mut request = self
            .http
            .post(url)
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", "2025-11-25")
            .json(&body);
        if !self.id.is_empty() {
            request = request.header("mcp-session-id", &self.id);
        }
        if let Some(key) = &self.key {
            request = request.bearer_auth(key);
        }
        request.send()
    }

    /// Ends the session (`DELETE`) at `url`.
    pub async fn delete(&self, url: &str) -> reqwest::Response {
        self.http
            .delete(url)
            .header("mcp-session-id", &self.id)
            .header("mcp-protocol-version", "2025-11-25")
            .send()
            .await
            .expect("DELETE")
    }
}
