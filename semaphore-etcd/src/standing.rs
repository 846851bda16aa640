//! Which of the watch's changes can let this process's queued head in: no
//! herd across processes.
//!
//! etcd's `concurrency` package has each waiter of its Mutex watch only
//! the key just ahead of its own (`waitDeletes`): one release wakes one
//! waiter. With N slots the head can be let in by any of the pool's
//! leases ending, but only once the places ahead of its own and the slots
//! held leave it room. So the look that refuses a queued head leaves its
//! standing here: the places ahead of it and the leases that held slots,
//! each with its weight. The watch brings it up to date with every change
//! that follows, in revision order (a lease written or deleted, a place
//! ahead gone), and wakes the head only when the slots held and owed
//! ahead leave it room, or when its standing cannot be followed (the pool's
//! record changed, its own place gone, a record it cannot read). A grant
//! (a place deleted and a lease written at one revision) wakes no one
//! else; a return wakes the one head it lets in.
//!
//! With no standing (a head that joined on a look that did not see its
//! place, test mode, a pool some waiter here waits on outside the queue)
//! every change that can free room wakes the head as before: a delete, a
//! lease rewritten, the pool's record. A place written (a waiter joining
//! behind, or keeping its turn) and a lease created never free room, and
//! wake no one.
//!
//! A standing is taken on a look at some revision but recorded after
//! changes since may already have passed the watch: the latest changes are
//! kept, and those past the look are applied to it first. When they were
//! not all kept (a watch opened anew from the present), none is recorded.

use std::collections::{HashMap, HashSet, VecDeque};

use semaphore_core::PoolId;
use uuid::Uuid;

use crate::record::LeaseRec;
use crate::view::{Look, PoolView};

/// One change the watch saw, at `revision`: to a pool's keys, or (with
/// no pool) a session's end.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Change {
    pub(crate) revision: i64,
    pub(crate) pool: Option<PoolId>,
    pub(crate) what: What,
}

/// What changed.
#[derive(Debug, Clone, Copy)]
pub(crate) enum What {
    /// The pool's record, written or deleted.
    Pool,
    /// A lease written: its slots and session (`None` if its record is
    /// unreadable), and whether its key is new (a grant; otherwise a
    /// rewrite).
    Lease {
        id: Uuid,
        held: Option<Held>,
        new: bool,
    },
    /// A lease's key deleted (returned, expired, swept).
    LeaseGone { id: Uuid },
    /// A place written (a join, or a turn kept).
    Place,
    /// A place's key deleted (granted, left, lapsed).
    PlaceGone { id: Uuid },
    /// A session's key deleted: the leases it bound hold nothing (R16).
    SessionGone { id: Uuid },
}

/// What a lease holds: its slots, and the session it is bound to.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Held {
    pub(crate) slots: u32,
    pub(crate) session: Option<Uuid>,
}

impl Held {
    pub(crate) fn of(lease: &LeaseRec) -> Self {
        Self {
            slots: u32::try_from(lease.positions.len()).unwrap_or(u32::MAX),
            session: lease.session,
        }
    }
}

/// The standings of this process's queued heads, one per pool, and the
/// latest changes.
#[derive(Debug, Default)]
pub(crate) struct Standings(parking_lot::Mutex<Inner>);

#[derive(Debug)]
struct Inner {
    pools: HashMap<PoolId, Standing>,
    /// Pools with a waiter here outside the queue (a held place, a borrow
    /// of several pools), which only a look tells whether it is let in:
    /// every change wakes their waiters, for as long as this handle lives.
    open: HashSet<PoolId>,
    recent: VecDeque<Change>,
    /// Changes up to this revision may be missing from `recent`.
    forgotten: i64,
}

impl Default for Inner {
    /// Blind until the watch has opened: see [`Standings::blind_until`].
    fn default() -> Self {
        Self {
            pools: HashMap::new(),
            open: HashSet::new(),
            recent: VecDeque::new(),
            forgotten: i64::MAX,
        }
    }
}

/// A queued head's standing in its pool.
#[derive(Debug)]
struct Standing {
    waiter: Uuid,
    count: u32,
    slots: u32,
    /// The places ahead of the head's own, by id, with their weights (none
    /// over the count: they hold back no one).
    ahead: HashMap<Uuid, u32>,
    /// The active leases, by id, with what each holds.
    leases: HashMap<Uuid, Held>,
}

/// What a change does to a standing.
#[derive(Debug)]
enum Effect {
    /// Nothing that can let the head in.
    Kept,
    /// Room may have come: look whether the head is let in now.
    Freed,
    /// The standing can no longer be followed.
    Lost,
}

impl Standing {
    fn apply(&mut self, what: What) -> Effect {
        match what {
            What::Pool | What::Lease { held: None, .. } => Effect::Lost,
            What::Lease {
                id,
                held: Some(held),
                ..
            } => match self.leases.insert(id, held) {
                Some(was) if was.slots > held.slots => Effect::Freed,
                _ => Effect::Kept,
            },
            // A lease not counted held nothing the head waits behind.
            What::LeaseGone { id } => freed(self.leases.remove(&id).is_some()),
            What::Place => Effect::Kept,
            What::PlaceGone { id } if id == self.waiter => Effect::Lost,
            What::PlaceGone { id } => freed(self.ahead.remove(&id).is_some()),
            What::SessionGone { id } => {
                let before = self.leases.len();
                self.leases.retain(|_, held| held.session != Some(id));
                freed(self.leases.len() < before)
            }
        }
    }

    /// Whether the slots held and owed ahead leave the head room.
    fn has_room(&self) -> bool {
        let held: u64 = self.leases.values().map(|h| u64::from(h.slots)).sum();
        let owed: u64 = self.ahead.values().map(|n| u64::from(*n)).sum();
        u64::from(self.count) >= held + owed + u64::from(self.slots)
    }
}

fn freed(some: bool) -> Effect {
    if some { Effect::Freed } else { Effect::Kept }
}

/// Whether `what` can free room for a head whose standing is not known.
fn may_free(what: What) -> bool {
    !matches!(what, What::Place | What::Lease { new: true, .. })
}

impl Standings {
    /// How many of the latest changes are kept.
    const KEPT: usize = 1024;

    /// Records the standing of `waiter`, asking for `slots`, refused on
    /// `look` at `view`'s pool, whose place was created at revision `mine`
    /// (on `look`, or by the refusal's own write, which no other write to
    /// the pool came between). Returns whether the head should look again
    /// at once: changes the watch saw since the look may let it in.
    pub(crate) fn stand(
        &self,
        waiter: Uuid,
        slots: u32,
        mine: i64,
        view: &PoolView,
        look: &Look,
    ) -> bool {
        let pool = view.pool;
        let Some((meta, _)) = view.meta else {
            return false;
        };
        if slots > meta.count {
            // Set aside, and not the head (it holds back no one): the
            // head's standing stays. A new count wakes it.
            return false;
        }
        let mut inner = self.0.lock();
        inner.pools.remove(&pool);
        if look.now.is_some() || inner.open.contains(&pool) || inner.forgotten > look.revision {
            return false;
        }
        let mut standing = Standing {
            waiter,
            count: meta.count,
            slots,
            ahead: view
                .live_places(look)
                .filter(|row| row.created < mine && row.rec.slots <= meta.count)
                .map(|row| (row.id, row.rec.slots))
                .collect(),
            leases: view
                .active(look)
                .map(|row| (row.id, Held::of(&row.rec)))
                .collect(),
        };
        let since = inner
            .recent
            .iter()
            .filter(|c| c.pool.is_none_or(|p| p == pool) && c.revision > look.revision);
        for change in since {
            if let Effect::Lost = standing.apply(change.what) {
                return true;
            }
        }
        if standing.has_room() {
            return true;
        }
        inner.pools.insert(pool, standing);
        false
    }

    /// `pools` have a waiter here that waits outside the queue: every
    /// change to them wakes.
    pub(crate) fn open(&self, pools: impl IntoIterator<Item = PoolId>) {
        let mut inner = self.0.lock();
        for pool in pools {
            inner.pools.remove(&pool);
            inner.open.insert(pool);
        }
    }

    /// Takes in one watch answer's `changes`, in revision order: the
    /// pools whose heads they may let in, and whether a session ended
    /// (which may let in the head of any pool with no standing here: see
    /// [`stands`](Standings::stands)).
    pub(crate) fn changed(&self, changes: &[Change]) -> (Vec<PoolId>, bool) {
        let mut guard = self.0.lock();
        let inner = &mut *guard;
        let mut wake: Vec<PoolId> = Vec::new();
        let mut freed: Vec<PoolId> = Vec::new();
        let mut session_gone = false;
        for change in changes {
            if inner.recent.len() == Self::KEPT
                && let Some(old) = inner.recent.pop_front()
            {
                inner.forgotten = inner.forgotten.max(old.revision);
            }
            inner.recent.push_back(*change);
            let Some(pool) = change.pool else {
                session_gone = true;
                for (pool, standing) in &mut inner.pools {
                    if let Effect::Freed = standing.apply(change.what) {
                        freed.push(*pool);
                    }
                }
                continue;
            };
            let effect = match inner.pools.get_mut(&pool) {
                _ if inner.open.contains(&pool) => Effect::Lost,
                Some(standing) => standing.apply(change.what),
                None if may_free(change.what) => Effect::Lost,
                None => Effect::Kept,
            };
            match effect {
                Effect::Kept => {}
                Effect::Freed => freed.push(pool),
                Effect::Lost => {
                    inner.pools.remove(&pool);
                    wake.push(pool);
                }
            }
        }
        // Judged once every change of the answer is in: a grant's place
        // goes before its lease comes.
        for pool in freed {
            if inner.pools.get(&pool).is_some_and(Standing::has_room) {
                inner.pools.remove(&pool);
                wake.push(pool);
            }
        }
        wake.sort_by_key(|p| *p.as_uuid());
        wake.dedup();
        (wake, session_gone)
    }

    /// Whether `pool`'s head here has a standing (which the changes taken
    /// in so far leave with no room).
    pub(crate) fn stands(&self, pool: PoolId) -> bool {
        self.0.lock().pools.contains_key(&pool)
    }

    /// A watch opened from the present: changes up to `revision` (that of
    /// its opening; `i64::MAX` before it is known) were not all seen.
    pub(crate) fn blind_until(&self, revision: i64) {
        let mut inner = self.0.lock();
        inner.pools.clear();
        inner.recent.clear();
        inner.forgotten = revision;
    }
}

#[cfg(test)]
mod tests;
