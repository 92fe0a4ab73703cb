//! `baton.v1` messages to domain values and back, once for every face:
//! the gRPC face uses them as they are, the HTTP face after reading the
//! same messages from their JSON mapping, and the core for the request a
//! durable run keeps ([`crate::request::StoredRequest`]).
//!
//! - [`request`]: requests into [`crate::request`] values with `TryFrom`;
//!   a malformed field is `INVALID_ARGUMENT` naming it.
//! - [`answer`]: what the core answers (runs, pages, agents) into messages.
//!
//! What the core and the run store keep in the wire form on purpose —
//! events (`RunEvent` and its payloads), `RunStatus`, `RunKind`, `Usage`,
//! `ApprovalMode`, a pipeline's `PipelineSpec` — passes through as it is.

pub mod answer;
pub mod request;

/// An optional duration field: `None` when unset; a negative or malformed
/// one is `INVALID_ARGUMENT` naming `field`.
pub fn duration(
    field: &'static str,
    v: Option<baton_proto::wkt::Duration>,
) -> crate::error::Result<Option<std::time::Duration>> {
    let Some(v) = v else { return Ok(None) };
    if v.seconds < 0 || v.nanos < 0 || v.nanos >= 1_000_000_000 {
        return Err(crate::error::Error::invalid(
            field,
            "must be a duration of at least zero",
        ));
    }
    Ok(Some(std::time::Duration::new(
        v.seconds as u64,
        v.nanos as u32,
    )))
}
