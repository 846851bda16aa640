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

use etcd_client::{Client, Compare, CompareOp, PutOptions, Txn, TxnOp, TxnOpResponse};
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
    /// Each session's keep-alive stream, with the etcd lease it keeps,
    /// between beats: taken out while a beat uses it and put back only
    /// once the answer to that beat's keep-alive was read, so that a beat
    /// given up on midway drops its stream, and no beat reads another's
    /// answer.
    pub(crate) streams: parking_lot::Mutex<HashMap<SessionId, (i64, KeepAlive)>>,
}

/// A keep-alive stream of one etcd lease: its sender and its answers.
pub(crate) type KeepAlive = (etcd_client::LeaseKeeper, etcd_client::LeaseKeepAliveStream);

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

impl Beats {
    /// Whether a keep-alive answered in raft term `term` renewed session
    /// `id`'s etcd lease on the cluster's leader: a linearizable read of
    /// the session's key (which only a leader a quorum follows can serve)
    /// must find the key, in that same term. etcd answers a keep-alive
    /// from its leader's memory, without the quorum; a leader that lost
    /// its place (paused, or cut off before it steps down) answers for a
    /// renewal the real leader never sees, which would leave this
    /// process's count of the session's end behind etcd's (seen by the
    /// fault suite on three members: a lease taken over 1.3 s before its
    /// holder was told). `false` if the key is gone (the session ended);
    /// a retryable error if the term moved on (the beat is tried again).
    async fn confirm(&self, id: SessionId, term: u64, etcd_lease: i64) -> Result<bool> {
        let mut kv = self.client.kv_client();
        let found = kv
            .get(self.keys.session(id), None)
            .await
            .map_err(storage(OPERATION))?;
        let Some(record) = found.kvs().first() else {
            return Ok(false);
        };
        if record.lease() != etcd_lease {
            // Kept alive is not what keeps the key: the key's lease is
            // kept from now on, and this beat counts for nothing.
            self.leases.lock().insert(id, record.lease());
            return Err(semaphore_core::Error::Storage {
                operation: OPERATION,
                retryable: true,
                source: "the session's key was on another etcd lease than the one kept alive"
                    .into(),
            });
        }
        let now = found.header().map_or(0, |h| h.raft_term());
        if now != term {
            return Err(semaphore_core::Error::Storage {
                operation: OPERATION,
                retryable: true,
                source: format!(
                    "the keep-alive was answered in raft term {term}, the cluster is in term \
                     {now}: a leader that had lost its place may have answered it"
                )
                .into(),
            });
        }
        Ok(true)
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
            Some(etcd_lease) => match self.keep_alive(&mut lease, id, etcd_lease).await {
                Ok((ttl, term)) if ttl > 0 => {
                    self.confirm(id, term, etcd_lease).await.map(|live| {
                        if !live {
                            self.forget(id);
                        }
                        live.then_some(sent)
                    })
                }
                // Revoked (an operator, or the cluster lost it) or lapsed.
                Ok(_) => {
                    self.forget(id);
                    Ok(None)
                }
                Err(e) if lease_not_found(&e) => {
                    self.forget(id);
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
                // Created only if absent: a first try of this open whose
                // put arrives late (its answer was given up on) must not
                // move the key to an etcd lease no one keeps alive (the
                // fault suite saw that end a live session). A key already
                // there is a first try's that landed: its lease is kept.
                let key = self.keys.session(id);
                let txn = Txn::new()
                    .when([Compare::create_revision(key.clone(), CompareOp::Equal, 0)])
                    .and_then([TxnOp::put(
                        key.clone(),
                        encode(&rec),
                        Some(PutOptions::new().with_lease(granted.id())),
                    )])
                    .or_else([TxnOp::get(key, None)]);
                let answer = self
                    .client
                    .kv_client()
                    .txn(txn)
                    .await
                    .map_err(storage(OPERATION))?;
                let kept = if answer.succeeded() {
                    granted.id()
                } else {
                    let _ = lease.revoke(granted.id()).await;
                    match answer.op_responses().into_iter().next() {
                        Some(TxnOpResponse::Get(get)) => {
                            get.kvs().first().map_or(0, |kv| kv.lease())
                        }
                        _ => 0,
                    }
                };
                if kept == 0 {
                    return Ok(None);
                }
                self.leases.lock().insert(id, kept);
                Ok(Some(sent))
            }
            None => Ok(None),
        }
    }

    async fn close(&self, id: SessionId) -> Result<()> {
        self.streams.lock().remove(&id);
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

impl Beats {
    /// Forgets session `id`'s etcd lease and its stream: the session ended.
    fn forget(&self, id: SessionId) {
        self.leases.lock().remove(&id);
        self.streams.lock().remove(&id);
    }

    /// A keep-alive of session `id`'s `etcd_lease`: the TTL etcd renewed
    /// it for, and the raft term of the answer. Sent on the session's
    /// stream if it has one; else on a new one, for which etcd-client
    /// sends one keep-alive as it opens it (an unknown lease fails there:
    /// [`lease_not_found`]) and hides its answer, so that the second is
    /// the one whose header is read.
    async fn keep_alive(
        &self,
        lease: &mut etcd_client::LeaseClient,
        id: SessionId,
        etcd_lease: i64,
    ) -> std::result::Result<(i64, u64), etcd_client::Error> {
        let kept = self.streams.lock().remove(&id);
        let (mut keeper, mut stream) = match kept {
            Some((kept_lease, stream)) if kept_lease == etcd_lease => stream,
            _ => lease.keep_alive(etcd_lease).await?,
        };
        keeper.keep_alive().await?;
        match stream.message().await? {
            Some(renewed) => {
                let answer = (renewed.ttl(), renewed.header().map_or(0, |h| h.raft_term()));
                if answer.0 > 0 {
                    self.streams
                        .lock()
                        .insert(id, (etcd_lease, (keeper, stream)));
                }
                Ok(answer)
            }
            None => Err(etcd_client::Error::LeaseKeepAliveError(
                "etcd closed the keep-alive stream without an answer".into(),
            )),
        }
    }
}

/// Whether etcd answered that it has no such lease (gRPC `NOT_FOUND`,
/// "requested lease not found"): revoked or lapsed, for good.
pub(crate) fn lease_not_found(e: &etcd_client::Error) -> bool {
    match e {
        etcd_client::Error::GRpcStatus(status) => status.code() as i32 == 5,
        // etcd answers a keep-alive of a lease it does not have with TTL
        // 0, which etcd-client turns into this error.
        etcd_client::Error::LeaseKeepAliveError(message) => message == "lease not found",
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::TestCluster;

    /// A beat of a session whose etcd lease an operator revoked answers
    /// that it ended (`None`), not an error to retry: the holder is told
    /// at its next beat even if the watch missed the key's delete.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_beat_of_a_revoked_session_reads_as_ended() {
        let client = Client::connect(TestCluster::shared().endpoints(), None)
            .await
            .unwrap();
        let beats = Beats {
            client: client.clone(),
            keys: Keys::new(&TestCluster::fresh_prefix()),
            time: DecidingClock::default(),
            leases: parking_lot::Mutex::new(HashMap::new()),
            streams: parking_lot::Mutex::new(HashMap::new()),
        };
        let id = SessionId::new();
        let timeout = Duration::from_secs(5);
        assert!(beats.beat(id, timeout, true).await.unwrap().is_some());
        assert!(beats.beat(id, timeout, false).await.unwrap().is_some());
        let etcd_lease = *beats.leases.lock().get(&id).unwrap();
        client.lease_client().revoke(etcd_lease).await.unwrap();
        assert_eq!(beats.beat(id, timeout, false).await.unwrap(), None);
    }
}
