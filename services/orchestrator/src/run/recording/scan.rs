//! What a fork's plan reads of an event it does not decode whole: its
//! context and, for the few kinds the plan looks at, the id of the call,
//! approval or question. Read straight from the event's encoding (a
//! packed chunk of a run's log): every field this head does not declare is
//! skipped, so a long run is scanned without building its events.

use baton_proto::v1::run_event::Payload;
use prost::encoding::decode_varint;

/// The kinds of events a fork's plan looks at (see `run::recording::flight`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    TextDelta,
    MessageCompleted,
    ToolCallStarted,
    ToolProgress,
    ToolOptions,
    ApprovalRequested,
    InputRequested,
}

/// `baton.v1.RunEvent`'s fields read here (a test holds them to it).
const CONTEXT_ID: u64 = 4;
/// The payload fields of the kinds in [`Kind`].
fn kind_of_field(field: u64) -> Option<Kind> {
    Some(match field {
        31 => Kind::TextDelta,
        32 => Kind::MessageCompleted,
        40 => Kind::ToolCallStarted,
        41 => Kind::ToolProgress,
        42 => Kind::ToolOptions,
        50 => Kind::ApprovalRequested,
        52 => Kind::InputRequested,
        _ => return None,
    })
}

/// The fields of a message's encoding: (field number, its bytes when it
/// is length-delimited); `None` at the end or where it does not decode.
fn next_field<'a>(buf: &mut &'a [u8]) -> Option<(u64, Option<&'a [u8]>)> {
    if buf.is_empty() {
        return None;
    }
    let key = decode_varint(buf).ok()?;
    let (field, wire) = (key >> 3, key & 7);
    let value = match wire {
        0 => {
            decode_varint(buf).ok()?;
            None
        }
        1 | 5 => {
            let n = if wire == 1 { 8 } else { 4 };
            *buf = buf.get(n..)?;
            None
        }
        2 => {
            let n = usize::try_from(decode_varint(buf).ok()?).ok()?;
            let value = buf.get(..n)?;
            *buf = &buf[n..];
            Some(value)
        }
        _ => return None,
    };
    Some((field, value))
}

/// An event's context and, when it is of a kind in [`Kind`], the kind and
/// its id (empty for text and model turns): borrowed from its encoding.
pub struct Scanned<'a> {
    pub context_id: &'a str,
    pub what: Option<(Kind, &'a str)>,
}

/// Reads [`Scanned`] from an encoded `RunEvent` (no field is copied); an
/// encoding that does not decode reads as far as it does.
pub fn scan(mut encoded: &[u8]) -> Scanned<'_> {
    let mut scanned = Scanned {
        context_id: "",
        what: None,
    };
    while let Some((field, value)) = next_field(&mut encoded) {
        let Some(mut value) = value else { continue };
        if field == CONTEXT_ID {
            scanned.context_id = std::str::from_utf8(value).unwrap_or_default();
        } else if let Some(kind) = kind_of_field(field) {
            // The id is each of these payloads' field 1; the last one
            // encoded wins, as in a decoder.
            let mut id = "";
            if !matches!(kind, Kind::TextDelta | Kind::MessageCompleted) {
                while let Some((f, v)) = next_field(&mut value) {
                    if let (1, Some(v)) = (f, v) {
                        id = std::str::from_utf8(v).unwrap_or_default();
                    }
                }
            }
            scanned.what = Some((kind, id));
        }
    }
    scanned
}

/// The same, of a decoded payload.
pub fn kind_of(payload: &Payload) -> Option<(Kind, &str)> {
    Some(match payload {
        Payload::TextDelta(_) => (Kind::TextDelta, ""),
        Payload::MessageCompleted(_) => (Kind::MessageCompleted, ""),
        Payload::ToolCallStarted(c) => (Kind::ToolCallStarted, c.call_id.as_str()),
        Payload::ToolProgress(c) => (Kind::ToolProgress, c.call_id.as_str()),
        Payload::ToolOptions(c) => (Kind::ToolOptions, c.call_id.as_str()),
        Payload::ApprovalRequested(a) => (Kind::ApprovalRequested, a.approval_id.as_str()),
        Payload::InputRequested(q) => (Kind::InputRequested, q.input_id.as_str()),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::{kind_of, scan};
    use baton_proto::v1::{self as pb, run_event::Payload};
    use prost::Message as _;

    #[test]
    fn a_scan_reads_what_a_decode_reads() {
        let payloads = [
            Payload::TextDelta(pb::TextDelta { text: "hi".into() }),
            Payload::MessageCompleted(pb::MessageCompleted {
                text: "done".into(),
                ..Default::default()
            }),
            Payload::ToolCallStarted(pb::ToolCallStarted {
                call_id: "root/1/c1".into(),
                tool: "search".into(),
                ..Default::default()
            }),
            Payload::ToolProgress(pb::ToolProgress {
                call_id: "root/1/c2".into(),
                message: "half".into(),
                ..Default::default()
            }),
            Payload::ToolOptions(pb::ToolOptions {
                call_id: "root/1/c3".into(),
                ..Default::default()
            }),
            Payload::ApprovalRequested(pb::ApprovalRequested {
                approval_id: "approval:c4".into(),
                call_id: "root/1/c4".into(),
                ..Default::default()
            }),
            Payload::InputRequested(pb::InputRequested {
                input_id: "input:c5".into(),
                call_id: "root/1/c5".into(),
                ..Default::default()
            }),
            Payload::ToolCallCompleted(pb::ToolCallCompleted {
                call_id: "root/1/c1".into(),
                ..Default::default()
            }),
            Payload::RunStarted(Default::default()),
        ];
        for payload in payloads {
            let event = pb::RunEvent {
                seq: 7,
                context_id: "root.helper.1".into(),
                parent_context_id: "root".into(),
                depth: 1,
                agent: "helper".into(),
                span_id: "00f067aa0ba902b7".into(),
                replayed: true,
                payload: Some(payload.clone()),
                ..Default::default()
            };
            let encoded = event.encode_to_vec();
            let scanned = scan(&encoded);
            assert_eq!(scanned.context_id, "root.helper.1");
            assert_eq!(scanned.what, kind_of(&payload), "{payload:?}");
            // Cut short, it reads what it can and never panics.
            for end in 0..encoded.len() {
                let _ = scan(&encoded[..end]);
            }
        }
    }
}
