//! [`LeaseGuard`]: a lease that returns itself when dropped.

use std::fmt;
use std::ops::Deref;
use std::time::Duration;

use std::sync::Arc;

use crate::give_back::unbind_detached;
use crate::keepalive::{self, KeepAlive, Kept};
#[cfg(doc)]
use crate::options::BorrowOptions;
use crate::telemetry;
use crate::{error::Result, lease::Lease, pool::Pool};

/// A held lease that is returned when the guard is dropped, like
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
/// A guard for a lease bound to another handle's session (a keyed borrow
/// answered with a lease another process holds) is born lost: it never
/// says the lease is held, and dropping it returns nothing, since that
/// process holds it.
///
/// Dropping the guard returns the lease at once, from any thread: in
/// place for stores that do no I/O, on a task spawned on the current tokio
/// runtime otherwise, and on the library runtime (one worker thread per process,
/// started when first needed) when dropped outside any runtime or while its
/// runtime shuts down. A return that fails with a retryable error (the
/// store could not be reached) is tried again, 50 ms later and then up to
/// every 2 s, for 30 s at most and not past the lease's expiry; the store
/// handle stays open meanwhile. If the process exits first, a lease bound to it
/// (the default) is freed the next time another process looks at the
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
        // A lease bound to a session this handle did not open (a keyed
        // borrow answered with another process's lease) is that process's:
        // this guard never vouches for it, and dropping it must not free
        // the slot under its holder.
        let store = pool.as_ref().store();
        let foreign = lease
            .session
            .is_some_and(|id| store.session().is_none_or(|s| s.current() != Some(id)));
        Self {
            pool,
            lease,
            armed: !foreign,
            ttl,
            keep: None,
        }
    }

    /// Keeps the lease alive while the guard lives: a background task
    /// renews it to its ttl every ttl/3 (by the store's clock), keeping its
    /// position and token. A renewal that fails with a retryable error is
    /// tried again until the lease would have expired. When a renewal finds
    /// the lease gone (force-returned, its pool deleted), or the lease's
    /// expiry or its session's end comes before a renewal or heartbeat
    /// lands (a stall, a partition), [`lost`](LeaseGuard::lost) resolves
    /// and [`is_lost`](LeaseGuard::is_lost) turns true, no later than
    /// anyone else can be granted its slots; the guard then holds
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
        self.keep_alive_every(self.ttl / 3);
    }

    /// [`keep_alive`](LeaseGuard::keep_alive), renewing every `every`
    /// (at least 1 ms, at most a third of the ttl) rather than every third
    /// of the ttl: a holder's
    /// local deadline runs from the last renewal that landed, so
    /// renewing more often makes it lag the store's expiry by less, and an
    /// outage survives more of the ttl (`semaphore run` renews every
    /// second). Each renewal is one write on the store. Calling it (or
    /// `keep_alive`) again changes nothing.
    pub fn keep_alive_every(&mut self, every: Duration) {
        if self.keep.is_none() {
            self.keep = Some(keepalive::start(
                self.pool().clone(),
                self.lease.clone(),
                self.ttl,
                every.min(self.ttl / 3),
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

    /// Resolves when the lease is lost, with the reason, no later than
    /// [`is_held`](LeaseGuard::is_held) turns `false`:
    /// [`Error::LeaseExpired`](crate::Error::LeaseExpired) at its expiry
    /// (without keep-alive, or after a renewal hung or failed past it),
    /// [`Error::SessionLost`](crate::Error::SessionLost) when its session
    /// can no longer vouch for it,
    /// [`Error::SessionEnded`](crate::Error::SessionEnded) when the store
    /// ended its session (an operator's act),
    /// [`Error::LeaseNotFound`](crate::Error::LeaseNotFound) when a renewal
    /// finds it force-returned, [`Error::PoolNotFound`](crate::Error::PoolNotFound)
    /// for a deleted pool, or the storage error that outlasted the lease.
    /// Force return and delete reach a holder at its next renewal.
    ///
    /// The future does not borrow the guard, so it can be awaited beside
    /// work that uses it.
    ///
    /// # Cancel safety
    /// Cancel safe: it only watches.
    pub fn lost(
        &self,
    ) -> impl std::future::Future<Output = Arc<crate::error::Error>> + Send + 'static {
        let state = self.keep.as_ref().map(|k| k.state.clone());
        let (pool, lease) = (self.pool().clone(), self.lease.clone());
        async move {
            let Some(mut state) = state else {
                return Arc::new(keepalive::until_lost(&pool, &lease).await);
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

    /// Whether the lease is still certainly held, decided without I/O:
    /// `false` once a keep-alive renewal found it lost, once the
    /// store's clock reaches its expiry (as last renewed), or, for a lease
    /// bound to its store handle's session ([`Lease::session`]), once that
    /// session no longer vouches for it ([`Session::vouches`](crate::Session::vouches)).
    ///
    /// A networked store's clock never reads earlier than the server's
    /// ([`ServerClock`](crate::store::ServerClock)), so this turns `false`
    /// no later than anyone else can be granted the lease's slots, as long
    /// as this process runs; a holder that acts on the resource only while
    /// it says `true` never acts beside the next holder. Check it right
    /// before each act: it may turn `false` at any instant (a network
    /// partition longer than the session timeout, a renewal that hangs past
    /// the expiry). Always `false` in a child that `fork()` made of the
    /// process that borrowed: the child has a copy of the guard, not the
    /// lease. Cheap: a clock reading, two atomic reads and a `getpid`.
    ///
    /// ```
    /// use std::{sync::Arc, time::Duration};
    /// use semaphore_memory::{MemoryStore, Pool, PoolId};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), semaphore_memory::Error> {
    /// let pool = Pool::new(Arc::new(MemoryStore::new()), PoolId::from_name("gpus"));
    /// pool.register(1).await?;
    /// let lease = pool.borrow(Duration::from_secs(30), Duration::ZERO).await?;
    /// for _step in 0..3 {
    ///     if !lease.is_held() {
    ///         break; // stop acting: another may hold the slot now
    ///     }
    ///     // ...one step of work on the slot's resource...
    /// }
    /// # Ok(()) }
    /// ```
    pub fn is_held(&self) -> bool {
        if self.is_lost() {
            return false;
        }
        #[cfg(feature = "fault-mutants")]
        if crate::mutant::planted(crate::mutant::Mutant::IsHeldDeadline) {
            return true;
        }
        let store = self.pool().store();
        if store.clock().now() >= self.latest_expiry() {
            return false;
        }
        // A child that `fork()` made holds a copy of the guard, not the
        // lease (R16 whatever a process's children do).
        if store.changes().check_process("is_held").is_err() {
            return false;
        }
        match self.lease.session {
            None => true,
            Some(id) => store.session().is_some_and(|s| s.vouches(id)),
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

    /// Time left before the lease may be lost, by the store's clock (for a
    /// networked store, the latest the server's can read): zero once
    /// [`is_held`](LeaseGuard::is_held) is `false`. A bound lease's
    /// session ends no sooner than this, as of its last heartbeat.
    pub fn time_left(&self) -> Duration {
        if !self.is_held() {
            return Duration::ZERO;
        }
        let store = self.pool().store();
        let mut end = self.latest_expiry();
        if let (Some(id), Some(session)) = (self.lease.session, store.session())
            && let Some(session_end) = session.end_of(id)
        {
            end = end.min(session_end);
        }
        end.duration_since(store.clock().now())
            .unwrap_or(Duration::ZERO)
    }

    /// Resolves once the lease rests on the store's record: at once for a
    /// lease its borrower took from the store, the usual case. A lease a
    /// return elsewhere handed to this process's queued borrower is held
    /// from the hand-off's arrival (rule "A handed slot is held on
    /// arrival", [`Limits::handed_bound`](crate::Limits::handed_bound)),
    /// and until the store has its process's confirmation
    /// [`time_left`](LeaseGuard::time_left) counts only to the store's
    /// short liveness bound for it (200 ms on Redis, 1 s on PostgreSQL);
    /// this resolves when the confirmation lands, and then `time_left`
    /// counts the ttl and the session again. It also resolves if the
    /// confirmation fails (the lease is lost: [`is_held`](LeaseGuard::is_held)
    /// is `false`), so check `is_held` after it. A holder that hands a
    /// deadline from `time_left` to something outside the process (a
    /// watchdog, as `semaphore run`'s guardian) awaits this first.
    ///
    /// # Cancel safety
    /// Cancel safe: it only watches.
    pub fn confirmed(&self) -> impl std::future::Future<Output = ()> + Send + '_ {
        let (session, lease) = (self.pool().store().session(), self.lease.id);
        async move {
            if let Some(session) = session {
                session.confirmed(lease).await;
            }
        }
    }

    /// Stops the keep-alive, if any (a check first: most guards have none,
    /// and the check is cheaper than a call of the drop glue).
    #[inline]
    fn stop_keeping(&mut self) {
        if self.keep.is_some() {
            self.keep = None;
        }
    }

    /// The lease's expiry as last renewed by keep-alive, or as granted.
    #[inline]
    fn latest_expiry(&self) -> std::time::SystemTime {
        if let Some(keep) = &self.keep
            && let Kept::Alive(latest) = &*keep.state.borrow()
        {
            return latest.expires_at;
        }
        self.lease.expires_at
    }

    /// Returns the lease now and reports whether it was still active:
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
        self.stop_keeping();
        let pool = self.pool.as_ref();
        let active = match pool.in_place() {
            // In place: no future.
            Some(now) if self.lease.pool == pool.id() => {
                let result = now.return_held(&self.lease);
                telemetry::returned(pool.name(), Some(&self.lease), Some(&result));
                result
            }
            _ => pool.return_held(&self.lease).await,
        }?;
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

    /// Keeps the lease until its ttl instead of returning it on drop,
    /// and hands back the plain [`Lease`]; return it early later
    /// with [`Pool::return_lease`] and its `id`. The lease is also unbound
    /// from its holder: it lives to its ttl whatever becomes of this
    /// process, the store handle or its session. The unbinding
    /// ([`Store::unbind`](crate::store::Store::unbind), one round trip) is
    /// written in place for the stores that do no I/O; before this returns
    /// on a worker of a multi-thread tokio runtime (the thread blocks in
    /// `block_in_place`, 3 s at most); and otherwise in the background,
    /// which the runtime's end (a `#[tokio::main]` returning) and the
    /// session's close wait for, 3 s at most. To know it landed, await
    /// the store's `unbind` as well: `pool.store().unbind(pool.id(),
    /// lease.id)` is `true` while the lease is active.
    pub fn forget(mut self) -> Lease {
        self.armed = false;
        self.keep = None;
        let lease = self.lease.clone();
        unbind_detached(self.pool().store(), &lease);
        lease.with_session(None)
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
        self.stop_keeping();
        let pool = self.pool.as_ref();
        if self.armed {
            telemetry::returned(pool.name(), Some(&self.lease), None);
            pool.return_held_detached(&self.lease);
        }
        telemetry::let_go(pool.name());
    }
}
