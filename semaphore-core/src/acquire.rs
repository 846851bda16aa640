//! The wait loop shared by single and multi-pool borrows.

use std::ops::ControlFlow;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use crate::cancel::{Answer, InFlight, Made, QueuePlace, Step};
use crate::clock::saturating_add;
use crate::wait::HandOff;

mod waiting;
use crate::{
    error::Error, error::Result, id::LeaseId, id::PoolId, id::WaiterId, lease::Lease,
    primitives::Store,
};
use waiting::Waiting;

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

/// Borrows through `borrowing.attempt` on `borrowing.pools`, waiting up to
/// `wait` from `start` ([`Borrowing`]).
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
/// outside a tokio runtime. A retryable storage error of a borrower that
/// waits, its first ask's included, is retried (50 ms, doubling to 1 s)
/// until the wait runs out, and is then the error returned. Dropping the
/// future leaves every queue at once and returns a grant that lands after
/// the drop; an attempt still in the store then leaves once more when it
/// finishes, since it may have written the place just forgotten.
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
#[allow(clippy::manual_async_fn)] // on purpose: see the body
pub(crate) fn acquire<'a, A, E, F>(
    mut borrowing: Borrowing<'a, E, F>,
) -> impl Future<Output = Result<A::Granted>> + use<'a, A, E, F>
where
    A: Answer,
    E: Fn() -> Error + Send,
    F: FnMut(SystemTime, Option<WaiterId>, bool) -> InFlight<A> + Send,
{
    // An async block, not an async fn: an async fn's future keeps its
    // argument twice (as given, and moved into the body), and this one is
    // inside every waiting borrow's future.
    async move {
        // Lease ids of an attempt that failed after it may have been
        // granted (a lost answer): the next attempt asks under them, so
        // that the store answers the grant it made; whatever this borrow
        // does not end up holding of them is returned (rule "Lost replies").
        let mut unsure = Unsure::new(borrowing.store, borrowing.pools);
        let mut plan = borrowing.plan()?;
        let (drained, failed) = match borrowing.ask_first(&mut plan, &mut unsure).await {
            ControlFlow::Break(end) => return end,
            ControlFlow::Continue(Unanswered::Drained(drained)) => (drained, None),
            ControlFlow::Continue(Unanswered::Failed(e)) => (None, Some((e, next_backoff(None)))),
        };
        if borrowing.wait.is_zero() {
            // Not granted, and not waiting: the drain it found, or behind a
            // queue (it did not ask the store, whose answer would jump the
            // queue) the drain the pools' states show, or exhausted.
            if plan.held_back
                && !borrowing.draining_waits
                && let Some(e) = drained_behind_a_queue(borrowing.store, borrowing.pools).await
            {
                return Err(e);
            }
            return Err(drained.unwrap_or_else(&borrowing.exhausted));
        }
        if tokio::runtime::Handle::try_current().is_err() {
            return Err(Error::NoRuntime {
                operation: "borrow",
            });
        }
        let clock = borrowing.store.clock();
        let ticket = match plan.early.take() {
            Some(ticket) => ticket,
            None => borrowing.enqueue()?,
        };
        let mut waiting = Waiting {
            place: QueuePlace::new(borrowing.store, borrowing.pools, ticket.id()),
            ticket,
            timeout: clock.sleep_until(saturating_add(borrowing.start, borrowing.wait)),
            next_expiry: None,
            // A first ask that failed retryably is retried after the first
            // pause, as a waiter's ask would be.
            retry: failed
                .as_ref()
                .map(|(_, pause)| Box::pin(tokio::time::sleep(*pause))),
            failed,
            drained,
            first_ask: plan.first_ask,
            weight: plan.weight,
        };
        waiting.run(&mut borrowing, &mut unsure).await
    }
}

/// One borrow through the wait engine, as its caller made it: built once,
/// and read by each phase of [`acquire`].
pub(crate) struct Borrowing<'a, E, F> {
    pub(crate) store: &'a Arc<dyn Store>,
    /// The pools, in the order the store locks them.
    pub(crate) pools: &'a [PoolId],
    /// When the borrow began, by the store's clock: the wait counts from it.
    pub(crate) start: SystemTime,
    pub(crate) wait: Duration,
    /// What a hand-off grants a single-pool borrower; taken by its queue.
    pub(crate) handoff: Option<HandOff>,
    /// A drain is waited out as a full pool, not failed at once.
    pub(crate) draining_waits: bool,
    /// What the caller already found ([`First`]).
    pub(crate) first: First,
    /// The error a wait that runs out ends with.
    pub(crate) exhausted: E,
    /// Makes one attempt: at a reading of the clock, from the borrower's
    /// place in the store's queue if it has one, and under the last
    /// attempt's ids if its answer was lost (`true`).
    pub(crate) attempt: F,
}

/// What a borrow decided before its first ask ([`Borrowing::plan`]).
struct Plan<'a> {
    /// A queue here holds it back: it asks the store only as the head.
    held_back: bool,
    /// The pool whose first ask's answer tells the next borrows whether it
    /// is contended ([`Changes::first_answered`](crate::wait::Changes)).
    first_ask: Option<PoolId>,
    /// It asks the store at once, before it waits in a queue.
    asks_at_once: bool,
    /// Its place in this process's queue, taken before that first ask.
    early: Option<crate::wait::Ticket<'a>>,
    /// How many slots a single-pool borrower asks for (1 for several pools).
    weight: u32,
}

impl<'a, A, E, F> Borrowing<'a, E, F>
where
    A: Answer,
    E: Fn() -> Error + Send,
    F: FnMut(SystemTime, Option<WaiterId>, bool) -> InFlight<A> + Send,
{
    /// Whether the borrow asks at once, and whether it first takes its
    /// place in this process's queue (R11 counts from the call: a
    /// borrower that may wait, whose first ask can be in flight on a store
    /// without in-place answers, queues first, so that one who comes
    /// meanwhile queues behind it instead of asking beside it).
    #[inline]
    fn plan(&mut self) -> Result<Plan<'a>> {
        let changes = self.store.changes();
        let single = self.pools.len() == 1;
        let weight = self
            .handoff
            .as_ref()
            .filter(|_| single)
            .map_or(1, |asked| asked.slots);
        let held_back = match self.first {
            First::Ask => self.pools.iter().any(|pool| changes.holds_back(*pool)),
            First::Refused => false,
            First::HeldBack => true,
        };
        // A single-pool borrower without a key that will wait on a pool
        // contended here (the last borrow's first ask was refused) queues
        // first: its first ask carries its place, so that a refusal queues
        // it in the store in that same round trip.
        let asks_first = self.first == First::Ask && !held_back;
        let contended = asks_first
            && !self.wait.is_zero()
            && single
            && self
                .handoff
                .as_ref()
                .is_some_and(|asked| asked.key.is_none())
            && changes.contended(self.pools[0]);
        let asks_at_once = asks_first && !contended;
        let mut early = None;
        if asks_at_once
            && !self.wait.is_zero()
            && self.store.in_place().is_none()
            && tokio::runtime::Handle::try_current().is_ok()
        {
            let ticket = self.enqueue()?;
            // Its first ask is its own call in flight: no return here hands
            // it a lease (under the very id it asks with) or claims it meanwhile.
            ticket.start_first_ask();
            early = Some(ticket);
        }
        Ok(Plan {
            held_back,
            first_ask: (asks_first && single).then(|| self.pools[0]),
            asks_at_once,
            early,
            weight,
        })
    }

    /// Joins this process's queue of every pool. Refused while a pool's
    /// queue is marked draining: its head found the drain (and tells
    /// everyone queued, under the queue's lock).
    #[inline]
    fn enqueue(&mut self) -> Result<crate::wait::Ticket<'a>> {
        let changes = self.store.changes();
        changes.check_process("borrow")?;
        let (store, pools) = (self.store, self.pools);
        changes
            .enqueue(
                store,
                store.clock().now(),
                pools,
                self.handoff.take(),
                !self.draining_waits,
            )
            .map_err(|pool| Error::Draining { pool })
    }

    /// The first ask, if the plan makes one before waiting: `Break` with
    /// the borrow's end (granted, or failed), or `Continue` with why it
    /// waits ([`Unanswered`]).
    async fn ask_first(
        &mut self,
        plan: &mut Plan<'a>,
        unsure: &mut Unsure<'a>,
    ) -> ControlFlow<Result<A::Granted>, Unanswered> {
        if !plan.asks_at_once {
            return ControlFlow::Continue(Unanswered::Drained(None));
        }
        // Awaited through a reference: awaiting it by value would keep it
        // twice in this future (the binding and the awaited value).
        let mut first = (self.attempt)(self.start, None, false);
        let ids = first.made();
        let answer = (&mut first).await;
        if let Some(ticket) = &plan.early {
            ticket.done_asking();
        }
        match answer {
            Ok(answer) => {
                let step = answer.step();
                if let Some(pool) = plan.first_ask.take() {
                    let granted = matches!(step, Step::Granted(_));
                    self.store.changes().first_answered(pool, granted);
                }
                match step {
                    Step::Granted(granted) => ControlFlow::Break(Ok(granted)),
                    Step::Exhausted(_) => ControlFlow::Continue(Unanswered::Drained(None)),
                }
            }
            Err(e @ Error::Draining { .. }) if self.draining_waits => {
                ControlFlow::Continue(Unanswered::Drained(Some(e)))
            }
            // A borrower that waits retries a blip on its first ask as on
            // any later one: it may already count as queued (its early
            // ticket), and a restart that cuts that ask is no reason to
            // give up the wait.
            Err(
                e @ Error::Storage {
                    retryable: true, ..
                },
            ) if !self.wait.is_zero() && tokio::runtime::Handle::try_current().is_ok() => {
                unsure.failed(&e, ids);
                ControlFlow::Continue(Unanswered::Failed(e))
            }
            Err(e) => {
                unsure.failed(&e, ids);
                ControlFlow::Break(Err(e))
            }
        }
    }
}

/// Why a borrow's first ask leads it to wait ([`Borrowing::ask_first`]).
enum Unanswered {
    /// Refused, or not asked; with the drain it found if the borrower
    /// waits drains out.
    Drained(Option<Error>),
    /// The store failed retryably; the wait retries it.
    Failed(Error),
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
