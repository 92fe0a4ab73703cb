//! The A2A client: a remote agent of the agents file (`remote_agents`),
//! its card fetched on first use (and again after a failure), its first
//! interface that Baton speaks (JSON-RPC or HTTP+JSON, A2A 1.x) chosen, and
//! the calls a Baton agent makes of it: send a message (streamed when the
//! card says it streams), subscribe to a task, get it, cancel it. What runs
//! the call in a child context — events, questions, the journal — is
//! `crate::agent::remote`.
//!
//! Every failure is a message the calling agent's model reads, naming the
//! remote agent and what went wrong: the card unreachable or malformed, no
//! binding or version in common, the key refused, the remote's own error.

use std::{sync::Arc, time::Duration};

use baton_proto::a2a::v1 as lf;
use futures::{StreamExt as _, stream::BoxStream};
use serde_json::{Value, json};

use super::error::ToolServerError;
use crate::catalog::remote::{BINDINGS, RemoteAgentSpec};

/// The version sent in `A2A-Version`.
pub const VERSION: &str = "1.0";

/// A stream of a remote task's updates; an error ends it.
pub type Updates = BoxStream<'static, Result<lf::StreamResponse, String>>;

/// Which binding a remote agent is called through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Binding {
    /// JSON-RPC 2.0 at the interface URL.
    JsonRpc,
    /// HTTP+JSON under the interface URL.
    Rest,
}

/// A remote agent's interface, chosen from its card.
#[derive(Debug, Clone)]
pub struct Endpoint {
    /// Its URL.
    pub url: String,
    /// Its binding.
    pub binding: Binding,
    /// The `tenant` its requests carry.
    pub tenant: String,
    /// Whether the card says it streams.
    pub streaming: bool,
}

/// One remote A2A agent.
pub struct RemoteAgent {
    name: String,
    spec: RemoteAgentSpec,
    http: reqwest::Client,
    token: Option<String>,
    endpoint: tokio::sync::Mutex<Option<Arc<Endpoint>>>,
}

impl RemoteAgent {
    /// The agent `name` of the agents file; `env` reads its key variable.
    pub fn new(
        name: &str,
        spec: &RemoteAgentSpec,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Self, ToolServerError> {
        let setup = |problem: String| ToolServerError::RemoteAgent {
            agent: name.to_owned(),
            problem,
        };
        let token = if !spec.api_key_env.is_empty() {
            Some(
                env(&spec.api_key_env)
                    .filter(|t| !t.is_empty())
                    .ok_or_else(|| {
                        setup(format!("api_key_env: {} is not set", spec.api_key_env))
                    })?,
            )
        } else if !spec.api_key_file.as_os_str().is_empty() {
            let file = spec.api_key_file.display().to_string();
            Some(
                baton_common::config::read_secret_file(&file)
                    .map_err(|e| setup(format!("api_key_file: {e}")))?,
            )
        } else {
            None
        };
        let timeout = spec.timeout.unwrap_or(Duration::from_secs(60));
        let mut http = reqwest::Client::builder()
            .connect_timeout(timeout)
            .read_timeout(timeout)
            .tcp_nodelay(true);
        let tls = &spec.tls;
        if !tls.ca_file.as_os_str().is_empty() {
            let pem =
                std::fs::read(&tls.ca_file).map_err(|e| setup(format!("tls.ca_file: {e}")))?;
            let certs = reqwest::Certificate::from_pem_bundle(&pem)
                .map_err(|e| setup(format!("tls.ca_file: {e}")))?;
            for cert in certs {
                http = http.add_root_certificate(cert);
            }
        }
        if !tls.cert_file.as_os_str().is_empty() {
            let mut pem =
                std::fs::read(&tls.cert_file).map_err(|e| setup(format!("tls.cert_file: {e}")))?;
            let key =
                std::fs::read(&tls.key_file).map_err(|e| setup(format!("tls.key_file: {e}")))?;
            pem.extend_from_slice(&key);
            let identity = reqwest::Identity::from_pem(&pem)
                .map_err(|e| setup(format!("tls.cert_file: {e}")))?;
            http = http.identity(identity);
        }
        let http = http
            .build()
            .map_err(|e| setup(format!("HTTP client: {e}")))?;
        Ok(Self {
            name: name.to_owned(),
            spec: spec.clone(),
            http,
            token,
            endpoint: tokio::sync::Mutex::new(None),
        })
    }

    /// Its name in the agents file.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The interface to call: from the card, fetched once (a failure is
    /// not kept: the next call fetches again).
    pub async fn endpoint(&self) -> Result<Arc<Endpoint>, String> {
        let mut cached = self.endpoint.lock().await;
        if let Some(e) = cached.as_ref() {
            return Ok(e.clone());
        }
        let endpoint = Arc::new(self.fetch_card().await?);
        *cached = Some(endpoint.clone());
        Ok(endpoint)
    }

    /// Forgets the card (after a failure that a changed card may explain).
    pub async fn forget_card(&self) {
        *self.endpoint.lock().await = None;
    }

    async fn fetch_card(&self) -> Result<Endpoint, String> {
        let url = self.spec.card_location();
        let response =
            self.auth(self.http.get(&url)).send().await.map_err(|e| {
                self.say(format!("its card at {url} is unreachable: {}", source(&e)))
            })?;
        let status = response.status();
        if !status.is_success() {
            return Err(self.say(format!("its card at {url} answered HTTP {status}")));
        }
        let card: lf::AgentCard = response
            .json()
            .await
            .map_err(|e| self.say(format!("its card at {url} is not an A2A 1.0 card: {e}")))?;
        let streaming = card
            .capabilities
            .as_ref()
            .and_then(|c| c.streaming)
            .unwrap_or(false);
        let wanted: Vec<&str> = if self.spec.binding.is_empty() {
            BINDINGS.to_vec()
        } else {
            vec![self.spec.binding.as_str()]
        };
        let offered: Vec<String> = card
            .supported_interfaces
            .iter()
            .map(|i| format!("{} {}", i.protocol_binding, i.protocol_version))
            .collect();
        let chosen = card.supported_interfaces.iter().find(|i| {
            wanted.contains(&i.protocol_binding.as_str()) && i.protocol_version.starts_with("1.")
        });
        let Some(interface) = chosen else {
            return Err(self.say(format!(
                "its card offers no interface Baton can use (Baton speaks A2A 1.x over {}; the card offers {})",
                wanted.join(" or "),
                if offered.is_empty() {
                    "none".to_owned()
                } else {
                    offered.join(", ")
                }
            )));
        };
        Ok(Endpoint {
            url: interface.url.trim_end_matches('/').to_owned(),
            binding: if interface.protocol_binding == "JSONRPC" {
                Binding::JsonRpc
            } else {
                Binding::Rest
            },
            tenant: interface.tenant.clone(),
            streaming,
        })
    }

    /// Sends `message` and follows the task: its updates (a streaming
    /// agent), or the one answer of a blocking send.
    pub async fn send(&self, ep: &Endpoint, message: lf::Message) -> Result<Updates, String> {
        let mut request = lf::SendMessageRequest {
            tenant: ep.tenant.clone(),
            message: Some(message),
            ..Default::default()
        };
        if !ep.streaming {
            request.configuration = Some(lf::SendMessageConfiguration::default());
            let answer: lf::SendMessageResponse = self
                .call(ep, "SendMessage", "POST", "message:send", to_json(&request))
                .await?;
            let update = match answer.payload {
                Some(lf::send_message_response::Payload::Task(t)) => {
                    lf::stream_response::Payload::Task(t)
                }
                Some(lf::send_message_response::Payload::Message(m)) => {
                    lf::stream_response::Payload::Message(m)
                }
                None => return Err(self.say("answered SendMessage with nothing".into())),
            };
            let one = lf::StreamResponse {
                payload: Some(update),
            };
            return Ok(futures::stream::iter([Ok(one)]).boxed());
        }
        self.stream(
            ep,
            "SendStreamingMessage",
            "message:stream",
            to_json(&request),
        )
        .await
    }

    /// Follows task `id` (its current state first).
    pub async fn subscribe(&self, ep: &Endpoint, id: &str) -> Result<Updates, String> {
        let request = lf::SubscribeToTaskRequest {
            tenant: ep.tenant.clone(),
            id: id.to_owned(),
        };
        let path = format!("tasks/{id}:subscribe");
        self.stream(ep, "SubscribeToTask", &path, to_json(&request))
            .await
    }

    /// Task `id` as it is.
    pub async fn get(&self, ep: &Endpoint, id: &str) -> Result<lf::Task, String> {
        let request = lf::GetTaskRequest {
            tenant: ep.tenant.clone(),
            id: id.to_owned(),
            history_length: Some(0),
        };
        let path = format!("tasks/{id}?historyLength=0");
        self.call(ep, "GetTask", "GET", &path, to_json(&request))
            .await
    }

    /// Cancels task `id`.
    pub async fn cancel(&self, ep: &Endpoint, id: &str) -> Result<(), String> {
        let request = lf::CancelTaskRequest {
            tenant: ep.tenant.clone(),
            id: id.to_owned(),
            metadata: None,
        };
        let path = format!("tasks/{id}:cancel");
        self.call::<lf::Task>(ep, "CancelTask", "POST", &path, to_json(&request))
            .await
            .map(|_| ())
    }

    /// A unary call: JSON-RPC `method`, or HTTP+JSON `verb path`.
    async fn call<T: serde::de::DeserializeOwned>(
        &self,
        ep: &Endpoint,
        method: &str,
        verb: &str,
        path: &str,
        params: Value,
    ) -> Result<T, String> {
        let response = self.request(ep, method, verb, path, params, false).await?;
        let status = response.status();
        let body: Value = response
            .json()
            .await
            .map_err(|e| self.say(format!("{method}: the answer is not JSON ({status}): {e}")))?;
        let result = match ep.binding {
            Binding::JsonRpc => self.jsonrpc_result(method, body)?,
            Binding::Rest if status.is_success() => body,
            Binding::Rest => return Err(self.rest_error(method, status, &body)),
        };
        serde_json::from_value(result)
            .map_err(|e| self.say(format!("{method}: the answer is not A2A 1.0: {e}")))
    }

    /// A streaming call's updates.
    async fn stream(
        &self,
        ep: &Endpoint,
        method: &str,
        path: &str,
        params: Value,
    ) -> Result<Updates, String> {
        let response = self.request(ep, method, "POST", path, params, true).await?;
        let status = response.status();
        let is_sse = response
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("text/event-stream"));
        if !is_sse {
            // An error answered before the stream began.
            let body: Value = response.json().await.unwrap_or(Value::Null);
            return Err(match ep.binding {
                Binding::JsonRpc => match self.jsonrpc_result(method, body) {
                    Err(e) => e,
                    Ok(_) => self.say(format!("{method}: answered JSON, not a stream")),
                },
                Binding::Rest => self.rest_error(method, status, &body),
            });
        }
        let name = self.name.clone();
        let binding = ep.binding;
        let method = method.to_owned();
        let events = eventsource_stream::EventStream::new(response.bytes_stream());
        Ok(events
            .map(move |event| {
                let say = |what: String| format!("remote agent {name}: {what}");
                let event = event.map_err(|e| say(format!("{method}: the stream broke: {e}")))?;
                let value: Value = serde_json::from_str(&event.data)
                    .map_err(|e| say(format!("{method}: an update is not JSON: {e}")))?;
                let update = match binding {
                    Binding::JsonRpc => match value.get("error") {
                        Some(error) => return Err(say(jsonrpc_error_text(&method, error))),
                        None => value.get("result").cloned().unwrap_or(Value::Null),
                    },
                    Binding::Rest => match value.get("error") {
                        Some(error) => return Err(say(rest_error_text(&method, error))),
                        None => value,
                    },
                };
                serde_json::from_value::<lf::StreamResponse>(update)
                    .map_err(|e| say(format!("{method}: an update is not A2A 1.0: {e}")))
            })
            .boxed())
    }

    async fn request(
        &self,
        ep: &Endpoint,
        method: &str,
        verb: &str,
        path: &str,
        params: Value,
        stream: bool,
    ) -> Result<reqwest::Response, String> {
        let builder = match ep.binding {
            Binding::JsonRpc => {
                let id = uuid::Uuid::new_v4().to_string();
                self.http
                    .post(&ep.url)
                    .json(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))
            }
            Binding::Rest => {
                let url = format!("{}/{path}", ep.url);
                match verb {
                    "GET" => self.http.get(url),
                    _ => self.http.post(url).json(&params),
                }
            }
        };
        let builder = builder.header("A2A-Version", VERSION).header(
            reqwest::header::ACCEPT,
            if stream {
                "text/event-stream"
            } else {
                "application/json"
            },
        );
        let response = self.auth(builder).send().await.map_err(|e| {
            self.say(format!(
                "{method}: unreachable at {}: {}",
                ep.url,
                source(&e)
            ))
        })?;
        match response.status().as_u16() {
            401 | 403 => Err(self.say(format!(
                "{method}: the key was refused (HTTP {}){}",
                response.status(),
                if self.token.is_none() {
                    "; the agent asks for one: set api_key_env or api_key_file in remote_agents"
                } else {
                    ""
                }
            ))),
            _ => Ok(response),
        }
    }

    fn auth(&self, builder: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        match &self.token {
            Some(t) => builder.bearer_auth(t),
            None => builder,
        }
    }

    fn jsonrpc_result(&self, method: &str, body: Value) -> Result<Value, String> {
        if let Some(error) = body.get("error") {
            return Err(self.say(jsonrpc_error_text(method, error)));
        }
        body.get("result")
            .cloned()
            .ok_or_else(|| self.say(format!("{method}: the answer has neither result nor error")))
    }

    fn rest_error(&self, method: &str, status: reqwest::StatusCode, body: &Value) -> String {
        match body.get("error") {
            Some(error) => self.say(rest_error_text(method, error)),
            None => self.say(format!("{method}: HTTP {status}")),
        }
    }

    fn say(&self, what: String) -> String {
        format!("remote agent {}: {what}", self.name)
    }
}

fn to_json<T: serde::Serialize>(message: &T) -> Value {
    serde_json::to_value(message).unwrap_or_default()
}

/// The A2A error's reason (`TASK_NOT_FOUND`), from an `ErrorInfo` detail.
fn reason(details: Option<&Value>) -> Option<String> {
    details?
        .as_array()?
        .iter()
        .find_map(|d| d.get("reason")?.as_str().map(str::to_owned))
}

fn jsonrpc_error_text(method: &str, error: &Value) -> String {
    let code = error.get("code").and_then(Value::as_i64).unwrap_or(0);
    let message = error.get("message").and_then(Value::as_str).unwrap_or("");
    match reason(error.get("data")) {
        Some(reason) => format!("{method} failed: {reason}: {message} (JSON-RPC {code})"),
        None => format!("{method} failed: {message} (JSON-RPC {code})"),
    }
}

fn rest_error_text(method: &str, error: &Value) -> String {
    let status = error.get("status").and_then(Value::as_str).unwrap_or("");
    let message = error.get("message").and_then(Value::as_str).unwrap_or("");
    match reason(error.get("details")) {
        Some(reason) => format!("{method} failed: {reason}: {message} ({status})"),
        None => format!("{method} failed: {message} ({status})"),
    }
}

/// An error with its causes (reqwest's own message is often only
/// "error sending request").
fn source(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        text.push_str(": ");
        text.push_str(&c.to_string());
        cause = c.source();
    }
    text
}
