//! A lease given back for a caller that is gone: a dropped guard's
//! return, a dropped borrow's late grant, a forgotten guard's unbinding;
//! in place where the store answers at once, otherwise detached, and tried
//! again on a retryable error.

use std::sync::Arc;
use std::time::Duration;

use crate::detach::run_detached_again;
use crate::lease::Lease;
use crate::primitives::Store;
use crate::wait::GiveBack;

/// Returns `lease` without waiting for the answer: used by guards on drop.
/// In place if the store answers at once ([`Store::in_place`]).
pub(crate) fn return_detached(store: &Arc<dyn Store>, lease: &Lease) {
    if let Some(now) = store.in_place() {
        let _ = now.return_held(lease);
        return;
    }
    let (store, lease) = (store.clone(), lease.clone());
    run_detached_again(move || {
        let (store, lease) = (store.clone(), lease.clone());
        Box::pin(async move { return_for_the_gone(&store, lease).await })
    });
}

/// How long a return for a caller that is gone keeps trying.
const RETURN_TRIES_FOR: Duration = Duration::from_secs(30);

/// Returns `lease` for a caller that is gone (a guard or a borrow
/// dropped): nobody is left to hear of a failure, so a return that fails
/// with a retryable error (a blip, a restart, a stalled call: it may not
/// have landed) is tried again, 50 ms later, then twice as long each time
/// up to 2 s, until it lands, fails otherwise, or the lease has expired by
/// the store's clock, and for [`RETURN_TRIES_FOR`] at most: the store
/// handle is kept open meanwhile. A second try of a return that did land
/// finds the lease not active and changes nothing (rule "Lost replies").
/// Without it, a blip at a guard's drop held the slot to the end of its
/// ttl.
pub(crate) async fn return_for_the_gone(store: &Arc<dyn Store>, lease: Lease) {
    let until = tokio::time::Instant::now() + RETURN_TRIES_FOR;
    let mut pause = Duration::from_millis(50);
    loop {
        match store.return_held(lease.clone()).await {
            Err(e)
                if e.is_retryable()
                    && store.clock().now() < lease.expires_at
                    && tokio::time::Instant::now() + pause < until =>
            {
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_secs(2));
            }
            _ => return,
        }
    }
}

/// Unbinds `lease` from its holder, before returning on a multi-thread
/// runtime and otherwise in the background (see
/// [`run_now_or_awaited`](crate::detach::run_now_or_awaited)): used by
/// [`LeaseGuard::forget`](crate::LeaseGuard::forget). Skipped for a lease
/// that a store with sessions granted unbound: there is nothing to undo.
pub(crate) fn unbind_detached(store: &Arc<dyn Store>, lease: &Lease) {
    if store.session().is_some() && lease.session.is_none() {
        return;
    }
    let (store, pool, id) = (store.clone(), lease.pool, lease.id);
    // Landed before `forget` returns on a multi-thread runtime, else
    // awaited by the runtime's end and by the session's close: a `main`
    // that forgets a lease and returns must not leave it bound to a
    // session that then ends.
    let open = store.session().and_then(crate::session::Session::unbinding);
    crate::detach::run_now_or_awaited(Box::pin(async move {
        let _ = crate::detach::retried(|| store.unbind(pool, id)).await;
        drop(open);
    }));
}

/// A ticket's lease that nobody took goes back to the store it came from.
impl GiveBack for Arc<dyn Store> {
    fn give_back(&self, lease: &Lease) {
        return_detached(self, lease);
    }
}
