//! Layer 2: fallbacks. The agent's model first, then its `fallbacks` in
//! order, each taken when the one before failed in a way another model
//! may not ([`moves`]: a rate limit, a server error, a timeout, a
//! connection failure, an open breaker); a context-window error goes on
//! with the `context_window_fallbacks` instead (once). A 400, a refused
//! key, a content filter or a structured-output failure ends the call
//! where it is: another model would be asked the same wrong thing.
//!
//! A model that failed after its text had begun streaming is passed over
//! like any other: its partial text is discarded and the next model starts
//! the turn again; the event that says so ([`CallSink::fell_back`] with
//! `discarded`) tells a watcher to drop what it showed. The turn's record
//! and its `MessageCompleted` hold only the answering model's text.

use std::sync::{
    Arc,
    atomic::{AtomicBool, Ordering},
};

use super::request::{
    Answered, CallError, CallModel, CallSink, ModelCall, Skipped, TryModel, moves,
};
use crate::model::{DeltaSink, Model};

/// Tries the call's models in order.
pub struct Fallbacks<I>(pub I);

/// Passes text on and notes that some went.
struct Started<'a> {
    sink: &'a dyn CallSink,
    started: AtomicBool,
}

#[async_trait::async_trait]
impl DeltaSink for Started<'_> {
    async fn delta(&self, text: String) {
        self.started.store(true, Ordering::Relaxed);
        self.sink.delta(text).await;
    }
}

#[async_trait::async_trait]
impl CallSink for Started<'_> {
    async fn fell_back(&self, from: &str, to: &str, why: &Skipped, discarded: bool) {
        self.sink.fell_back(from, to, why, discarded).await;
    }

    async fn waiting(&self, provider: &str, model: &str, wait: std::time::Duration, ahead: usize) {
        self.sink.waiting(provider, model, wait, ahead).await;
    }
}

#[async_trait::async_trait]
impl<I: TryModel> CallModel for Fallbacks<I> {
    async fn call(&self, call: ModelCall<'_>, sink: &dyn CallSink) -> Result<Answered, CallError> {
        // One model (most agents): no bookkeeping.
        if call.candidates.len() == 1 && call.context_window.is_empty() {
            let model = &call.candidates[0];
            return match self.0.try_model(model, &call, sink).await {
                Ok(turn) => Ok(Answered {
                    turn,
                    model: model.clone(),
                    skipped: Vec::new(),
                }),
                Err(e) => Err(CallError::Model(e, Vec::new())),
            };
        }
        let mut skipped = Vec::new();
        let mut list: &[Arc<dyn Model>] = call.candidates;
        let mut widened = false;
        let mut i = 0;
        loop {
            let model = &list[i];
            let started = Started {
                sink,
                started: AtomicBool::new(false),
            };
            let e = match self.0.try_model(model, &call, &started).await {
                Ok(turn) => {
                    return Ok(Answered {
                        turn,
                        model: model.clone(),
                        skipped,
                    });
                }
                Err(e) => e,
            };
            let Some(why) = moves(&e) else {
                return Err(CallError::Model(e, skipped));
            };
            let next = if why == "context_window" {
                if widened || call.context_window.is_empty() {
                    None
                } else {
                    widened = true;
                    list = call.context_window;
                    i = 0;
                    Some(&list[0])
                }
            } else {
                i += 1;
                list.get(i)
            };
            let Some(next) = next else {
                return Err(CallError::Model(e, skipped));
            };
            let passed = Skipped {
                model: model.reference().to_owned(),
                reason: why,
                message: e.message.clone(),
            };
            sink.fell_back(
                model.reference(),
                next.reference(),
                &passed,
                started.started.load(Ordering::Relaxed),
            )
            .await;
            skipped.push(passed);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;
    use crate::model::{ModelError, ModelErrorKind, ModelRequest, ModelTurn};

    /// A model that fails with `kind` after streaming `partial`, or answers.
    struct Fake {
        reference: String,
        fails: Option<(ModelErrorKind, &'static str)>,
        partial: &'static str,
    }

    #[async_trait::async_trait]
    impl Model for Fake {
        fn reference(&self) -> &str {
            &self.reference
        }
        async fn turn(
            &self,
            _: ModelRequest<'_>,
            sink: &dyn DeltaSink,
        ) -> Result<ModelTurn, ModelError> {
            if !self.partial.is_empty() {
                sink.delta(self.partial.into()).await;
            }
            match self.fails {
                Some((kind, error_type)) => {
                    Err(ModelError::new(&self.reference, kind, error_type, "no"))
                }
                None => Ok(ModelTurn {
                    text: format!("from {}", self.reference),
                    ..Default::default()
                }),
            }
        }
    }

    struct Direct;

    #[async_trait::async_trait]
    impl TryModel for Direct {
        async fn try_model(
            &self,
            model: &Arc<dyn Model>,
            call: &ModelCall<'_>,
            sink: &dyn CallSink,
        ) -> Result<ModelTurn, crate::model::ModelError> {
            model.turn(call.request(call.settings), sink).await
        }
    }

    #[derive(Default)]
    struct Seen(Mutex<Vec<String>>);

    #[async_trait::async_trait]
    impl DeltaSink for Seen {
        async fn delta(&self, text: String) {
            self.0.lock().expect("ok").push(text);
        }
    }

    #[async_trait::async_trait]
    impl CallSink for Seen {
        async fn fell_back(&self, from: &str, to: &str, why: &Skipped, discarded: bool) {
            self.0
                .lock()
                .expect("ok")
                .push(format!("{from}->{to} {} {discarded}", why.reason));
        }
        async fn waiting(&self, _: &str, _: &str, _: std::time::Duration, _: usize) {}
    }

    fn model(
        r: &str,
        fails: Option<(ModelErrorKind, &'static str)>,
        partial: &'static str,
    ) -> Arc<dyn Model> {
        Arc::new(Fake {
            reference: r.into(),
            fails,
            partial,
        })
    }

    async fn run(
        candidates: &[Arc<dyn Model>],
        wide: &[Arc<dyn Model>],
    ) -> (Result<String, String>, Vec<String>) {
        let fixture = crate::model::call::request::TestCall::default();
        let call = fixture.call(candidates, wide, "t", std::time::Duration::from_secs(1));
        let seen = Seen::default();
        let out = match Fallbacks(Direct).call(call, &seen).await {
            Ok(a) => Ok(format!(
                "{} skipped {:?}",
                a.turn.text,
                a.skipped
                    .iter()
                    .map(|s| (s.model.as_str(), s.reason))
                    .collect::<Vec<_>>()
            )),
            Err(CallError::Model(e, skipped)) => {
                Err(format!("{} after {}", e.model, skipped.len()))
            }
            Err(_) => Err("refused".into()),
        };
        (out, seen.0.into_inner().expect("ok"))
    }

    #[tokio::test]
    async fn moves_on_what_another_model_may_answer_and_stops_on_the_rest() {
        use ModelErrorKind::*;
        let (out, seen) = run(
            &[
                model("a:1", Some((RateLimited, "429")), ""),
                model("b:1", Some((Unavailable, "stream")), "half an ans"),
                model("c:1", None, ""),
            ],
            &[],
        )
        .await;
        assert_eq!(
            out.expect("ok"),
            "from c:1 skipped [(\"a:1\", \"rate_limited\"), (\"b:1\", \"unavailable\")]"
        );
        assert_eq!(
            seen,
            [
                "a:1->b:1 rate_limited false",
                "half an ans",
                "b:1->c:1 unavailable true"
            ]
        );
        // A 400 ends the call at the first model.
        let (out, _) = run(
            &[
                model("a:1", Some((Rejected, "400")), ""),
                model("b:1", None, ""),
            ],
            &[],
        )
        .await;
        assert_eq!(out.expect_err("refused"), "a:1 after 0");
        // The last model's failure is the call's.
        let (out, _) = run(
            &[
                model("a:1", Some((Timeout, "timeout")), ""),
                model("b:1", Some((Unavailable, "500")), ""),
            ],
            &[],
        )
        .await;
        assert_eq!(out.expect_err("refused"), "b:1 after 1");
    }

    #[tokio::test]
    async fn a_context_window_error_goes_to_its_own_list_once() {
        use ModelErrorKind::*;
        let too_small = Some((ContextWindow, "400"));
        let (out, _) = run(
            &[model("a:1", too_small, ""), model("b:1", None, "")],
            &[model("w:1", None, "")],
        )
        .await;
        assert_eq!(
            out.expect("ok"),
            "from w:1 skipped [(\"a:1\", \"context_window\")]"
        );
        // Without that list it ends the call (the ordinary fallbacks have
        // no larger window).
        let (out, _) = run(&[model("a:1", too_small, ""), model("b:1", None, "")], &[]).await;
        assert_eq!(out.expect_err("refused"), "a:1 after 0");
        // The widened list's own context-window error ends it.
        let (out, _) = run(
            &[model("a:1", too_small, "")],
            &[model("w:1", too_small, ""), model("w:2", None, "")],
        )
        .await;
        assert_eq!(out.expect_err("refused"), "w:1 after 1");
    }
}
