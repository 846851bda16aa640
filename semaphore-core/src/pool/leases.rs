//! [`Pool`]'s calls on leases already granted: return, renew, the admin
//! listing and the forced return (rule "Beyond the basic model").

use std::time::Duration;

use crate::give_back::return_detached;
use crate::telemetry;
use crate::{error::Error, error::Result, id::LeaseId, lease::Holder, lease::Lease, pool::Pool};

impl Pool {
    /// Returns lease `lease` early: frees its slot at once and wakes the
    /// head waiter. `true` only if the lease was active; an unknown, returned,
    /// expired or deleted lease reports `false`, never an error.
    ///
    /// # Errors
    /// [`Error::Storage`] if the store failed; the lease is then unchanged.
    ///
    /// # Cancel safety
    /// Dropping the future may or may not leave the lease returned; either
    /// way it frees itself at its ttl at the latest.
    ///
    /// # Examples
    ///
    /// ```
    /// # use std::{sync::Arc, time::Duration};
    /// # use semaphore_memory::{MemoryStore, Pool, PoolId};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), semaphore_memory::Error> {
    /// # let pool = Pool::new(Arc::new(MemoryStore::new()), PoolId::from_name("jobs"));
    /// # pool.register(2).await?;
    /// // A lease handed elsewhere by id (a job queue, an HTTP client)...
    /// let id = pool.try_borrow(Duration::from_secs(30)).await?.forget().id;
    /// // ...is returned by id: true if it was active, false ever after.
    /// assert!(pool.return_lease(id).await?);
    /// assert!(!pool.return_lease(id).await?);
    /// # Ok(()) }
    /// ```
    pub async fn return_lease(&self, lease: LeaseId) -> Result<bool> {
        let result = self.store.return_lease(self.id, lease).await;
        telemetry::returned(&self.name, None, Some(&result));
        result
    }

    /// [`return_lease`](Pool::return_lease) for a lease held whole (by a
    /// guard): the store may find it by its position.
    pub(crate) async fn return_held(&self, lease: &Lease) -> Result<bool> {
        if lease.pool != self.id {
            return self.return_lease(lease.id).await;
        }
        // In place where the store answers without I/O (the common path:
        // no future, no clone of the lease).
        let result = match self.in_place() {
            Some(now) => now.return_held(lease),
            None => self.store.return_held(lease.clone()).await,
        };
        telemetry::returned(&self.name, Some(lease), Some(&result));
        result
    }

    /// [`return_held`](Pool::return_held) for a guard that is gone, whom
    /// no answer reaches: in place where the store answers at once
    /// (through this pool's own answers for a lease of this pool),
    /// otherwise detached ([`return_detached`]).
    pub(crate) fn return_held_detached(&self, lease: &Lease) {
        match self.in_place() {
            Some(now) if lease.pool == self.id => drop(now.return_held(lease)),
            _ => return_detached(&self.store, lease),
        }
    }

    /// Extends a lease of this pool to expire `ttl` from now, keeping its
    /// position, token and labels; returns the renewed lease. `lease` is the
    /// lease itself (`&Lease`), or only its id ([`LeaseId`]) for a caller
    /// that has no more (a client of the HTTP service, a script with
    /// `SEMAPHORE_LEASE_ID`): one store call either way. `ttl` is
    /// checked and clamped as for [`borrow`](Pool::borrow), so a renew may
    /// also shorten a lease. Waiters are told, since the pool's earliest
    /// expiry may have moved.
    /// [`LeaseGuard::renew`](crate::LeaseGuard::renew) does the same for a
    /// guard.
    ///
    /// # Errors
    /// Renewing a lease that is not active is never a silent success:
    /// - [`Error::LeaseExpired`] if it is not active and `lease.expires_at`
    ///   has passed; given only an id, an expired lease is not told
    ///   apart and reports `LeaseNotFound`;
    /// - [`Error::LeaseNotFound`] if it is not active though its expiry has
    ///   not come: returned, force-returned, or never this pool's;
    /// - [`Error::PoolNotFound`] if the pool was deleted;
    /// - [`Error::InvalidArgument`] naming `ttl` if it is zero;
    /// - [`Error::Storage`] if the store failed; the lease is unchanged.
    ///
    /// # Cancel safety
    /// Dropping the future may or may not leave the lease renewed.
    ///
    /// # Examples
    ///
    /// ```
    /// # use std::{sync::Arc, time::Duration};
    /// # use semaphore_memory::{MemoryStore, Pool, PoolId};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), semaphore_memory::Error> {
    /// # let pool = Pool::new(Arc::new(MemoryStore::new()), PoolId::from_name("jobs"));
    /// # pool.register(2).await?;
    /// let lease = pool.try_borrow(Duration::from_secs(30)).await?.forget();
    /// let renewed = pool.renew(&lease, Duration::from_secs(60)).await?;
    /// assert_eq!((renewed.position, renewed.token), (lease.position, lease.token));
    /// assert!(renewed.expires_at >= lease.expires_at);
    /// // By id, as a client that was handed only the id would:
    /// let again = pool.renew(lease.id, Duration::from_secs(90)).await?;
    /// assert_eq!(again.position, lease.position);
    /// # Ok(()) }
    /// ```
    pub async fn renew<'a>(&self, lease: impl Into<Renewing<'a>>, ttl: Duration) -> Result<Lease> {
        match lease.into() {
            Renewing::Lease(lease) => self.renew_lease(lease, ttl).await,
            Renewing::Id(lease) => self.renew_id(lease, ttl).await,
        }
    }

    async fn renew_lease(&self, lease: &Lease, ttl: Duration) -> Result<Lease> {
        let ttl = self.limits.clamp_ttl(ttl)?;
        if lease.pool != self.id {
            return Err(Error::LeaseNotFound {
                pool: self.id,
                lease: lease.id,
            });
        }
        let result = self
            .store
            .renew(self.id, lease.id, ttl)
            .await
            .and_then(|renewed| renewed.ok_or_else(|| self.not_renewed(lease)));
        if result.is_ok() {
            self.changed();
        }
        telemetry::renewed(&self.name, lease, &result);
        result
    }

    /// Why `lease` was not renewed: its session ended, it expired, or it
    /// is otherwise not active.
    fn not_renewed(&self, lease: &Lease) -> Error {
        let vouched = |id| self.store.session().is_some_and(|s| s.vouches(id));
        match lease.session {
            Some(id) if !vouched(id) => self.session_lost(lease),
            _ => Error::not_renewed(lease, self.now()),
        }
    }

    async fn renew_id(&self, lease: LeaseId, ttl: Duration) -> Result<Lease> {
        let ttl = self.limits.clamp_ttl(ttl)?;
        let renewed = telemetry::counted(&self.name, self.store.renew(self.id, lease, ttl).await)?
            .ok_or(Error::LeaseNotFound {
                pool: self.id,
                lease,
            })?;
        self.changed();
        telemetry::renewed(&self.name, &renewed, &Ok(renewed.clone()));
        Ok(renewed)
    }

    /// Every active lease of the pool, by position, with its owner label and
    /// key: an admin's listing. It shows lease ids, the credential that
    /// returns a lease, which [`inspect`](Pool::inspect) never does; keep it
    /// to admin tools.
    ///
    /// # Errors
    /// [`Error::PoolNotFound`] for an unknown pool; [`Error::Storage`] if the
    /// store failed.
    ///
    /// # Cancel safety
    /// Cancel safe: it changes nothing.
    ///
    /// # Examples
    ///
    /// ```
    /// # use std::{sync::Arc, time::Duration};
    /// # use semaphore_memory::{MemoryStore, Pool, PoolId};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), semaphore_memory::Error> {
    /// # let pool = Pool::new(Arc::new(MemoryStore::new()), PoolId::from_name("jobs"));
    /// # pool.register(2).await?;
    /// let options = semaphore_memory::BorrowOptions::new().owner("worker-3");
    /// let _held = pool.borrow_with(Duration::from_secs(30), Duration::ZERO, options).await?;
    /// for h in pool.holders().await? {
    ///     println!("slot {} token {} owner {:?}", h.lease.position, h.lease.token, h.owner);
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn holders(&self) -> Result<Vec<Holder>> {
        let holders = telemetry::counted(&self.name, self.store.holders(self.id).await)?;
        Ok(holders.into_iter().map(shown).collect())
    }

    /// Ends the lease at `position`, whoever holds it, as if its holder had
    /// returned it: the slot is free at once and the head waiter is
    /// woken. Returns the lease it ended, or `None` if no lease held the
    /// position. The former holder's renew then fails with
    /// [`Error::LeaseNotFound`] and its return reports `false`.
    ///
    /// # Errors
    /// [`Error::PoolNotFound`] for an unknown pool; [`Error::Storage`] if the
    /// store failed, and nothing changed.
    ///
    /// # Cancel safety
    /// Dropping the future may or may not leave the lease ended.
    ///
    /// # Examples
    ///
    /// ```
    /// # use std::{sync::Arc, time::Duration};
    /// # use semaphore_memory::{MemoryStore, Pool, PoolId};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), semaphore_memory::Error> {
    /// # let pool = Pool::new(Arc::new(MemoryStore::new()), PoolId::from_name("jobs"));
    /// # pool.register(2).await?;
    /// let stuck = pool.try_borrow(Duration::from_secs(3600)).await?.forget();
    /// let ended = pool.force_return(stuck.position).await?.expect("a lease held slot 0");
    /// assert_eq!(ended.lease.id, stuck.id);
    /// // Its holder finds out at its next renew or return.
    /// assert!(!pool.return_lease(stuck.id).await?);
    /// # Ok(()) }
    /// ```
    pub async fn force_return(&self, position: u32) -> Result<Option<Holder>> {
        let ended =
            telemetry::counted(&self.name, self.store.force_return(self.id, position).await)?;
        if let Some(holder) = &ended {
            self.changed();
            telemetry::force_returned(&self.name, position, holder.lease.token);
        }
        Ok(ended.map(shown))
    }

    /// Why `lease` of this pool is lost with its session: the store ended the
    /// session ([`Error::SessionEnded`]), or its end passed before a heartbeat
    /// landed ([`Error::SessionLost`]).
    pub(crate) fn session_lost(&self, lease: &Lease) -> Error {
        let by_store = match (lease.session, self.store.session()) {
            (Some(id), Some(session)) => session.ended_by_store(id),
            _ => false,
        };
        if by_store {
            Error::SessionEnded {
                pool: lease.pool,
                lease: lease.id,
            }
        } else {
            Error::SessionLost {
                pool: lease.pool,
                lease: lease.id,
            }
        }
    }
}

/// `holder` as listed: its key without the request digest the store keeps
/// with it ([`key_name`](crate::store::key_name)).
fn shown(mut holder: Holder) -> Holder {
    if let Some(key) = &mut holder.key {
        let name = crate::keys::key_name(key).len();
        key.truncate(name);
    }
    holder
}

/// What [`Pool::renew`] renews: a lease held whole (`&Lease`, as a guard or
/// a [`forget`](crate::LeaseGuard::forget) caller has it) or only its id
/// (`LeaseId`, as the HTTP service's clients have it). Made by `From`; not
/// named at call sites.
#[derive(Debug, Clone, Copy)]
pub enum Renewing<'a> {
    /// The lease itself: its expiry and session tell an expired or lost
    /// lease apart from one that was returned.
    Lease(&'a Lease),
    /// Only the lease's id.
    Id(LeaseId),
}

impl<'a> From<&'a Lease> for Renewing<'a> {
    fn from(lease: &'a Lease) -> Self {
        Self::Lease(lease)
    }
}

impl From<LeaseId> for Renewing<'_> {
    fn from(lease: LeaseId) -> Self {
        Self::Id(lease)
    }
}
