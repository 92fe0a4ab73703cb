//! The audit log: one structured line per call that starts, answers or
//! cancels a run or writes the store — who (tenant), what (rpc), on what
//! (run id, trace id) and how it ended (outcome: `OK` or the gRPC code) —
//! under its own target, [`TARGET`], which the logger writes as JSON to its
//! own destination (`log.audit`), whatever the log level, so it can be
//! shipped and kept apart from the other lines.

/// The `tracing` target of audit lines.
pub const TARGET: &str = "baton::audit";

/// Records one audited call.
pub fn record(rpc: &'static str, tenant: &str, run_id: &str, trace_id: &str, outcome: tonic::Code) {
    let outcome = if outcome == tonic::Code::Ok {
        "OK".to_owned()
    } else {
        format!("{outcome:?}")
    };
    tracing::info!(
        target: TARGET,
        rpc,
        tenant,
        run_id,
        trace_id,
        outcome = outcome.as_str(),
        "audit"
    );
}

/// The outcome of a call's result.
pub fn code<T>(result: &Result<T, tonic::Status>) -> tonic::Code {
    match result {
        Ok(_) => tonic::Code::Ok,
        Err(s) => s.code(),
    }
}
