//! Questions on protocol revision 2026-07-28, which has no server-to-client
//! requests: a call whose run asks something ends its round with an
//! `InputRequiredResult` (`inputRequests`: one elicitation per open
//! approval or question, keyed by its approval id or input id, and a
//! `requestState`), and the client retries the same `tools/call` with
//! `inputResponses` (the elicitation results under the same keys) and the
//! `requestState`. What was decided:
//!
//! - The run does not wait for the round trip to be made on one replica:
//!   it is detached, the `requestState` names it (run id, the last event
//!   the round saw, the keys asked) and nothing of the call is kept in
//!   memory between rounds. Any replica that can read the run (durable
//!   mode, or the one that has it) serves the retry: it answers through
//!   the core (here, on a peer, or through the run store's inbox) and
//!   follows the run from its journal.
//! - `requestState` is taken as untrusted: the run must be the caller's
//!   tenant's and a run of the tool called, and the responses' keys must
//!   be among the keys asked. Anything else is an invalid-params error that
//!   names the field, and nothing is answered.
//! - A retry that never comes leaves the run waiting for a person, as any
//!   run does: the approval's deadline applies, and any face (CLI, console,
//!   gRPC, HTTP, A2A) can answer or cancel it; the run id and trace id are
//!   in the `InputRequiredResult`'s `_meta`.
//! - Answers mean what they mean on the older revisions ([`super::ask`]);
//!   a declined question fails the call only if it is still open once the
//!   retry has caught up with the run (someone may have answered it
//!   through another face meanwhile), and the run's cancel reason quotes
//!   the question from the run's own record, never from the state.
//! - The responses are checked before anything is answered. An outage
//!   while answering (the run store, a peer) can leave some answered and
//!   some not; the same retry again skips what was answered.
//! - Each retry reads the run's events from the first (to know what is
//!   open): a cost that grows with the run, paid once per round.

use std::collections::BTreeMap;

use std::collections::HashSet;

use rmcp::model::{
    ElicitRequest, ElicitResult, ElicitationAction, InputRequest, InputRequests, InputResponses,
};
use serde::{Deserialize, Serialize};

use super::{ask::ANSWER, error::McpError};

/// What a round leaves with the client, as its `requestState`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RoundState {
    /// The run.
    pub run: String,
    /// The sequence number of the last event the round saw.
    pub seq: u64,
    /// The approvals asked (their ids).
    #[serde(default)]
    pub approvals: Vec<String>,
    /// The questions asked (their input ids).
    #[serde(default)]
    pub questions: Vec<String>,
    /// What earlier retries of the call answered: not to be asked again
    /// while the run's record of the answer is on its way.
    #[serde(default)]
    pub answered: Vec<String>,
}

impl RoundState {
    /// As the opaque `requestState` string.
    pub fn encode(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }

    /// The state a client sent back, or why it is not one.
    pub fn decode(state: &str) -> Result<Self, McpError> {
        serde_json::from_str::<Self>(state)
            .ok()
            .filter(|s| !s.run.is_empty())
            .ok_or_else(|| {
                McpError::params(
                    "requestState",
                    "is not one this server gave (send back the requestState of the InputRequiredResult unchanged)",
                )
            })
    }
}

/// One response of a retry: what it answers.
#[derive(Debug)]
pub enum Response {
    /// An approval's answer.
    Approval {
        /// The approval.
        approval_id: String,
        /// The client's elicitation result.
        result: ElicitResult,
    },
    /// A question's answer.
    Question {
        /// The request for input.
        input_id: String,
        /// The answer, or how the client refused to give one (decline,
        /// cancel): the call then fails, if the question is still open.
        answer: Result<String, ElicitationAction>,
    },
}

/// The responses of a retry, each checked against what `state` asked; one
/// that is not makes the whole retry an error (nothing is answered).
pub fn responses(
    state: &RoundState,
    responses: Option<InputResponses>,
) -> Result<Vec<Response>, McpError> {
    let mut checked = Vec::new();
    for (key, value) in responses.unwrap_or_default() {
        let field = || format!("inputResponses[{key:?}]");
        let result: ElicitResult = serde_json::from_value(value).map_err(|e| {
            McpError::params(
                field(),
                format!("is not an elicitation result ({e}): {{\"action\": \"accept\" | \"decline\" | \"cancel\", \"content\": {{…}}}}"),
            )
        })?;
        if state.approvals.contains(&key) {
            checked.push(Response::Approval {
                approval_id: key,
                result,
            });
        } else if state.questions.contains(&key) {
            let answer = match result.action {
                ElicitationAction::Accept => {
                    match result.content.as_ref().and_then(|c| c.get(ANSWER)) {
                        Some(serde_json::Value::String(s)) => Ok(s.clone()),
                        Some(other) if !other.is_null() => Ok(other.to_string()),
                        _ => {
                            return Err(McpError::params(
                                field(),
                                format!("accepts without an {ANSWER:?} in its content"),
                            ));
                        }
                    }
                }
                other => Err(other),
            };
            checked.push(Response::Question {
                input_id: key,
                answer,
            });
        } else {
            return Err(McpError::params(
                field(),
                "answers nothing this call asked (the keys are those of inputRequests)",
            ));
        }
    }
    Ok(checked)
}

/// The keys and requests a round asks.
#[derive(Debug, Default)]
pub struct Open {
    approvals: BTreeMap<String, ElicitRequest>,
    questions: BTreeMap<String, ElicitRequest>,
}

impl Open {
    /// Whether nothing is open.
    pub fn is_empty(&self) -> bool {
        self.approvals.is_empty() && self.questions.is_empty()
    }

    /// Approval `id` waits, asked by `request`.
    pub fn approval(&mut self, id: &str, request: ElicitRequest) {
        self.approvals.insert(id.to_owned(), request);
    }

    /// Question `id` waits, asked by `request`.
    pub fn question(&mut self, id: &str, request: ElicitRequest) {
        self.questions.insert(id.to_owned(), request);
    }

    /// Approval or question `id` was settled.
    pub fn settled(&mut self, id: &str) {
        self.approvals.remove(id);
        self.questions.remove(id);
    }

    /// The round's `inputRequests` and its state (the run, at `seq`; what
    /// the call has answered so far).
    pub fn into_round(
        self,
        run: &str,
        seq: u64,
        answered: &HashSet<String>,
    ) -> (InputRequests, RoundState) {
        let mut answered: Vec<String> = answered.iter().cloned().collect();
        answered.sort();
        let state = RoundState {
            run: run.to_owned(),
            seq,
            approvals: self.approvals.keys().cloned().collect(),
            questions: self.questions.keys().cloned().collect(),
            answered,
        };
        let requests = self
            .approvals
            .into_iter()
            .chain(self.questions)
            .map(|(key, request)| (key, InputRequest::Elicitation(request)))
            .collect();
        (requests, state)
    }
}

#[cfg(test)]
mod tests {
    use rmcp::model::{ElicitRequestParams, ElicitationAction, ElicitationSchema};
    use serde_json::json;

    use super::*;

    fn asked() -> RoundState {
        RoundState {
            run: "r1".into(),
            seq: 7,
            approvals: vec!["approval:c1".into()],
            questions: vec!["input:c2:1".into()],
            answered: vec!["approval:c0".into()],
        }
    }

    #[test]
    fn the_state_round_trips_and_anything_else_names_request_state() {
        let state = asked();
        assert_eq!(RoundState::decode(&state.encode()).expect("decoded"), state);
        for bad in ["", "x", "{}", r#"{"run": "", "seq": 1}"#, r#"{"run": 3}"#] {
            let e = RoundState::decode(bad).expect_err(bad);
            assert!(e.to_string().starts_with("requestState: "), "{e}");
        }
    }

    #[test]
    fn responses_must_answer_what_was_asked_with_elicitation_results() {
        let state = asked();
        let mut given = InputResponses::new();
        given.insert(
            "approval:c1".into(),
            json!({"action": "accept", "content": {"approve": true}}),
        );
        given.insert("input:c2:1".into(), json!({"action": "decline"}));
        let checked = responses(&state, Some(given.clone())).expect("checked");
        assert!(
            matches!(&checked[0], Response::Approval { approval_id, .. } if approval_id == "approval:c1")
        );
        assert!(matches!(
            &checked[1],
            Response::Question {
                answer: Err(ElicitationAction::Decline),
                ..
            }
        ));
        let mut accepted = given.clone();
        accepted.insert(
            "input:c2:1".into(),
            json!({"action": "accept", "content": {"answer": "Lisbon"}}),
        );
        let checked = responses(&state, Some(accepted)).expect("checked");
        assert!(matches!(&checked[1], Response::Question { answer: Ok(a), .. } if a == "Lisbon"));
        let mut empty = given.clone();
        empty.insert(
            "input:c2:1".into(),
            json!({"action": "accept", "content": {}}),
        );
        let e = responses(&state, Some(empty)).expect_err("no answer");
        assert_eq!(
            e.to_string(),
            r#"inputResponses["input:c2:1"]: accepts without an "answer" in its content"#
        );
        assert!(responses(&state, None).expect("none").is_empty());

        let mut stranger = given.clone();
        stranger.insert("approval:other".into(), json!({"action": "accept"}));
        let e = responses(&state, Some(stranger)).expect_err("not asked");
        assert!(
            e.to_string()
                .starts_with(r#"inputResponses["approval:other"]: "#),
            "{e}"
        );
        let mut malformed = given;
        malformed.insert("input:c2:1".into(), json!({"action": "maybe"}));
        let e = responses(&state, Some(malformed)).expect_err("malformed");
        assert!(
            e.to_string()
                .starts_with(r#"inputResponses["input:c2:1"]: "#),
            "{e}"
        );
    }

    #[test]
    fn a_round_asks_what_is_open_under_its_ids() {
        let request = || {
            ElicitRequest::new(ElicitRequestParams::FormElicitationParams {
                meta: None,
                message: "?".into(),
                requested_schema: ElicitationSchema::new(Default::default()),
            })
        };
        let mut open = Open::default();
        assert!(open.is_empty());
        open.approval("approval:c1", request());
        open.question("input:c2:1", request());
        open.question("input:c3:1", request());
        open.settled("input:c3:1");
        let answered = HashSet::from(["approval:c0".to_owned()]);
        let (requests, state) = open.into_round("r1", 7, &answered);
        assert_eq!(state, asked());
        let wire = serde_json::to_value(&requests).expect("json");
        assert_eq!(wire["approval:c1"]["method"], "elicitation/create");
        assert_eq!(wire["input:c2:1"]["params"]["message"], "?");
        assert_eq!(requests.len(), 2);
    }
}
