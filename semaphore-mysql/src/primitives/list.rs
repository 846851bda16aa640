//! A page of the store's pools, in id order (rule "Listing pools").

use mysql_async::Transaction;
use mysql_async::prelude::Queryable;
use semaphore_core::{PoolId, PoolState};

use super::{NOW, Sql, Step, key};

impl Step<'_> {
    /// At most `limit` pools from id `start` on (inclusive), each as
    /// `inspect` states it, in one statement: a range read of the pools'
    /// primary key (`BINARY(16)` compares as bytes, the order of
    /// [`PoolId`]), each pool's leases and places counted by their own
    /// keys. Locks nothing.
    pub(crate) async fn pools(
        &self,
        tx: &mut Transaction<'_>,
        start: PoolId,
        limit: u32,
    ) -> Sql<Vec<PoolState>> {
        type Row = (Vec<u8>, u32, bool, i64, i64);
        let rows: Vec<Row> = tx
            .exec(
                format!(
                    "SELECT p.pool, p.count, p.draining,
                        (SELECT COUNT(*) FROM {leases} WHERE pool = p.pool
                            AND expires_at > t.now AND NOT {gone}),
                        (SELECT COUNT(*) FROM {waiters} w WHERE w.pool = p.pool
                            AND w.alive_until > t.now)
                     FROM {pools} p JOIN (SELECT {NOW} AS now) t
                     WHERE p.pool >= ? ORDER BY p.pool LIMIT ?",
                    leases = self.t.leases,
                    gone = self.t.gone_at("t.now"),
                    waiters = self.t.waiters,
                    pools = self.t.pools,
                ),
                (self.now_param(), key(&start), limit),
            )
            .await?;
        let n = |v: i64| u32::try_from(v).unwrap_or(u32::MAX);
        Ok(rows
            .into_iter()
            .filter_map(|(id, count, draining, in_use, queued)| {
                let id = uuid::Uuid::from_slice(&id).ok()?;
                Some(
                    PoolState::new(PoolId::from_uuid(id), count, n(in_use))
                        .with_draining(draining)
                        .with_queued(n(queued)),
                )
            })
            .collect())
    }
}
