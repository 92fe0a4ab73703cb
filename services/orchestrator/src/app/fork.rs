//! ForkRun: a new run (new id, new trace, the caller's tenant) that starts
//! from a point of a recorded run. Its history — the events and the
//! recording, from this replica's runs in memory mode, from the run store
//! when runs are durable — is planned into the fork's first events and its
//! journal (`run::recording::fork`); the fork is then built from the original's
//! request, checked against today's agents, and run like a resumed run
//! with that journal: nothing before the point is called again, and from
//! the point on it is live. A durable fork's replayed part is written to
//! the run store before it starts, so it survives its replica like any
//! durable run.

use std::collections::HashMap;

use baton_proto::v1::{self as pb, fork_edit, run_event::Payload};
use serde_json::Value;

use super::{
    orchestrator::{Caller, Orchestrator, not_found},
    start::{Started, audit_started},
    watch::history_gone,
};
use crate::{
    error::{Error, Result},
    model::{ModelTurn, ToolCallRequest},
    request::{
        ForkRequest,
        validate::{check_filter, parse_run_context},
    },
    run::{
        durable::{RedisRuns, sequencer},
        launch,
        log::Recorded,
        recording::{
            Walk,
            fork::{self, Edit, History, PointKind},
        },
        view::Origin,
    },
};

/// Most tool calls an edited model turn may ask for.
pub const MAX_EDIT_CALLS: usize = 64;

impl Orchestrator {
    /// Forks a run of the caller's tenant (see the module docs).
    pub async fn fork(&self, caller: &Caller, request: ForkRequest) -> Result<Started> {
        let origin = request.run_id.clone();
        let started = self.try_fork(caller, request).await;
        audit_started("ForkRun", caller, &origin, &started);
        started
    }

    async fn try_fork(&self, caller: &Caller, request: ForkRequest) -> Result<Started> {
        self.check_running()?;
        check_filter(&request.filter, &self.services().defaults)?;
        let max_context = self.services().defaults.max_run_context_bytes;
        let edit = request.edit.map(|e| edit_of(e, max_context)).transpose()?;
        let edited = edit.as_ref().is_some_and(|e| e.kind != PointKind::Any);
        let (history, stored, kind) = self
            .history(caller, &request.run_id, request.at_seq)
            .await?;
        let mut plan = fork::plan(history, request.at_seq, edit, &request.run_id)?;
        let services = self.services();
        let Some(mut checked) = self.check_stored(kind, &stored)? else {
            return Err(Error::FailedPrecondition {
                field: "run_id",
                message: format!(
                    "the request of run {} cannot be read by this version",
                    request.run_id
                ),
            });
        };
        // A run in a conversation: the fork begins with the group member
        // the original began with, and branches the conversation.
        let origin_link = self.origin_link(&request.run_id).await?;
        checked.begin_with(&services, origin_link.as_ref());
        let (_, target) = checked.body.kind_and_target();
        let span = self.run_span(&caller.trace, "ForkRun", kind, &target);
        checked.options.detach = request.detach;
        checked.options.filter = request.filter.clone();
        checked.options.walk = Some(Walk::forked(&mut plan));
        let prepared = launch::prepare(
            &services,
            span,
            kind,
            target,
            caller.tenant.clone(),
            checked.options,
            &self.runs_stop,
            None,
        );
        let record = prepared.record.clone();
        let _ = record.forked_from.set(Origin {
            run_id: request.run_id.clone(),
            seq: request.at_seq,
            edited,
        });
        let checkpoint = plan.checkpoint();
        record.preload(std::mem::take(&mut plan.packed), &plan.events);
        if services.durable.is_none() {
            // Memory mode: the fork's recording is kept with it (and not
            // written anywhere else).
            record.record_points(std::mem::take(&mut plan.recording));
        }
        let branch = match &origin_link {
            Some(link) if !link.id.is_empty() => Some(
                self.branch_conversation(
                    &services,
                    &prepared,
                    &checked.body,
                    &request.run_id,
                    link,
                )
                .await?,
            ),
            _ => None,
        };
        let future = checked.body.future(&prepared.run);
        let prefix = (plan.events, plan.recording);
        let started = self
            .launch_with(prepared, checked.stored, Some(&prefix), future)
            .await;
        let started = match (started, branch) {
            (Ok(started), _) => started,
            // The branch never had a run: gone with the fork — unless the
            // run store did not answer, when the fork may have started
            // (it then runs in its branch; else the branch expires).
            (Err(e), Some(key)) if !matches!(e, Error::Unavailable(_)) => {
                let _ = services.conversations.store.delete(&key).await;
                return Err(e);
            }
            (Err(e), Some(_)) => return Err(e),
            (Err(e), None) => return Err(e),
        };
        // The caller's stream: the replayed part, read from the fork's log
        // a batch at a time as the stream is read (its packed chunks go
        // out as they are kept, while the fork walks to its point), then
        // the live one.
        drop(prefix);
        let gone = history_gone(&record.run_id);
        let events = started
            .events
            .after_replayed(record, checkpoint, request.filter, gone);
        Ok(Started { events, ..started })
    }

    /// The history of run `run_id` of the caller's tenant up to `at_seq`,
    /// the request that started it and its kind.
    pub(super) async fn history(
        &self,
        caller: &Caller,
        run_id: &str,
        at_seq: u64,
    ) -> Result<(History, Vec<u8>, pb::RunKind)> {
        if let Some(durable) = self.services().durable.clone() {
            if run_id.is_empty() || uuid::Uuid::try_parse(run_id).is_err() {
                // The memory registry's check names the field and the form.
                self.runs.get(run_id)?;
            }
            let Some(meta) = durable.meta(run_id).await? else {
                return Err(not_found(run_id, ""));
            };
            if meta.tenant != caller.tenant {
                return Err(not_found(run_id, ""));
            }
            let Some(request) = durable.request(run_id).await? else {
                return Err(not_found(run_id, ""));
            };
            let history = stored_history(&durable, run_id, at_seq).await?;
            return Ok((history, request, meta.kind));
        }
        let run = self.run_of(caller, run_id)?;
        // Events first: a point is recorded before its event is logged, so
        // every point among these events is in the recording read after.
        let Some((packed, events)) =
            run.first_events(usize::try_from(at_seq).unwrap_or(usize::MAX))
        else {
            return Err(history_gone(run_id));
        };
        let Some((recording, request)) = run.recording() else {
            return Err(history_gone(run_id));
        };
        Ok((
            History {
                packed,
                events,
                recording,
            },
            request,
            run.kind,
        ))
    }
}

/// The history of durable run `run_id` up to `at_seq` from the run store.
pub(super) async fn stored_history(
    durable: &RedisRuns,
    run_id: &str,
    at_seq: u64,
) -> Result<History> {
    let mut events = Vec::new();
    let mut cursor = 0;
    while cursor < at_seq {
        let want = (at_seq - cursor).min(sequencer::MAX_BATCH as u64 * 8) as usize;
        let batch = durable.events_after(run_id, cursor, want).await?;
        let Some(last) = batch.last() else { break };
        cursor = last.seq;
        events.extend(batch);
    }
    // The journal after the events: an append writes both at once, so
    // every point among the events read is in it.
    let recording = stored_recording(run_id, durable.journal(run_id).await?)?;
    // No packed chunks: a durable fork writes every replayed event to the
    // run store, so it has them all decoded.
    Ok(History {
        packed: Vec::new(),
        events,
        recording,
    })
}

/// A durable run's recording from its journal: each point whose `#{unit}`
/// field says the seq it ended at. A span id (`sp/…`) is no point and has
/// none; any other record without one means the journal is not what its
/// writes make (one script writes a point's record and its seq together),
/// and the history is refused rather than replayed without that point
/// (which would do it again, live).
fn stored_recording(run_id: &str, mut journal: HashMap<String, Vec<u8>>) -> Result<Vec<Recorded>> {
    let seqs: Vec<(String, u64)> = journal
        .iter()
        .filter_map(|(k, v)| {
            let unit = k.strip_prefix('#')?;
            let seq = std::str::from_utf8(v).ok()?.parse().ok()?;
            Some((unit.to_owned(), seq))
        })
        .collect();
    let mut recording: Vec<Recorded> = seqs
        .into_iter()
        .filter_map(|(unit, seq)| {
            let record = journal.remove(&unit)?;
            Some(Recorded {
                seq,
                unit: unit.into(),
                record: record.into(),
            })
        })
        .collect();
    let mut unplaced: Vec<&String> = journal
        .keys()
        .filter(|k| !k.starts_with('#') && !k.starts_with("sp/"))
        .collect();
    if !unplaced.is_empty() {
        unplaced.sort();
        tracing::error!(run_id, records = unplaced.len(), first = %unplaced[0], "a run's journal holds records without their seq");
        return Err(Error::Internal(format!(
            "the recording of run {run_id} is inconsistent: {} of its records have no seq (the first: {:?})",
            unplaced.len(),
            unplaced[0]
        )));
    }
    recording.sort_by_key(|r| r.seq);
    Ok(recording)
}

/// The edit a request asks for, checked: each field it names is checked
/// here, before anything is read.
fn edit_of(edit: fork_edit::Edit, max_context: usize) -> Result<Edit> {
    Ok(match edit {
        fork_edit::Edit::RunContextJson(json) => {
            if json.len() > max_context {
                return Err(Error::Exhausted {
                    field: "edit.run_context_json".into(),
                    message: format!(
                        "{} bytes is over this server's limit of {max_context} bytes (runs.max_run_context_bytes)",
                        json.len()
                    ),
                });
            }
            let context = parse_run_context("edit.run_context_json", &json)?;
            Edit {
                kind: PointKind::Any,
                field: "edit.run_context_json",
                build: Box::new(move |unit, _| {
                    (
                        format!("rc/{unit}"),
                        serde_json::to_vec(&context).unwrap_or_default(),
                    )
                }),
            }
        }
        fork_edit::Edit::ModelTurn(turn) => {
            if turn.tool_calls.len() > MAX_EDIT_CALLS {
                return Err(Error::Exhausted {
                    field: "edit.model_turn.tool_calls".into(),
                    message: format!(
                        "{} tool calls; at most {MAX_EDIT_CALLS}",
                        turn.tool_calls.len()
                    ),
                });
            }
            // A turn with neither says nothing: the agent would end with
            // an empty answer (and the turn's recorded calls are not kept
            // unless the edit names them again).
            if turn.text.trim().is_empty() && turn.tool_calls.is_empty() {
                return Err(Error::invalid(
                    "edit.model_turn",
                    "a model turn needs a text or at least one tool call (the edit replaces the whole turn: name the calls to keep)",
                ));
            }
            let mut calls = Vec::with_capacity(turn.tool_calls.len());
            let mut ids = std::collections::HashSet::new();
            for (i, c) in turn.tool_calls.iter().enumerate() {
                let field = |f: &str| format!("edit.model_turn.tool_calls[{i}].{f}");
                if c.call_id.is_empty() || c.call_id.len() > 128 {
                    return Err(Error::invalid(field("call_id"), "must be 1 to 128 bytes"));
                }
                if !ids.insert(c.call_id.clone()) {
                    return Err(Error::invalid(
                        field("call_id"),
                        format!("{:?} is used twice in the turn", c.call_id),
                    ));
                }
                if c.tool.is_empty() {
                    return Err(Error::invalid(field("tool"), "must name a tool"));
                }
                let arguments = if c.arguments_json.trim().is_empty() {
                    Value::Object(Default::default())
                } else {
                    match serde_json::from_str::<Value>(&c.arguments_json) {
                        Ok(v @ Value::Object(_)) => v,
                        Ok(_) => {
                            return Err(Error::invalid(
                                field("arguments_json"),
                                "must be a JSON object",
                            ));
                        }
                        Err(e) => {
                            return Err(Error::invalid(
                                field("arguments_json"),
                                format!("is not JSON: {e}"),
                            ));
                        }
                    }
                };
                calls.push(ToolCallRequest {
                    id: c.call_id.clone(),
                    name: c.tool.clone(),
                    arguments,
                });
            }
            let text = turn.text;
            Edit {
                kind: PointKind::ModelTurn,
                field: "edit.model_turn",
                build: Box::new(move |unit, payload| {
                    // Call ids are unique in the run: the turn's own prefix
                    // (`{context}/{turn}/`), as a model's calls have.
                    let prefix = unit.strip_prefix("t/").unwrap_or(unit);
                    let calls: Vec<ToolCallRequest> = calls
                        .into_iter()
                        .map(|mut c| {
                            c.id = format!("{prefix}/{}", c.id);
                            c
                        })
                        .collect();
                    let finish_reason = if calls.is_empty() {
                        "stop"
                    } else {
                        "tool_calls"
                    };
                    if let Payload::MessageCompleted(m) = payload {
                        m.text.clone_from(&text);
                        m.tool_calls = calls
                            .iter()
                            .map(|c| pb::ToolCall {
                                call_id: c.id.clone(),
                                tool: c.name.clone(),
                                arguments_json: c.arguments.to_string(),
                            })
                            .collect();
                        finish_reason.clone_into(&mut m.finish_reason);
                        // No model was called: the edit answered.
                        m.usage = Some(pb::Usage {
                            tool_calls: calls.len() as u64,
                            ..Default::default()
                        });
                    }
                    let turn = ModelTurn {
                        text,
                        calls,
                        finish_reason: finish_reason.to_owned(),
                        ..Default::default()
                    };
                    (
                        unit.to_owned(),
                        serde_json::to_vec(&turn).unwrap_or_default(),
                    )
                }),
            }
        }
        fork_edit::Edit::ToolResult(r) => Edit {
            kind: PointKind::ToolCall,
            field: "edit.tool_result",
            build: Box::new(move |unit, payload| {
                if let Payload::ToolCallCompleted(c) = payload {
                    c.policies.clear();
                    if r.is_error {
                        c.result.clear();
                        c.error.clone_from(&r.result);
                    } else {
                        c.error.clear();
                        c.result.clone_from(&r.result);
                    }
                }
                (
                    unit.to_owned(),
                    crate::agent::call_record(!r.is_error, r.result),
                )
            }),
        },
        fork_edit::Edit::Approval(a) => Edit {
            kind: PointKind::Approval,
            field: "edit.approval",
            build: Box::new(move |unit, payload| {
                if let Payload::ApprovalResolved(r) = payload {
                    r.approved = a.approved;
                    r.reason.clone_from(&a.reason);
                    r.source = pb::ApprovalSource::Fork as i32;
                }
                (
                    unit.to_owned(),
                    serde_json::to_vec(&(a.approved, a.reason)).unwrap_or_default(),
                )
            }),
        },
        fork_edit::Edit::Input(input) => Edit {
            kind: PointKind::Input,
            field: "edit.input",
            build: Box::new(move |unit, payload| {
                if let Payload::InputReceived(r) = payload {
                    r.input.clone_from(&input);
                }
                (unit.to_owned(), input.into_bytes())
            }),
        },
        fork_edit::Edit::StepOutput(output) => Edit {
            kind: PointKind::Step,
            field: "edit.step_output",
            build: Box::new(move |unit, payload| {
                // A failed attempt edited into a succeeded one.
                let (step_id, attempt) = match payload {
                    Payload::StepCompleted(s) => (s.step_id.clone(), s.attempt),
                    Payload::StepFailed(s) => (s.step_id.clone(), s.attempt),
                    _ => (String::new(), 1),
                };
                *payload = Payload::StepCompleted(pb::StepCompleted {
                    step_id,
                    attempt,
                    output: output.clone(),
                    duration: None,
                });
                let rest = unit
                    .strip_prefix("sf/")
                    .or_else(|| unit.strip_prefix("sc/"))
                    .unwrap_or(unit);
                (format!("sc/{rest}"), output.into_bytes())
            }),
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn journal(entries: &[(&str, &str)]) -> HashMap<String, Vec<u8>> {
        entries
            .iter()
            .map(|(k, v)| ((*k).to_owned(), v.as_bytes().to_vec()))
            .collect()
    }

    #[test]
    fn a_stored_recording_is_its_points_in_seq_order_span_ids_aside() {
        let recorded = stored_recording(
            "r",
            journal(&[
                ("#t/root/2", "9"),
                ("t/root/2", "two"),
                ("#t/root/1", "4"),
                ("t/root/1", "one"),
                ("sp/root.a.1", "00f067aa0ba902b7"),
            ]),
        )
        .expect("consistent");
        let units: Vec<(&str, u64)> = recorded.iter().map(|r| (&*r.unit, r.seq)).collect();
        assert_eq!(units, [("t/root/1", 4), ("t/root/2", 9)]);
    }

    #[test]
    fn a_point_without_its_seq_refuses_the_recording_instead_of_dropping_the_point() {
        let err = stored_recording(
            "r",
            journal(&[("#t/root/1", "4"), ("t/root/1", "one"), ("t/root/2", "two")]),
        )
        .expect_err("inconsistent");
        assert!(err.to_string().contains("\"t/root/2\""), "{err}");
    }
}
