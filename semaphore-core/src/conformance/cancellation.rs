//! The cancellation matrix: a borrow dropped at each of its
//! await points, combined with each change a pool can go through, in both
//! orders. After each run, no slot is held that no live lease accounts for,
//! no borrower is lost from the queue, and the survivors are served in the
//! order they arrived.
//!
//! Every run starts the same way: a pool of 2 slots, both held (`h0` at
//! position 0 for 10 s, `h1` at position 1 for 60 s), and three borrowers
//! queued in arrival order. One of them, the victim, is dropped; the case
//! names where it is dropped:
//!
//! | case | victim | dropped while |
//! |---|---|---|
//! | queued | first, middle or last | it waits in the queue |
//! | before the store acts | the head | its store call is held before the store sees it |
//! | after the store granted | the head | the store granted, the reply not yet delivered |
//! | guard just granted | the head | it holds the guard it was just granted |
//!
//! In the last three the head is woken by returning `h1`. Each run also
//! applies one [`Event`] just before or just after the drop.

use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinHandle;

use super::gate::{GatedStore, Stop};
use super::{Fixture, spawn_borrow, until_waiting};
use crate::{error::Error, error::Result, id::PoolId, lease::Lease, pool::Pool};

const TTL: Duration = Duration::from_secs(60);
const SHORT: Duration = Duration::from_secs(10);
const LONG: Duration = Duration::from_secs(3600);
/// A guard against a hang while a run settles; a hang is a failure.
const SETTLE: Duration = Duration::from_secs(10);

/// What happens to the pool around the drop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Event {
    Nothing,
    /// `h0` is returned.
    Return,
    /// The count goes from 2 to 3.
    Raise,
    /// The count goes from 2 to 1.
    Lower,
    /// The clock passes `h0`'s expiry.
    Expire,
    /// The pool is deleted.
    Delete,
}

const EVENTS: [Event; 6] = [
    Event::Nothing,
    Event::Return,
    Event::Raise,
    Event::Lower,
    Event::Expire,
    Event::Delete,
];

/// Where the victim is when it is dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum DropAt {
    Queued(usize),
    InStoreCall(Stop),
    HoldingGuard,
}

/// R12: a borrower dropped while queued, first, in the middle or
/// last, takes nothing and leaves the queue; the others are served in
/// order, whatever happens to the pool around the drop.
pub async fn r12_matrix_borrow_dropped_while_queued(f: Fixture) {
    for victim in 0..3 {
        matrix(&f, DropAt::Queued(victim)).await;
    }
}

/// R12: a head dropped while its store call is held before the store
/// sees it: the call, finished without it, grants nothing that stays held.
pub async fn r12_matrix_borrow_dropped_before_the_store_acts(f: Fixture) {
    matrix(&f, DropAt::InStoreCall(Stop::BeforeCall)).await;
}

/// R12: a head dropped after the store granted it a slot but before
/// the reply reached it: the grant is returned, and the next borrower gets
/// the slot.
pub async fn r12_matrix_borrow_dropped_after_the_store_granted(f: Fixture) {
    matrix(&f, DropAt::InStoreCall(Stop::AfterGrant)).await;
}

/// R12: a borrower dropped just after it was granted, holding
/// its guard: the lease is returned, and the next borrower gets the slot.
pub async fn r12_matrix_guard_dropped_just_after_the_grant(f: Fixture) {
    matrix(&f, DropAt::HoldingGuard).await;
}

async fn matrix(f: &Fixture, drop_at: DropAt) {
    for event in EVENTS {
        for event_first in [true, false] {
            let run = Run {
                drop_at,
                event,
                event_first,
            };
            run.go(f).await;
        }
    }
}

#[derive(Debug, Clone, Copy)]
struct Run {
    drop_at: DropAt,
    event: Event,
    event_first: bool,
}

/// What the rules say a borrower of the run comes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Borrower {
    Queued,
    /// The victim, inside a held store call, still heading the queue.
    InCall,
    Granted(u32),
    Failed,
    Dropped,
}

/// The run as the rules have it: which positions are held, and what each
/// borrower (in arrival order) has come to.
#[derive(Debug)]
struct Model {
    exists: bool,
    count: u32,
    h0: Option<u32>,
    h1: Option<u32>,
    /// The position the store granted the victim in a held call; it is
    /// returned once the call, finished without the victim, lands.
    call_grant: Option<u32>,
    borrowers: [Borrower; 3],
    victim: usize,
}

impl Model {
    fn taken(&self) -> Vec<u32> {
        let granted = self.borrowers.iter().filter_map(|b| match b {
            Borrower::Granted(at) => Some(*at),
            _ => None,
        });
        [self.h0, self.h1, self.call_grant]
            .into_iter()
            .flatten()
            .chain(granted)
            .collect()
    }

    /// Serves the queue from its head, first come first served:
    /// each borrower takes the lowest free position below the count,
    /// or fails if the pool is gone, until one must wait.
    fn serve(&mut self) {
        for i in 0..self.borrowers.len() {
            match self.borrowers[i] {
                Borrower::Queued if !self.exists => self.borrowers[i] = Borrower::Failed,
                Borrower::Queued => {
                    let taken = self.taken();
                    match (0..self.count).find(|p| !taken.contains(p)) {
                        Some(at) => self.borrowers[i] = Borrower::Granted(at),
                        None => return,
                    }
                }
                Borrower::InCall => return,
                Borrower::Granted(_) | Borrower::Failed | Borrower::Dropped => {}
            }
        }
    }

    fn apply(&mut self, event: Event) {
        match event {
            Event::Nothing => {}
            Event::Return | Event::Expire => self.h0 = None,
            Event::Raise => self.count = 3,
            Event::Lower => self.count = 1,
            Event::Delete => {
                self.exists = false;
                (self.h0, self.h1, self.call_grant) = (None, None, None);
            }
        }
        self.serve();
    }

    fn drop_victim(&mut self) {
        self.borrowers[self.victim] = Borrower::Dropped;
        self.serve();
    }

    fn release(&mut self) {
        self.call_grant = None;
        self.serve();
    }

    /// `(in_use, waiting, survivors done)`: `in_use` is `None` once the pool
    /// is gone; the survivors done (granted or failed) by arrival index.
    fn expected(&self) -> (Option<u32>, usize, Vec<usize>) {
        let in_use = self.exists.then(|| self.taken().len() as u32);
        let waiting = self
            .borrowers
            .iter()
            .filter(|b| matches!(b, Borrower::Queued | Borrower::InCall))
            .count();
        let done = (0..self.borrowers.len())
            .filter(|i| *i != self.victim)
            .filter(|i| matches!(self.borrowers[*i], Borrower::Granted(_) | Borrower::Failed))
            .collect();
        (in_use, waiting, done)
    }
}

/// The borrowers of a run, as spawned tasks in arrival order.
struct Tasks {
    victim: Option<JoinHandle<()>>,
    survivors: Vec<(usize, JoinHandle<Result<Lease>>)>,
}

impl Run {
    async fn go(self, f: &Fixture) {
        let gated = Arc::new(GatedStore::new(f.store.clone()));
        let pool = Pool::new(gated.clone(), PoolId::from_name(&format!("{self:?}")));
        pool.register(2).await.unwrap();
        let h0 = pool.borrow(SHORT, Duration::ZERO).await.unwrap().forget();
        let h1 = pool.borrow(TTL, Duration::ZERO).await.unwrap().forget();
        let victim = match self.drop_at {
            DropAt::Queued(at) => at,
            _ => 0,
        };
        let mut model = Model {
            exists: true,
            count: 2,
            h0: Some(h0.position),
            h1: Some(h1.position),
            call_grant: None,
            borrowers: [Borrower::Queued; 3],
            victim,
        };
        let mut tasks = Tasks {
            victim: None,
            survivors: Vec::new(),
        };
        for i in 0..3 {
            if i == victim {
                tasks.victim = Some(spawn_holder(&pool));
            } else {
                tasks.survivors.push((i, spawn_borrow(&pool, TTL, LONG)));
            }
            until_waiting(&pool, i + 1).await;
        }
        self.check(&pool, &gated, &model, &tasks).await;

        // Bring the victim to where it is dropped.
        match self.drop_at {
            DropAt::Queued(_) => {}
            DropAt::InStoreCall(stop) => {
                gated.arm(stop);
                // A call already in flight (a store may wake the head at
                // any time) is not caught; the head's next call is.
                gated.until_quiet().await;
                assert!(pool.return_lease(h1.id).await.unwrap(), "{self:?}");
                gated.caught().await;
                model.h1 = None;
                model.borrowers[victim] = Borrower::InCall;
                if stop == Stop::AfterGrant {
                    model.call_grant = Some(h1.position);
                }
            }
            DropAt::HoldingGuard => {
                assert!(pool.return_lease(h1.id).await.unwrap(), "{self:?}");
                model.h1 = None;
                model.serve();
            }
        }
        self.check(&pool, &gated, &model, &tasks).await;

        for event_now in [self.event_first, !self.event_first] {
            if event_now {
                self.apply(f, &pool, &h0).await;
                model.apply(self.event);
            } else {
                let handle = tasks.victim.take().expect("the victim is dropped once");
                handle.abort();
                assert!(handle.await.unwrap_err().is_cancelled(), "{self:?}");
                model.drop_victim();
            }
            self.check(&pool, &gated, &model, &tasks).await;
        }
        if matches!(self.drop_at, DropAt::InStoreCall(_)) {
            gated.release();
            model.release();
            self.check(&pool, &gated, &model, &tasks).await;
        }

        if model.exists {
            let live = [(model.h0, h0), (model.h1, h1)]
                .into_iter()
                .filter_map(|(at, lease)| at.map(|_| lease))
                .collect();
            self.drain(&pool, &gated, &model, tasks, live).await;
        } else {
            self.after_delete(&pool, &gated, &model, tasks).await;
        }
    }

    async fn apply(self, f: &Fixture, pool: &Pool, h0: &Lease) {
        match self.event {
            Event::Nothing => {}
            Event::Return => assert!(pool.return_lease(h0.id).await.unwrap(), "{self:?}"),
            Event::Raise => drop(pool.register(3).await.unwrap()),
            Event::Lower => drop(pool.register(1).await.unwrap()),
            Event::Expire => f.clock.advance(SHORT),
            Event::Delete => assert!(pool.delete().await.unwrap(), "{self:?}"),
        }
    }

    /// Waits until the pool settles in the state the model expects: no
    /// slot held that the model does not account for, no borrower lost
    /// from the queue, and exactly the survivors it says are served done.
    async fn check(self, pool: &Pool, gated: &GatedStore, model: &Model, tasks: &Tasks) {
        let expected = model.expected();
        settle(gated, self, model, || async {
            let in_use = pool.inspect().await.map(|s| s.in_use).ok();
            let done = tasks.survivors.iter().filter(|(_, t)| t.is_finished());
            let seen = (
                in_use,
                pool.waiting().count,
                done.map(|(i, _)| *i).collect(),
            );
            if seen == expected { Ok(()) } else { Err(seen) }
        })
        .await;
    }

    /// The pool still exists: raising the count serves every survivor
    /// still queued, in arrival order, each at the position the model
    /// gave it; then returning every live lease empties the pool.
    async fn drain(
        self,
        pool: &Pool,
        gated: &GatedStore,
        model: &Model,
        tasks: Tasks,
        mut live: Vec<Lease>,
    ) {
        let mut model = Model {
            count: 10,
            borrowers: model.borrowers,
            call_grant: None,
            ..*model
        };
        pool.register(model.count).await.unwrap();
        model.serve();
        let mut tokens = Vec::new();
        for (i, survivor) in tasks.survivors {
            let lease = survivor
                .await
                .unwrap()
                .unwrap_or_else(|e| panic!("{self:?}: borrower {i}: {e}"));
            assert_eq!(
                Borrower::Granted(lease.position),
                model.borrowers[i],
                "{self:?}: borrower {i}"
            );
            tokens.push(lease.token);
            live.push(lease);
        }
        assert!(
            tokens.is_sorted(),
            "{self:?}: survivors served out of arrival order, tokens {tokens:?}"
        );
        for lease in &live {
            assert!(
                pool.return_lease(lease.id).await.unwrap(),
                "{self:?}: {lease:?} was not active"
            );
        }
        settle(gated, self, &model, || async {
            let seen = (pool.inspect().await.unwrap().in_use, pool.waiting().count);
            (seen == (0, 0)).then_some(()).ok_or(seen)
        })
        .await;
    }

    /// The pool was deleted: survivors served before the delete got their
    /// slot, the others failed with not-found; once registered again the
    /// pool has every slot free.
    async fn after_delete(self, pool: &Pool, gated: &GatedStore, model: &Model, tasks: Tasks) {
        for (i, survivor) in tasks.survivors {
            let result = survivor.await.unwrap();
            let ok = match model.borrowers[i] {
                Borrower::Granted(_) => result.is_ok(),
                _ => matches!(result, Err(Error::PoolNotFound { .. })),
            };
            assert!(ok, "{self:?}: borrower {i}: {result:?}");
        }
        pool.register(2).await.unwrap();
        settle(gated, self, model, || async {
            let seen = (pool.inspect().await.unwrap().in_use, pool.waiting().count);
            (seen == (0, 0)).then_some(()).ok_or(seen)
        })
        .await;
    }
}

/// A borrower that holds what it is granted until it is dropped.
fn spawn_holder(pool: &Pool) -> JoinHandle<()> {
    let pool = pool.clone();
    tokio::spawn(async move {
        let _guard = pool.borrow(TTL, LONG).await;
        std::future::pending::<()>().await;
    })
}

/// Yields until nothing runs inside the store but a held call and
/// `observe` finds the state `model` expects, twice in a row with yields between, so that clean-up
/// still to run is seen. Fails the run, showing the last state seen, if
/// that takes longer than [`SETTLE`].
async fn settle<T, F, Fut>(gated: &GatedStore, run: Run, model: &Model, observe: F)
where
    T: std::fmt::Debug + Send,
    F: Fn() -> Fut + Sync,
    Fut: Future<Output = std::result::Result<(), T>> + Send,
{
    let mut stable = 0;
    let mut last = None;
    let waited = tokio::time::timeout(SETTLE, async {
        while stable < 2 {
            let quiet = gated.quiet();
            match observe().await {
                Ok(()) if quiet => stable += 1,
                Ok(()) => stable = 0,
                Err(seen) => {
                    stable = 0;
                    last = Some(seen);
                }
            }
            for _ in 0..20 {
                tokio::task::yield_now().await;
            }
        }
    })
    .await;
    assert!(
        waited.is_ok(),
        "{run:?}: the pool did not settle as {model:?} expects; last saw {last:?}"
    );
}
