//! The [`Store`] primitives on etcd: each a look and at most one
//! conditioned write, tried again from a new look when another writer
//! came first.

use std::time::Duration;

use etcd_client::{Compare, CompareOp, DeleteOptions, GetOptions, TxnOp, TxnOpResponse};
use semaphore_core::store::{
    BorrowRequest, Parts, Store, TryBorrow, TryBorrowAll, async_trait, from_unix_ms, page_start,
};
use semaphore_core::{
    Error, Holder, Lease, LeaseId, PoolId, PoolState, QueuedPlace, Result, WaiterId,
};

use crate::EtcdStore;
use crate::decide::{Decision, PlaceWrite, decide};
use crate::error::{SessionEnded, contended};
use crate::record::{LeaseRec, PlaceRec, PoolRec, encode};
use crate::view::{Look, PoolView, Row};

/// How many looks a step takes before it gives up to contention.
const ATTEMPTS: usize = 64;

/// The etcd lease granularity: whole seconds.
const GRANULARITY: Duration = Duration::from_secs(1);

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
        let since = view
            .places
            .iter()
            .find(|row| row.id == *waiter.as_uuid())
            .filter(|_| !place.join)
            .map_or(now, |row| row.rec.since);
        let etcd_lease = self.etcd_lease(operation, now, place.alive_until).await?;
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

    /// The deletes of what `look` found dead in `view`: leases no longer
    /// active, places no longer live.
    fn sweep(&self, view: &PoolView, look: &Look, ops: &mut Vec<TxnOp>) {
        for row in view.leases.iter().filter(|row| !look.active(&row.rec)) {
            ops.push(TxnOp::delete(
                self.keys.lease(view.pool, LeaseId::from_uuid(row.id)),
                None,
            ));
        }
        for row in view.places.iter().filter(|row| !look.place_live(&row.rec)) {
            ops.push(TxnOp::delete(
                self.keys.place(view.pool, WaiterId::from_uuid(row.id)),
                None,
            ));
        }
    }

    /// Borrows for every request or none (one pool: `try_borrow`): the
    /// leases, or the latest of the blocked pools' next expiries.
    async fn borrow(
        &self,
        operation: &'static str,
        requests: &[BorrowRequest],
    ) -> Result<std::result::Result<Vec<Lease>, Option<std::time::SystemTime>>> {
        let mut pools: Vec<PoolId> = requests.iter().map(|r| r.pool).collect();
        pools.sort_by_key(|p| *p.as_uuid());
        pools.dedup();
        for _ in 0..ATTEMPTS {
            let (mut views, look) = self.look(operation, &pools).await?;
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
                if !keep.is_empty() && self.commit(operation, guards, keep).await?.is_none() {
                    continue;
                }
                return Err(error);
            }
            if !blocked.is_empty() {
                if !ops.is_empty() && self.commit(operation, guards, ops).await?.is_none() {
                    continue;
                }
                let TryBorrowAll::Exhausted { next_expiry } = TryBorrowAll::refused(blocked) else {
                    unreachable!("a refusal is exhausted");
                };
                return Ok(Err(next_expiry));
            }
            // Every request is granted, now or before.
            let mut grants = Vec::new();
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
                    grants.push(etcd_lease);
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
            let Some(revision) = self.commit(operation, guards, ops).await? else {
                self.revoke(grants);
                continue;
            };
            let leases = requests
                .iter()
                .zip(decisions)
                .enumerate()
                .map(|(index, (request, decision))| match decision {
                    Decision::Answer { lease } => lease,
                    Decision::Grant { positions, expires } => Lease::holding(
                        request.lease,
                        request.pool,
                        positions,
                        crate::record::token(revision, u32::try_from(index).unwrap_or(u32::MAX)),
                        from_unix_ms(expires),
                    )
                    .with_session(request.session),
                    _ => unreachable!("every decision is a grant or an answer here"),
                })
                .collect();
            return Ok(Ok(leases));
        }
        Err(contended(operation))
    }

    /// Revokes etcd leases no key was attached to, in the background.
    fn revoke(&self, etcd_leases: Vec<i64>) {
        let leases: Vec<i64> = etcd_leases.into_iter().filter(|l| *l != 0).collect();
        if leases.is_empty() {
            return;
        }
        let mut client = self.client.lease_client();
        tokio::spawn(async move {
            for lease in leases {
                let _ = client.revoke(lease).await;
            }
        });
    }

    /// One pool's look.
    async fn look_at(&self, operation: &'static str, pool: PoolId) -> Result<(PoolView, Look)> {
        let (mut views, look) = self.look(operation, &[pool]).await?;
        Ok((views.remove(0), look))
    }

    /// Rewrites (or deletes, with `None`) the active lease `lease` of
    /// `pool`, if it is, as `change` says; what `change` answered.
    async fn change_lease<T>(
        &self,
        operation: &'static str,
        pool: PoolId,
        pick: impl Fn(&PoolView, &Look) -> Option<Row<LeaseRec>>,
        change: impl Fn(&PoolView, &Row<LeaseRec>, u64) -> (Option<(LeaseRec, i64)>, T),
        absent: impl Fn(&PoolView) -> Result<T>,
    ) -> Result<T> {
        for _ in 0..ATTEMPTS {
            let (view, look) = self.look_at(operation, pool).await?;
            let Some(row) = pick(&view, &look) else {
                return absent(&view);
            };
            let now = look.now.unwrap_or_else(|| self.stamp());
            let key = self.keys.lease(pool, LeaseId::from_uuid(row.id));
            let (rewrite, answer) = change(&view, &row, now);
            let op = match rewrite {
                Some((rec, etcd_lease)) => Self::put(key.clone(), encode(&rec), etcd_lease),
                None => TxnOp::delete(key.clone(), None),
            };
            let guard = Compare::mod_revision(key, CompareOp::Equal, row.modified);
            if self
                .commit(operation, vec![guard], vec![op])
                .await?
                .is_some()
            {
                return Ok(answer);
            }
        }
        Err(contended(operation))
    }

    /// Writes the pool's record as `change` makes it from the one found;
    /// its state after, or `None` if it does not exist and `change` made
    /// none.
    async fn write_pool(
        &self,
        operation: &'static str,
        pool: PoolId,
        change: impl Fn(Option<PoolRec>) -> Option<PoolRec>,
    ) -> Result<Option<PoolState>> {
        for _ in 0..ATTEMPTS {
            let (mut view, look) = self.look_at(operation, pool).await?;
            let Some(rec) = change(view.meta.map(|(rec, _)| rec)) else {
                return Ok(None);
            };
            let guard = match view.meta {
                Some((_, modified)) => {
                    Compare::mod_revision(self.keys.pool(pool), CompareOp::Equal, modified)
                }
                None => Compare::create_revision(self.keys.pool(pool), CompareOp::Equal, 0),
            };
            let op = TxnOp::put(self.keys.pool(pool), encode(&rec), None);
            if self
                .commit(operation, vec![guard], vec![op])
                .await?
                .is_some()
            {
                view.meta = Some((rec, 0));
                return Ok(view.state(&look));
            }
        }
        Err(contended(operation))
    }
}

#[async_trait]
impl Store for EtcdStore {
    fn parts(&self) -> Parts<'_> {
        Parts {
            clock: self.time.clock(),
            changes: &self.changes,
            session: Some(&self.session),
            max_ttl: Duration::MAX,
            in_place: None,
        }
    }

    fn expiry_granularity(&self) -> Option<Duration> {
        Some(GRANULARITY)
    }

    async fn register(&self, pool: PoolId, count: u32) -> Result<PoolState> {
        let state = self
            .write_pool("register", pool, |found| {
                Some(PoolRec {
                    count,
                    draining: found.is_some_and(|rec| rec.draining),
                })
            })
            .await?;
        state.ok_or(Error::PoolNotFound { pool })
    }

    async fn inspect(&self, pool: PoolId) -> Result<PoolState> {
        let (view, look) = self.look_at("inspect", pool).await?;
        view.state(&look).ok_or(Error::PoolNotFound { pool })
    }

    async fn set_draining(&self, pool: PoolId, draining: bool) -> Result<PoolState> {
        self.write_pool("set_draining", pool, |found| {
            found.map(|rec| PoolRec { draining, ..rec })
        })
        .await?
        .ok_or(Error::PoolNotFound { pool })
    }

    async fn pools(&self, after: Option<PoolId>, limit: u32) -> Result<Vec<PoolState>> {
        let Some(start) = page_start(after) else {
            return Ok(Vec::new());
        };
        let first = self.keys.pool(start);
        let end = etcd_client::Txn::new().and_then(vec![TxnOp::get(
            first,
            Some(
                GetOptions::new()
                    .with_range(prefix_end(self.keys.pools()))
                    .with_limit(i64::from(limit).saturating_add(1))
                    .with_keys_only(),
            ),
        )]);
        let response = self.txn("pools", end).await?;
        let mut ids = Vec::new();
        if let Some(TxnOpResponse::Get(get)) = response.op_responses().into_iter().next() {
            for kv in get.kvs() {
                if let Some(id) = crate::record::id_of(kv.key()) {
                    let id = PoolId::from_uuid(id);
                    if after != Some(id) {
                        ids.push(id);
                    }
                }
            }
        }
        ids.truncate(usize::try_from(limit).unwrap_or(usize::MAX));
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let (views, look) = self.look("pools", &ids).await?;
        Ok(views.iter().filter_map(|view| view.state(&look)).collect())
    }

    async fn delete(&self, pool: PoolId) -> Result<bool> {
        let prefix = || Some(DeleteOptions::new().with_prefix());
        let txn = etcd_client::Txn::new().and_then(vec![
            TxnOp::delete(self.keys.pool(pool), None),
            TxnOp::delete(self.keys.leases(pool), prefix()),
            TxnOp::delete(self.keys.places(pool), prefix()),
        ]);
        let response = self.txn("delete", txn).await?;
        let existed = matches!(
            response.op_responses().into_iter().next(),
            Some(TxnOpResponse::Delete(deleted)) if deleted.deleted() > 0
        );
        Ok(existed)
    }

    async fn try_borrow(&self, request: &BorrowRequest) -> Result<TryBorrow> {
        Ok(
            match self.borrow("borrow", std::slice::from_ref(request)).await? {
                Ok(mut leases) => TryBorrow::Granted {
                    lease: leases.remove(0),
                },
                Err(next_expiry) => TryBorrow::Exhausted { next_expiry },
            },
        )
    }

    async fn try_borrow_all(&self, requests: &[BorrowRequest]) -> Result<TryBorrowAll> {
        Ok(match self.borrow("borrow_all", requests).await? {
            Ok(leases) => TryBorrowAll::Granted { leases },
            Err(next_expiry) => TryBorrowAll::Exhausted { next_expiry },
        })
    }

    async fn return_lease(&self, pool: PoolId, lease: LeaseId) -> Result<bool> {
        let returned = self
            .change_lease(
                "return",
                pool,
                |view, look| {
                    view.active(look)
                        .find(|r| r.id == *lease.as_uuid())
                        .cloned()
                },
                |_, _, _| (None, true),
                |_| Ok(false),
            )
            .await?;
        if returned {
            self.changes.notify(pool);
        }
        Ok(returned)
    }

    async fn renew(&self, pool: PoolId, lease: LeaseId, ttl: Duration) -> Result<Option<Lease>> {
        let ttl_ms = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX);
        for _ in 0..ATTEMPTS {
            let (view, look) = self.look_at("renew", pool).await?;
            if view.meta.is_none() {
                return Err(Error::PoolNotFound { pool });
            }
            let Some(row) = view
                .active(&look)
                .find(|r| r.id == *lease.as_uuid())
                .cloned()
            else {
                return Ok(None);
            };
            let now = look.now.unwrap_or_else(|| self.stamp());
            let expires = now
                .saturating_add(ttl_ms)
                .min(semaphore_core::store::MAX_UNIX_MS);
            let etcd_lease = self.etcd_lease("renew", now, expires).await?;
            let rec = LeaseRec {
                expires,
                etcd_lease,
                ..row.rec.clone()
            };
            let key = self.keys.lease(pool, lease);
            let guard = Compare::mod_revision(key.clone(), CompareOp::Equal, row.modified);
            let op = Self::put(key, encode(&rec), etcd_lease);
            if self.commit("renew", vec![guard], vec![op]).await?.is_some() {
                self.revoke(vec![row.rec.etcd_lease]);
                let renewed = Row { rec, ..row };
                return Ok(Some(view.lease(&renewed)));
            }
            self.revoke(vec![etcd_lease]);
        }
        Err(contended("renew"))
    }

    async fn unbind(&self, pool: PoolId, lease: LeaseId) -> Result<bool> {
        self.change_lease(
            "unbind",
            pool,
            |view, look| {
                view.active(look)
                    .find(|r| r.id == *lease.as_uuid())
                    .cloned()
            },
            |_, row, _| {
                let rec = LeaseRec {
                    session: None,
                    ..row.rec.clone()
                };
                let etcd_lease = rec.etcd_lease;
                (Some((rec, etcd_lease)), true)
            },
            |_| Ok(false),
        )
        .await
    }

    async fn holders(&self, pool: PoolId) -> Result<Vec<Holder>> {
        let (view, look) = self.look_at("holders", pool).await?;
        if view.meta.is_none() {
            return Err(Error::PoolNotFound { pool });
        }
        Ok(view.holders(&look))
    }

    async fn force_return(&self, pool: PoolId, position: u32) -> Result<Option<Holder>> {
        let forced = self
            .change_lease(
                "force_return",
                pool,
                |view, look| {
                    view.active(look)
                        .find(|r| r.rec.positions.contains(&position))
                        .cloned()
                },
                |view, row, _| {
                    let holder = Holder::new(
                        view.lease(row).with_session(None),
                        row.rec.owner.clone(),
                        row.rec.key.clone(),
                    );
                    (None, Some(holder))
                },
                |view| match view.meta {
                    Some(_) => Ok(None),
                    None => Err(Error::PoolNotFound { pool }),
                },
            )
            .await?;
        if forced.is_some() {
            self.changes.notify(pool);
        }
        Ok(forced)
    }

    async fn place(&self, pool: PoolId, waiter: WaiterId) -> Result<Option<u64>> {
        let (view, look) = self.look_at("place", pool).await?;
        if view.meta.is_none() {
            return Ok(None);
        }
        Ok(view
            .live_places(&look)
            .position(|row| row.id == *waiter.as_uuid())
            .map(|at| u64::try_from(at).unwrap_or(u64::MAX).saturating_add(1)))
    }

    async fn leave_queue(&self, pool: PoolId, waiter: WaiterId) -> Result<()> {
        let txn = etcd_client::Txn::new()
            .and_then(vec![TxnOp::delete(self.keys.place(pool, waiter), None)]);
        self.txn("leave_queue", txn).await.map(drop)
    }

    async fn queue(&self, pool: PoolId) -> Result<Vec<QueuedPlace>> {
        let (view, look) = self.look_at("queue", pool).await?;
        if view.meta.is_none() {
            return Ok(Vec::new());
        }
        Ok(view
            .live_places(&look)
            .map(|row| {
                QueuedPlace::kept(
                    WaiterId::from_uuid(row.id),
                    row.rec.slots,
                    from_unix_ms(row.rec.since),
                    row.rec.held,
                )
            })
            .collect())
    }
}

/// The key just past every key that starts with `prefix`.
fn prefix_end(prefix: String) -> Vec<u8> {
    let mut end = prefix.into_bytes();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    vec![0]
}
