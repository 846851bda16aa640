//! The store handle's session (R16) as an etcd lease: the session's key
//! `{prefix}/s/{id}` is attached to it, a beat is a keep-alive, and the
//! session ends when etcd revokes the lease (the leader's clock decides,
//! rule "etcd"). Every bound lease names its session, and is active only
//! while the session's key exists, so a process that stops beating loses
//! its slots within its session timeout, whatever its children do.
//!
//! In test mode the session's end is kept in its record and judged by the
//! test's manual clock.

use std::collections::HashMap;
use std::time::{Duration, SystemTime};

use etcd_client::{Client, PutOptions};
use semaphore_core::store::{DecidingClock, Heartbeat, async_trait, from_unix_ms, unix_ms};
use semaphore_core::{Result, SessionId};

use crate::decide::ttl_seconds;
use crate::error::storage;
use crate::record::{Keys, SessionRec, decode, encode};

const OPERATION: &str = "session";

/// The etcd half of a [`Session`](semaphore_core::Session).
pub(crate) struct Beats {
    pub(crate) client: Client,
    pub(crate) keys: Keys,
    pub(crate) time: DecidingClock,
    /// The etcd lease of each session this handle opened (production).
    pub(crate) leases: parking_lot::Mutex<HashMap<SessionId, i64>>,
}

impl std::fmt::Debug for Beats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Beats")
            .field("keys", &self.keys)
            .finish_non_exhaustive()
    }
}

impl Beats {
    /// Test mode: the session's end judged by the manual clock.
    async fn beat_manual(
        &self,
        id: SessionId,
        now: u64,
        timeout: Duration,
        open: bool,
    ) -> Result<Option<SystemTime>> {
        let key = self.keys.session(id);
        let mut kv = self.client.kv_client();
        let found = kv
            .get(key.clone(), None)
            .await
            .map_err(storage(OPERATION))?;
        let live = match found
            .kvs()
            .first()
            .and_then(|kv| decode::<SessionRec>(kv.value()))
        {
            Some(rec) if rec.end > now => true,
            Some(_) => return Ok(None),
            None if open => true,
            None => return Ok(None),
        };
        debug_assert!(live);
        let end = now.saturating_add(u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX));
        let rec = SessionRec { end, etcd_lease: 0 };
        kv.put(key, encode(&rec), None)
            .await
            .map_err(storage(OPERATION))?;
        Ok(Some(from_unix_ms(now)))
    }
}

#[async_trait]
impl Heartbeat for Beats {
    async fn beat(
        &self,
        id: SessionId,
        timeout: Duration,
        open: bool,
    ) -> Result<Option<SystemTime>> {
        if let Some(now) = self.time.now_param() {
            return self.beat_manual(id, now, timeout, open).await;
        }
        // The instant the beat is sent: the etcd lease is renewed after it,
        // so the session's end as this process counts it comes first.
        let sent = self.time.clock().now();
        let known = self.leases.lock().get(&id).copied();
        let mut lease = self.client.lease_client();
        match known {
            Some(etcd_lease) => match keep_alive(&mut lease, etcd_lease).await {
                Ok(ttl) if ttl > 0 => Ok(Some(sent)),
                // Revoked (an operator, or the cluster lost it) or lapsed.
                Ok(_) => {
                    self.leases.lock().remove(&id);
                    Ok(None)
                }
                Err(e) if lease_not_found(&e) => {
                    self.leases.lock().remove(&id);
                    Ok(None)
                }
                Err(e) => Err(storage(OPERATION)(e)),
            },
            None if open => {
                let now = unix_ms(sent);
                let until =
                    now.saturating_add(u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX));
                let granted = lease
                    .grant(ttl_seconds(now, until), None)
                    .await
                    .map_err(storage(OPERATION))?;
                let rec = SessionRec {
                    end: until,
                    etcd_lease: granted.id(),
                };
                self.client
                    .kv_client()
                    .put(
                        self.keys.session(id),
                        encode(&rec),
                        Some(PutOptions::new().with_lease(granted.id())),
                    )
                    .await
                    .map_err(storage(OPERATION))?;
                self.leases.lock().insert(id, granted.id());
                Ok(Some(sent))
            }
            None => Ok(None),
        }
    }

    async fn close(&self, id: SessionId) -> Result<()> {
        let known = self.leases.lock().remove(&id);
        match known {
            Some(etcd_lease) => {
                let revoked = self.client.lease_client().revoke(etcd_lease).await;
                match revoked {
                    Ok(_) => Ok(()),
                    // Already gone: lapsed or revoked.
                    Err(e) if lease_not_found(&e) => Ok(()),
                    Err(e) => {
                        self.leases.lock().insert(id, etcd_lease);
                        Err(storage(OPERATION)(e))
                    }
                }
            }
            None => {
                self.client
                    .kv_client()
                    .delete(self.keys.session(id), None)
                    .await
                    .map_err(storage(OPERATION))?;
                Ok(())
            }
        }
    }
}

/// One keep-alive of `etcd_lease`: the TTL etcd renewed it for (0 if it
/// has no such lease).
async fn keep_alive(
    lease: &mut etcd_client::LeaseClient,
    etcd_lease: i64,
) -> std::result::Result<i64, etcd_client::Error> {
    let (mut keeper, mut stream) = lease.keep_alive(etcd_lease).await?;
    keeper.keep_alive().await?;
    match stream.message().await? {
        Some(renewed) => Ok(renewed.ttl()),
        None => Err(etcd_client::Error::LeaseKeepAliveError(
            "etcd closed the keep-alive stream without an answer".into(),
        )),
    }
}

/// Whether etcd answered that it has no such lease (gRPC `NOT_FOUND`,
/// "requested lease not found"): revoked or lapsed, for good.
pub(crate) fn lease_not_found(e: &etcd_client::Error) -> bool {
    matches!(e, etcd_client::Error::GRpcStatus(status) if status.code() as i32 == 5)
}
