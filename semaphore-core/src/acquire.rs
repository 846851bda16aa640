//! The wait loop shared by single and multi-pool borrows (SPEC R5, R11,
//! R12).

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use crate::cancel::{Answer, InFlight, QueuePlace, Step};
use crate::clock::{saturating_add, truncate_ms};
use crate::wait::HandOff;
use crate::{Error, Lease, PoolId, Result, Store, WaiterId};

/// Borrows through `attempt` on `pools`, waiting up to `wait` from `start`.
///
/// Asks the store at once if no borrower of these pools waits in this
/// process (so that asking jumps no one). Otherwise, or if that finds
/// nothing free, queues in every pool's queue and asks again each time its
/// turn comes while it heads them all (R11): when a pool changes, when the
/// earliest lease it was told of expires, or when the borrower ahead leaves.
/// Fails with `exhausted()` once `wait` has passed (the deadline saturates,
/// so no `wait` overflows), and with [`Error::NoRuntime`] if it must wait
/// outside a tokio runtime. A retryable storage error while queued is
/// retried (50 ms, doubling to 1 s) until the wait runs out, and is then
/// the error returned. Dropping the future leaves every queue at once
/// and returns a grant that lands after the drop (R12); an attempt still in
/// the store then leaves once more when it finishes, since it may have
/// written the place just forgotten.
///
/// A pool that drains fails the borrow with [`Error::Draining`] at once,
/// unless `draining_waits`: the borrower then waits as if the pool were
/// full, until the drain ends (the store notifies) or the wait runs out,
/// which then reports the drain.
#[allow(clippy::too_many_arguments)]
#[allow(clippy::manual_async_fn)] // on purpose: see the body
pub(crate) fn acquire<A: Answer>(
    store: &Arc<dyn Store>,
    pools: &[PoolId],
    start: SystemTime,
    wait: Duration,
    handoff: Option<HandOff>,
    draining_waits: bool,
    exhausted: impl Fn() -> Error,
    mut attempt: impl FnMut(SystemTime, Option<WaiterId>) -> InFlight<A>,
) -> impl Future<Output = Result<A::Granted>> {
    // An async block, not an async fn: an async fn's future keeps each
    // argument twice (as given, and moved into the body), and this one is
    // inside every borrow's future (issue 27).
    async move {
        let changes = store.changes();
        // The drain a waiting borrower last found, reported if its wait runs
        // out while the pool still drains.
        let mut drained = None;
        if pools.iter().all(|pool| changes.waiting(*pool) == 0) {
            match attempt(start, None).await {
                Ok(answer) => {
                    if let Step::Granted(granted) = answer.step() {
                        return Ok(granted);
                    }
                }
                Err(e @ Error::Draining { .. }) if draining_waits => drained = Some(e),
                Err(e) => return Err(e),
            }
        }
        if wait.is_zero() {
            return Err(drained.unwrap_or_else(exhausted));
        }
        if tokio::runtime::Handle::try_current().is_err() {
            return Err(Error::NoRuntime {
                operation: "borrow",
            });
        }

        let clock = store.clock();
        let ticket = changes.enqueue(store, pools, handoff);
        let place = QueuePlace::new(store, pools, ticket.id());
        let mut timeout = clock.sleep_until(saturating_add(start, wait));
        let mut next_expiry = None;
        // A retryable storage failure while waiting (a connection lost, a lock
        // held too long) is retried with backoff until the wait runs out, and
        // then reported as itself, never as exhausted.
        let mut failed: Option<(Error, Duration)> = None;
        let mut retry = None;
        let mut timed_out = false;
        loop {
            tokio::select! {
                biased;
                () = ticket.turn() => {}
                () = async {
                    match next_expiry.as_mut() {
                        Some(expiry) => expiry.await,
                        None => std::future::pending().await,
                    }
                } => next_expiry = None,
                () = async {
                    match retry.as_mut() {
                        Some(retry) => retry.await,
                        None => std::future::pending().await,
                    }
                } => retry = None,
                () = &mut timeout => timed_out = true,
            }
            if let Some(lease) = ticket.take_lease() {
                // A return in this process granted to us in its own step; one
                // that came before the deadline still counts.
                place.granted();
                return Ok(A::handed(lease));
            }
            if timed_out {
                return Err(failed.map(|(e, _)| e).or(drained).unwrap_or_else(exhausted));
            }
            if let Some(at) = ticket.take_next_expiry() {
                // A hand-off left the pool full and made us head: it told us
                // the earliest expiry, so there is nothing to ask.
                next_expiry = at.map(|at| clock.sleep_until(at));
                continue;
            }
            if !ticket.is_head() {
                continue;
            }
            if !ticket.start_asking() {
                // A return in this process claimed it to hand it a slot
                // (the claim wakes it either way), or has just handed it
                // one: asking now could find that very lease again (one
                // handed through the store's queue) and hold it twice.
                if let Some(lease) = ticket.take_lease() {
                    place.granted();
                    return Ok(A::handed(lease));
                }
                continue;
            }
            let answer = attempt(truncate_ms(clock.now()), Some(place.waiter()))
                .made_from(&place)
                .await;
            let granted = matches!(&answer, Ok(a) if !a.leases().is_empty());
            if !granted {
                // Claimable again. A granted head stays unclaimable until
                // its ticket is gone: a claim could otherwise deliver it
                // the very lease its look just found (one a return handed
                // it through the store's queue), and the ticket would then
                // return that lease as unwanted while the borrower holds it.
                ticket.done_asking();
            }
            match answer {
                Ok(answer) => {
                    failed = None;
                    drained = None;
                    match answer.step() {
                        Step::Granted(granted) => {
                            place.granted();
                            // Dropping the ticket wakes the next head of each queue.
                            return Ok(granted);
                        }
                        Step::Exhausted(at) => next_expiry = at.map(|at| clock.sleep_until(at)),
                    }
                }
                Err(
                    e @ Error::Storage {
                        retryable: true, ..
                    },
                ) => {
                    let backoff = next_backoff(failed.as_ref().map(|(_, last)| *last));
                    retry = Some(Box::pin(tokio::time::sleep(backoff)));
                    failed = Some((e, backoff));
                }
                Err(e @ Error::Draining { .. }) if draining_waits => {
                    // Asleep until the store tells of a change: the drain's
                    // end notifies the pool's waiters.
                    failed = None;
                    next_expiry = None;
                    drained = Some(e);
                }
                Err(e) => return Err(e),
            }
        }
    }
}

/// The first pause before a waiter retries a retryable storage failure.
const RETRY_FIRST: Duration = Duration::from_millis(50);

/// The longest pause between retries.
const RETRY_MAX: Duration = Duration::from_secs(1);

/// The pause before the next retry of a retryable storage failure, after
/// a pause of `last` (`None` for the first): 50 ms, doubling to 1 s.
pub(crate) fn next_backoff(last: Option<Duration>) -> Duration {
    last.map_or(RETRY_FIRST, |last| (last * 2).min(RETRY_MAX))
}

/// The active lease of `pool` that was borrowed with key `key`, if
/// any: what a keyed retry gets without queueing.
pub(crate) async fn keyed_lease(
    store: &Arc<dyn Store>,
    pool: PoolId,
    key: &str,
) -> Result<Option<Lease>> {
    let holders = store.holders(pool).await?;
    Ok(holders
        .into_iter()
        .find(|h| h.key.as_deref() == Some(key))
        .map(|h| h.lease))
}
