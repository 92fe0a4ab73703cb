//! The agents file's `schedules:` (see `crate::catalog::schedules`) as
//! the requests CreateSchedule would take: checked the same way, each
//! refusal naming its field under `schedules.<name>`.

use baton_proto::v1 as pb;

use super::Declared;
use crate::catalog::{Catalog, schedules::ScheduleSpec};

fn bad(name: &str, field: &str, message: impl std::fmt::Display) -> String {
    format!("schedules.{name}.{field}: {message}")
}

/// The agents file's schedules as the API would take them, each with its
/// tenant; the first refused names its field (`schedules.<name>.cron`).
pub fn declared(catalog: &Catalog) -> Result<Vec<Declared>, String> {
    catalog
        .schedules
        .iter()
        .map(|(name, s)| {
            Ok(Declared {
                name: name.clone(),
                tenant: s.tenant.clone(),
                request: request(s, name, &|a| catalog.is_callable(a))?,
            })
        })
        .collect()
}

/// The request the API would take for `s`; `callable` tells whether an
/// agent or group of that name exists.
fn request(
    s: &ScheduleSpec,
    name: &str,
    callable: &dyn Fn(&str) -> bool,
) -> Result<pb::CreateScheduleRequest, String> {
    {
        if !crate::catalog::names::valid_name(name) {
            return Err(bad(name, "", "is not a valid schedule name"));
        }
        let run_context_json = match &s.run_context {
            Some(v) if !v.is_object() => return Err(bad(name, "run_context", "must be a map")),
            Some(v) => v.to_string(),
            None => String::new(),
        };
        let (agent, pipeline) = match (s.agent.as_str(), &s.pipeline) {
            ("", None) => return Err(bad(name, "agent", "give agent (or group) or pipeline")),
            ("", Some(p)) => {
                let file: crate::pipeline::PipelineFile =
                    serde_json::from_value(p.clone()).map_err(|e| bad(name, "pipeline", e))?;
                let mut r = file.into_request().map_err(|e| bad(name, "pipeline", e))?;
                r.run_context_json = run_context_json;
                (None, Some(r))
            }
            (_, Some(_)) => {
                return Err(bad(name, "pipeline", "give agent or pipeline, not both"));
            }
            (a, None) => {
                if !callable(a) {
                    return Err(bad(name, "agent", format!("no agent or group {a:?}")));
                }
                (
                    Some(pb::RunAgentRequest {
                        agent: a.to_owned(),
                        input: s.input.clone(),
                        run_context_json,
                        ..Default::default()
                    }),
                    None,
                )
            }
        };
        let interval = match &s.every {
            Some(e) => {
                let d =
                    baton_common::config::duration::parse(e).map_err(|e| bad(name, "every", e))?;
                Some(baton_proto::wkt::Duration {
                    seconds: d.as_secs() as i64,
                    nanos: d.subsec_nanos() as i32,
                })
            }
            None => None,
        };
        let end_at = match &s.end_at {
            Some(t) => {
                let t = chrono::DateTime::parse_from_rfc3339(t).map_err(|e| {
                    bad(
                        name,
                        "end_at",
                        format!("{t:?} is not an RFC 3339 time: {e}"),
                    )
                })?;
                Some(crate::schedule::spec::timestamp(t.timestamp_millis()))
            }
            None => None,
        };
        let overlap = match s.overlap.as_deref() {
            None | Some("skip") => pb::ScheduleOverlap::Skip,
            Some("queue_one") => pb::ScheduleOverlap::QueueOne,
            Some("allow") => pb::ScheduleOverlap::Allow,
            Some(o) => {
                return Err(bad(
                    name,
                    "overlap",
                    format!("{o:?} is not skip, queue_one or allow"),
                ));
            }
        };
        let missed = match s.missed.as_deref() {
            None | Some("skip") => pb::ScheduleMissed::Skip,
            Some("run_once") => pb::ScheduleMissed::RunOnce,
            Some(m) => {
                return Err(bad(
                    name,
                    "missed",
                    format!("{m:?} is not skip or run_once"),
                ));
            }
        };
        let r = pb::CreateScheduleRequest {
            description: s.description.clone(),
            agent,
            pipeline,
            cron: s.cron.clone(),
            time_zone: s.time_zone.clone(),
            interval,
            end_at: None,
            overlap: overlap as i32,
            missed: missed as i32,
            paused: s.paused,
        };
        // Its timing, as the API checks it (the server's shortest interval
        // is checked when the schedule is taken: one under it is left out).
        crate::schedule::spec::check(
            &r,
            crate::run::launch::now_ms(),
            std::time::Duration::from_millis(1),
        )
        .map_err(|e| {
            bad(
                name,
                e.field().unwrap_or(""),
                e.to_string()
                    .split_once(": ")
                    .map_or(e.to_string(), |(_, m)| m.to_owned()),
            )
        })?;
        // An end already past is no error in a file: the schedule has
        // simply ended.
        Ok(pb::CreateScheduleRequest { end_at, ..r })
    }
}
