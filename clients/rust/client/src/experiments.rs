//! Evaluations (RunExperiment, GetExperiment, CancelExperiment, ListExperiments,
//! CompareExperiments, SaveCase).

use futures::{Stream, StreamExt as _};

use crate::{Error, OrchestratorClient, pb};

impl OrchestratorClient {
    /// Runs an experiment: its events (started, each case scored, ended).
    /// Dropping the stream cancels the experiment's runs still going; the
    /// experiment keeps the cases that finished.
    pub async fn run_experiment(
        &self,
        request: pb::RunExperimentRequest,
    ) -> Result<impl Stream<Item = Result<pb::ExperimentEvent, Error>> + Send + 'static, Error>
    {
        let stream = self
            .raw()
            .run_experiment(self.request(request))
            .await?
            .into_inner();
        Ok(stream.map(|e| e.map_err(Error::from)))
    }

    /// An experiment, with its cases (by id or name).
    pub async fn get_experiment(&self, which: &str) -> Result<pb::Experiment, Error> {
        Ok(self
            .raw()
            .get_experiment(self.request(pb::GetExperimentRequest {
                experiment: which.to_owned(),
            }))
            .await?
            .into_inner())
    }

    /// Stops a running experiment (by id or name) on whichever replica
    /// runs it: its record once it says CANCELLED (the cases that finished
    /// kept; as it stands after 10 s when its replica is slow to say so).
    /// One that is not running is `FAILED_PRECONDITION`.
    pub async fn cancel_experiment(&self, which: &str) -> Result<pb::Experiment, Error> {
        Ok(self
            .raw()
            .cancel_experiment(self.request(pb::CancelExperimentRequest {
                experiment: which.to_owned(),
            }))
            .await?
            .into_inner())
    }

    /// A page of the caller's experiments, newest first, without cases.
    pub async fn list_experiments(
        &self,
        page_size: i32,
        page_token: &str,
    ) -> Result<pb::ListExperimentsResponse, Error> {
        Ok(self
            .raw()
            .list_experiments(self.request(pb::ListExperimentsRequest {
                page_size,
                page_token: page_token.to_owned(),
            }))
            .await?
            .into_inner())
    }

    /// Two experiments compared, case by case (`alpha` 0: 0.05).
    pub async fn compare_experiments(
        &self,
        baseline: &str,
        candidate: &str,
        alpha: f64,
    ) -> Result<pb::ExperimentComparison, Error> {
        Ok(self
            .raw()
            .compare_experiments(self.request(pb::CompareExperimentsRequest {
                baseline: baseline.to_owned(),
                candidate: candidate.to_owned(),
                alpha,
            }))
            .await?
            .into_inner())
    }

    /// A dataset case (one JSON Lines line) made of an ended run.
    pub async fn save_case(&self, run_id: &str, inline_recording: bool) -> Result<String, Error> {
        Ok(self
            .raw()
            .save_case(self.request(pb::SaveCaseRequest {
                run_id: run_id.to_owned(),
                inline_recording,
            }))
            .await?
            .into_inner()
            .case_json)
    }
}
