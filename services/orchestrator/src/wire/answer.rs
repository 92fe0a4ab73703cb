//! What the core answers, into `baton.v1` messages: a run (GetRun), a page
//! of runs (ListRuns), the agents (ListAgents); and back, for the answers
//! of peers a forwarded call brings.

use std::time::SystemTime;

use baton_proto::v1 as pb;

use crate::{
    catalog::Catalog,
    run::view::{Origin, RunPage, RunView},
};

impl From<RunView> for pb::GetRunResponse {
    fn from(r: RunView) -> Self {
        Self {
            run_id: r.run_id,
            trace_id: r.trace_id,
            kind: r.kind as i32,
            target: r.target,
            status: r.status as i32,
            started_at: Some(r.started_at.into()),
            ended_at: r.ended_at.map(Into::into),
            output: r.output,
            run_context_json: r.run_context_json,
            usage: Some(r.usage),
            error_code: r.error_code,
            error_message: r.error_message,
            last_seq: r.last_seq,
            waiting_for: r.waiting_for.iter().map(|w| (*w).to_owned()).collect(),
            forked_from: r.forked_from.as_ref().map(Origin::to_pb),
            history_gone: r.history_gone,
            replay_of: r.replay_of.clone().unwrap_or_default(),
            replay_diverged: r.replay_diverged,
            conversation_id: r.conversation_id,
            experiment_id: r.experiment.unwrap_or_default(),
            schedule_tick_at: r
                .schedule
                .as_ref()
                .map(|(_, t)| crate::schedule::spec::timestamp(*t)),
            schedule_id: r.schedule.map(|(s, _)| s).unwrap_or_default(),
            scores: r.scores,
        }
    }
}

impl From<pb::GetRunResponse> for RunView {
    fn from(r: pb::GetRunResponse) -> Self {
        Self {
            kind: pb::RunKind::try_from(r.kind).unwrap_or_default(),
            status: pb::RunStatus::try_from(r.status).unwrap_or_default(),
            started_at: time(r.started_at).unwrap_or(SystemTime::UNIX_EPOCH),
            ended_at: time(r.ended_at),
            usage: r.usage.unwrap_or_default(),
            run_id: r.run_id,
            trace_id: r.trace_id,
            target: r.target,
            output: r.output,
            run_context_json: r.run_context_json,
            error_code: r.error_code,
            error_message: r.error_message,
            last_seq: r.last_seq,
            // GetRun does not say; it matters to ListRuns only.
            detached: false,
            waiting_for: crate::run::view::waiting_for(
                r.waiting_for.iter().any(|w| w == "approval"),
                r.waiting_for.iter().any(|w| w == "input"),
            ),
            forked_from: r.forked_from.map(|o| Origin {
                run_id: o.run_id,
                seq: o.seq,
                edited: o.edited,
            }),
            history_gone: r.history_gone,
            replay_of: Some(r.replay_of).filter(|r| !r.is_empty()),
            experiment: Some(r.experiment_id).filter(|r| !r.is_empty()),
            schedule: Some(r.schedule_id).filter(|r| !r.is_empty()).map(|s| {
                (
                    s,
                    r.schedule_tick_at
                        .as_ref()
                        .map_or(0, crate::schedule::spec::ms),
                )
            }),
            scores: r.scores,
            replay_diverged: r.replay_diverged,
            conversation_id: r.conversation_id,
        }
    }
}

fn time(t: Option<baton_proto::wkt::Timestamp>) -> Option<SystemTime> {
    t.and_then(|t| SystemTime::try_from(t).ok())
}

impl From<RunView> for pb::RunSummary {
    fn from(r: RunView) -> Self {
        Self {
            run_id: r.run_id,
            trace_id: r.trace_id,
            kind: r.kind as i32,
            target: r.target,
            status: r.status as i32,
            started_at: Some(r.started_at.into()),
            ended_at: r.ended_at.map(Into::into),
            last_seq: r.last_seq,
            detached: r.detached,
            waiting_for: r.waiting_for.iter().map(|w| (*w).to_owned()).collect(),
            forked_from: r.forked_from.as_ref().map(Origin::to_pb),
            history_gone: r.history_gone,
            replay_of: r.replay_of.clone().unwrap_or_default(),
            replay_diverged: r.replay_diverged,
            usage: Some(r.usage),
            conversation_id: r.conversation_id,
            scores: r.scores,
        }
    }
}

impl From<RunPage> for pb::ListRunsResponse {
    fn from(page: RunPage) -> Self {
        Self {
            runs: page.runs.into_iter().map(Into::into).collect(),
            next_page_token: page.next_page_token,
        }
    }
}

/// A page of a trace's slots as the context store's `List` answers it.
pub fn listing(l: baton_store::Listing) -> pb::ListResponse {
    pb::ListResponse {
        next_page_token: l.next_after.unwrap_or_default(),
        used_bytes: l.used_bytes,
        used_keys: l.used_keys,
        slots: l
            .slots
            .into_iter()
            .map(|s| pb::SlotInfo {
                key: s.key,
                content_type: s.content_type,
                version: s.version,
                size_bytes: s.size_bytes,
                expires_at: ms_time(s.expires_at_ms),
            })
            .collect(),
    }
}

/// A change of a slot as the context store's `Watch` sends it.
pub fn change(c: baton_store::Change) -> pb::WatchResponse {
    use baton_store::ChangeKind as K;
    let kind = match c.kind {
        K::Put => pb::SlotChangeKind::Put,
        K::Deleted => pb::SlotChangeKind::Deleted,
        K::Expired => pb::SlotChangeKind::Expired,
        K::Cleared => pb::SlotChangeKind::Cleared,
    };
    pb::WatchResponse {
        kind: kind as i32,
        key: c.key,
        version: c.version,
        size_bytes: c.size_bytes,
        content_type: c.content_type,
        expires_at: ms_time(c.expires_at_ms),
    }
}

/// A time in Unix ms (0: none).
fn ms_time(ms: u64) -> Option<baton_proto::wkt::Timestamp> {
    (ms > 0).then(|| (std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms)).into())
}

/// What ListAgents answers: the catalog's agents and groups.
pub fn agents(catalog: &Catalog) -> pb::ListAgentsResponse {
    let agents = catalog
        .agents
        .values()
        .map(|a| pb::AgentInfo {
            name: a.name.clone(),
            description: a.spec.description.clone(),
            model: a.spec.model.clone(),
            tools: a.spec.tools.clone(),
            handoffs: a.spec.handoffs.clone(),
        })
        .collect();
    let groups = catalog
        .groups
        .iter()
        .map(|(name, g)| pb::AgentGroupInfo {
            name: name.clone(),
            description: g.description.clone(),
            root: g.root.clone(),
            members: g.members.clone(),
        })
        .collect();
    pb::ListAgentsResponse { agents, groups }
}
