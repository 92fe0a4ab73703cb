//! Run-scoped calls of people and callers: ResolveApproval, SubmitInput and
//! CancelRun — on the run here, on a peer that has it, or through the run
//! store's inbox (`inbox.rs`). The service's handlers audit them.

use baton_proto::v1 as pb;
use tonic::{Request, Response, Status};

use super::{Located, OrchestratorService};
use crate::{error::Error, run::durable::inbox::Question, run::record::ApprovalAnswer};

impl OrchestratorService {
    pub(super) async fn resolve_approval_here(
        &self,
        request: Request<pb::ResolveApprovalRequest>,
    ) -> std::result::Result<Response<pb::ResolveApprovalResponse>, Status> {
        let (md, ext, r) = request.into_parts();
        if r.approval_id.is_empty() {
            return Err(Error::invalid("approval_id", "must not be empty").into());
        }
        let located = self
            .locate(&md, &ext, &r.run_id, &r, |mut c, req| async move {
                c.resolve_approval(req).await
            })
            .await;
        let answer = ApprovalAnswer {
            approved: r.approved,
            reason: r.reason.clone(),
        };
        let here = match located {
            Ok(Located::Here(run)) => run
                .resolve_approval(&r.approval_id, answer)
                .map_err(Status::from),
            Ok(Located::There(answer)) => return Ok(answer),
            Err(status) => Err(status),
        };
        match here {
            // Not asked here: a durable run elsewhere, or parked.
            Err(s) if s.code() == tonic::Code::NotFound && self.services.durable.is_some() => {
                let question = Question::Approval(&r.approval_id, r.approved, &r.reason);
                self.answer_stored(&ext, &r.run_id, question).await?
            }
            other => other?,
        }
        Ok(Response::new(pb::ResolveApprovalResponse {}))
    }

    pub(super) async fn submit_input_here(
        &self,
        request: Request<pb::SubmitInputRequest>,
    ) -> std::result::Result<Response<pb::SubmitInputResponse>, Status> {
        let (md, ext, r) = request.into_parts();
        if r.input_id.is_empty() {
            return Err(Error::invalid("input_id", "must not be empty").into());
        }
        let located = self
            .locate(&md, &ext, &r.run_id, &r, |mut c, req| async move {
                c.submit_input(req).await
            })
            .await;
        let here = match located {
            Ok(Located::Here(run)) => run
                .submit_input(&r.input_id, r.input.clone())
                .map_err(Status::from),
            Ok(Located::There(answer)) => return Ok(answer),
            Err(status) => Err(status),
        };
        match here {
            // Not asked here: a durable run elsewhere, or parked.
            Err(s) if s.code() == tonic::Code::NotFound && self.services.durable.is_some() => {
                let question = Question::Input(&r.input_id, &r.input);
                self.answer_stored(&ext, &r.run_id, question).await?
            }
            other => other?,
        }
        Ok(Response::new(pb::SubmitInputResponse {}))
    }

    pub(super) async fn cancel_run_here(
        &self,
        request: Request<pb::CancelRunRequest>,
    ) -> std::result::Result<Response<pb::CancelRunResponse>, Status> {
        let (md, ext, r) = request.into_parts();
        let located = self
            .locate(&md, &ext, &r.run_id, &r, |mut c, req| async move {
                c.cancel_run(req).await
            })
            .await;
        let status = match located {
            Ok(Located::Here(run)) => run.cancel_by_request(&r.reason),
            Ok(Located::There(answer)) => return Ok(answer),
            // A durable run elsewhere, or parked.
            Err(status)
                if status.code() == tonic::Code::NotFound && self.services.durable.is_some() =>
            {
                self.cancel_stored(&ext, &r.run_id, &r.reason).await?
            }
            Err(status) => return Err(status),
        };
        Ok(Response::new(pb::CancelRunResponse {
            status: status as i32,
        }))
    }
}
