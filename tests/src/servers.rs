//! Real servers nobody here wrote, for the model and tool tests: the MCP
//! reference server `@modelcontextprotocol/server-everything` (npm), an MCP
//! server written with the Python `mcp` package (`tests/mcp/py_server.py`)
//! and LiteLLM's proxy (PyPI). `./tests/run` installs them into `.tools/`
//! (ignored by git) before the Rust tests; a test that needs one and finds
//! it missing fails saying how to install it — it never skips.

use std::{
    net::SocketAddr,
    path::PathBuf,
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

/// The repository's root.
pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ has a parent")
        .to_path_buf()
}

fn installed(what: &str, path: PathBuf) -> PathBuf {
    assert!(
        path.exists(),
        "{what} is not installed at {}: run ./tests/run once (it installs the test servers into .tools/)",
        path.display()
    );
    path
}

/// `server-everything`'s entry script (run it with `node`).
pub fn mcp_everything() -> PathBuf {
    installed(
        "@modelcontextprotocol/server-everything",
        repo_root()
            .join(".tools/node_modules/@modelcontextprotocol/server-everything/dist/index.js"),
    )
}

/// The Python of `.tools/servers-venv` (with `mcp` and `litellm[proxy]`).
pub fn servers_python() -> PathBuf {
    installed(
        "the test servers' Python (mcp, litellm)",
        repo_root().join(".tools/servers-venv/bin/python"),
    )
}

/// The `baton` command line, as `cargo build -p baton-cli` (and
/// `./tests/run`, whose `cargo test --workspace` builds it) leaves it;
/// `BATON_BIN` names another.
pub fn baton_cli() -> PathBuf {
    let path = std::env::var_os("BATON_BIN").map_or_else(
        || {
            std::env::var_os("CARGO_TARGET_DIR")
                .map_or_else(|| repo_root().join("target"), PathBuf::from)
                .join("debug/baton")
        },
        PathBuf::from,
    );
    assert!(
        path.exists(),
        "the baton command line is not built at {}: cargo build -p baton-cli",
        path.display()
    );
    path
}

/// The Python MCP test server's script.
pub fn mcp_py_server() -> PathBuf {
    repo_root().join("tests/mcp/py_server.py")
}

/// A server process, killed on drop.
pub struct Process {
    child: Child,
    /// Where it listens.
    pub addr: SocketAddr,
}

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Process {
    /// Starts `cmd` (which must listen on `addr`) and waits until `addr`
    /// accepts connections, up to `within`.
    pub fn start(mut cmd: Command, addr: SocketAddr, within: Duration) -> anyhow::Result<Self> {
        let child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()?;
        let mut p = Self { child, addr };
        let began = Instant::now();
        loop {
            if std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok() {
                return Ok(p);
            }
            if let Some(status) = p.child.try_wait()? {
                anyhow::bail!("the server exited before listening: {status}");
            }
            anyhow::ensure!(
                began.elapsed() < within,
                "the server did not listen on {addr} within {within:?}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// `server-everything` over Streamable HTTP on a free port (`/mcp`).
pub fn mcp_everything_http() -> anyhow::Result<Process> {
    let addr = crate::ports::free_addr()?;
    let mut cmd = Command::new("node");
    cmd.arg(mcp_everything())
        .arg("streamableHttp")
        .env("PORT", addr.port().to_string());
    Process::start(cmd, addr, Duration::from_secs(30))
}

/// The Python MCP server over Streamable HTTP on a free port (`/mcp`).
pub fn mcp_py_http() -> anyhow::Result<Process> {
    let addr = crate::ports::free_addr()?;
    let mut cmd = Command::new(servers_python());
    cmd.arg(mcp_py_server())
        .arg("--http")
        .arg(addr.port().to_string());
    Process::start(cmd, addr, Duration::from_secs(30))
}

/// LiteLLM's proxy with mock models on a free port: `text` streams a fixed
/// answer, `rate-limited` answers 429, `failing` 500 and `too-long` 400;
/// its master key is [`LITELLM_KEY`]. Every request it received is a line
/// of [`LiteLlm::recorded`] (through `tests/litellm/recorder.py`).
pub struct LiteLlm {
    /// The proxy process.
    pub process: Process,
    dir: tempfile::TempDir,
}

/// The proxy's master key.
pub const LITELLM_KEY: &str = "sk-baton-test-0123456789abcdef0123456789abcdef";

impl LiteLlm {
    /// Starts the proxy (a few seconds).
    pub fn start() -> anyhow::Result<Self> {
        let dir = tempfile::tempdir()?;
        let config = dir.path().join("config.yaml");
        std::fs::write(
            &config,
            format!(
                r#"model_list:
  - model_name: text
    litellm_params: {{model: openai/text, api_key: unused, mock_response: "Hello from LiteLLM"}}
  - model_name: judge
    litellm_params: {{model: openai/judge, api_key: unused, mock_response: '{{"score": 0.9, "reason": "The answer greets the person by name."}}'}}
  - model_name: harsh-judge
    litellm_params: {{model: openai/harsh-judge, api_key: unused, mock_response: '{{"score": 0.1, "reason": "The answer does not cite a source."}}'}}
  - model_name: rate-limited
    litellm_params: {{model: openai/rate-limited, api_key: unused, mock_response: "litellm.RateLimitError"}}
  - model_name: failing
    litellm_params: {{model: openai/failing, api_key: unused, mock_response: "litellm.InternalServerError"}}
  - model_name: too-long
    litellm_params: {{model: openai/too-long, api_key: unused, mock_response: "litellm.ContextWindowExceededError"}}
litellm_settings:
  num_retries: 0
  callbacks: recorder.recorder
router_settings:
  num_retries: 0
general_settings:
  master_key: {LITELLM_KEY}
"#
            ),
        )?;
        let addr = crate::ports::free_addr()?;
        let mut cmd = Command::new(servers_python());
        cmd.args(["-m", "litellm.proxy.proxy_cli", "--config"])
            .arg(&config)
            .args(["--host", "127.0.0.1", "--port", &addr.port().to_string()])
            .current_dir(repo_root().join("tests/litellm"))
            .env("BATON_LITELLM_RECORD", dir.path().join("record.jsonl"))
            .env("LITELLM_LOG", "ERROR")
            .env("LITELLM_LOCAL_MODEL_COST_MAP", "True")
            .env("NO_DOCS", "True");
        let process = Process::start(cmd, addr, Duration::from_secs(90))?;
        // Listening comes before the routes are ready: wait for liveliness.
        let began = Instant::now();
        loop {
            let ok = std::net::TcpStream::connect(addr).and_then(|mut s| {
                use std::io::{Read, Write};
                s.set_read_timeout(Some(Duration::from_secs(2)))?;
                s.write_all(
                    b"GET /health/liveliness HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
                )?;
                let mut out = String::new();
                s.read_to_string(&mut out)?;
                Ok(out.starts_with("HTTP/1.1 200"))
            });
            if matches!(ok, Ok(true)) {
                break;
            }
            anyhow::ensure!(
                began.elapsed() < Duration::from_secs(90),
                "LiteLLM did not become live"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
        Ok(Self { process, dir })
    }

    /// The base URL (`http://…/v1`).
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.process.addr)
    }

    /// The requests the proxy received, as their JSON bodies.
    pub fn recorded(&self) -> Vec<serde_json::Value> {
        std::fs::read_to_string(self.dir.path().join("record.jsonl"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }
}
