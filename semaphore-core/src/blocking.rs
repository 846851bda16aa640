//! The blocking API, for code with no async runtime (rule "Beyond the basic
//! model"), in the style of tokio's `blocking_*` methods: the same calls and
//! rules as the async ones, driven to completion on the library's own
//! runtime while the calling thread waits.

use std::future::Future;
use std::time::Duration;

use crate::detach::library_runtime;
use crate::{
    BorrowOptions, Error, Lease, LeaseGuard, LeaseId, OwnedLeaseGuard, Pool, PoolState, Result,
};

/// Runs `call` to completion from a thread with no runtime.
fn block_on<T>(operation: &'static str, call: impl Future<Output = Result<T>>) -> Result<T> {
    if tokio::runtime::Handle::try_current().is_ok() {
        return Err(Error::BlockingInRuntime { operation });
    }
    let runtime = library_runtime().ok_or(Error::NoRuntime { operation })?;
    runtime.block_on(call)
}

/// # Blocking API
///
/// Each `blocking_*` method is its async namesake run to completion while
/// the calling thread waits: same arguments, same errors, same rules
/// (fairness, cancel safety does not apply). The calls are driven by the
/// library's own runtime (one worker thread, started on first use), so no
/// runtime of the caller's is needed. A guard from
/// [`blocking_borrow`](Pool::blocking_borrow) returns its lease when
/// dropped, from any thread.
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
/// pool.blocking_register(2)?;
/// let lease = pool.blocking_borrow(Duration::from_secs(30), Duration::from_secs(5))?;
/// assert_eq!(lease.position, 0);
/// drop(lease); // returned at once, from this plain thread
/// assert_eq!(pool.blocking_inspect()?.in_use, 0);
/// # Ok(()) }
/// ```
impl Pool {
    /// [`register`](Pool::register), blocking. Same errors, and
    /// [`Error::BlockingInRuntime`] inside a runtime.
    pub fn blocking_register(&self, count: u32) -> Result<PoolState> {
        block_on("register", self.register(count))
    }

    /// [`inspect`](Pool::inspect), blocking. Same errors, and
    /// [`Error::BlockingInRuntime`] inside a runtime.
    pub fn blocking_inspect(&self) -> Result<PoolState> {
        block_on("inspect", self.inspect())
    }

    /// [`delete`](Pool::delete), blocking. Same errors, and
    /// [`Error::BlockingInRuntime`] inside a runtime.
    pub fn blocking_delete(&self) -> Result<bool> {
        block_on("delete", self.delete())
    }

    /// [`borrow_owned`](Pool::borrow_owned), blocking: waits up to `wait`
    /// for a slot. Same errors, and [`Error::BlockingInRuntime`] inside a
    /// runtime.
    pub fn blocking_borrow(&self, ttl: Duration, wait: Duration) -> Result<OwnedLeaseGuard> {
        block_on("borrow", self.borrow_owned(ttl, wait))
    }

    /// [`borrow_n`](Pool::borrow_n), blocking, with an owned guard: `n`
    /// slots as one lease (R15). Same errors, and
    /// [`Error::BlockingInRuntime`] inside a runtime.
    pub fn blocking_borrow_n(
        &self,
        n: u32,
        ttl: Duration,
        wait: Duration,
    ) -> Result<OwnedLeaseGuard> {
        self.blocking_borrow_with(ttl, wait, BorrowOptions::new().slots(n))
    }

    /// [`borrow_owned_with`](Pool::borrow_owned_with), blocking. Same
    /// errors, and [`Error::BlockingInRuntime`] inside a runtime.
    pub fn blocking_borrow_with(
        &self,
        ttl: Duration,
        wait: Duration,
        options: BorrowOptions,
    ) -> Result<OwnedLeaseGuard> {
        block_on("borrow", self.borrow_owned_with(ttl, wait, options))
    }

    /// [`return_lease`](Pool::return_lease), blocking. Same errors, and
    /// [`Error::BlockingInRuntime`] inside a runtime.
    pub fn blocking_return_lease(&self, lease: LeaseId) -> Result<bool> {
        block_on("return", self.return_lease(lease))
    }

    /// [`renew`](Pool::renew), blocking. Same errors, and
    /// [`Error::BlockingInRuntime`] inside a runtime.
    pub fn blocking_renew(&self, lease: &Lease, ttl: Duration) -> Result<Lease> {
        block_on("renew", self.renew(lease, ttl))
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
