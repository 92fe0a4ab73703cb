//! The `baton.v1` gRPC API, generated from `proto/baton/v1/*.proto`.
//!
//! These types stop at the edge of each service: each converts requests
//! into its domain values with `TryFrom` in one module (the orchestrator's
//! `wire`, the context store's `grpc`). What a service keeps in this form on
//! purpose — the orchestrator's events, which its run store holds and every
//! face sends — says so where it is.
//! [`FILE_DESCRIPTOR_SET`] is served for gRPC server reflection.

#![allow(
    missing_docs,
    clippy::large_enum_variant,
    clippy::doc_lazy_continuation
)]

pub mod codec;
pub mod json_value;
pub mod wkt;

/// Version 1 of the Baton API.
pub mod v1 {
    tonic::include_proto!("baton.v1");
    // serde following the proto3 JSON mapping (pbjson).
    include!(concat!(env!("OUT_DIR"), "/baton.v1.serde.rs"));
}

/// The Agent2Agent protocol, version 1.0 (`lf.a2a.v1`), generated from
/// `proto/lf/a2a/v1/a2a.proto`: the messages and the `A2AService` client
/// and server, with serde following the proto3 JSON mapping (the JSON-RPC
/// and HTTP+JSON bindings).
pub mod a2a {
    /// `lf.a2a.v1`.
    pub mod v1 {
        tonic::include_proto!("lf.a2a.v1");
        include!(concat!(env!("OUT_DIR"), "/lf.a2a.v1.serde.rs"));
    }
}

/// The encoded `FileDescriptorSet` of every `baton.v1` file, for reflection.
pub const FILE_DESCRIPTOR_SET: &[u8] = tonic::include_file_descriptor_set!("baton_descriptor");

/// The response header (gRPC trailer metadata, HTTP header) that names the
/// request field an error is about (`limits.max_depth`,
/// `entries[3].expected_version`): every service sets it and every client
/// reads it, so it is spelled here once.
pub const FIELD_HEADER: &str = "baton-field";

/// A gRPC status code's canonical name, as the gRPC spec and the docs write
/// it (`UNAVAILABLE`, `FAILED_PRECONDITION`): what users see in errors,
/// metrics labels and the CLI.
pub fn code_name(code: tonic::Code) -> &'static str {
    use tonic::Code as C;
    match code {
        C::Ok => "OK",
        C::Cancelled => "CANCELLED",
        C::Unknown => "UNKNOWN",
        C::InvalidArgument => "INVALID_ARGUMENT",
        C::DeadlineExceeded => "DEADLINE_EXCEEDED",
        C::NotFound => "NOT_FOUND",
        C::AlreadyExists => "ALREADY_EXISTS",
        C::PermissionDenied => "PERMISSION_DENIED",
        C::ResourceExhausted => "RESOURCE_EXHAUSTED",
        C::FailedPrecondition => "FAILED_PRECONDITION",
        C::Aborted => "ABORTED",
        C::OutOfRange => "OUT_OF_RANGE",
        C::Unimplemented => "UNIMPLEMENTED",
        C::Internal => "INTERNAL",
        C::Unavailable => "UNAVAILABLE",
        C::DataLoss => "DATA_LOSS",
        C::Unauthenticated => "UNAUTHENTICATED",
    }
}
