//! [`Pool`]: the handle users call.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, SystemTime};

use crate::acquire::{First, acquire, keyed_lease};
use crate::cancel::InFlight;
use crate::clock::truncate_ms;
use crate::options::Labels;
use crate::telemetry::{self, Name};
use crate::wait::HandOff;

// The methods' files, in the order the docs page reads them (the
// borrows, which hand out guards, follow in `borrow` and `held`).
// Construction:
mod handle;
// administration:
mod admin;
mod drain;
// leases granted:
mod leases;
// introspection:
mod list;
mod waiters;
use crate::{
    error::Error, error::Result, id::LeaseId, id::PoolId, lease::Lease, limits::Limits,
    primitives::InPlace, primitives::Store, request::BorrowRequest,
};
pub use leases::Renewing;
pub use list::{MAX_PAGE, page_start};
pub use waiters::Waiting;

/// The session a bound request names: the one open now on a store with
/// sessions, `None` otherwise.
pub(crate) fn bind(store: &Arc<dyn Store>, bound: bool) -> Option<crate::id::SessionId> {
    if !bound {
        return None;
    }
    store.session().and_then(crate::session::Session::current)
}

/// How a borrow goes on after its common path ([`Pool::acquire`]): the
/// lease and its ttl as clamped, or the error, now or from the full path.
pub(crate) enum Acquired<'a> {
    /// Answered in place.
    Now(Result<(Lease, Duration)>),
    /// The full path.
    Later(FullPath<'a>),
}

/// The full path of a borrow, boxed: it runs only when the common path
/// could not answer.
pub(crate) type FullPath<'a> = Pin<Box<dyn Future<Output = Result<(Lease, Duration)>> + Send + 'a>>;

/// What the common path of a borrow found ([`Pool::grant_in_place`]).
enum Common {
    /// A free slot, granted.
    Granted(Lease),
    /// Not granted: the full path follows, told what was found.
    Not(First),
}

/// A handle on one pool of a store: register, inspect, delete, borrow and
/// return.
///
/// Cheap to clone (three `Arc`s and a few small values). Handles on the same pool
/// id of the same store share one wait queue, wherever they were made.
///
/// # Runtime
/// Waiting needs a tokio runtime with its timer enabled: a borrow that
/// must wait, called outside one, fails with [`Error::NoRuntime`] and holds
/// nothing. Every other call needs what its store needs and no more: the
/// memory and SQLite stores answer on any executor, or none (SQLite then
/// runs its statement in place on the calling thread); a networked store
/// needs the runtime its driver runs on.
///
/// ```
/// use std::{sync::Arc, time::Duration};
/// use semaphore_memory::{MemoryStore, Pool, PoolId};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), semaphore_memory::Error> {
/// let pool = Pool::new(Arc::new(MemoryStore::new()), PoolId::from_name("upstream"));
/// pool.register(2).await?;
///
/// let lease = pool.borrow(Duration::from_secs(30), Duration::from_secs(5)).await?;
/// assert_eq!(lease.position, 0);
/// assert_eq!(pool.inspect().await?.available, 1);
/// drop(lease); // returned at once
/// assert_eq!(pool.inspect().await?.available, 2);
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct Pool {
    pub(crate) store: Arc<dyn Store>,
    pub(crate) id: PoolId,
    pub(crate) limits: Limits,
    pub(crate) name: Name,
    /// The store's answers for this pool alone, once it gave them
    /// ([`InPlace::bind`]).
    pub(crate) bound: Bound,
}

/// A pool's own in-place answers ([`InPlace::bind`]), kept by its handle
/// once the store gives them.
#[derive(Clone, Default)]
pub(crate) struct Bound(OnceLock<Arc<dyn InPlace>>);

impl std::fmt::Debug for Bound {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.get().is_some() {
            "Bound"
        } else {
            "Unbound"
        })
    }
}

impl AsRef<Pool> for Pool {
    fn as_ref(&self) -> &Pool {
        self
    }
}

impl Pool {
    /// Where this pool's answers are made at once, if its store makes
    /// them so: the pool's own ([`InPlace::bind`]) once the store gave
    /// them, the store's until then.
    #[inline]
    pub(crate) fn in_place(&self) -> Option<&dyn InPlace> {
        match self.bound.0.get() {
            Some(bound) => Some(&**bound),
            None => self.bind_in_place(),
        }
    }

    /// [`in_place`](Pool::in_place) before the store gave this pool's own
    /// answers (or for a store that gives none).
    #[cold]
    fn bind_in_place(&self) -> Option<&dyn InPlace> {
        let store = self.store.in_place()?;
        match store.bind(self.id) {
            Some(bound) => Some(&**self.bound.0.get_or_init(|| bound)),
            None => Some(store),
        }
    }

    pub(crate) fn now(&self) -> SystemTime {
        truncate_ms(self.store.clock().now())
    }

    /// Tells this process's waiters of the pool that a call through this
    /// handle changed it (a renewal, a forced return, a count, a drain, a
    /// delete): the core does it once here, after the store's step
    /// committed, so that no store writes it again
    /// ([`Changes::notify`](crate::store::Changes::notify)). A return is
    /// the store's to tell of: it may hand the slot over in its own step.
    pub(crate) fn changed(&self) {
        self.store.changes().notify(self.id);
    }

    /// The lease, and its ttl as clamped; traced and counted. The common
    /// path ([`grant_in_place`](Pool::grant_in_place)) runs in this call
    /// and answers [`Acquired::Now`], with no future of its own; the full
    /// path is a boxed future ([`Acquired::Later`]): its state is large, and
    /// the common path should neither carry nor copy it. Callers are async
    /// fns, so nothing runs before they are polled.
    pub(crate) fn acquire(&self, ttl: Duration, wait: Duration, labels: Labels) -> Acquired<'_> {
        let ttl = match self.limits.clamp_ttl(ttl) {
            Ok(ttl) => ttl,
            Err(e) => return Acquired::Now(Err(e)),
        };
        let wait = self.limits.clamp_wait(wait);
        let borrow = telemetry::Borrow::start(&self.name, ttl, wait);
        // The first attempt's lease id, in place or on the full path.
        let first = LeaseId::new();
        match self.grant_in_place(first, ttl, &labels) {
            Common::Granted(lease) => {
                let result = Ok(lease);
                borrow.finish(&result);
                Acquired::Now(result.map(|lease| (lease, ttl)))
            }
            Common::Not(found) => Acquired::Later(Box::pin(async move {
                let slow = self.acquire_clamped(first, ttl, wait, labels, found);
                let result = borrow.run(slow).await;
                borrow.finish(&result);
                result.map(|lease| (lease, ttl))
            })),
        }
    }

    /// The common path (a free slot, nobody queued ahead in this
    /// process): one attempt made in place, by a store that answers
    /// without I/O ([`Store::in_place`]), for a plain borrow (no key:
    /// a keyed one may find its lease behind a queue). `None` if the store
    /// cannot answer in place, someone is queued on the pool here, or the
    /// pool has no free slot now: the borrow then takes the full path,
    /// which waits (and asks again unless it was refused here). Nothing is
    /// in flight in between, so a grant here cannot be left to nobody.
    fn grant_in_place(&self, lease: LeaseId, ttl: Duration, labels: &Labels) -> Common {
        if labels.key.is_some() {
            return Common::Not(First::Ask);
        }
        if self.store.changes().holds_back(self.id) {
            return Common::Not(First::HeldBack);
        }
        let mut request = BorrowRequest::new(self.id, lease, ttl);
        request.slots = labels.slots;
        request.bound = labels.bound;
        request.owner.clone_from(&labels.owner);
        if let Some(session) = self.store.session() {
            request.session = session.current().filter(|_| labels.bound);
            // A bound lease with no session open: the full path says so.
            if labels.bound && request.session.is_none() {
                return Common::Not(First::Ask);
            }
        }
        // An error (a drain the borrower may wait out, a missing pool) is
        // the full path's to answer: it asks again.
        match self.in_place().map(|s| s.try_borrow(&request)) {
            Some(Ok(crate::request::TryBorrow::Granted { lease })) => Common::Granted(lease),
            Some(Ok(crate::request::TryBorrow::Exhausted { .. })) => Common::Not(First::Refused),
            _ => Common::Not(First::Ask),
        }
    }

    /// The lease, for a `ttl` and `wait` already clamped; `first` is the
    /// lease id of the first attempt (one made in place that was refused
    /// granted nothing under it).
    #[allow(clippy::manual_async_fn)] // on purpose: see `acquire`
    fn acquire_clamped(
        &self,
        first: LeaseId,
        ttl: Duration,
        wait: Duration,
        labels: Labels,
        found: First,
    ) -> impl Future<Output = Result<Lease>> {
        async move {
            // Only the deadline counts from it: no need for whole milliseconds.
            let start = self.store.clock().now();
            if let Some(key) = &labels.key {
                // A keyed retry must not queue behind others for a lease it
                // holds; with nobody queued, the first attempt finds it anyway.
                if self.store.changes().waiting(self.id) > 0
                    && let Some(lease) = keyed_lease(&self.store, self.id, key).await?
                {
                    return Ok(lease);
                }
            }
            let exhausted = || Error::Exhausted {
                pool: self.id,
                waited: wait,
            };
            let mut last = first;
            acquire(crate::acquire::Borrowing {
                store: &self.store,
                pools: std::slice::from_ref(&self.id),
                start,
                wait,
                handoff: Some(HandOff {
                    lease: first,
                    slots: labels.slots,
                    bound: labels.bound,
                    ttl,
                    key: labels.key.clone(),
                    owner: labels.owner.clone(),
                }),
                draining_waits: labels.wait_while_draining,
                first: found,
                exhausted,
                attempt: |_now: SystemTime, waiter: Option<crate::id::WaiterId>, again: bool| {
                    // Only the first attempt, made before queueing, is made
                    // without a waiter (a borrow of a contended pool makes
                    // none): a hand-off reuses its id, so it must be the
                    // one attempt that can never have been granted then.
                    // An attempt after one whose answer was lost asks under
                    // its id, so that the store answers what it granted.
                    let lease = if waiter.is_none() {
                        first
                    } else if again {
                        last
                    } else {
                        LeaseId::new()
                    };
                    last = lease;
                    let mut request = BorrowRequest::new(self.id, lease, ttl);
                    request.slots = labels.slots;
                    request.bound = labels.bound;
                    request.session = bind(&self.store, labels.bound);
                    request.retried = again && waiter.is_some();
                    request.waiter = waiter;
                    request.key.clone_from(&labels.key);
                    request.owner.clone_from(&labels.owner);
                    InFlight::one(&self.store, request)
                },
            })
            .await
        }
    }
}
