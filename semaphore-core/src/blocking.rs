//! The blocking API, for code with no async runtime (rule "Beyond the basic
//! model"), in the style of tokio's `blocking_*` methods: the same calls and
//! rules as the async ones, driven to completion on the library's own
//! runtime while the calling thread waits ([`Pool::blocking`], and a
//! guard's `blocking_release` and `blocking_renew`).

use std::future::Future;
use std::time::Duration;

use crate::detach::library_runtime;
use crate::{
    error::Error, error::Result, guard::LeaseGuard, guard::OwnedLeaseGuard, id::LeaseId,
    lease::Lease, lease::PoolState, options::BorrowOptions, pool::Pool, pool::Renewing,
};

/// Runs `call` to completion from a thread with no runtime.
fn block_on<T>(operation: &'static str, call: impl Future<Output = Result<T>>) -> Result<T> {
    if tokio::runtime::Handle::try_current().is_ok() {
        return Err(Error::BlockingInRuntime { operation });
    }
    let runtime = library_runtime().ok_or(Error::NoRuntime { operation })?;
    runtime.block_on(call)
}

impl Pool {
    /// This pool's blocking API, for code with no async runtime: the same
    /// calls as the async methods, each run to completion while the
    /// calling thread waits ([`Blocking`]).
    pub fn blocking(&self) -> Blocking<'_> {
        Blocking { pool: self }
    }
}

/// A [`Pool`]'s blocking API ([`Pool::blocking`]), in the style of tokio's
/// `blocking_*` methods.
///
/// Each method is its async namesake on [`Pool`] run to completion while
/// the calling thread waits: same arguments, same errors, same rules
/// (fairness; cancel safety does not apply). The calls are driven by the
/// library's own runtime (one worker thread, started on first use), so no
/// runtime of the caller's is needed. A guard from
/// [`borrow`](Blocking::borrow) returns its lease when dropped, from any
/// thread.
///
/// They must not be called from inside a tokio runtime, where blocking
/// would stall the runtime's workers: there they fail at once with
/// [`Error::BlockingInRuntime`] instead of deadlocking. Await the async
/// methods there.
///
/// ```
/// use std::{sync::Arc, time::Duration};
/// use semaphore_memory::{MemoryStore, Pool, PoolId};
///
/// # fn main() -> Result<(), semaphore_memory::Error> {
/// let pool = Pool::new(Arc::new(MemoryStore::new()), PoolId::from_name("workers"));
/// pool.blocking().register(2)?;
/// let lease = pool.blocking().borrow(Duration::from_secs(30), Duration::from_secs(5))?;
/// assert_eq!(lease.position, 0);
/// drop(lease); // returned at once, from this plain thread
/// assert_eq!(pool.blocking().inspect()?.in_use, 0);
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Copy)]
pub struct Blocking<'a> {
    pool: &'a Pool,
}

impl Blocking<'_> {
    /// [`Pool::register`], blocking. Same errors, and
    /// [`Error::BlockingInRuntime`] inside a runtime.
    pub fn register(&self, count: u32) -> Result<PoolState> {
        block_on("register", self.pool.register(count))
    }

    /// [`Pool::inspect`], blocking. Same errors, and
    /// [`Error::BlockingInRuntime`] inside a runtime.
    pub fn inspect(&self) -> Result<PoolState> {
        block_on("inspect", self.pool.inspect())
    }

    /// [`Pool::delete`], blocking. Same errors, and
    /// [`Error::BlockingInRuntime`] inside a runtime.
    pub fn delete(&self) -> Result<bool> {
        block_on("delete", self.pool.delete())
    }

    /// [`Pool::borrow_owned`], blocking: waits up to `wait` for a slot.
    /// Same errors, and [`Error::BlockingInRuntime`] inside a runtime.
    pub fn borrow(&self, ttl: Duration, wait: Duration) -> Result<OwnedLeaseGuard> {
        block_on("borrow", self.pool.borrow_owned(ttl, wait))
    }

    /// [`Pool::borrow_owned_with`], blocking: several slots, a key, an
    /// owner label ([`BorrowOptions`]). Same errors, and
    /// [`Error::BlockingInRuntime`] inside a runtime.
    pub fn borrow_with(
        &self,
        ttl: Duration,
        wait: Duration,
        options: BorrowOptions,
    ) -> Result<OwnedLeaseGuard> {
        block_on("borrow", self.pool.borrow_owned_with(ttl, wait, options))
    }

    /// [`Pool::return_lease`], blocking. Same errors, and
    /// [`Error::BlockingInRuntime`] inside a runtime.
    pub fn return_lease(&self, lease: LeaseId) -> Result<bool> {
        block_on("return", self.pool.return_lease(lease))
    }

    /// [`Pool::renew`], blocking. Same errors, and
    /// [`Error::BlockingInRuntime`] inside a runtime.
    pub fn renew<'l>(&self, lease: impl Into<Renewing<'l>>, ttl: Duration) -> Result<Lease> {
        block_on("renew", self.pool.renew(lease, ttl))
    }
}

impl<P: AsRef<Pool>> LeaseGuard<P> {
    /// [`release`](LeaseGuard::release), blocking. Same errors, and
    /// [`Error::BlockingInRuntime`] inside a runtime (the lease is then
    /// returned as on drop).
    pub fn blocking_release(self) -> Result<bool> {
        if tokio::runtime::Handle::try_current().is_ok() {
            return Err(Error::BlockingInRuntime {
                operation: "release",
            });
        }
        let (pool, lease) = (self.pool().clone(), self.forget());
        block_on("release", async move { pool.return_held(&lease).await })
    }

    /// [`renew`](LeaseGuard::renew), blocking. Same errors, and
    /// [`Error::BlockingInRuntime`] inside a runtime.
    pub fn blocking_renew(&mut self, ttl: Duration) -> Result<()> {
        block_on("renew", self.renew(ttl))
    }
}
