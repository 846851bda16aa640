//! What a primitive on a cluster does first on its pool's hash slot, and
//! after a `register` (nothing on one server): the session's end kept
//! there, the slot's channel listened to, the run key replicated.

use semaphore_core::Result;

impl crate::RedisStore {
    /// Before a borrow on `pool`'s hash slot: the session (if the borrow
    /// binds to one) keeps its end there, and, if the borrow may wait, the
    /// store listens to the slot's channel and learns its link's id there.
    /// `false` if the slot's session key says the session has ended.
    ///
    /// # Errors
    /// [`Error::Storage`] if the node failed to keep the session's end.
    pub(crate) async fn ready(
        &self,
        pool: semaphore_core::PoolId,
        request: &semaphore_core::store::BorrowRequest,
    ) -> Result<bool> {
        let crate::backend::Wake::Cluster(listener, links) = &self.wake else {
            return Ok(true);
        };
        let slot = self.hash_slot(pool);
        if request.waiter.is_some() {
            // Not listening yet (the node did not confirm) loses no
            // wake-up for good: the fallback poll looks, and the next
            // waiting borrow on the slot subscribes again.
            let _ = listener.listen(slot).await;
            links.learn(&self.connection, slot).await;
        }
        match request.session {
            Some(session) => self.beats.join(session, slot).await,
            None => Ok(true),
        }
    }

    /// After a `register` that wrote the run key of `pool`'s slot: if the
    /// slot's master has a replica, waits (`WAIT`, up to 1 s) until one has
    /// the key, so that a failover cannot lose it while the slot's grants
    /// survive (rule "Restart grace, for every loss of state").
    pub(crate) async fn replicated(&self, pool: semaphore_core::PoolId) {
        if !self.is_cluster() {
            return;
        }
        let slot = self.hash_slot(pool);
        let mut info = redis::cmd("INFO");
        info.arg("replication");
        let text = self.connection.on_slot(info, slot).await.ok();
        let replicas = text
            .and_then(|v| <String as redis::FromRedisValue>::from_redis_value(v).ok())
            .and_then(|text| {
                text.lines()
                    .find_map(|l| l.strip_prefix("connected_slaves:"))
                    .and_then(|n| n.trim().parse::<u32>().ok())
            })
            .unwrap_or(0);
        if replicas == 0 {
            return;
        }
        let mut wait = redis::cmd("WAIT");
        wait.arg(1).arg(1000);
        let _ = self.connection.on_slot(wait, slot).await;
    }
}
