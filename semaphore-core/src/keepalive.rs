//! Keep-alive: a lease renewed in the background while its guard lives,
//! and a signal when a renewal finds it lost (SPEC "Beyond the basic
//! model").

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use crate::clock::saturating_add;
use crate::{Error, Lease, Pool};

/// The first pause before a failed renewal is tried again.
const RETRY_FIRST: Duration = Duration::from_millis(50);

/// What the renewing task last learned.
#[derive(Debug, Clone)]
pub(crate) enum Kept {
    /// Renewed: the lease as it now stands.
    Alive(Lease),
    /// A renewal found the lease gone, for this reason.
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

/// Starts renewing `lease` of `pool` every `ttl / 3`, on the current
/// runtime or else the library's.
pub(crate) fn start(pool: Pool, lease: Lease, ttl: Duration) -> KeepAlive {
    let (tx, state) = watch::channel(Kept::Alive(lease.clone()));
    let task = crate::detach::spawn(renew_loop(pool, lease, ttl, tx));
    KeepAlive { state, task }
}

async fn renew_loop(pool: Pool, mut lease: Lease, ttl: Duration, tx: watch::Sender<Kept>) {
    let every = (ttl / 3).max(Duration::from_millis(1));
    let mut next = due(&lease, ttl, every);
    let mut backoff = RETRY_FIRST;
    loop {
        pool.store().clock().sleep_until(next).await;
        match renew_before_expiry(&pool, &lease, ttl).await {
            Ok(renewed) => {
                lease = renewed;
                backoff = RETRY_FIRST;
                next = due(&lease, ttl, every);
                let _ = tx.send(Kept::Alive(lease.clone()));
            }
            Err(e) if e.is_retryable() && pool.store().clock().now() < lease.expires_at => {
                // Retry until the lease would have expired; then the next
                // try fails with LeaseExpired.
                next = saturating_add(pool.store().clock().now(), backoff).min(lease.expires_at);
                backoff = (backoff * 2).min(every);
            }
            Err(e) => {
                crate::telemetry::lost(pool.name(), &lease, &e);
                let _ = tx.send(Kept::Lost(Arc::new(e)));
                return;
            }
        }
    }
}

/// Renews `lease`, or fails with [`Error::LeaseExpired`] once it expires by
/// the store's clock while the renewal is still under way (a stalled
/// server, a row lock held elsewhere): the loss is reported at the expiry,
/// whatever the store call is doing. The abandoned call is dropped; if it
/// did renew after all, the guard's return frees the slot.
async fn renew_before_expiry(pool: &Pool, lease: &Lease, ttl: Duration) -> Result<Lease, Error> {
    let clock = pool.store().clock();
    let mut renewal = std::pin::pin!(pool.renew(lease, ttl));
    loop {
        tokio::select! {
            biased;
            renewed = &mut renewal => return renewed,
            () = clock.sleep_until(lease.expires_at) => {
                // A clock may wake early; only its own reading counts.
                if clock.now() >= lease.expires_at {
                    return Err(Error::LeaseExpired {
                        pool: lease.pool,
                        lease: lease.id,
                        expired_at: lease.expires_at,
                    });
                }
            }
        }
    }
}

/// When `lease`, granted or renewed for `ttl`, is next due for renewal:
/// `every` after it was granted or last renewed.
fn due(lease: &Lease, ttl: Duration, every: Duration) -> std::time::SystemTime {
    saturating_add(lease.expires_at, every)
        .checked_sub(ttl)
        .unwrap_or(lease.expires_at)
}
