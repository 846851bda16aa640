//! A handed slot held on arrival (rule "A handed slot is held on arrival"):
//! a return that hands its slot to a queued head of this store (`hand_on`
//! in the scripts) publishes the lease itself on the store's own channel;
//! the head holds it from the message's arrival, without a look, and the
//! store confirms it to the server in the background. Until the
//! confirmation lands, the server may free the lease at its liveness bound
//! (the head's place lapsing, or 200 ms after the hand-off if the head's
//! connection is gone), so the lease's session vouches only until then
//! ([`SessionEnds::unconfirmed`]); a confirmation that finds the lease
//! gone, or does not land in time, loses the session, and every holder of
//! its leases is told.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use semaphore_core::store::{Changes, DecidingClock, SessionEnds, Unconfirmed, WAITER_TTL_MS};
use semaphore_core::{Lease, LeaseId, PoolId, SessionId, store::WaiterId};

use crate::scripts::{self, Common, Kind};
use crate::slots::Place;
use crate::{Connection, keys};

/// The longest the server keeps a handed lease that its head's process
/// has not confirmed, if that process's connection is gone: the scripts'
/// `UNTAKEN_MS`. Sooner if the head's place lapses first.
pub(crate) const HANDED_BOUND: Duration = Duration::from_millis(200);

/// The first pause before a failed confirmation is sent again.
const RETRY_FIRST: Duration = Duration::from_millis(5);

/// What confirming a lease needs: the store's connection and the shape of
/// its scripts' calls (one server: the store's own channel is there).
#[derive(Debug, Clone)]
pub(crate) struct Arrivals {
    pub(crate) connection: Connection,
    pub(crate) prefix: String,
    pub(crate) time: DecidingClock,
}

/// A handed lease as its message tells of it: `g:<head>:<pool>:<lease
/// id>:<position>:<token>:<expiry>:<bound>:<session>` (times in unix ms
/// on the server's clock).
pub(crate) struct Handed {
    pub(crate) waiter: WaiterId,
    pub(crate) lease: Lease,
    /// The latest instant the server may free the lease untaken.
    pub(crate) bound: SystemTime,
}

/// Parses the fields after the pool's id of a `g:` message; `None` for a
/// message without the lease (one for an unbound lease, or from an
/// earlier version of the scripts) or one that does not parse.
pub(crate) fn parse(waiter: WaiterId, pool: PoolId, rest: &str) -> Option<Handed> {
    let mut fields = rest.split(':');
    let id = fields.next()?.parse::<uuid::Uuid>().ok()?;
    let position = fields.next()?.parse::<u32>().ok()?;
    let token = fields.next()?.parse::<u64>().ok()?;
    let expiry = fields.next()?.parse::<u64>().ok()?;
    let bound = fields.next()?.parse::<u64>().ok()?;
    let session = fields.next()?.parse::<uuid::Uuid>().ok()?;
    let at = |ms: u64| UNIX_EPOCH + Duration::from_millis(ms);
    let lease = Lease::new(LeaseId::from_uuid(id), pool, position, token, at(expiry))
        .with_session(Some(SessionId::from_uuid(session)));
    Some(Handed {
        waiter,
        lease,
        bound: at(bound),
    })
}

impl Arrivals {
    /// Gives `handed` to its borrower if it waits here and can take it
    /// now, bounding its session until the confirmation lands; whether it
    /// did. Otherwise the borrower is told, and takes the lease at its
    /// next look.
    pub(crate) fn deliver(
        &self,
        changes: &Changes,
        ends: Option<&SessionEnds>,
        handed: Handed,
    ) -> bool {
        let (pool, id, expiry) = (handed.lease.pool, handed.lease.id, handed.lease.expires_at);
        let Some(session) = handed.lease.session else {
            return false;
        };
        // Bound first: the holder must never see its session vouch past
        // the bound while the lease is unconfirmed.
        let Some(unconfirmed) = ends.and_then(|ends| ends.unconfirmed(session, handed.bound))
        else {
            return false;
        };
        if changes.arrived(pool, handed.waiter, handed.lease).is_err() {
            unconfirmed.withdraw();
            return false;
        }
        tokio::spawn(self.clone().confirm(pool, id, expiry, unconfirmed));
        true
    }

    /// Confirms lease `id` of `pool` to the server, again after each
    /// failure, until the lease's expiry: confirmed (even past the bound:
    /// the server had not freed it), the bound is lifted; found gone, or
    /// never confirmed, the session is lost (dropping `unconfirmed`).
    async fn confirm(
        self,
        pool: PoolId,
        id: LeaseId,
        expiry: SystemTime,
        unconfirmed: Unconfirmed,
    ) {
        let clock = self.time.clock();
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
        call.arg(id.to_string());
        let mut backoff = RETRY_FIRST;
        let attempts = async {
            loop {
                let mut connection = self.connection.clone();
                match call.invoke_async(&mut connection).await {
                    Ok(redis::Value::Int(1)) => return true,
                    Ok(_) => return false,
                    Err(_) => {
                        tokio::time::sleep(backoff).await;
                        backoff = (backoff * 2).min(Duration::from_millis(50));
                    }
                }
            }
        };
        let confirmed = tokio::select! {
            confirmed = attempts => confirmed,
            () = clock.sleep_until(expiry) => false,
        };
        if confirmed {
            unconfirmed.confirmed();
        }
    }
}
