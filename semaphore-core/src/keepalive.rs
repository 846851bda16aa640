//! Keep-alive: a lease renewed in the background while its guard lives,
//! and a signal when it is lost (rule "Beyond the basic model").

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use tokio::sync::watch;

use crate::clock::saturating_add;
use crate::{error::Error, lease::Lease, pool::Pool};

/// The first pause before a failed renewal is tried again.
const RETRY_FIRST: Duration = Duration::from_millis(50);

/// The longest pause between two tries of a failing renewal: a store back
/// after an outage is renewed within about this (and its reconnect).
const RETRY_MAX: Duration = Duration::from_millis(250);

/// What the renewing task last learned.
#[derive(Debug, Clone)]
pub(crate) enum Kept {
    /// Renewed: the lease as it now stands.
    Alive(Lease),
    /// The lease is lost, for this reason.
    Lost(Arc<Error>),
}

/// The renewing task's handle, held by a guard: stops the task when
/// dropped.
#[derive(Debug)]
pub(crate) struct KeepAlive {
    pub(crate) state: watch::Receiver<Kept>,
    task: Option<tokio::task::AbortHandle>,
}

impl Drop for KeepAlive {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

/// Starts renewing `lease` of `pool` to `ttl` every `every`, on the
/// current runtime or else the library's.
pub(crate) fn start(pool: Pool, lease: Lease, ttl: Duration, every: Duration) -> KeepAlive {
    let (tx, state) = watch::channel(Kept::Alive(lease.clone()));
    let task = crate::detach::spawn(renew_loop(pool, lease, ttl, every, tx));
    KeepAlive { state, task }
}

async fn renew_loop(
    pool: Pool,
    mut lease: Lease,
    ttl: Duration,
    every: Duration,
    tx: watch::Sender<Kept>,
) {
    let every = every.max(Duration::from_millis(1));
    let mut next = due(&lease, ttl, every);
    let mut backoff = RETRY_FIRST;
    let session = lease.session;
    loop {
        let clock = pool.store().clock();
        tokio::select! {
            biased;
            () = session_ended(&pool, session) => {
                planted_lateness().await;
                return give_up(&pool, &lease, &tx, pool.session_lost(&lease));
            }
            () = clock.sleep_until(next) => {}
        }
        // One attempt may not wait longer than twice the renewal period
        // (at most a third of the ttl): a renewal stuck on a connection
        // gone silent is given up and tried again, on another.
        let attempt = (every * 2).min(ttl / 3).max(RETRY_FIRST);
        match renew_before_expiry(&pool, &lease, ttl, attempt).await {
            Ok(renewed) => {
                // The renewed lease keeps its binding.
                lease = renewed.with_session(session);
                backoff = RETRY_FIRST;
                next = due(&lease, ttl, every);
                let _ = tx.send(Kept::Alive(lease.clone()));
            }
            Err(e) if e.is_retryable() && clock.now() < lease.expires_at => {
                // Retry until the lease would have expired; then the next
                // try fails with LeaseExpired.
                next = saturating_add(clock.now(), backoff).min(lease.expires_at);
                backoff = (backoff * 2).min(every).min(RETRY_MAX);
            }
            Err(e) => return give_up(&pool, &lease, &tx, e),
        }
    }
}

fn give_up(pool: &Pool, lease: &Lease, tx: &watch::Sender<Kept>, reason: Error) {
    crate::telemetry::lost(pool.name(), lease, &reason);
    let _ = tx.send(Kept::Lost(Arc::new(reason)));
}

/// Resolves once the lease's session (if it has one) can no longer vouch
/// for it; never for an unbound lease.
async fn session_ended(pool: &Pool, session: Option<crate::id::SessionId>) {
    match (session, pool.store().session()) {
        (Some(id), Some(s)) => s.ended(id).await,
        (Some(_), None) => {}
        (None, _) => std::future::pending().await,
    }
}

/// Renews `lease` in one attempt of at most `attempt` (then a retryable
/// error), or fails once it is lost while the renewal is still under way
/// (a stalled server, a row lock held elsewhere, a partition): with
/// [`Error::LeaseExpired`] once the store's clock reaches its expiry,
/// with [`Error::SessionLost`] (or [`Error::SessionEnded`]) once its
/// session no longer vouches for it.
/// The loss is reported then, whatever the store call is doing. The
/// abandoned call is dropped; if it did renew after all, the guard's
/// return frees the slot.
async fn renew_before_expiry(
    pool: &Pool,
    lease: &Lease,
    ttl: Duration,
    attempt: Duration,
) -> Result<Lease, Error> {
    let mut renewal = std::pin::pin!(pool.renew(lease, ttl));
    tokio::select! {
        biased;
        renewed = &mut renewal => renewed,
        e = until_lost(pool, lease) => Err(e),
        () = tokio::time::sleep(attempt) => Err(Error::Storage {
            operation: "renew",
            retryable: true,
            source: format!("no answer within {attempt:?}; trying again").into(),
        }),
    }
}

/// Resolves when `lease`, as it stands, is lost by the store's clock or
/// its session: what [`LeaseGuard::lost`](crate::LeaseGuard::lost) waits
/// for without keep-alive.
pub(crate) async fn until_lost(pool: &Pool, lease: &Lease) -> Error {
    let lost = until_lost_on_time(pool, lease).await;
    planted_lateness().await;
    lost
}

/// The fault suite's planted bug `lost_late` (feature `fault-mutants`):
/// the lost signal 3 s late. Nothing otherwise.
async fn planted_lateness() {
    #[cfg(feature = "fault-mutants")]
    if crate::mutant::planted(crate::mutant::Mutant::LostLate) {
        tokio::time::sleep(Duration::from_secs(3)).await;
    }
}

async fn until_lost_on_time(pool: &Pool, lease: &Lease) -> Error {
    let clock = pool.store().clock();
    let expired = async {
        loop {
            clock.sleep_until(lease.expires_at).await;
            // A clock may wake early; only its own reading counts.
            if clock.now() >= lease.expires_at {
                return;
            }
        }
    };
    tokio::select! {
        biased;
        () = session_ended(pool, lease.session) => pool.session_lost(lease),
        () = expired => Error::LeaseExpired {
            pool: lease.pool,
            lease: lease.id,
            expired_at: lease.expires_at,
        },
    }
}

/// When `lease`, granted or renewed for `ttl`, is next due for renewal:
/// `every` after it was granted or last renewed.
fn due(lease: &Lease, ttl: Duration, every: Duration) -> SystemTime {
    saturating_add(lease.expires_at, every)
        .checked_sub(ttl)
        .unwrap_or(lease.expires_at)
}
