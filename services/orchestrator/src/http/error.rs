//! The core's [`Error`] as an HTTP answer, in one place: the HTTP status
//! grpc-gateway uses for its code, and a JSON body `{code, message, field}`
//! (`field` only when the error names one; also in the `baton-field`
//! header).

use axum::{
    body::Body,
    http::{HeaderValue, StatusCode, header},
    response::{IntoResponse, Response},
};
use tonic::Code;

use crate::error::Error;

/// An error answer of the HTTP face.
#[derive(Debug)]
pub struct HttpError {
    code: Code,
    message: String,
    field: Option<String>,
}

impl HttpError {
    /// An error of `code` about `field`.
    pub fn new(code: Code, message: impl Into<String>, field: Option<String>) -> Self {
        Self {
            code,
            message: message.into(),
            field,
        }
    }

    /// `INVALID_ARGUMENT` about `field`; the message starts with the field,
    /// as every other one does.
    pub fn invalid(field: &str, why: impl std::fmt::Display) -> Self {
        Self::new(
            Code::InvalidArgument,
            format!("{field}: {why}"),
            Some(field.to_owned()),
        )
    }
}

impl HttpError {
    /// Its gRPC code.
    pub fn code(&self) -> Code {
        self.code
    }

    /// What a person reads.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The field it is about.
    pub fn field(&self) -> Option<&str> {
        self.field.as_deref()
    }
}

impl From<Error> for HttpError {
    fn from(e: Error) -> Self {
        Self {
            code: e.code(),
            field: e.field().map(str::to_owned),
            message: e.message(),
        }
    }
}

/// The HTTP status grpc-gateway answers a gRPC code with.
pub fn http_status(code: Code) -> StatusCode {
    match code {
        Code::Ok => StatusCode::OK,
        Code::Cancelled => StatusCode::from_u16(499).unwrap_or(StatusCode::BAD_REQUEST),
        Code::Unknown | Code::Internal | Code::DataLoss => StatusCode::INTERNAL_SERVER_ERROR,
        Code::InvalidArgument | Code::FailedPrecondition | Code::OutOfRange => {
            StatusCode::BAD_REQUEST
        }
        Code::DeadlineExceeded => StatusCode::GATEWAY_TIMEOUT,
        Code::NotFound => StatusCode::NOT_FOUND,
        Code::AlreadyExists | Code::Aborted => StatusCode::CONFLICT,
        Code::PermissionDenied => StatusCode::FORBIDDEN,
        Code::Unauthenticated => StatusCode::UNAUTHORIZED,
        Code::ResourceExhausted => StatusCode::TOO_MANY_REQUESTS,
        Code::Unimplemented => StatusCode::NOT_IMPLEMENTED,
        Code::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
    }
}

impl IntoResponse for HttpError {
    fn into_response(self) -> Response {
        let mut body = serde_json::json!({
            "code": baton_proto::code_name(self.code),
            "message": self.message,
        });
        if let Some(field) = &self.field {
            body["field"] = serde_json::Value::String(field.clone());
        }
        let mut response = Response::new(Body::from(body.to_string()));
        *response.status_mut() = http_status(self.code);
        let headers = response.headers_mut();
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        if let Some(value) = self
            .field
            .as_deref()
            .and_then(|f| HeaderValue::from_str(f).ok())
        {
            headers.insert(baton_proto::FIELD_HEADER, value);
        }
        response
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_map_as_grpc_gateway_maps_them() {
        for (code, status) in [
            (Code::InvalidArgument, 400),
            (Code::FailedPrecondition, 400),
            (Code::NotFound, 404),
            (Code::Unauthenticated, 401),
            (Code::ResourceExhausted, 429),
            (Code::Aborted, 409),
            (Code::Unavailable, 503),
            (Code::Internal, 500),
            (Code::Cancelled, 499),
        ] {
            assert_eq!(http_status(code).as_u16(), status, "{code:?}");
        }
    }
}
