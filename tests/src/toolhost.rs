//! A small `ToolHost` server for the tests: real gRPC, real streams.
//!
//! Tools: `web_search {query}` (three progress reports, then results),
//! `pick_color` (offers options, then answers), `book_flight {city}` (asks
//! for confirmation with a resume token, then books), `flaky` (fails), and
//! `hang` (never ends; counts its own cancellation), `slow_charge` (answers
//! after 1.5 s).

use std::{
    net::SocketAddr,
    pin::Pin,
    sync::{
        Arc, Mutex,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};

use baton_proto::v1::{
    self as pb, execute_response as ev,
    tool_host_server::{ToolHost, ToolHostServer},
};
use futures::Stream;
use tokio_util::sync::CancellationToken;
use tonic::{Request, Response, Status};

/// What the server saw, for assertions.
#[derive(Default)]
pub struct Seen {
    /// ListTools calls.
    pub listed: AtomicUsize,
    /// `hang` calls that were cancelled by the caller.
    pub cancelled: AtomicUsize,
    /// Every ExecuteRequest received.
    pub requests: Mutex<Vec<pb::ExecuteRequest>>,
    /// The `traceparent` metadata of each ExecuteRequest (empty if none).
    pub traceparents: Mutex<Vec<String>>,
}

#[derive(Clone)]
struct Host {
    seen: Arc<Seen>,
}

type ExecStream = Pin<Box<dyn Stream<Item = Result<pb::ExecuteResponse, Status>> + Send>>;

fn msg(event: ev::Event) -> Result<pb::ExecuteResponse, Status> {
    Ok(pb::ExecuteResponse { event: Some(event) })
}

struct CancelCounter(Arc<Seen>);

impl Drop for CancelCounter {
    fn drop(&mut self) {
        self.0.cancelled.fetch_add(1, Ordering::SeqCst);
    }
}

#[tonic::async_trait]
impl ToolHost for Host {
    async fn list_tools(
        &self,
        _: Request<pb::ListToolsRequest>,
    ) -> Result<Response<pb::ListToolsResponse>, Status> {
        self.seen.listed.fetch_add(1, Ordering::SeqCst);
        let tool = |name: &str, description: &str, schema: &str| pb::ToolSpec {
            name: name.into(),
            description: description.into(),
            parameters_json_schema: schema.into(),
        };
        Ok(Response::new(pb::ListToolsResponse {
            tools: vec![
                tool(
                    "web_search",
                    "Searches the web.",
                    r#"{"type":"object","properties":{"query":{"type":"string"}}}"#,
                ),
                tool("pick_color", "Picks a color.", r#"{"type":"object"}"#),
                tool(
                    "book_flight",
                    "Books a flight.",
                    r#"{"type":"object","properties":{"city":{"type":"string"}}}"#,
                ),
                tool("flaky", "Always fails.", r#"{"type":"object"}"#),
                tool(
                    "score_answer",
                    "Scores an evaluation case's answer: 1 when it names the case's label `must_name`.",
                    r#"{"type":"object"}"#,
                ),
                tool("hang", "Never ends.", r#"{"type":"object"}"#),
                tool(
                    "slow_charge",
                    "Charges a card; takes 1.5 s.",
                    r#"{"type":"object"}"#,
                ),
            ],
        }))
    }

    type ExecuteStream = ExecStream;

    async fn execute(
        &self,
        request: Request<pb::ExecuteRequest>,
    ) -> Result<Response<ExecStream>, Status> {
        let traceparent = request
            .metadata()
            .get("traceparent")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned();
        self.seen
            .traceparents
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(traceparent);
        let r = request.into_inner();
        self.seen
            .requests
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(r.clone());
        let args: serde_json::Value = serde_json::from_str(&r.arguments_json)
            .map_err(|e| Status::invalid_argument(e.to_string()))?;
        let arg = |k: &str| {
            args.get(k)
                .and_then(|v| v.as_str())
                .unwrap_or_default()
                .to_owned()
        };
        let seen = self.seen.clone();
        let (tx, rx) = tokio::sync::mpsc::channel(8);
        match r.tool.as_str() {
            "web_search" => {
                let query = arg("query");
                tokio::spawn(async move {
                    for (p, m) in [(33, "fetching"), (66, "reading"), (100, "ranking")] {
                        tokio::time::sleep(Duration::from_millis(20)).await;
                        let _ = tx
                            .send(msg(ev::Event::Progress(ev::Progress {
                                percent: p,
                                message: m.into(),
                            })))
                            .await;
                    }
                    let _ = tx
                        .send(msg(ev::Event::Result(ev::Result {
                            output: format!("3 results for {query}"),
                        })))
                        .await;
                });
            }
            "score_answer" => {
                // A custom scorer (`eval`): given `{case, result}`.
                let want = args["case"]["labels"]["must_name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned();
                let output = args["result"]["output"].as_str().unwrap_or_default();
                let named = !want.is_empty() && output.contains(&want);
                let said = serde_json::json!({
                    "score": if named { 1.0 } else { 0.0 },
                    "reason": if named { format!("names {want}") } else { format!("does not name {want:?}") },
                });
                let _ = tx
                    .send(msg(ev::Event::Result(ev::Result {
                        output: said.to_string(),
                    })))
                    .await;
            }
            "pick_color" => {
                let options = vec!["red".into(), "blue".into()];
                let _ = tx.try_send(msg(ev::Event::Options(ev::Options {
                    question: "Which color?".into(),
                    options,
                })));
                let _ = tx.try_send(msg(ev::Event::Result(ev::Result {
                    output: "red".into(),
                })));
            }
            "book_flight" if r.resume_token.is_empty() => {
                let city = arg("city");
                let _ = tx.try_send(msg(ev::Event::InputRequired(ev::InputRequired {
                    prompt: format!("Book the flight to {city}?"),
                    options: vec!["yes".into(), "no".into()],
                    resume_token: format!("book:{city}"),
                })));
            }
            "book_flight" => {
                let city = r.resume_token.trim_start_matches("book:").to_owned();
                let output = format!("booked {city}: {}", r.input);
                let _ = tx.try_send(msg(ev::Event::Result(ev::Result { output })));
            }
            "flaky" => {
                let _ = tx.try_send(msg(ev::Event::Error(ev::Error {
                    message: "flaky failed".into(),
                })));
            }
            "hang" => {
                tokio::spawn(async move {
                    let _counter = CancelCounter(seen);
                    let _ = tx
                        .send(msg(ev::Event::Progress(ev::Progress {
                            percent: 1,
                            message: "started".into(),
                        })))
                        .await;
                    // Ends only when the caller goes away.
                    tx.closed().await;
                });
            }
            "slow_charge" => {
                tokio::spawn(async move {
                    tokio::time::sleep(std::time::Duration::from_millis(1500)).await;
                    let _ = tx
                        .send(msg(ev::Event::Result(ev::Result {
                            output: "charged".into(),
                        })))
                        .await;
                });
            }
            other => return Err(Status::not_found(format!("no tool {other}"))),
        }
        Ok(Response::new(Box::pin(
            tokio_stream::wrappers::ReceiverStream::new(rx),
        )))
    }
}

/// A ToolHost server on a loopback port.
pub struct TestToolHost {
    /// Where it listens.
    pub addr: SocketAddr,
    /// What it saw.
    pub seen: Arc<Seen>,
    shutdown: CancellationToken,
}

impl TestToolHost {
    /// Starts the server on `127.0.0.1:0`.
    pub async fn start() -> anyhow::Result<Self> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        Ok(Self::serve(
            addr,
            tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true)),
        ))
    }

    /// Starts the server on `127.0.0.1:0` speaking TLS only, with the
    /// server certificate of `pki` (and requiring a client certificate of
    /// its CA when `mtls`); its endpoint is [`Self::tls_endpoint`].
    pub async fn start_tls(pki: &crate::pki::TestPki, mtls: bool) -> anyhow::Result<Self> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let tls = crate::pki::server_tls(pki, mtls)?;
        Ok(Self::serve(
            addr,
            baton_common::tls::incoming(listener, tls),
        ))
    }

    /// Serves the tools on the connections of `incoming`.
    fn serve<I, IO, E>(addr: SocketAddr, incoming: I) -> Self
    where
        I: futures::Stream<Item = Result<IO, E>> + Send + 'static,
        IO: tonic::transport::server::Connected
            + tokio::io::AsyncRead
            + tokio::io::AsyncWrite
            + Unpin
            + Send
            + 'static,
        E: Into<Box<dyn std::error::Error + Send + Sync>> + 'static,
    {
        let seen = Arc::new(Seen::default());
        let shutdown = CancellationToken::new();
        let service = ToolHostServer::new(Host { seen: seen.clone() });
        tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(service)
                .serve_with_incoming_shutdown(incoming, shutdown.clone().cancelled_owned()),
        );
        Self {
            addr,
            seen,
            shutdown,
        }
    }

    /// `http://{addr}`.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// `https://localhost:{port}` (the name the test certificate is for).
    pub fn tls_endpoint(&self) -> String {
        format!("https://localhost:{}", self.addr.port())
    }
}

impl Drop for TestToolHost {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}
