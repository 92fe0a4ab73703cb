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

use std::{
    sync::{Mutex, MutexGuard},
    time::Instant,
};

use tokio::sync::Notify;

use crate::catalog::prices::Price;

/// Tokens and/or cost (in billionths of the prices' currency); `None`: no
/// bound.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Limit {
    /// Input and output tokens.
    pub tokens: Option<u64>,
    /// Cost.
    pub cost_nanos: Option<u64>,
}

impl Limit {
    /// Whether it bounds anything.
    pub fn is_some(&self) -> bool {
        self.tokens.is_some() || self.cost_nanos.is_some()
    }
}

#[derive(Debug)]
struct Node {
    name: String,
    parent: Option<usize>,
    limit: Limit,
    spent_tokens: u64,
    spent_cost: u64,
    reserved_tokens: u64,
    reserved_cost: u64,
}

/// What a call asks of the budgets.
#[derive(Debug, Clone, Copy)]
pub struct Need<'a> {
    /// Its input tokens, estimated.
    pub input_tokens: u64,
    /// The most output tokens it may write: its `max_tokens`, else the
    /// model's output limit (`None`: unbounded).
    pub max_output: Option<u32>,
    /// The dearest price among the models it may go to; `None` when one
    /// of them has no price.
    pub price: Option<&'a Price>,
    /// The model without a price, for the message.
    pub unpriced: &'a str,
    /// Tokens the call must leave in every bounded budget (the reserve of
    /// an agent that finishes when one runs out); priced at the output
    /// price for a cost budget.
    pub hold_back: u64,
}

/// A call's reservation: settle it with [`Book::settle`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reservation {
    node: usize,
    tokens: u64,
    cost: u64,
    /// The call's `max_tokens`: the configured one, capped at what the
    /// budgets have left (`None`: no budget bounds it).
    pub max_output: Option<u32>,
}

/// Why a call cannot reserve its worst case now.
#[derive(Debug)]
pub enum Shortfall {
    /// It would fit (or fit better) once calls in flight settle: wait.
    Held,
    /// A budget has too little left, whatever calls in flight settle to.
    Exhausted(Box<Exhausted>),
}

/// A budget with too little left for a call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Exhausted {
    /// The node: `run`, or `agent <name> in <context>`.
    pub budget: String,
    /// Its limit.
    pub limit: Limit,
    /// What it spent.
    pub spent_tokens: u64,
    /// What it spent.
    pub spent_cost: u64,
    /// What calls in flight hold of it.
    pub reserved_tokens: u64,
    /// What calls in flight hold of it.
    pub reserved_cost: u64,
    /// The least the call needs: its input and one output token.
    pub needed_tokens: u64,
    /// The least the call needs, priced.
    pub needed_cost: u64,
    /// A cost budget and a model without a price.
    pub unpriced: Option<String>,
    node: usize,
}

impl Exhausted {
    /// The message a failed run carries, in `currency`.
    pub fn describe(&self, currency: &str) -> String {
        if let Some(model) = &self.unpriced {
            return format!(
                "budget {}: model {model} has no price, so a cost limit cannot bound it (give it a price, or set a token budget only)",
                self.budget
            );
        }
        let mut parts = Vec::new();
        if let Some(t) = self.limit.tokens {
            parts.push(format!(
                "{} of {t} tokens spent{}, the next model call needs at least {}",
                self.spent_tokens,
                held(self.reserved_tokens, ""),
                self.needed_tokens
            ));
        }
        if let Some(c) = self.limit.cost_nanos {
            parts.push(format!(
                "{} of {} {currency} spent{}, the next model call needs at least {}",
                money(self.spent_cost),
                money(c),
                held(self.reserved_cost, currency),
                money(self.needed_cost)
            ));
        }
        format!("budget {} exhausted: {}", self.budget, parts.join("; "))
    }

    /// The budget's node (to raise it).
    pub fn node(&self) -> usize {
        self.node
    }
}

fn held(n: u64, currency: &str) -> String {
    match (n, currency) {
        (0, _) => String::new(),
        (n, "") => format!(" ({n} more held by calls in flight)"),
        (n, c) => format!(" ({} {c} more held by calls in flight)", money(n)),
    }
}

/// Billionths of a currency, as a decimal with up to 6 places.
pub fn money(nanos: u64) -> String {
    let s = format!("{:.6}", nanos as f64 / 1e9);
    let s = s.trim_end_matches('0');
    s.strip_suffix('.').unwrap_or(s).to_owned()
}

/// The budgets of one run.
#[derive(Debug, Default)]
pub struct Book {
    nodes: Vec<Node>,
    /// The node of each context whose agent has a budget of its own.
    by_context: std::collections::HashMap<String, usize>,
}

/// The root: the run's own budget.
pub const RUN: usize = 0;

impl Book {
    /// A book whose root is the run's budget `limit`.
    pub fn new(limit: Limit) -> Self {
        Self {
            nodes: vec![Node {
                name: "run".into(),
                parent: None,
                limit,
                spent_tokens: 0,
                spent_cost: 0,
                reserved_tokens: 0,
                reserved_cost: 0,
            }],
            by_context: Default::default(),
        }
    }

    /// The node a frame in context `ctx` draws from: its own agent's, else
    /// the nearest above it, else the run's.
    pub fn node_of(&self, ctx: &str) -> usize {
        let mut at = ctx;
        loop {
            if let Some(n) = self.by_context.get(at) {
                return *n;
            }
            match at.rfind('.') {
                Some(i) => at = &at[..i],
                None => return RUN,
            }
        }
    }

    /// Agent `agent` takes over context `ctx` (whose parent is `parent`):
    /// with a budget `limit`, a node of its own under its caller's; without,
    /// it draws from its caller's. The node it draws from.
    pub fn enter(&mut self, ctx: &str, parent: &str, agent: &str, limit: Limit) -> usize {
        if !limit.is_some() {
            self.by_context.remove(ctx);
            return self.node_of(ctx);
        }
        let above = if parent.is_empty() {
            RUN
        } else {
            self.node_of(parent)
        };
        let node = self.open(above, format!("agent {agent} in {ctx}"), limit);
        self.by_context.insert(ctx.to_owned(), node);
        node
    }

    /// A node named `name` under `parent`, bounded by `limit`.
    pub fn open(&mut self, parent: usize, name: String, limit: Limit) -> usize {
        self.nodes.push(Node {
            name,
            parent: Some(parent),
            limit,
            spent_tokens: 0,
            spent_cost: 0,
            reserved_tokens: 0,
            reserved_cost: 0,
        });
        self.nodes.len() - 1
    }

    /// Whether any node above `node` (itself included) bounds anything.
    pub fn bounds(&self, node: usize) -> bool {
        self.chain(node).any(|n| self.nodes[n].limit.is_some())
    }

    fn chain(&self, node: usize) -> impl Iterator<Item = usize> + '_ {
        std::iter::successors(Some(node), |n| self.nodes[*n].parent)
    }

    /// Reserves the worst case of a call drawing from `node` on every node
    /// above it, its `max_tokens` capped at what they have left; or the
    /// first node (from `node` up) with too little left. `patient`: a call
    /// that calls in flight keep from its whole worst case is told to wait
    /// ([`Shortfall::Held`]) instead of taking less.
    fn reserve(
        &mut self,
        node: usize,
        need: Need<'_>,
        patient: bool,
    ) -> Result<Reservation, Shortfall> {
        let want = need.max_output.map_or(u64::MAX, u64::from);
        // The cap with what calls in flight hold, and were they settled at
        // nothing.
        let mut cap = want;
        let mut free = want;
        let mut limited = false;
        let mut refusing = None;
        let input_cost = need
            .price
            .map_or(0, |p| p.cost_nanos(need.input_tokens, 0, 0));
        let one_output = need.price.map_or(0, |p| p.cost_nanos(0, 0, 1).max(1));
        let hold_cost = need.price.map_or(0, |p| p.cost_nanos(0, 0, need.hold_back));
        for n in self.chain(node) {
            let b = &self.nodes[n];
            if let Some(limit) = b.limit.tokens {
                limited = true;
                let room = limit
                    .saturating_sub(b.spent_tokens)
                    .saturating_sub(need.hold_back);
                if room <= need.input_tokens {
                    return Err(Shortfall::Exhausted(self.exhausted(n, need, None)));
                }
                free = free.min(room - need.input_tokens);
                let left = room.saturating_sub(b.reserved_tokens);
                if left <= need.input_tokens {
                    refusing.get_or_insert(n);
                    cap = 0;
                } else {
                    cap = cap.min(left - need.input_tokens);
                }
            }
            if let Some(limit) = b.limit.cost_nanos {
                limited = true;
                let Some(price) = need.price else {
                    let unpriced = Some(need.unpriced.to_owned());
                    return Err(Shortfall::Exhausted(self.exhausted(n, need, unpriced)));
                };
                let room = limit.saturating_sub(b.spent_cost).saturating_sub(hold_cost);
                if room < input_cost + one_output {
                    return Err(Shortfall::Exhausted(self.exhausted(n, need, None)));
                }
                free = free.min(price.output_tokens_within(room - input_cost));
                let left = room.saturating_sub(b.reserved_cost);
                if left < input_cost + one_output {
                    refusing.get_or_insert(n);
                    cap = 0;
                } else {
                    cap = cap.min(price.output_tokens_within(left - input_cost));
                }
            }
        }
        if !limited {
            // Nothing bounds the chain: nothing to hold.
            return Ok(Reservation {
                node,
                tokens: 0,
                cost: 0,
                max_output: need.max_output,
            });
        }
        if cap < free && patient {
            return Err(Shortfall::Held);
        }
        if let Some(n) = refusing {
            return Err(Shortfall::Exhausted(self.exhausted(n, need, None)));
        }
        let cap = cap.min(u64::from(u32::MAX));
        let tokens = need.input_tokens + cap;
        let cost = need
            .price
            .map_or(0, |p| p.cost_nanos(need.input_tokens, 0, cap));
        let chain: Vec<usize> = self.chain(node).collect();
        for n in chain {
            self.nodes[n].reserved_tokens += tokens;
            self.nodes[n].reserved_cost += cost;
        }
        Ok(Reservation {
            node,
            tokens,
            cost,
            max_output: Some(cap as u32),
        })
    }

    /// Node `n` refuses a call needing `need`.
    fn exhausted(&self, n: usize, need: Need<'_>, unpriced: Option<String>) -> Box<Exhausted> {
        let b = &self.nodes[n];
        let input_cost = need
            .price
            .map_or(0, |p| p.cost_nanos(need.input_tokens, 0, 0));
        let one_output = need.price.map_or(0, |p| p.cost_nanos(0, 0, 1).max(1));
        Box::new(Exhausted {
            budget: b.name.clone(),
            limit: b.limit,
            spent_tokens: b.spent_tokens,
            spent_cost: b.spent_cost,
            reserved_tokens: b.reserved_tokens,
            reserved_cost: b.reserved_cost,
            needed_tokens: need.input_tokens + 1,
            needed_cost: input_cost + one_output,
            unpriced,
            node: n,
        })
    }

    /// What every node holds for calls in flight: tokens and cost (0 and
    /// 0 once every call settled).
    pub fn held(&self) -> (u64, u64) {
        self.nodes.iter().fold((0, 0), |(t, c), n| {
            (t + n.reserved_tokens, c + n.reserved_cost)
        })
    }

    /// Settles `r` to what the call spent (nothing, when it failed).
    fn settle(&mut self, r: Reservation, tokens: u64, cost: u64) {
        let chain: Vec<usize> = self.chain(r.node).collect();
        for n in chain {
            let b = &mut self.nodes[n];
            b.reserved_tokens -= r.tokens;
            b.reserved_cost -= r.cost;
            b.spent_tokens += tokens;
            b.spent_cost += cost;
        }
    }

    /// Counts a call made before (a resumed run walking its journal) on
    /// every node above `node`.
    pub fn spend(&mut self, node: usize, tokens: u64, cost: u64) {
        let chain: Vec<usize> = self.chain(node).collect();
        for n in chain {
            self.nodes[n].spent_tokens += tokens;
            self.nodes[n].spent_cost += cost;
        }
    }

    /// Raises `node`'s limit by `more` (a person approved it); a bound it
    /// did not have stays unset.
    pub fn raise(&mut self, node: usize, more: Limit) {
        let l = &mut self.nodes[node].limit;
        if let (Some(t), Some(m)) = (l.tokens.as_mut(), more.tokens) {
            *t = t.saturating_add(m);
        }
        if let (Some(c), Some(m)) = (l.cost_nanos.as_mut(), more.cost_nanos) {
            *c = c.saturating_add(m);
        }
    }

    /// `node`'s limit.
    pub fn limit(&self, node: usize) -> Limit {
        self.nodes[node].limit
    }

    /// `node`'s name.
    pub fn name(&self, node: usize) -> &str {
        &self.nodes[node].name
    }

    /// The node named `name` (a raise read back from the journal).
    pub fn find(&self, name: &str) -> Option<usize> {
        self.nodes.iter().position(|n| n.name == name)
    }

    /// What `node` spent: tokens and cost.
    pub fn spent(&self, node: usize) -> (u64, u64) {
        (self.nodes[node].spent_tokens, self.nodes[node].spent_cost)
    }
}

/// A run's budgets ([`Book`]) and the signal that a call in flight settled
/// (what a call waiting for room waits on).
#[derive(Debug, Default)]
pub struct Budgets {
    book: Mutex<Book>,
    settled: Notify,
}

/// What a dropped call spent: tokens and cost (see [`Held`]).
pub type Spent<'a> = &'a (dyn Fn() -> (u64, u64) + Send + Sync);

impl Budgets {
    /// Budgets whose root (the run's) is bounded by `limit`.
    pub fn new(limit: Limit) -> Self {
        Self {
            book: Mutex::new(Book::new(limit)),
            settled: Notify::new(),
        }
    }

    /// The book, even when a panicking call poisoned its lock.
    pub fn lock(&self) -> MutexGuard<'_, Book> {
        self.book.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Reserves `need` for a call drawing from `node` (see
    /// [`Book::reserve`]): while calls in flight keep it from its whole
    /// worst case it waits for them to settle, until `deadline`; then it
    /// takes what is left, or is refused. `spent` says what the call spent
    /// should it be dropped before it settles.
    pub async fn reserve<'a>(
        &'a self,
        node: usize,
        need: Need<'_>,
        deadline: Instant,
        spent: Spent<'a>,
    ) -> Result<Held<'a>, Box<Exhausted>> {
        loop {
            // Listening before looking: a settle between the two is not
            // missed.
            let settled = self.settled.notified();
            tokio::pin!(settled);
            settled.as_mut().enable();
            let patient = Instant::now() < deadline;
            match self.lock().reserve(node, need, patient) {
                Ok(r) => {
                    return Ok(Held {
                        budgets: self,
                        reservation: Some(r),
                        spent,
                    });
                }
                Err(Shortfall::Exhausted(x)) => return Err(x),
                Err(Shortfall::Held) => {}
            }
            let _ = tokio::time::timeout_at(deadline.into(), settled).await;
        }
    }

    /// Raises `node`'s limit by `more` (see [`Book::raise`]); calls
    /// waiting for room look again.
    pub fn raise(&self, node: usize, more: Limit) {
        self.lock().raise(node, more);
        self.settled.notify_waiters();
    }

    fn settle(&self, r: Reservation, tokens: u64, cost: u64) {
        self.lock().settle(r, tokens, cost);
        self.settled.notify_waiters();
    }
}

/// A call's reservation on its run's budgets, held until it is settled
/// ([`Held::settle`]) or dropped — settled then at what the call is known
/// to have spent, so nothing stays held after the call is gone.
pub struct Held<'a> {
    budgets: &'a Budgets,
    reservation: Option<Reservation>,
    spent: Spent<'a>,
}

impl Held<'_> {
    /// The call's `max_tokens`: the worst case reserved for it (`None`:
    /// nothing bounds it).
    pub fn max_output(&self) -> Option<u32> {
        self.reservation.and_then(|r| r.max_output)
    }

    /// Settles the reservation to what the call spent.
    pub fn settle(mut self, tokens: u64, cost: u64) {
        if let Some(r) = self.reservation.take() {
            self.budgets.settle(r, tokens, cost);
        }
    }
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        if let Some(r) = self.reservation.take() {
            let (tokens, cost) = (self.spent)();
            self.budgets.settle(r, tokens, cost);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Reserves at once (not waiting for calls in flight).
    fn take(b: &mut Book, node: usize, need: Need<'_>) -> Result<Reservation, Box<Exhausted>> {
        match b.reserve(node, need, false) {
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
        let first = b.reserve(RUN, need(100, Some(400)), true).expect("whole");
        let second = b.reserve(RUN, need(100, Some(400)), true).expect("whole");
        assert_eq!(second.max_output, Some(400));
        // Nothing is left beside them: a patient third waits...
        assert!(matches!(
            b.reserve(RUN, need(100, Some(400)), true),
            Err(Shortfall::Held)
        ));
        // ...and an impatient one is refused, naming what they hold.
        let e = take(&mut b, RUN, need(100, Some(400))).expect_err("refused");
        assert_eq!(e.reserved_tokens, 1000);
        // The first settles at 150: 350 left, short of the third's 500, and
        // the second still holds 500: it waits.
        b.settle(first, 150, 0);
        assert!(matches!(
            b.reserve(RUN, need(100, Some(400)), true),
            Err(Shortfall::Held)
        ));
        // The second settles: 700 left and nothing held: the third fits.
        b.settle(second, 150, 0);
        let third = b.reserve(RUN, need(100, Some(400)), true).expect("whole");
        assert_eq!(third.max_output, Some(400));
        b.settle(third, 500, 0);
        // 200 left and nothing held: a call short of its worst case takes
        // what is left at once instead of waiting for nothing.
        let last = b.reserve(RUN, need(100, Some(400)), true).expect("capped");
        assert_eq!(last.max_output, Some(100));
        b.settle(last, 200, 0);
        // Spent to the token: refused, waiting or not.
        assert!(matches!(
            b.reserve(RUN, need(1, Some(1)), true),
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
