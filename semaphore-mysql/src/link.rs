//! The store's background: its link, the connection whose named lock marks
//! this process's queued places as alive, and the poll that wakes its
//! waiters (MySQL has no LISTEN/NOTIFY).
//!
//! The link is a connection of the store's own that takes a named lock
//! (`GET_LOCK('semaphore_holder_<uuid>', 0)`) and keeps it, idle but
//! pinged every second; each queued place of this process names that uuid.
//! The server releases a named lock when its connection ends, however it
//! ends (the process killed, the connection killed, the server restarted),
//! so a place whose lock is free (`IS_FREE_LOCK`) is a gone process's and
//! holds back no one. No privilege is needed, and a lock name is never
//! reused: a reconnected link takes a new uuid. Leases are bound to
//! sessions, not to the link (see `session`).

use std::sync::Arc;
use std::time::Duration;

use mysql_async::prelude::Queryable;
use mysql_async::{Conn, Opts};
use parking_lot::Mutex;
use semaphore_core::store::{Changes, DecidingClock};
use tokio::task::AbortHandle;

/// How often the link's connection is pinged.
const PING: Duration = Duration::from_secs(1);

/// A link: the uuid in its named lock.
pub(crate) type LinkId = uuid::Uuid;

/// The lock a link keeps: the name `IS_FREE_LOCK` is asked about in
/// the statements (`primitives::GONE` builds it the same way).
pub(crate) fn lock_name(id: &LinkId) -> String {
    format!("semaphore_holder_{}", id.simple())
}

/// What the store and its background tasks share.
#[derive(Debug, Default)]
pub(crate) struct Link {
    /// The link, while its connection holds the lock.
    pub(crate) id: Mutex<Option<LinkId>>,
}

impl Link {
    /// The link a queued place names, `None` while there is none (a place
    /// taken then lives by its heartbeat).
    pub(crate) fn current(&self) -> Option<LinkId> {
        *self.id.lock()
    }
}

/// Background tasks, stopped when dropped (with the store).
#[derive(Debug)]
pub(crate) struct Background(Vec<AbortHandle>);

impl Drop for Background {
    fn drop(&mut self) {
        for task in &self.0 {
            task.abort();
        }
    }
}

/// Starts the link's connection and the waiters' poll.
pub(crate) fn spawn(
    opts: Opts,
    link: Arc<Link>,
    changes: Arc<Changes>,
    time: DecidingClock,
    poll: Duration,
) -> Background {
    let hold = tokio::spawn(hold(opts, link, time));
    let wake = tokio::spawn(async move {
        let mut tick = tokio::time::interval(poll);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            // Another process's return tells nobody here: every head looks.
            if changes.has_waiters() {
                changes.notify_all();
            }
        }
    });
    Background(vec![hold.abort_handle(), wake.abort_handle()])
}

/// Keeps the link's connection up with its lock, and measures the
/// server's clock with it.
async fn hold(opts: Opts, link: Arc<Link>, time: DecidingClock) {
    loop {
        if let Ok(mut conn) = Conn::new(opts.clone()).await {
            let id = uuid::Uuid::new_v4();
            let locked: mysql_async::Result<Option<Option<i64>>> = conn
                .exec_first("SELECT GET_LOCK(?, 0)", (lock_name(&id),))
                .await;
            if let Ok(Some(Some(1))) = locked {
                *link.id.lock() = Some(id);
                let mut pings = 0u32;
                loop {
                    if pings.is_multiple_of(30) {
                        measure(&mut conn, &time).await;
                    }
                    pings = pings.wrapping_add(1);
                    tokio::time::sleep(PING).await;
                    if conn.ping().await.is_err() {
                        break;
                    }
                }
                *link.id.lock() = None;
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Feeds one reading of the server's clock to this process's view of it.
pub(crate) async fn measure(conn: &mut Conn, time: &DecidingClock) {
    let Some(view) = time.server() else {
        return;
    };
    let before = view.local().now();
    let reading: mysql_async::Result<Option<i64>> = conn
        .query_first("SELECT CAST(UNIX_TIMESTAMP(SYSDATE(3)) * 1000 AS SIGNED)")
        .await;
    let after = view.local().now();
    if let Ok(Some(ms)) = reading {
        view.observe(before, ms, after);
    }
}
