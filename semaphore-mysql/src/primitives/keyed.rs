//! A keyed borrow's look for the lease its key names (SPEC "Beyond the
//! basic model"; fourth round, "Idempotency keys are atomic").

use mysql_async::Transaction;
use mysql_async::prelude::Queryable;
use semaphore_core::store::{KEY_DIGEST_SEPARATOR, key_name};
use semaphore_core::{Lease, PoolId};

use super::{Sql, Step, key};
use crate::leases::holders_of;

impl Step<'_> {
    /// The active lease of `pool` borrowed under the name of stored key
    /// `borrow_key` (the key itself, or the name and a request digest), if
    /// any, and whether its stored key is `borrow_key`; one whose holder is
    /// gone is reaped first, so that the key borrows anew.
    pub(super) async fn keyed(
        &self,
        tx: &mut Transaction<'_>,
        pool: &PoolId,
        borrow_key: Option<&str>,
        now: i64,
    ) -> Sql<Keyed> {
        let Some(borrow_key) = borrow_key else {
            return Ok(Keyed::No);
        };
        let name = key_name(borrow_key);
        let found: Option<(Vec<u8>, bool, Vec<u8>)> = tx
            .exec_first(
                format!(
                    "SELECT lease, {}, borrow_key FROM {} \
                     WHERE pool = ? AND (borrow_key = ? OR (borrow_key > ? AND borrow_key < ?)) \
                     AND expires_at > ?",
                    self.t.gone_at("?"),
                    self.t.leases
                ),
                (
                    now,
                    key(pool),
                    name.as_bytes().to_vec(),
                    format!("{name}{KEY_DIGEST_SEPARATOR}").into_bytes(),
                    format!("{name}\u{20}").into_bytes(),
                    now,
                ),
            )
            .await?;
        let Some((id, gone, stored)) = found else {
            return Ok(Keyed::No);
        };
        if gone {
            self.reap_gone(tx, pool, now).await?;
            return Ok(Keyed::No);
        }
        if stored != borrow_key.as_bytes() {
            return Ok(Keyed::Reused);
        }
        let rows = self.rows_of(tx, pool, &id, now).await?;
        Ok(holders_of(rows, *pool)
            .pop()
            .map_or(Keyed::No, |h| Keyed::Same(h.lease)))
    }
}

/// What a request's stored key finds among a pool's active leases.
pub(super) enum Keyed {
    /// No active lease has a key of its name.
    No,
    /// The lease borrowed under this very key, as it stands.
    Same(Lease),
    /// A lease borrowed under the name with another request digest.
    Reused,
}
