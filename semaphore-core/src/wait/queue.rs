//! The wait queues' parts: a pool's [`Queue`] and its [`Waiter`]s, and
//! which waiter is the head (a waiter for more
//! slots than the count is set aside and is never the head).

use crate::sync::{AtomicBool, Ordering};
use std::collections::VecDeque;
use std::sync::Arc;
use std::time::SystemTime;

use crate::sync::Mutex;

use super::{HandOff, signal};
use crate::{id::PoolId, id::WaiterId, lease::Lease};

/// One pool's queue in this process.
#[derive(Default)]
pub(super) struct Queue {
    /// In the order they came; the head (the one waiter allowed to ask the
    /// store) is the first not set aside.
    pub(super) waiters: VecDeque<Arc<Waiter>>,
    /// The head found the pool draining and waits for the drain's end
    /// (`wait_while_draining`), or this process drained it; cleared by the
    /// next change told of. Borrowers that do not wait for a drain fail at
    /// once instead of queueing behind the head.
    pub(super) draining: bool,
    /// The count the queue was last weighed with ([`Queue::weigh`]): a
    /// waiter that joins is weighed with it, so that weighing again with
    /// the same count has nothing to change and costs nothing.
    weighed: Option<u32>,
    /// What the queue learned of its pool so far: see [`News`]. A waiter
    /// that read the count out of any change's step weighs with it only if
    /// this did not move meanwhile ([`Queue::weigh_read`]).
    pub(super) news: News,
    /// The most slots any single-pool waiter that joined asked for: no
    /// waiter is set aside while the count is at least this, so that
    /// finding one costs nothing in the common case.
    heaviest: u32,
}

/// What a queue learned of its pool so far: the sequence number of the
/// waiter that made the queue (no two queues of a process share one, so
/// that a count read while an earlier queue of the pool stood, since
/// removed, is never taken for news of the queue now), and how many
/// changes it learned of since: counts it was weighed with that changed
/// the count weighed, and changes told of
/// ([`Changes::notify`](super::Changes::notify)).
pub(super) type News = (u64, u64);

/// One queued borrower, as its queues see it.
pub(super) struct Waiter {
    pub(super) notify: signal::Signal,
    /// What to grant it in a hand-off; `None` for a multi-pool borrower,
    /// which only the store's all-or-nothing step may serve.
    pub(super) request: Option<HandOff>,
    /// Set by hand-offs under the queues' lock; taken by the ticket.
    pub(super) state: Mutex<Handed>,
    /// Still in its queues; cleared (under the queues' lock) when a
    /// hand-off takes it out.
    pub(super) queued: AtomicBool,
    /// When it joined its queues, by the store's clock.
    pub(super) since: SystemTime,
    /// Its sequence number among every waiter that joined, from 1.
    pub(super) seq: u64,
    /// It fails when its pool drains (not `wait_while_draining`): woken by
    /// [`Changes::found_draining`](super::Changes::found_draining).
    pub(super) leaves_on_drain: bool,
    /// Its id as the store's queue knows it, made when first needed:
    /// by its first attempt from the queue, or by a [`Claim`](super::Claim).
    pub(super) id: std::sync::OnceLock<WaiterId>,
    /// Its weight was above the pool's count when last weighed
    /// ([`Changes::weigh`](super::Changes::weigh)): it keeps its place but is not the head.
    /// Changed under the queues' lock.
    pub(super) aside: AtomicBool,
}

/// What a hand-off left a waiter.
#[derive(Default)]
pub(super) struct Handed {
    /// The lease granted to it.
    pub(super) lease: Option<Lease>,
    /// It became the head of a pool that a hand-off left full: the
    /// earliest expiry then (`Some(None)`: no lease will expire), so that
    /// it can set its timer without asking the store. A plain change clears
    /// it: the head must then ask.
    pub(super) next_expiry: Option<Option<SystemTime>>,
    /// A store call of its own is in flight: no claim names it.
    pub(super) asking: bool,
    /// A return's claim in flight names it to the store
    /// ([`Changes::claim_head`](super::Changes::claim_head)): it does not ask the store until that
    /// claim delivers a lease or lets go.
    pub(super) claimed: bool,
    /// It asked the store: the store's queue may hold a place of its.
    pub(super) asked: bool,
    /// A claim delivered it a lease that the claim's step granted after it
    /// had asked: a place of its may be left in the store's queue (the
    /// step ended only the named borrower's), which its ticket's place
    /// then leaves.
    pub(super) leave_place: bool,
    /// The pool its queue's head found draining, for it to fail with
    /// ([`Changes::found_draining`](super::Changes::found_draining)).
    pub(super) drained: Option<PoolId>,
}

impl Waiter {
    /// Whether it is set aside: see [`Changes::weigh`](super::Changes::weigh).
    pub(super) fn is_aside(&self) -> bool {
        self.aside.load(Ordering::Acquire)
    }

    /// Wakes it to ask the store: anything it was told of the pool's
    /// expiry may be stale.
    pub(super) fn wake_to_ask(&self) {
        self.state.lock().next_expiry = None;
        self.notify.notify_one();
    }
}

impl Queue {
    /// An empty queue, made for the waiter with sequence number `seq`.
    pub(super) fn made_by(seq: u64) -> Self {
        Self {
            news: (seq, 0),
            ..Self::default()
        }
    }

    /// The queue learned of a change of its pool.
    pub(super) fn learned(&mut self) {
        self.news.1 += 1;
    }

    /// A change of its pool was told of ([`Changes::notify`]): a drain
    /// it found may be over, it learned of it, and its head is woken.
    ///
    /// [`Changes::notify`]: super::Changes::notify
    pub(super) fn told(&mut self) {
        self.draining = false;
        self.learned();
        self.notify_head();
    }

    /// Where the head is: the first waiter not set aside.
    pub(super) fn head_index(&self) -> Option<usize> {
        self.waiters.iter().position(|w| !w.is_aside())
    }

    /// The head: the one waiter allowed to ask the store.
    pub(super) fn head(&self) -> Option<&Arc<Waiter>> {
        self.waiters.iter().find(|w| !w.is_aside())
    }

    /// Wakes the head to ask the store, and the first waiter set aside to
    /// check the count for all of them.
    pub(super) fn notify_head(&self) {
        if let Some(head) = self.head() {
            head.wake_to_ask();
        }
        if let Some(aside) = self.first_aside() {
            aside.notify.notify_one();
        }
    }

    /// The first waiter set aside, if any; without a look at the waiters
    /// when none can be (no waiter asks for more than the count weighed).
    fn first_aside(&self) -> Option<&Arc<Waiter>> {
        if self.weighed.is_none_or(|count| self.heaviest <= count) {
            return None;
        }
        self.waiters.iter().find(|w| w.is_aside())
    }

    /// Weighs with `count`, read out of any change's step by a waiter that
    /// saw [`news`](Queue::news) at `seen` before it read, unless the queue
    /// learned of a change meanwhile: the read may be older than that
    /// change. Weighing with it could set aside again a waiter that a raise
    /// of the count let back, so that those queued after it overtake it.
    /// The change itself was weighed in its step, or woke
    /// the waiters that check the count, who read it again.
    pub(super) fn weigh_read(&mut self, count: u32, seen: News) {
        if self.news == seen {
            self.weigh(count);
        }
    }

    /// Adds `waiter` at the tail, weighed with the count last weighed.
    pub(super) fn join(&mut self, waiter: Arc<Waiter>) {
        if let Some(asked) = &waiter.request {
            self.heaviest = self.heaviest.max(asked.slots);
            if let Some(count) = self.weighed {
                waiter.aside.store(asked.slots > count, Ordering::Release);
            }
        }
        self.waiters.push_back(waiter);
    }

    /// See [`Changes::weigh`](super::Changes::weigh); under the queues'
    /// lock. A count the queue was last weighed with changes nothing (the
    /// waiters that joined since were weighed with it), so only a change
    /// of the count looks at every waiter.
    pub(super) fn weigh(&mut self, count: u32) {
        if self.weighed == Some(count) {
            return;
        }
        self.weighed = Some(count);
        self.learned();
        let head = self.head().cloned();
        for waiter in &self.waiters {
            if let Some(asked) = &waiter.request {
                waiter.aside.store(asked.slots > count, Ordering::Release);
            }
        }
        if let Some(now) = self.head()
            && !head.is_some_and(|head| Arc::ptr_eq(&head, now))
        {
            now.wake_to_ask();
        }
    }
}
