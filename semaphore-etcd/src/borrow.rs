//! A borrow of one pool or several as one step: a look at the pools,
//! the decision for each request ([`decide`]), and one write conditioned on
//! the look, tried again from a new look when another writer came first
//! (the write's own transaction reads it, so a lost race costs no round
//! trip of its own);
//! a retry or a key answered with the lease granted before, its expiry
//! counted from etcd's own lease.

use std::time::{Duration, Instant, SystemTime};

use etcd_client::{Compare, CompareOp, TxnOp};
use semaphore_core::store::{BorrowRequest, TryBorrowAll, bounded, from_unix_ms};
use semaphore_core::{Error, Lease, LeaseId, PoolId, Result, WaiterId};

use crate::EtcdStore;
use crate::backend::Written;
use crate::decide::{Decision, PlaceWrite, decide};
use crate::error::{SessionEnded, contended};
use crate::record::{LeaseRec, PlaceRec, encode};
use crate::view::{Look, PoolView, Row};

/// The look that last refused a borrow with no place (a borrow's first
/// attempt, before it queues), for the attempt that queues it next: its
/// place is written on that look, conditioned on it as every write is,
/// with the pools read back in the same transaction, so that a slot freed
/// since (a delete, which no compare sees) is decided on at once. A
/// queued borrow then costs one round trip less. Kept [`RECENT`] at most.
#[derive(Debug, Default)]
pub(crate) struct Recent(parking_lot::Mutex<Option<Refusal>>);

/// A refusing look: its pool, the pools it saw, and when it was kept.
type Refusal = (PoolId, Vec<PoolView>, Look, Instant);

/// How long a refusing look serves the attempt that queues next.
const RECENT: Duration = Duration::from_millis(50);

impl Recent {
    fn keep(&self, pool: PoolId, views: Vec<PoolView>, look: Look) {
        *self.0.lock() = Some((pool, views, look, Instant::now()));
    }

    fn take(&self, pool: PoolId) -> Option<(Vec<PoolView>, Look)> {
        let mut recent = self.0.lock();
        match recent.take() {
            Some((kept, views, look, at)) if kept == pool && at.elapsed() < RECENT => {
                Some((views, look))
            }
            other => {
                *recent = other.filter(|(_, _, _, at)| at.elapsed() < RECENT);
                None
            }
        }
    }
}

/// How many looks a step takes before it gives up to contention.
pub(crate) const ATTEMPTS: usize = 64;

/// The most operations a borrow's write carries with its sweep of what it
/// found dead (etcd takes 128 a transaction).
const SWEEP: usize = 96;

impl EtcdStore {
    /// The write of `place` for `request`'s waiter.
    async fn place_op(
        &self,
        operation: &'static str,
        request: &BorrowRequest,
        place: PlaceWrite,
        view: &PoolView,
        now: u64,
    ) -> Result<Option<TxnOp>> {
        let Some(waiter) = request.waiter else {
            return Ok(None);
        };
        let mine = view
            .places
            .iter()
            .find(|row| row.id == *waiter.as_uuid())
            .filter(|_| !place.join);
        let since = mine.map_or(now, |row| row.rec.since);
        // In production a queued head's place lives with the handle's
        // places lease (see `places`): kept on it, it needs no write.
        let etcd_lease = if request.hold.is_none() && self.time.now_param().is_none() {
            let kept = self
                .places
                .lease(operation, &self.client, &self.changes)
                .await?;
            if mine.is_some_and(|row| row.rec.etcd_lease == kept) {
                return Ok(None);
            }
            kept
        } else {
            self.etcd_lease(operation, now, place.alive_until).await?
        };
        let rec = PlaceRec {
            slots: request.slots.max(1),
            alive_until: place.alive_until,
            held: request.hold.is_some(),
            since,
            etcd_lease,
        };
        Ok(Some(Self::put(
            self.keys.place(request.pool, waiter),
            encode(&rec),
            etcd_lease,
        )))
    }

    /// Leaves the standing of queued head `waiter`, refused on `look`
    /// (see `standing`); its place is on `view` or was created by the
    /// refusal's write at revision `written`. A held place has none.
    fn stand(
        &self,
        request: &BorrowRequest,
        waiter: WaiterId,
        view: &PoolView,
        look: &Look,
        written: Option<i64>,
    ) {
        if request.hold.is_some() {
            return;
        }
        let id = *waiter.as_uuid();
        let seen = view.places.iter().find(|row| row.id == id);
        let Some(mine) = seen.map(|row| row.created).or(written) else {
            return;
        };
        if self
            .standings
            .stand(id, request.slots.max(1), mine, view, look)
        {
            self.changes.notify(request.pool);
        }
    }

    /// The deletes of what `look` found dead in `view`: leases no longer
    /// active, places no longer live; at most [`SWEEP`] of them, so that
    /// the transaction stays within etcd's 128 operations (the rest go
    /// with later writes, or with their etcd leases).
    fn sweep(&self, view: &PoolView, look: &Look, ops: &mut Vec<TxnOp>) {
        let room = SWEEP.saturating_sub(ops.len());
        let dead_leases = view.leases.iter().filter(|row| !look.active(&row.rec));
        for row in dead_leases.take(room) {
            ops.push(TxnOp::delete(
                self.keys.lease(view.pool, LeaseId::from_uuid(row.id)),
                None,
            ));
        }
        let room = SWEEP.saturating_sub(ops.len());
        let dead_places = view.places.iter().filter(|row| !look.place_live(&row.rec));
        for row in dead_places.take(room) {
            ops.push(TxnOp::delete(
                self.keys.place(view.pool, WaiterId::from_uuid(row.id)),
                None,
            ));
        }
    }

    /// Borrows for every request or none (one pool: `try_borrow`): the
    /// leases, or the latest of the blocked pools' next expiries.
    pub(crate) async fn borrow(
        &self,
        operation: &'static str,
        requests: &[BorrowRequest],
    ) -> Result<std::result::Result<Vec<Lease>, Option<SystemTime>>> {
        let mut pools: Vec<PoolId> = requests.iter().map(|r| r.pool).collect();
        pools.sort_by_key(|p| *p.as_uuid());
        pools.dedup();
        if requests.len() > 1 || requests.iter().any(|r| r.hold.is_some()) {
            // Waiters outside the queue: woken by every change.
            self.standings.open(pools.iter().copied());
        }
        // A lost write's transaction reads the pools anew for the next try.
        let mut seen = None;
        // A queued head's first attempt starts from the look that refused
        // its borrow just before, if it is recent (see `Recent`).
        let mut stale = false;
        if let [request] = requests
            && request.waiter.is_some()
        {
            seen = self.recent.take(request.pool);
            stale = seen.is_some();
        }
        for _ in 0..ATTEMPTS {
            let (mut views, look) = match seen.take() {
                Some(seen) => seen,
                None => self.look(operation, &pools).await?,
            };
            let now = look.now.unwrap_or_else(|| self.stamp());
            let index = |pool: PoolId| pools.iter().position(|p| *p == pool).unwrap_or(0);
            let mut decisions = Vec::with_capacity(requests.len());
            for request in requests {
                let view = &mut views[index(request.pool)];
                let decision = decide(view, &look, request, now);
                if let Decision::Grant { positions, expires } = &decision {
                    // A pool named twice: the second sees the first's grant.
                    view.leases.push(Row {
                        id: *request.lease.as_uuid(),
                        rec: LeaseRec {
                            positions: positions.iter().copied().collect(),
                            expires: *expires,
                            session: None,
                            owner: None,
                            key: None,
                            etcd_lease: 0,
                            index: 0,
                        },
                        created: i64::MAX,
                        modified: i64::MAX,
                    });
                }
                decisions.push(decision);
            }
            if stale
                && !decisions
                    .iter()
                    .all(|d| matches!(d, Decision::Refused { .. }))
            {
                // An earlier look serves a refusal only: anything else is
                // decided on a look of its own.
                stale = false;
                continue;
            }
            let guards: Vec<Compare> = views
                .iter()
                .flat_map(|view| self.unchanged(view, &look))
                .collect();
            let mut ops = Vec::new();
            let mut failure = None;
            let mut blocked = Vec::new();
            for (request, decision) in requests.iter().zip(&decisions) {
                let view = &views[index(request.pool)];
                match decision {
                    Decision::NoPool => {
                        failure.get_or_insert(Error::PoolNotFound { pool: request.pool });
                    }
                    Decision::KeyReused => {
                        failure.get_or_insert(Error::KeyReused { pool: request.pool });
                    }
                    Decision::SessionEnded => {
                        if let Some(id) = request.session {
                            self.session.ended_on_store(id);
                        }
                        failure.get_or_insert(Error::Storage {
                            operation,
                            retryable: true,
                            source: Box::new(SessionEnded),
                        });
                    }
                    Decision::Draining { place } => {
                        failure.get_or_insert(Error::Draining { pool: request.pool });
                        if let Some(place) = place
                            && let Some(op) =
                                self.place_op(operation, request, *place, view, now).await?
                        {
                            ops.push(op);
                        }
                    }
                    Decision::Refused { place, next_expiry } => {
                        blocked.push(next_expiry.map(from_unix_ms));
                        if let Some(place) = place
                            && let Some(op) =
                                self.place_op(operation, request, *place, view, now).await?
                        {
                            ops.push(op);
                        }
                    }
                    Decision::Answer { .. } | Decision::Grant { .. } => {}
                }
            }
            if let Some(error) = failure {
                // Only held places through a drain are written.
                let keep: Vec<TxnOp> = if matches!(error, Error::Draining { .. }) {
                    ops
                } else {
                    Vec::new()
                };
                if !keep.is_empty()
                    && let Written::Changed(views, look) =
                        self.commit_or_look(operation, guards, keep, &pools).await?
                {
                    seen = Some((views, look));
                    continue;
                }
                return Err(error);
            }
            if !blocked.is_empty() {
                if stale {
                    // The place goes on the earlier look; what changed
                    // since (a slot freed) is read with the write, and
                    // decided on next, at no round trip more.
                    stale = false;
                    if ops.is_empty() {
                        continue;
                    }
                    let (_, views, look) = self
                        .commit_then_look(operation, guards, ops, &pools)
                        .await?;
                    seen = Some((views, look));
                    continue;
                }
                let mut written = None;
                if !ops.is_empty() {
                    match self.commit_or_look(operation, guards, ops, &pools).await? {
                        Written::At(revision) => written = Some(revision),
                        Written::Changed(views, look) => {
                            seen = Some((views, look));
                            continue;
                        }
                    }
                }
                if let [request] = requests {
                    match request.waiter {
                        None => self.recent.keep(request.pool, views, look),
                        Some(waiter) => self.stand(request, waiter, &views[0], &look, written),
                    }
                }
                let TryBorrowAll::Exhausted { next_expiry } = TryBorrowAll::refused(blocked) else {
                    unreachable!("a refusal is exhausted");
                };
                return Ok(Err(next_expiry));
            }
            // A lease id granted before whose lease is no longer active (a
            // retry after its session ended or its ttl passed): its key goes
            // first, in a write of its own, so that the grant creates it
            // anew, with a new revision for its token (R9).
            let stale: Vec<Compare> = requests
                .iter()
                .zip(&decisions)
                .filter(|(_, d)| matches!(d, Decision::Grant { .. }))
                .filter_map(|(r, _)| {
                    views[index(r.pool)]
                        .leases
                        .iter()
                        .find(|row| row.id == *r.lease.as_uuid() && row.created != i64::MAX)
                        .map(|row| (self.keys.lease(r.pool, r.lease), row.modified))
                })
                .map(|(key, modified)| Compare::mod_revision(key, CompareOp::Equal, modified))
                .collect();
            if !stale.is_empty() {
                let deletes = requests
                    .iter()
                    .zip(&decisions)
                    .filter(|(_, d)| matches!(d, Decision::Grant { .. }))
                    .map(|(r, _)| TxnOp::delete(self.keys.lease(r.pool, r.lease), None))
                    .collect();
                self.commit(operation, stale, deletes).await?;
                continue;
            }
            // Every request is granted, now or before.
            for (index, (request, decision)) in requests.iter().zip(&decisions).enumerate() {
                if let Some(waiter) = request.waiter {
                    ops.push(TxnOp::delete(self.keys.place(request.pool, waiter), None));
                }
                if let Decision::Grant { positions, expires } = decision {
                    let etcd_lease = self.etcd_lease(operation, now, *expires).await?;
                    let rec = LeaseRec {
                        positions: positions.iter().copied().collect(),
                        expires: *expires,
                        session: request.session.map(|s| *s.as_uuid()),
                        owner: request.owner.as_deref().map(str::to_owned),
                        key: request.key.as_deref().map(str::to_owned),
                        etcd_lease,
                        index: u32::try_from(index).unwrap_or(u32::MAX),
                    };
                    ops.push(Self::put(
                        self.keys.lease(request.pool, request.lease),
                        encode(&rec),
                        etcd_lease,
                    ));
                }
            }
            let mut guards = guards;
            for request in requests.iter().filter(|r| r.session.is_some()) {
                if let Some(session) = request.session {
                    guards.push(Compare::create_revision(
                        self.keys.session(session),
                        CompareOp::Greater,
                        0,
                    ));
                }
            }
            for view in &views {
                self.sweep(view, &look, &mut ops);
            }
            // A write that lost leaves its etcd leases to later keys, or to
            // lapse (see `grants`).
            let revision = match self.commit_or_look(operation, guards, ops, &pools).await? {
                Written::At(revision) => revision,
                Written::Changed(views, look) => {
                    seen = Some((views, look));
                    continue;
                }
            };
            let mut leases = Vec::with_capacity(requests.len());
            for (index, (request, decision)) in requests.iter().zip(decisions).enumerate() {
                leases.push(match decision {
                    Decision::Answer { lease, etcd_lease } => {
                        self.answered(operation, lease, etcd_lease, look.now)
                            .await?
                    }
                    Decision::Grant { positions, expires } => Lease::holding(
                        request.lease,
                        request.pool,
                        positions,
                        crate::record::token(revision, u32::try_from(index).unwrap_or(u32::MAX)),
                        from_unix_ms(expires),
                    )
                    .with_session(request.session),
                    _ => unreachable!("every decision is a grant or an answer here"),
                });
            }
            return Ok(Ok(leases));
        }
        Err(contended(operation))
    }

    /// `lease`, granted before (a retry's or a key's answer), with its
    /// expiry as etcd counts it, from this process's clock: the grant may
    /// have been another machine's, whose clock dated the record. In
    /// production the etcd lease's remaining TTL (whole seconds, rounded
    /// down) from before it was asked; in test mode the record's.
    async fn answered(
        &self,
        operation: &'static str,
        lease: Lease,
        etcd_lease: i64,
        now: Option<u64>,
    ) -> Result<Lease> {
        if now.is_some() || etcd_lease == 0 {
            return Ok(lease);
        }
        let sent = self.stamp();
        let mut client = self.client.lease_client();
        let left = bounded(operation, async {
            client
                .time_to_live(etcd_lease, None)
                .await
                .map_err(crate::error::storage(operation))
        })
        .await?
        .ttl()
        .max(0)
        .unsigned_abs();
        let mut lease = lease;
        lease.expires_at = from_unix_ms(sent.saturating_add(left.saturating_mul(1000)));
        Ok(lease)
    }
}
