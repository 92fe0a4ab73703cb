//! A replay's fourth use: an evaluation case's recorded tools (see
//! [`Rerun::tools`] and `crate::eval`), its calls matched by tool and
//! arguments rather than by where the recording made them.

use std::{
    collections::HashMap,
    sync::{Mutex, atomic::Ordering},
};

use serde_json::Value;

use super::{Answer, Call, History, Rerun, ToolsOnly, short};

impl Rerun {
    /// An evaluation case's recorded tools: models and people are asked
    /// live; a call of a tool outside Baton (a tool server, an MCP server,
    /// a remote A2A agent, at any depth) is answered from the recording —
    /// the run's (`history`) or the case's own calls (`inline`) — when the
    /// recording made a call of that tool with those arguments (the one at
    /// the same place first, else the first not answered yet, else one
    /// answered before); a call it lacks fails the run naming the call and
    /// the closest recorded one, or goes live when `unrecorded_live`.
    /// `faults` make a tool fail, time out or answer late.
    pub fn tools(
        origin: String,
        history: Option<History>,
        inline: &[crate::eval::dataset::RecordedCall],
        unrecorded_live: bool,
        faults: Vec<crate::eval::dataset::Fault>,
    ) -> Self {
        let mut order: Vec<(u64, String)> = Vec::new();
        let mut rerun = match history {
            Some(history) => {
                let seqs: HashMap<String, u64> = history
                    .recording
                    .iter()
                    .filter(|r| r.unit.starts_with("c/"))
                    .map(|r| (r.unit.to_string(), r.seq))
                    .collect();
                let mut r = Self::new(origin, !unrecorded_live, history);
                // Only calls that left Baton (a denied or refused call did
                // not) answer a case's calls.
                r.calls.retain(|_, c| {
                    serde_json::from_slice::<Value>(&c.record)
                        .is_ok_and(|v| v.get("x") == Some(&Value::Bool(true)))
                });
                order.extend(
                    r.calls
                        .keys()
                        .map(|u| (seqs.get(u).copied().unwrap_or(0), u.clone())),
                );
                r
            }
            None => Self::new(origin, !unrecorded_live, History::default()),
        };
        for (i, c) in inline.iter().enumerate() {
            let unit = format!("inline/{i}");
            let (ok, text) = if c.error.is_empty() {
                (true, c.result.clone())
            } else {
                (false, c.error.clone())
            };
            let record = serde_json::json!({"ok": ok, "text": text, "x": true});
            rerun.calls.insert(
                unit.clone(),
                Call {
                    tool: c.tool.clone(),
                    arguments: c.arguments.clone(),
                    record: serde_json::to_vec(&record).unwrap_or_default().into(),
                    said: Vec::new(),
                },
            );
            order.push((i as u64, unit));
        }
        order.sort();
        // Only tool calls are answered from it.
        rerun.turns.clear();
        rerun.answers.clear();
        rerun.timed_out.clear();
        rerun.tools = Some(ToolsOnly {
            unrecorded_live,
            order: order.into_iter().map(|(_, u)| u).collect(),
            used: Mutex::default(),
            faults,
        });
        rerun
    }

    /// The calls of tools outside Baton a case's recording holds, in the
    /// order they were made (what SaveCase keeps inline).
    pub fn recorded_calls(&self) -> Vec<crate::eval::dataset::RecordedCall> {
        let Some(t) = &self.tools else {
            return Vec::new();
        };
        #[derive(serde::Deserialize)]
        struct Outcome {
            ok: bool,
            #[serde(default)]
            text: String,
            /// The call left Baton: only those are answered from it.
            #[serde(default)]
            x: bool,
        }
        t.order
            .iter()
            .filter_map(|u| self.calls.get(u))
            .filter_map(|c| {
                let o: Outcome = serde_json::from_slice(&c.record)
                    .ok()
                    .filter(|o: &Outcome| o.x)?;
                Some(crate::eval::dataset::RecordedCall {
                    tool: c.tool.clone(),
                    arguments: c.arguments.clone(),
                    result: if o.ok { o.text.clone() } else { String::new() },
                    error: if o.ok { String::new() } else { o.text },
                })
            })
            .collect()
    }

    /// Whether this answers an evaluation case's tool calls only.
    pub fn tools_only(&self) -> bool {
        self.tools.is_some()
    }

    /// The fault a case injects into calls of `tool`, if any.
    pub fn fault(&self, tool: &str) -> Option<&crate::eval::dataset::Fault> {
        self.tools.as_ref()?.faults.iter().find(|f| f.tool == tool)
    }

    /// A case's call `unit` of `tool` with `arguments` (see [`Self::tools`]).
    pub(super) fn recorded_tool(
        &self,
        t: &ToolsOnly,
        unit: &str,
        tool: &str,
        arguments: &Value,
    ) -> Answer<&Call> {
        self.made.fetch_add(1, Ordering::Relaxed);
        let same = |c: &Call| c.tool == tool && c.arguments == *arguments;
        let mut used = t.used.lock().unwrap_or_else(|p| p.into_inner());
        let found = self
            .calls
            .get(unit)
            .filter(|c| same(c) && !used.contains(unit))
            .map(|c| (unit.to_owned(), c))
            .or_else(|| {
                t.order.iter().filter(|u| !used.contains(*u)).find_map(|u| {
                    self.calls
                        .get(u)
                        .filter(|c| same(c))
                        .map(|c| (u.clone(), c))
                })
            })
            .or_else(|| {
                t.order.iter().find_map(|u| {
                    self.calls
                        .get(u)
                        .filter(|c| same(c))
                        .map(|c| (u.clone(), c))
                })
            });
        if let Some((u, call)) = found {
            used.insert(u);
            self.matched.fetch_add(1, Ordering::Relaxed);
            return Answer::Recorded(call);
        }
        drop(used);
        if t.unrecorded_live {
            return Answer::Live;
        }
        let asked = format!("{tool}({})", short(&arguments.to_string()));
        // The closest: the call of the same tool whose arguments read most
        // alike (their text's pairs of characters in common), else any.
        let asked_pairs = pairs(&arguments.to_string());
        let mut closest: Option<(&Call, f64)> = None;
        for c in t
            .order
            .iter()
            .filter_map(|u| self.calls.get(u))
            .filter(|c| c.tool == tool)
        {
            let alike = dice(&asked_pairs, &pairs(&c.arguments.to_string()));
            if closest.is_none_or(|(_, best)| alike > best) {
                closest = Some((c, alike));
            }
        }
        let closest = closest
            .map(|(c, _)| c)
            .or_else(|| t.order.iter().find_map(|u| self.calls.get(u)));
        Answer::Differs(match closest {
            Some(c) => format!(
                "the recording has no call {asked}; closest recorded: {}({})",
                c.tool,
                short(&c.arguments.to_string())
            ),
            None => format!("the recording has no call {asked}; it recorded no call"),
        })
    }
}

/// The pairs of adjacent characters of `text`, counted.
fn pairs(text: &str) -> HashMap<(char, char), u32> {
    let chars: Vec<char> = text.chars().collect();
    let mut out = HashMap::new();
    for w in chars.windows(2) {
        *out.entry((w[0], w[1])).or_insert(0) += 1;
    }
    out
}

/// Dice's coefficient of two texts' pairs: 1 alike, 0 nothing shared.
fn dice(a: &HashMap<(char, char), u32>, b: &HashMap<(char, char), u32>) -> f64 {
    let total: u32 = a.values().sum::<u32>() + b.values().sum::<u32>();
    if total == 0 {
        return 1.0;
    }
    let common: u32 = a
        .iter()
        .map(|(k, n)| (*n).min(b.get(k).copied().unwrap_or(0)))
        .sum();
    f64::from(2 * common) / f64::from(total)
}
