//! The context store over gRPC, behind the same [`ContextStore`] trait as the
//! in-process backends, so the runtime cannot tell them apart.
//!
//! Every call is a `baton.v1.ContextStore/<Method>` client span, a child of
//! the current OpenTelemetry context (the tool call or pipeline step making
//! it), and carries that span as W3C `traceparent`, so the store's server
//! spans join the run's trace. Health probes are neither traced nor
//! propagated.
//!
//! Every call also states the tenant whose slots it reaches (`baton-tenant`)
//! under the orchestrator's service token (`authorization: Bearer`, from
//! `store.token_file`, re-read when it changes), so the store keeps each
//! tenant's slots apart whatever trace id a caller sent.

use baton_client::{DeleteSelection, Error as ClientError, PutEntry, PutOptions, StoreClient, pb};
use baton_common::{
    auth::{ServiceToken, TENANT_HEADER, Tenant},
    ids::TraceId,
};
use baton_store::{
    Change, ChangeKind, ChangeStream, ContextStore, Key, Limits, Listing, Page, PageToken, Put,
    Removed, Scope, Selection, Slot, SlotMeta, Written,
    error::{Error, Result},
};
use futures::{Future, StreamExt};
use opentelemetry::{
    Context, KeyValue,
    context::FutureExt as _,
    trace::{SpanBuilder, SpanKind, Status, TraceContextExt, Tracer},
};
use opentelemetry_sdk::trace::SdkTracer;
use std::sync::Arc;
use std::time::Duration;

use tonic::Code;

/// A `baton-context-store` reached over gRPC.
pub struct RemoteStore {
    client: StoreClient,
    /// The channel, for health probes (neither traced nor propagated).
    channel: tonic::transport::Channel,
    limits: Limits,
    /// Deadline of every call.
    timeout: Duration,
    tracer: Option<SdkTracer>,
    /// The service token presented on every call, if any.
    token: Option<Arc<ServiceToken>>,
}

impl RemoteStore {
    /// A store at `endpoint` (`http://host:port`, or `dns:///host:port` to
    /// balance over every address of the name); the connection is made
    /// lazily and re-made by itself, so the orchestrator starts while the
    /// store is away. Every call must finish within `timeout`.
    pub fn new(endpoint: &str, limits: Limits, timeout: Duration) -> anyhow::Result<Self> {
        Self::with_tls(
            endpoint,
            &baton_client::ClientTls::default(),
            limits,
            timeout,
        )
    }

    /// [`RemoteStore::new`] with TLS settings (`https://` endpoints always
    /// speak TLS).
    pub fn with_tls(
        endpoint: &str,
        tls: &baton_client::ClientTls,
        limits: Limits,
        timeout: Duration,
    ) -> anyhow::Result<Self> {
        let channel = baton_client::balance::lazy_channel_tls(endpoint, tls)?;
        let client = StoreClient::new(channel.clone());
        Ok(Self {
            client,
            channel,
            limits,
            timeout,
            tracer: None,
            token: None,
        })
    }

    /// Presents `token` (the store's `auth.service_token_file`) on every
    /// call.
    pub fn with_token(mut self, token: Arc<ServiceToken>) -> Self {
        self.token = Some(token);
        self
    }

    /// A client whose calls carry the current trace context, the service
    /// token and `tenant`.
    fn client(&self, tenant: &Tenant) -> StoreClient {
        let tenant = (!tenant.as_str().is_empty())
            .then(|| tonic::metadata::MetadataValue::try_from(tenant.as_str()).ok())
            .flatten();
        let authorization = self.token.as_ref().and_then(|t| {
            tonic::metadata::MetadataValue::try_from(format!("Bearer {}", t.current())).ok()
        });
        self.client
            .clone()
            .with_metadata(Arc::new(move |md: &mut tonic::metadata::MetadataMap| {
                baton_common::otel::inject(&Context::current(), md);
                if let Some(v) = &authorization {
                    md.insert("authorization", v.clone());
                }
                if let Some(v) = &tenant {
                    md.insert(TENANT_HEADER, v.clone());
                }
            }))
    }

    /// Makes a client span per call with `tracer`.
    pub fn with_tracer(mut self, tracer: SdkTracer) -> Self {
        self.tracer = Some(tracer);
        self
    }

    /// Runs `call` in a client span named after the RPC.
    async fn traced<T>(
        &self,
        method: &'static str,
        trace_id: &TraceId,
        call: impl Future<Output = Result<T>>,
    ) -> Result<T> {
        let timeout = self.timeout;
        let call = async move {
            tokio::time::timeout(timeout, call)
                .await
                .unwrap_or_else(|_| {
                    Err(Error::Unavailable(format!(
                        "the context store did not answer within {}",
                        baton_common::config::duration::format(timeout)
                    )))
                })
        };
        let Some(tracer) = &self.tracer else {
            return call.await;
        };
        let parent = Context::current();
        let span = tracer.build_with_context(
            SpanBuilder::from_name(format!("baton.v1.ContextStore/{method}"))
                .with_kind(SpanKind::Client)
                .with_attributes([
                    KeyValue::new("rpc.system", "grpc"),
                    KeyValue::new("rpc.service", "baton.v1.ContextStore"),
                    KeyValue::new("rpc.method", method),
                    KeyValue::new("baton.trace_id", trace_id.to_string()),
                ]),
            &parent,
        );
        let cx = parent.with_span(span);
        let result = call.with_context(cx.clone()).await;
        if let Err(e) = &result {
            cx.span().set_status(Status::error(e.to_string()));
        }
        cx.span().end();
        result
    }
}

fn ms(ts: Option<baton_proto::wkt::Timestamp>) -> u64 {
    ts.map_or(0, |t| {
        (t.seconds.max(0) as u64) * 1000 + (t.nanos.max(0) as u64) / 1_000_000
    })
}

fn meta(s: pb::SlotInfo) -> SlotMeta {
    SlotMeta {
        key: s.key,
        content_type: s.content_type,
        version: s.version,
        size_bytes: s.size_bytes,
        expires_at_ms: ms(s.expires_at),
    }
}

/// Maps a remote error back onto the store's own error kinds.
fn from_client(e: ClientError, trace_id: &TraceId, key: &str) -> Error {
    let message = e.message();
    match e.code() {
        Code::NotFound => Error::NotFound {
            trace_id: trace_id.to_string(),
            key: key.to_owned(),
        },
        Code::Aborted if e.field() == Some("expected_version") => Error::VersionMismatch {
            key: key.to_owned(),
            expected: 0,
            current: e.current_version(),
        },
        Code::Unavailable | Code::DeadlineExceeded => Error::Unavailable(message),
        // The remote store's own message already names the field; a
        // batch's refused entry comes with its index.
        Code::InvalidArgument | Code::ResourceExhausted | Code::Aborted => {
            let remote = Error::Remote {
                code: e.code(),
                message,
            };
            match e.entry() {
                Some(index) => Error::InEntry {
                    index,
                    key: key.to_owned(),
                    source: Box::new(remote),
                },
                None => remote,
            }
        }
        _ => Error::Internal(format!("context store: {message}")),
    }
}

#[async_trait::async_trait]
impl ContextStore for RemoteStore {
    fn limits(&self) -> &Limits {
        &self.limits
    }

    async fn put(&self, put: Put) -> Result<Written> {
        let options = PutOptions {
            content_type: put.content_type.clone(),
            ttl: put.ttl,
            expected_version: put.expected_version,
        };
        let trace_id = &put.scope.trace_id;
        let call = async {
            self.client(&put.scope.tenant)
                .put_with(
                    trace_id.as_str(),
                    put.key.as_str(),
                    put.value.to_vec(),
                    options,
                )
                .await
                .map_err(|e| from_client(e, trace_id, put.key.as_str()))
        };
        let r = self.traced("Put", trace_id, call).await?;
        Ok(Written {
            version: r.version,
            expires_at_ms: ms(r.expires_at),
        })
    }

    async fn get(&self, scope: &Scope, key: &Key) -> Result<Slot> {
        let trace_id = &scope.trace_id;
        let call = async {
            self.client(&scope.tenant)
                .get(trace_id.as_str(), key.as_str())
                .await
                .map_err(|e| from_client(e, trace_id, key.as_str()))
        };
        let r = self.traced("Get", trace_id, call).await?;
        let value = r.value.into();
        let slot = r.slot.ok_or_else(|| {
            Error::Internal("context store answered Get without slot metadata".into())
        })?;
        Ok(Slot {
            meta: meta(slot),
            value,
        })
    }

    async fn list_page(&self, scope: &Scope, prefix: &str, page: &Page) -> Result<Listing> {
        let trace_id = &scope.trace_id;
        let token = page
            .after
            .clone()
            .map(|after| {
                PageToken {
                    trace_id: trace_id.to_string(),
                    prefix: prefix.to_owned(),
                    after,
                }
                .encode()
            })
            .unwrap_or_default();
        let size = i32::try_from(page.size).unwrap_or(i32::MAX);
        let call = async {
            self.client(&scope.tenant)
                .list_page(trace_id.as_str(), prefix, size, &token)
                .await
                .map_err(|e| from_client(e, trace_id, prefix))
        };
        let r = self.traced("List", trace_id, call).await?;
        let slots: Vec<SlotMeta> = r.slots.into_iter().map(meta).collect();
        let next_after = (!r.next_page_token.is_empty())
            .then(|| slots.last().map(|s| s.key.clone()))
            .flatten();
        Ok(Listing {
            slots,
            used_bytes: r.used_bytes,
            used_keys: r.used_keys,
            next_after,
        })
    }

    async fn delete(&self, scope: &Scope, key: &Key, expected_version: Option<u64>) -> Result<u64> {
        let trace_id = &scope.trace_id;
        let call = async {
            self.client(&scope.tenant)
                .delete(trace_id.as_str(), key.as_str(), expected_version)
                .await
                .map_err(|e| from_client(e, trace_id, key.as_str()))
        };
        self.traced("Delete", trace_id, call).await
    }

    async fn clear(&self, scope: &Scope) -> Result<u64> {
        let trace_id = &scope.trace_id;
        let call = async {
            self.client(&scope.tenant)
                .clear(trace_id.as_str())
                .await
                .map_err(|e| from_client(e, trace_id, ""))
        };
        self.traced("Clear", trace_id, call).await
    }

    async fn put_many(&self, scope: &Scope, puts: Vec<Put>) -> Result<Vec<Written>> {
        let trace_id = &scope.trace_id;
        let first = puts
            .first()
            .map(|p| p.key.as_str().to_owned())
            .unwrap_or_default();
        let entries = puts
            .into_iter()
            .map(|p| PutEntry {
                key: p.key.as_str().to_owned(),
                value: p.value.to_vec(),
                options: PutOptions {
                    content_type: p.content_type,
                    ttl: p.ttl,
                    expected_version: p.expected_version,
                },
            })
            .collect();
        let call = async {
            self.client(&scope.tenant)
                .put_many(trace_id.as_str(), entries)
                .await
                .map_err(|e| from_client(e, trace_id, &first))
        };
        let written = self.traced("PutMany", trace_id, call).await?;
        Ok(written
            .into_iter()
            .map(|r| Written {
                version: r.version,
                expires_at_ms: ms(r.expires_at),
            })
            .collect())
    }

    async fn delete_many(&self, scope: &Scope, selection: &Selection) -> Result<Removed> {
        let trace_id = &scope.trace_id;
        let wanted = match selection {
            Selection::Keys(keys) => {
                DeleteSelection::Keys(keys.iter().map(|k| k.as_str().to_owned()).collect())
            }
            Selection::Prefix(p) => DeleteSelection::Prefix(p.clone()),
        };
        let call = async {
            self.client(&scope.tenant)
                .delete_many(trace_id.as_str(), wanted)
                .await
                .map_err(|e| from_client(e, trace_id, ""))
        };
        let r = self.traced("DeleteMany", trace_id, call).await?;
        Ok(Removed {
            deleted: r.deleted,
            keys: Vec::new(),
            version: r.version,
        })
    }

    async fn watch(&self, scope: &Scope, prefix: &str) -> Result<ChangeStream> {
        let trace_id = &scope.trace_id;
        let trace = trace_id.clone();
        let stream = self
            .client(&scope.tenant)
            .watch(trace_id.as_str(), prefix)
            .await
            .map_err(|e| from_client(e, trace_id, prefix))?;
        Ok(Box::pin(stream.map(move |item| {
            let c = item.map_err(|e| from_client(e, &trace, ""))?;
            let kind = match c.kind() {
                pb::SlotChangeKind::Put => ChangeKind::Put,
                pb::SlotChangeKind::Deleted => ChangeKind::Deleted,
                pb::SlotChangeKind::Expired => ChangeKind::Expired,
                pb::SlotChangeKind::Cleared | pb::SlotChangeKind::Unspecified => {
                    ChangeKind::Cleared
                }
            };
            Ok(Change {
                kind,
                key: c.key,
                version: c.version,
                size_bytes: c.size_bytes,
                content_type: c.content_type,
                expires_at_ms: ms(c.expires_at),
            })
        })))
    }

    async fn ping(&self) -> Result<()> {
        // The store's own readiness (grpc.health.v1, which follows its
        // Redis): nothing a client writes can change the answer.
        let mut health = tonic_health::pb::health_client::HealthClient::new(self.channel.clone());
        let mut request = tonic::Request::new(tonic_health::pb::HealthCheckRequest {
            service: "baton.v1.ContextStore".into(),
        });
        request.set_timeout(self.timeout);
        let answer = tokio::time::timeout(self.timeout, health.check(request))
            .await
            .map_err(|_| Error::Unavailable("the context store's health did not answer".into()))?
            .map_err(|s| {
                Error::Unavailable(format!("the context store's health: {}", s.message()))
            })?;
        match answer.into_inner().status() {
            tonic_health::pb::health_check_response::ServingStatus::Serving => Ok(()),
            other => Err(Error::Unavailable(format!(
                "the context store reports {}",
                other.as_str_name()
            ))),
        }
    }
}
