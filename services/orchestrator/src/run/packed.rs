//! A run's events as its log keeps them and streams carry them: encoded
//! once, as `RunEvent`s without the run's ids ([`PackedChunk`] holds a
//! chunk of them back to back; [`PackedEvent`] is one on its way to a
//! face, with the run's ids appended). A leaf: it knows events' bytes,
//! nothing of logs or runs (see `run::log`).

use std::sync::Arc;

use baton_proto::v1 as pb;
use bytes::{Buf as _, BufMut, Bytes};
use prost::Message as _;

/// A packed chunk: its events encoded as `RunEvent`s without the run's
/// ids, back to back. Shared, not copied, when a fork reads its origin's
/// history ([`Chunked::packed_prefix`]).
#[derive(Clone)]
pub struct PackedChunk {
    /// The events, encoded, back to back.
    data: Bytes,
    /// Where each event ends in `data`.
    ends: Arc<[u32]>,
    /// Every event is read back marked `replayed` (a fork's copy of its
    /// origin's chunk: the same bytes, shared).
    replayed: bool,
    /// Its first event's encoding in place of the one in `data` (a fork's
    /// first chunk: its own `RunStarted`, the rest its origin's, shared).
    first: Option<Bytes>,
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
    pub(crate) fn encode<E: std::borrow::Borrow<pb::RunEvent>>(
        events: impl Iterator<Item = E>,
    ) -> Self {
        let mut data = Vec::new();
        let mut ends = Vec::new();
        for e in events {
            let _ = e.borrow().encode(&mut data);
            ends.push(u32::try_from(data.len()).unwrap_or(u32::MAX));
        }
        PackedChunk {
            data: Bytes::from(data),
            ends: ends.into(),
            replayed: false,
            first: None,
        }
    }

    /// The chunk with every event marked `replayed` (a fork's first
    /// events): the same bytes, shared, not copied.
    pub(crate) fn replayed(&self) -> PackedChunk {
        PackedChunk {
            replayed: true,
            ..self.clone()
        }
    }

    /// The chunk marked `replayed` with its first event replaced by
    /// `first` (a fork's `RunStarted`): that event encoded, the others'
    /// bytes shared.
    pub(crate) fn replayed_with_first(&self, first: &pb::RunEvent) -> PackedChunk {
        PackedChunk {
            replayed: true,
            first: Some(Bytes::from(first.encode_to_vec())),
            ..self.clone()
        }
    }

    /// Bytes it holds (those it shares with other chunks included).
    pub(crate) fn held(&self) -> usize {
        self.data.len() + self.ends.len() * 4 + self.first.as_ref().map_or(0, |f| f.len())
    }

    /// Its events.
    pub(crate) fn len(&self) -> usize {
        self.ends.len()
    }

    /// Its first `n` events: the same bytes, shared.
    pub(crate) fn truncated(&self, n: usize) -> PackedChunk {
        PackedChunk {
            ends: self.ends[..n].into(),
            ..self.clone()
        }
    }

    /// The encoding of its `i`-th event (without the run's ids, and
    /// without `replayed` when the chunk is [`Self::replayed`]).
    pub(crate) fn bytes(&self, i: usize) -> &[u8] {
        if i == 0
            && let Some(first) = &self.first
        {
            return first;
        }
        let start = if i == 0 { 0 } else { self.ends[i - 1] as usize };
        &self.data[start..self.ends[i] as usize]
    }

    /// The encoding of its `i`-th event, shared (see [`Self::bytes`]).
    pub(crate) fn slice(&self, i: usize) -> Bytes {
        if i == 0
            && let Some(first) = &self.first
        {
            return first.clone();
        }
        let start = if i == 0 { 0 } else { self.ends[i - 1] as usize };
        self.data.slice(start..self.ends[i] as usize)
    }

    /// Its `i`-th event, without the run's ids.
    pub(crate) fn event(&self, i: usize) -> pb::RunEvent {
        let mut e = pb::RunEvent::decode(self.bytes(i)).unwrap_or_default();
        e.replayed |= self.replayed;
        e
    }

    /// Its events in order, decoded as they are taken.
    pub(crate) fn events(&self) -> impl Iterator<Item = pb::RunEvent> + '_ {
        (0..self.len()).map(|i| self.event(i))
    }
}

/// `replayed = true` (field 10, a varint) as a `RunEvent` encodes it.
pub(crate) const REPLAYED: [u8; 2] = [10 << 3, 1];

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

/// An event as a stream sends it, not decoded: its bytes as the log keeps
/// them, then the run's ids (and `replayed` when it comes from a fork's
/// copy of its origin's chunk). Fields may come in any order in a protobuf
/// message, and these are not in the kept bytes, so the whole is the
/// event's encoding; the gRPC face writes it as it is (`grpc::outgoing`),
/// the other faces decode it ([`Self::event`]).
#[derive(Clone)]
pub struct PackedEvent {
    bytes: Bytes,
    seq: u64,
    tail: Arc<[u8]>,
    replayed: bool,
}

impl PackedEvent {
    /// An event just logged: its encoding ([`Logged::encode`]) and the
    /// run's ids ([`ids_tail`]).
    pub fn new(bytes: Bytes, seq: u64, tail: Arc<[u8]>) -> Self {
        PackedEvent {
            bytes,
            seq,
            tail,
            replayed: false,
        }
    }

    /// Its seq.
    pub fn seq(&self) -> u64 {
        self.seq
    }

    fn replayed(&self) -> &'static [u8] {
        if self.replayed { &REPLAYED } else { &[] }
    }

    /// Its bytes as the log keeps them (without the run's ids).
    pub fn bytes(&self) -> &Bytes {
        &self.bytes
    }

    /// Its whole encoding (with the run's ids), in one buffer.
    pub fn to_vec(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.encoded_len());
        self.encode(&mut out);
        out
    }

    /// Bytes its encoding takes.
    pub fn encoded_len(&self) -> usize {
        self.bytes.len() + self.tail.len() + self.replayed().len()
    }

    /// Writes its encoding into `buf`.
    pub fn encode(&self, buf: &mut impl BufMut) {
        buf.put_slice(&self.bytes);
        buf.put_slice(&self.tail);
        buf.put_slice(self.replayed());
    }

    /// The event: its encoding, decoded (what a client reads from it).
    pub fn event(&self) -> pb::RunEvent {
        let encoded = (&self.bytes[..])
            .chain(&self.tail[..])
            .chain(self.replayed());
        pb::RunEvent::decode(encoded).unwrap_or_default()
    }
}

/// An event as a run's stream carries it to a face: as its run's log keeps
/// it (every event a run's sequencer sends, and what WatchRun and a fork
/// read back from the log), decoded only by a face that needs its fields;
/// or decoded (an event read from the run store, or one a filter looked
/// at), boxed: a channel's slots are as large as what it carries, and a
/// run's two channels allocate 32 of them each as they open.
pub enum Outgoing {
    /// Decoded.
    Event(Box<pb::RunEvent>),
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
            Outgoing::Event(e) => *e,
            Outgoing::Packed(p) => p.event(),
        }
    }
}

impl From<pb::RunEvent> for Outgoing {
    fn from(e: pb::RunEvent) -> Self {
        Outgoing::Event(Box::new(e))
    }
}

impl PackedChunk {
    /// A chunk of `data`, events encoded back to back, each ending where
    /// `ends` says.
    pub(crate) fn from_parts(data: Vec<u8>, ends: Vec<u32>) -> Self {
        PackedChunk {
            data: Bytes::from(data),
            ends: ends.into(),
            replayed: false,
            first: None,
        }
    }

    /// Its `i`-th event as a stream carries it: seq `seq`, sent with
    /// `tail` (the run's ids).
    pub(crate) fn outgoing(&self, i: usize, seq: u64, tail: Arc<[u8]>) -> PackedEvent {
        PackedEvent {
            bytes: self.slice(i),
            seq,
            tail,
            replayed: self.replayed,
        }
    }
}
