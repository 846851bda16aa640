//! Held places: a two-phase borrow whose place lives in the store, not in
//! a process, so that any process sharing the store may poll it (the HTTP
//! service's tickets across servers).

use std::pin::pin;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use crate::clock::saturating_add;
use crate::{
    error::Error, error::Result, guard::LeaseGuard, guard::OwnedLeaseGuard, id::LeaseId,
    options::BorrowOptions, pool::Pool,
};
use crate::{id::WaiterId, request::BorrowRequest, request::TryBorrow};

/// The longest a held place's poll sleeps without asking the store again,
/// for a change no notification tells of (a place ahead of it granted in
/// another process, or dropped when its hold passed).
pub const HELD_POLL_INTERVAL: Duration = Duration::from_secs(1);

/// The key a held place's lease is granted under when its poller names none.
fn held_key(waiter: WaiterId) -> String {
    format!("held:{}", waiter.as_uuid())
}

impl Pool {
    /// The held place `waiter` of this pool: a place in the store's own
    /// queue that no process owns, which any process sharing the store
    /// may take, poll and leave by its id ([`HeldPlace`]). Nothing is
    /// asked of the store until one of its calls.
    pub fn held(&self, waiter: WaiterId) -> HeldPlace<'_> {
        HeldPlace { pool: self, waiter }
    }
}

/// A held place of a pool ([`Pool::held`]): a two-phase borrow whose
/// place lives in the store, not in a process, so that a ticket taken in
/// one process (an HTTP server) may be collected in another.
#[derive(Debug, Clone, Copy)]
pub struct HeldPlace<'a> {
    pool: &'a Pool,
    waiter: WaiterId,
}

impl HeldPlace<'_> {
    /// The place's id, as [`Pool::held`] was given it.
    pub fn waiter(&self) -> WaiterId {
        self.waiter
    }

    /// One poll of this *held place*: a place in the store's own queue that no
    /// process owns, for a two-phase borrow that any process sharing the
    /// store may poll (an HTTP ticket taken on one server and collected on
    /// another). Asks the store as its waiter id, at once and again on each
    /// change of the pool, each expiry it was told of, and at least every
    /// [`HELD_POLL_INTERVAL`], for up to `wait`; `Ok(Some(guard))` once
    /// granted, `Ok(None)` if the wait ran out (the place is kept: poll
    /// again within `hold`). The first call takes the place at the tail.
    ///
    /// The store keeps the place for `hold` (in whole milliseconds, at
    /// least one) after each refused attempt ([`BorrowRequest::hold`]); a place
    /// not polled within `hold` is dropped, and the borrowers behind it
    /// move up. With [`BorrowOptions::wait_while_draining`] a place is
    /// taken and kept while the pool drains, in its turn (a ticket taken
    /// during a drain is behind those taken before), and is served in that
    /// turn once the drain ends; without it, a poll of a draining pool
    /// leaves the place. Places are served
    /// first come, first served with every process's queued heads,
    /// each owed its weight. A place is granted only to a poll, never
    /// handed a slot by a return, so an abandoned place never holds a slot.
    ///
    /// The lease is granted under `options.key`, or `held:<waiter>` if it
    /// has none: a repeated poll (one whose answer was lost, or one made
    /// meanwhile in another process) gets the same lease while it is
    /// active. `ttl` runs from the grant. Every store keeps held places; on
    /// an in-process store (memory) only this process can poll them, and a
    /// place is served in its turn among this process's borrowers.
    ///
    /// # Errors
    /// As [`borrow_with`](Pool::borrow_with) but [`Error::Exhausted`]: a
    /// full pool answers `Ok(None)`. On [`Error::Draining`] (without
    /// [`BorrowOptions::wait_while_draining`]) the place is left. A
    /// retryable [`Error::Storage`] is retried (50 ms, doubling to
    /// [`HELD_POLL_INTERVAL`]) until the wait runs out, and is then
    /// returned. [`Error::NoRuntime`] if `wait` is not zero outside a tokio
    /// runtime.
    ///
    /// # Cancel safety
    /// Cancel safe: dropping the future keeps the place, and a lease
    /// granted by an attempt in flight is found again by the next poll
    /// through its key.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn f(pool: semaphore_core::Pool) -> semaphore_core::Result<()> {
    /// use std::time::Duration;
    /// use semaphore_core::{BorrowOptions, WaiterId};
    ///
    /// let ticket = pool.held(WaiterId::new());
    /// let hold = Duration::from_secs(30);
    /// let ttl = Duration::from_secs(3600);
    /// // Take the place (no wait), then poll it, from this process or any
    /// // other that shares the store, at least every 30 s.
    /// let mut lease = ticket.wait(hold, ttl, Duration::ZERO, BorrowOptions::new()).await?;
    /// while lease.is_none() {
    ///     lease = ticket.wait(hold, ttl, Duration::from_secs(20), BorrowOptions::new()).await?;
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn wait(
        self,
        hold: Duration,
        ttl: Duration,
        wait: Duration,
        options: BorrowOptions,
    ) -> Result<Option<OwnedLeaseGuard>> {
        let waiter = self.waiter;
        let labels = options.check(&self.pool.limits)?;
        let ttl = self.pool.limits.clamp_ttl(ttl)?;
        let wait = self.pool.limits.clamp_wait(wait);
        // Whole milliseconds, as every time a store keeps.
        let hold_ms = u64::try_from(hold.as_millis()).unwrap_or(u64::MAX);
        let hold = Duration::from_millis(hold_ms.clamp(1, crate::clock::MAX_UNIX_MS));
        let key: Arc<str> = labels
            .key
            .clone()
            .unwrap_or_else(|| held_key(waiter).into());
        let clock = self.pool.store.clock();
        let deadline = saturating_add(clock.now(), wait);
        let changes = self.pool.store.changes();
        if !wait.is_zero() && tokio::runtime::Handle::try_current().is_err() {
            return Err(Error::NoRuntime {
                operation: "held wait",
            });
        }
        let watch = changes.watch();
        let mut backoff: Option<(Error, Duration)> = None;
        loop {
            let mut changed = pin!(watch.changed());
            changed.as_mut().enable();
            let request = self.request(ttl, hold, &labels, &key);
            let mut next = None;
            let answer = match crate::cancel::unsessioned(&self.pool.store, &request) {
                Some(e) => Err(e),
                None => self.pool.store.try_borrow(&request).await,
            };
            match answer {
                Ok(TryBorrow::Granted { lease }) => {
                    return Ok(Some(LeaseGuard::new(self.pool.clone(), lease, ttl)));
                }
                Ok(TryBorrow::Exhausted { next_expiry }) => {
                    backoff = None;
                    next = next_expiry;
                }
                Err(Error::Draining { .. }) if labels.wait_while_draining => backoff = None,
                Err(e @ Error::Draining { .. }) => {
                    let _ = self.pool.store.leave_queue(self.pool.id, waiter).await;
                    return Err(e);
                }
                Err(
                    e @ Error::Storage {
                        retryable: true, ..
                    },
                ) => {
                    let pause = crate::acquire::next_backoff(backoff.as_ref().map(|(_, p)| *p));
                    backoff = Some((e, pause));
                }
                Err(e) => return Err(e),
            }
            let now = clock.now();
            if now >= deadline {
                return match backoff {
                    Some((e, _)) => Err(e),
                    None => Ok(None),
                };
            }
            let wake = next_poll(now, deadline, hold, next, backoff.as_ref().map(|(_, p)| *p));
            tokio::select! {
                () = changed => {}
                () = clock.sleep_until(wake) => {}
            }
        }
    }

    /// One poll of the place: a borrow under `key`, from this place's
    /// waiter, kept for `hold` if refused.
    fn request(
        &self,
        ttl: Duration,
        hold: Duration,
        labels: &crate::options::Labels,
        key: &Arc<str>,
    ) -> BorrowRequest {
        let mut request = BorrowRequest::new(self.pool.id, LeaseId::new(), ttl);
        request.slots = labels.slots;
        request.bound = labels.bound;
        request.session = crate::pool::bind(&self.pool.store, labels.bound);
        request.waiter = Some(self.waiter);
        request.hold = Some(hold);
        request.key = Some(key.clone());
        request.owner.clone_from(&labels.owner);
        request
    }

    /// The place of this held place ([`wait`](HeldPlace::wait))
    /// in the store's queue of this pool: 1 for the next to be served,
    /// counting every process's queued head and every held place ahead of
    /// it ([`Store::place`](crate::store::Store::place)); `None` if the store
    /// keeps none for it (granted, left, dropped, or a store that keeps no
    /// queue).
    ///
    /// # Errors
    /// [`Error::Storage`] if the store failed.
    ///
    /// # Cancel safety
    /// Safe: it only reads.
    pub async fn place(self) -> Result<Option<u64>> {
        self.pool.store.place(self.pool.id, self.waiter).await
    }

    /// The active lease a poll of this held place with `options` was
    /// granted, under the options' key or else its default key
    /// (`held:<waiter>`; see [`wait`](HeldPlace::wait)), if any: what
    /// a poller that finds no place left asks next, to tell a place served
    /// from one dropped.
    ///
    /// # Errors
    /// [`Error::KeyReused`] if the options' key names a lease granted with
    /// another [`BorrowOptions::request_digest`]; [`Error::PoolNotFound`] if
    /// the pool does not exist; [`Error::Storage`] if the store failed.
    ///
    /// # Cancel safety
    /// Safe: it only reads.
    pub async fn lease(self, options: &BorrowOptions) -> Result<Option<crate::lease::Lease>> {
        let key = match &options.key {
            Some(key) => crate::keys::stored_key(key, options.request_digest),
            None => held_key(self.waiter).into(),
        };
        crate::acquire::keyed_lease(&self.pool.store, self.pool.id, &key).await
    }

    /// Gives up this held place: the store forgets it at once,
    /// and the borrowers behind it move up. A lease already granted to it
    /// is not returned: it is its poller's, to return with the lease id.
    ///
    /// # Errors
    /// [`Error::Storage`] if the store failed; the place then goes when its
    /// hold passes.
    ///
    /// # Cancel safety
    /// Dropping the future may or may not leave the place given up; if not,
    /// it goes when its hold passes.
    pub async fn leave(self) -> Result<()> {
        self.pool
            .store
            .leave_queue(self.pool.id, self.waiter)
            .await?;
        self.pool.changed();
        Ok(())
    }
}

/// When a held place polls again after a refusal at `now`: before half its
/// `hold` has passed, so that a long poll keeps its place (or after the
/// `backoff` of a retryable failure), at the earliest expiry it was told
/// of (`next`, unless backing off), and at its `deadline` at the latest.
fn next_poll(
    now: SystemTime,
    deadline: SystemTime,
    hold: Duration,
    next: Option<SystemTime>,
    backoff: Option<Duration>,
) -> SystemTime {
    let pause = backoff.unwrap_or(HELD_POLL_INTERVAL.min(hold / 2));
    let wake = deadline.min(saturating_add(now, pause));
    match next.filter(|_| backoff.is_none()) {
        Some(at) => wake.min(at),
        None => wake,
    }
}
