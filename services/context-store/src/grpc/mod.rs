//! The `baton.v1.ContextStore` gRPC service: a thin face over a
//! [`ContextStore`].
//!
//! Each RPC is `observed` (a server span, the call's metrics) around a
//! `do_*` body of a few lines: wire messages into domain values
//! ([`convert`], where a missing or bad field becomes `INVALID_ARGUMENT`
//! naming it), one store call, the answer back. Domain errors become
//! `Status` by the one `From<Error> for Status` of `baton_store::error`.
//! Write RPCs are audited ([`audit`]); Watch streams are bounded and
//! relayed by [`watch`].

pub mod audit;
pub mod convert;
pub mod watch;

use std::{sync::Arc, time::Instant};

use baton_common::{
    auth::{Tenant, tenant_of},
    otel::Tracing,
};
use baton_proto::v1::{
    self as pb,
    context_store_server::{ContextStore as ContextStoreRpc, ContextStoreServer},
};
use baton_store::{
    ContextStore,
    error::{Error, Result},
    key::{Key, validate_key_chars},
    page::PageToken,
};
use futures::Future;
use opentelemetry::{
    KeyValue,
    trace::{Span as _, SpanBuilder, SpanKind, Status as SpanStatus, TraceContextExt, Tracer},
};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tokio_util::{sync::CancellationToken, task::TaskTracker};
use tonic::{Request, Response, Status, service::interceptor::InterceptedService};

pub use self::convert::{put_of, puts_of, selection_of};
use self::{
    audit::Audit,
    convert::{page, scope_of, slot_info, timestamp},
    watch::WatchCounts,
};
use crate::{
    auth::{Authenticate, Credentials},
    config::WatchLimits,
    metrics::Metrics,
    names::{GRPC_SERVICE, SERVICE_NAME},
    quota::TenantMetrics,
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
            tracing: Tracing::with_env(&Default::default(), SERVICE_NAME, |_| None)
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
    pub fn with_tenant_metrics(mut self, tenants: TenantMetrics) -> Self {
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
                SpanBuilder::from_name(format!("{GRPC_SERVICE}/{method}"))
                    .with_kind(SpanKind::Server)
                    .with_attributes([
                        KeyValue::new("rpc.system", "grpc"),
                        KeyValue::new("rpc.service", GRPC_SERVICE),
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

impl StoreService {
    fn prefix(&self, s: &str) -> Result<()> {
        validate_key_chars("prefix", s, self.store.limits().max_key_len)
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
        let changes = self.store.watch(&scope, &r.prefix).await?;
        let (tx, rx) = mpsc::channel(WATCH_STREAM_BUFFER);
        self.tasks.spawn(watch::relay(
            changes,
            tx,
            self.shutdown.clone(),
            self.metrics.watches.clone(),
            counted,
        ));
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
