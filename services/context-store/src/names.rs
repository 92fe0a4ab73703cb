//! The names the service goes by, in one leaf module so that every other
//! module can use them without depending on the crate's entry points.

/// `service.name` of the spans unless configured otherwise.
pub const SERVICE_NAME: &str = "baton-context-store";

/// The gRPC service this crate serves: its spans' `rpc.service`, and the
/// name health reports readiness on (besides `""`).
pub const GRPC_SERVICE: &str = "baton.v1.ContextStore";
