//! Domain values into answers: what GetRun, ListRuns and ListAgents send
//! back (the other half of `convert`, which turns requests into domain
//! values).

use baton_proto::v1 as pb;

use crate::{catalog::Catalog, run::record::RunRecord};

/// A ListRuns page of this replica's runs.
pub(super) fn runs_page(runs: &[std::sync::Arc<RunRecord>], more: bool) -> pb::ListRunsResponse {
    let next_page_token = match runs.last() {
        Some(last) if more => runs_page_token(last),
        _ => String::new(),
    };
    pb::ListRunsResponse {
        runs: runs.iter().map(|r| run_summary(r)).collect(),
        next_page_token,
    }
}

/// The token of the page after the one ending with `last`.
pub(super) fn runs_page_token(last: &RunRecord) -> String {
    format!("v1.{}", last.run_id)
}

/// How ListRuns shows a run.
pub(super) fn run_summary(run: &RunRecord) -> pb::RunSummary {
    let s = run.state();
    pb::RunSummary {
        run_id: run.run_id.clone(),
        trace_id: run.trace_id.to_string(),
        kind: run.kind as i32,
        target: run.target.clone(),
        status: s.status as i32,
        started_at: Some(run.started_at.into()),
        ended_at: s.ended_at.map(Into::into),
        last_seq: s.last_seq,
        detached: run.detached,
    }
}

/// What GetRun answers about `run`.
pub(super) fn get_run_response(run: &RunRecord) -> pb::GetRunResponse {
    let s = run.state();
    pb::GetRunResponse {
        run_id: run.run_id.clone(),
        trace_id: run.trace_id.to_string(),
        kind: run.kind as i32,
        target: run.target.clone(),
        status: s.status as i32,
        started_at: Some(run.started_at.into()),
        ended_at: s.ended_at.map(Into::into),
        output: s.output,
        run_context_json: s.run_context_json,
        usage: Some(s.usage),
        error_code: s.error_code,
        error_message: s.error_message,
        last_seq: s.last_seq,
    }
}

/// What ListAgents answers: the catalog's agents and groups.
pub(super) fn list_agents_response(catalog: &Catalog) -> pb::ListAgentsResponse {
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
