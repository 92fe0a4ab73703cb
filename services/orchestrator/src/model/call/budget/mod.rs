//! A run's budgets: one tree per run ([`Book`]), the run's own budget at
//! its root (the request's `limits.budget`), a node per call of an agent
//! that has a `budget` under the node of its caller. A frame draws from
//! the nearest node above it, so a sub-agent, a handoff or a pipeline step
//! spends what its caller has left.
//!
//! Before a model call its worst case is reserved on every node from the
//! frame's up to the root, in one step under the book's lock: the input
//! tokens (the model's estimate, see `Model::estimate_input_tokens`) and
//! the most output tokens it may write — its `max_tokens`, else the
//! model's output limit (`Model::max_output_tokens`) — capped at what
//! every node has left. A node with less left than the input and one
//! output token refuses the call ([`Exhausted`]). After the call the
//! reservation is settled to the real usage (released, when the call
//! failed). Parallel calls reserve one after another, so together they
//! cannot spend more than a node holds: the output is bounded by the
//! provider keeping to `max_tokens` (the cap is sent as the call's
//! `max_tokens`); the input by the estimate, which for HTTP providers errs
//! high (a provider counting more input tokens than estimated spends the
//! difference).
//!
//! A call that does not fit whole only because of what other calls in
//! flight hold ([`Shortfall::Held`]) waits for them to settle, at most the
//! model timeout ([`Budgets::reserve`]); after that it takes what is left.
//!
//! A reservation is a guard ([`Held`]): dropped unsettled (the run was
//! cancelled, its caller left, a timeout or fencing dropped the call) it
//! is settled at what the call is known to have spent — nothing before its
//! model streamed, else its input and the text it streamed — so a
//! cancelled call costs what it spent, never what it held.
//!
//! A cost budget prices the worst case at the dearest of the models the
//! call may go to; a model without a price cannot be bounded by cost, and
//! a cost budget refuses to call it.
//!
//! Runs may share one more budget above their own roots: an experiment's
//! ([`Budgets::under`]). It is one more node at the top of every chain,
//! reserved in the same step (the run's lock, then the shared one's: the
//! shared book never takes a run's lock, so the two cannot wait on each
//! other), so runs going at once cannot spend past it together; a call
//! held back by another run's reservation waits for it as for its own
//! run's. Nobody in a run may raise it (as the run's own root).

mod book;
mod budgets;
mod exhausted;
mod limit;

pub use book::{Book, Need, RUN, Reservation, Shortfall};
pub use budgets::{Budgets, Held, Spent};
pub use exhausted::{Exhausted, money};
pub use limit::Limit;

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use super::*;

    /// Reserves at once (not waiting for calls in flight).
    fn take(b: &mut Book, node: usize, need: Need<'_>) -> Result<Reservation, Box<Exhausted>> {
        match b.reserve(node, need, false, None) {
            Ok(r) => Ok(r),
            Err(Shortfall::Exhausted(x)) => Err(x),
            Err(Shortfall::Held) => panic!("an impatient call never waits"),
        }
    }

    fn need(input: u64, max: Option<u32>) -> Need<'static> {
        Need {
            input_tokens: input,
            max_output: max,
            price: None,
            unpriced: "m:x",
            hold_back: 0,
        }
    }

    #[test]
    fn frames_draw_from_their_agents_node_else_their_callers() {
        let limit = |t| Limit {
            tokens: Some(t),
            cost_nanos: None,
        };
        let mut b = Book::new(limit(1000));
        assert_eq!(b.enter("root", "", "lead", Limit::default()), RUN);
        let helper = b.enter("root.helper.1", "root", "helper", limit(100));
        assert_eq!(b.name(helper), "agent helper in root.helper.1");
        // Its sub-agents and pipeline steps draw from it.
        assert_eq!(
            b.enter("root.helper.1.x.1", "root.helper.1", "x", Limit::default()),
            helper
        );
        assert_eq!(b.node_of("root.helper.1.run_pipeline.1.a"), helper);
        // A second call of the agent has a node of its own.
        let again = b.enter("root.helper.2", "root", "helper", limit(100));
        assert_ne!(again, helper);
        // A handoff in root.helper.1 to an agent without a budget draws
        // from what the caller has.
        assert_eq!(
            b.enter("root.helper.1", "root", "other", Limit::default()),
            RUN
        );
        assert_eq!(b.node_of("root.helper.1.x.1"), RUN);
        assert_eq!(b.find("agent helper in root.helper.2"), Some(again));
    }

    #[test]
    fn a_call_fits_at_the_limit_and_not_one_token_over() {
        let mut b = Book::new(Limit {
            tokens: Some(100),
            cost_nanos: None,
        });
        // 99 input + 1 output fits exactly: max_tokens capped at 1.
        let r = take(&mut b, RUN, need(99, Some(500))).expect("ok");
        assert_eq!(r.max_output, Some(1));
        b.settle(r, 0, 0);
        let e = take(&mut b, RUN, need(100, Some(500))).expect_err("refused");
        assert_eq!((e.needed_tokens, e.spent_tokens), (101, 0));
        assert_eq!(
            e.describe("USD"),
            "budget run exhausted: 0 of 100 tokens spent, the next model call needs at least 101"
        );
        // A reserve held back for a last answer counts as spent.
        let e = take(
            &mut b,
            RUN,
            Need {
                hold_back: 50,
                ..need(50, None)
            },
        )
        .expect_err("refused");
        assert_eq!(e.needed_tokens, 51);
        let r = take(
            &mut b,
            RUN,
            Need {
                hold_back: 49,
                ..need(50, None)
            },
        )
        .expect("ok");
        assert_eq!(r.max_output, Some(1));
        b.settle(r, 0, 0);
    }

    #[test]
    fn reservations_of_calls_in_flight_bound_the_next_and_settle_to_what_was_spent() {
        let mut b = Book::new(Limit {
            tokens: Some(1000),
            cost_nanos: None,
        });
        let agent = b.open(
            RUN,
            "agent a in root.a.1".into(),
            Limit {
                tokens: Some(300),
                cost_nanos: None,
            },
        );
        // Under the agent's 300: 100 in, capped at 200 out.
        let first = take(&mut b, agent, need(100, None)).expect("ok");
        assert_eq!(first.max_output, Some(200));
        // The agent's node is held whole: a second call in it is refused,
        // naming it and what the first holds.
        let e = take(&mut b, agent, need(10, None)).expect_err("refused");
        assert_eq!(
            (e.budget.as_str(), e.reserved_tokens),
            ("agent a in root.a.1", 300)
        );
        assert!(
            e.describe("")
                .contains("(300 more held by calls in flight)"),
            "{}",
            e.describe("")
        );
        // The run's other 700 are free beside it.
        let beside = take(&mut b, RUN, need(100, Some(50))).expect("ok");
        assert_eq!(beside.max_output, Some(50));
        b.settle(first, 130, 0);
        b.settle(beside, 120, 0);
        assert_eq!(b.spent(agent), (130, 0));
        assert_eq!(b.spent(RUN), (250, 0));
        // Unbounded chains keep the configured max_tokens, and reserve
        // nothing.
        let mut free = Book::new(Limit::default());
        let r = take(&mut free, RUN, need(10, Some(7))).expect("ok");
        assert_eq!((r.max_output, r.tokens), (Some(7), 0));
        let r = take(&mut free, RUN, need(10, None)).expect("ok");
        assert_eq!((r.max_output, r.tokens), (None, 0));
    }

    #[test]
    fn a_call_kept_from_its_worst_case_by_calls_in_flight_waits_and_one_short_of_the_limit_does_not()
     {
        let mut b = Book::new(Limit {
            tokens: Some(1000),
            cost_nanos: None,
        });
        // 100 in, at most 400 out: two fit whole.
        let first = b
            .reserve(RUN, need(100, Some(400)), true, None)
            .expect("whole");
        let second = b
            .reserve(RUN, need(100, Some(400)), true, None)
            .expect("whole");
        assert_eq!(second.max_output, Some(400));
        // Nothing is left beside them: a patient third waits...
        assert!(matches!(
            b.reserve(RUN, need(100, Some(400)), true, None),
            Err(Shortfall::Held)
        ));
        // ...and an impatient one is refused, naming what they hold.
        let e = take(&mut b, RUN, need(100, Some(400))).expect_err("refused");
        assert_eq!(e.reserved_tokens, 1000);
        // The first settles at 150: 350 left, short of the third's 500, and
        // the second still holds 500: it waits.
        b.settle(first, 150, 0);
        assert!(matches!(
            b.reserve(RUN, need(100, Some(400)), true, None),
            Err(Shortfall::Held)
        ));
        // The second settles: 700 left and nothing held: the third fits.
        b.settle(second, 150, 0);
        let third = b
            .reserve(RUN, need(100, Some(400)), true, None)
            .expect("whole");
        assert_eq!(third.max_output, Some(400));
        b.settle(third, 500, 0);
        // 200 left and nothing held: a call short of its worst case takes
        // what is left at once instead of waiting for nothing.
        let last = b
            .reserve(RUN, need(100, Some(400)), true, None)
            .expect("capped");
        assert_eq!(last.max_output, Some(100));
        b.settle(last, 200, 0);
        // Spent to the token: refused, waiting or not.
        assert!(matches!(
            b.reserve(RUN, need(1, Some(1)), true, None),
            Err(Shortfall::Exhausted(_))
        ));
        assert_eq!((b.spent(RUN), b.held()), ((1000, 0), (0, 0)));
    }

    #[tokio::test]
    async fn a_dropped_reservation_is_settled_at_what_the_call_spent_and_wakes_a_waiting_call() {
        let budgets = Budgets::new(Limit {
            tokens: Some(1000),
            cost_nanos: None,
        });
        let far = Instant::now() + std::time::Duration::from_secs(30);
        let nothing = || (0, 0);
        let streamed = || (120, 0);
        let first = budgets
            .reserve(RUN, need(100, Some(900)), far, &nothing)
            .await
            .expect("whole");
        assert_eq!(first.max_output(), Some(900));
        // A second call waits for the first's hold...
        let waiting = budgets.reserve(RUN, need(100, Some(400)), far, &nothing);
        tokio::pin!(waiting);
        assert!(
            tokio::time::timeout(std::time::Duration::from_millis(50), waiting.as_mut())
                .await
                .is_err()
        );
        // ...and goes once the first is dropped (cancelled), which costs
        // nothing: it streamed nothing.
        drop(first);
        let second = waiting.await.expect("whole");
        assert_eq!(budgets.lock().held(), (500, 0));
        // Dropped after streaming: what it streamed is spent.
        let third = budgets
            .reserve(RUN, need(100, Some(100)), far, &streamed)
            .await
            .expect("whole");
        drop(third);
        second.settle(150, 0);
        let (spent, held) = {
            let book = budgets.lock();
            (book.spent(RUN), book.held())
        };
        assert_eq!((spent, held), ((270, 0), (0, 0)));
        // Past its deadline a call takes what is left instead of waiting.
        let big = budgets
            .reserve(RUN, need(100, Some(600)), far, &nothing)
            .await
            .expect("whole");
        let now = Instant::now();
        let short = budgets
            .reserve(RUN, need(10, Some(500)), now, &nothing)
            .await
            .expect("what is left");
        assert_eq!(short.max_output(), Some(20));
        drop((big, short));
        assert_eq!(budgets.lock().held(), (0, 0));
    }

    #[tokio::test]
    async fn runs_under_one_shared_budget_reserve_together_and_wait_for_each_other() {
        let pool = Budgets::shared(
            "experiment nightly".into(),
            Limit {
                tokens: Some(1000),
                cost_nanos: None,
            },
        );
        // Two runs without budgets of their own, one with.
        let a = Budgets::under(Limit::default(), Some(pool.clone()));
        let b = Budgets::under(
            Limit {
                tokens: Some(5000),
                cost_nanos: None,
            },
            Some(pool.clone()),
        );
        assert!(a.bounds(RUN) && b.bounds(RUN));
        let far = Instant::now() + std::time::Duration::from_secs(30);
        let nothing = || (0, 0);
        let first = a
            .reserve(RUN, need(100, Some(700)), far, &nothing)
            .await
            .expect("whole");
        // The other run's call does not fit beside it: it waits for it.
        let waiting = b.reserve(RUN, need(100, Some(400)), far, &nothing);
        tokio::pin!(waiting);
        assert!(
            tokio::time::timeout(std::time::Duration::from_millis(50), waiting.as_mut())
                .await
                .is_err()
        );
        first.settle(300, 0);
        let second = waiting.await.expect("whole, once the first settled");
        assert_eq!(second.max_output(), Some(400));
        assert_eq!(pool.shared_state(), (500, 0, 300, 0));
        // Past its deadline a call takes what the shared budget has left,
        // and is refused by name once it has none.
        let now = Instant::now();
        let third = a
            .reserve(RUN, need(100, Some(900)), now, &nothing)
            .await
            .expect("what is left");
        assert_eq!(third.max_output(), Some(100));
        let refused = b
            .reserve(RUN, need(10, Some(10)), now, &nothing)
            .await
            .err()
            .expect("refused");
        assert_eq!(refused.budget, "experiment nightly");
        assert_eq!(refused.node(), RUN, "nobody in a run may raise it");
        // A dropped call is settled on both at what it spent.
        drop(third);
        second.settle(450, 0);
        assert_eq!(pool.shared_state(), (0, 0, 750, 0));
        assert_eq!((a.lock().held(), b.lock().held()), ((0, 0), (0, 0)));
        assert_eq!(
            (a.lock().spent(RUN), b.lock().spent(RUN)),
            ((300, 0), (450, 0))
        );
    }

    #[test]
    fn cost_budgets_cap_output_at_the_price_and_refuse_unpriced_models() {
        let price = crate::catalog::prices::Prices::new(
            &[(
                "m:x".to_owned(),
                serde_norway::from_str("{input: 1.0, output: 2.0}").expect("ok"),
            )]
            .into_iter()
            .collect(),
            None,
            std::path::Path::new("."),
        )
        .expect("ok");
        let p = price.of("m:x").expect("ok");
        // 1 000 nanos per input token, 2 000 per output token; 0.01 left.
        let mut b = Book::new(Limit {
            tokens: None,
            cost_nanos: Some(10_000_000),
        });
        let r = take(
            &mut b,
            RUN,
            Need {
                price: Some(p),
                ..need(1000, None)
            },
        )
        .expect("ok");
        // (10 000 000 - 1 000 000) / 2 000 = 4 500 output tokens.
        assert_eq!(r.max_output, Some(4500));
        b.settle(r, 1100, 1_200_000);
        let e = take(&mut b, RUN, need(10, None)).expect_err("refused");
        assert!(
            e.describe("USD").contains("has no price"),
            "{}",
            e.describe("USD")
        );
        b.raise(
            RUN,
            Limit {
                tokens: Some(5),
                cost_nanos: Some(1),
            },
        );
        assert_eq!(
            b.limit(RUN),
            Limit {
                tokens: None,
                cost_nanos: Some(10_000_001)
            }
        );
        assert_eq!(money(1_200_000), "0.0012");
        assert_eq!(money(2_000_000_000), "2");
    }
}
