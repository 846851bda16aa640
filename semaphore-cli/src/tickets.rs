//! The server's tickets: two-phase borrows (`/enqueue`, `/wait`) that keep
//! their place in the queue between a client's polls, and are dropped
//! when the client stops polling for longer than the hold.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use parking_lot::Mutex;
use semaphore_core::{Lease, PoolId, QueuedBorrow};
use tokio::time::Instant;
use uuid::Uuid;

use crate::idempotency::Keyed;

/// The most tickets one server keeps at once on the memory store; an
/// enqueue past it answers 503 `too_many_tickets`.
pub(crate) const MAX_TICKETS: usize = 10_000;

/// The most tickets one pool's queue keeps, on every store (on a shared
/// store: an enqueue placed past it in the pool's queue); an enqueue past
/// it answers 503 `too_many_tickets`, so that one pool's clients cannot
/// use up [`MAX_TICKETS`] for every other pool.
pub(crate) const MAX_TICKETS_PER_POOL: usize = 1_000;

/// The answer to an enqueue past [`MAX_TICKETS`] or
/// [`MAX_TICKETS_PER_POOL`].
pub(crate) fn too_many() -> crate::error::ApiError {
    crate::error::ApiError::new(
        axum::http::StatusCode::SERVICE_UNAVAILABLE,
        "too_many_tickets",
        "this pool or this server keeps as many tickets as it may (1,000 per pool, 10,000 per \
         server on the memory store); borrow with a wait, or retry later",
    )
}

/// Every ticket this server keeps, by id.
#[derive(Clone)]
pub(crate) struct Tickets {
    inner: Arc<Inner>,
}

struct Inner {
    entries: Mutex<Entries>,
    /// How long a ticket stays without a poll in flight before it is
    /// dropped (`--ticket-hold`).
    hold: Duration,
    /// Whether tickets keep their place in the store (a shared store:
    /// [`HeldTicket`](crate::held::HeldTicket)s) rather than here.
    in_store: bool,
}

/// The tickets by id, how many each pool has, and those made with an
/// `Idempotency-Key`, by pool and key name.
#[derive(Default)]
struct Entries {
    by_id: HashMap<Uuid, Arc<Ticket>>,
    per_pool: HashMap<PoolId, usize>,
    by_key: HashMap<(PoolId, String), (u128, Uuid)>,
}

impl Entries {
    fn remove(&mut self, id: &Uuid) -> Option<Arc<Ticket>> {
        let ticket = self.by_id.remove(id)?;
        if let Some(keyed) = &ticket.keyed {
            self.by_key.remove(&(ticket.pool, keyed.name.clone()));
        }
        if let std::collections::hash_map::Entry::Occupied(mut n) = self.per_pool.entry(ticket.pool)
        {
            *n.get_mut() -= 1;
            if *n.get() == 0 {
                n.remove();
            }
        }
        Some(ticket)
    }
}

/// One two-phase borrow.
pub(crate) struct Ticket {
    pub(crate) pool: PoolId,
    /// The `Idempotency-Key` it was made with, if any.
    keyed: Option<Keyed>,
    /// The queued borrow, `None` once it ended; locked by the poll that
    /// waits on it.
    pub(crate) borrow: tokio::sync::Mutex<Option<QueuedBorrow>>,
    /// The lease, once a poll handed it over: answered again to a repeated
    /// poll (a client whose answer was lost), until the ticket is dropped.
    pub(crate) granted: Mutex<Option<Lease>>,
    /// The place the last poll saw, for a poll that finds another in
    /// flight.
    pub(crate) place: AtomicUsize,
    /// Polls in flight; a ticket with one is never dropped.
    polls: AtomicUsize,
    /// When the last poll ended (or the ticket was made).
    touched: Mutex<Instant>,
}

/// A poll in flight on a ticket: keeps it from being dropped, and marks
/// its end when dropped.
pub(crate) struct Poll {
    pub(crate) ticket: Arc<Ticket>,
}

impl Drop for Poll {
    fn drop(&mut self) {
        *self.ticket.touched.lock() = Instant::now();
        self.ticket.polls.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Tickets {
    /// An empty table whose tickets are dropped `hold` after their last
    /// poll; a task sweeps it every quarter of `hold` (at least every 10 ms).
    /// With `in_store` (a store shared by servers), the table stays empty:
    /// tickets are [`HeldTicket`](crate::held::HeldTicket)s, whose places
    /// the store keeps for `hold`.
    pub(crate) fn new(hold: Duration, in_store: bool) -> Self {
        let tickets = Self {
            inner: Arc::new(Inner {
                entries: Mutex::default(),
                hold,
                in_store,
            }),
        };
        let weak = Arc::downgrade(&tickets.inner);
        let every = (hold / 4).max(Duration::from_millis(10));
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(every);
            loop {
                tick.tick().await;
                let Some(inner) = weak.upgrade() else { return };
                inner.sweep();
            }
        });
        tickets
    }

    /// The hold, as the answers state it.
    pub(crate) fn hold(&self) -> Duration {
        self.inner.hold
    }

    /// Whether the store keeps the tickets' places (see [`Tickets::new`]).
    pub(crate) fn in_store(&self) -> bool {
        self.inner.in_store
    }

    /// Keeps `borrow` under a new ticket id at place `place`; `None` if
    /// the table is full ([`MAX_TICKETS`]) or the pool has
    /// [`MAX_TICKETS_PER_POOL`].
    pub(crate) fn insert(
        &self,
        borrow: QueuedBorrow,
        place: usize,
        keyed: Option<Keyed>,
    ) -> Option<Uuid> {
        let mut entries = self.inner.entries.lock();
        let pool = borrow.pool().id();
        if entries.by_id.len() >= MAX_TICKETS
            || entries.per_pool.get(&pool).copied().unwrap_or(0) >= MAX_TICKETS_PER_POOL
        {
            return None;
        }
        let id = Uuid::new_v4();
        *entries.per_pool.entry(pool).or_default() += 1;
        if let Some(keyed) = &keyed {
            entries
                .by_key
                .insert((pool, keyed.name.clone()), (keyed.digest, id));
        }
        let ticket = Ticket {
            pool,
            keyed,
            borrow: tokio::sync::Mutex::new(Some(borrow)),
            granted: Mutex::new(None),
            place: AtomicUsize::new(place),
            polls: AtomicUsize::new(0),
            touched: Mutex::new(Instant::now()),
        };
        entries.by_id.insert(id, Arc::new(ticket));
        Some(id)
    }

    /// The ticket of `pool` made with key `keyed`'s name: `Ok` with its id
    /// if with the same digest (a retried enqueue), `Err` if with another
    /// (the key used for another request), `None` if there is none.
    pub(crate) fn by_key(&self, pool: PoolId, keyed: &Keyed) -> Option<Result<Uuid, ()>> {
        let entries = self.inner.entries.lock();
        let (digest, id) = entries.by_key.get(&(pool, keyed.name.clone()))?;
        Some(if *digest == keyed.digest {
            Ok(*id)
        } else {
            Err(())
        })
    }

    /// Starts a poll of ticket `id` of `pool`; `None` if there is no such
    /// ticket (never made, dropped, cancelled, ended, or made by another
    /// server).
    pub(crate) fn poll(&self, pool: PoolId, id: Uuid) -> Option<Poll> {
        let entries = self.inner.entries.lock();
        let ticket = entries.by_id.get(&id).filter(|t| t.pool == pool)?.clone();
        ticket.polls.fetch_add(1, Ordering::AcqRel);
        Some(Poll { ticket })
    }

    /// Removes ticket `id` of `pool`; whether it was there. Dropping it
    /// leaves the queue, and returns a lease granted that no poll took.
    pub(crate) fn remove(&self, pool: PoolId, id: Uuid) -> Option<Arc<Ticket>> {
        let mut entries = self.inner.entries.lock();
        if entries.by_id.get(&id).is_some_and(|t| t.pool == pool) {
            entries.remove(&id)
        } else {
            None
        }
    }
}

impl Tickets {
    /// Drops every ticket: the server drains, and grants nothing new, to
    /// tickets either (their polls answer 503 `draining`, then 404).
    pub(crate) fn clear(&self) {
        let gone = std::mem::take(&mut *self.inner.entries.lock());
        drop(gone);
    }
}

impl Inner {
    /// Drops the tickets with no poll in flight whose last poll ended more
    /// than the hold ago.
    fn sweep(&self) {
        let now = Instant::now();
        let mut entries = self.entries.lock();
        let idle: Vec<Uuid> = entries
            .by_id
            .iter()
            .filter(|(_, ticket)| {
                ticket.polls.load(Ordering::Acquire) == 0
                    && now.duration_since(*ticket.touched.lock()) >= self.hold
            })
            .map(|(id, _)| *id)
            .collect();
        let gone: Vec<_> = idle.iter().filter_map(|id| entries.remove(id)).collect();
        drop(entries);
        // Dropped outside the table's lock: a queued borrow's drop may
        // return a lease.
        drop(gone);
    }
}
