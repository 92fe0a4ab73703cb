//! A run's history: every event it logged, from its first, and the
//! recording that forks replay (each durable point's unit and record, with
//! the seq of the event that ended it). A leaf: it knows contexts and
//! events, nothing of runs or of the sequencer.
//!
//! Events are kept in fixed chunks of [`LOG_CHUNK`], so a growing log never
//! moves what it holds; once the run ended its chunks are packed (their
//! events encoded as `RunEvent`s without the run's ids, back to back), a
//! chunk at a time, off the run's event path ([`Chunked::pack_one`]).

use std::sync::Arc;

use baton_proto::v1::{self as pb, run_event::Payload};
use prost::Message as _;

use super::context::ContextInfo;

/// An event as a run's log keeps it until its chunk is packed: numbered,
/// its envelope shared with the context.
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
    /// Taken from the original's recording (a fork's first events).
    pub replayed: bool,
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
            replayed: self.replayed,
        }
    }
}

/// How long a durable run's history stays on the replica that ran it once
/// the run ended (the run store keeps it for `runs.retention`; memory mode
/// keeps it with the run, for `runs.finished_retention`).
pub const LOG_RETENTION: std::time::Duration = std::time::Duration::from_secs(60);

/// A durable point a run recorded: what a fork takes instead of doing it
/// again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recorded {
    /// The seq of the event that ended it.
    pub seq: u64,
    /// Its unit (`t/root/1`: the root context's first model turn, ...).
    pub unit: String,
    /// Its record.
    pub record: Vec<u8>,
}

/// A run's history (see the module docs).
#[derive(Default)]
pub(super) struct EventLog {
    pub(super) events: Chunked,
    pub(super) ended: bool,
    /// The history was evicted to make room (`runs.max_finished_bytes`),
    /// or, with durable runs, dropped here since the run store keeps it.
    pub(super) dropped: bool,
    /// Durable points, in the order they were logged (memory mode; the
    /// run store keeps a durable run's).
    pub(super) recording: Vec<Recorded>,
    recording_bytes: usize,
    /// The request that started the run, encoded (memory mode).
    pub(super) request: Vec<u8>,
}

impl EventLog {
    /// Keeps a durable point.
    pub(super) fn record(&mut self, point: Recorded) {
        self.recording_bytes += point.unit.len() + point.record.len() + 40;
        self.recording.push(point);
    }

    /// Keeps the request that started the run.
    pub(super) fn keep_request(&mut self, request: Vec<u8>) {
        self.request = request;
    }

    /// Bytes the history holds, about.
    pub(super) fn bytes(&self) -> u64 {
        (self.events.bytes() + self.recording_bytes + self.request.len()) as u64
    }

    /// Forgets every event and record.
    pub(super) fn drop_history(&mut self) {
        self.events = Chunked::default();
        self.recording = Vec::new();
        self.recording_bytes = 0;
        self.request = Vec::new();
        self.dropped = true;
    }
}

/// Events per chunk of a run's log.
pub(super) const LOG_CHUNK: usize = 256;

/// Bytes a live (unpacked) event is counted as.
const LIVE_EVENT_BYTES: usize = 512;

/// A chunk of a run's log: its events as they were logged, or packed.
enum Chunk {
    Live(Vec<Logged>),
    Packed(PackedChunk),
}

/// A packed chunk: its events encoded as `RunEvent`s without the run's
/// ids, back to back. Shared, not copied, when a fork reads its origin's
/// history ([`Chunked::packed_chunks`]).
#[derive(Clone)]
pub struct PackedChunk {
    /// The events, encoded, back to back.
    data: Arc<[u8]>,
    /// Where each event ends in `data`.
    ends: Arc<[u32]>,
    /// Every event is read back marked `replayed` (a fork's copy of its
    /// origin's chunk: the same bytes, shared).
    replayed: bool,
}

impl std::fmt::Debug for PackedChunk {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "PackedChunk({} events, {} bytes)",
            self.ends.len(),
            self.data.len()
        )
    }
}

impl PackedChunk {
    /// `events` encoded back to back (as they come: without the run's ids).
    fn encode<E: std::borrow::Borrow<pb::RunEvent>>(events: impl Iterator<Item = E>) -> Self {
        let mut data = Vec::new();
        let mut ends = Vec::with_capacity(LOG_CHUNK);
        for e in events {
            let _ = e.borrow().encode(&mut data);
            ends.push(u32::try_from(data.len()).unwrap_or(u32::MAX));
        }
        PackedChunk {
            data: data.into(),
            ends: ends.into(),
            replayed: false,
        }
    }

    /// The chunk with every event marked `replayed` (a fork's first
    /// events): the same bytes, shared, not copied.
    pub(super) fn replayed(&self) -> PackedChunk {
        PackedChunk {
            replayed: true,
            ..self.clone()
        }
    }

    /// The chunk marked `replayed` with its first event replaced by
    /// `first` (a fork's `RunStarted`): that event encoded, the others'
    /// bytes copied.
    pub(super) fn replayed_with_first(&self, first: &pb::RunEvent) -> PackedChunk {
        let rest = self.ends.first().map_or(0, |&e| e as usize);
        let mut data = Vec::with_capacity(self.data.len() + 64);
        let _ = first.encode(&mut data);
        let shift = data.len() as i64 - rest as i64;
        data.extend_from_slice(&self.data[rest..]);
        let ends = self
            .ends
            .iter()
            .map(|&end| u32::try_from(i64::from(end) + shift).unwrap_or(u32::MAX))
            .collect();
        PackedChunk {
            data: data.into(),
            ends,
            replayed: true,
        }
    }

    /// Its events.
    pub(super) fn len(&self) -> usize {
        self.ends.len()
    }

    /// The encoding of its `i`-th event (without the run's ids, and
    /// without `replayed` when the chunk is [`Self::replayed`]).
    pub(super) fn bytes(&self, i: usize) -> &[u8] {
        let start = if i == 0 { 0 } else { self.ends[i - 1] as usize };
        &self.data[start..self.ends[i] as usize]
    }

    /// Its `i`-th event, without the run's ids.
    pub(super) fn event(&self, i: usize) -> pb::RunEvent {
        let mut e = pb::RunEvent::decode(self.bytes(i)).unwrap_or_default();
        e.replayed |= self.replayed;
        e
    }

    /// Its events in order, decoded as they are taken.
    pub(super) fn events(&self) -> impl Iterator<Item = pb::RunEvent> + '_ {
        (0..self.len()).map(|i| self.event(i))
    }
}

impl Chunk {
    fn len(&self) -> usize {
        match self {
            Chunk::Live(v) => v.len(),
            Chunk::Packed(p) => p.len(),
        }
    }

    fn pack(events: &[Logged]) -> Chunk {
        // The run's ids are the record's; not kept per event.
        Chunk::Packed(PackedChunk::encode(
            events.iter().map(|e| e.to_event("", "")),
        ))
    }

    fn event(&self, i: usize, trace_id: &str, run_id: &str) -> pb::RunEvent {
        match self {
            Chunk::Live(v) => v[i].to_event(trace_id, run_id),
            Chunk::Packed(p) => {
                let mut e = p.event(i);
                trace_id.clone_into(&mut e.trace_id);
                run_id.clone_into(&mut e.run_id);
                e
            }
        }
    }
}

/// A run's events in fixed chunks of [`LOG_CHUNK`], every chunk but the
/// last packed (see the module docs).
#[derive(Default)]
pub(super) struct Chunked {
    chunks: Vec<Chunk>,
    len: usize,
    /// The seq of the first event (a run resumed here logs from after the
    /// seq it was resumed at).
    first_seq: u64,
    packed_bytes: usize,
    packed_events: usize,
}

impl Chunked {
    pub(super) fn len(&self) -> usize {
        self.len
    }

    pub(super) fn push_back(&mut self, event: Logged) {
        if self.len == 0 {
            self.first_seq = event.seq;
        }
        match self.chunks.last_mut() {
            Some(Chunk::Live(last)) if last.len() < LOG_CHUNK => last.push(event),
            _ => {
                let mut fresh = Vec::with_capacity(LOG_CHUNK);
                fresh.push(event);
                self.chunks.push(Chunk::Live(fresh));
            }
        }
        self.len += 1;
    }

    /// Into an empty log: a fork's first events (numbered from 1, without
    /// the run's ids): `chunks`, whole chunks ready to keep (its origin's,
    /// shared), then the whole chunks of `events` that follow them, packed
    /// straight from their encoding. Returns how many of `events` it took
    /// (the rest go in one by one).
    pub(super) fn preload_packed(
        &mut self,
        chunks: Vec<PackedChunk>,
        events: &[pb::RunEvent],
    ) -> usize {
        // A fork's log is new, and its origin gives whole chunks only
        // (`packed_chunks`): seqs follow from the chunks' lengths.
        debug_assert!(self.len == 0 && chunks.iter().all(|c| c.len() == LOG_CHUNK));
        let whole = events.len() / LOG_CHUNK * LOG_CHUNK;
        let encoded = events[..whole]
            .chunks(LOG_CHUNK)
            .map(|chunk| PackedChunk::encode(chunk.iter()));
        for packed in chunks.into_iter().chain(encoded) {
            self.packed_bytes += packed.data.len() + packed.ends.len() * 4;
            self.packed_events += packed.len();
            self.len += packed.len();
            self.chunks.push(Chunk::Packed(packed));
        }
        if self.len > 0 {
            self.first_seq = 1;
        }
        whole
    }

    /// The seq of the first event kept (of the next one, when none is).
    pub(super) fn first_seq(&self) -> Option<u64> {
        (self.len > 0).then_some(self.first_seq)
    }

    /// Bytes the events hold, about.
    fn bytes(&self) -> usize {
        (self.len - self.packed_events) * LIVE_EVENT_BYTES
            + self.packed_bytes
            + self.chunks.len() * std::mem::size_of::<Chunk>()
    }

    /// Packs the first chunk still live: a full one, or any once the run
    /// ended (`all`); false when there is none. A chunk at a time, so the
    /// log's lock is held for one chunk's encoding (about 256 events).
    pub(super) fn pack_one(&mut self, all: bool) -> bool {
        let at = self
            .chunks
            .iter()
            .position(|c| matches!(c, Chunk::Live(v) if all || v.len() == LOG_CHUNK));
        let Some(at) = at else { return false };
        let Chunk::Live(events) = &self.chunks[at] else {
            return false;
        };
        let packed = Chunk::pack(events);
        if let Chunk::Packed(p) = &packed {
            self.packed_bytes += p.data.len() + p.ends.len() * 4;
            self.packed_events += p.ends.len();
        }
        self.chunks[at] = packed;
        true
    }

    /// The log's first chunks while they are packed and whole (shared,
    /// not copied), as many as hold at most `max` events.
    pub(super) fn packed_chunks(&self, max: usize) -> Vec<PackedChunk> {
        self.chunks
            .iter()
            .take(max / LOG_CHUNK)
            .map_while(|c| match c {
                Chunk::Packed(p) if p.len() == LOG_CHUNK => Some(p.clone()),
                _ => None,
            })
            .collect()
    }

    /// At most `max` events from the `skip`-th on, as clients get them.
    pub(super) fn read(
        &self,
        skip: usize,
        max: usize,
        trace_id: &str,
        run_id: &str,
    ) -> Vec<pb::RunEvent> {
        let mut out = Vec::with_capacity(max.min(self.len.saturating_sub(skip)));
        let mut at = skip;
        while out.len() < max && at < self.len {
            let chunk = &self.chunks[at / LOG_CHUNK];
            let i = at % LOG_CHUNK;
            let take = (chunk.len() - i).min(max - out.len());
            out.extend((i..i + take).map(|j| chunk.event(j, trace_id, run_id)));
            at += take;
        }
        out
    }
}

/// What a watcher reads from the log.
pub enum LogRead {
    /// Events after the cursor (maybe none yet, at most the batch asked
    /// for), and whether the run ended with nothing logged after them.
    Events(Vec<pb::RunEvent>, bool),
    /// The events after the cursor start before what is kept here (a run
    /// resumed here: the run store has them); the oldest kept has this seq.
    Gone(u64),
    /// The run's history is no longer kept here (evicted for room; with
    /// durable runs, the run store has it).
    Expired,
}

#[cfg(test)]
mod chunked_tests {
    use super::{Chunked, LOG_CHUNK, Logged};
    use baton_proto::v1::{self as pb, run_event::Payload};

    fn ev(seq: u64) -> Logged {
        Logged {
            seq,
            time: baton_proto::wkt::Timestamp {
                seconds: seq as i64,
                nanos: 0,
            },
            ctx: std::sync::Arc::new(crate::run::context::ContextInfo {
                id: "root".into(),
                parent: String::new(),
                depth: 0,
                span_id: "0000000000000001".into(),
                otel: opentelemetry::Context::new(),
                span_recorded: Default::default(),
            }),
            agent: std::sync::Arc::from("assistant"),
            payload: Payload::TextDelta(pb::TextDelta {
                text: format!("word {seq}"),
            }),
            replayed: seq.is_multiple_of(2),
        }
    }

    #[test]
    fn a_log_reads_back_what_it_was_given_packed_or_not() {
        for total in [
            0,
            1,
            LOG_CHUNK - 1,
            LOG_CHUNK,
            LOG_CHUNK + 1,
            LOG_CHUNK * 3 + 17,
        ] {
            let mut log = Chunked::default();
            let first = 41;
            for seq in first..first + total as u64 {
                log.push_back(ev(seq));
            }
            let want: Vec<pb::RunEvent> = (first..first + total as u64)
                .map(|s| ev(s).to_event("t", "r"))
                .collect();
            for sealed in [false, true] {
                if sealed {
                    while log.pack_one(true) {}
                }
                assert_eq!(log.len(), total);
                assert_eq!(log.first_seq(), (total > 0).then_some(first));
                for (skip, max) in [(0, usize::MAX), (0, 7), (LOG_CHUNK - 2, 5), (total, 3)] {
                    let got = log.read(skip, max, "t", "r");
                    let expect: Vec<_> = want.iter().skip(skip).take(max).cloned().collect();
                    assert_eq!(
                        got, expect,
                        "total {total}, skip {skip}, max {max}, sealed {sealed}"
                    );
                }
            }
        }
    }

    #[test]
    fn a_fork_shares_its_origins_packed_chunks_and_reads_the_same_events() {
        let total = LOG_CHUNK * 3 + 10;
        let mut origin = Chunked::default();
        for seq in 1..=total as u64 {
            let mut e = ev(seq);
            e.replayed = false;
            origin.push_back(e);
        }
        while origin.pack_one(true) {}
        // Whole chunks only, as many as fit in the events asked for.
        assert_eq!(origin.packed_chunks(usize::MAX).len(), 3);
        assert_eq!(origin.packed_chunks(LOG_CHUNK * 2 + 5).len(), 2);
        // A fork's first events: the origin's, marked replayed, the first
        // one changed (its `RunStarted`).
        let events: Vec<pb::RunEvent> = origin
            .read(0, total, "", "")
            .into_iter()
            .enumerate()
            .map(|(i, mut e)| {
                e.replayed = true;
                if i == 0 {
                    e.agent = "forked".into();
                }
                e
            })
            .collect();
        for kept in 0..=3 {
            let mut chunks: Vec<_> = origin
                .packed_chunks(kept * LOG_CHUNK)
                .iter()
                .map(super::PackedChunk::replayed)
                .collect();
            if let Some(first) = chunks.first_mut() {
                *first = first.replayed_with_first(&events[0]);
            }
            let mut fork = Chunked::default();
            let from = kept * LOG_CHUNK;
            let taken = fork.preload_packed(chunks, &events[from..]);
            assert_eq!(from + taken, LOG_CHUNK * 3, "kept {kept}");
            assert_eq!(
                fork.read(0, usize::MAX, "", ""),
                events[..from + taken],
                "kept {kept}"
            );
            assert_eq!(fork.first_seq(), Some(1));
            // The origin reads as it did.
            assert!(!origin.read(1, 1, "", "")[0].replayed);
        }
    }

    #[test]
    fn a_packed_event_costs_its_encoding() {
        let mut log = Chunked::default();
        for seq in 1..=1000 {
            log.push_back(ev(seq));
        }
        while log.pack_one(true) {}
        let per_event = log.bytes() / 1000;
        assert!(per_event < 120, "{per_event} bytes per event");
    }
}
