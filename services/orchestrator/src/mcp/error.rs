//! The MCP face's errors, mapped to MCP in one place. A call of a tool
//! that is not served is a protocol error (`-32602`, invalid params);
//! everything else that goes wrong with a call — bad arguments, a run the
//! core refuses (quota, shutdown), a run that fails, is cancelled or asks
//! what the client cannot answer — is a tool result with `isError: true`,
//! so the model reads it: its text is `CODE: message`, and its `_meta`
//! has `code` (the gRPC code's name, as on every Baton face) and the run's
//! `runId` and `traceId` when there is a run.

use rmcp::{
    ErrorData,
    model::{CallToolResult, ContentBlock, MetaObject},
};
use serde_json::Value;
use tonic::Code;

/// What a call to the MCP face ran into.
#[derive(Debug, thiserror::Error)]
pub enum McpError {
    /// No agent of that name is served.
    #[error("no tool {0:?} here (tools/list lists the agents this server serves)")]
    UnknownTool(String),
    /// The request carries no caller (it did not come through `/mcp`).
    #[error("the request has no caller")]
    NoCaller,
    /// The arguments are not `{input, context}`.
    #[error("{field}: {message}")]
    Arguments {
        /// The argument.
        field: &'static str,
        /// What is wrong.
        message: String,
    },
    /// A parameter of the request other than the arguments is wrong (the
    /// `requestState` or `inputResponses` of a retry).
    #[error("{field}: {message}")]
    Params {
        /// The parameter (`requestState`, `inputResponses["key"]`).
        field: String,
        /// What is wrong.
        message: String,
    },
    /// The core refused the call.
    #[error(transparent)]
    Core(#[from] crate::error::Error),
}

impl McpError {
    /// A bad argument.
    pub fn argument(field: &'static str, message: impl Into<String>) -> Self {
        Self::Arguments {
            field,
            message: message.into(),
        }
    }

    /// A bad parameter of the request.
    pub fn params(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self::Params {
            field: field.into(),
            message: message.into(),
        }
    }

    /// The call's answer: a protocol error, or a tool result that says what
    /// went wrong.
    pub fn into_result(self) -> Result<CallToolResult, ErrorData> {
        match self {
            Self::UnknownTool(_) | Self::Params { .. } => {
                Err(ErrorData::invalid_params(self.to_string(), None))
            }
            Self::NoCaller => Err(ErrorData::internal_error(self.to_string(), None)),
            Self::Arguments { field, message } => Ok(tool_error(
                Code::InvalidArgument,
                &format!("arguments.{field}: {message}"),
                None,
            )),
            Self::Core(e) => Ok(tool_error(e.code(), &e.message(), None)),
        }
    }
}

/// The ids of a run, for a result's `_meta`.
pub struct RunIds<'a> {
    /// The run.
    pub run_id: &'a str,
    /// Its trace.
    pub trace_id: &'a str,
}

/// A result's `_meta`: the run's ids (and the code of an error).
pub fn meta(ids: Option<&RunIds<'_>>, code: Option<Code>) -> Option<MetaObject> {
    let mut meta = MetaObject::new();
    if let Some(ids) = ids {
        meta.insert("runId".into(), Value::String(ids.run_id.to_owned()));
        meta.insert("traceId".into(), Value::String(ids.trace_id.to_owned()));
    }
    if let Some(code) = code {
        meta.insert(
            "code".into(),
            Value::String(baton_proto::code_name(code).to_owned()),
        );
    }
    (!meta.is_empty()).then_some(meta)
}

/// A tool result with `isError: true`: `CODE: message`, with the code (and
/// the run's ids) in `_meta`.
pub fn tool_error(code: Code, message: &str, ids: Option<&RunIds<'_>>) -> CallToolResult {
    let text = format!("{}: {message}", baton_proto::code_name(code));
    let mut result = CallToolResult::error(vec![ContentBlock::text(text)]);
    result.meta = meta(ids, Some(code));
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unknown_tool_is_a_protocol_error_and_the_rest_are_tool_errors_with_their_code() {
        let e = McpError::UnknownTool("nope".into()).into_result();
        assert_eq!(e.expect_err("protocol error").code.0, -32602);
        let bad = McpError::argument("input", "must be a string")
            .into_result()
            .expect("a tool result");
        assert_eq!(bad.is_error, Some(true));
        let wire = serde_json::to_value(&bad).expect("json");
        assert_eq!(wire["_meta"]["code"], "INVALID_ARGUMENT");
        assert_eq!(
            wire["content"][0]["text"],
            "INVALID_ARGUMENT: arguments.input: must be a string"
        );
        let quota = McpError::from(crate::error::Error::Exhausted {
            field: "tenant".into(),
            message: "too many runs".into(),
        })
        .into_result()
        .expect("a tool result");
        let wire = serde_json::to_value(&quota).expect("json");
        assert_eq!(wire["_meta"]["code"], "RESOURCE_EXHAUSTED");
    }
}
