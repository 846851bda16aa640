//! The store's background: its link, the connection whose named lock marks
//! this process's queued places as alive and on which other processes ring
//! them, and the poll that wakes its waiters when no ring comes (MySQL has
//! no LISTEN/NOTIFY).
//!
//! The link is a connection of the store's own that takes a named lock
//! (`GET_LOCK('semaphore_holder_<uuid>', 0)`) and keeps it; each queued
//! place of this process names that uuid. The server releases a named lock
//! when its connection ends, however it ends (the process killed, the
//! connection killed, the server restarted), so a place whose lock is free
//! (`IS_FREE_LOCK`) is a gone process's and holds back no one. No
//! privilege is needed, and a lock name is never reused: a reconnected
//! link takes a new uuid. Leases are bound to sessions, not to the link
//! (see `session`).
//!
//! The ring: the link waits, a second at a time, for a second lock, its
//! bell (`semaphore_bell_<uuid>`), which a second connection of the
//! store's, the bell's, holds and never lets go; each wait is also the
//! link's ping. A return in another process that frees slots owed to this
//! process's heads interrupts that wait (`KILL QUERY` of the connection
//! `IS_USED_LOCK` names, `return.sql`), after its commit: an interrupted
//! wait wakes every head here, which looks at once. A ring that lands
//! between two waits is lost; the poll covers it. (A wait in
//! `SELECT SLEEP(1)` was tried first: MariaDB 10.11 stalled `KILL QUERY`
//! of a sleep, and the sleep itself, for seconds under a few concurrent
//! rings; a lock wait is interrupted at once.)
use std::sync::Arc;
use std::time::Duration;

use mysql_async::prelude::Queryable;
use mysql_async::{Conn, Opts};
use parking_lot::Mutex;
use semaphore_core::store::{Changes, DecidingClock};
use tokio::task::AbortHandle;

/// How long the client waits for a wait on the bell (or a clock reading) to
/// answer before it takes the connection for lost and opens another (a
/// new link: this process's places name the old one, and lose their turn
/// once the server frees its lock). Long, so that a stall of the network
/// costs no turn; finite, so that a connection the network silently lost
/// is replaced.
const ANSWER: Duration = Duration::from_secs(10);
/// MySQL's and MariaDB's "Query execution was interrupted": a ring.
const INTERRUPTED: u16 = 1317;

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
    poll: Option<Duration>,
) -> Background {
    let hold = tokio::spawn(hold(opts, link, changes.clone(), time));
    let Some(poll) = poll else {
        return Background(vec![hold.abort_handle()]);
    };
    let wake = tokio::spawn(async move {
        let mut tick = tokio::time::interval(poll);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            // A return no ring told of (or a head that left, a count
            // raised, a drain ended): every head looks.
            if changes.has_waiters() {
                changes.notify_all();
            }
        }
    });
    Background(vec![hold.abort_handle(), wake.abort_handle()])
}

/// Keeps the link's connection up with its lock, waiting on its bell for
/// rings, and measures the server's clock with it.
async fn hold(opts: Opts, link: Arc<Link>, changes: Arc<Changes>, time: DecidingClock) {
    loop {
        if let Some((id, mut conn, bell)) = open(&opts).await {
            *link.id.lock() = Some(id);
            let wait = format!("SELECT GET_LOCK('{}', 1)", bell_name(&id));
            let mut waits = 0u32;
            loop {
                if waits.is_multiple_of(30) {
                    let _ = tokio::time::timeout(ANSWER, measure(&mut conn, &time)).await;
                }
                waits = waits.wrapping_add(1);
                let waited: Result<mysql_async::Result<Option<Option<i64>>>, _> =
                    tokio::time::timeout(ANSWER, conn.query_first(wait.as_str())).await;
                // A wait that ends at its second answers 0. An interrupted
                // one answers NULL (MySQL) or fails (MariaDB). One that got
                // the bell found the bell's connection gone: both anew.
                let rung = match waited {
                    Ok(Ok(Some(Some(0)))) => false,
                    Ok(Ok(Some(None))) => true,
                    Ok(Err(mysql_async::Error::Server(e))) if e.code == INTERRUPTED => true,
                    _ => break,
                };
                if rung && changes.has_waiters() {
                    changes.notify_all();
                }
            }
            *link.id.lock() = None;
            drop(bell);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// A new link: its connection with its lock taken, and the bell's
/// connection with the bell taken; `None` if either fails.
async fn open(opts: &Opts) -> Option<(LinkId, Conn, Conn)> {
    let id = uuid::Uuid::new_v4();
    let mut conn = Conn::new(opts.clone()).await.ok()?;
    let mut bell = Conn::new(opts.clone()).await.ok()?;
    let take = "SELECT GET_LOCK(?, 0)";
    let locked: Option<Option<i64>> = conn.exec_first(take, (lock_name(&id),)).await.ok()?;
    let rings: Option<Option<i64>> = bell.exec_first(take, (bell_name(&id),)).await.ok()?;
    (locked == Some(Some(1)) && rings == Some(Some(1))).then_some((id, conn, bell))
}

/// The bell of link `id`: the lock its bell's connection keeps and the
/// link waits for.
fn bell_name(id: &LinkId) -> String {
    format!("semaphore_bell_{}", id.simple())
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
