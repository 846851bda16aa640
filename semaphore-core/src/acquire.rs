//! The wait loop shared by single and multi-pool borrows.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use crate::cancel::{Answer, InFlight, Made, QueuePlace, Step};
use crate::clock::{saturating_add, truncate_ms};
use crate::wait::HandOff;
use crate::{
    error::Error, error::Result, id::LeaseId, id::PoolId, id::WaiterId, lease::Lease,
    primitives::Store,
};

/// What a borrower found before [`acquire`], on its common path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum First {
    /// Nothing yet: whether a queue holds it back is looked up, and if
    /// none does, the store is asked at once.
    Ask,
    /// Asked in place an instant ago and refused, with no queue ahead.
    Refused,
    /// A queue here holds it back (just looked up).
    HeldBack,
}

/// Borrows through `attempt` on `pools`, waiting up to `wait` from `start`.
///
/// Asks the store at once if no borrower of these pools waits in this
/// process, but those set aside (so that asking jumps no one); a borrower
/// that may wait on a store without in-place answers first takes its place
/// in this process's queue, so that one who comes while that first ask is
/// in flight queues behind it (R11 counts from the call). Otherwise, or if that finds
/// nothing free, queues in every pool's queue and asks again each time its
/// turn comes while it heads them all: when a pool changes, when the
/// earliest lease it was told of expires, or when the borrower ahead leaves.
/// A single-pool borrower without a key that may wait, on a pool whose
/// last borrow here was refused at its first ask
/// ([`Changes::contended`](crate::wait::Changes)), queues before it asks:
/// its first ask carries its place, so that a store with a shared queue
/// queues it in that round trip, not in a second one.
/// Fails with `exhausted()` once `wait` has passed (the deadline saturates,
/// so no `wait` overflows), and with [`Error::NoRuntime`] if it must wait
/// outside a tokio runtime. A retryable storage error while queued is
/// retried (50 ms, doubling to 1 s) until the wait runs out, and is then
/// the error returned. Dropping the future leaves every queue at once
/// and returns a grant that lands after the drop; an attempt still in
/// the store then leaves once more when it finishes, since it may have
/// written the place just forgotten.
///
/// A pool that drains fails the borrow with [`Error::Draining`] at once,
/// unless `draining_waits`: the borrower then waits as if the pool were
/// full, until the drain ends (the store notifies) or the wait runs out,
/// which then reports the drain.
///
/// `first` says what the caller already found ([`First`]): a caller
/// refused by an attempt of its own an instant ago (the common path, made
/// in place) makes no first attempt before it queues.
///
/// A borrower that does not wait and is held back by a queue (it does not
/// ask the store, whose answer would jump the queue) reads the pools'
/// states instead: a draining pool fails it with [`Error::Draining`], as
/// it fails one that waits, not with `exhausted()`.
///
/// A single-pool borrower of more slots than the pool's count, refused, is
/// set aside: it keeps its place but holds back no one,
/// sleeps until a change is told of, and then checks the count (the
/// first set aside checks for all); once the count reaches its weight it
/// is again the head, ahead of those queued after it.
#[allow(clippy::too_many_arguments)]
#[allow(clippy::manual_async_fn)] // on purpose: see the body
pub(crate) fn acquire<A: Answer>(
    store: &Arc<dyn Store>,
    pools: &[PoolId],
    start: SystemTime,
    wait: Duration,
    mut handoff: Option<HandOff>,
    draining_waits: bool,
    first: First,
    exhausted: impl Fn() -> Error,
    mut attempt: impl FnMut(SystemTime, Option<WaiterId>, bool) -> InFlight<A>,
) -> impl Future<Output = Result<A::Granted>> {
    // An async block, not an async fn: an async fn's future keeps each
    // argument twice (as given, and moved into the body), and this one is
    // inside every borrow's future.
    async move {
        let changes = store.changes();
        // The drain a waiting borrower last found, reported if its wait runs
        // out while the pool still drains.
        let mut drained = None;
        // Lease ids of an attempt that failed after it may have been
        // granted (a lost answer): the next attempt asks under them, so
        // that the store answers the grant it made; whatever this borrow
        // does not end up holding of them is returned (rule "Lost replies").
        let mut unsure = Unsure::new(store, pools);
        // A single-pool borrow of more than one slot checks the count when
        // refused: above it, it is set aside.
        let weight = handoff
            .as_ref()
            .filter(|_| pools.len() == 1)
            .map_or(1, |asked| asked.slots);
        let held_back = match first {
            First::Ask => pools.iter().any(|pool| changes.holds_back(*pool)),
            First::Refused => false,
            First::HeldBack => true,
        };
        // A single-pool borrower without a key that will wait on a pool
        // contended here (the last borrow's first ask was refused) queues
        // first: its first ask carries its place, so that a refusal queues
        // it in the store in that same round trip.
        let asks_first = first == First::Ask && !held_back;
        let contended = asks_first
            && !wait.is_zero()
            && pools.len() == 1
            && handoff.as_ref().is_some_and(|asked| asked.key.is_none())
            && changes.contended(pools[0]);
        // The pool whose borrow's first ask of the store is still to come:
        // its answer tells the next borrows whether the pool is contended.
        let mut first_ask = (asks_first && pools.len() == 1).then(|| pools[0]);
        // A caller that was just refused in place asks no second time.
        let asks_at_once = asks_first && !contended;
        // R11 counts from the call: a borrower that may wait, whose first
        // ask can be in flight (a store without in-place answers), takes
        // its place in this process's queue before it asks, so that one who
        // comes meanwhile queues behind it instead of asking beside it.
        let mut early = None;
        if asks_at_once
            && !wait.is_zero()
            && store.in_place().is_none()
            && tokio::runtime::Handle::try_current().is_ok()
        {
            changes.check_process("borrow")?;
            let ticket = changes
                .enqueue(
                    store,
                    store.clock().now(),
                    pools,
                    handoff.take(),
                    !draining_waits,
                )
                .map_err(|pool| Error::Draining { pool })?;
            // Its first ask is its own call in flight: no return here hands
            // it a lease (under the very id it asks with) or claims it meanwhile.
            ticket.start_first_ask();
            early = Some(ticket);
        }
        if asks_at_once {
            // Awaited through a reference: awaiting it by value would keep
            // it twice in this future (the binding and the awaited value).
            let mut first = attempt(start, None, false);
            let ids = first.made();
            let answer = (&mut first).await;
            if let Some(ticket) = &early {
                ticket.done_asking();
            }
            match answer {
                Ok(answer) => {
                    let step = answer.step();
                    if let Some(pool) = first_ask.take() {
                        changes.first_answered(pool, matches!(step, Step::Granted(_)));
                    }
                    if let Step::Granted(granted) = step {
                        return Ok(granted);
                    }
                }
                Err(e @ Error::Draining { .. }) if draining_waits => drained = Some(e),
                Err(e) => {
                    unsure.failed(&e, ids);
                    return Err(e);
                }
            }
        }
        if wait.is_zero() {
            if held_back
                && !draining_waits
                && let Some(e) = drained_behind_a_queue(store, pools).await
            {
                return Err(e);
            }
            return Err(drained.unwrap_or_else(exhausted));
        }
        if tokio::runtime::Handle::try_current().is_err() {
            return Err(Error::NoRuntime {
                operation: "borrow",
            });
        }

        let clock = store.clock();
        // Refused while the pool's queue is marked draining: its head found
        // the drain (and tells everyone queued, under the queue's lock).
        let ticket = match early {
            Some(ticket) => ticket,
            None => {
                changes.check_process("borrow")?;
                changes
                    .enqueue(store, clock.now(), pools, handoff, !draining_waits)
                    .map_err(|pool| Error::Draining { pool })?
            }
        };
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
                // that came before the deadline still counts. A place of ours
                // that step did not end is left as the borrow ends.
                if !ticket.place_left() {
                    place.granted();
                }
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
            if let Some(pool) = ticket.take_drained() {
                return Err(Error::Draining { pool });
            }
            if ticket.is_aside() {
                // Woken as the first set aside: check the count for all.
                weigh(store, pools[0]).await?;
                next_expiry = None;
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
                    if !ticket.place_left() {
                        place.granted();
                    }
                    return Ok(A::handed(lease));
                }
                continue;
            }
            // In a block, awaited through a reference: kept once, and not
            // across the awaits below.
            let (ids, answer) = {
                let mut asking =
                    attempt(truncate_ms(clock.now()), Some(place.waiter()), unsure.any())
                        .made_from(&place);
                (asking.made(), (&mut asking).await)
            };
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
                    // Answered under the unsure ids: the store found (and
                    // answers) whatever it granted under them before.
                    unsure.settled();
                    let step = answer.step();
                    if let Some(pool) = first_ask.take() {
                        changes.first_answered(pool, matches!(step, Step::Granted(_)));
                    }
                    match step {
                        Step::Granted(granted) => {
                            place.granted();
                            // Dropping the ticket wakes the next head of each queue.
                            return Ok(granted);
                        }
                        Step::Exhausted(at) => {
                            if weight > 1 {
                                // Boxed: kept beside the answer, it would
                                // be the largest state of this future, which
                                // every waiting borrow allocates.
                                Box::pin(weigh(store, pools[0])).await?;
                            }
                            // Set aside, it sleeps until a change is told of.
                            next_expiry = at
                                .filter(|_| !ticket.is_aside())
                                .map(|at| clock.sleep_until(at));
                        }
                    }
                }
                Err(
                    e @ Error::Storage {
                        retryable: true, ..
                    },
                ) => {
                    unsure.failed(&e, ids);
                    let backoff = next_backoff(failed.as_ref().map(|(_, last)| *last));
                    retry = Some(Box::pin(tokio::time::sleep(backoff)));
                    failed = Some((e, backoff));
                }
                Err(e @ Error::Draining { pool }) if draining_waits => {
                    // Asleep until the store tells of a change: the drain's
                    // end notifies the pool's waiters. Those behind that do
                    // not wait for a drain leave now.
                    changes.found_draining(pool);
                    failed = None;
                    next_expiry = None;
                    drained = Some(e);
                }
                Err(e) => return Err(e),
            }
        }
    }
}

/// Whether one of `pools` drains, for a borrower that does not wait and
/// did not ask the store because this process's queue holds it back: the
/// drain it must fail with rather than exhausted (rule "Drain"), as one
/// that waits would at once. One read of each pool's state; a pool the
/// store no longer knows fails it as unknown. A store that cannot
/// answer leaves it exhausted, as the queue says.
async fn drained_behind_a_queue(store: &Arc<dyn Store>, pools: &[PoolId]) -> Option<Error> {
    for pool in pools {
        match store.inspect(*pool).await {
            Ok(state) if state.draining => return Some(Error::Draining { pool: *pool }),
            Err(e @ Error::PoolNotFound { .. }) => return Some(e),
            _ => {}
        }
    }
    None
}

/// Reads the count of `pool` and [weighs](crate::wait::Changes::weigh) its
/// queue with it, unless the queue learned of a change while
/// the read was in flight ([`weigh_read`](crate::wait::Changes::weigh_read)):
/// a stale count must not set aside again a waiter a raise let back. A
/// storage error leaves the queue as it is, for the next change to weigh
/// again.
///
/// # Errors
/// [`Error::PoolNotFound`] if the pool was deleted.
async fn weigh(store: &Arc<dyn Store>, pool: PoolId) -> Result<()> {
    let changes = store.changes();
    let seen = changes.news(pool);
    match store.inspect(pool).await {
        Ok(state) => changes.weigh_read(pool, state.count, seen),
        Err(e @ Error::PoolNotFound { .. }) => return Err(e),
        Err(_) => {}
    }
    Ok(())
}

/// The lease ids of an attempt whose answer was lost (it failed with a
/// storage error, so it may have been granted): asked under again by the
/// next attempt, and returned if the borrow ends without them (dropped,
/// timed out, failed, or served by a hand-off).
struct Unsure<'a> {
    store: &'a Arc<dyn Store>,
    pools: &'a [PoolId],
    ids: Option<Made>,
}

impl<'a> Unsure<'a> {
    fn new(store: &'a Arc<dyn Store>, pools: &'a [PoolId]) -> Self {
        Self {
            store,
            pools,
            ids: None,
        }
    }

    /// Whether the next attempt must ask under the last attempt's ids.
    fn any(&self) -> bool {
        self.ids.is_some()
    }

    /// An attempt under `ids` failed with `e`: a storage error may hide a
    /// grant. Any other error was decided before granting.
    fn failed(&mut self, e: &Error, ids: Made) {
        if matches!(e, Error::Storage { .. }) {
            self.ids = Some(ids);
        }
    }

    /// The store answered an attempt under the ids.
    fn settled(&mut self) {
        self.ids = None;
    }
}

impl Drop for Unsure<'_> {
    fn drop(&mut self) {
        let Some(ids) = self.ids.take() else {
            return;
        };
        // One id per pool, in order (one pool: one id).
        let pairs: Vec<(PoolId, LeaseId)> = self
            .pools
            .iter()
            .copied()
            .zip(ids.ids().iter().copied())
            .collect();
        let store = self.store.clone();
        crate::detach::run_detached(Box::pin(async move {
            for (pool, lease) in pairs {
                // Nobody to tell of a failure: the lease then frees itself
                // at its ttl.
                let _ = store.return_lease(pool, lease).await;
            }
        }));
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

/// The active lease of `pool` that was borrowed with stored key `key`,
/// if any: what a keyed retry gets without queueing.
///
/// # Errors
/// [`Error::KeyReused`] if the lease under the key's name was borrowed
/// with another request digest; the store's errors.
pub(crate) async fn keyed_lease(
    store: &Arc<dyn Store>,
    pool: PoolId,
    key: &str,
) -> Result<Option<Lease>> {
    let name = crate::keys::key_name(key);
    let holders = store.holders(pool).await?;
    let Some(holder) = holders
        .into_iter()
        .find(|h| h.key.as_deref().map(crate::keys::key_name) == Some(name))
    else {
        return Ok(None);
    };
    if holder.key.as_deref() != Some(key) {
        return Err(Error::KeyReused { pool });
    }
    Ok(Some(holder.lease))
}
