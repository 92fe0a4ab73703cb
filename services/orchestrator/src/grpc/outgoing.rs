//! The streaming RPCs (RunAgent, RunPipeline, WatchRun, ForkRun,
//! ReplayRun) on routes of their own, ahead of the generated service's
//! (which answers the same, decoded, and is kept for the trait): their
//! streams send each event as the run's log keeps it
//! ([`PackedEvent`](crate::run::events::PackedEvent): encoded once, as the
//! sequencer numbered it), with the run's ids appended, so no event is
//! decoded and encoded again on its way out — live, replayed or read back.
//! Everything else is the generated service's: the same authentication
//! interceptor, codec settings (no compression, 4 MiB requests) and status
//! mapping.

use std::{convert::Infallible, marker::PhantomData, pin::Pin};

use baton_proto::v1 as pb;
use futures::{Stream, StreamExt as _};
use prost::Message;
use tonic::{
    Request, Response, Status,
    codec::{Codec, EncodeBuf, Encoder},
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
    let watch: Method<pb::WatchRunRequest> = |face, r| Box::pin(async move { face.watch(r).await });
    let fork: Method<pb::ForkRunRequest> = |face, r| Box::pin(async move { face.fork(r).await });
    let agent: Method<pb::RunAgentRequest> = |face, r| Box::pin(async move { face.agent(r).await });
    let pipeline: Method<pb::RunPipelineRequest> =
        |face, r| Box::pin(async move { face.pipeline(r).await });
    let replay: Method<pb::ReplayRunRequest> =
        |face, r| Box::pin(async move { face.replay(r).await });
    axum::Router::new()
        .route_service(
            "/baton.v1.Orchestrator/RunAgent",
            InterceptedService::new(Route::new(face.clone(), agent), auth.clone()),
        )
        .route_service(
            "/baton.v1.Orchestrator/RunPipeline",
            InterceptedService::new(Route::new(face.clone(), pipeline), auth.clone()),
        )
        .route_service(
            "/baton.v1.Orchestrator/ReplayRun",
            InterceptedService::new(Route::new(face.clone(), replay), auth.clone()),
        )
        .route_service(
            "/baton.v1.Orchestrator/WatchRun",
            InterceptedService::new(Route::new(face.clone(), watch), auth.clone()),
        )
        .route_service(
            "/baton.v1.Orchestrator/ForkRun",
            InterceptedService::new(Route::new(face, fork), auth),
        )
}

/// What a method does with its request `R`: the face's stream for it.
type Method<R> = fn(OrchestratorService, Request<R>) -> BoxFuture<EventStream, Status>;

type OutgoingStream = Pin<Box<dyn Stream<Item = Result<Outgoing, Status>> + Send>>;

/// A server-streaming method whose request is `R`, served as tonic's
/// generated code serves one, with [`OutgoingCodec`].
struct Route<R> {
    face: OrchestratorService,
    method: Method<R>,
}

impl<R> Clone for Route<R> {
    fn clone(&self) -> Self {
        Route::new(self.face.clone(), self.method)
    }
}

impl<R> Route<R> {
    fn new(face: OrchestratorService, method: Method<R>) -> Self {
        Route { face, method }
    }
}

/// The method's handler, as `Grpc::server_streaming` calls it.
impl<R: Send + 'static> ServerStreamingService<R> for Route<R> {
    type Response = Outgoing;
    type ResponseStream = OutgoingStream;
    type Future = BoxFuture<Response<OutgoingStream>, Status>;

    fn call(&mut self, request: Request<R>) -> Self::Future {
        let stream = (self.method)(self.face.clone(), request);
        Box::pin(async move {
            let stream = stream.await?.outgoing().map(|item| item.map_err(status));
            Ok(Response::new(Box::pin(stream) as OutgoingStream))
        })
    }
}

impl<R, B> Service<http::Request<B>> for Route<R>
where
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
        let route = self.clone();
        Box::pin(async move {
            let mut grpc = Grpc::new(OutgoingCodec::<R>(PhantomData));
            Ok(grpc.server_streaming(route, request).await)
        })
    }
}

/// Decodes a request `R` as every generated service does
/// ([`baton_proto::codec`]); encodes an [`Outgoing`] event as it
/// is: decoded ones with prost, packed ones by copying their bytes.
struct OutgoingCodec<R>(PhantomData<fn() -> R>);

impl<R: Message + Default + Send + 'static> Codec for OutgoingCodec<R> {
    type Encode = Outgoing;
    type Decode = R;
    type Encoder = OutgoingEncoder;
    type Decoder = baton_proto::codec::Decoder<R>;

    fn encoder(&mut self) -> OutgoingEncoder {
        OutgoingEncoder
    }

    fn decoder(&mut self) -> Self::Decoder {
        baton_proto::codec::Decoder::default()
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
