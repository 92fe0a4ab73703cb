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
use bytes::{Buf as _, BufMut};
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
/// history ([`Chunked::packed_prefix`]).
#[derive(Clone)]
pub struct PackedChunk {
    /// The events, encoded, back to back.
    data: Arc<[u8]>,
    /// Where each event ends in `data`.
    ends: Arc<[u32]>,
    /// Every event is read back marked `replayed` (a fork's copy of its
    /// origin's chunk: the same bytes, shared).
    replayed: bool,
    /// Its first event's encoding in place of the one in `data` (a fork's
    /// first chunk: its own `RunStarted`, the rest its origin's, shared).
    first: Option<Arc<[u8]>>,
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
            first: None,
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
    /// bytes shared.
    pub(super) fn replayed_with_first(&self, first: &pb::RunEvent) -> PackedChunk {
        PackedChunk {
            replayed: true,
            first: Some(first.encode_to_vec().into()),
            ..self.clone()
        }
    }

    /// Bytes it holds (those it shares with other chunks included).
    fn held(&self) -> usize {
        self.data.len() + self.ends.len() * 4 + self.first.as_ref().map_or(0, |f| f.len())
    }

    /// Its events.
    pub(super) fn len(&self) -> usize {
        self.ends.len()
    }

    /// Its first `n` events: the same bytes, shared.
    pub(super) fn truncated(&self, n: usize) -> PackedChunk {
        PackedChunk {
            ends: self.ends[..n].into(),
            ..self.clone()
        }
    }

    /// The encoding of its `i`-th event (without the run's ids, and
    /// without `replayed` when the chunk is [`Self::replayed`]).
    pub(super) fn bytes(&self, i: usize) -> &[u8] {
        if i == 0
            && let Some(first) = &self.first
        {
            return first;
        }
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

/// `replayed = true` (field 10, a varint) as a `RunEvent` encodes it.
const REPLAYED: [u8; 2] = [10 << 3, 1];

/// The run's ids as fields of an encoded `RunEvent`: what a packed event's
/// bytes are sent with ([`PackedEvent`]).
pub fn ids_tail(trace_id: &str, run_id: &str) -> Arc<[u8]> {
    pb::RunEvent {
        trace_id: trace_id.to_owned(),
        run_id: run_id.to_owned(),
        ..Default::default()
    }
    .encode_to_vec()
    .into()
}

/// An event of a packed chunk as a stream sends it, not decoded: its bytes
/// as the log keeps them, then the run's ids (and `replayed` when the chunk
/// is a fork's copy). Fields may come in any order in a protobuf message,
/// and these are not in the kept bytes, so the whole is the event's
/// encoding; the gRPC face writes it as it is (`grpc::outgoing`), the
/// other faces decode it ([`Self::event`]).
#[derive(Clone)]
pub struct PackedEvent {
    chunk: PackedChunk,
    i: usize,
    seq: u64,
    tail: Arc<[u8]>,
}

impl PackedEvent {
    /// Its seq.
    pub fn seq(&self) -> u64 {
        self.seq
    }

    fn replayed(&self) -> &'static [u8] {
        if self.chunk.replayed { &REPLAYED } else { &[] }
    }

    /// Writes its encoding into `buf`.
    pub fn encode(&self, buf: &mut impl BufMut) {
        buf.put_slice(self.chunk.bytes(self.i));
        buf.put_slice(&self.tail);
        buf.put_slice(self.replayed());
    }

    /// The event: its encoding, decoded (what a client reads from it).
    pub fn event(&self) -> pb::RunEvent {
        let encoded = self
            .chunk
            .bytes(self.i)
            .chain(&self.tail[..])
            .chain(self.replayed());
        pb::RunEvent::decode(encoded).unwrap_or_default()
    }
}

/// An event as a run's stream carries it to a face: decoded, or as its
/// run's log keeps it (read back from a packed chunk for WatchRun or a
/// fork's replayed part), decoded only by a face that needs its fields.
// Not boxed: most events are live ones (`Event`), and a box would cost each
// an allocation to save a few hundred bytes moved per channel hop.
#[allow(clippy::large_enum_variant)]
pub enum Outgoing {
    /// Decoded.
    Event(pb::RunEvent),
    /// As its run's log keeps it.
    Packed(PackedEvent),
}

impl Outgoing {
    /// Its seq.
    pub fn seq(&self) -> u64 {
        match self {
            Outgoing::Event(e) => e.seq,
            Outgoing::Packed(p) => p.seq,
        }
    }

    /// The event, decoded if it was not.
    pub fn into_event(self) -> pb::RunEvent {
        match self {
            Outgoing::Event(e) => e,
            Outgoing::Packed(p) => p.event(),
        }
    }
}

impl From<pb::RunEvent> for Outgoing {
    fn from(e: pb::RunEvent) -> Self {
        Outgoing::Event(e)
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

/// A run's events in chunks of [`LOG_CHUNK`], every chunk but the last
/// packed (see the module docs). A fork's log starts with its origin's
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
            self.packed_events += packed.len();
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
        (self.len - self.packed_events) * LIVE_EVENT_BYTES
            + self.packed_bytes
            + self.chunks.len() * (std::mem::size_of::<Chunk>() + std::mem::size_of::<usize>())
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
            self.packed_bytes += p.held();
            self.packed_events += p.ends.len();
        }
        self.chunks[at] = packed;
        true
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
    /// those of packed chunks not decoded, sent with `tail` (the run's ids,
    /// [`ids_tail`]).
    pub(super) fn read_outgoing(
        &self,
        skip: usize,
        max: usize,
        tail: &Arc<[u8]>,
        trace_id: &str,
        run_id: &str,
    ) -> Vec<Outgoing> {
        let mut out = Vec::with_capacity(max.min(self.len.saturating_sub(skip)));
        let first_seq = self.first_seq;
        self.each_run(skip, max, |chunk, i, take, at| match chunk {
            Chunk::Live(v) => out.extend(
                v[i..i + take]
                    .iter()
                    .map(|e| Outgoing::Event(e.to_event(trace_id, run_id))),
            ),
            Chunk::Packed(p) => out.extend((0..take).map(|k| {
                Outgoing::Packed(PackedEvent {
                    chunk: p.clone(),
                    i: i + k,
                    seq: first_seq + (at + k) as u64,
                    tail: tail.clone(),
                })
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
        log.read_outgoing(skip, max, &tail, t, r)
            .into_iter()
            .map(|o| {
                let seq = o.seq();
                let event = match o {
                    Outgoing::Event(e) => e,
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
    fn replayed_is_encoded_as_a_run_event_encodes_it() {
        use prost::Message as _;
        let e = pb::RunEvent {
            replayed: true,
            ..Default::default()
        };
        assert_eq!(e.encode_to_vec(), super::REPLAYED);
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
            origin.push_back(e);
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
                assert!(std::sync::Arc::ptr_eq(&changed.data, &first.data));
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
                fork.push_back(e);
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
