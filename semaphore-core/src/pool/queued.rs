//! Two-phase borrows: join the queue now, collect the lease later
//! (dflockd's `enqueue` and `wait`; R5, R11, R12).

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use crate::telemetry;
use crate::wait::Seat;
use crate::{BorrowOptions, Error, LeaseGuard, OwnedLeaseGuard, Pool, Result};

/// The answer of [`Pool::enqueue`].
#[derive(Debug)]
#[must_use = "dropping a queued borrow leaves the queue; dropping a guard returns its lease"]
pub enum Enqueued {
    /// A slot was free (or the key named an active lease): the lease, now.
    Granted(OwnedLeaseGuard),
    /// Every slot was taken: the borrow keeps its place in the pool's
    /// queue until it is granted, fails, or is dropped.
    Queued(QueuedBorrow),
}

/// A borrow that waits in its pool's queue on its own, with no caller
/// awaiting it: the second phase of [`Pool::enqueue`].
///
/// Its place is kept, first come first served among this process's
/// borrowers of the pool (R11), for as long as the value lives, however
/// often [`wait`](QueuedBorrow::wait) is called and abandoned. A task
/// spawned on the runtime that called `enqueue` does the waiting; when it
/// is granted, the lease is held here until `wait` hands it over.
///
/// Dropping it leaves the queue (R12): a lease granted meanwhile that no
/// `wait` took is returned at once, so no slot stays granted to nobody.
#[derive(Debug)]
pub struct QueuedBorrow {
    pool: Pool,
    seat: Arc<Seat>,
    /// `None` once `wait` handed over the lease or the error.
    outcome: Option<oneshot::Receiver<Result<OwnedLeaseGuard>>>,
    task: JoinHandle<()>,
}

impl Pool {
    /// The first phase of a two-phase borrow (dflockd's `enqueue`): a lease
    /// at once if a slot is free, or else a place in the pool's queue that
    /// waits on its own, without a deadline, until collected with
    /// [`QueuedBorrow::wait`] or dropped.
    ///
    /// For a borrower that cannot hold one call open for the whole wait: an
    /// HTTP client behind proxies that cut long requests, a job scheduler
    /// that polls. [`borrow_with`](Pool::borrow_with) with a wait is the
    /// same borrow in one call. `ttl` and `options` are as there; the ttl
    /// runs from the grant, not from this call.
    ///
    /// # Errors
    /// Those of [`borrow_with`](Pool::borrow_with) but
    /// [`Error::Exhausted`]: a full pool queues instead. [`Error::NoRuntime`]
    /// outside a tokio runtime, since the waiting is a task.
    ///
    /// # Cancel safety
    /// Dropping the future leaves the queue and returns any lease granted
    /// meanwhile (R12).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::{sync::Arc, time::Duration};
    /// use semaphore_memory::{BorrowOptions, Enqueued, MemoryStore, Pool, PoolId};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), semaphore_memory::Error> {
    /// let pool = Pool::new(Arc::new(MemoryStore::new()), PoolId::from_name("gpus"));
    /// pool.register(1).await?;
    /// let held = pool.try_borrow(Duration::from_secs(60)).await?;
    ///
    /// let Enqueued::Queued(mut queued) = pool.enqueue(Duration::from_secs(60), BorrowOptions::new()).await? else {
    ///     unreachable!("the only slot is held");
    /// };
    /// assert_eq!(queued.place(), Some(1));
    /// // Polling for a while keeps the place; nothing is granted yet.
    /// assert!(queued.wait(Duration::from_millis(10)).await?.is_none());
    /// drop(held);
    /// let lease = queued.wait(Duration::from_secs(5)).await?.expect("the returned slot");
    /// assert_eq!(lease.position, 0);
    /// # Ok(()) }
    /// ```
    pub async fn enqueue(&self, ttl: Duration, options: BorrowOptions) -> Result<Enqueued> {
        let labels = options.check(&self.limits)?;
        let ttl = self.limits.clamp_ttl(ttl)?;
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return Err(Error::NoRuntime {
                operation: "enqueue",
            });
        };
        let seat = Arc::new(Seat::default());
        let (tx, outcome) = oneshot::channel();
        let pool = self.clone();
        let task = runtime.spawn({
            let seat = seat.clone();
            async move {
                let borrow = telemetry::Borrow::start(&pool.name, ttl, Duration::MAX);
                let result = borrow
                    .run(pool.acquire_clamped(
                        crate::LeaseId::new(),
                        ttl,
                        Duration::MAX,
                        labels,
                        Some(seat),
                        crate::acquire::First::Ask,
                    ))
                    .await;
                borrow.finish(&result);
                // A receiver gone drops the guard, which returns the lease.
                let _ = tx.send(result.map(|lease| LeaseGuard::new(pool, lease, ttl)));
            }
        });
        // Made first, so that dropping this future aborts the task.
        let mut queued = QueuedBorrow {
            pool: self.clone(),
            seat,
            outcome: Some(outcome),
            task,
        };
        let seat = queued.seat.clone();
        let Some(outcome) = queued.outcome.as_mut() else {
            unreachable!("set above");
        };
        tokio::select! {
            biased;
            answer = outcome => {
                queued.outcome = None;
                answer.map_err(ended)?.map(Enqueued::Granted)
            }
            () = seat.joined() => Ok(Enqueued::Queued(queued)),
        }
    }
}

impl QueuedBorrow {
    /// The pool it waits on.
    pub fn pool(&self) -> &Pool {
        &self.pool
    }

    /// Its place in this process's queue of the pool: 1 while it is the
    /// head (the next to be served), `None` once it was granted or ended.
    /// Borrowers of other processes sharing the store are not counted: a
    /// shared store serves the heads of all processes first come, first
    /// served (R11), so this is the place among this process's borrowers.
    pub fn place(&self) -> Option<usize> {
        self.pool
            .store()
            .changes()
            .place(self.pool.id(), self.seat.seq())
    }

    /// Waits up to `wait` for the lease: `Ok(Some(guard))` once granted,
    /// `Ok(None)` if it is still queued when the wait runs out (the place
    /// is kept; call again).
    ///
    /// # Errors
    /// The error that ended the borrow: [`Error::PoolNotFound`] if the pool
    /// was deleted, [`Error::Draining`] if it drains (unless borrowed with
    /// [`BorrowOptions::wait_while_draining`]), [`Error::Storage`] if the
    /// store failed in a way retrying would not mend. After a lease or an
    /// error the borrow is over, and further calls fail with
    /// [`Error::InvalidArgument`] naming `self`.
    ///
    /// # Cancel safety
    /// Cancel safe: dropping the future keeps the place, and a lease
    /// granted meanwhile waits for the next call.
    pub async fn wait(&mut self, wait: Duration) -> Result<Option<OwnedLeaseGuard>> {
        let Some(outcome) = self.outcome.as_mut() else {
            return Err(Error::InvalidArgument {
                field: "self",
                allowed: "a queued borrow that has not ended".into(),
                got: "one that already ended with a lease or an error".into(),
            });
        };
        let clock = self.pool.store().clock();
        let deadline = crate::clock::saturating_add(clock.now(), wait);
        tokio::select! {
            biased;
            answer = outcome => {
                self.outcome = None;
                answer.map_err(ended)?.map(Some)
            }
            () = clock.sleep_until(deadline) => Ok(None),
        }
    }
}

impl QueuedBorrow {
    /// Leaves the queue, as dropping does, and waits until it has left:
    /// once this returns, [`Pool::waiting`] no longer counts it, and a
    /// lease granted to it that no [`wait`](QueuedBorrow::wait) took is
    /// returned.
    ///
    /// # Errors
    /// [`Error::Storage`] if returning such a lease failed; the lease then
    /// frees itself at its ttl.
    pub async fn cancel(mut self) -> Result<()> {
        self.task.abort();
        let _ = (&mut self.task).await;
        if let Some(Ok(Ok(guard))) = self.outcome.take().map(|mut o| o.try_recv()) {
            guard.release().await?;
        }
        Ok(())
    }
}

impl Drop for QueuedBorrow {
    /// Leaves the queue: the waiting task is stopped, and a lease it was
    /// granted is returned with the guard that held it.
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The task's sender went without an answer: it panicked, or its runtime
/// shut down.
fn ended(_: oneshot::error::RecvError) -> Error {
    Error::Storage {
        operation: "enqueue",
        retryable: false,
        source: "the queued borrow's task ended without an answer (its runtime shut down)".into(),
    }
}
