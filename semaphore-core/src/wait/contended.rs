//! Which pools were contended here at the last borrow's first ask: a
//! borrower that will wait on such a pool asks the store with its place
//! from the start ([`acquire`](crate::acquire)), so that a refusal queues
//! it in the store in the same round trip, instead of asking once without
//! a place and once more with one.

use super::Changes;
use crate::id::PoolId;

/// The most pools remembered; past it the memory starts again empty (a
/// pool forgotten only costs its next waiting borrow one round trip).
const MAX_REMEMBERED: usize = 4096;

impl Changes {
    /// Whether the last borrow of `pool` in this process whose first ask
    /// was answered was refused there (it waited, or gave up).
    pub(crate) fn contended(&self, pool: PoolId) -> bool {
        self.refused.lock().contains(&pool)
    }

    /// Records how a borrow's first ask of the store for `pool` was
    /// answered: refused, or granted (which ends the contention).
    pub(crate) fn first_answered(&self, pool: PoolId, granted: bool) {
        let mut refused = self.refused.lock();
        if granted {
            refused.remove(&pool);
        } else {
            if refused.len() >= MAX_REMEMBERED {
                refused.clear();
            }
            refused.insert(pool);
        }
    }
}
