//! [`Bound`]: one pool's answers in place, which a `Pool` handle keeps
//! ([`InPlace::bind`]) so that its borrows and returns lock the pool
//! without looking it up in the store's map (nor touching the map's lock,
//! which every thread shares).

use std::sync::Arc;

use semaphore_core::store::{BorrowRequest, InPlace, TryBorrow};
use semaphore_core::{Error, Lease, PoolId, Result};

use crate::steps::{Pools, Shard, Shared};

/// The entry of one pool in a memory store, kept. A delete leaves the
/// entry in the map (its slots `None`) while a handle keeps it, and a
/// register of the same id fills it again, so that what a handle keeps
/// stays the pool's; the last handle to let go of a deleted pool's entry
/// takes it out of the map.
#[derive(Debug)]
pub(crate) struct Bound {
    pub(crate) pool: PoolId,
    /// Always `Some` until dropped.
    pub(crate) shard: Option<Arc<Shard>>,
    pub(crate) pools: Arc<Pools>,
    pub(crate) shared: Arc<Shared>,
}

impl Bound {
    fn shard(&self) -> &Shard {
        self.shard.as_deref().expect("kept until dropped")
    }
}

impl InPlace for Bound {
    fn try_borrow(&self, request: &BorrowRequest) -> Result<TryBorrow> {
        if request.pool != self.pool {
            return Err(not_this_pool("borrow", request.pool));
        }
        let now = self.shared.now();
        match self.shard().lock().as_mut() {
            Some(table) => self.shared.borrow(table, request, now),
            None => Err(Error::PoolNotFound { pool: self.pool }),
        }
    }

    fn return_held(&self, lease: &Lease) -> Result<bool> {
        if lease.pool != self.pool {
            return Err(not_this_pool("return", lease.pool));
        }
        let now = self.shared.now();
        Ok(match self.shard().lock().as_mut() {
            Some(table) => {
                self.shared
                    .give_back(table, self.pool, lease.id, Some(lease.position), now)
            }
            None => false,
        })
    }

    /// None: these are one pool's answers already.
    fn bind(&self, _pool: PoolId) -> Option<Arc<dyn InPlace>> {
        None
    }
}

/// A call for another pool than the one bound: a bug of the caller.
fn not_this_pool(operation: &'static str, pool: PoolId) -> Error {
    Error::Storage {
        operation,
        retryable: false,
        source: format!("the in-place answers of one pool were asked about pool {pool}").into(),
    }
}

impl Drop for Bound {
    fn drop(&mut self) {
        let Some(shard) = self.shard.take() else {
            return;
        };
        let ours = Arc::as_ptr(&shard);
        drop(shard);
        // Only a deleted pool's entry kept for handles goes, by the last
        // of them: nobody else holds it (a lookup clones it only under
        // the map's lock, held here).
        let mut pools = self.pools.write();
        if let Some(kept) = pools.get(&self.pool)
            && std::ptr::eq(Arc::as_ptr(kept), ours)
            && Arc::strong_count(kept) == 1
            && kept.lock().is_none()
        {
            pools.remove(&self.pool);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use semaphore_core::store::Store;
    use semaphore_core::{Error, Pool, PoolId};

    use crate::MemoryStore;

    const TTL: Duration = Duration::from_secs(30);

    /// A handle that keeps its pool's entry sees the pool deleted, sees it
    /// registered again (with its count, not the old leases), and the last
    /// such handle to go takes a deleted pool's entry out of the map.
    #[tokio::test]
    async fn a_kept_entry_follows_delete_and_register_and_goes_with_the_last_handle() {
        let store = Arc::new(MemoryStore::new());
        let id = PoolId::from_name("kept");
        let pool = Pool::new(store.clone(), id);
        let other = pool.clone();
        pool.register(2).await.unwrap();
        let held = pool.try_borrow(TTL).await.unwrap().forget();
        assert_eq!(held.position, 0);
        assert!(pool.delete().await.unwrap());
        assert!(matches!(
            pool.try_borrow(TTL).await,
            Err(Error::PoolNotFound { .. })
        ));
        assert!(!pool.return_lease(held.id).await.unwrap());
        pool.register(1).await.unwrap();
        let again = other.try_borrow(TTL).await.unwrap();
        assert_eq!(again.position, 0, "the new pool's slots, not the old");
        assert!(matches!(
            pool.try_borrow(TTL).await,
            Err(Error::Exhausted { .. })
        ));
        drop(again);
        assert_eq!(pool.inspect().await.unwrap().in_use, 0);
        assert!(pool.delete().await.unwrap());
        assert_eq!(store.entries(), 1, "kept while handles use it");
        drop((pool, other));
        assert_eq!(store.entries(), 0, "gone with the last handle");
        // A pool deleted with no handle keeping it goes at once.
        let pool = Pool::new(store.clone(), PoolId::from_name("unkept"));
        pool.register(1).await.unwrap();
        assert!(store.delete(pool.id()).await.unwrap());
        assert_eq!(store.entries(), 0);
    }
}
