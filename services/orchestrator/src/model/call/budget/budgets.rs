//! A run's budgets behind a lock, the wait for room, and a call's hold.

use std::{
    sync::{Arc, Mutex, MutexGuard},
    time::Instant,
};

use tokio::sync::Notify;

use super::{
    book::{Book, Need, RUN, Reservation, Shortfall},
    exhausted::Exhausted,
    limit::Limit,
};

/// A run's budgets ([`Book`]) and the signal that a call in flight settled
/// (what a call waiting for room waits on).
#[derive(Debug, Default)]
pub struct Budgets {
    book: Mutex<Book>,
    settled: Notify,
    /// The budget shared with other runs (an experiment's), above the
    /// run's own root.
    shared: Option<Arc<Budgets>>,
}

/// What a dropped call spent: tokens and cost (see [`Held`]).
pub type Spent<'a> = &'a (dyn Fn() -> (u64, u64) + Send + Sync);

impl Budgets {
    /// Budgets whose root (the run's) is bounded by `limit`.
    pub fn new(limit: Limit) -> Self {
        Self {
            book: Mutex::new(Book::new(limit)),
            settled: Notify::new(),
            shared: None,
        }
    }

    /// A budget runs share, named `name` (`experiment <name>`) in what a
    /// refused call says: give it to each run with [`Budgets::under`].
    pub fn shared(name: String, limit: Limit) -> Arc<Self> {
        Arc::new(Self {
            book: Mutex::new(Book::named(name, limit)),
            settled: Notify::new(),
            shared: None,
        })
    }

    /// A run's budgets (its own root bounded by `limit`) under `shared`,
    /// when it has one: every call reserves on both in one step.
    pub fn under(limit: Limit, shared: Option<Arc<Budgets>>) -> Self {
        Self {
            shared,
            ..Self::new(limit)
        }
    }

    /// Whether anything bounds a call drawing from `node`: a node above
    /// it, or the budget the run shares.
    pub fn bounds(&self, node: usize) -> bool {
        self.lock().bounds(node) || self.shared.as_ref().is_some_and(|s| s.lock().bounds(RUN))
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
            // Another run settling on the shared budget makes room too.
            let others = self.shared.as_ref().map(|s| s.settled.notified());
            let mut others = std::pin::pin!(others);
            if let Some(o) = others.as_mut().as_pin_mut() {
                o.enable();
            }
            let patient = Instant::now() < deadline;
            let reserved = {
                let mut book = self.lock();
                let mut shared = self.shared.as_ref().map(|s| s.lock());
                book.reserve(node, need, patient, shared.as_deref_mut())
            };
            match reserved {
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
            let either = async {
                match others.as_mut().as_pin_mut() {
                    Some(o) => {
                        tokio::select! {
                            () = settled => {}
                            () = o => {}
                        }
                    }
                    None => settled.await,
                }
            };
            let _ = tokio::time::timeout_at(deadline.into(), either).await;
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
        if let Some(shared) = &self.shared {
            let root = Reservation { node: RUN, ..r };
            shared.lock().settle(root, tokens, cost);
            shared.settled.notify_waiters();
        }
    }

    /// The root's name (a shared budget's: `experiment <name>`).
    pub fn name(&self) -> String {
        self.lock().name(RUN).to_owned()
    }

    /// Whether the root has nothing left to spend (calls in flight aside).
    pub fn spent_out(&self) -> bool {
        let book = self.lock();
        let limit = book.limit(RUN);
        let (tokens, cost) = book.spent(RUN);
        limit.tokens.is_some_and(|l| tokens >= l) || limit.cost_nanos.is_some_and(|l| cost >= l)
    }

    /// What the budget runs share holds for calls in flight and what it
    /// spent: `(held tokens, held cost, spent tokens, spent cost)`.
    pub fn shared_state(&self) -> (u64, u64, u64, u64) {
        let book = self.lock();
        let (held_tokens, held_cost) = book.held();
        let (spent_tokens, spent_cost) = book.spent(RUN);
        (held_tokens, held_cost, spent_tokens, spent_cost)
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
