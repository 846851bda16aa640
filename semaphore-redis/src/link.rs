//! Waiter liveness on one Redis server: the store's link, an idle
//! connection of its own (named `semaphore-holder` on the server, checked
//! with a `PING` every few seconds), whose `CLIENT ID` each of this
//! process's queued places names.
//!
//! When the process dies, the kernel closes the socket and the server drops
//! the client at once; ids are never reused while the server runs. A
//! refused borrow is answered with the client ids of the places queued
//! ahead of it, and asks the server (`CLIENT LIST ID ...`, [`gone`]) which
//! still exist: the places of those that do not are dropped, so that a
//! killed waiter holds back no one. A lost link's places may be dropped
//! so, as a dead process's would; the store connects again under a new id,
//! which its waiters' next attempts name. A server that will not answer `CLIENT LIST`
//! (an ACL that forbids it) leaves each place to its heartbeat. Leases are
//! bound to sessions, not to this link (see `session`).

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use redis::FromRedisValue;
use tokio::sync::oneshot;

/// How often the link is checked.
const PING_EVERY: Duration = Duration::from_secs(5);

/// The longest the link waits to connect, or for a `PING`.
const SETUP_TIMEOUT: Duration = Duration::from_secs(10);

/// The pause before connecting again.
const RETRY: Duration = Duration::from_millis(500);

/// The link task's handle: dropping it closes the connection, and the
/// server then drops the places that name it.
#[derive(Debug)]
pub(crate) struct Link {
    /// The connection's client id; 0 while disconnected.
    id: Arc<AtomicI64>,
    _stop: oneshot::Sender<()>,
}

impl Link {
    /// Starts the link's connection on the current tokio runtime.
    pub(crate) fn spawn(client: redis::Client) -> Self {
        let (stop, stopped) = oneshot::channel();
        let id = Arc::new(AtomicI64::new(0));
        let task_id = id.clone();
        tokio::spawn(async move {
            tokio::select! {
                _ = stopped => {}
                () = run(client, &task_id) => {}
            }
        });
        Self { id, _stop: stop }
    }

    /// The client id this process's queued places name now; `None` while
    /// the connection is down (a place taken then lives by its heartbeat).
    pub(crate) fn id(&self) -> Option<i64> {
        match self.id.load(Ordering::Acquire) {
            0 => None,
            id => Some(id),
        }
    }
}

async fn run(client: redis::Client, id: &AtomicI64) {
    loop {
        session(&client, id).await;
        id.store(0, Ordering::Release);
        tokio::time::sleep(RETRY).await;
    }
}

/// One connection's life: connects, learns its id, then pings until the
/// connection fails.
async fn session(client: &redis::Client, id: &AtomicI64) {
    let setup = async {
        let mut connection = client.get_multiplexed_async_connection().await.ok()?;
        redis::cmd("CLIENT")
            .arg("SETNAME")
            .arg("semaphore-holder")
            .query_async::<()>(&mut connection)
            .await
            .ok()?;
        let n: i64 = redis::cmd("CLIENT")
            .arg("ID")
            .query_async(&mut connection)
            .await
            .ok()?;
        Some((connection, n))
    };
    let Ok(Some((mut connection, n))) = tokio::time::timeout(SETUP_TIMEOUT, setup).await else {
        return;
    };
    id.store(n, Ordering::Release);
    loop {
        tokio::time::sleep(PING_EVERY).await;
        let ping = redis::cmd("PING");
        let pinged = tokio::time::timeout(SETUP_TIMEOUT, ping.query_async::<()>(&mut connection));
        if !matches!(pinged.await, Ok(Ok(()))) {
            return;
        }
    }
}

/// Which of the links `ids` the server (on a cluster, the master of
/// hash slot `slot`) no longer has a connection for: those are gone. None,
/// if the server will not say.
pub(crate) async fn gone(connection: &crate::Connection, slot: u16, ids: &[i64]) -> Vec<i64> {
    if ids.is_empty() {
        return Vec::new();
    }
    let mut list = redis::cmd("CLIENT");
    list.arg("LIST").arg("ID");
    for id in ids {
        list.arg(*id);
    }
    let answer = connection.on_slot(list, slot).await.ok();
    let Some(listing) = answer.and_then(|v| String::from_redis_value(v).ok()) else {
        return Vec::new();
    };
    let alive = live_ids(&listing);
    ids.iter()
        .copied()
        .filter(|id| !alive.contains(id))
        .collect()
}

/// The ids of a `CLIENT LIST` reply: one client a line, `id=N` first.
fn live_ids(listing: &str) -> Vec<i64> {
    listing
        .lines()
        .filter_map(|line| {
            line.split(' ')
                .find_map(|field| field.strip_prefix("id="))
                .and_then(|n| n.parse().ok())
        })
        .collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_client_list_reply_names_its_clients_ids() {
        let listing = "id=7 addr=127.0.0.1:5 laddr=x fd=8 name=semaphore-holder age=1\n\
                       id=12 addr=127.0.0.1:6 laddr=x fd=9 name= age=0\n";
        assert_eq!(super::live_ids(listing), [7, 12]);
        assert_eq!(super::live_ids(""), Vec::<i64>::new());
    }
}
