//! The names the A2A face goes by: the version it speaks, its header, the
//! URI of Baton's extension, the labels it puts on runs, its artifact.

/// The A2A version this face speaks (`A2A-Version`).
pub const VERSION: &str = "1.0";

/// The header (and query parameter) that carries the version.
pub const VERSION_HEADER: &str = "a2a-version";

/// The URI of Baton's A2A extension: nested-context detail on every
/// update (see `task`).
pub const EXTENSION: &str = "https://baton.dev/a2a/extensions/context/v1";

/// The URI of the extended card's extension: the caller's tenant and what
/// it may do (see `card::extended`).
pub const TENANT_EXTENSION: &str = "https://baton.dev/a2a/extensions/tenant/v1";

/// The id of the artifact that holds a completed task's output.
pub const OUTPUT_ARTIFACT: &str = "output";

/// The label of a run that keeps the caller's context id, when it is not
/// the run's trace id.
pub const CONTEXT_LABEL: &str = "a2a.context_id";

/// The label of a run of an agent in A2A messages mode (`a2a_io:
/// message`): its input, answers and output are A2A messages as JSON.
pub const IO_LABEL: &str = "a2a.io";
