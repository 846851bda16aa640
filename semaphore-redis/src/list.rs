//! Listing the store's pools (rule "Listing pools"): an index of pool ids
//! kept beside the pools, `PREFIX:pools`, a sorted set read by range.
//!
//! Each member is a pool's id, hyphenated in lower case (whose order by
//! bytes, `ZRANGE ... BYLEX`, is [`PoolId`]'s), every score 0. A pool's
//! own keys live on its hash slot and the index on its own, so on a
//! cluster no script can write both: a register adds the id after its
//! script, a delete removes it before its own. Whatever the interleaving
//! of a register and a delete of one pool, the pool is then listed
//! whenever it exists at the end: its last register's add follows every
//! earlier step of the pool. An id left in the index without its pool (a
//! delete's script that failed after the removal is repeated by the user;
//! a register that failed after its script left the pool unlisted until
//! its retry) is skipped, and removed, by the listing that finds it.
//!
//! Pools made by a build without the index enter it once, at the first
//! connect to one server that finds the index's marker missing
//! ([`index_existing`]). On a cluster they enter it when registered again.

use futures_util::future::join_all;
use redis::aio::ConnectionLike;
use semaphore_core::store::Store;
use semaphore_core::{Error, PoolId, PoolState, Result};

use crate::RedisStore;
use crate::error::storage;

/// The index's key under `prefix`.
fn index_key(prefix: &str) -> String {
    format!("{prefix}:pools")
}

/// Adds every pool under `prefix` to the index, once per server: if the
/// marker `PREFIX:pools:indexed` is missing, a `SCAN` finds each pool's
/// `pool` key, its id is added, and the marker is set. A pool registered
/// or deleted meanwhile adds or removes itself; an id added for a pool
/// deleted meanwhile is skipped by the listing. One server only: on a
/// cluster each master holds its own keys (see the module's docs).
pub(crate) async fn index_existing(
    connection: &mut impl ConnectionLike,
    prefix: &str,
) -> redis::RedisResult<()> {
    let marker = format!("{prefix}:pools:indexed");
    let indexed: bool = redis::cmd("EXISTS")
        .arg(&marker)
        .query_async(connection)
        .await?;
    if indexed {
        return Ok(());
    }
    let escaped: String = prefix
        .chars()
        .flat_map(|c| match c {
            '*' | '?' | '[' | ']' | '\\' => vec!['\\', c],
            c => vec![c],
        })
        .collect();
    let pattern = format!("{escaped}:{{*}}:pool");
    let mut cursor = 0u64;
    loop {
        let (next, keys): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(&pattern)
            .arg("COUNT")
            .arg(1000)
            .query_async(connection)
            .await?;
        let ids: Vec<&str> = keys
            .iter()
            .filter_map(|k| {
                k.strip_prefix(prefix)?
                    .strip_prefix(":{")?
                    .strip_suffix("}:pool")
            })
            .filter(|id| id.parse::<uuid::Uuid>().is_ok())
            .collect();
        if !ids.is_empty() {
            let mut add = redis::cmd("ZADD");
            add.arg(index_key(prefix));
            for id in ids {
                add.arg(0).arg(id);
            }
            let _: redis::Value = add.query_async(connection).await?;
        }
        if next == 0 {
            break;
        }
        cursor = next;
    }
    redis::cmd("SET")
        .arg(&marker)
        .arg(1)
        .query_async(connection)
        .await
}

impl RedisStore {
    /// The index's key.
    fn index(&self) -> String {
        index_key(self.prefix())
    }

    /// Adds (`true`) or removes pool `pool`'s id in the index.
    pub(crate) async fn index_pool(
        &self,
        operation: &'static str,
        pool: PoolId,
        listed: bool,
    ) -> Result<()> {
        self.process.check(operation)?;
        if tokio::runtime::Handle::try_current().is_err() {
            return Err(Error::NoRuntime { operation });
        }
        let mut cmd = redis::cmd(if listed { "ZADD" } else { "ZREM" });
        cmd.arg(self.index());
        if listed {
            cmd.arg(0);
        }
        cmd.arg(pool.as_uuid().hyphenated().to_string());
        let _: redis::Value = cmd
            .query_async(&mut self.connection().clone())
            .await
            .map_err(storage(operation))?;
        Ok(())
    }

    /// At most `limit` pools from id `start` on (inclusive), each as
    /// `inspect` states it: one range read of the index, then every
    /// pool's `inspect` at once (on one connection, pipelined; on a
    /// cluster, to each pool's node). Ids whose pool is gone are removed
    /// and more are read in their stead.
    pub(crate) async fn page(&self, start: PoolId, limit: u32) -> Result<Vec<PoolState>> {
        let mut page = Vec::new();
        let mut from = format!("[{}", start.as_uuid().hyphenated());
        while page.len() < limit as usize {
            let wanted = limit as usize - page.len();
            let ids: Vec<String> = redis::cmd("ZRANGE")
                .arg(self.index())
                .arg(&from)
                .arg("+")
                .arg("BYLEX")
                .arg("LIMIT")
                .arg(0)
                .arg(wanted)
                .query_async(&mut self.connection().clone())
                .await
                .map_err(storage("pools"))?;
            let Some(last) = ids.last() else { break };
            from = format!("({last}");
            let pools: Vec<PoolId> = ids
                .iter()
                .filter_map(|id| id.parse::<uuid::Uuid>().ok().map(PoolId::from_uuid))
                .collect();
            for (pool, state) in pools
                .iter()
                .zip(join_all(pools.iter().map(|p| self.inspect(*p))).await)
            {
                match state {
                    Ok(state) => page.push(state),
                    Err(Error::PoolNotFound { .. }) => {
                        self.index_pool("pools", *pool, false).await?
                    }
                    Err(e) => return Err(e),
                }
            }
            if ids.len() < wanted {
                break;
            }
        }
        Ok(page)
    }
}
