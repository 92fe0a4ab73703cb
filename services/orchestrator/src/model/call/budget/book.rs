//! One run's tree of budgets: reserving a call's worst case on every node
//! above it, settling it, counting what was spent.

use super::{exhausted::Exhausted, limit::Limit};
use crate::catalog::prices::Price;

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
    pub(super) node: usize,
    pub(super) tokens: u64,
    pub(super) cost: u64,
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
        Self::named("run".into(), limit)
    }

    /// A book whose root, named `name`, is bounded by `limit`.
    pub(super) fn named(name: String, limit: Limit) -> Self {
        Self {
            nodes: vec![Node {
                name,
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
    /// above it — and on `shared`'s root, the budget its run shares with
    /// others — its `max_tokens` capped at what they have left; or the
    /// first node (from `node` up) with too little left. `patient`: a call
    /// that calls in flight keep from its whole worst case is told to wait
    /// ([`Shortfall::Held`]) instead of taking less.
    pub(super) fn reserve(
        &mut self,
        node: usize,
        need: Need<'_>,
        patient: bool,
        shared: Option<&mut Book>,
    ) -> Result<Reservation, Shortfall> {
        let mut scan = Scan::new(need);
        for n in self.chain(node) {
            match scan.look(&self.nodes[n], need) {
                Err(unpriced) => {
                    return Err(Shortfall::Exhausted(self.exhausted(n, need, unpriced)));
                }
                Ok(true) => {
                    scan.refusing.get_or_insert((false, n));
                }
                Ok(false) => {}
            }
        }
        if let Some(above) = shared.as_deref() {
            match scan.look(&above.nodes[RUN], need) {
                Err(unpriced) => {
                    return Err(Shortfall::Exhausted(above.exhausted_shared(need, unpriced)));
                }
                Ok(true) => {
                    scan.refusing.get_or_insert((true, RUN));
                }
                Ok(false) => {}
            }
        }
        if !scan.limited {
            // Nothing bounds the chain: nothing to hold.
            return Ok(Reservation {
                node,
                tokens: 0,
                cost: 0,
                max_output: need.max_output,
            });
        }
        if scan.cap < scan.free && patient {
            return Err(Shortfall::Held);
        }
        match (scan.refusing, shared.as_deref()) {
            (Some((true, _)), Some(above)) => {
                return Err(Shortfall::Exhausted(above.exhausted_shared(need, None)));
            }
            (Some((_, n)), _) => return Err(Shortfall::Exhausted(self.exhausted(n, need, None))),
            (None, _) => {}
        }
        let cap = scan.cap.min(u64::from(u32::MAX));
        let tokens = need.input_tokens + cap;
        let cost = need
            .price
            .map_or(0, |p| p.cost_nanos(need.input_tokens, 0, cap));
        let chain: Vec<usize> = self.chain(node).collect();
        for n in chain {
            self.nodes[n].reserved_tokens += tokens;
            self.nodes[n].reserved_cost += cost;
        }
        if let Some(above) = shared {
            above.nodes[RUN].reserved_tokens += tokens;
            above.nodes[RUN].reserved_cost += cost;
        }
        Ok(Reservation {
            node,
            tokens,
            cost,
            max_output: Some(cap as u32),
        })
    }

    /// The shared root refuses a call needing `need`: named as it is, and
    /// not to be raised by anyone in the run (its node is the run's).
    fn exhausted_shared(&self, need: Need<'_>, unpriced: Option<String>) -> Box<Exhausted> {
        self.exhausted(RUN, need, unpriced)
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
    pub(super) fn settle(&mut self, r: Reservation, tokens: u64, cost: u64) {
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

/// What the nodes above a call leave it, looked at one by one.
struct Scan {
    /// The most output it may reserve now, with what calls in flight hold.
    cap: u64,
    /// The most it could reserve were calls in flight settled at nothing.
    free: u64,
    /// Whether any node bounds anything.
    limited: bool,
    /// The first node with too little left now (`true`: the shared root).
    refusing: Option<(bool, usize)>,
    input_cost: u64,
    one_output: u64,
    hold_cost: u64,
}

impl Scan {
    fn new(need: Need<'_>) -> Self {
        let want = need.max_output.map_or(u64::MAX, u64::from);
        Self {
            cap: want,
            free: want,
            limited: false,
            refusing: None,
            input_cost: need
                .price
                .map_or(0, |p| p.cost_nanos(need.input_tokens, 0, 0)),
            one_output: need.price.map_or(0, |p| p.cost_nanos(0, 0, 1).max(1)),
            hold_cost: need.price.map_or(0, |p| p.cost_nanos(0, 0, need.hold_back)),
        }
    }

    /// Takes node `b` into account; `Err`: it refuses the call whatever
    /// calls in flight settle to (with the model without a price, when a
    /// cost budget cannot bound it); `Ok(true)`: it leaves nothing now
    /// (calls in flight hold the rest).
    fn look(&mut self, b: &Node, need: Need<'_>) -> Result<bool, Option<String>> {
        let mut short = false;
        if let Some(limit) = b.limit.tokens {
            self.limited = true;
            let room = limit
                .saturating_sub(b.spent_tokens)
                .saturating_sub(need.hold_back);
            if room <= need.input_tokens {
                return Err(None);
            }
            self.free = self.free.min(room - need.input_tokens);
            let left = room.saturating_sub(b.reserved_tokens);
            if left <= need.input_tokens {
                self.cap = 0;
                short = true;
            } else {
                self.cap = self.cap.min(left - need.input_tokens);
            }
        }
        if let Some(limit) = b.limit.cost_nanos {
            self.limited = true;
            let Some(price) = need.price else {
                return Err(Some(need.unpriced.to_owned()));
            };
            let room = limit
                .saturating_sub(b.spent_cost)
                .saturating_sub(self.hold_cost);
            if room < self.input_cost + self.one_output {
                return Err(None);
            }
            self.free = self
                .free
                .min(price.output_tokens_within(room - self.input_cost));
            let left = room.saturating_sub(b.reserved_cost);
            if left < self.input_cost + self.one_output {
                self.cap = 0;
                short = true;
            } else {
                self.cap = self
                    .cap
                    .min(price.output_tokens_within(left - self.input_cost));
            }
        }
        Ok(short)
    }
}
