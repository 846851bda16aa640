//! Group commit's queue (rule "Group commit"): a store's primitives that
//! arrive while one of its round trips is in flight wait here, and the next
//! round trip carries them all, so that a busy process pays one commit for
//! many grants, as a database's own group commit pays one log flush for
//! many transactions.
//!
//! Single flight, no timer: the primitive that arrives when no round trip
//! is in flight starts one (its store runs [`Batches::next`] until it
//! comes back empty), and every one that arrives meanwhile joins the next
//! batch. An idle store adds no wait to a primitive; a busy one sends a
//! batch per round trip.

use parking_lot::Mutex;

/// The primitives of one store waiting for their round trip, `J` each
/// (what the store needs to run one and to answer its caller).
///
/// ```
/// use semaphore_core::store::Batches;
///
/// let batches = Batches::new();
/// assert!(batches.push(1), "the first starts a flight");
/// assert!(!batches.push(2), "the next joins it");
/// assert_eq!(batches.next(), vec![1, 2]);
/// assert!(!batches.push(3), "still in flight");
/// assert_eq!(batches.next(), vec![3]);
/// assert!(batches.next().is_empty(), "nothing left: the flight ends");
/// assert!(batches.push(4), "and the next one starts another");
/// // A flight that cannot go on gives its jobs back, and ends.
/// assert_eq!(batches.abandon(), vec![4]);
/// assert!(batches.push(5), "the next one starts another");
/// ```
pub struct Batches<J> {
    state: Mutex<State<J>>,
}

struct State<J> {
    waiting: Vec<J>,
    /// A flight runs: someone calls [`Batches::next`] until it is empty.
    flying: bool,
}

impl<J> std::fmt::Debug for Batches<J> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = self.state.lock();
        f.debug_struct("Batches")
            .field("waiting", &state.waiting.len())
            .field("flying", &state.flying)
            .finish()
    }
}

impl<J> Default for Batches<J> {
    fn default() -> Self {
        Self::new()
    }
}

impl<J> Batches<J> {
    /// An empty queue, no flight.
    pub fn new() -> Self {
        Self {
            state: Mutex::new(State {
                waiting: Vec::new(),
                flying: false,
            }),
        }
    }

    /// Queues `job` for the next round trip. `true` if no flight was in
    /// progress: the caller must start one, taking batches with
    /// [`next`](Batches::next) until it comes back empty, on a task of its
    /// own (a caller that is dropped must not strand the batches queued
    /// behind it).
    #[must_use = "`true` means nobody will run the job unless the caller starts a flight"]
    pub fn push(&self, job: J) -> bool {
        let mut state = self.state.lock();
        state.waiting.push(job);
        !std::mem::replace(&mut state.flying, true)
    }

    /// Every job queued since the last batch, in arrival order, for one
    /// round trip. Empty when none is left, which ends the flight: the
    /// next [`push`](Batches::push) starts another. With the `metrics`
    /// feature, each batch's size is recorded in the histogram
    /// `semaphore_store_batch_size`.
    pub fn next(&self) -> Vec<J> {
        let mut state = self.state.lock();
        let batch = std::mem::take(&mut state.waiting);
        if batch.is_empty() {
            state.flying = false;
        } else {
            crate::telemetry::batched(batch.len());
        }
        batch
    }

    /// Ends the flight without running what is queued, for a flight that
    /// cannot go on (its task was cancelled as its runtime shut down):
    /// the jobs queued, for the caller to drop or fail; the next
    /// [`push`](Batches::push) starts a new flight. Only the flight's own
    /// runner may call it, and only instead of running out: a flight
    /// started after its end would lose its jobs.
    pub fn abandon(&self) -> Vec<J> {
        let mut state = self.state.lock();
        state.flying = false;
        std::mem::take(&mut state.waiting)
    }

    /// How many jobs wait for the next batch.
    pub fn waiting(&self) -> usize {
        self.state.lock().waiting.len()
    }

    /// Whether a flight is in progress: a store that keeps a
    /// one-primitive path for an idle moment takes it only when this is
    /// `false`, so that it never overtakes the jobs queued.
    pub fn flying(&self) -> bool {
        self.state.lock().flying
    }
}
