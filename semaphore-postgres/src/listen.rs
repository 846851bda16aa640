//! Wake-up across machines (rule "Stores"): `LISTEN` on one
//! dedicated connection per store, which every function that can let a
//! waiter in (`semaphore_wake`) notifies at commit, and which a session's
//! row deleted or cut short notifies (`s:` and its id: a session ended by
//! another reaches its holder at once).
//!
//! A notification is a hint and the table is the truth. After every
//! (re)connect all heads re-check, since notifications sent while the
//! listener was away are lost; a fallback poll re-checks while anyone waits;
//! the next expiry comes from the core. The listener also refreshes the
//! store's view of the server's clock, and records its backend's pid so
//! that other processes can tell, from `pg_stat_activity`, that a queued
//! head's process has died (a waiter's place may be bound to its
//! connection; leases belong to the store's session).

use std::sync::Arc;
use std::sync::atomic::{AtomicI32, Ordering};
use std::time::Duration;

use semaphore_core::store::{Changes, Handed, SessionEnds};
use semaphore_core::{PoolId, SessionId};
use tokio::sync::oneshot;
use tokio_postgres::tls::NoTlsStream;
use tokio_postgres::{AsyncMessage, Client, Config, Connection, NoTls, Socket};

type Conn = Connection<Socket, NoTlsStream>;

use semaphore_core::store::{DecidingClock as Time, ServerClock};

/// How often the view of the server's clock is refreshed.
const CLOCK_REFRESH: Duration = Duration::from_secs(60);

/// The longest the listener waits to connect, to `LISTEN` or to read the
/// server's clock before it gives up on the connection and tries again.
const SETUP_TIMEOUT: Duration = Duration::from_secs(10);

/// The listener task's handle: dropping it stops the task.
#[derive(Debug)]
pub(crate) struct Listener {
    _stop: oneshot::Sender<()>,
    /// The listener backend's pid; 0 while disconnected.
    pub(crate) backend: Arc<AtomicI32>,
}

/// What the task needs.
pub(crate) struct Setup {
    pub(crate) config: Config,
    pub(crate) channel: String,
    pub(crate) changes: Arc<Changes>,
    pub(crate) ends: SessionEnds,
    pub(crate) poll: Duration,
    pub(crate) time: Time,
    /// Where handed leases are held on arrival and confirmed.
    pub(crate) arrivals: crate::arrival::Arrivals,
}

/// Starts the listener on the current tokio runtime.
pub(crate) fn spawn(setup: Setup) -> Listener {
    let (stop, stopped) = oneshot::channel();
    let backend = Arc::new(AtomicI32::new(0));
    tokio::spawn(run(setup, backend.clone(), stopped));
    Listener {
        _stop: stop,
        backend,
    }
}

async fn run(setup: Setup, backend: Arc<AtomicI32>, stopped: oneshot::Receiver<()>) {
    let follow = semaphore_core::store::follow(&setup.changes, setup.poll, || async {
        session(&setup, &backend).await;
        backend.store(0, Ordering::Relaxed);
    });
    tokio::select! {
        _ = stopped => {}
        () = follow => {}
    }
}

/// One connection's life: connects, listens, then hands notifications to
/// the waiters until the connection fails. Connecting and setting up are
/// bounded by [`SETUP_TIMEOUT`], so a stalled server is tried again.
async fn session(setup: &Setup, backend: &AtomicI32) {
    let connect = tokio::time::timeout(SETUP_TIMEOUT, setup.config.connect(NoTls));
    let Ok(Ok((client, mut connection))) = connect.await else {
        return;
    };
    let ready = tokio::time::timeout(SETUP_TIMEOUT, listen(&client, setup));
    let ready = async move { ready.await.ok().flatten() };
    let Some(pid) = drive(&mut connection, setup, ready).await else {
        return;
    };
    backend.store(pid, Ordering::Relaxed);
    // Notifications sent while no one listened are lost: everyone re-checks.
    setup.changes.notify_all();
    let mut refresh = tokio::time::interval(CLOCK_REFRESH);
    loop {
        tokio::select! {
            message = std::future::poll_fn(|cx| connection.poll_message(cx)) => {
                if !dispatch(setup, message) {
                    return;
                }
            }
            _ = refresh.tick() => {
                if let Time::Server(view) = &setup.time {
                    let measured = tokio::time::timeout(SETUP_TIMEOUT, measure(&client, view));
                    let measured = async move { measured.await.ok().flatten() };
                    if drive(&mut connection, setup, measured).await.is_none() {
                        return;
                    }
                }
            }
        }
    }
}

/// `LISTEN`s on the channel; the backend's pid, which marks this
/// process's queued heads as alive.
async fn listen(client: &Client, setup: &Setup) -> Option<i32> {
    client
        .batch_execute(&format!("LISTEN {}", setup.channel))
        .await
        .ok()?;
    let rows = client
        .query_typed("SELECT pg_backend_pid()", &[])
        .await
        .ok()?;
    rows.first()?.try_get(0).ok()
}

/// Measures the offset of the server's clock against this process's.
pub(crate) async fn measure(client: &Client, view: &ServerClock) -> Option<()> {
    let before = view.local().now();
    let rows = client
        .query_typed(
            "SELECT floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint",
            &[],
        )
        .await
        .ok()?;
    let after = view.local().now();
    view.observe(before, rows.first()?.try_get(0).ok()?, after);
    Some(())
}

/// Runs `work` on the client while polling the connection, which is what
/// makes the client's requests go, handing on notifications meanwhile;
/// `None` if the connection ends first or `work` fails.
async fn drive<T>(
    connection: &mut Conn,
    setup: &Setup,
    work: impl std::future::Future<Output = Option<T>>,
) -> Option<T> {
    let mut work = std::pin::pin!(work);
    loop {
        tokio::select! {
            out = &mut work => return out,
            message = std::future::poll_fn(|cx| connection.poll_message(cx)) => {
                if !dispatch(setup, message) {
                    return None;
                }
            }
        }
    }
}

/// Hands a notification on: a pool's id to the waiters of its pool; `g:`
/// and a lease a return handed to a queued head to that head, which holds
/// it from now if it waits here, and otherwise the pool's id; `s:` and a
/// session's id to the store's session; `false` once the connection has
/// ended.
fn dispatch(setup: &Setup, message: Option<Result<AsyncMessage, tokio_postgres::Error>>) -> bool {
    let (changes, ends) = (&setup.changes, &setup.ends);
    match message {
        Some(Ok(AsyncMessage::Notification(n))) => {
            if let Some(session) = n.payload().strip_prefix("s:") {
                if let Ok(id) = session.parse::<uuid::Uuid>() {
                    ends.ended_on_store(SessionId::from_uuid(id));
                }
                return true;
            }
            if let Some(handed) = n.payload().strip_prefix("g:") {
                match Handed::parse(handed) {
                    Some(handed) => {
                        let pool = handed.lease.pool;
                        // Every other process looks, as for the pool's id.
                        if !setup.arrivals.hold(changes, ends, handed) {
                            changes.notify(pool);
                        }
                    }
                    None => changes.notify_all(),
                }
                return true;
            }
            match n.payload().parse::<uuid::Uuid>() {
                Ok(pool) => changes.notify(PoolId::from_uuid(pool)),
                Err(_) => changes.notify_all(),
            }
            true
        }
        Some(Ok(_)) => true,
        Some(Err(_)) | None => false,
    }
}
