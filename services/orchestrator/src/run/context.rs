//! A context: where in a run's tree something happens, and its span. A
//! leaf (OpenTelemetry only).

use std::sync::{Arc, atomic::AtomicBool};

use opentelemetry::{
    Context, KeyValue,
    trace::{Span as _, SpanBuilder, SpanId, Status as SpanStatus, TraceContextExt, Tracer},
};
use opentelemetry_sdk::trace::SdkTracer;

/// The name of an agent context's span, as the OpenTelemetry GenAI
/// semantic conventions name agent invocations.
pub fn invoke_agent_span_name(agent: &str) -> String {
    format!("invoke_agent {agent}")
}

/// Where in the tree of contexts something happens. Every context is an
/// OpenTelemetry span, a child of its parent context's span; events carry
/// its span id. Whoever creates a context ends its span
/// ([`ContextInfo::end_on_drop`]).
#[derive(Debug)]
pub struct ContextInfo {
    /// `root`, `root.researcher.1`, …
    pub id: String,
    /// The parent's id; empty at the root.
    pub parent: String,
    /// 0 at the root.
    pub depth: u32,
    /// The context's span id (16 hex).
    pub span_id: String,
    /// The context's span, as the OpenTelemetry parent of what runs in it.
    pub otel: Context,
    /// Whether the run's journal has the span id (see
    /// `run::events::Draft::record_span`).
    pub span_recorded: AtomicBool,
}

impl ContextInfo {
    /// The root context of a run: a span named `name` under the run's span.
    pub fn root(tracer: &SdkTracer, run: &Context, name: String) -> Arc<Self> {
        Self::new(tracer, run, "root".into(), String::new(), 0, name, None)
    }

    /// A child context `{self}.{segment}`, its span named `name`.
    pub fn child(&self, tracer: &SdkTracer, segment: &str, name: String) -> Arc<Self> {
        self.child_with(tracer, segment, name, None)
    }

    /// [`Self::child`] whose events carry the span id `span_id` when given
    /// (a resumed run's context keeps the span id its events had).
    pub fn child_with(
        &self,
        tracer: &SdkTracer,
        segment: &str,
        name: String,
        span_id: Option<SpanId>,
    ) -> Arc<Self> {
        Self::new(
            tracer,
            &self.otel,
            format!("{}.{segment}", self.id),
            self.id.clone(),
            self.depth + 1,
            name,
            span_id,
        )
    }

    /// [`Self::child_with`] whose span is a child of `otel` (a span inside
    /// this context, such as the `execute_tool` span of the call that
    /// starts the child) rather than of this context's own span.
    pub fn child_under(
        &self,
        tracer: &SdkTracer,
        segment: &str,
        name: String,
        span_id: Option<SpanId>,
        otel: &Context,
    ) -> Arc<Self> {
        Self::new(
            tracer,
            otel,
            format!("{}.{segment}", self.id),
            self.id.clone(),
            self.depth + 1,
            name,
            span_id,
        )
    }

    /// [`Self::root`] whose events carry the span id `span_id` when given.
    pub fn root_with(
        tracer: &SdkTracer,
        run: &Context,
        name: String,
        span_id: Option<SpanId>,
    ) -> Arc<Self> {
        Self::new(tracer, run, "root".into(), String::new(), 0, name, span_id)
    }

    fn new(
        tracer: &SdkTracer,
        parent_cx: &Context,
        id: String,
        parent: String,
        depth: u32,
        name: String,
        span_id: Option<SpanId>,
    ) -> Arc<Self> {
        let mut attributes = vec![
            KeyValue::new("baton.context.id", id.clone()),
            KeyValue::new("baton.context.depth", i64::from(depth)),
        ];
        let span_recorded = AtomicBool::new(span_id.is_some());
        if let Some(before) = span_id {
            attributes.push(KeyValue::new(
                "baton.context.resumed_span",
                before.to_string(),
            ));
        }
        let span = tracer.build_with_context(
            SpanBuilder::from_name(name).with_attributes(attributes),
            parent_cx,
        );
        // A resumed run's context gets a new span (the one before ended
        // with its replica); its events keep the span id they had, so a
        // client sees one span per context, and the new span names the
        // old one (`baton.context.resumed_span`).
        let span_id = span_id.map_or_else(
            || span.span_context().span_id().to_string(),
            |s| s.to_string(),
        );
        Arc::new(Self {
            id,
            parent,
            depth,
            span_id,
            otel: parent_cx.with_span(span),
            span_recorded,
        })
    }

    /// Sets an attribute of the context's span.
    pub fn set_attribute(&self, kv: KeyValue) {
        self.otel.span().set_attribute(kv);
    }

    /// Marks the context's span failed with `code` (its `error.type`).
    pub fn set_error(&self, code: tonic::Code, message: impl Into<String>) {
        let span = self.otel.span();
        span.set_attribute(KeyValue::new(
            "error.type",
            baton_common::metrics::code_name(code),
        ));
        span.set_status(SpanStatus::error(message.into()));
    }

    /// Ends the context's span when the guard drops (also when the run is
    /// cancelled and the future holding it is dropped).
    pub fn end_on_drop(self: &Arc<Self>) -> SpanEnd {
        SpanEnd(self.clone())
    }
}

/// Ends a context's span when dropped.
pub struct SpanEnd(Arc<ContextInfo>);

impl Drop for SpanEnd {
    fn drop(&mut self) {
        self.0.otel.span().end();
    }
}
