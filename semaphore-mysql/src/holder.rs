//! The store's background: the connection that holds its bound leases
//! (R16), and the poll that wakes its waiters (MySQL has no LISTEN/NOTIFY).
//!
//! The holder is a connection of the store's own, idle but pinged every
//! second, named in each bound lease by its `CONNECTION_ID()` and the
//! server's boot time (the connection ids start again after a restart).
//! Another process takes the holder for gone when that id is missing from
//! `information_schema.PROCESSLIST`, or the server booted since. That
//! needs the `PROCESS` privilege (without it the list shows one's own
//! connections only): a store whose user lacks it binds no lease, so
//! that no live holder is ever taken for gone; its leases free at their
//! ttl.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use mysql_async::prelude::Queryable;
use mysql_async::{Conn, Opts};
use parking_lot::Mutex;
use semaphore_core::store::{Changes, DecidingClock};
use tokio::task::AbortHandle;

/// How often the holder's connection is pinged.
const PING: Duration = Duration::from_secs(1);

/// Two boot times further apart than this are two runs of the server (the
/// reading is in whole seconds, taken at different instants).
const BOOT_SLACK: i64 = 2;

/// A bound lease's holder: `(connection id, server boot, unix s)`.
pub(crate) type HolderId = (i64, i64);

/// What the store and its background tasks share.
#[derive(Debug, Default)]
pub(crate) struct Holder {
    /// The holder connection's id and boot, while it is connected.
    pub(crate) id: Mutex<Option<HolderId>>,
    /// Whether this store's user can see other connections (`PROCESS`):
    /// leases are bound only if it can.
    pub(crate) enabled: AtomicBool,
}

impl Holder {
    /// The holder to write with a bound lease, `None` if leases cannot be
    /// bound now.
    pub(crate) fn current(&self) -> Option<HolderId> {
        if self.enabled.load(Ordering::Relaxed) {
            *self.id.lock()
        } else {
            None
        }
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

/// Starts the holder connection and the waiters' poll.
pub(crate) fn spawn(
    opts: Opts,
    holder: Arc<Holder>,
    changes: Arc<Changes>,
    time: DecidingClock,
    poll: Duration,
) -> Background {
    let hold = tokio::spawn(hold(opts, holder, time));
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

/// Keeps the holder connection up, and measures the server's clock with it.
async fn hold(opts: Opts, holder: Arc<Holder>, time: DecidingClock) {
    loop {
        if let Ok(mut conn) = Conn::new(opts.clone()).await
            && let Ok(Some(id)) = identify(&mut conn).await
        {
            *holder.id.lock() = Some(id);
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
            *holder.id.lock() = None;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The connection's id and the server's boot time.
pub(crate) async fn identify(conn: &mut Conn) -> mysql_async::Result<Option<HolderId>> {
    let Some((id, now)): Option<(i64, i64)> = conn
        .query_first("SELECT CONNECTION_ID(), UNIX_TIMESTAMP()")
        .await?
    else {
        return Ok(None);
    };
    Ok(boot(conn, now).await?.map(|boot| (id, boot)))
}

/// The server's boot time, unix s, from its uptime and `now` (unix s).
pub(crate) async fn boot<Q: Queryable>(conn: &mut Q, now: i64) -> mysql_async::Result<Option<i64>> {
    let uptime: Option<(String, String)> =
        conn.query_first("SHOW GLOBAL STATUS LIKE 'Uptime'").await?;
    Ok(uptime
        .and_then(|(_, value)| value.parse::<i64>().ok())
        .map(|uptime| now - uptime))
}

/// Whether holder `(id, boot)` is gone, given the server's boot now and
/// the connection ids it lists.
pub(crate) fn is_gone(holder: HolderId, boot_now: i64, live: &[i64]) -> bool {
    (holder.1 - boot_now).abs() > BOOT_SLACK || !live.contains(&holder.0)
}

/// Feeds one reading of the server's clock to this process's view of it.
async fn measure(conn: &mut Conn, time: &DecidingClock) {
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

/// Measures the server's clock once, at connect.
pub(crate) async fn measure_once(conn: &mut Conn, time: &DecidingClock) {
    measure(conn, time).await;
}
