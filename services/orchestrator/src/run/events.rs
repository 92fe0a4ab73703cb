//! The event path of a run: frames send drafts into one bounded channel; the
//! run's sequencer gives each the next `seq`, completes the envelope, records
//! it on the run, applies the request's filter and forwards it to the client
//! through a second bounded channel. A slow client fills that channel and the
//! sequencer waits, which fills the first one and the frames wait: the run
//! slows down, nothing is dropped. If the client goes away the run is
//! cancelled at once.

use std::{collections::HashSet, sync::Arc, time::SystemTime};

use std::{
    pin::Pin,
    task::{Context, Poll},
};

use baton_proto::v1::{self as pb, run_event::Payload};
use tokio::sync::mpsc;

use crate::error::Error;

use super::record::RunRecord;
pub use super::{
    context::{ContextInfo, SpanEnd},
    log::{Logged, Outgoing, PackedEvent},
};

/// Events buffered between a run's frames and its sequencer.
pub const DRAFT_BUFFER: usize = 256;
/// Events buffered between the sequencer and the client.
pub const CLIENT_BUFFER: usize = 256;

/// The stream of a run's events a caller reads, whatever the face: events
/// in order, then the end of the stream; an error ends it early (the
/// replica is going away, or a watcher fell behind). It reads as decoded
/// events; the gRPC face takes them as they come ([`Self::outgoing`]), so
/// what a run's log kept packed goes out as its bytes.
pub struct EventStream(Source);

enum Source {
    /// Events sent by a task (a run's sequencer, a watcher).
    Channel(mpsc::Receiver<Result<Outgoing, Error>>),
    /// A fork's stream: see [`EventStream::after_replayed`].
    Replaying(Box<Replaying>),
}

/// A fork's first events, read from its log as the stream is read (no
/// task or channel between them and the face), then its live ones.
struct Replaying {
    record: Arc<RunRecord>,
    /// The seq of the last event read from the log.
    cursor: u64,
    /// The seq of the last replayed event.
    until: u64,
    batch: std::vec::IntoIter<Outgoing>,
    filter: Filter,
    /// What the stream ends with if the log is dropped (evicted for
    /// room) before its replayed part has gone out; `None` once it has.
    gone: Option<Error>,
    live: EventStream,
}

/// Replayed events a fork's stream reads from its log at a time.
const REPLAY_BATCH: usize = 128;

impl Replaying {
    fn poll_next(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<Outgoing, Error>>> {
        loop {
            if self.gone.is_none() {
                // It ended early.
                return Poll::Ready(None);
            }
            if let Some(event) = self.batch.next() {
                match self.filter.admit(event) {
                    Some(event) => return Poll::Ready(Some(Ok(event))),
                    None => continue,
                }
            }
            if self.cursor >= self.until {
                return self.live.poll_outgoing(cx);
            }
            let want = usize::try_from(self.until - self.cursor)
                .map_or(REPLAY_BATCH, |n| n.min(REPLAY_BATCH));
            match self.record.outgoing_after(self.cursor, want) {
                super::log::LogRead::Events(batch, _) if !batch.is_empty() => {
                    self.cursor = batch.last().map_or(self.until, Outgoing::seq);
                    self.batch = batch.into_iter();
                }
                _ => {
                    // The caller re-attaches from where it is; the run
                    // goes on (or is cancelled) as when a client goes.
                    self.live.close();
                    return Poll::Ready(self.gone.take().map(Err));
                }
            }
        }
    }
}

/// The sending side of an [`EventStream`].
pub type EventSender = mpsc::Sender<Result<Outgoing, Error>>;

/// A stream's channel, buffering [`CLIENT_BUFFER`] events.
pub fn channel() -> (EventSender, EventStream) {
    let (tx, rx) = mpsc::channel(CLIENT_BUFFER);
    (tx, EventStream(Source::Channel(rx)))
}

impl EventStream {
    /// A fork's stream: the first `until` events of its log (`record`'s,
    /// what it replays, preloaded), read a batch at a time as the stream is
    /// read and filtered, then this stream (its live events). If the log is
    /// dropped before they have gone out, the stream ends with `gone`.
    pub fn after_replayed(
        self,
        record: Arc<RunRecord>,
        until: u64,
        filter: Filter,
        gone: Error,
    ) -> EventStream {
        EventStream(Source::Replaying(Box::new(Replaying {
            record,
            cursor: 0,
            until,
            batch: Vec::new().into_iter(),
            filter,
            gone: Some(gone),
            live: self,
        })))
    }

    /// The events as they come: those read from packed chunks not decoded.
    pub fn outgoing(mut self) -> impl futures::Stream<Item = Result<Outgoing, Error>> + Send {
        futures::stream::poll_fn(move |cx| self.poll_outgoing(cx))
    }

    /// Closes it: nothing more is taken (what is in flight may still be read).
    fn close(&mut self) {
        match &mut self.0 {
            Source::Channel(rx) => rx.close(),
            Source::Replaying(r) => r.live.close(),
        }
    }

    fn poll_outgoing(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<Outgoing, Error>>> {
        match &mut self.0 {
            Source::Channel(rx) => rx.poll_recv(cx),
            Source::Replaying(r) => r.poll_next(cx),
        }
    }
}

impl futures::Stream for EventStream {
    type Item = Result<pb::RunEvent, Error>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.poll_outgoing(cx)
            .map(|item| item.map(|r| r.map(Outgoing::into_event)))
    }
}

/// An event before the sequencer numbers it. Sent boxed: a channel's
/// slots are as large as what it carries, and a run's draft channel
/// allocates 32 of them as it opens (8 KiB of drafts, 256 bytes boxed).
pub struct Draft {
    /// Where.
    pub ctx: Arc<ContextInfo>,
    /// The active agent; empty for run and pipeline events.
    pub agent: Arc<str>,
    /// What.
    pub payload: Payload,
    /// For a durable run, the record of the durable point this event ends
    /// (`unit`, value), written with it in one script.
    pub journal: Option<(String, Vec<u8>)>,
    /// Whether the context's span id is recorded with it (`sp/{context}`:
    /// the first durable point of each context records it, so a resumed
    /// run's context keeps the span id its events had).
    pub record_span: bool,
}

/// The server-side filter of a stream.
#[derive(Debug, Default, Clone)]
pub struct Filter {
    /// Only events at most this deep.
    pub max_depth: Option<u32>,
    /// Only events in these contexts or below.
    pub prefixes: Vec<String>,
    /// Only these kinds (empty: all).
    pub kinds: HashSet<i32>,
    /// How many kinds the request listed, duplicates included: what the
    /// server's bound on a filter's entries counts.
    pub listed_kinds: usize,
}

/// The kind of a payload, as EventKind.
pub fn kind_of(p: &Payload) -> pb::EventKind {
    use pb::EventKind as K;
    match p {
        Payload::RunStarted(_) => K::RunStarted,
        Payload::RunCompleted(_) => K::RunCompleted,
        Payload::RunFailed(_) => K::RunFailed,
        Payload::RunCancelled(_) => K::RunCancelled,
        Payload::RunResumed(_) => K::RunResumed,
        Payload::AgentStarted(_) => K::AgentStarted,
        Payload::TextDelta(_) => K::TextDelta,
        Payload::MessageCompleted(_) => K::MessageCompleted,
        Payload::AgentCompleted(_) => K::AgentCompleted,
        Payload::Handoff(_) => K::Handoff,
        Payload::ModelFallback(_) => K::ModelFallback,
        Payload::BudgetExhausted(_) => K::BudgetExhausted,
        Payload::RateLimitWait(_) => K::RateLimitWait,
        Payload::HistoryCompacted(_) => K::HistoryCompacted,
        Payload::ToolCallStarted(_) => K::ToolCallStarted,
        Payload::ToolProgress(_) => K::ToolProgress,
        Payload::ToolOptions(_) => K::ToolOptions,
        Payload::ToolCallCompleted(_) => K::ToolCallCompleted,
        Payload::ToolBatchCompleted(_) => K::ToolBatchCompleted,
        Payload::ApprovalRequested(_) => K::ApprovalRequested,
        Payload::ApprovalResolved(_) => K::ApprovalResolved,
        Payload::InputRequested(_) => K::InputRequested,
        Payload::InputReceived(_) => K::InputReceived,
        Payload::InputTimedOut(_) => K::InputTimedOut,
        Payload::ContextWritten(_) => K::ContextWritten,
        Payload::StepStarted(_) => K::StepStarted,
        Payload::StepCompleted(_) => K::StepCompleted,
        Payload::StepFailed(_) => K::StepFailed,
        Payload::StepSkipped(_) => K::StepSkipped,
        Payload::PipelineCompleted(_) => K::PipelineCompleted,
        Payload::Diverged(_) => K::Diverged,
    }
}

/// Whether a payload ends the run's stream.
pub fn is_terminal(p: &Payload) -> bool {
    matches!(
        p,
        Payload::RunCompleted(_) | Payload::RunFailed(_) | Payload::RunCancelled(_)
    )
}

impl Filter {
    /// `event` if the client asked for it (see [`Self::passes_at`]); a
    /// packed one is decoded only when the filter has something to check.
    pub fn admit(&self, event: Outgoing) -> Option<Outgoing> {
        if self.max_depth.is_none() && self.prefixes.is_empty() && self.kinds.is_empty() {
            return Some(event);
        }
        let event = event.into_event();
        let passes = event
            .payload
            .as_ref()
            .is_some_and(|p| self.passes_at(&event.context_id, event.depth, p));
        passes.then(|| Outgoing::Event(Box::new(event)))
    }

    /// Whether the client asked for this event. Terminal events always pass.
    pub fn passes(&self, ctx: &ContextInfo, payload: &Payload) -> bool {
        self.passes_at(&ctx.id, ctx.depth, payload)
    }

    /// Whether an event of context `id` at `depth` passes.
    pub fn passes_at(&self, id: &str, depth: u32, payload: &Payload) -> bool {
        if is_terminal(payload) {
            return true;
        }
        if self.max_depth.is_some_and(|d| depth > d) {
            return false;
        }
        if !self.prefixes.is_empty()
            && !self.prefixes.iter().any(|p| {
                id == p || (id.starts_with(p.as_str()) && id.as_bytes().get(p.len()) == Some(&b'.'))
            })
        {
            return false;
        }
        self.kinds.is_empty() || self.kinds.contains(&(kind_of(payload) as i32))
    }
}

/// Numbers, records, filters and forwards a run's events until every frame
/// has dropped its sender. Returns when the run's last event is through.
pub async fn sequence(
    mut drafts: mpsc::Receiver<Box<Draft>>,
    out: EventSender,
    filter: Filter,
    record: Arc<RunRecord>,
    emitted: prometheus_client::metrics::counter::Counter,
) {
    let tail = super::log::ids_tail(record.trace_id.as_str(), &record.run_id);
    let mut client_gone = false;
    loop {
        let mut draft = tokio::select! {
            biased;
            d = drafts.recv() => match d { Some(d) => d, None => return },
            _ = out.closed(), if !client_gone => {
                client_gone = true;
                record.attached.store(false, std::sync::atomic::Ordering::SeqCst);
                if !record.detached {
                    record.cancel("client disconnected");
                }
                continue;
            }
        };
        let seq = record.next_seq();
        emitted.inc();
        let terminal = is_terminal(&draft.payload);
        let forward = !client_gone && filter.passes(&draft.ctx, &draft.payload);
        if terminal {
            record.finish(&draft.payload, seq);
        }
        let logged = Logged {
            seq,
            time: baton_proto::wkt::Timestamp::from(SystemTime::now()),
            ctx: draft.ctx,
            agent: draft.agent,
            payload: draft.payload,
            replayed: false,
        };
        // Encoded once: what the log keeps and the client is sent.
        let encoded = logged.encode();
        let event = forward.then(|| PackedEvent::new(encoded.clone(), seq, tail.clone()));
        // The recording forks replay (the run store keeps a durable run's).
        if draft.record_span {
            record.record_point(super::log::Recorded {
                seq,
                unit: format!("sp/{}", logged.ctx.id).into(),
                record: logged.ctx.span_id.clone().into_bytes().into(),
            });
        }
        if let Some((unit, value)) = draft.journal.take() {
            record.record_point(super::log::Recorded {
                seq,
                unit: unit.into(),
                record: value.into(),
            });
        }
        // Its webhooks' deliveries, queued once it is logged.
        let hooked = record
            .hooks
            .get()
            .map(|h| (h, h.deliveries(&logged)))
            .filter(|(_, q)| !q.is_empty());
        // Every event, filtered or not, client or not, is kept for WatchRun.
        drop(logged);
        record.log_event(seq, encoded, terminal);
        if let Some((hooks, queued)) = hooked {
            hooks.queue(queued).await;
        }
        let Some(event) = event else { continue };
        if out.send(Ok(Outgoing::Packed(event))).await.is_err() {
            client_gone = true;
            record
                .attached
                .store(false, std::sync::atomic::Ordering::SeqCst);
            if !record.detached {
                record.cancel("client disconnected");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixes_match_whole_segments() {
        let f = Filter {
            prefixes: vec!["root.a.1".into()],
            ..Filter::default()
        };
        let ctx = |id: &str| ContextInfo {
            id: id.into(),
            parent: String::new(),
            depth: 1,
            span_id: String::new(),
            otel: opentelemetry::Context::new(),
            span_recorded: Default::default(),
        };
        let p = Payload::TextDelta(pb::TextDelta {
            text: String::new(),
        });
        assert!(f.passes(&ctx("root.a.1"), &p));
        assert!(f.passes(&ctx("root.a.1.b.1"), &p));
        assert!(!f.passes(&ctx("root.a.10"), &p));
        assert!(!f.passes(&ctx("root"), &p));
        assert!(
            f.passes(
                &ctx("root"),
                &Payload::RunCompleted(pb::RunCompleted::default())
            ),
            "terminal always"
        );
    }
}
