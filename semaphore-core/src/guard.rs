//! [`LeaseGuard`]: a lease that returns itself when dropped (SPEC R13).

use std::fmt;
use std::ops::Deref;
use std::time::Duration;

use crate::cancel::return_detached;
use crate::{Lease, Pool, Result};

/// A held lease that is returned when the guard is dropped (R13), like
/// tokio's `SemaphorePermit`.
///
/// Two forms, one type:
/// - `LeaseGuard<&Pool>`, from [`Pool::borrow`], borrows the pool handle;
/// - [`OwnedLeaseGuard`] (`LeaseGuard<Pool>`), from [`Pool::borrow_owned`],
///   owns a clone of it, for `'static` tasks.
///
/// It derefs to the [`Lease`]: `guard.position`, `guard.token`,
/// `guard.expires_at`.
///
/// Dropping the guard returns the lease at once, from any thread (R13): in
/// place for stores that do no I/O, on a task spawned on the current tokio
/// runtime otherwise, and on the library's rescue thread (one per process,
/// started when first needed) when dropped outside any runtime or while its
/// runtime shuts down. Only if the process exits first is the lease left to
/// free itself at its ttl. [`release`](LeaseGuard::release) returns it and
/// reports the result; [`forget`](LeaseGuard::forget) keeps it until its
/// ttl.
#[must_use = "dropping the guard returns the lease at once"]
pub struct LeaseGuard<P: AsRef<Pool> = Pool> {
    pool: P,
    lease: Lease,
    armed: bool,
}

/// A [`LeaseGuard`] that owns its pool handle: `'static`, for spawned tasks.
pub type OwnedLeaseGuard = LeaseGuard<Pool>;

impl<P: AsRef<Pool>> LeaseGuard<P> {
    pub(crate) fn new(pool: P, lease: Lease) -> Self {
        Self {
            pool,
            lease,
            armed: true,
        }
    }

    /// The lease held.
    pub fn lease(&self) -> &Lease {
        &self.lease
    }

    /// The pool handle the lease came from.
    pub fn pool(&self) -> &Pool {
        self.pool.as_ref()
    }

    /// Time left before the lease frees itself, by the store's clock; zero
    /// once expired.
    pub fn time_left(&self) -> Duration {
        self.lease.time_left(self.pool().store().clock().now())
    }

    /// Returns the lease now and reports whether it was still active (R8):
    /// `false` if it had expired or its pool was deleted meanwhile.
    ///
    /// # Errors
    /// [`Error::Storage`](crate::Error::Storage) if the store failed; the
    /// lease is then left to its ttl.
    ///
    /// # Cancel safety
    /// If the returned future is dropped before it completes, the return may
    /// or may not have happened; either way the lease frees itself at its ttl
    /// at the latest.
    pub async fn release(mut self) -> Result<bool> {
        self.armed = false;
        self.pool.as_ref().return_lease(self.lease.id).await
    }

    /// Extends the lease to expire `ttl` from now, keeping its position and
    /// token; the guard then holds the renewed lease. See [`Pool::renew`]
    /// for how `ttl` is clamped.
    ///
    /// # Errors
    /// Those of [`Pool::renew`]: [`Error::LeaseExpired`](crate::Error::LeaseExpired)
    /// if the lease already expired,
    /// [`Error::LeaseNotFound`](crate::Error::LeaseNotFound) if it was
    /// force-returned or its pool deleted and registered again,
    /// [`Error::PoolNotFound`](crate::Error::PoolNotFound) if its pool is
    /// gone. The guard keeps the lease as it was either way.
    ///
    /// # Cancel safety
    /// Dropping the future may or may not leave the lease renewed; the guard
    /// then still shows the old expiry.
    pub async fn renew(&mut self, ttl: Duration) -> Result<()> {
        self.lease = self.pool.as_ref().renew(&self.lease, ttl).await?;
        Ok(())
    }

    /// Keeps the lease until its ttl instead of returning it on drop (R13),
    /// and hands back the plain [`Lease`]; return it early later with
    /// [`Pool::return_lease`] and its `id`.
    pub fn forget(mut self) -> Lease {
        self.armed = false;
        self.lease
    }
}

impl<P: AsRef<Pool>> Deref for LeaseGuard<P> {
    type Target = Lease;

    fn deref(&self) -> &Lease {
        &self.lease
    }
}

impl<P: AsRef<Pool>> fmt::Debug for LeaseGuard<P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LeaseGuard")
            .field("lease", &self.lease)
            .field("armed", &self.armed)
            .finish()
    }
}

impl<P: AsRef<Pool>> Drop for LeaseGuard<P> {
    fn drop(&mut self) {
        if self.armed {
            return_detached(self.pool.as_ref().store(), &self.lease);
        }
    }
}
