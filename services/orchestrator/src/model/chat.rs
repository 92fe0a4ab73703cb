//! The conversation a model reads: messages, who wrote them, the tool calls
//! a model asks for and the tools it is offered. Plain data, shared by every
//! provider and by the turn loop.

use serde_json::Value;

/// Who wrote a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Instructions.
    System,
    /// The person, or the delegating agent.
    User,
    /// The model.
    Assistant,
    /// A tool's result.
    Tool,
}

/// One tool call a model asked for.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ToolCallRequest {
    /// Unique within the run.
    pub id: String,
    /// The tool.
    pub name: String,
    /// The arguments (a JSON object).
    pub arguments: Value,
}

/// A conversation message.
#[derive(Debug, Clone, PartialEq)]
pub struct ChatMessage {
    /// Who wrote it.
    pub role: Role,
    /// Its text.
    pub content: String,
    /// For assistant messages: the calls it asked for.
    pub tool_calls: Vec<ToolCallRequest>,
    /// For tool messages: the call answered.
    pub tool_call_id: Option<String>,
}

impl ChatMessage {
    /// A plain message.
    pub fn new(role: Role, content: impl Into<String>) -> Self {
        Self {
            role,
            content: content.into(),
            tool_calls: Vec::new(),
            tool_call_id: None,
        }
    }
}

/// A tool as the model sees it.
#[derive(Debug, Clone)]
pub struct ToolDef {
    /// Its name.
    pub name: String,
    /// What it does.
    pub description: String,
    /// JSON Schema of its arguments.
    pub parameters: Value,
}
