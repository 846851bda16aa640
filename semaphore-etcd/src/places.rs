//! The etcd lease a store handle's queued heads hang their places on (in
//! production): one per handle, granted when its first head joins a
//! queue, kept alive on one keep-alive stream each [`BEAT`] while any of
//! the handle's borrowers waits, and left to lapse once none does. A
//! waiting head then costs nothing a second but its share of one
//! keep-alive: no look and no write keep its place, and etcd deletes the
//! place [`TTL_SECONDS`] after its process stopped beating (died, stopped,
//! cut off), within the 4.5 s a place outlives its last look elsewhere
//! ([`WAITER_TTL`](semaphore_core::store::WAITER_TTL)). The delete's watch
//! event wakes the heads behind it.
//!
//! A lease found lost (etcd answers it has none: it lapsed during a stop
//! or a partition, or an operator revoked it) is forgotten, and every
//! waiter of the handle looks again: a head whose place went with it
//! joins anew, one whose place survives is written onto the next lease.
//! Etcd's concurrency package keeps its sessions this way (one lease, a
//! keep-alive at a third of its TTL; here at three eighths, which leaves
//! 2.5 s, a beat missed and then some, before a place is lost).

use std::sync::Arc;
use std::time::Duration;

use semaphore_core::Result;
use semaphore_core::store::{Changes, bounded};

use crate::error::storage;

/// The places lease's TTL, in seconds: etcd deletes a place this long
/// after its process's last keep-alive (etcd's leader judges; it looks
/// every 500 ms).
pub(crate) const TTL_SECONDS: i64 = 4;

/// How often the places lease is kept alive.
const BEAT: Duration = Duration::from_millis(1500);

/// The handle's places lease, if it has one, and the task that keeps it.
#[derive(Debug, Default)]
pub(crate) struct Places(parking_lot::Mutex<Option<Kept>>);

#[derive(Debug)]
struct Kept {
    id: i64,
    keeper: tokio::task::AbortHandle,
}

impl Drop for Places {
    fn drop(&mut self) {
        if let Some(kept) = self.0.lock().take() {
            kept.keeper.abort();
        }
    }
}

impl Places {
    /// The lease a place joins on: the one kept now, else a new one
    /// (granted, its keeper started).
    ///
    /// # Errors
    /// [`Error::Storage`](semaphore_core::Error::Storage), retryable, if
    /// etcd did not grant a lease in time.
    pub(crate) async fn lease(
        self: &Arc<Self>,
        operation: &'static str,
        client: &etcd_client::Client,
        changes: &Arc<Changes>,
    ) -> Result<i64> {
        if let Some(kept) = self.0.lock().as_ref() {
            return Ok(kept.id);
        }
        let mut leases = client.lease_client();
        let granted = bounded(operation, async {
            leases
                .grant(TTL_SECONDS, None)
                .await
                .map_err(storage(operation))
        })
        .await?;
        let mut kept = self.0.lock();
        if let Some(other) = kept.as_ref() {
            // Another head's grant came first: this one lapses unused.
            return Ok(other.id);
        }
        let id = granted.id();
        let keeper = tokio::spawn(keep(
            Arc::downgrade(self),
            client.clone(),
            Arc::downgrade(changes),
            id,
        ))
        .abort_handle();
        *kept = Some(Kept { id, keeper });
        Ok(id)
    }

    /// Forgets lease `id` if it is the one kept; `true` if it was.
    fn forget(&self, id: i64) -> bool {
        let mut kept = self.0.lock();
        if kept.as_ref().is_some_and(|k| k.id == id) {
            *kept = None;
            return true;
        }
        false
    }
}

/// Keeps lease `id` alive each [`BEAT`] while any borrower of the handle
/// waits; ends when none does (the lease lapses by itself), when etcd
/// says the lease is gone (every waiter looks again), or when the handle
/// is dropped.
async fn keep(
    places: std::sync::Weak<Places>,
    client: etcd_client::Client,
    changes: std::sync::Weak<Changes>,
    id: i64,
) {
    let mut beat = tokio::time::interval(BEAT);
    beat.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // The first tick is at once: the grant is fresh.
    beat.tick().await;
    let mut stream = None;
    loop {
        beat.tick().await;
        let (Some(places), Some(changes)) = (places.upgrade(), changes.upgrade()) else {
            return;
        };
        {
            // Under the lock a joining head reads the lease by: a head
            // counted as waiting before it asked finds it kept.
            let mut kept = places.0.lock();
            if kept.as_ref().is_none_or(|k| k.id != id) {
                return;
            }
            if !changes.has_waiters() {
                *kept = None;
                return;
            }
        }
        match tokio::time::timeout(BEAT, renew(&client, id, &mut stream)).await {
            Ok(Ok(true)) => {}
            Ok(Ok(false)) => {
                if places.forget(id) {
                    changes.notify_all();
                }
                return;
            }
            // Unanswered or broken: the stream is opened again next beat.
            Ok(Err(_)) | Err(_) => stream = None,
        }
    }
}

type Stream = (etcd_client::LeaseKeeper, etcd_client::LeaseKeepAliveStream);

/// One keep-alive of `id` on `stream` (opened if need be): `true` if etcd
/// renewed it, `false` if it has no such lease.
async fn renew(
    client: &etcd_client::Client,
    id: i64,
    stream: &mut Option<Stream>,
) -> std::result::Result<bool, etcd_client::Error> {
    if stream.is_none() {
        // Opening the stream sends a keep-alive whose answer etcd-client
        // reads itself: an unknown lease fails here.
        match client.lease_client().keep_alive(id).await {
            Ok(opened) => {
                *stream = Some(opened);
                return Ok(true);
            }
            Err(e) if crate::session::lease_not_found(&e) => return Ok(false),
            Err(e) => return Err(e),
        }
    }
    let Some((keeper, answers)) = stream.as_mut() else {
        return Ok(true);
    };
    keeper.keep_alive().await?;
    match answers.message().await? {
        Some(renewed) => Ok(renewed.ttl() > 0),
        None => Err(etcd_client::Error::LeaseKeepAliveError(
            "etcd closed the keep-alive stream".into(),
        )),
    }
}
