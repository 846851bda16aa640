//! A handed slot held on arrival (rule "A handed slot is held on arrival"):
//! a return that hands its slot to a queued head of this store (`hand_on`
//! in the scripts) publishes the lease itself on the store's own channel;
//! the head holds it from the message's arrival, without a look, and the
//! store confirms it in the background ([`Handed::hold`]). Until the
//! confirmation lands, the server may free the lease at its liveness bound
//! (the head's place lapsing, or [`HANDED_BOUND`] after the hand-off if
//! the head's connection is gone), which the message carries.

use std::time::Duration;

use semaphore_core::store::{Changes, DecidingClock, Handed, SessionEnds, WAITER_TTL_MS, WaiterId};
use semaphore_core::{LeaseId, PoolId};

use crate::scripts::{self, Common, Kind};
use crate::slots::Place;
use crate::{Connection, keys};

/// The longest the server keeps a handed lease that its head's process
/// has not confirmed, if that process's connection is gone: the scripts'
/// `UNTAKEN_MS`. Sooner if the head's place lapses first.
pub(crate) const HANDED_BOUND: Duration = Duration::from_millis(200);

/// What confirming a lease needs: the store's connection and the shape of
/// its scripts' calls (one server: the store's own channel is there).
#[derive(Debug, Clone)]
pub(crate) struct Arrivals {
    pub(crate) connection: Connection,
    pub(crate) prefix: String,
    pub(crate) time: DecidingClock,
}

impl Arrivals {
    /// Holds `handed` for its head if it waits here (see [`Handed::hold`]),
    /// confirming it with the scripts' `confirm`.
    pub(crate) fn hold(&self, changes: &Changes, ends: Option<&SessionEnds>, handed: Handed) {
        let (pool, id, head) = (handed.lease.pool, handed.lease.id, handed.waiter);
        let this = self.clone();
        handed.hold(changes, ends, &self.time, move || {
            let this = this.clone();
            async move { this.confirm(pool, id, head).await }
        });
    }

    /// One `confirm` call: whether lease `id` of `pool`, handed to `head`,
    /// was active, and is now taken (if not, `head`'s place goes).
    async fn confirm(
        &self,
        pool: PoolId,
        id: LeaseId,
        head: WaiterId,
    ) -> semaphore_core::Result<bool> {
        let place = Place::server(&self.prefix);
        let common = Common {
            time: &self.time,
            waiter_ttl_ms: WAITER_TTL_MS,
            place: &place,
            // No grant: the restart grace is not read.
            grace_ms: 0,
        };
        let mut call = scripts::invocation(
            Kind::Shrink,
            "confirm",
            keys::of(&self.prefix, pool),
            &common,
        );
        call.arg(id.to_string()).arg(head.as_uuid().to_string());
        let answer = call
            .invoke_async(&mut self.connection.clone())
            .await
            .map_err(crate::error::storage("confirm"))?;
        Ok(crate::reply::int("confirm", &answer)? == 1)
    }
}
