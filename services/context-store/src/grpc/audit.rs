//! The audit record of each write RPC (Put, PutMany, Delete, DeleteMany,
//! Clear): who wrote which trace, with what outcome (see
//! `baton_common::audit`).

use baton_common::auth::tenant_of;
use baton_store::key::parse_trace_id;
use tonic::{Request, Status};

/// The audit record of a write RPC: its tenant and (well-formed) trace id,
/// written with the call's outcome.
pub(super) struct Audit {
    rpc: &'static str,
    tenant: String,
    trace_id: String,
}

impl Audit {
    /// The record of `rpc` called with `request` on `trace_id`.
    pub(super) fn of<T>(rpc: &'static str, request: &Request<T>, trace_id: &str) -> Self {
        Self {
            rpc,
            tenant: tenant_of(request.extensions()).to_owned(),
            // Only a well-formed id is recorded (the field may be anything).
            trace_id: parse_trace_id(trace_id)
                .map(|t| t.to_string())
                .unwrap_or_default(),
        }
    }

    /// Writes the record with the call's `outcome`, and returns it.
    pub(super) fn done<T>(self, outcome: Result<T, Status>) -> Result<T, Status> {
        baton_common::audit::record(
            self.rpc,
            &self.tenant,
            "",
            &self.trace_id,
            baton_common::audit::code(&outcome),
        );
        outcome
    }
}
