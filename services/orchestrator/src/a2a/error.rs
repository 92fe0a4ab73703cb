//! The A2A face's errors, and their form in each binding, in one place: the
//! spec's table (A2A §5.4) for its own errors — JSON-RPC code, gRPC status
//! with a `google.rpc.ErrorInfo` (`domain` `a2a-protocol.org`, `reason` the
//! error's name), HTTP status with a `google.rpc.Status` JSON body — and the
//! core's errors by their gRPC code, with a `google.rpc.BadRequest` naming
//! the field when one is wrong.

use axum::{
    http::{HeaderValue, StatusCode, header},
    response::Response,
};
use serde_json::{Value, json};
use tonic::Code;

use crate::error::Error;

/// The `domain` of the `ErrorInfo` of A2A's own errors.
pub const DOMAIN: &str = "a2a-protocol.org";

/// An error of the A2A face. (`ExtendedAgentCardNotConfiguredError` is
/// never answered: the cards declare no extended card, so
/// `GetExtendedAgentCard` is `UnsupportedOperationError`.)
#[derive(Debug)]
pub enum A2aError {
    /// `TaskNotFoundError`: no task of this id the caller may see.
    TaskNotFound(String),
    /// `TaskNotCancelableError`: the task has ended.
    NotCancelable(String),
    /// `PushNotificationNotSupportedError`.
    PushNotSupported,
    /// `UnsupportedOperationError`, with why.
    Unsupported(String),
    /// `ContentTypeNotSupportedError` about a field.
    ContentType {
        /// The field (`message.parts[1]`).
        field: String,
        /// Why.
        message: String,
    },
    /// `VersionNotSupportedError`, with the version asked for.
    Version(String),
    /// A malformed request: invalid params (JSON-RPC `-32602`), naming the
    /// field.
    Invalid {
        /// The field, in the JSON form's names (`message.parts`).
        field: String,
        /// Why.
        message: String,
    },
    /// No such A2A agent here.
    NoAgent(String),
    /// Any other refusal, by its gRPC code (authentication, quota,
    /// shutdown, a run's refusal by the core).
    Other {
        /// The code.
        code: Code,
        /// Why.
        message: String,
        /// The field it is about.
        field: Option<String>,
    },
}

impl From<Error> for A2aError {
    fn from(e: Error) -> Self {
        match e {
            Error::NotFound {
                field: "run_id", ..
            } => A2aError::TaskNotFound(e.message()),
            Error::InvalidArgument { .. } => A2aError::Invalid {
                field: e.field().unwrap_or_default().to_owned(),
                message: e.message(),
            },
            e => A2aError::Other {
                code: e.code(),
                message: e.message(),
                field: e.field().map(str::to_owned),
            },
        }
    }
}

impl From<crate::http::error::HttpError> for A2aError {
    fn from(e: crate::http::error::HttpError) -> Self {
        A2aError::Other {
            code: e.code(),
            message: e.message().to_owned(),
            field: e.field().map(str::to_owned),
        }
    }
}

impl A2aError {
    /// An invalid `field`; the message starts with it.
    pub fn invalid(field: &str, why: impl std::fmt::Display) -> Self {
        A2aError::Invalid {
            field: field.to_owned(),
            message: format!("{field}: {why}"),
        }
    }

    /// The same error about a field within `parent`
    /// (`configuration.taskPushNotificationConfig.url`).
    pub fn within(self, parent: &str) -> Self {
        match self {
            A2aError::Invalid { field, message } => {
                let whole = format!("{parent}.{field}");
                A2aError::Invalid {
                    message: message.replacen(&format!("{field}:"), &format!("{whole}:"), 1),
                    field: whole,
                }
            }
            other => other,
        }
    }

    /// The A2A error's name in the `ErrorInfo.reason` form (`TASK_NOT_FOUND`),
    /// for A2A's own errors.
    pub fn reason(&self) -> Option<&'static str> {
        Some(match self {
            A2aError::TaskNotFound(_) => "TASK_NOT_FOUND",
            A2aError::NotCancelable(_) => "TASK_NOT_CANCELABLE",
            A2aError::PushNotSupported => "PUSH_NOTIFICATION_NOT_SUPPORTED",
            A2aError::Unsupported(_) => "UNSUPPORTED_OPERATION",
            A2aError::ContentType { .. } => "CONTENT_TYPE_NOT_SUPPORTED",
            A2aError::Version(_) => "VERSION_NOT_SUPPORTED",
            A2aError::Invalid { .. } | A2aError::NoAgent(_) | A2aError::Other { .. } => {
                return None;
            }
        })
    }

    /// The gRPC code (A2A §5.4).
    pub fn code(&self) -> Code {
        match self {
            A2aError::TaskNotFound(_) | A2aError::NoAgent(_) => Code::NotFound,
            A2aError::NotCancelable(_)
            | A2aError::PushNotSupported
            | A2aError::Unsupported(_)
            | A2aError::Version(_) => Code::FailedPrecondition,
            A2aError::ContentType { .. } | A2aError::Invalid { .. } => Code::InvalidArgument,
            A2aError::Other { code, .. } => *code,
        }
    }

    /// The JSON-RPC error code (A2A §5.4, JSON-RPC 2.0 §5.1).
    pub fn jsonrpc_code(&self) -> i64 {
        match self {
            A2aError::TaskNotFound(_) => -32001,
            A2aError::NotCancelable(_) => -32002,
            A2aError::PushNotSupported => -32003,
            A2aError::Unsupported(_) => -32004,
            A2aError::ContentType { .. } => -32005,
            A2aError::Version(_) => -32009,
            A2aError::Invalid { .. } => -32602,
            A2aError::NoAgent(_) => -32601,
            A2aError::Other { code, .. } => match code {
                Code::InvalidArgument => -32602,
                Code::NotFound => -32001,
                // Server errors of the implementation-defined range.
                Code::Unauthenticated => -32010,
                Code::PermissionDenied => -32011,
                Code::ResourceExhausted => -32012,
                Code::Unavailable => -32013,
                Code::FailedPrecondition => -32004,
                _ => -32603,
            },
        }
    }

    /// The HTTP status of the HTTP+JSON binding (and of a JSON-RPC answer
    /// refused before JSON-RPC: authentication).
    pub fn http_status(&self) -> StatusCode {
        match self {
            A2aError::NotCancelable(_)
            | A2aError::PushNotSupported
            | A2aError::Unsupported(_)
            | A2aError::ContentType { .. }
            | A2aError::Version(_)
            | A2aError::Invalid { .. } => StatusCode::BAD_REQUEST,
            A2aError::TaskNotFound(_) | A2aError::NoAgent(_) => StatusCode::NOT_FOUND,
            A2aError::Other { code, .. } => crate::http::error::http_status(*code),
        }
    }

    /// What a person reads.
    pub fn message(&self) -> String {
        match self {
            A2aError::TaskNotFound(m)
            | A2aError::NotCancelable(m)
            | A2aError::Unsupported(m)
            | A2aError::NoAgent(m) => m.clone(),
            A2aError::PushNotSupported => {
                "push notifications are not supported by this agent (its card says pushNotifications: false)"
                    .into()
            }
            A2aError::ContentType { message, .. } | A2aError::Invalid { message, .. } => {
                message.clone()
            }
            A2aError::Version(asked) => version_message(asked),
            A2aError::Other { message, .. } => message.clone(),
        }
    }

    /// The field the error is about, if any.
    pub fn field(&self) -> Option<&str> {
        match self {
            A2aError::ContentType { field, .. } | A2aError::Invalid { field, .. } => {
                Some(field.as_str())
            }
            A2aError::Other { field, .. } => field.as_deref(),
            _ => None,
        }
    }

    /// The details, in the ProtoJSON `Any` form: an `ErrorInfo` for A2A's
    /// own errors, a `BadRequest` naming the field for invalid ones.
    pub fn details_json(&self) -> Vec<Value> {
        let mut details = Vec::new();
        if let Some(reason) = self.reason() {
            details.push(json!({
                "@type": "type.googleapis.com/google.rpc.ErrorInfo",
                "reason": reason,
                "domain": DOMAIN,
            }));
        }
        if let Some(field) = self.field() {
            details.push(json!({
                "@type": "type.googleapis.com/google.rpc.BadRequest",
                "fieldViolations": [{"field": field, "description": self.message()}],
            }));
        }
        details
    }

    /// The gRPC binding's code: [`Self::code`], but `UNIMPLEMENTED` for
    /// push notifications and versions this server does not speak, as the
    /// A2A 1.0.0 table says and A2A clients and the A2A test kit expect
    /// (A2A 1.0.1 moved both to `FAILED_PRECONDITION`; the ErrorInfo
    /// reason tells them apart either way).
    pub fn grpc_code(&self) -> Code {
        match self {
            A2aError::PushNotSupported | A2aError::Version(_) => Code::Unimplemented,
            _ => self.code(),
        }
    }

    /// The gRPC binding's status: the code, the message, and the details in
    /// `grpc-status-details-bin`.
    pub fn status(&self) -> tonic::Status {
        use tonic_types::{ErrorDetails, StatusExt as _};
        let mut details = ErrorDetails::new();
        if let Some(reason) = self.reason() {
            details.set_error_info(reason, DOMAIN, std::collections::HashMap::new());
        }
        if let Some(field) = self.field() {
            details.add_bad_request_violation(field, self.message());
        }
        let mut status =
            tonic::Status::with_error_details(self.grpc_code(), self.message(), details);
        if let Some(v) = self
            .field()
            .and_then(|f| tonic::metadata::MetadataValue::try_from(f).ok())
        {
            status.metadata_mut().insert(baton_proto::FIELD_HEADER, v);
        }
        status
    }

    /// The HTTP+JSON binding's answer: `{"error": google.rpc.Status}`.
    pub fn rest_response(&self) -> Response {
        let status = self.http_status();
        let body = json!({"error": {
            "code": status.as_u16(),
            "status": baton_proto::code_name(self.code()),
            "message": self.message(),
            "details": self.details_json(),
        }});
        let mut response = super::json::json_response(&body, status);
        if matches!(self.code(), Code::Unauthenticated) {
            response
                .headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        response
    }

    /// The JSON-RPC error object.
    pub fn jsonrpc_error(&self) -> Value {
        json!({
            "code": self.jsonrpc_code(),
            "message": self.message(),
            "data": self.details_json(),
        })
    }
}

/// A request whose `Content-Type` is not JSON: `ContentTypeNotSupportedError`
/// naming the header (no `Content-Type` at all is taken as JSON).
pub fn unsupported_media_type(headers: &axum::http::HeaderMap) -> Option<A2aError> {
    let value = headers.get(axum::http::header::CONTENT_TYPE)?;
    let text = value.to_str().unwrap_or_default();
    let essence = text.split(';').next().unwrap_or_default().trim();
    let json = essence.eq_ignore_ascii_case("application/json")
        || (essence.starts_with("application/") && essence.ends_with("+json"));
    (!json).then(|| A2aError::ContentType {
        field: "Content-Type".into(),
        message: format!(
            "Content-Type: {text:?} is not supported; send application/json (or application/a2a+json)"
        ),
    })
}

/// A JSON value or body that is not the message it should be: invalid
/// params naming the field (`message.parts[0]`), or `whole` for the value
/// itself.
pub fn invalid_json(e: serde_path_to_error::Error<serde_json::Error>, whole: &str) -> A2aError {
    let path = e.path().to_string();
    let field = if path == "." || path.is_empty() {
        whole.to_owned()
    } else {
        path
    };
    A2aError::invalid(&field, e.inner())
}

/// The HTTP+JSON answer to a body that is not JSON: 415.
pub fn unsupported_media_type_response(e: &A2aError) -> Response {
    let mut response = e.rest_response();
    *response.status_mut() = StatusCode::UNSUPPORTED_MEDIA_TYPE;
    response
}

fn version_message(asked: &str) -> String {
    let asked = if asked.is_empty() {
        "none, which means 0.3 (A2A §3.6.2)".to_owned()
    } else {
        format!("\"{asked}\"")
    };
    format!(
        "A2A-Version: {asked} is not supported; this agent speaks A2A {} (send the header `A2A-Version: {}`)",
        super::names::VERSION,
        super::names::VERSION
    )
}
