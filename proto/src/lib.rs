//! The `baton.v1` gRPC API, generated from `proto/baton/v1/*.proto`.
//!
//! These types stop at the edge of each service: domain code converts them
//! with `TryFrom` in one module per service and never sees `prost` types.
//! [`FILE_DESCRIPTOR_SET`] is served for gRPC server reflection.

#![allow(
    missing_docs,
    clippy::large_enum_variant,
    clippy::doc_lazy_continuation
)]

/// Version 1 of the Baton API.
pub mod v1 {
    tonic::include_proto!("baton.v1");
}

/// The encoded `FileDescriptorSet` of every `baton.v1` file, for reflection.
pub const FILE_DESCRIPTOR_SET: &[u8] = tonic::include_file_descriptor_set!("baton_descriptor");
