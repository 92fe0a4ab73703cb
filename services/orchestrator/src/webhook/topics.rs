//! What a subscription asks to be told (`events`): the five `run.` types,
//! or every event of a kind (`event.<kind>`).

use baton_proto::v1::{self as pb, run_event::Payload};

use crate::run::events::kind_of;

/// The run types, in the order of their bits.
const RUN_TYPES: [&str; 5] = [
    "run.started",
    "run.waiting",
    "run.completed",
    "run.failed",
    "run.cancelled",
];

/// A subscription's filter: bits of the run types, then of event kinds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Topics {
    run: u8,
    kinds: u64,
}

impl Default for Topics {
    /// The five run types.
    fn default() -> Self {
        Self {
            run: 0b11111,
            kinds: 0,
        }
    }
}

/// An event kind's name in `event.<kind>`: the EventKind's in lower case
/// without `EVENT_KIND_`.
fn kind_name(kind: pb::EventKind) -> String {
    kind.as_str_name()
        .trim_start_matches("EVENT_KIND_")
        .to_ascii_lowercase()
}

impl Topics {
    /// Parses `events` (empty: the five run types); the error names the
    /// entry (`events[i]`) and what is wrong.
    pub fn parse(events: &[String]) -> Result<Self, (usize, String)> {
        if events.is_empty() {
            return Ok(Self::default());
        }
        let mut t = Self { run: 0, kinds: 0 };
        for (i, e) in events.iter().enumerate() {
            if let Some(bit) = RUN_TYPES.iter().position(|r| r == e) {
                t.run |= 1 << bit;
            } else if let Some(kind) = e.strip_prefix("event.") {
                let found = pb::EventKind::from_str_name(&format!(
                    "EVENT_KIND_{}",
                    kind.to_ascii_uppercase()
                ))
                .filter(|k| *k != pb::EventKind::Unspecified && kind == kind_name(*k));
                let Some(k) = found else {
                    return Err((
                        i,
                        format!(
                            "\"{e}\" names no event kind (event.text_delta, event.tool_call_completed, …)"
                        ),
                    ));
                };
                t.kinds |= 1 << (k as i32 as u64);
            } else {
                return Err((
                    i,
                    format!(
                        "\"{e}\" is not one of run.started, run.waiting, run.completed, run.failed, run.cancelled or event.<kind>"
                    ),
                ));
            }
        }
        Ok(t)
    }

    /// The names, as a subscription lists them.
    pub fn names(&self) -> Vec<String> {
        let mut out: Vec<String> = RUN_TYPES
            .iter()
            .enumerate()
            .filter(|(i, _)| self.run & (1 << i) != 0)
            .map(|(_, n)| (*n).to_owned())
            .collect();
        for k in 1..64 {
            if self.kinds & (1 << k) != 0
                && let Ok(kind) = pb::EventKind::try_from(k)
            {
                out.push(format!("event.{}", kind_name(kind)));
            }
        }
        out
    }

    /// The type a delivery of `payload` has for this subscription, if it
    /// wants one: a run type first, else `event.<kind>`.
    pub fn type_of(&self, payload: &Payload) -> Option<String> {
        let run = match payload {
            Payload::RunStarted(_) => Some(0),
            Payload::ApprovalRequested(_) | Payload::InputRequested(_) => Some(1),
            Payload::RunCompleted(_) => Some(2),
            Payload::RunFailed(_) => Some(3),
            Payload::RunCancelled(_) => Some(4),
            _ => None,
        };
        if let Some(bit) = run
            && self.run & (1 << bit) != 0
        {
            return Some(RUN_TYPES[bit].to_owned());
        }
        if self.kinds == 0 {
            return None;
        }
        let kind = kind_of(payload);
        (self.kinds & (1 << (kind as i32 as u64)) != 0)
            .then(|| format!("event.{}", kind_name(kind)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_names_and_matches() {
        let t = Topics::parse(&["run.completed".into(), "event.tool_call_completed".into()])
            .expect("topics");
        assert_eq!(
            t.names(),
            vec!["run.completed", "event.tool_call_completed"]
        );
        assert_eq!(
            t.type_of(&Payload::RunCompleted(Default::default()))
                .as_deref(),
            Some("run.completed")
        );
        assert_eq!(
            t.type_of(&Payload::ToolCallCompleted(Default::default()))
                .as_deref(),
            Some("event.tool_call_completed")
        );
        assert_eq!(t.type_of(&Payload::RunFailed(Default::default())), None);
        let all = Topics::parse(&[]).expect("default");
        assert_eq!(
            all.type_of(&Payload::InputRequested(Default::default()))
                .as_deref(),
            Some("run.waiting")
        );
        assert_eq!(all.type_of(&Payload::TextDelta(Default::default())), None);
        assert_eq!(Topics::parse(&["run.done".into()]).expect_err("bad").0, 0);
        assert_eq!(
            Topics::parse(&["run.started".into(), "event.nope".into()])
                .expect_err("bad")
                .0,
            1
        );
        assert!(Topics::parse(&["event.unspecified".into()]).is_err());
        assert!(Topics::parse(&["event.TEXT_DELTA".into()]).is_err());
    }
}
