//! [`follow`]: the wake-up task of a store shared across machines, whose
//! server tells of changes over a connection of its own (PostgreSQL's
//! `LISTEN`, Redis's pub/sub).

use std::future::Future;
use std::time::Duration;

use crate::wait::Changes;

/// The first pause before a lost connection is tried again; it doubles
/// up to [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_millis(50);
const MAX_BACKOFF: Duration = Duration::from_secs(2);

/// Follows the server's change messages for as long as it is polled (drop
/// it to stop): runs `session` (one connection's life: it connects,
/// subscribes, calls [`Changes::notify_all`] once it listens, since what
/// was sent while nobody listened is lost, then hands each message to
/// `changes` and returns when the connection ends) again and again, 50 ms
/// after a loss and doubling up to 2 s between tries. When a session ends
/// every waiter re-checks; and all along, whether or not a session is up,
/// a fallback poll wakes every waiter each `poll` while any waits, for
/// the messages that are lost anyway.
///
/// Needs a tokio runtime with its timer.
pub async fn follow<F, Fut>(changes: &Changes, poll: Duration, mut session: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = ()>,
{
    let mut poll = tokio::time::interval(poll);
    poll.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let tick = || {
        if changes.has_waiters() {
            changes.notify_all();
        }
    };
    let mut backoff = FIRST_BACKOFF;
    loop {
        let mut connected = std::pin::pin!(session());
        loop {
            tokio::select! {
                () = &mut connected => break,
                _ = poll.tick() => tick(),
            }
        }
        // Lost: heads re-check by the poll until the connection is back.
        changes.notify_all();
        let mut pause = std::pin::pin!(tokio::time::sleep(backoff));
        loop {
            tokio::select! {
                () = &mut pause => break,
                _ = poll.tick() => tick(),
            }
        }
        backoff = (backoff * 2).min(MAX_BACKOFF);
    }
}
