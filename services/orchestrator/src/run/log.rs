//! A run's event log: the events WatchRun replays, kept compactly (their
//! envelope shared with the context) in fixed chunks. A leaf: it knows
//! contexts and events, nothing of runs or of the sequencer.

use std::{sync::Arc, time::Duration};

use baton_proto::v1::{self as pb, run_event::Payload};

use super::context::ContextInfo;

/// An event as a run's log keeps it: numbered, its envelope shared with
/// the context.
pub struct Logged {
    /// Its seq.
    pub seq: u64,
    /// When it happened.
    pub time: baton_proto::wkt::Timestamp,
    /// Where.
    pub ctx: Arc<ContextInfo>,
    /// The active agent.
    pub agent: Arc<str>,
    /// What.
    pub payload: Payload,
}

impl Logged {
    /// The event as clients get it.
    pub fn to_event(&self, trace_id: &str, run_id: &str) -> pb::RunEvent {
        pb::RunEvent {
            seq: self.seq,
            trace_id: trace_id.to_owned(),
            run_id: run_id.to_owned(),
            context_id: self.ctx.id.clone(),
            parent_context_id: self.ctx.parent.clone(),
            depth: self.ctx.depth,
            agent: self.agent.to_string(),
            span_id: self.ctx.span_id.clone(),
            time: Some(self.time),
            payload: Some(self.payload.clone()),
        }
    }
}

/// How many of a run's latest events WatchRun can replay.
pub const LOG_CAPACITY: usize = 10_000;

/// How long a finished run's events stay readable by WatchRun (its record
/// stays for `GetRun` longer, without them).
pub const LOG_RETENTION: Duration = Duration::from_secs(60);

/// The run's latest events, for WatchRun.
#[derive(Default)]
pub(super) struct EventLog {
    pub(super) events: Chunked,
    pub(super) ended: bool,
    /// The events were dropped (LOG_RETENTION after the end).
    pub(super) dropped: bool,
}

/// Events per chunk of a run's log.
const LOG_CHUNK: usize = 256;

/// A queue of events in fixed chunks of [`LOG_CHUNK`]: a growing log never
/// moves what it holds. (A `VecDeque` doubles its buffer, copying the whole
/// log onto fresh pages each time: a tenth of the pipeline benchmark's
/// time.) Popping the front only advances a cursor; a chunk is freed when
/// the cursor leaves it, so at most `LOG_CHUNK - 1` popped events linger.
#[derive(Default)]
pub(super) struct Chunked {
    chunks: std::collections::VecDeque<Vec<Logged>>,
    /// Live events.
    len: usize,
    /// Where the live events start in the first chunk.
    head: usize,
}

impl Chunked {
    pub(super) fn len(&self) -> usize {
        self.len
    }

    pub(super) fn push_back(&mut self, event: Logged) {
        if self.chunks.back().is_none_or(|c| c.len() == LOG_CHUNK) {
            self.chunks.push_back(Vec::with_capacity(LOG_CHUNK));
        }
        if let Some(last) = self.chunks.back_mut() {
            last.push(event);
            self.len += 1;
        }
    }

    pub(super) fn pop_front(&mut self) {
        if self.len == 0 {
            return;
        }
        self.len -= 1;
        self.head += 1;
        if self.head == LOG_CHUNK || self.len == 0 {
            self.chunks.pop_front();
            self.head = 0;
            if self.len == 0 {
                self.chunks.clear();
            }
        }
    }

    pub(super) fn front(&self) -> Option<&Logged> {
        (self.len > 0).then(|| &self.chunks[0][self.head])
    }

    /// The live events from the `skip`-th on.
    pub(super) fn iter_from(&self, skip: usize) -> impl Iterator<Item = &Logged> {
        let at = self.head + skip;
        self.chunks
            .iter()
            .skip(at / LOG_CHUNK)
            .enumerate()
            .flat_map(move |(i, c)| c[if i == 0 { at % LOG_CHUNK } else { 0 }..].iter())
    }
}

/// What a watcher reads from the log.
pub enum LogRead {
    /// Events after the cursor (maybe none yet, at most the batch asked
    /// for), and whether the run ended with nothing logged after them.
    Events(Vec<pb::RunEvent>, bool),
    /// Events after the cursor were dropped from the log already; the
    /// oldest kept has this seq.
    Gone(u64),
    /// The run ended more than LOG_RETENTION ago; its events are gone.
    Expired,
}

#[cfg(test)]
mod chunked_tests {
    use super::Logged;
    use super::{Chunked, LOG_CHUNK};
    use baton_proto::v1::{self as pb, run_event::Payload};

    fn ev(seq: u64) -> Logged {
        Logged {
            seq,
            time: Default::default(),
            ctx: std::sync::Arc::new(crate::run::context::ContextInfo {
                id: "root".into(),
                parent: String::new(),
                depth: 0,
                span_id: "0000000000000001".into(),
                otel: opentelemetry::Context::new(),
                span_recorded: Default::default(),
            }),
            agent: std::sync::Arc::from(""),
            payload: Payload::RunStarted(pb::RunStarted::default()),
        }
    }

    #[test]
    fn a_chunked_queue_is_a_queue() {
        let mut q = Chunked::default();
        let mut model = std::collections::VecDeque::new();
        let mut next = 1;
        // Push past several chunks, pop across chunk borders, drain, refill.
        for round in 0..3 {
            for _ in 0..(LOG_CHUNK * 2 + 17) {
                q.push_back(ev(next));
                model.push_back(next);
                next += 1;
            }
            for _ in 0..(LOG_CHUNK + 5 + round * 100) {
                q.pop_front();
                model.pop_front();
            }
            assert_eq!(q.len(), model.len());
            assert_eq!(q.front().map(|e| e.seq), model.front().copied());
            for skip in [0, 1, LOG_CHUNK - 1, LOG_CHUNK, model.len() - 1, model.len()] {
                let got: Vec<u64> = q.iter_from(skip).map(|e| e.seq).collect();
                let want: Vec<u64> = model.iter().skip(skip).copied().collect();
                assert_eq!(got, want, "round {round}, skip {skip}");
            }
        }
        while q.len() > 0 {
            q.pop_front();
            model.pop_front();
        }
        assert!(q.front().is_none() && q.chunks.is_empty() && model.is_empty());
        q.push_back(ev(7));
        assert_eq!(q.iter_from(0).map(|e| e.seq).collect::<Vec<_>>(), vec![7]);
    }
}
