//! A run's history: every event it logged, from its first, and the
//! recording that forks replay (each durable point's unit and record, with
//! the seq of the event that ended it). A leaf: it knows contexts and
//! events, nothing of runs or of the sequencer.
//!
//! An event is encoded once, as the sequencer numbers it: as a `RunEvent`
//! without the run's ids ([`Logged::encode`]). Those bytes are what the log
//! keeps, what the gRPC face sends (with the run's ids appended,
//! [`PackedEvent`]) and, for a durable run, what Redis is sent (the same).
//! No event is copied into a `RunEvent` on its way out; a face that needs
//! its fields (HTTP, SSE, A2A, MCP) decodes it.
//!
//! Events are kept in chunks of [`LOG_CHUNK`], so a growing log never
//! moves what it holds. A chunk holds its events' encodings one by one
//! (live) until it is full, while the run runs, then they are packed back
//! to back in one buffer ([`PackedChunk`]); the last chunk is packed once
//! the run ended, off the run's event path ([`Chunked::pack_one`]). A
//! running run holds at most one chunk unpacked, and it grows as it fills.
//!
//! Each event is charged its encoding's length: what its packed chunk
//! holds of it. A run's history is bounded by those charges
//! (`runs.max_history_bytes`, [`EventLog::over_bound`]).

use std::sync::Arc;

use baton_proto::v1::{self as pb, run_event::Payload};
use bytes::Bytes;
use prost::Message as _;

use super::context::ContextInfo;
pub use super::packed::{Outgoing, PackedChunk, PackedEvent, ids_tail};

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
    /// The event's encoding as a `RunEvent` without the run's ids: what
    /// the log keeps and every face is sent (see the module docs).
    pub fn encode(&self) -> Bytes {
        let mut buf = Vec::with_capacity(
            self.payload.encoded_len()
                + self.ctx.id.len()
                + self.ctx.parent.len()
                + self.ctx.span_id.len()
                + self.agent.len()
                + ENVELOPE_BYTES,
        );
        self.encode_packed(&mut buf);
        Bytes::from(buf)
    }

    /// Writes the event's encoding as a `RunEvent` without the run's ids
    /// straight from the log's fields: the same bytes as
    /// `to_event("", "")` encoded, without building it (no string or
    /// payload copied).
    fn encode_packed(&self, buf: &mut Vec<u8>) {
        use prost::encoding::{bool as pbool, message, string, uint32, uint64};
        if self.seq != 0 {
            uint64::encode(1, &self.seq, buf);
        }
        for (tag, value) in [(4, &self.ctx.id), (5, &self.ctx.parent)] {
            if !value.is_empty() {
                string::encode(tag, value, buf);
            }
        }
        if self.ctx.depth != 0 {
            uint32::encode(6, &self.ctx.depth, buf);
        }
        if !self.agent.is_empty() {
            prost::encoding::encode_key(7, prost::encoding::WireType::LengthDelimited, buf);
            prost::encoding::encode_varint(self.agent.len() as u64, buf);
            buf.extend_from_slice(self.agent.as_bytes());
        }
        if !self.ctx.span_id.is_empty() {
            string::encode(8, &self.ctx.span_id, buf);
        }
        message::encode(9, &self.time, buf);
        if self.replayed {
            pbool::encode(10, &self.replayed, buf);
        }
        self.payload.encode(buf);
    }

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
    /// Shared, with its record: a fork reads its origin's recording and
    /// makes its journal of it without copying either.
    pub unit: Arc<str>,
    /// Its record.
    pub record: Arc<[u8]>,
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
    /// Most bytes the history may be charged (`runs.max_history_bytes`;
    /// 0: unbounded).
    pub(super) bound: u64,
    /// The history went over `bound` (said once).
    pub(super) over: bool,
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

    /// Bytes the history is charged against its bound: its events'
    /// charges ([`Logged::charge`]; a fork's first packed chunks, what
    /// they hold), its recording and its request.
    pub(super) fn charged(&self) -> u64 {
        self.events.charged + (self.recording_bytes + self.request.len()) as u64
    }

    /// `Some(charged)` the first time the history is charged more than
    /// its bound; `None` within it (at it included) and after it said so.
    pub(super) fn over_bound(&mut self) -> Option<u64> {
        let charged = self.charged();
        if self.over || self.bound == 0 || charged <= self.bound {
            return None;
        }
        self.over = true;
        Some(charged)
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

/// An event's encoding beside its payload's and its envelope's strings:
/// its seq, time, depth and field tags, at most.
const ENVELOPE_BYTES: usize = 40;

/// A chunk of a run's log: its events' encodings one by one, as they were
/// logged (and the memory they take), or packed.
enum Chunk {
    Live(Vec<Bytes>, usize),
    Packed(PackedChunk),
}

impl Chunk {
    fn len(&self) -> usize {
        match self {
            Chunk::Live(v, _) => v.len(),
            Chunk::Packed(p) => p.len(),
        }
    }

    /// Live events' encodings, back to back in one buffer.
    fn pack(events: &[Bytes]) -> Chunk {
        let mut data = Vec::with_capacity(events.iter().map(Bytes::len).sum());
        let mut ends = Vec::with_capacity(events.len());
        for e in events {
            data.extend_from_slice(e);
            ends.push(u32::try_from(data.len()).unwrap_or(u32::MAX));
        }
        Chunk::Packed(PackedChunk::from_parts(data, ends))
    }

    fn event(&self, i: usize, trace_id: &str, run_id: &str) -> pb::RunEvent {
        let mut e = match self {
            Chunk::Live(v, _) => pb::RunEvent::decode(&v[i][..]).unwrap_or_default(),
            Chunk::Packed(p) => p.event(i),
        };
        trace_id.clone_into(&mut e.trace_id);
        run_id.clone_into(&mut e.run_id);
        e
    }
}

/// A run's events in chunks of [`LOG_CHUNK`], every full chunk packed
/// (see the module docs). A fork's log starts with its origin's
/// packed chunks, the last of which it may share only in part: so a chunk
/// is full unless it is the last one or packed, and where each starts is
/// kept.
#[derive(Default)]
pub(super) struct Chunked {
    chunks: Vec<Chunk>,
    /// The index of each chunk's first event.
    starts: Vec<usize>,
    len: usize,
    /// The seq of the first event (a run resumed here logs from after the
    /// seq it was resumed at).
    first_seq: u64,
    packed_bytes: usize,
    /// Bytes the live chunks' events take, about (their encodings, their
    /// handles and the room kept for more).
    live_bytes: usize,
    /// Every event's encoding's length, packed or not.
    charged: u64,
}

impl Chunked {
    pub(super) fn len(&self) -> usize {
        self.len
    }

    /// Logs event `seq`, encoded ([`Logged::encode`]). A chunk grows as it
    /// fills (a run that logged a few events keeps room for a few); a full
    /// one is packed as the next event starts a new one, so a running run
    /// holds one chunk of events unpacked.
    pub(super) fn push_back(&mut self, seq: u64, event: Bytes) {
        if self.len == 0 {
            self.first_seq = seq;
        }
        let charge = event.len();
        self.charged += charge as u64;
        let room = |v: &Vec<Bytes>| (v.capacity() - v.len()) * std::mem::size_of::<Bytes>();
        let charge = charge + std::mem::size_of::<Bytes>();
        match self.chunks.last_mut() {
            Some(Chunk::Live(last, bytes)) if last.len() < LOG_CHUNK => {
                let before = *bytes;
                *bytes -= room(last).min(*bytes);
                last.push(event);
                *bytes += charge + room(last);
                self.live_bytes = self.live_bytes + *bytes - before;
            }
            _ => {
                if let Some(Chunk::Live(..)) = self.chunks.last() {
                    self.pack_at(self.chunks.len() - 1);
                }
                let mut fresh = Vec::with_capacity(4);
                fresh.push(event);
                let bytes = charge + room(&fresh);
                self.live_bytes += bytes;
                self.chunks.push(Chunk::Live(fresh, bytes));
                self.starts.push(self.len);
            }
        }
        self.len += 1;
    }

    /// Into an empty log: a fork's first events (numbered from 1, without
    /// the run's ids): `chunks`, packed chunks ready to keep (its
    /// origin's, shared), then the whole chunks of `events` that follow
    /// them, packed straight from their encoding. Returns how many of
    /// `events` it took (the rest go in one by one).
    pub(super) fn preload_packed(
        &mut self,
        chunks: Vec<PackedChunk>,
        events: &[pb::RunEvent],
    ) -> usize {
        // A fork's log is new: seqs follow from the chunks' lengths.
        debug_assert!(self.len == 0);
        let whole = events.len() / LOG_CHUNK * LOG_CHUNK;
        let encoded = events[..whole]
            .chunks(LOG_CHUNK)
            .map(|chunk| PackedChunk::encode(chunk.iter()));
        for packed in chunks.into_iter().chain(encoded) {
            if packed.len() == 0 {
                continue;
            }
            self.packed_bytes += packed.held();
            self.charged += packed.held() as u64;
            self.starts.push(self.len);
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
        self.live_bytes
            + self.packed_bytes
            + self.chunks.capacity() * std::mem::size_of::<Chunk>()
            + self.starts.capacity() * std::mem::size_of::<usize>()
    }

    /// Packs the first chunk still live: a full one, or any once the run
    /// ended (`all`); false when there is none. A chunk at a time, so the
    /// log's lock is held for one chunk's encoding (about 256 events).
    pub(super) fn pack_one(&mut self, all: bool) -> bool {
        let at = self
            .chunks
            .iter()
            .position(|c| matches!(c, Chunk::Live(v, _) if all || v.len() == LOG_CHUNK));
        let Some(at) = at else { return false };
        self.pack_at(at);
        true
    }

    /// Packs chunk `at` if it is live.
    fn pack_at(&mut self, at: usize) {
        let Chunk::Live(events, bytes) = &self.chunks[at] else {
            return;
        };
        let bytes = *bytes;
        let packed = Chunk::pack(events);
        if let Chunk::Packed(p) = &packed {
            self.packed_bytes += p.held();
        }
        self.live_bytes -= bytes;
        self.chunks[at] = packed;
    }

    /// The log's first `max` events (or fewer) while they are packed, as
    /// chunks: shared, not copied, the last one cut short where `max`
    /// ends inside it.
    pub(super) fn packed_prefix(&self, max: usize) -> Vec<PackedChunk> {
        let mut out = Vec::new();
        let mut n = 0;
        for chunk in &self.chunks {
            let Chunk::Packed(p) = chunk else { break };
            if n >= max {
                break;
            }
            let take = p.len().min(max - n);
            out.push(if take == p.len() {
                p.clone()
            } else {
                p.truncated(take)
            });
            n += take;
        }
        out
    }

    /// The chunk holding the `at`-th event (`at < len`), and that event's
    /// index in it.
    fn locate(&self, at: usize) -> (usize, usize) {
        let c = self.starts.partition_point(|&s| s <= at) - 1;
        (c, at - self.starts[c])
    }

    /// Calls `f(chunk, i, take, at)` for each run of the at most `max`
    /// events from the `skip`-th on: `take` events of `chunk` from its
    /// `i`-th, which is the log's `at`-th.
    fn each_run(&self, skip: usize, max: usize, mut f: impl FnMut(&Chunk, usize, usize, usize)) {
        if skip >= self.len {
            return;
        }
        let (mut c, mut i) = self.locate(skip);
        let mut at = skip;
        let mut left = max;
        while left > 0 && c < self.chunks.len() {
            let chunk = &self.chunks[c];
            let take = (chunk.len() - i).min(left);
            f(chunk, i, take, at);
            at += take;
            left -= take;
            c += 1;
            i = 0;
        }
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
        self.each_run(skip, max, |chunk, i, take, _| {
            out.extend((i..i + take).map(|j| chunk.event(j, trace_id, run_id)));
        });
        out
    }

    /// At most `max` events from the `skip`-th on, as streams carry them:
    /// not decoded, sent with `tail` (the run's ids, [`ids_tail`]).
    pub(super) fn read_outgoing(&self, skip: usize, max: usize, tail: &Arc<[u8]>) -> Vec<Outgoing> {
        let mut out = Vec::with_capacity(max.min(self.len.saturating_sub(skip)));
        let first_seq = self.first_seq;
        self.each_run(skip, max, |chunk, i, take, at| match chunk {
            Chunk::Live(v, _) => out.extend(v[i..i + take].iter().enumerate().map(|(k, e)| {
                Outgoing::Packed(PackedEvent::new(
                    e.clone(),
                    first_seq + (at + k) as u64,
                    tail.clone(),
                ))
            })),
            Chunk::Packed(p) => out.extend((0..take).map(|k| {
                Outgoing::Packed(p.outgoing(i + k, first_seq + (at + k) as u64, tail.clone()))
            })),
        });
        out
    }
}

/// What a watcher reads from the log (events decoded, or as streams
/// carry them: [`Outgoing`]).
pub enum LogRead<E = pb::RunEvent> {
    /// Events after the cursor (maybe none yet, at most the batch asked
    /// for), and whether the run ended with nothing logged after them.
    Events(Vec<E>, bool),
    /// The events after the cursor start before what is kept here (a run
    /// resumed here: the run store has them); the oldest kept has this seq.
    Gone(u64),
    /// The run's history is no longer kept here (evicted for room; with
    /// durable runs, the run store has it).
    Expired,
}

#[cfg(test)]
mod chunked_tests {
    use super::{Chunked, LOG_CHUNK, Logged, Outgoing};
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

    /// What `read_outgoing` gives, each event read back from the bytes
    /// the gRPC face sends (checked against its seq and its decoding).
    fn outgoing(log: &Chunked, skip: usize, max: usize, t: &str, r: &str) -> Vec<pb::RunEvent> {
        use prost::Message as _;
        let tail = super::ids_tail(t, r);
        log.read_outgoing(skip, max, &tail)
            .into_iter()
            .map(|o| {
                let seq = o.seq();
                let event = match o {
                    Outgoing::Event(e) => *e,
                    Outgoing::Packed(p) => {
                        let mut wire = Vec::new();
                        p.encode(&mut wire);
                        let sent =
                            pb::RunEvent::decode(wire.as_slice()).expect("the bytes sent decode");
                        assert_eq!(sent, p.event());
                        sent
                    }
                };
                assert_eq!(event.seq, seq);
                event
            })
            .collect()
    }

    #[test]
    fn a_logged_event_packs_to_the_bytes_of_its_run_event() {
        use prost::Message as _;
        for seq in [0, 1, 2, 300, u64::MAX] {
            let mut e = ev(seq);
            assert_eq!(e.encode(), e.to_event("", "").encode_to_vec(), "seq {seq}");
            e.agent = std::sync::Arc::from("");
            e.replayed = true;
            e.ctx = std::sync::Arc::new(crate::run::context::ContextInfo {
                id: "root.b.1.c.2".into(),
                parent: "root.b.1".into(),
                depth: 2,
                span_id: String::new(),
                otel: opentelemetry::Context::new(),
                span_recorded: Default::default(),
            });
            assert_eq!(e.encode(), e.to_event("", "").encode_to_vec(), "seq {seq}");
        }
    }

    #[test]
    fn replayed_is_encoded_as_a_run_event_encodes_it() {
        use prost::Message as _;
        let e = pb::RunEvent {
            replayed: true,
            ..Default::default()
        };
        assert_eq!(e.encode_to_vec(), crate::run::packed::REPLAYED);
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
                log.push_back(seq, ev(seq).encode());
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
                    assert_eq!(
                        outgoing(&log, skip, max, "t", "r"),
                        expect,
                        "as streams carry them: total {total}, skip {skip}, max {max}, sealed {sealed}"
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
            origin.push_back(e.seq, e.encode());
        }
        while origin.pack_one(true) {}
        // As many events as asked for, the last chunk cut short.
        let lens = |max| -> Vec<usize> {
            origin
                .packed_prefix(max)
                .iter()
                .map(super::PackedChunk::len)
                .collect()
        };
        assert_eq!(lens(usize::MAX), [LOG_CHUNK, LOG_CHUNK, LOG_CHUNK, 10]);
        assert_eq!(lens(LOG_CHUNK * 2 + 5), [LOG_CHUNK, LOG_CHUNK, 5]);
        assert_eq!(lens(LOG_CHUNK), [LOG_CHUNK]);
        assert!(lens(0).is_empty());
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
        for kept in [
            0,
            1,
            LOG_CHUNK - 1,
            LOG_CHUNK,
            LOG_CHUNK + 5,
            LOG_CHUNK * 2 + 100,
            LOG_CHUNK * 3,
            total,
        ] {
            let mut chunks: Vec<_> = origin
                .packed_prefix(kept)
                .iter()
                .map(super::PackedChunk::replayed)
                .collect();
            if let Some(first) = chunks.first_mut() {
                let changed = first.replayed_with_first(&events[0]);
                // The origin's bytes, shared: only the new first event is
                // encoded.
                if first.len() > 1 {
                    assert_eq!(changed.bytes(1).as_ptr(), first.bytes(1).as_ptr());
                }
                *first = changed;
            }
            let mut fork = Chunked::default();
            let taken = fork.preload_packed(chunks, &events[kept..]);
            assert_eq!(taken, (total - kept) / LOG_CHUNK * LOG_CHUNK, "kept {kept}");
            assert_eq!(
                fork.read(0, usize::MAX, "", ""),
                events[..kept + taken],
                "kept {kept}"
            );
            // The rest one by one, then packed as the run ends: read the
            // same from anywhere, across a chunk cut short.
            for seq in (kept + taken + 1)..=total {
                let mut e = ev(seq as u64);
                e.replayed = true;
                fork.push_back(e.seq, e.encode());
            }
            for sealed in [false, true] {
                if sealed {
                    while fork.pack_one(true) {}
                }
                assert_eq!(fork.len(), total);
                for (skip, max) in [(0, usize::MAX), (kept.saturating_sub(3), 7), (kept, 300)] {
                    let want: Vec<_> = events.iter().skip(skip).take(max).cloned().collect();
                    assert_eq!(
                        fork.read(skip, max, "", ""),
                        want,
                        "kept {kept}, skip {skip}"
                    );
                    assert_eq!(
                        outgoing(&fork, skip, max, "", ""),
                        want,
                        "as streams carry them: kept {kept}, skip {skip}"
                    );
                }
            }
            assert_eq!(fork.first_seq(), Some(1));
            // The origin reads as it did.
            assert!(!origin.read(1, 1, "", "")[0].replayed);
        }
    }

    #[test]
    fn a_running_log_packs_each_full_chunk_and_keeps_one_live() {
        let mut log = Chunked::default();
        let total = LOG_CHUNK * 3 + 5;
        for seq in 1..=total as u64 {
            log.push_back(seq, ev(seq).encode());
        }
        let live: Vec<usize> = log
            .chunks
            .iter()
            .filter_map(|c| match c {
                super::Chunk::Live(v, _) => Some(v.len()),
                super::Chunk::Packed(_) => None,
            })
            .collect();
        assert_eq!(live, [5], "only the last chunk is unencoded");
        // The live chunk grew as it filled: room for 8, not 256.
        let super::Chunk::Live(last, bytes) = log.chunks.last().expect("chunks") else {
            panic!("the last chunk is live");
        };
        assert!(last.capacity() <= 8, "room for {}", last.capacity());
        let handle = std::mem::size_of::<bytes::Bytes>();
        let live: usize = (LOG_CHUNK * 3 + 1..=total)
            .map(|s| ev(s as u64).encode().len() + handle)
            .sum();
        assert_eq!(*bytes, live + (last.capacity() - 5) * handle);
        // Every event's encoding is charged, packed or not: what its
        // packed chunk holds of it.
        let all: u64 = (1..=total)
            .map(|s| ev(s as u64).encode().len() as u64)
            .sum();
        assert_eq!(log.charged, all);
        let packed = log.packed_bytes - LOG_CHUNK * 3 * 4;
        let charged: usize = (1..=LOG_CHUNK * 3)
            .map(|s| ev(s as u64).encode().len())
            .sum();
        assert_eq!(packed, charged);
    }

    #[test]
    fn a_history_is_within_its_bound_at_it_and_over_it_one_byte_more() {
        let events = 600;
        let charge: u64 = (1..=events).map(|s| ev(s).encode().len() as u64).sum();
        for (bound, over) in [(charge, false), (charge - 1, true), (0, false)] {
            let mut log = super::EventLog {
                bound,
                ..Default::default()
            };
            let mut said = Vec::new();
            for seq in 1..=events {
                log.events.push_back(seq, ev(seq).encode());
                if let Some(charged) = log.over_bound() {
                    said.push((seq, charged));
                }
            }
            assert_eq!(log.charged(), charge);
            if over {
                // Said once, at the last event, which took it over.
                assert_eq!(said, [(events, charge)], "bound {bound}");
            } else {
                assert!(said.is_empty(), "bound {bound}: {said:?}");
            }
        }
    }

    #[test]
    fn a_packed_event_costs_its_encoding() {
        let mut log = Chunked::default();
        for seq in 1..=1000 {
            log.push_back(seq, ev(seq).encode());
        }
        while log.pack_one(true) {}
        let per_event = log.bytes() / 1000;
        assert!(per_event < 120, "{per_event} bytes per event");
    }
}
