//! The store's watch: a change to a pool's keys, from any process, wakes
//! that pool's head here if it can let it in (see `standing`), and a
//! session's end the heads it may let in (those the leases it bound held
//! back, and those with no standing); a
//! watch that breaks is opened again, and everyone re-checks. The end of
//! this handle's own session (an operator revoked its etcd lease) is told
//! to the session at once, so that its holders learn it before anyone
//! else can take their slots' turn (R17). In test mode, while anyone
//! waits, a tick each second has them look again, which keeps their
//! places alive (they lapse 4.5 s after a look on the test's clock); in
//! production places live with the handle's places lease (see `places`),
//! and only the watch's events wake a waiter.

use std::sync::{Arc, Weak};
use std::time::Duration;

use etcd_client::{Client, EventType, KeyValue, WatchOptions};
use semaphore_core::store::Changes;
use semaphore_core::{Session, SessionId};

use crate::record::{Keys, LeaseRec, decode, id_of};
use crate::standing::{Change, Held, Standings, What};

/// How often waiters look again while nothing wakes them (test mode).
const TICK: Duration = Duration::from_secs(1);

/// Starts the watch on a task of its own; its handle aborts it.
pub(crate) fn start(
    client: Client,
    keys: Keys,
    changes: Arc<Changes>,
    session: Weak<Session>,
    standings: Arc<Standings>,
    ticks: bool,
) -> tokio::task::AbortHandle {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(TICK);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut failures = 0u32;
        // The revision to watch from: past the last event seen, so that a
        // watch opened again misses nothing etcd still has.
        let mut next: Option<i64> = None;
        // Whether this handle's session is to be looked for: at first,
        // and after a watch opened from the present.
        let mut recheck_due = true;
        loop {
            if next.is_none() {
                // Opened from the present, read first: what came before
                // it is not all seen.
                standings.blind_until(i64::MAX);
                recheck_due = true;
                let Some(now) = revision(&client, &keys).await else {
                    failures = failures.saturating_add(1);
                    changes.notify_all();
                    tokio::time::sleep(backoff(failures)).await;
                    continue;
                };
                standings.blind_until(now);
                next = Some(now.saturating_add(1));
            }
            let options = WatchOptions::new()
                .with_prefix()
                .with_start_revision(next.unwrap_or_default());
            let opened = client.watch_client().watch(keys.all(), Some(options)).await;
            let Ok((_watcher, mut stream)) = opened else {
                failures = failures.saturating_add(1);
                changes.notify_all();
                tokio::time::sleep(backoff(failures)).await;
                continue;
            };
            // Anything missed while the watch was down: every waiter looks,
            // and this handle's session is looked for.
            changes.notify_all();
            if recheck_due {
                recheck_due = false;
                recheck(&client, &keys, &session).await;
            }
            loop {
                tokio::select! {
                    message = stream.message() => {
                        let Ok(Some(response)) = message else { break };
                        if response.canceled() || response.compact_revision() > 0 {
                            // Cancelled by etcd, or asked for history it
                            // compacted: opened again from now.
                            next = None;
                            break;
                        }
                        failures = 0;
                        let mut pooled = Vec::new();
                        for event in response.events() {
                            let Some(kv) = event.kv() else { continue };
                            next = Some(kv.mod_revision().saturating_add(1));
                            if let Some(change) = change_of(&keys, event.event_type(), kv) {
                                pooled.push(change);
                                continue;
                            }
                            // A session's end frees the leases it bound
                            // (a session that opens frees nothing).
                            if event.event_type() == EventType::Delete {
                                ended(&keys, kv.key(), &session);
                                pooled.push(Change {
                                    revision: kv.mod_revision(),
                                    pool: None,
                                    what: What::SessionGone {
                                        id: id_of(kv.key()).unwrap_or_default(),
                                    },
                                });
                            }
                        }
                        let (pools, session_gone) = standings.changed(&pooled);
                        if session_gone {
                            changes.notify_where(|pool| {
                                !standings.stands(pool) || pools.contains(&pool)
                            });
                        } else {
                            for pool in pools {
                                changes.notify(pool);
                            }
                        }
                    }
                    _ = tick.tick(), if ticks => {
                        if changes.has_waiters() {
                            changes.notify_all();
                        }
                    }
                }
            }
            failures = failures.saturating_add(1);
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .abort_handle()
}

/// The pause before the watch is opened again after `failures` failures
/// in a row: 100 ms more each time, 2 s at most.
fn backoff(failures: u32) -> Duration {
    Duration::from_millis(100 * u64::from(failures.min(20)))
}

/// The store's revision now; `None` if etcd does not answer.
async fn revision(client: &Client, keys: &Keys) -> Option<i64> {
    let options = etcd_client::GetOptions::new().with_count_only();
    let mut kv = client.kv_client();
    let read = kv.get(keys.all(), Some(options)).await.ok()?;
    read.header().map(|h| h.revision())
}

/// The change `kv` (written, or deleted by `kind`) makes to its pool;
/// `None` for a key of no pool.
fn change_of(keys: &Keys, kind: EventType, kv: &KeyValue) -> Option<Change> {
    let (family, pool) = keys.kind_of(kv.key())?;
    let gone = kind == EventType::Delete;
    let id = || id_of(kv.key()).unwrap_or_default();
    let what = match family {
        b'l' if gone => What::LeaseGone { id: id() },
        b'l' => What::Lease {
            id: id(),
            held: decode::<LeaseRec>(kv.value()).map(|rec| Held::of(&rec)),
            new: kv.version() == 1,
        },
        b'q' if gone => What::PlaceGone { id: id() },
        b'q' => What::Place,
        _ => What::Pool,
    };
    Some(Change {
        revision: kv.mod_revision(),
        pool: Some(pool),
        what,
    })
}

/// Looks for this handle's open session's key: gone (its end deleted it
/// while no watch saw), the session is told.
async fn recheck(client: &Client, keys: &Keys, session: &Weak<Session>) {
    let Some(id) = session.upgrade().and_then(|s| s.current()) else {
        return;
    };
    let key = keys.session(id);
    let mut kv = client.kv_client();
    if let Ok(found) = kv.get(key.clone(), None).await
        && found.kvs().is_empty()
    {
        ended(keys, key.as_bytes(), session);
    }
}

/// Tells the handle's session that its key `key` was deleted, if it is the
/// open session's.
fn ended(keys: &Keys, key: &[u8], session: &Weak<Session>) {
    if !key.starts_with(keys.sessions().as_bytes()) {
        return;
    }
    let (Some(id), Some(session)) = (id_of(key), session.upgrade()) else {
        return;
    };
    let id = SessionId::from_uuid(id);
    if session.current() == Some(id) {
        session.ended_on_store(id);
    }
}
