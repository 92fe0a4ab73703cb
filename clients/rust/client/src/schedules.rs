//! A tenant's schedules: runs started at a cron expression's or an
//! interval's ticks (see the server's docs/schedules.md).

use crate::{Error, OrchestratorClient, pb};

impl OrchestratorClient {
    /// Makes a schedule.
    pub async fn create_schedule(
        &self,
        request: pb::CreateScheduleRequest,
    ) -> Result<pb::Schedule, Error> {
        Ok(self
            .raw()
            .create_schedule(self.request(request))
            .await?
            .into_inner())
    }

    /// The tenant's schedules, the agents file's first.
    pub async fn list_schedules(&self) -> Result<Vec<pb::Schedule>, Error> {
        Ok(self
            .raw()
            .list_schedules(self.request(pb::ListSchedulesRequest {}))
            .await?
            .into_inner()
            .schedules)
    }

    /// One schedule, with its next fire times and recent ticks.
    pub async fn get_schedule(&self, id: &str) -> Result<pb::Schedule, Error> {
        let request = pb::GetScheduleRequest {
            schedule_id: id.to_owned(),
        };
        Ok(self
            .raw()
            .get_schedule(self.request(request))
            .await?
            .into_inner())
    }

    /// Pauses a schedule: nothing fires until it is resumed.
    pub async fn pause_schedule(&self, id: &str) -> Result<pb::Schedule, Error> {
        let request = pb::PauseScheduleRequest {
            schedule_id: id.to_owned(),
        };
        Ok(self
            .raw()
            .pause_schedule(self.request(request))
            .await?
            .into_inner())
    }

    /// Resumes a schedule from its next tick.
    pub async fn resume_schedule(&self, id: &str) -> Result<pb::Schedule, Error> {
        let request = pb::ResumeScheduleRequest {
            schedule_id: id.to_owned(),
        };
        Ok(self
            .raw()
            .resume_schedule(self.request(request))
            .await?
            .into_inner())
    }

    /// Deletes a schedule; the runs it started go on.
    pub async fn delete_schedule(&self, id: &str) -> Result<(), Error> {
        let request = pb::DeleteScheduleRequest {
            schedule_id: id.to_owned(),
        };
        self.raw().delete_schedule(self.request(request)).await?;
        Ok(())
    }
}
