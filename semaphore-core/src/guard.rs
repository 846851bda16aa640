//! [`LeaseGuard`]: a lease that returns itself when dropped (SPEC R13).

use std::fmt;
use std::ops::Deref;
use std::time::Duration;

use std::sync::Arc;

#[cfg(doc)]
use crate::BorrowOptions;
use crate::cancel::return_detached;
use crate::keepalive::{self, KeepAlive, Kept};
use crate::telemetry;
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
/// runtime otherwise, and on the library runtime (one worker thread per process,
/// started when first needed) when dropped outside any runtime or while its
/// runtime shuts down. If the process exits first, a lease bound to it
/// (the default, R16) is freed the next time another process looks at the
/// pool, and any other is left to free itself at its ttl.
/// [`release`](LeaseGuard::release) returns it and reports the result;
/// [`forget`](LeaseGuard::forget) keeps it until its ttl (or its holder's
/// end, for a bound lease).
#[must_use = "dropping the guard returns the lease at once"]
pub struct LeaseGuard<P: AsRef<Pool> = Pool> {
    pool: P,
    lease: Lease,
    armed: bool,
    /// The ttl the lease was borrowed for, as clamped: keep-alive renews to it.
    ttl: Duration,
    keep: Option<KeepAlive>,
}

/// A [`LeaseGuard`] that owns its pool handle: `'static`, for spawned tasks.
pub type OwnedLeaseGuard = LeaseGuard<Pool>;

impl<P: AsRef<Pool>> LeaseGuard<P> {
    pub(crate) fn new(pool: P, lease: Lease, ttl: Duration) -> Self {
        telemetry::held(pool.as_ref().name());
        Self {
            pool,
            lease,
            armed: true,
            ttl,
            keep: None,
        }
    }

    /// Keeps the lease alive while the guard lives: a background task
    /// renews it to its ttl every ttl/3 (by the store's clock), keeping its
    /// position and token. A renewal that fails with a retryable error is
    /// tried again until the lease would have expired. When a renewal finds
    /// the lease gone (force-returned, expired during a stall, its pool
    /// deleted), [`lost`](LeaseGuard::lost) resolves and
    /// [`is_lost`](LeaseGuard::is_lost) turns true; the guard then holds
    /// nothing. Dropping the guard stops the renewals and returns the lease.
    /// Calling it again changes nothing.
    ///
    /// The task runs on the current tokio runtime, or else on the
    /// library's own, so it works from plain threads too. [`Lease::expires_at`]
    /// of the guard stays the grant's; [`time_left`](LeaseGuard::time_left)
    /// follows the renewals.
    ///
    /// ```
    /// use std::{sync::Arc, time::Duration};
    /// use semaphore_memory::{MemoryStore, Pool, PoolId};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), semaphore_memory::Error> {
    /// let pool = Pool::new(Arc::new(MemoryStore::new()), PoolId::from_name("jobs"));
    /// pool.register(1).await?;
    /// let mut lease = pool.borrow(Duration::from_secs(30), Duration::ZERO).await?;
    /// lease.keep_alive(); // a short ttl, however long the work takes
    /// tokio::select! {
    ///     _ = async { /* the work */ } => {}
    ///     reason = lease.lost() => eprintln!("lease lost, stopping: {reason}"),
    /// }
    /// # Ok(()) }
    /// ```
    pub fn keep_alive(&mut self) {
        if self.keep.is_none() {
            self.keep = Some(keepalive::start(
                self.pool().clone(),
                self.lease.clone(),
                self.ttl,
            ));
        }
    }

    /// Whether a keep-alive renewal found the lease gone (see
    /// [`keep_alive`](LeaseGuard::keep_alive)); always `false` without
    /// keep-alive. Cheap: one atomic read.
    pub fn is_lost(&self) -> bool {
        self.keep
            .as_ref()
            .is_some_and(|k| matches!(*k.state.borrow(), Kept::Lost(_)))
    }

    /// Resolves when a keep-alive renewal finds the lease gone, with the
    /// reason ([`Error::LeaseNotFound`](crate::Error::LeaseNotFound) for a
    /// forced return, [`Error::LeaseExpired`](crate::Error::LeaseExpired)
    /// after a stall, [`Error::PoolNotFound`](crate::Error::PoolNotFound)
    /// for a deleted pool, or the storage error that outlasted the lease).
    /// Without keep-alive it never resolves.
    ///
    /// The future does not borrow the guard, so it can be awaited beside
    /// work that uses it.
    ///
    /// # Cancel safety
    /// Cancel safe: it only watches.
    pub fn lost(&self) -> impl std::future::Future<Output = Arc<crate::Error>> + Send + 'static {
        let state = self.keep.as_ref().map(|k| k.state.clone());
        async move {
            let Some(mut state) = state else {
                return std::future::pending().await;
            };
            loop {
                if let Kept::Lost(reason) = &*state.borrow_and_update() {
                    return reason.clone();
                }
                if state.changed().await.is_err() {
                    return std::future::pending().await;
                }
            }
        }
    }

    /// Whether the lease is still certainly held, decided without I/O
    /// (R17): `false` once a keep-alive renewal found it lost, or once its
    /// time ran out. A holder acts on the resource only while this says
    /// `true`.
    pub fn is_held(&self) -> bool {
        !self.is_lost() && !self.time_left().is_zero()
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
        if self.is_lost() {
            return Duration::ZERO;
        }
        let now = self.pool().store().clock().now();
        self.latest_expiry()
            .duration_since(now)
            .unwrap_or(Duration::ZERO)
    }

    /// The lease's expiry as last renewed by keep-alive, or as granted.
    fn latest_expiry(&self) -> std::time::SystemTime {
        if let Some(keep) = &self.keep
            && let Kept::Alive(latest) = &*keep.state.borrow()
        {
            return latest.expires_at;
        }
        self.lease.expires_at
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
        let expires_at = self.latest_expiry();
        self.armed = false;
        self.keep = None;
        let active = self.pool.as_ref().return_held(&self.lease).await?;
        if !active && expires_at <= self.pool().store().clock().now() {
            telemetry::expired(self.pool().name(), &self.lease);
        }
        Ok(active)
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
    /// [`Pool::return_lease`] and its `id`. A bound lease (R16, the
    /// default) still ends with its holder: to hand a lease to another
    /// process, borrow it with [`BorrowOptions::bound`]`(false)`.
    pub fn forget(mut self) -> Lease {
        self.armed = false;
        self.keep = None;
        self.lease.clone()
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
            .field("keep_alive", &self.keep.is_some())
            .finish()
    }
}

impl<P: AsRef<Pool>> Drop for LeaseGuard<P> {
    fn drop(&mut self) {
        self.keep = None;
        let pool = self.pool.as_ref();
        if self.armed {
            telemetry::returned(pool.name(), Some(&self.lease), None);
            return_detached(pool.store(), &self.lease);
        }
        telemetry::let_go(pool.name());
    }
}
