//! The [`Store`] primitives of [`RedisStore`]: each one script call, one
//! round trip.

use std::time::Duration;

use semaphore_core::store::{
    BorrowRequest, Parts, Store, TryBorrow, TryBorrowAll, WaiterId, async_trait, from_unix_ms,
    millis,
};
use semaphore_core::{Error, Holder, Lease, LeaseId, PoolId, PoolState, Result};

use crate::RedisStore;
use crate::error::malformed;
use crate::reply::{self, Attempt, int, items, not_found};
use crate::scripts::Kind;

/// An optional label as the scripts take it: `-` for none, `+` and the
/// text for some.
fn label(value: Option<&str>) -> String {
    value.map_or_else(|| "-".to_string(), |v| format!("+{v}"))
}

fn waiter_label(waiter: Option<WaiterId>) -> String {
    label(waiter.map(|w| w.as_uuid().to_string()).as_deref())
}

fn u32_of(n: i64) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

fn session_label(session: Option<semaphore_core::SessionId>) -> String {
    label(session.map(|s| s.as_uuid().to_string()).as_deref())
}

/// Waiter liveness: see [`link`](crate::link).
impl RedisStore {
    /// The client id that marks this process's queued heads as alive.
    pub(crate) fn connection_label(&self, pool: PoolId) -> String {
        label(self.waiter_link(pool).map(|id| id.to_string()).as_deref())
    }

    /// Forgets the queued heads of `pool` whose connections, among
    /// `connections`, the server no longer has (a killed
    /// waiter holds back no one), waking its waiters; whether any was.
    pub(crate) async fn reap_gone(&self, pool: PoolId, connections: &[i64]) -> Result<bool> {
        let own = self.waiter_link(pool);
        let others: Vec<i64> = connections
            .iter()
            .copied()
            .filter(|id| Some(*id) != own)
            .collect();
        let dead = crate::link::gone(&self.connection, self.hash_slot(pool), &others).await;
        if dead.is_empty() {
            return Ok(false);
        }
        let mut call = self.invocation(Kind::Shrink, "reap_waiters", [pool]);
        for id in &dead {
            call.arg(id.to_string());
        }
        if int("reap_waiters", &self.run("reap_waiters", &call).await?)? > 0 {
            self.changes.notify(pool);
            return Ok(true);
        }
        Ok(false)
    }
}

#[async_trait]
impl Store for RedisStore {
    fn parts(&self) -> Parts<'_> {
        Parts {
            clock: self.time.clock(),
            changes: &self.changes,
            session: Some(&self.session),
            // The restart grace: a lease granted for longer could still be
            // live when a restart that lost the data ends the grace, and its
            // slot would go to a second holder (rule "Restart grace").
            max_ttl: match self.restart_grace_ms {
                0 => Duration::MAX,
                ms => Duration::from_millis(ms),
            },
            in_place: None,
        }
    }

    /// 200 ms on one server (`UNTAKEN_MS` of the scripts), or sooner if
    /// the head's place lapses first; none on a cluster, whose heads take
    /// a handed lease at their next look.
    fn handed_bound(&self) -> Option<Duration> {
        (!self.is_cluster()).then_some(crate::arrival::HANDED_BOUND)
    }

    async fn register(&self, pool: PoolId, count: u32) -> Result<PoolState> {
        let mut call = self.invocation(Kind::Grow, "register", [pool]);
        call.arg(count).arg(self.restart_grace_ms);
        let fields = items("register", self.run("register", &call).await?)?;
        self.index_pool("register", pool, true).await?;
        let [count, in_use, _, draining, rest @ ..] = &fields[..] else {
            return Err(malformed("register", "a short reply"));
        };
        if let Some(written) = rest.first()
            && int("register", written)? == 1
        {
            self.replicated(pool).await;
        }
        let queued = rest.get(1).map(|q| int("register", q)).transpose()?;
        Ok(PoolState::new(
            pool,
            u32_of(int("register", count)?),
            u32_of(int("register", in_use)?),
        )
        .with_draining(int("register", draining)? == 1)
        .with_queued(queued.map_or(0, u32_of)))
    }

    async fn pools(&self, after: Option<PoolId>, limit: u32) -> Result<Vec<PoolState>> {
        self.process.check("pools")?;
        if tokio::runtime::Handle::try_current().is_err() {
            return Err(Error::NoRuntime { operation: "pools" });
        }
        match semaphore_core::store::page_start(after) {
            Some(start) => self.page(start, limit).await,
            None => Ok(Vec::new()),
        }
    }

    async fn set_draining(&self, pool: PoolId, draining: bool) -> Result<PoolState> {
        let mut call = self.invocation(Kind::Shrink, "set_draining", [pool]);
        call.arg(if draining { "1" } else { "0" });
        let fields = items("set_draining", self.run("set_draining", &call).await?)?;
        let [count, in_use, _, draining, rest @ ..] = &fields[..] else {
            return Err(not_found(pool));
        };
        let queued = rest.first().map(|q| int("set_draining", q)).transpose()?;
        Ok(PoolState::new(
            pool,
            u32_of(int("set_draining", count)?),
            u32_of(int("set_draining", in_use)?),
        )
        .with_draining(int("set_draining", draining)? == 1)
        .with_queued(queued.map_or(0, u32_of)))
    }

    /// Once more after freeing the leases of holders that are gone.
    async fn inspect(&self, pool: PoolId) -> Result<PoolState> {
        let call = self.invocation(Kind::Shrink, "inspect", [pool]);
        let fields = items("inspect", self.run("inspect", &call).await?)?;
        let [count, in_use, ..] = &fields[..] else {
            return Err(not_found(pool));
        };
        let draining = fields.get(3).map(|d| int("inspect", d)).transpose()? == Some(1);
        let queued = fields.get(4).map(|q| int("inspect", q)).transpose()?;
        Ok(PoolState::new(
            pool,
            u32_of(int("inspect", count)?),
            u32_of(int("inspect", in_use)?),
        )
        .with_draining(draining)
        .with_queued(queued.map_or(0, u32_of)))
    }

    /// The pool's id leaves the listing's index (`PREFIX:pools`) first, so
    /// that a register racing the delete lists the pool if it exists.
    async fn delete(&self, pool: PoolId) -> Result<bool> {
        self.index_pool("delete", pool, false).await?;
        let call = self.invocation(Kind::Shrink, "delete", [pool]);
        let existed = int("delete", &self.run("delete", &call).await?)? == 1;
        Ok(existed)
    }

    /// A refusal that names holders that are gone frees their leases and
    /// tries once more.
    async fn try_borrow(&self, request: &BorrowRequest) -> Result<TryBorrow> {
        if !self.ready(request.pool, request).await? {
            return Err(self.session.ended_error(request.session));
        }
        let mut looked = false;
        loop {
            let mut call = self.invocation(Kind::Grow, "borrow", [request.pool]);
            call.arg(request.lease.as_uuid().to_string())
                .arg(millis(self.within_grace(request.ttl)))
                .arg(waiter_label(request.waiter))
                .arg(label(request.key.as_deref()))
                .arg(label(request.owner.as_deref()))
                .arg(request.slots)
                .arg(session_label(request.session))
                .arg(label(
                    request.hold.map(|h| millis(h).to_string()).as_deref(),
                ))
                .arg(self.connection_label(request.pool))
                .arg(label(self.own_channel()));
            // A call that timed out may still run once the server answers
            // again: the core asks again under the same lease id, and
            // returns it if it ends up holding another (rule "Lost replies").
            let value = self.run("borrow", &call).await;
            return match reply::attempt("borrow", request.pool, value?)? {
                Attempt::Granted(lease) => Ok(TryBorrow::Granted { lease }),
                Attempt::SessionEnded => Err(self.session.ended_error(request.session)),
                Attempt::Exhausted(_, links)
                    if !looked && self.reap_gone(request.pool, &links).await? =>
                {
                    looked = true;
                    continue;
                }
                Attempt::Exhausted(at, _) => Ok(TryBorrow::Exhausted {
                    next_expiry: at.map(from_unix_ms),
                }),
                Attempt::Missing => Err(not_found(request.pool)),
                Attempt::Draining => Err(Error::Draining { pool: request.pool }),
                Attempt::KeyReused => Err(Error::KeyReused { pool: request.pool }),
                Attempt::HadRoom => Err(malformed("borrow", "status 3")),
            };
        }
    }

    /// On a cluster, pools on several hash slots are borrowed by a
    /// check-then-take protocol (see
    /// [`RedisStore::connect_cluster_with`](crate::RedisStore::connect_cluster_with)
    /// and the crate's README).
    async fn try_borrow_all(&self, requests: &[BorrowRequest]) -> Result<TryBorrowAll> {
        match crate::across::by_slot(self, requests) {
            Some(groups) => self.borrow_across(requests, groups).await,
            None => self.borrow_on_one_slot(requests, false, 0).await,
        }
    }

    /// The slot goes to the first head of the pool's shared queue in the
    /// same script, if it is one a return may hand a slot to (see
    /// the crate's README): that head alone is told.
    async fn return_lease(&self, pool: PoolId, lease: LeaseId) -> Result<bool> {
        // A lease held on arrival and not yet confirmed: its confirmation
        // may now find it returned.
        self.session.returning(lease);
        let mut call = self.invocation(Kind::Shrink, "return", [pool]);
        call.arg(lease.as_uuid().to_string())
            .arg(if self.changes.hand_offs_allowed() {
                "1"
            } else {
                "0"
            });
        match self.run("return", &call).await? {
            redis::Value::BulkString(head) => {
                let head = std::str::from_utf8(&head)
                    .ok()
                    .and_then(|h| h.parse::<uuid::Uuid>().ok())
                    .ok_or_else(|| malformed("return", "a head that is not a UUID"))?;
                self.changes.notify_waiter(pool, WaiterId::from_uuid(head));
                Ok(true)
            }
            value if int("return", &value)? == 1 => {
                self.changes.notify(pool);
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    async fn renew(&self, pool: PoolId, lease: LeaseId, ttl: Duration) -> Result<Option<Lease>> {
        let mut call = self.invocation(Kind::Shrink, "renew", [pool]);
        call.arg(lease.as_uuid().to_string())
            .arg(millis(self.within_grace(ttl)));
        match reply::attempt("renew", pool, self.run("renew", &call).await?)? {
            Attempt::Granted(lease) => Ok(Some(lease)),
            Attempt::Exhausted(..) | Attempt::SessionEnded => Ok(None),
            Attempt::Missing => Err(not_found(pool)),
            Attempt::HadRoom | Attempt::Draining | Attempt::KeyReused => {
                Err(malformed("renew", "status 3, 4 or 6"))
            }
        }
    }

    /// Once more after freeing the leases of holders that are gone.
    async fn unbind(&self, pool: PoolId, lease: LeaseId) -> Result<bool> {
        let mut call = self.invocation(Kind::Shrink, "unbind", [pool]);
        call.arg(lease.as_uuid().to_string());
        Ok(int("unbind", &self.run("unbind", &call).await?)? == 1)
    }

    async fn holders(&self, pool: PoolId) -> Result<Vec<Holder>> {
        let call = self.invocation(Kind::Shrink, "holders", [pool]);
        let mut fields = items("holders", self.run("holders", &call).await?)?.into_iter();
        match fields.next().map(|s| int("holders", &s)).transpose()? {
            Some(0) => fields.map(|h| reply::holder("holders", pool, h)).collect(),
            Some(2) => Err(not_found(pool)),
            _ => Err(malformed("holders", "an unknown status")),
        }
    }

    async fn force_return(&self, pool: PoolId, position: u32) -> Result<Option<Holder>> {
        let mut call = self.invocation(Kind::Shrink, "force_return", [pool]);
        call.arg(position);
        let mut fields = items("force_return", self.run("force_return", &call).await?)?.into_iter();
        match fields.next().map(|s| int("force_return", &s)).transpose()? {
            Some(0) => {
                let holder = fields
                    .next()
                    .ok_or_else(|| malformed("force_return", "no holder"))?;
                Ok(Some(reply::holder("force_return", pool, holder)?))
            }
            Some(1) => Ok(None),
            Some(2) => Err(not_found(pool)),
            _ => Err(malformed("force_return", "an unknown status")),
        }
    }

    async fn place(&self, pool: PoolId, waiter: WaiterId) -> Result<Option<u64>> {
        let mut call = self.invocation(Kind::Shrink, "place", [pool]);
        call.arg(waiter.as_uuid().to_string());
        let place = int("place", &self.run("place", &call).await?)?;
        Ok(u64::try_from(place).ok().filter(|p| *p > 0))
    }

    async fn leave_queue(&self, pool: PoolId, waiter: WaiterId) -> Result<()> {
        let mut call = self.invocation(Kind::Shrink, "leave_queue", [pool]);
        call.arg(waiter.as_uuid().to_string());
        if int("leave_queue", &self.run("leave_queue", &call).await?)? == 1 {
            self.changes.notify(pool);
        }
        Ok(())
    }

    async fn queue(&self, pool: PoolId) -> Result<Vec<semaphore_core::QueuedPlace>> {
        let call = self.invocation(Kind::Shrink, "queue", [pool]);
        let fields = items("queue", self.run("queue", &call).await?)?;
        fields
            .chunks(4)
            .map(|place| {
                let [waiter, slots, since, held] = place else {
                    return Err(malformed("queue", "a short place"));
                };
                let waiter = reply::text("queue", waiter)?
                    .ok_or_else(|| malformed("queue", "a place without a waiter"))?;
                let waiter = uuid::Uuid::parse_str(&waiter)
                    .map_err(|_| malformed("queue", "a waiter that is not a UUID"))?;
                Ok(semaphore_core::QueuedPlace::kept(
                    WaiterId::from_uuid(waiter),
                    u32_of(int("queue", slots)?),
                    semaphore_core::store::from_unix_ms(
                        u64::try_from(int("queue", since)?).unwrap_or(0),
                    ),
                    int("queue", held)? == 1,
                ))
            })
            .collect()
    }
}

impl RedisStore {
    /// Borrows one slot of each of `requests`' pools, all on one hash slot
    /// (or on one server), in one script: all or nothing. With `check`,
    /// grants nothing: a refusal as a borrow's (the waiter queued where
    /// it is), or `Granted` with only the leases already held. The tokens
    /// granted are above `floor`.
    pub(crate) async fn borrow_on_one_slot(
        &self,
        requests: &[BorrowRequest],
        check: bool,
        floor: u64,
    ) -> Result<TryBorrowAll> {
        let Some(head) = requests.first() else {
            return Ok(TryBorrowAll::Granted { leases: Vec::new() });
        };
        if !self.ready(head.pool, head).await? {
            return Err(self.session.ended_error(head.session));
        }
        let mut call = self.invocation(Kind::Grow, "borrow_all", requests.iter().map(|r| r.pool));
        call.arg(requests.len())
            .arg(millis(self.within_grace(head.ttl)))
            .arg(waiter_label(head.waiter))
            .arg(label(head.key.as_deref()))
            .arg(label(head.owner.as_deref()));
        for request in requests {
            call.arg(request.lease.as_uuid().to_string());
        }
        for request in requests {
            call.arg(request.slots);
        }
        call.arg(session_label(head.session))
            .arg(self.connection_label(head.pool))
            .arg(if check { "1" } else { "0" })
            .arg(floor);
        let rows = items("borrow", self.run("borrow", &call).await?)?;
        let mut granted = Vec::with_capacity(requests.len());
        let mut blocked = Vec::new();
        for (row, request) in rows.into_iter().zip(requests) {
            let fields = items("borrow", row)?;
            if let [status, index, ..] = &fields[..]
                && let status @ (2 | 4 | 5 | 6) = int("borrow", status)?
            {
                let i = usize::try_from(int("borrow", index)?).unwrap_or(0);
                let pool = requests
                    .get(i.wrapping_sub(1))
                    .map_or(request.pool, |r| r.pool);
                return Err(match status {
                    2 => not_found(pool),
                    4 => Error::Draining { pool },
                    6 => Error::KeyReused { pool },
                    _ => self.session.ended_error(head.session),
                });
            }
            match reply::attempt("borrow", request.pool, redis::Value::Array(fields))? {
                Attempt::Granted(lease) => granted.push(lease),
                Attempt::Exhausted(at, links) => {
                    // A gone waiter's place is forgotten for the next
                    // attempt, which the core makes when woken.
                    self.reap_gone(request.pool, &links).await?;
                    blocked.push(at.map(from_unix_ms));
                }
                Attempt::SessionEnded => return Err(self.session.ended_error(head.session)),
                Attempt::HadRoom => {}
                Attempt::Missing => return Err(not_found(request.pool)),
                Attempt::Draining => return Err(Error::Draining { pool: request.pool }),
                Attempt::KeyReused => return Err(Error::KeyReused { pool: request.pool }),
            }
        }
        if blocked.is_empty() && (check || granted.len() == requests.len()) {
            return Ok(TryBorrowAll::Granted { leases: granted });
        }
        Ok(TryBorrowAll::refused(blocked))
    }
}
