//! gRPC-web beside plain HTTP on one port: [`WebLayer`] sends gRPC and
//! gRPC-web requests (content type `application/grpc…`) through tonic-web,
//! which translates gRPC-web, and every other request straight to the
//! routes — tonic-web alone answers `400` to any HTTP/1.1 request that is
//! not gRPC-web, which would shut out an HTTP/JSON face and the browser
//! pages on the same port.

use std::{
    future::Future,
    pin::Pin,
    task::{Context, Poll},
};

use http::{Request, Response, header};
use tonic::body::Body;
use tonic_web::{GrpcWebLayer, GrpcWebService};
use tower_layer::Layer;
use tower_service::Service;

/// The layer (see the module docs).
#[derive(Debug, Clone, Default)]
pub struct WebLayer;

impl<S: Clone> Layer<S> for WebLayer {
    type Service = Web<S>;

    fn layer(&self, inner: S) -> Web<S> {
        Web {
            web: GrpcWebLayer::new().layer(inner.clone()),
            plain: inner,
        }
    }
}

/// The service [`WebLayer`] makes.
#[derive(Debug, Clone)]
pub struct Web<S> {
    web: GrpcWebService<S>,
    plain: S,
}

/// Whether `request` is gRPC or gRPC-web (any `application/grpc…`).
fn is_grpc<B>(request: &Request<B>) -> bool {
    request
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/grpc"))
}

type BoxFuture<T, E> = Pin<Box<dyn Future<Output = Result<T, E>> + Send>>;

impl<S, ReqBody, ResBody> Service<Request<ReqBody>> for Web<S>
where
    S: Service<Request<Body>, Response = Response<ResBody>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    ReqBody: http_body::Body<Data = bytes::Bytes> + Send + 'static,
    ReqBody::Error: Into<Box<dyn std::error::Error + Send + Sync>> + std::fmt::Display,
    ResBody: http_body::Body<Data = bytes::Bytes> + Send + 'static,
    ResBody::Error: Into<Box<dyn std::error::Error + Send + Sync>> + std::fmt::Display,
{
    type Response = Response<Body>;
    type Error = S::Error;
    type Future = BoxFuture<Self::Response, Self::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        // Both wrap the same routes, which are always ready.
        Service::<Request<ReqBody>>::poll_ready(&mut self.web, cx)
    }

    fn call(&mut self, request: Request<ReqBody>) -> Self::Future {
        if is_grpc(&request) {
            return Box::pin(self.web.call(request));
        }
        let mut plain = self.plain.clone();
        Box::pin(async move {
            let response = plain.call(request.map(Body::new)).await?;
            Ok(response.map(Body::new))
        })
    }
}
