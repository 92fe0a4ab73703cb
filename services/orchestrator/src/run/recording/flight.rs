//! What was in flight at a fork point (see `run::recording::fork`): found by a scan
//! of the events before it, the packed ones read without being decoded.

use std::collections::{HashMap, HashSet};

use baton_proto::v1 as pb;

use super::scan::{self, Kind};
use crate::run::log::PackedChunk;

/// The indexes of the events of what was in flight before the fork point
/// (the first `before` events) that the fork sends again (see `run::recording::fork`):
/// the progress and options of tool calls whose point is not in the
/// journal, questions not answered, and the streamed text of each
/// context's model turn that had not ended; and the units of the calls in
/// flight, whose start stays. Packed events are scanned, not decoded.
pub(super) fn in_flight(
    packed: &[PackedChunk],
    events: &[pb::RunEvent],
    before: usize,
    journaled: &dyn Fn(&str) -> bool,
) -> (foldhash::HashSet<usize>, HashSet<String>) {
    let mut seen = InFlight {
        journaled,
        dropped: Default::default(),
        announced: HashSet::new(),
        deltas: HashMap::new(),
        unit: String::new(),
    };
    let mut i = 0;
    'chunks: for chunk in packed {
        for j in 0..chunk.len() {
            if i >= before {
                break 'chunks;
            }
            let s = scan::scan(chunk.bytes(j));
            seen.see(i, s.context_id, s.what);
            i += 1;
        }
    }
    for e in events {
        if i >= before {
            break;
        }
        if let Some(p) = &e.payload {
            seen.see(i, &e.context_id, scan::kind_of(p));
        }
        i += 1;
    }
    let InFlight {
        mut dropped,
        announced,
        deltas,
        ..
    } = seen;
    dropped.extend(deltas.into_values().flatten());
    (dropped, announced)
}

/// What [`in_flight`] has seen so far.
struct InFlight<'u> {
    /// Whether a unit is taken from the journal (or edited).
    journaled: &'u dyn Fn(&str) -> bool,
    dropped: foldhash::HashSet<usize>,
    announced: HashSet<String>,
    /// Per context, the text deltas since its last model turn ended.
    deltas: HashMap<String, Vec<usize>>,
    /// A unit being looked up.
    unit: String,
}

impl InFlight<'_> {
    /// Whether the journal has unit `{kind}/{ctx}/{id}` (`{kind}/{id}`
    /// without a context); the unit is left in `self.unit`.
    fn has(&mut self, kind: &str, ctx: Option<&str>, id: &str) -> bool {
        use std::fmt::Write as _;
        self.unit.clear();
        let _ = match ctx {
            Some(ctx) => write!(self.unit, "{kind}/{ctx}/{id}"),
            None => write!(self.unit, "{kind}/{id}"),
        };
        (self.journaled)(self.unit.as_str())
    }

    fn see(&mut self, i: usize, ctx: &str, what: Option<(Kind, &str)>) {
        let Some((kind, id)) = what else { return };
        match kind {
            Kind::ToolCallStarted if !self.has("c", Some(ctx), id) => {
                self.announced.insert(self.unit.clone());
            }
            Kind::ToolProgress | Kind::ToolOptions if !self.has("c", Some(ctx), id) => {
                self.dropped.insert(i);
            }
            Kind::ApprovalRequested if !self.has("ap", None, id) => {
                self.dropped.insert(i);
            }
            Kind::InputRequested if !self.has("in", None, id) && !self.has("it", None, id) => {
                self.dropped.insert(i);
            }
            Kind::TextDelta => match self.deltas.get_mut(ctx) {
                Some(d) => d.push(i),
                None => {
                    self.deltas.insert(ctx.to_owned(), vec![i]);
                }
            },
            Kind::MessageCompleted => {
                self.deltas.remove(ctx);
            }
            _ => {}
        }
    }
}
