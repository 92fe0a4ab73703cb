//! The names of the built-in tools: the one list the agents file is checked
//! against and the toolbox (`crate::tools::builtin`) is built from. A leaf
//! of the catalog, below the tools that run them.

/// `read_context`: a slot of the run's trace.
pub const READ_CONTEXT: &str = "read_context";
/// `write_context`: writes a slot of the run's trace.
pub const WRITE_CONTEXT: &str = "write_context";
/// `list_context`: a page of the run's trace's slots.
pub const LIST_CONTEXT: &str = "list_context";
/// `ask_user`: asks a person.
pub const ASK_USER: &str = "ask_user";
/// `sleep`: waits, with progress.
pub const SLEEP: &str = "sleep";
/// `run_pipeline`: runs a pipeline in the caller's child context (run by
/// the runtime, not the toolbox).
pub const RUN_PIPELINE: &str = "run_pipeline";

/// Every built-in tool an agent may list.
pub const TOOLS: [&str; 6] = [
    READ_CONTEXT,
    WRITE_CONTEXT,
    LIST_CONTEXT,
    ASK_USER,
    SLEEP,
    RUN_PIPELINE,
];
