//! The [`Store`] primitives on etcd: each a look and at most one
//! conditioned write, tried again from a new look when another writer
//! came first.

use std::time::Duration;

use etcd_client::{Compare, CompareOp, DeleteOptions, GetOptions, TxnOp, TxnOpResponse};
use semaphore_core::store::{
    BorrowRequest, Parts, Store, TryBorrow, TryBorrowAll, async_trait, from_unix_ms, page_start,
};
use semaphore_core::{
    Error, Holder, Lease, LeaseId, PoolId, PoolState, QueuedPlace, Result, SessionId, WaiterId,
};

use crate::EtcdStore;
use crate::borrow::ATTEMPTS;
use crate::error::contended;
use crate::record::{LeaseRec, PoolRec, encode};
use crate::view::{Look, MAX_POOLS, PoolView, Row, page_reads, prefix_end};

/// The etcd lease granularity: whole seconds.
const GRANULARITY: Duration = Duration::from_secs(1);

impl EtcdStore {
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
            let rewrite: Option<(LeaseRec, i64)> = rewrite;
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
            // etcd's longest lease; in test mode no etcd lease ends a
            // lease (the manual clock does), and none bounds it.
            max_ttl: match self.time.now_param() {
                Some(_) => Duration::MAX,
                None => Duration::from_secs(crate::decide::MAX_ETCD_TTL_SECONDS.unsigned_abs()),
            },
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
        let ids = etcd_client::Txn::new().and_then(vec![TxnOp::get(
            self.keys.pool(start),
            Some(
                GetOptions::new()
                    .with_range(prefix_end(self.keys.pools()))
                    .with_limit(i64::from(limit).saturating_add(1))
                    .with_keys_only(),
            ),
        )]);
        let response = self.txn("pools", ids).await?;
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
        let (Some(first), Some(last)) = (ids.first().copied(), ids.last().copied()) else {
            return Ok(Vec::new());
        };
        let ops = page_reads(&self.keys, first, last);
        let (views, look) = self.look_with("pools", &ids, ops).await?;
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
        if requests.len() > MAX_POOLS {
            return Err(Error::InvalidArgument {
                field: "pools",
                allowed: format!(
                    "at most {MAX_POOLS} pools in one multi-pool borrow on etcd (a transaction \
                     carries at most 128 operations)"
                ),
                got: requests.len().to_string(),
            });
        }
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
            let mut guards = vec![Compare::mod_revision(
                key.clone(),
                CompareOp::Equal,
                row.modified,
            )];
            if let Some(session) = row.rec.session {
                let session = self.keys.session(SessionId::from_uuid(session));
                guards.push(Compare::create_revision(session, CompareOp::Greater, 0));
            }
            let op = Self::put(key, encode(&rec), etcd_lease);
            // The etcd lease the key leaves lapses by itself (see `grants`).
            if self.commit("renew", guards, vec![op]).await?.is_some() {
                let renewed = Row { rec, ..row };
                return Ok(Some(view.lease(&renewed)));
            }
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
