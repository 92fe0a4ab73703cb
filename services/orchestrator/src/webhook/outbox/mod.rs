//! Where deliveries wait, in order per stream (`{run_id}/{sub}`): in the
//! process (memory mode) or in Redis (durable runs), where one replica at
//! a time holds a stream (a lease) and a replica that dies leaves it to
//! the next one whose claim finds its lease lapsed.
//!
//! The Redis outbox is written in three places, so that nothing is lost
//! and no stream is made by two replicas at once:
//!
//! - a durable run's deliveries are pushed by the same script that logs
//!   their events (`run::durable`'s append, fenced by the run's epoch),
//!   after the stream was marked due in the due set (`mark_due`), so a
//!   replica killed between the two leaves a due stream at worst;
//! - a claim moves due streams a lease into the future and takes each
//!   stream's lease key (`SET NX`); one whose key another holds is left;
//! - a holder that finds its stream empty removes it from the due set
//!   only if nobody marked it due since its claim (the score is still its
//!   claim's), so a push racing the removal is never stranded.

pub mod entry;
pub mod memory;
pub mod redis;

pub use entry::{Claim, Dead, Head};

use super::delivery::Delivery;
use crate::error::Error;

/// The outbox of this server.
pub enum Outbox {
    /// In the process (boxed, as the other: one pointer either way).
    Memory(Box<memory::MemoryOutbox>),
    /// In Redis (boxed: its scripts make it large).
    Redis(Box<redis::RedisOutbox>),
}

impl Outbox {
    /// Queues deliveries at the ends of their streams (memory mode, and
    /// redeliveries in Redis).
    pub async fn push(&self, deliveries: Vec<Delivery>) -> Result<(), Error> {
        match self {
            Self::Memory(m) => {
                m.push(deliveries);
                Ok(())
            }
            Self::Redis(r) => r.push(&deliveries).await,
        }
    }

    /// Takes up to `max` streams that are due and free.
    pub async fn claim(&self, max: usize) -> Result<Vec<Claim>, Error> {
        match self {
            Self::Memory(m) => Ok(m.claim(max)),
            Self::Redis(r) => r.claim(max).await,
        }
    }

    /// The head of a held stream (`Ok(None)`: empty); `Err` when the
    /// lease is lost.
    pub async fn head(&self, claim: &Claim) -> Result<Option<Head>, Error> {
        match self {
            Self::Memory(m) => Ok(m.head(claim)),
            Self::Redis(r) => r.head(claim).await,
        }
    }

    /// Removes the head `raw` (delivered, or dead); false when the lease
    /// was lost or the head is another.
    pub async fn pop(&self, claim: &Claim, raw: &str) -> Result<bool, Error> {
        match self {
            Self::Memory(m) => Ok(m.pop(claim, raw)),
            Self::Redis(r) => r.pop(claim, raw).await,
        }
    }

    /// Replaces the head `raw` by `updated` (a failed try counted) and
    /// lets the stream go until `after_ms` from now.
    pub async fn retry(
        &self,
        claim: &Claim,
        raw: &str,
        updated: &Delivery,
        after_ms: u64,
    ) -> Result<bool, Error> {
        match self {
            Self::Memory(m) => Ok(m.retry(claim, raw, updated, after_ms)),
            Self::Redis(r) => r.retry(claim, raw, updated, after_ms).await,
        }
    }

    /// Lets a held stream go, untried, until `after_ms` from now (its
    /// head waits out a backoff).
    pub async fn defer(&self, claim: &Claim, after_ms: u64) -> Result<(), Error> {
        match self {
            Self::Memory(m) => {
                m.defer(claim, after_ms);
                Ok(())
            }
            Self::Redis(r) => r.defer(claim, after_ms).await,
        }
    }

    /// Lets an emptied (or fenced) stream go.
    pub async fn release(&self, claim: &Claim) -> Result<(), Error> {
        match self {
            Self::Memory(m) => {
                m.release(claim);
                Ok(())
            }
            Self::Redis(r) => r.release(claim).await,
        }
    }

    /// Keeps a dead letter (at most `max` per tenant).
    pub async fn bury(&self, dead: &Dead, max: usize) -> Result<(), Error> {
        match self {
            Self::Memory(m) => {
                m.bury(dead, max);
                Ok(())
            }
            Self::Redis(r) => r.bury(dead, max).await,
        }
    }

    /// A tenant's dead letters, newest first, at most `max`.
    pub async fn dead(&self, tenant: &str, max: usize) -> Result<Vec<Dead>, Error> {
        match self {
            Self::Memory(m) => Ok(m.dead(tenant, max)),
            Self::Redis(r) => r.dead(tenant, max).await,
        }
    }

    /// Takes a tenant's dead letter out of the list (`None`: no such).
    pub async fn unbury(&self, tenant: &str, id: &str) -> Result<Option<Dead>, Error> {
        match self {
            Self::Memory(m) => Ok(m.unbury(tenant, id)),
            Self::Redis(r) => r.unbury(tenant, id).await,
        }
    }

    /// Deliveries waiting (memory mode only; Redis says `None`).
    pub fn pending(&self) -> Option<usize> {
        match self {
            Self::Memory(m) => Some(m.pending()),
            Self::Redis(_) => None,
        }
    }
}
