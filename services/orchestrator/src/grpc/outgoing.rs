//! WatchRun and ForkRun on routes of their own, ahead of the generated
//! service's (which answers the same, decoded, and is kept for the trait):
//! their streams send what a run's log kept packed as its bytes
//! ([`PackedEvent`](crate::run::events::PackedEvent)), with the run's ids
//! appended, so a recorded history goes out without being decoded and
//! encoded again — what a fork's replayed part and a watch of an ended run
//! are made of. Everything else is the generated service's: the same
//! authentication interceptor, codec settings (no compression, 4 MiB
//! requests) and status mapping.

use std::{convert::Infallible, marker::PhantomData, pin::Pin};

use baton_proto::v1 as pb;
use futures::{Stream, StreamExt as _};
use prost::Message;
use tonic::{
    Request, Response, Status,
    codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder},
    codegen::{Body, BoxFuture, Context, Poll, Service, StdError},
    server::{Grpc, ServerStreamingService},
    service::interceptor::InterceptedService,
};

use super::{OrchestratorService, status};
use crate::{
    auth::Authenticate,
    run::events::{EventStream, Outgoing},
};

/// The routes, each behind `auth` (merged into the one port's router).
pub fn routes(face: OrchestratorService, auth: Authenticate) -> axum::Router {
    axum::Router::new()
        .route_service(
            "/baton.v1.Orchestrator/WatchRun",
            InterceptedService::new(Route::new(Watch(face.clone())), auth.clone()),
        )
        .route_service(
            "/baton.v1.Orchestrator/ForkRun",
            InterceptedService::new(Route::new(Fork(face)), auth),
        )
}

type OutgoingStream = Pin<Box<dyn Stream<Item = Result<Outgoing, Status>> + Send>>;

fn outgoing(stream: EventStream) -> OutgoingStream {
    Box::pin(stream.outgoing().map(|item| item.map_err(status)))
}

/// WatchRun's handler.
#[derive(Clone)]
struct Watch(OrchestratorService);

impl ServerStreamingService<pb::WatchRunRequest> for Watch {
    type Response = Outgoing;
    type ResponseStream = OutgoingStream;
    type Future = BoxFuture<Response<OutgoingStream>, Status>;

    fn call(&mut self, request: Request<pb::WatchRunRequest>) -> Self::Future {
        let face = self.0.clone();
        Box::pin(async move { Ok(Response::new(outgoing(face.watch(request).await?))) })
    }
}

/// ForkRun's handler.
#[derive(Clone)]
struct Fork(OrchestratorService);

impl ServerStreamingService<pb::ForkRunRequest> for Fork {
    type Response = Outgoing;
    type ResponseStream = OutgoingStream;
    type Future = BoxFuture<Response<OutgoingStream>, Status>;

    fn call(&mut self, request: Request<pb::ForkRunRequest>) -> Self::Future {
        let face = self.0.clone();
        Box::pin(async move { Ok(Response::new(outgoing(face.fork(request).await?))) })
    }
}

/// A server-streaming method whose request is `R`, served as tonic's
/// generated code serves one, with [`OutgoingCodec`].
struct Route<H, R> {
    handler: H,
    _request: PhantomData<fn() -> R>,
}

impl<H: Clone, R> Clone for Route<H, R> {
    fn clone(&self) -> Self {
        Route::new(self.handler.clone())
    }
}

impl<H, R> Route<H, R> {
    fn new(handler: H) -> Self {
        Route {
            handler,
            _request: PhantomData,
        }
    }
}

impl<H, R, B> Service<http::Request<B>> for Route<H, R>
where
    H: ServerStreamingService<R, Response = Outgoing> + Clone + Send + 'static,
    H::ResponseStream: Send + 'static,
    H::Future: Send + 'static,
    R: Message + Default + Send + 'static,
    B: Body + Send + 'static,
    B::Error: Into<StdError> + Send + 'static,
{
    type Response = http::Response<tonic::body::Body>;
    type Error = Infallible;
    type Future = BoxFuture<Self::Response, Infallible>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        let handler = self.handler.clone();
        Box::pin(async move {
            let mut grpc = Grpc::new(OutgoingCodec::<R>(PhantomData));
            Ok(grpc.server_streaming(handler, request).await)
        })
    }
}

/// Decodes a request `R` with prost; encodes an [`Outgoing`] event as it
/// is: decoded ones with prost, packed ones by copying their bytes.
struct OutgoingCodec<R>(PhantomData<fn() -> R>);

impl<R: Message + Default + Send + 'static> Codec for OutgoingCodec<R> {
    type Encode = Outgoing;
    type Decode = R;
    type Encoder = OutgoingEncoder;
    type Decoder = RequestDecoder<R>;

    fn encoder(&mut self) -> OutgoingEncoder {
        OutgoingEncoder
    }

    fn decoder(&mut self) -> RequestDecoder<R> {
        RequestDecoder(PhantomData)
    }
}

struct OutgoingEncoder;

impl Encoder for OutgoingEncoder {
    type Item = Outgoing;
    type Error = Status;

    fn encode(&mut self, item: Outgoing, buf: &mut EncodeBuf<'_>) -> Result<(), Status> {
        match item {
            Outgoing::Event(e) => e
                .encode(buf)
                .map_err(|e| Status::internal(format!("encoding an event: {e}"))),
            Outgoing::Packed(p) => {
                p.encode(buf);
                Ok(())
            }
        }
    }
}

struct RequestDecoder<R>(PhantomData<fn() -> R>);

impl<R: Message + Default> Decoder for RequestDecoder<R> {
    type Item = R;
    type Error = Status;

    fn decode(&mut self, buf: &mut DecodeBuf<'_>) -> Result<Option<R>, Status> {
        // As tonic's prost codec maps a request that does not parse.
        R::decode(buf)
            .map(Some)
            .map_err(|e| Status::internal(e.to_string()))
    }
}
