//! The gRPC binding (A2A §10): `lf.a2a.v1.A2AService` on the main port,
//! beside `baton.v1`. The request's `tenant` field names the agent (the
//! card's gRPC interface declares it; empty: the default agent); the
//! `a2a-version` metadata the version; the authentication interceptor the
//! Baton tenant, as for `baton.v1`. Errors carry a `google.rpc.ErrorInfo`
//! (`error.rs`).

use std::{pin::Pin, sync::Arc};

use baton_proto::a2a::v1::{self as lf, a2a_service_server::A2aService};
use futures::{Stream, StreamExt as _};
use tonic::{Request, Response, Status};

use super::{
    error::A2aError,
    face::{A2a, check_version},
    names::VERSION_HEADER,
};
use crate::{app::Caller, auth::tenant_of};

/// The gRPC face of the A2A operations.
#[derive(Clone)]
pub struct A2aGrpc {
    face: Arc<A2a>,
}

impl A2aGrpc {
    /// The gRPC binding of `face`.
    pub fn new(face: Arc<A2a>) -> Self {
        Self { face }
    }

    /// Who calls, after the version check.
    fn caller<T>(&self, request: &Request<T>) -> Result<Caller, Status> {
        let md = request.metadata();
        let version = md.get(VERSION_HEADER).and_then(|v| v.to_str().ok());
        check_version(version).map_err(|e| e.status())?;
        Ok(Caller {
            tenant: tenant_of(request.extensions()).to_owned(),
            trace: baton_common::otel::extract(md),
            forward: crate::peers::Forward {
                forwarded: false,
                traceparent: md
                    .get("traceparent")
                    .and_then(|v| v.to_str().ok())
                    .map(str::to_owned),
                authorization: md
                    .get("authorization")
                    .and_then(|v| v.to_str().ok())
                    .map(str::to_owned),
                answer_token: None,
            },
        })
    }

    /// The agent a request's `tenant` names.
    fn agent(&self, tenant: &str) -> Result<String, Status> {
        let name = if tenant.is_empty() {
            self.face.default_agent().ok_or_else(|| {
                A2aError::invalid(
                    "tenant",
                    "must name the agent (the card's gRPC interface gives it as `tenant`)",
                )
                .status()
            })?
        } else {
            tenant.to_owned()
        };
        self.face.agent(&name).map_err(|e| e.status())?;
        Ok(name)
    }
}

/// A stream of updates as the gRPC binding sends it.
pub type UpdateStream = Pin<Box<dyn Stream<Item = Result<lf::StreamResponse, Status>> + Send>>;

fn statuses(updates: super::service::Updates) -> UpdateStream {
    Box::pin(updates.map(|item| item.map_err(|e| e.status())))
}

#[tonic::async_trait]
impl A2aService for A2aGrpc {
    type SendStreamingMessageStream = UpdateStream;
    type SubscribeToTaskStream = UpdateStream;

    async fn send_message(
        &self,
        request: Request<lf::SendMessageRequest>,
    ) -> Result<Response<lf::SendMessageResponse>, Status> {
        let caller = self.caller(&request)?;
        let r = request.into_inner();
        let agent = self.agent(&r.tenant)?;
        let exposed = self.face.agent(&agent).map_err(|e| e.status())?;
        let answer = self.face.service().send(&caller, &exposed, r).await;
        answer.map(Response::new).map_err(|e| e.status())
    }

    async fn send_streaming_message(
        &self,
        request: Request<lf::SendMessageRequest>,
    ) -> Result<Response<Self::SendStreamingMessageStream>, Status> {
        let caller = self.caller(&request)?;
        let r = request.into_inner();
        let agent = self.agent(&r.tenant)?;
        let exposed = self.face.agent(&agent).map_err(|e| e.status())?;
        let updates = self
            .face
            .service()
            .send_streaming(&caller, &exposed, r)
            .await;
        updates
            .map(|u| Response::new(statuses(u)))
            .map_err(|e| e.status())
    }

    async fn get_task(
        &self,
        request: Request<lf::GetTaskRequest>,
    ) -> Result<Response<lf::Task>, Status> {
        let caller = self.caller(&request)?;
        let r = request.into_inner();
        let agent = self.agent(&r.tenant)?;
        let task = self.face.service().get(&caller, &agent, &r).await;
        task.map(Response::new).map_err(|e| e.status())
    }

    async fn list_tasks(
        &self,
        request: Request<lf::ListTasksRequest>,
    ) -> Result<Response<lf::ListTasksResponse>, Status> {
        let caller = self.caller(&request)?;
        let r = request.into_inner();
        let agent = self.agent(&r.tenant)?;
        let list = self.face.service().list(&caller, &agent, &r).await;
        list.map(Response::new).map_err(|e| e.status())
    }

    async fn cancel_task(
        &self,
        request: Request<lf::CancelTaskRequest>,
    ) -> Result<Response<lf::Task>, Status> {
        let caller = self.caller(&request)?;
        let r = request.into_inner();
        let agent = self.agent(&r.tenant)?;
        let task = self.face.service().cancel(&caller, &agent, &r.id).await;
        task.map(Response::new).map_err(|e| e.status())
    }

    async fn subscribe_to_task(
        &self,
        request: Request<lf::SubscribeToTaskRequest>,
    ) -> Result<Response<Self::SubscribeToTaskStream>, Status> {
        let caller = self.caller(&request)?;
        let r = request.into_inner();
        let agent = self.agent(&r.tenant)?;
        let updates = self.face.service().subscribe(&caller, &agent, &r.id).await;
        updates
            .map(|u| Response::new(statuses(u)))
            .map_err(|e| e.status())
    }

    async fn create_task_push_notification_config(
        &self,
        request: Request<lf::TaskPushNotificationConfig>,
    ) -> Result<Response<lf::TaskPushNotificationConfig>, Status> {
        let caller = self.caller(&request)?;
        let r = request.into_inner();
        let agent = self.agent(&r.tenant)?;
        let made = self
            .face
            .service()
            .create_push(&caller, &agent, "", r)
            .await;
        made.map(Response::new).map_err(|e| e.status())
    }

    async fn get_task_push_notification_config(
        &self,
        request: Request<lf::GetTaskPushNotificationConfigRequest>,
    ) -> Result<Response<lf::TaskPushNotificationConfig>, Status> {
        let caller = self.caller(&request)?;
        let r = request.into_inner();
        let agent = self.agent(&r.tenant)?;
        let got = self
            .face
            .service()
            .get_push(&caller, &agent, &r.task_id, &r.id)
            .await;
        got.map(Response::new).map_err(|e| e.status())
    }

    async fn list_task_push_notification_configs(
        &self,
        request: Request<lf::ListTaskPushNotificationConfigsRequest>,
    ) -> Result<Response<lf::ListTaskPushNotificationConfigsResponse>, Status> {
        let caller = self.caller(&request)?;
        let r = request.into_inner();
        let agent = self.agent(&r.tenant)?;
        let list = self
            .face
            .service()
            .list_push(&caller, &agent, &r.task_id)
            .await;
        list.map(Response::new).map_err(|e| e.status())
    }

    async fn delete_task_push_notification_config(
        &self,
        request: Request<lf::DeleteTaskPushNotificationConfigRequest>,
    ) -> Result<Response<()>, Status> {
        let caller = self.caller(&request)?;
        let r = request.into_inner();
        let agent = self.agent(&r.tenant)?;
        let done = self
            .face
            .service()
            .delete_push(&caller, &agent, &r.task_id, &r.id)
            .await;
        done.map(Response::new).map_err(|e| e.status())
    }

    async fn get_extended_agent_card(
        &self,
        request: Request<lf::GetExtendedAgentCardRequest>,
    ) -> Result<Response<lf::AgentCard>, Status> {
        let caller = self.caller(&request)?;
        let base = match (
            request.local_addr(),
            self.face.base_url(&Default::default()),
        ) {
            (Some(addr), b) if b == "http://localhost" => format!("http://{addr}"),
            (_, b) => b,
        };
        let agent = self.agent(&request.get_ref().tenant)?;
        let exposed = self.face.agent(&agent).map_err(|e| e.status())?;
        Ok(Response::new(super::card::extended(
            &self.face,
            &exposed,
            &base,
            &caller,
            self.face.service().core.webhooks().config(),
        )))
    }
}
