//! The store's watch: every change to its keys, from any process, wakes
//! the waiters of the pool it belongs to (a session's end wakes all); a
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

use etcd_client::{Client, EventType, WatchOptions};
use semaphore_core::store::Changes;
use semaphore_core::{Session, SessionId};

use crate::record::{Keys, id_of};

/// How often waiters look again while nothing wakes them (test mode).
const TICK: Duration = Duration::from_secs(1);

/// The revisions of this handle's latest refusals' writes (a head's place
/// written, nothing else): their events wake none of its waiters. Such a
/// write changed nothing its own look had not judged (its compares held),
/// so the head that wrote it, woken, would only look again and be refused
/// again. An event that outruns its write's answer still wakes.
#[derive(Debug, Default)]
pub(crate) struct Quiet(parking_lot::Mutex<std::collections::VecDeque<i64>>);

impl Quiet {
    /// How many revisions are kept: more than the heads that write at once.
    const KEPT: usize = 64;

    /// Counts revision `at` as a refusal's write of this handle.
    pub(crate) fn wrote(&self, at: i64) {
        let mut kept = self.0.lock();
        if kept.len() == Self::KEPT {
            kept.pop_front();
        }
        kept.push_back(at);
    }

    fn is_quiet(&self, at: i64) -> bool {
        self.0.lock().contains(&at)
    }
}

/// Starts the watch on a task of its own; its handle aborts it.
pub(crate) fn start(
    client: Client,
    keys: Keys,
    changes: Arc<Changes>,
    session: Weak<Session>,
    quiet: Arc<Quiet>,
    ticks: bool,
) -> tokio::task::AbortHandle {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(TICK);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut failures = 0u32;
        // The revision to watch from: past the last event seen, so that a
        // watch opened again misses nothing etcd still has.
        let mut next: Option<i64> = None;
        loop {
            let mut watch = client.watch_client();
            let mut options = WatchOptions::new().with_prefix();
            if let Some(revision) = next {
                options = options.with_start_revision(revision);
            }
            let opened = watch.watch(keys.all(), Some(options)).await;
            let Ok((_watcher, mut stream)) = opened else {
                failures = failures.saturating_add(1);
                changes.notify_all();
                let pause = Duration::from_millis(100 * u64::from(failures.min(20)));
                tokio::time::sleep(pause).await;
                continue;
            };
            // Anything missed while the watch was down: every waiter looks,
            // and this handle's session is looked for.
            changes.notify_all();
            if next.is_none() {
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
                        for event in response.events() {
                            let Some(kv) = event.kv() else { continue };
                            next = Some(kv.mod_revision().saturating_add(1));
                            if let Some(pool) = keys.pool_of(kv.key()) {
                                if !quiet.is_quiet(kv.mod_revision()) {
                                    changes.notify(pool);
                                }
                                continue;
                            }
                            if event.event_type() == EventType::Delete {
                                ended(&keys, kv.key(), &session);
                            }
                            changes.notify_all();
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
