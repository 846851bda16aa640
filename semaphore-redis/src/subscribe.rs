//! Wake-up across machines: one pub/sub connection per store on
//! `PREFIX:wake`, which every script that can let a waiter in publishes to
//! (the pool's id) when a head is queued on the pool, and a script that
//! finds a session ended publishes to (`s:` and the session's id), so that
//! a holder whose session someone else ended learns of it at once; and on
//! the store's own channel, `PREFIX:wake:<own>`, where a return that hands
//! a slot to one of its queued heads tells that head (`g:`), so that a
//! hand-off wakes one process, not every process that listens.
//!
//! A message is a hint and the keys are the truth: the core's
//! [`follow`](semaphore_core::store::follow) reconnects, re-checks every
//! head after a loss and polls while anyone waits; the next expiry comes
//! from the core. The session also refreshes the store's view of the
//! server's clock.

use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use semaphore_core::PoolId;
use semaphore_core::SessionId;
use semaphore_core::store::{Changes, DecidingClock, Handed, ServerClock, SessionEnds};
use tokio::sync::oneshot;

use crate::arrival::Arrivals;

/// Where session ends the server reports go: the store's session, once it
/// is started (after the listener).
pub(crate) type Ends = Arc<std::sync::OnceLock<SessionEnds>>;

/// How often the view of the server's clock is refreshed.
pub(crate) const CLOCK_REFRESH: Duration = Duration::from_secs(60);

/// The longest the subscriber waits to connect and subscribe before it
/// gives up on the connection and tries again.
const SETUP_TIMEOUT: Duration = Duration::from_secs(10);

/// The subscriber task's handle: dropping it stops the task.
#[derive(Debug)]
pub(crate) struct Subscriber {
    _stop: oneshot::Sender<()>,
}

/// What the task needs.
pub(crate) struct Setup {
    pub(crate) client: redis::Client,
    pub(crate) connection: crate::Connection,
    pub(crate) channel: String,
    /// The store's own channel, which its queued heads name.
    pub(crate) own_channel: String,
    pub(crate) changes: Arc<Changes>,
    pub(crate) ends: Ends,
    pub(crate) poll: Duration,
    pub(crate) time: DecidingClock,
    /// Where handed leases are held on arrival and confirmed.
    pub(crate) arrivals: Arrivals,
}

/// Starts the subscriber on the current tokio runtime.
pub(crate) fn spawn(setup: Setup) -> Subscriber {
    let (stop, stopped) = oneshot::channel();
    tokio::spawn(run(setup, stopped));
    Subscriber { _stop: stop }
}

async fn run(setup: Setup, stopped: oneshot::Receiver<()>) {
    let follow = semaphore_core::store::follow(&setup.changes, setup.poll, || session(&setup));
    tokio::select! {
        _ = stopped => {}
        () = follow => {}
    }
}

/// One connection's life: connects, subscribes, then hands messages to the
/// waiters, refreshing the view of the server's clock meanwhile, until the
/// connection ends. Connecting and subscribing are bounded by
/// [`SETUP_TIMEOUT`], so a stalled server is tried again.
async fn session(setup: &Setup) {
    let subscribe = async {
        let mut pubsub = setup.client.get_async_pubsub().await.ok()?;
        pubsub
            .subscribe(&[&setup.channel, &setup.own_channel])
            .await
            .ok()?;
        Some(pubsub)
    };
    let Ok(Some(pubsub)) = tokio::time::timeout(SETUP_TIMEOUT, subscribe).await else {
        return;
    };
    // Messages sent while no one listened are lost: everyone re-checks.
    setup.changes.notify_all();
    let mut messages = pubsub.into_on_message();
    let mut refresh = tokio::time::interval(CLOCK_REFRESH);
    refresh.reset();
    loop {
        tokio::select! {
            message = messages.next() => match message {
                Some(message) => dispatch(
                    &setup.changes,
                    &setup.ends,
                    Some(&setup.arrivals),
                    message.get_payload_bytes(),
                ),
                None => return,
            },
            _ = refresh.tick() => {
                if let Some(view) = setup.time.server() {
                    // A failed reading keeps the last offset.
                    let _ = measure(&mut setup.connection.clone(), view).await;
                }
            }
        }
    }
}

/// Hands a message on: a pool's id to the waiters of its pool; `g:`, a
/// queued head's id, `:` and a pool's id to that head, if it waits here
/// (a return handed it a slot), with the lease itself after them for a
/// bound lease, which the head holds from now if `arrivals` is given (one
/// server; [`crate::arrival`]); `s:` and a session's id to the store's
/// session, which the server found ended.
pub(crate) fn dispatch(
    changes: &Changes,
    ends: &Ends,
    arrivals: Option<&Arrivals>,
    payload: &[u8],
) {
    let text = std::str::from_utf8(payload).unwrap_or("");
    if let Some(handed) = text.strip_prefix("g:") {
        if let (Some(arrivals), Some(lease)) = (arrivals, Handed::parse(handed)) {
            arrivals.hold(changes, ends.get(), lease);
            return;
        }
        let mut fields = handed.split(':');
        let waiter = fields.next().and_then(|w| w.parse::<uuid::Uuid>().ok());
        let pool = fields.next().and_then(|p| p.parse::<uuid::Uuid>().ok());
        match (waiter, pool) {
            (Some(waiter), Some(pool)) => changes.notify_waiter(
                PoolId::from_uuid(pool),
                semaphore_core::store::WaiterId::from_uuid(waiter),
            ),
            _ => changes.notify_all(),
        }
        return;
    }
    if let Some(session) = text.strip_prefix("s:") {
        if let (Ok(id), Some(ends)) = (session.parse::<uuid::Uuid>(), ends.get()) {
            ends.ended_on_store(SessionId::from_uuid(id));
        }
        return;
    }
    match text.parse::<uuid::Uuid>() {
        Ok(pool) => changes.notify(PoolId::from_uuid(pool)),
        Err(_) => changes.notify_all(),
    }
}

/// Measures the offset of the server's clock against this process's.
pub(crate) async fn measure(
    connection: &mut crate::Connection,
    view: &ServerClock,
) -> redis::RedisResult<()> {
    let before = view.local().now();
    let (seconds, micros): (i64, i64) = redis::cmd("TIME").query_async(connection).await?;
    let after = view.local().now();
    view.observe(before, seconds * 1000 + micros / 1000, after);
    Ok(())
}
