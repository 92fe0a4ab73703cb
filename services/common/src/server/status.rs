//! Statuses that tonic makes before a handler runs, made to tell the client
//! whether to retry ([`StatusLayer`]): an undecodable message is
//! `INVALID_ARGUMENT`, one over the size limit `RESOURCE_EXHAUSTED`, both
//! naming the field `request`; a method the port does not serve is
//! `UNIMPLEMENTED` saying what it serves.

use std::{
    future::Future,
    pin::Pin,
    sync::Arc,
    task::{Context, Poll},
};

/// Rewrites the statuses tonic answers before a handler runs, so their code
/// tells the client whether retrying can help (see the module docs).
#[derive(Clone)]
pub struct StatusLayer {
    served: Arc<str>,
}

impl StatusLayer {
    /// For a port serving `service_name`.
    pub fn new(service_name: &str) -> Self {
        Self {
            served: Arc::from(service_name),
        }
    }
}

impl<S> tower_layer::Layer<S> for StatusLayer {
    type Service = StatusService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        StatusService {
            inner,
            served: self.served.clone(),
        }
    }
}

/// The service [`StatusLayer`] makes.
#[derive(Clone)]
pub struct StatusService<S> {
    inner: S,
    served: Arc<str>,
}

type BoxFuture<T, E> = Pin<Box<dyn Future<Output = Result<T, E>> + Send>>;

impl<S, B, RB> tower_service::Service<http::Request<B>> for StatusService<S>
where
    S: tower_service::Service<http::Request<B>, Response = http::Response<RB>>,
    S::Future: Send + 'static,
{
    type Response = http::Response<StatusBody<RB>>;
    type Error = S::Error;
    type Future = BoxFuture<Self::Response, Self::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        let path = request.uri().path().to_owned();
        let served = self.served.clone();
        let answer = self.inner.call(request);
        Box::pin(async move {
            let mut response = answer.await?;
            // A status is in the headers (trailers-only answers) or in the
            // trailers at the end of the body.
            rewrite_status(response.headers_mut(), &path, &served);
            Ok(response.map(|inner| StatusBody {
                inner,
                path,
                served,
            }))
        })
    }
}

/// A response body whose trailers get their status rewritten, as the
/// headers are ([`StatusLayer`]).
pub struct StatusBody<B> {
    inner: B,
    path: String,
    served: Arc<str>,
}

impl<B> http_body::Body for StatusBody<B>
where
    B: http_body::Body + Unpin,
{
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        let this = &mut *self;
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => {
                let frame = match frame.into_trailers() {
                    Ok(mut trailers) => {
                        rewrite_status(&mut trailers, &this.path, &this.served);
                        http_body::Frame::trailers(trailers)
                    }
                    Err(frame) => frame,
                };
                Poll::Ready(Some(Ok(frame)))
            }
            other => other,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

/// The status a trailers-only answer should carry instead of tonic's.
fn rewrite_status(headers: &mut http::HeaderMap, path: &str, served: &str) {
    use tonic::Code;
    let Some(code) = headers
        .get("grpc-status")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<i32>().ok())
        .map(Code::from_i32)
    else {
        return;
    };
    let message = headers
        .get("grpc-message")
        .map(|v| percent_decode(v.as_bytes()))
        .unwrap_or_default();
    let (code, field, message) = match code {
        Code::Internal
            if message.starts_with("failed to decode Protobuf message")
                || message.starts_with("Missing request message") =>
        {
            (
                Code::InvalidArgument,
                Some("request"),
                format!("request: not a valid protobuf message for {path} ({message})"),
            )
        }
        Code::OutOfRange if message.starts_with("Error, decoded message length too large") => {
            let detail = message.trim_start_matches("Error, decoded message length too large: ");
            (
                Code::ResourceExhausted,
                Some("request"),
                format!("request: the message is over this server's size limit ({detail})"),
            )
        }
        Code::Unimplemented if message.is_empty() => (
            Code::Unimplemented,
            None,
            format!("{path} is not served on this port, which serves {served}"),
        ),
        _ => return,
    };
    let _ = tonic::Status::new(code, message).add_header(headers);
    if let Some(field) = field {
        headers.insert("baton-field", http::HeaderValue::from_static(field));
    }
}

/// A `grpc-message` header as text (it is percent-encoded on the wire).
fn percent_decode(raw: &[u8]) -> String {
    let mut out = Vec::with_capacity(raw.len());
    let mut i = 0;
    while i < raw.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        match (
            raw[i],
            raw.get(i + 1).copied().and_then(hex),
            raw.get(i + 2).copied().and_then(hex),
        ) {
            (b'%', Some(hi), Some(lo)) => {
                out.push((hi * 16 + lo) as u8);
                i += 3;
            }
            (b, _, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Headers as tonic writes them (message percent-encoded).
    fn answer(code: i32, message: &str) -> http::HeaderMap {
        let mut h = http::HeaderMap::new();
        tonic::Status::new(tonic::Code::from_i32(code), message)
            .add_header(&mut h)
            .expect("headers");
        h
    }

    fn status(h: &http::HeaderMap) -> (String, String, Option<String>) {
        let get = |k: &str| h.get(k).map(|v| percent_decode(v.as_bytes()));
        (
            get("grpc-status").unwrap_or_default(),
            get("grpc-message").unwrap_or_default(),
            get("baton-field"),
        )
    }

    #[test]
    fn statuses_made_before_a_handler_tell_whether_to_retry() {
        let mut h = answer(
            13,
            "failed to decode Protobuf message: PutRequest.trace_id: invalid wire type",
        );
        rewrite_status(
            &mut h,
            "/baton.v1.ContextStore/Put",
            "baton.v1.ContextStore",
        );
        let (code, message, field) = status(&h);
        assert_eq!((code.as_str(), field.as_deref()), ("3", Some("request")));
        assert!(message.contains("/baton.v1.ContextStore/Put"), "{message}");
        assert!(
            message.contains("invalid wire type"),
            "the cause is kept: {message}"
        );

        let mut h = answer(
            11,
            "Error, decoded message length too large: found 5 bytes, the limit is: 4 bytes",
        );
        rewrite_status(&mut h, "/p", "s");
        assert_eq!(status(&h).0, "8");

        let mut h = answer(12, "");
        rewrite_status(
            &mut h,
            "/baton.v1.ToolHost/Execute",
            "baton.v1.Orchestrator",
        );
        let (code, message, _) = status(&h);
        assert_eq!(code, "12");
        assert!(message.contains("baton.v1.Orchestrator"), "{message}");

        // Anything else is left alone.
        let mut h = answer(13, "a handler's own internal error");
        rewrite_status(&mut h, "/p", "s");
        assert_eq!(status(&h).0, "13");
        let mut h = answer(5, "");
        rewrite_status(&mut h, "/p", "s");
        assert_eq!(status(&h), ("5".into(), String::new(), None));
    }
}
