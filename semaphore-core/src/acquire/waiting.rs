//! [`acquire`](super::acquire)'s last phase: a borrower [`Waiting`] in its
//! queues.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use super::{Borrowing, Unsure, next_backoff};
use crate::cancel::{Answer, InFlight, QueuePlace, Step};
use crate::clock::truncate_ms;
use crate::{
    error::Error, error::Result, id::PoolId, id::WaiterId, lease::Lease, primitives::Store,
};

/// A borrower waiting in its queues ([`acquire`](super::acquire)'s last phase): woken by
/// its turn, the earliest expiry it was told of, a retry's pause or its
/// deadline, it takes a lease handed to it or asks the store as the head.
/// Its place leaves the store's queue before its ticket leaves this
/// process's (fields drop in order).
pub(super) struct Waiting<'a> {
    pub(super) place: QueuePlace<'a>,
    pub(super) ticket: crate::wait::Ticket<'a>,
    pub(super) timeout: crate::clock::Sleep,
    pub(super) next_expiry: Option<crate::clock::Sleep>,
    /// A retryable storage failure while waiting (a connection lost, a
    /// lock held too long), retried with backoff until the wait runs out,
    /// and then reported as itself, never as exhausted; with the last pause.
    pub(super) failed: Option<(Error, Duration)>,
    pub(super) retry: Option<std::pin::Pin<Box<tokio::time::Sleep>>>,
    /// The drain a waiting borrower last found, reported if its wait runs
    /// out while the pool still drains.
    pub(super) drained: Option<Error>,
    pub(super) first_ask: Option<PoolId>,
    pub(super) weight: u32,
}

/// What an ask as the head led to ([`Waiting::ask`]).
enum Asked<G> {
    /// Wait on.
    Wait,
    /// The store granted it: its place in the store's queue is gone.
    Granted(G),
    /// The borrow ends with this error.
    Failed(Error),
}

impl<'a> Waiting<'a> {
    /// Waits until granted, handed a lease, failed or out of time.
    pub(super) async fn run<A, E, F>(
        &mut self,
        borrowing: &mut Borrowing<'a, E, F>,
        unsure: &mut Unsure<'a>,
    ) -> Result<A::Granted>
    where
        A: Answer,
        E: Fn() -> Error + Send,
        F: FnMut(SystemTime, Option<WaiterId>, bool) -> InFlight<A> + Send,
    {
        let (store, pools) = (borrowing.store, borrowing.pools);
        loop {
            let timed_out = self.next_wake().await;
            if let Some(lease) = self.ticket.take_lease() {
                // A return in this process granted to us in its own step; one
                // that came before the deadline still counts.
                return Ok(self.handed::<A>(lease));
            }
            if timed_out {
                let failed = self.failed.take().map(|(e, _)| e);
                let drained = self.drained.take();
                return Err(failed.or(drained).unwrap_or_else(&borrowing.exhausted));
            }
            if let Some(at) = self.ticket.take_next_expiry() {
                // A hand-off left the pool full and made us head: it told us
                // the earliest expiry, so there is nothing to ask.
                self.next_expiry = at.map(|at| store.clock().sleep_until(at));
                continue;
            }
            if let Some(pool) = self.ticket.take_drained() {
                return Err(Error::Draining { pool });
            }
            if self.ticket.is_aside() {
                // Woken as the first set aside: check the count for all.
                weigh(store, pools[0]).await?;
                self.next_expiry = None;
            }
            if !self.ticket.is_head() {
                continue;
            }
            if !self.ticket.start_asking() {
                // A return in this process claimed it to hand it a slot
                // (the claim wakes it either way), or has just handed it
                // one: asking now could find that very lease again (one
                // handed through the store's queue) and hold it twice.
                if let Some(lease) = self.ticket.take_lease() {
                    return Ok(self.handed::<A>(lease));
                }
                continue;
            }
            match self.ask(borrowing, unsure).await {
                Asked::Wait => {}
                Asked::Granted(granted) => {
                    self.place.granted();
                    // Dropping the ticket wakes the next head of each queue.
                    return Ok(granted);
                }
                Asked::Failed(e) => return Err(e),
            }
        }
    }

    /// Waits for the next thing to look at: a turn, the earliest expiry
    /// told of, a retry's pause, or the deadline (`true`).
    async fn next_wake(&mut self) -> bool {
        tokio::select! {
            biased;
            () = self.ticket.turn() => false,
            () = async {
                match self.next_expiry.as_mut() {
                    Some(expiry) => expiry.await,
                    None => std::future::pending().await,
                }
            } => {
                self.next_expiry = None;
                false
            }
            () = async {
                match self.retry.as_mut() {
                    Some(retry) => retry.await,
                    None => std::future::pending().await,
                }
            } => {
                self.retry = None;
                false
            }
            () = &mut self.timeout => true,
        }
    }

    /// The borrow's end with `lease`, handed to it by a return. A place of
    /// its that the return's step did not end is left as the borrow ends.
    #[inline]
    fn handed<A: Answer>(&mut self, lease: Lease) -> A::Granted {
        if !self.ticket.place_left() {
            self.place.granted();
        }
        A::handed(lease)
    }

    /// Asks the store as the head of every queue it is in.
    async fn ask<A, E, F>(
        &mut self,
        borrowing: &mut Borrowing<'a, E, F>,
        unsure: &mut Unsure<'a>,
    ) -> Asked<A::Granted>
    where
        A: Answer,
        E: Fn() -> Error + Send,
        F: FnMut(SystemTime, Option<WaiterId>, bool) -> InFlight<A> + Send,
    {
        let store = borrowing.store;
        // In a block, awaited through a reference: kept once, and not
        // across the awaits below.
        let (ids, answer) = {
            let now = truncate_ms(store.clock().now());
            let mut asking = (borrowing.attempt)(now, Some(self.place.waiter()), unsure.any())
                .made_from(&self.place);
            (asking.made(), (&mut asking).await)
        };
        if !matches!(&answer, Ok(a) if !a.leases().is_empty()) {
            // Claimable again. A granted head stays unclaimable until
            // its ticket is gone: a claim could otherwise deliver it
            // the very lease its look just found (one a return handed
            // it through the store's queue), and the ticket would then
            // return that lease as unwanted while the borrower holds it.
            self.ticket.done_asking();
        }
        match answer {
            Ok(answer) => {
                // Answered under the unsure ids: the store found (and
                // answers) whatever it granted under them before.
                unsure.settled();
                match self.answered(store, answer) {
                    Ok(granted) => Asked::Granted(granted),
                    Err(at) => match self.refused(store, borrowing.pools[0], at).await {
                        Ok(()) => Asked::Wait,
                        Err(e) => Asked::Failed(e),
                    },
                }
            }
            Err(
                e @ Error::Storage {
                    retryable: true, ..
                },
            ) => {
                unsure.failed(&e, ids);
                let backoff = next_backoff(self.failed.as_ref().map(|(_, last)| *last));
                self.retry = Some(Box::pin(tokio::time::sleep(backoff)));
                self.failed = Some((e, backoff));
                Asked::Wait
            }
            Err(e @ Error::Draining { pool }) if borrowing.draining_waits => {
                // Asleep until the store tells of a change: the drain's
                // end notifies the pool's waiters. Those behind that do
                // not wait for a drain leave now.
                store.changes().found_draining(pool);
                self.failed = None;
                self.next_expiry = None;
                self.drained = Some(e);
                Asked::Wait
            }
            Err(e) => Asked::Failed(e),
        }
    }

    /// What the store answered the head: granted, or refused (`Err`) with
    /// the earliest expiry told of.
    #[inline]
    fn answered<A: Answer>(
        &mut self,
        store: &Arc<dyn Store>,
        answer: A,
    ) -> std::result::Result<A::Granted, Option<SystemTime>> {
        self.failed = None;
        self.drained = None;
        let step = answer.step();
        if let Some(pool) = self.first_ask.take() {
            let granted = matches!(step, Step::Granted(_));
            store.changes().first_answered(pool, granted);
        }
        match step {
            Step::Granted(granted) => Ok(granted),
            Step::Exhausted(at) => Err(at),
        }
    }

    /// Refused as the head: a borrower for more slots than the count of
    /// its one pool, `pool`, checks the count (above it, it is set aside,
    /// and sleeps until a change is told of); then it sleeps until `at`,
    /// the earliest expiry the refusal told of.
    async fn refused(
        &mut self,
        store: &Arc<dyn Store>,
        pool: PoolId,
        at: Option<SystemTime>,
    ) -> Result<()> {
        if self.weight > 1 {
            // Boxed: a waiting borrow's future would otherwise keep the
            // read's state, which only a heavy borrower needs.
            Box::pin(weigh(store, pool)).await?;
        }
        self.next_expiry = at
            .filter(|_| !self.ticket.is_aside())
            .map(|at| store.clock().sleep_until(at));
        Ok(())
    }
}

/// Reads the count of `pool` and [weighs](crate::wait::Changes::weigh) its
/// queue with it, unless the queue learned of a change while
/// the read was in flight ([`weigh_read`](crate::wait::Changes::weigh_read)):
/// a stale count must not set aside again a waiter a raise let back. A
/// storage error leaves the queue as it is, for the next change to weigh
/// again.
///
/// # Errors
/// [`Error::PoolNotFound`] if the pool was deleted.
async fn weigh(store: &Arc<dyn Store>, pool: PoolId) -> Result<()> {
    let changes = store.changes();
    let seen = changes.news(pool);
    match store.inspect(pool).await {
        Ok(state) => changes.weigh_read(pool, state.count, seen),
        Err(e @ Error::PoolNotFound { .. }) => return Err(e),
        Err(_) => {}
    }
    Ok(())
}
