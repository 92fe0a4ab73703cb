//! The `baton.v1.ContextStore` gRPC service.
//!
//! Wire messages are turned into domain types here (a missing or bad field
//! becomes `INVALID_ARGUMENT` naming it) and domain errors into `Status` by
//! the one `From<Error> for Status` in [`crate::error`].

use std::{collections::HashMap, net::SocketAddr, sync::Arc, time::Duration};

use baton_common::{
    auth::{Tenant, tenant_of},
    otel::Tracing,
};
use baton_proto::v1::{
    self as pb,
    context_store_server::{ContextStore as ContextStoreRpc, ContextStoreServer},
};
use futures::{Future, StreamExt};
use opentelemetry::{
    KeyValue,
    trace::{Span as _, SpanBuilder, SpanKind, Status as SpanStatus, TraceContextExt, Tracer},
};
use std::time::Instant;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tokio_util::{sync::CancellationToken, task::TaskTracker};
use tonic::{Request, Response, Status, service::interceptor::InterceptedService};

use crate::{
    auth::{Authenticate, Credentials},
    config::WatchLimits,
    error::{Error, Result},
    metrics::Metrics,
    store::{
        ChangeKind, ContextStore, DEFAULT_PAGE_SIZE, Key, Limits, MAX_BATCH, MAX_PAGE_SIZE, Page,
        PageToken, Put, Scope, Selection, SlotMeta, parse_trace_id, validate_key_chars,
    },
};

/// Room for gRPC framing and the other fields of a Put beside its value.
const MESSAGE_OVERHEAD: usize = 64 * 1024;
/// Changes buffered between a watch and a slow client before the watch waits.
const WATCH_STREAM_BUFFER: usize = 64;

/// The gRPC face of a [`ContextStore`].
pub struct StoreService {
    store: Arc<dyn ContextStore>,
    watches: Arc<WatchCounts>,
    shutdown: CancellationToken,
    tasks: TaskTracker,
    tracing: Tracing,
    metrics: Arc<Metrics>,
}

type WatchStream = ReceiverStream<Result<pb::WatchResponse, Status>>;

impl StoreService {
    /// Wraps `store`; watches end when `shutdown` is cancelled, and their
    /// tasks are tracked by `tasks`.
    pub fn new(
        store: Arc<dyn ContextStore>,
        shutdown: CancellationToken,
        tasks: TaskTracker,
    ) -> Self {
        Self {
            store,
            watches: Arc::new(WatchCounts::new(WatchLimits::default())),
            shutdown,
            tasks,
            tracing: Tracing::with_env(&Default::default(), crate::SERVICE_NAME, |_| None)
                .unwrap_or_else(|e| unreachable!("a provider without exporter: {e}")),
            metrics: Arc::new(Metrics::new()),
        }
    }

    /// Bounds open watches per trace and per connection (by default
    /// [`WatchLimits::default`]).
    pub fn with_watch_limits(mut self, limits: WatchLimits) -> Self {
        self.watches = Arc::new(WatchCounts::new(limits));
        self
    }

    /// Exports the per-tenant metrics of `tenants` (see [`crate::quota`]).
    pub fn with_tenant_metrics(mut self, tenants: crate::quota::TenantMetrics) -> Self {
        self.metrics = Arc::new(Metrics::with_tenants(&tenants));
        self
    }

    /// Makes server spans with `tracing` (by default none are exported).
    pub fn with_tracing(mut self, tracing: Tracing) -> Self {
        self.tracing = tracing;
        self
    }

    /// The service's tracer provider.
    pub fn tracing(&self) -> &Tracing {
        &self.tracing
    }

    /// The service's metrics.
    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    /// Runs one RPC: a server span when the caller sent trace context (a
    /// child of the caller's span), and the call's metrics.
    async fn observed<T>(
        &self,
        method: &'static str,
        parent: opentelemetry::Context,
        call: impl Future<Output = Result<Response<T>, Status>>,
    ) -> Result<Response<T>, Status> {
        let span = parent.span().span_context().is_valid().then(|| {
            self.tracing.tracer().build_with_context(
                SpanBuilder::from_name(format!("baton.v1.ContextStore/{method}"))
                    .with_kind(SpanKind::Server)
                    .with_attributes([
                        KeyValue::new("rpc.system", "grpc"),
                        KeyValue::new("rpc.service", "baton.v1.ContextStore"),
                        KeyValue::new("rpc.method", method),
                    ]),
                &parent,
            )
        });
        let began = Instant::now();
        let result = call.await;
        let (code, field) = match &result {
            Ok(_) => (tonic::Code::Ok, None),
            Err(s) => (
                s.code(),
                s.metadata()
                    .get("baton-field")
                    .and_then(|v| v.to_str().ok()),
            ),
        };
        self.metrics
            .observe(method, code, field, began.elapsed().as_secs_f64());
        if let Some(mut span) = span {
            span.set_attribute(KeyValue::new("rpc.grpc.status_code", code as i64));
            if let Err(s) = &result {
                span.set_status(SpanStatus::error(s.message().to_owned()));
            }
            span.end();
        }
        result
    }

    /// The tonic server, with message limits sized for the store's value
    /// limit (so an oversized value reaches validation and gets a clear
    /// error, instead of tonic's generic one).
    /// Every call is authenticated by `credentials` first.
    pub fn into_server(
        self,
        credentials: Credentials,
    ) -> InterceptedService<ContextStoreServer<Self>, Authenticate> {
        let max = self.store.limits().max_value_bytes as usize + MESSAGE_OVERHEAD;
        let server = ContextStoreServer::new(self)
            .max_decoding_message_size(max)
            .max_encoding_message_size(max);
        InterceptedService::new(server, Authenticate(credentials))
    }

    fn check_running(&self) -> Result<()> {
        if self.shutdown.is_cancelled() {
            Err(Error::ShuttingDown)
        } else {
            Ok(())
        }
    }

    fn key(&self, s: &str) -> Result<Key> {
        Key::parse("key", s, self.store.limits().max_key_len)
    }
}

/// The tenant's trace a call names: the tenant its credential gave it
/// (`""` when authentication is off), the trace its `trace_id` field.
fn scope_of(extensions: &tonic::Extensions, trace_id: &str) -> Result<Scope> {
    Ok(Scope::new(
        Tenant(tenant_of(extensions).to_owned()),
        parse_trace_id(trace_id)?,
    ))
}

impl StoreService {
    fn prefix(&self, s: &str) -> Result<()> {
        validate_key_chars("prefix", s, self.store.limits().max_key_len)
    }
}

fn timestamp(ms: u64) -> prost_types::Timestamp {
    prost_types::Timestamp {
        seconds: (ms / 1000) as i64,
        nanos: ((ms % 1000) * 1_000_000) as i32,
    }
}

fn ttl(d: Option<prost_types::Duration>) -> Result<Option<Duration>> {
    let Some(d) = d else { return Ok(None) };
    if d.seconds < 0 || d.nanos < 0 {
        return Err(Error::invalid(
            "ttl",
            "must be positive, got a negative duration",
        ));
    }
    if d.nanos >= 1_000_000_000 {
        return Err(Error::invalid("ttl", "nanos must be below 1000000000"));
    }
    let ttl = Duration::new(d.seconds as u64, d.nanos as u32);
    if ttl.as_millis() == 0 && !ttl.is_zero() {
        return Err(Error::invalid("ttl", "must be at least 1ms"));
    }
    Ok(Some(ttl))
}

/// The page a List asks for (AIP-158: 0 is the default size, larger sizes
/// are lowered to the maximum, a token continues the listing it came from).
fn page(scope: &Scope, prefix: &str, size: i32, token: &str) -> Result<Page> {
    let size = match size {
        s if s < 0 => return Err(Error::invalid("page_size", "must not be negative")),
        0 => DEFAULT_PAGE_SIZE,
        s => (s as usize).min(MAX_PAGE_SIZE),
    };
    let after = if token.is_empty() {
        None
    } else {
        Some(PageToken::decode("page_token", token, &scope.trace_id, prefix)?.after)
    };
    Ok(Page { after, size })
}

/// Open watches per trace and per client connection, against
/// [`WatchLimits`].
struct WatchCounts {
    limits: WatchLimits,
    open: std::sync::Mutex<WatchTally>,
}

#[derive(Default)]
struct WatchTally {
    traces: HashMap<Scope, usize>,
    connections: HashMap<SocketAddr, usize>,
}

/// One open watch, counted until dropped.
struct CountedWatch {
    counts: Arc<WatchCounts>,
    scope: Scope,
    connection: Option<SocketAddr>,
}

impl WatchCounts {
    fn new(limits: WatchLimits) -> Self {
        Self {
            limits,
            open: Default::default(),
        }
    }

    /// Counts a new watch of `trace_id` on `connection`, unless either is
    /// at its limit (`RESOURCE_EXHAUSTED`, nothing counted).
    fn open(
        counts: &Arc<Self>,
        scope: &Scope,
        connection: Option<SocketAddr>,
    ) -> Result<CountedWatch> {
        let mut open = counts.open.lock().unwrap_or_else(|p| p.into_inner());
        let on_trace = open.traces.get(scope).copied().unwrap_or(0);
        if on_trace >= counts.limits.per_trace {
            return Err(Error::Exhausted {
                field: "trace_id",
                message: format!(
                    "trace {} already has {on_trace} open watches, the limit (watches.per_trace)",
                    scope.trace_id
                ),
            });
        }
        if let Some(c) = connection {
            let on_connection = open.connections.get(&c).copied().unwrap_or(0);
            if on_connection >= counts.limits.per_connection {
                return Err(Error::Exhausted {
                    field: "trace_id",
                    message: format!(
                        "this connection already has {on_connection} open watches, the limit (watches.per_connection)"
                    ),
                });
            }
            *open.connections.entry(c).or_default() += 1;
        }
        *open.traces.entry(scope.clone()).or_default() += 1;
        Ok(CountedWatch {
            counts: counts.clone(),
            scope: scope.clone(),
            connection,
        })
    }
}

impl Drop for CountedWatch {
    fn drop(&mut self) {
        let mut open = self.counts.open.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(n) = open.traces.get_mut(&self.scope) {
            *n -= 1;
            if *n == 0 {
                open.traces.remove(&self.scope);
            }
        }
        if let Some(c) = self.connection
            && let Some(n) = open.connections.get_mut(&c)
        {
            *n -= 1;
            if *n == 0 {
                open.connections.remove(&c);
            }
        }
    }
}

/// Turns a Put request of `tenant` into a write the store's limits allow
/// (nothing is written); every problem names its field. The handler and the
/// fuzz targets call it.
pub fn put_of(r: pb::PutRequest, tenant: Tenant, limits: &Limits) -> Result<Put> {
    let put = Put {
        scope: Scope::new(tenant, parse_trace_id(&r.trace_id)?),
        key: Key::parse("key", &r.key, limits.max_key_len)?,
        value: r.value.into(),
        content_type: r.content_type,
        ttl: ttl(r.ttl)?,
        expected_version: r.expected_version,
    };
    limits.check_put(&put)?;
    Ok(put)
}

/// The puts of a `PutManyRequest`, checked; errors name the entry.
pub fn puts_of(
    r: pb::PutManyRequest,
    tenant: Tenant,
    limits: &Limits,
) -> Result<(Scope, Vec<Put>)> {
    let scope = Scope::new(tenant, parse_trace_id(&r.trace_id)?);
    let puts = r
        .entries
        .into_iter()
        .enumerate()
        .map(|(i, e)| {
            let in_entry = |err| Error::in_entry(i, &e.key, err);
            Ok(Put {
                scope: scope.clone(),
                key: Key::parse("key", &e.key, limits.max_key_len).map_err(in_entry)?,
                ttl: ttl(e.ttl).map_err(in_entry)?,
                value: e.value.into(),
                content_type: e.content_type,
                expected_version: e.expected_version,
            })
        })
        .collect::<Result<Vec<_>>>()?;
    limits.check_batch(&scope, &puts)?;
    Ok((scope, puts))
}

/// The selection of a `DeleteManyRequest`, checked.
pub fn selection_of(r: pb::DeleteManyRequest, limits: &Limits) -> Result<Selection> {
    let selection = match (r.keys.is_empty(), r.prefix.is_empty()) {
        (false, false) => {
            return Err(Error::invalid(
                "prefix",
                "set either keys or prefix, not both",
            ));
        }
        (true, false) => Selection::Prefix(r.prefix),
        (_, true) => {
            if r.keys.len() > MAX_BATCH {
                return Err(Error::invalid(
                    "keys",
                    format!("{} keys is over the limit of {MAX_BATCH}", r.keys.len()),
                ));
            }
            Selection::Keys(
                r.keys
                    .iter()
                    .map(|k| Key::parse("keys", k, limits.max_key_len))
                    .collect::<Result<_>>()?,
            )
        }
    };
    limits.check_selection(&selection)?;
    Ok(selection)
}

fn slot_info(m: SlotMeta) -> pb::SlotInfo {
    pb::SlotInfo {
        key: m.key,
        content_type: m.content_type,
        version: m.version,
        size_bytes: m.size_bytes,
        expires_at: Some(timestamp(m.expires_at_ms)),
    }
}

/// The audit record of a write RPC: its tenant and (well-formed) trace id,
/// written with the call's outcome.
struct Audit {
    rpc: &'static str,
    tenant: String,
    trace_id: String,
}

impl Audit {
    fn of<T>(rpc: &'static str, request: &Request<T>, trace_id: &str) -> Self {
        Self {
            rpc,
            tenant: tenant_of(request.extensions()).to_owned(),
            // Only a well-formed id is recorded (the field may be anything).
            trace_id: parse_trace_id(trace_id)
                .map(|t| t.to_string())
                .unwrap_or_default(),
        }
    }

    fn done<T>(self, outcome: Result<T, Status>) -> Result<T, Status> {
        baton_common::audit::record(
            self.rpc,
            &self.tenant,
            "",
            &self.trace_id,
            baton_common::audit::code(&outcome),
        );
        outcome
    }
}

/// The RPCs' bodies; [`ContextStoreRpc`] wraps each in [`StoreService::observed`].
impl StoreService {
    async fn do_put(
        &self,
        request: Request<pb::PutRequest>,
    ) -> Result<Response<pb::PutResponse>, Status> {
        self.check_running()?;
        let tenant = Tenant(tenant_of(request.extensions()).to_owned());
        let put = put_of(request.into_inner(), tenant, self.store.limits())?;
        let written = self.store.put(put).await?;
        Ok(Response::new(pb::PutResponse {
            version: written.version,
            expires_at: Some(timestamp(written.expires_at_ms)),
        }))
    }

    async fn do_put_many(
        &self,
        request: Request<pb::PutManyRequest>,
    ) -> Result<Response<pb::PutManyResponse>, Status> {
        self.check_running()?;
        let tenant = Tenant(tenant_of(request.extensions()).to_owned());
        let (scope, puts) = puts_of(request.into_inner(), tenant, self.store.limits())?;
        let written = self.store.put_many(&scope, puts).await?;
        Ok(Response::new(pb::PutManyResponse {
            written: written
                .into_iter()
                .map(|w| pb::PutResponse {
                    version: w.version,
                    expires_at: Some(timestamp(w.expires_at_ms)),
                })
                .collect(),
        }))
    }

    async fn do_delete_many(
        &self,
        request: Request<pb::DeleteManyRequest>,
    ) -> Result<Response<pb::DeleteManyResponse>, Status> {
        self.check_running()?;
        let scope = scope_of(request.extensions(), &request.get_ref().trace_id)?;
        let selection = selection_of(request.into_inner(), self.store.limits())?;
        let removed = self.store.delete_many(&scope, &selection).await?;
        Ok(Response::new(pb::DeleteManyResponse {
            deleted: removed.deleted,
            version: removed.version,
        }))
    }

    async fn do_get(
        &self,
        request: Request<pb::GetRequest>,
    ) -> Result<Response<pb::GetResponse>, Status> {
        self.check_running()?;
        let scope = scope_of(request.extensions(), &request.get_ref().trace_id)?;
        let r = request.into_inner();
        let key = self.key(&r.key)?;
        let slot = self.store.get(&scope, &key).await?;
        Ok(Response::new(pb::GetResponse {
            slot: Some(slot_info(slot.meta)),
            value: slot.value.to_vec(),
        }))
    }

    async fn do_list(
        &self,
        request: Request<pb::ListRequest>,
    ) -> Result<Response<pb::ListResponse>, Status> {
        self.check_running()?;
        let scope = scope_of(request.extensions(), &request.get_ref().trace_id)?;
        let r = request.into_inner();
        self.prefix(&r.prefix)?;
        let page = page(&scope, &r.prefix, r.page_size, &r.page_token)?;
        let listing = self.store.list_page(&scope, &r.prefix, &page).await?;
        let next_page_token = listing
            .next_after
            .map(|after| {
                PageToken {
                    trace_id: scope.trace_id.to_string(),
                    prefix: r.prefix.clone(),
                    after,
                }
                .encode()
            })
            .unwrap_or_default();
        Ok(Response::new(pb::ListResponse {
            slots: listing.slots.into_iter().map(slot_info).collect(),
            used_bytes: listing.used_bytes,
            used_keys: listing.used_keys,
            next_page_token,
        }))
    }

    async fn do_delete(
        &self,
        request: Request<pb::DeleteRequest>,
    ) -> Result<Response<pb::DeleteResponse>, Status> {
        self.check_running()?;
        let scope = scope_of(request.extensions(), &request.get_ref().trace_id)?;
        let r = request.into_inner();
        let key = self.key(&r.key)?;
        let version = self.store.delete(&scope, &key, r.expected_version).await?;
        Ok(Response::new(pb::DeleteResponse { version }))
    }

    async fn do_clear(
        &self,
        request: Request<pb::ClearRequest>,
    ) -> Result<Response<pb::ClearResponse>, Status> {
        self.check_running()?;
        let scope = scope_of(request.extensions(), &request.get_ref().trace_id)?;
        let deleted = self.store.clear(&scope).await?;
        Ok(Response::new(pb::ClearResponse { deleted }))
    }

    async fn do_watch(
        &self,
        request: Request<pb::WatchRequest>,
    ) -> Result<Response<WatchStream>, Status> {
        self.check_running()?;
        let connection = request.remote_addr();
        let scope = scope_of(request.extensions(), &request.get_ref().trace_id)?;
        let r = request.into_inner();
        self.prefix(&r.prefix)?;
        // Counted from here until the stream's task ends, however it ends.
        let counted = WatchCounts::open(&self.watches, &scope, connection)?;
        // Subscribed before we answer: a change made after the client sees
        // the response headers is delivered.
        let mut changes = self.store.watch(&scope, &r.prefix).await?;
        let (tx, rx) = mpsc::channel(WATCH_STREAM_BUFFER);
        let shutdown = self.shutdown.clone();
        let watches = self.metrics.watches.clone();
        watches.inc();
        self.tasks.spawn(async move {
            // Counted while the task lives, however it ends.
            struct Open(prometheus_client::metrics::gauge::Gauge);
            impl Drop for Open {
                fn drop(&mut self) {
                    self.0.dec();
                }
            }
            let _open = Open(watches);
            let _counted = counted;
            loop {
                let item = tokio::select! {
                    _ = shutdown.cancelled() => {
                        let _ = tx.send(Err(Error::ShuttingDown.into())).await;
                        return;
                    }
                    _ = tx.closed() => return,
                    item = changes.next() => item,
                };
                let Some(item) = item else { return };
                let msg = item
                    .map(|c| pb::WatchResponse {
                        kind: match c.kind {
                            ChangeKind::Put => pb::SlotChangeKind::Put,
                            ChangeKind::Deleted => pb::SlotChangeKind::Deleted,
                            ChangeKind::Expired => pb::SlotChangeKind::Expired,
                            ChangeKind::Cleared => pb::SlotChangeKind::Cleared,
                        } as i32,
                        key: c.key,
                        version: c.version,
                        size_bytes: c.size_bytes,
                        content_type: c.content_type,
                        expires_at: (c.expires_at_ms > 0).then(|| timestamp(c.expires_at_ms)),
                    })
                    .map_err(Status::from);
                let failed = msg.is_err();
                // A failed send means the client left: stop, which drops the
                // subscription.
                if tx.send(msg).await.is_err() || failed {
                    return;
                }
            }
        });
        Ok(Response::new(ReceiverStream::new(rx)))
    }
}

#[tonic::async_trait]
impl ContextStoreRpc for StoreService {
    async fn put(
        &self,
        request: Request<pb::PutRequest>,
    ) -> Result<Response<pb::PutResponse>, Status> {
        let audit = Audit::of("Put", &request, &request.get_ref().trace_id);
        let parent = baton_common::otel::extract(request.metadata());
        audit.done(self.observed("Put", parent, self.do_put(request)).await)
    }

    async fn put_many(
        &self,
        request: Request<pb::PutManyRequest>,
    ) -> Result<Response<pb::PutManyResponse>, Status> {
        let audit = Audit::of("PutMany", &request, &request.get_ref().trace_id);
        let parent = baton_common::otel::extract(request.metadata());
        audit.done(
            self.observed("PutMany", parent, self.do_put_many(request))
                .await,
        )
    }

    async fn delete_many(
        &self,
        request: Request<pb::DeleteManyRequest>,
    ) -> Result<Response<pb::DeleteManyResponse>, Status> {
        let audit = Audit::of("DeleteMany", &request, &request.get_ref().trace_id);
        let parent = baton_common::otel::extract(request.metadata());
        audit.done(
            self.observed("DeleteMany", parent, self.do_delete_many(request))
                .await,
        )
    }

    async fn get(
        &self,
        request: Request<pb::GetRequest>,
    ) -> Result<Response<pb::GetResponse>, Status> {
        let parent = baton_common::otel::extract(request.metadata());
        self.observed("Get", parent, self.do_get(request)).await
    }

    async fn list(
        &self,
        request: Request<pb::ListRequest>,
    ) -> Result<Response<pb::ListResponse>, Status> {
        let parent = baton_common::otel::extract(request.metadata());
        self.observed("List", parent, self.do_list(request)).await
    }

    async fn delete(
        &self,
        request: Request<pb::DeleteRequest>,
    ) -> Result<Response<pb::DeleteResponse>, Status> {
        let audit = Audit::of("Delete", &request, &request.get_ref().trace_id);
        let parent = baton_common::otel::extract(request.metadata());
        audit.done(
            self.observed("Delete", parent, self.do_delete(request))
                .await,
        )
    }

    async fn clear(
        &self,
        request: Request<pb::ClearRequest>,
    ) -> Result<Response<pb::ClearResponse>, Status> {
        let audit = Audit::of("Clear", &request, &request.get_ref().trace_id);
        let parent = baton_common::otel::extract(request.metadata());
        audit.done(self.observed("Clear", parent, self.do_clear(request)).await)
    }

    type WatchStream = WatchStream;

    async fn watch(
        &self,
        request: Request<pb::WatchRequest>,
    ) -> Result<Response<Self::WatchStream>, Status> {
        let parent = baton_common::otel::extract(request.metadata());
        self.observed("Watch", parent, self.do_watch(request)).await
    }
}
