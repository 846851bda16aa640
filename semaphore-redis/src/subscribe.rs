//! Wake-up across machines: one pub/sub connection per store on
//! `PREFIX:wake`, which every script that can let a waiter in publishes to
//! (the pool's id) when a head is queued on the pool.
//!
//! A message is a hint and the keys are the truth. After every (re)connect
//! all heads re-check, since messages sent while the subscriber was away
//! are lost; a fallback poll re-checks while anyone waits; the next expiry
//! comes from the core. The task also refreshes the store's view of the
//! server's clock.

use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use redis::aio::ConnectionManager;
use semaphore_core::PoolId;
use semaphore_core::store::{Changes, DecidingClock, ServerClock};
use tokio::sync::oneshot;

/// How often the view of the server's clock is refreshed.
const CLOCK_REFRESH: Duration = Duration::from_secs(60);

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
    pub(crate) connection: ConnectionManager,
    pub(crate) channel: String,
    pub(crate) changes: Arc<Changes>,
    pub(crate) poll: Duration,
    pub(crate) time: DecidingClock,
}

/// Starts the subscriber on the current tokio runtime.
pub(crate) fn spawn(setup: Setup) -> Subscriber {
    let (stop, stopped) = oneshot::channel();
    tokio::spawn(run(setup, stopped));
    Subscriber { _stop: stop }
}

async fn run(mut setup: Setup, mut stopped: oneshot::Receiver<()>) {
    // The fallback poll and the clock refresh go on whether or not the
    // subscriber is connected.
    let mut poll = tokio::time::interval(setup.poll);
    poll.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut refresh = tokio::time::interval(CLOCK_REFRESH);
    refresh.reset();
    let mut backoff = Duration::from_millis(50);
    loop {
        let mut session = std::pin::pin!(session(&setup.client, &setup.channel, &setup.changes));
        loop {
            tokio::select! {
                _ = &mut stopped => return,
                () = &mut session => break,
                _ = poll.tick() => tick(&setup.changes),
                _ = refresh.tick() => refresh_clock(&mut setup.connection, &setup.time).await,
            }
        }
        // Lost: heads re-check by the poll until the subscriber is back.
        setup.changes.notify_all();
        let mut pause = std::pin::pin!(tokio::time::sleep(backoff));
        loop {
            tokio::select! {
                _ = &mut stopped => return,
                () = &mut pause => break,
                _ = poll.tick() => tick(&setup.changes),
            }
        }
        backoff = (backoff * 2).min(Duration::from_secs(2));
    }
}

fn tick(changes: &Changes) {
    if changes.has_waiters() {
        changes.notify_all();
    }
}

async fn refresh_clock(connection: &mut ConnectionManager, time: &DecidingClock) {
    if let Some(view) = time.server() {
        // A failed reading keeps the last offset.
        let _ = measure(connection, view).await;
    }
}

/// One connection's life: connects, subscribes, then hands messages to the
/// waiters until the connection ends. Connecting and subscribing are
/// bounded by [`SETUP_TIMEOUT`], so a stalled server is tried again.
async fn session(client: &redis::Client, channel: &str, changes: &Changes) {
    let setup = async {
        let mut pubsub = client.get_async_pubsub().await.ok()?;
        pubsub.subscribe(channel).await.ok()?;
        Some(pubsub)
    };
    let Ok(Some(pubsub)) = tokio::time::timeout(SETUP_TIMEOUT, setup).await else {
        return;
    };
    // Messages sent while no one listened are lost: everyone re-checks.
    changes.notify_all();
    let mut messages = pubsub.into_on_message();
    while let Some(message) = messages.next().await {
        match std::str::from_utf8(message.get_payload_bytes())
            .ok()
            .and_then(|p| p.parse::<uuid::Uuid>().ok())
        {
            Some(pool) => changes.notify(PoolId::from_uuid(pool)),
            None => changes.notify_all(),
        }
    }
}

/// Measures the offset of the server's clock against this process's.
pub(crate) async fn measure(
    connection: &mut ConnectionManager,
    view: &ServerClock,
) -> redis::RedisResult<()> {
    let before = view.local().now();
    let (seconds, micros): (i64, i64) = redis::cmd("TIME").query_async(connection).await?;
    let after = view.local().now();
    view.observe(before, seconds * 1000 + micros / 1000, after);
    Ok(())
}
