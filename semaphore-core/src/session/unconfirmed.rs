//! Handed leases held on arrival and not yet confirmed (rule "A handed slot
//! is held on arrival"): until its process confirms a lease that a return
//! elsewhere handed to one of its queued borrowers, the store may free it
//! at a short liveness bound, so the session vouches for its leases until
//! that bound at most ([`Unconfirmed`]).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::SystemTime;

use super::Shared;
use super::beat::SessionEnds;
use crate::id::{LeaseId, SessionId};

/// The bounds in force: each handed lease not yet confirmed, with its
/// session and its bound on the deciding clock.
#[derive(Default)]
pub(crate) struct Caps {
    /// How many bounds are in force: the common case, none, costs one
    /// atomic load.
    count: AtomicUsize,
    next: AtomicU64,
    bounds: parking_lot::Mutex<Vec<Cap>>,
    /// Told each time a bound is lifted ([`Session::confirmed`](super::Session::confirmed)
    /// waits on it).
    lifted: tokio::sync::Notify,
}

/// One handed lease's bound.
struct Cap {
    key: u64,
    session: SessionId,
    until: SystemTime,
    lease: LeaseId,
    /// Set once its holder returned it: a confirmation that then finds it
    /// gone loses nothing.
    returned: Arc<AtomicBool>,
}

impl Caps {
    /// The earliest bound in force on session `id`.
    fn earliest(&self, id: SessionId) -> Option<SystemTime> {
        if self.count.load(Ordering::Acquire) == 0 {
            return None;
        }
        let bounds = self.bounds.lock();
        bounds
            .iter()
            .filter(|cap| cap.session == id)
            .map(|cap| cap.until)
            .min()
    }

    /// Lifts the bound `which` picks, if it is in force; the bound lifted.
    fn remove(&self, which: impl Fn(&Cap) -> bool) -> Option<Cap> {
        if self.count.load(Ordering::Acquire) == 0 {
            return None;
        }
        let cap = {
            let mut bounds = self.bounds.lock();
            let i = bounds.iter().position(which)?;
            self.count.fetch_sub(1, Ordering::AcqRel);
            bounds.swap_remove(i)
        };
        self.lifted.notify_waiters();
        Some(cap)
    }

    /// Whether a bound is in force on `lease`.
    fn holds(&self, lease: LeaseId) -> bool {
        self.count.load(Ordering::Acquire) != 0
            && self.bounds.lock().iter().any(|cap| cap.lease == lease)
    }
}

impl Shared {
    /// The open session `id`'s end as of its last heartbeat, or the
    /// earliest bound of its unconfirmed handed leases if that is earlier;
    /// `None` if `id` is not the open session.
    pub(super) fn end_of(&self, id: SessionId) -> Option<SystemTime> {
        let end = match self.now.borrow().open {
            Some((open, end)) if open == id => end,
            _ => return None,
        };
        Some(self.caps.earliest(id).map_or(end, |cap| cap.min(end)))
    }
}

impl SessionEnds {
    /// A lease bound to session `id` that a return elsewhere handed to one
    /// of this process's queued borrowers, held from its arrival: until
    /// [`Unconfirmed::confirmed`], the session vouches for its leases
    /// ([`Session::vouches`](super::Session::vouches), and so
    /// [`LeaseGuard::is_held`](crate::LeaseGuard::is_held) and keep-alive's
    /// loss signal) only until `until`, the store's liveness bound for the
    /// handed lease on the deciding clock, after which the store may free it.
    /// `None` if `id` is not the open session (its leases are lost
    /// already) or the session is gone.
    pub fn unconfirmed(
        &self,
        id: SessionId,
        lease: LeaseId,
        until: SystemTime,
    ) -> Option<Unconfirmed> {
        let shared = self.0.upgrade()?;
        // Not the open session: its leases are lost already.
        shared.end_of(id)?;
        let key = shared.caps.next.fetch_add(1, Ordering::Relaxed);
        let returned = Arc::new(AtomicBool::new(false));
        {
            let mut bounds = shared.caps.bounds.lock();
            bounds.push(Cap {
                key,
                session: id,
                until,
                lease,
                returned: returned.clone(),
            });
            shared.caps.count.fetch_add(1, Ordering::AcqRel);
        }
        // Wakes those waiting for the session's end to look again.
        shared.now.send_modify(|_| {});
        Some(Unconfirmed {
            shared: Arc::downgrade(&shared),
            key,
            session: id,
            returned,
            done: false,
        })
    }
}

impl super::Session {
    /// Its holder returns `lease`, held on arrival: if it is not yet
    /// confirmed ([`SessionEnds::unconfirmed`]), its bound is lifted (the
    /// holder no longer acts on it), and a confirmation that finds it gone
    /// loses nothing. A store calls it as its return of a lease begins.
    /// Costs one atomic load when no lease is unconfirmed.
    pub fn returning(&self, lease: LeaseId) {
        if let Some(cap) = self.shared.caps.remove(|cap| cap.lease == lease) {
            cap.returned.store(true, Ordering::Release);
        }
    }

    /// Resolves once `lease` rests on the store's record, not on a
    /// hand-off's arrival alone: at once unless it is a handed lease held
    /// on arrival whose confirmation is still under way
    /// ([`SessionEnds::unconfirmed`]); else when that confirmation lands
    /// (the bound is lifted), fails (the session is lost), or its holder
    /// returns it. Costs one atomic load when no lease is unconfirmed.
    ///
    /// # Cancel safety
    /// Cancel safe: it only watches.
    pub async fn confirmed(&self, lease: LeaseId) {
        let caps = &self.shared.caps;
        loop {
            let lifted = caps.lifted.notified();
            let mut lifted = std::pin::pin!(lifted);
            // Registered before the look: a bound lifted between the look
            // and the wait still wakes it.
            lifted.as_mut().enable();
            if !caps.holds(lease) {
                return;
            }
            lifted.await;
        }
    }
}

/// A handed lease held on arrival that its process has not yet confirmed
/// to the store ([`SessionEnds::unconfirmed`]): its session vouches for
/// its leases only until the lease's liveness bound while this lives.
///
/// [`confirmed`](Unconfirmed::confirmed) once the store has the
/// confirmation, even past the bound (the store had not freed the lease,
/// or the confirmation would have found it gone); [`withdraw`](Unconfirmed::withdraw)
/// if nobody held it after all. Dropped otherwise (the store found the
/// lease gone, or it was never confirmed), the session is lost, as if its
/// end had passed: every holder of its leases is told, the store is asked
/// to end it, and another is opened (the session's holders cannot be told
/// apart from the handed lease's).
#[derive(Debug)]
pub struct Unconfirmed {
    shared: std::sync::Weak<Shared>,
    key: u64,
    session: SessionId,
    returned: Arc<AtomicBool>,
    done: bool,
}

impl Unconfirmed {
    /// The store has the confirmation: the bound no longer applies.
    pub fn confirmed(mut self) {
        self.done = true;
        if let Some(shared) = self.shared.upgrade() {
            shared.caps.remove(|cap| cap.key == self.key);
        }
    }

    /// The lease was not held after all (nobody here took it on arrival;
    /// its borrower takes it from the store as usual): the bound no longer
    /// applies.
    pub fn withdraw(self) {
        self.confirmed();
    }
}

impl Drop for Unconfirmed {
    fn drop(&mut self) {
        if self.done || self.returned.load(Ordering::Acquire) {
            return;
        }
        let Some(shared) = self.shared.upgrade() else {
            return;
        };
        let open = shared.now.borrow().open.map(|(id, _)| id);
        if open == Some(self.session) {
            super::beat::lose(&shared, Some(self.session));
            shared.wake.notify_one();
        }
        shared.caps.remove(|cap| cap.key == self.key);
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::clock::{Clock, ManualClock};
    use crate::server_clock::DecidingClock;
    use crate::session::{Heartbeat, Session, SessionState};

    /// A store's session record that always keeps the session.
    #[derive(Debug)]
    struct Keeps(Arc<ManualClock>);

    #[async_trait::async_trait]
    impl Heartbeat for Keeps {
        async fn beat(
            &self,
            _: SessionId,
            _: Duration,
            _: bool,
        ) -> crate::Result<Option<SystemTime>> {
            Ok(Some(self.0.now()))
        }

        async fn close(&self, _: SessionId) -> crate::Result<()> {
            Ok(())
        }
    }

    async fn open() -> (Session, Arc<ManualClock>, SessionId) {
        let clock = Arc::new(ManualClock::new());
        let time = DecidingClock::Manual(clock.clone());
        let session = Session::start(
            Arc::new(Keeps(clock.clone())),
            Duration::from_secs(30),
            time,
        );
        assert!(session.opened(Duration::from_secs(5)).await);
        let id = session.current().unwrap();
        (session, clock, id)
    }

    #[tokio::test]
    async fn an_unconfirmed_lease_bounds_its_session_until_confirmed() {
        let (session, clock, id) = open().await;
        let bound = clock.now() + Duration::from_millis(200);
        let unconfirmed = session
            .ends()
            .unconfirmed(id, LeaseId::new(), bound)
            .unwrap();
        assert_eq!(session.end_of(id), Some(bound));
        assert!(session.vouches(id));
        clock.advance(Duration::from_millis(200));
        assert!(!session.vouches(id), "vouched past the bound");
        unconfirmed.confirmed();
        assert!(session.vouches(id), "a confirmation lifts the bound");
        assert_eq!(session.state(), SessionState::Connected);
    }

    #[tokio::test]
    async fn a_lease_found_gone_loses_the_session_and_a_withdrawn_one_does_not() {
        let (session, clock, id) = open().await;
        let bound = clock.now() + Duration::from_millis(200);
        session
            .ends()
            .unconfirmed(id, LeaseId::new(), bound)
            .unwrap()
            .withdraw();
        assert!(session.vouches(id));
        let ended = session.ended(id);
        drop(
            session
                .ends()
                .unconfirmed(id, LeaseId::new(), bound)
                .unwrap(),
        );
        assert!(
            !session.vouches(id),
            "the session of a lease found gone vouches"
        );
        // Its holders are told.
        tokio::time::timeout(Duration::from_secs(5), ended)
            .await
            .expect("told");
        assert!(
            session
                .ends()
                .unconfirmed(id, LeaseId::new(), bound)
                .is_none()
        );
    }

    #[tokio::test]
    async fn a_lease_its_holder_returned_loses_nothing_when_found_gone() {
        let (session, clock, id) = open().await;
        let lease = LeaseId::new();
        let bound = clock.now() + Duration::from_millis(200);
        let unconfirmed = session.ends().unconfirmed(id, lease, bound).unwrap();
        session.returning(lease);
        clock.advance(Duration::from_millis(200));
        assert!(session.vouches(id), "the bound outlived the return");
        drop(unconfirmed);
        assert!(
            session.vouches(id),
            "a lease returned and then found gone lost the session"
        );
    }

    /// Whether `future` is still pending after one poll.
    fn pending<F: std::future::Future>(future: std::pin::Pin<&mut F>) -> bool {
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        future.poll(&mut cx).is_pending()
    }

    #[tokio::test]
    async fn confirmed_waits_for_the_confirmation_or_the_loss_of_its_lease() {
        let (session, clock, id) = open().await;
        let bound = clock.now() + Duration::from_millis(200);
        let (lease, other) = (LeaseId::new(), LeaseId::new());
        // A lease never handed: at once.
        assert!(!pending(std::pin::pin!(session.confirmed(lease))));
        let unconfirmed = session.ends().unconfirmed(id, lease, bound).unwrap();
        let mut confirmed = std::pin::pin!(session.confirmed(lease));
        assert!(pending(confirmed.as_mut()), "confirmed before it landed");
        // Another lease's confirmation does not end the wait.
        session
            .ends()
            .unconfirmed(id, other, bound)
            .unwrap()
            .confirmed();
        assert!(pending(confirmed.as_mut()), "woken for another lease");
        unconfirmed.confirmed();
        assert!(!pending(confirmed.as_mut()), "still waiting once confirmed");
        // Found gone: the wait ends too (and the lease is not held).
        let unconfirmed = session.ends().unconfirmed(id, lease, bound).unwrap();
        let mut lost = std::pin::pin!(session.confirmed(lease));
        assert!(pending(lost.as_mut()));
        drop(unconfirmed);
        assert!(!pending(lost.as_mut()), "still waiting once found gone");
        assert!(!session.vouches(id));
    }
}
