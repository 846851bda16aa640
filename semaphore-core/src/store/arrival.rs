//! A handed slot held on arrival (rule "A handed slot is held on
//! arrival"), for a store whose return hands a freed slot to the head of
//! its own shared queue and tells the head's process in a message: the
//! message carries the lease, the head holds it from the message's
//! arrival, and the store confirms it in the background ([`Handed`]).

use std::future::Future;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::id::{LeaseId, PoolId, SessionId, WaiterId};
use crate::lease::Lease;
use crate::server_clock::DecidingClock;
use crate::session::SessionEnds;
use crate::wait::Changes;

/// The first pause before a failed confirmation is sent again; it doubles
/// up to 50 ms.
const RETRY_FIRST: Duration = Duration::from_millis(5);

/// A bound lease that a return handed to a queued head, as the message
/// that tells the head's process of it carries it.
///
/// The message's text after its `g:` is
/// `<head>:<pool>:<lease>:<position>:<token>:<expiry>:<bound>:<session>`
/// (ids as UUIDs, times in unix ms on the deciding clock): the head's
/// waiter id, the lease, its expiry as its holder may count it, and its
/// liveness bound, the latest instant the store may free it before the
/// head's process confirms it. [`Handed::parse`] reads it, a store's
/// script or function writes it.
#[derive(Debug, Clone)]
pub struct Handed {
    /// The queued head the lease was handed to.
    pub waiter: WaiterId,
    /// The lease, bound to the head's session.
    pub lease: Lease,
    /// The latest instant the store may free the lease unconfirmed.
    pub bound: SystemTime,
}

impl Handed {
    /// Reads a hand-off message's text after its `g:` (see [`Handed`]);
    /// `None` if it does not carry a whole lease (a message of an earlier
    /// version, or for an unbound lease, names only the head and the pool).
    pub fn parse(text: &str) -> Option<Handed> {
        let mut fields = text.split(':');
        let mut uuid = || fields.next()?.parse::<uuid::Uuid>().ok();
        let (waiter, pool, id) = (uuid()?, uuid()?, uuid()?);
        let mut number = || fields.next()?.parse::<u64>().ok();
        let (position, token, expiry, bound) = (number()?, number()?, number()?, number()?);
        let session = fields.next()?.parse::<uuid::Uuid>().ok()?;
        let at = |ms: u64| UNIX_EPOCH + Duration::from_millis(ms);
        let lease = Lease::new(
            LeaseId::from_uuid(id),
            PoolId::from_uuid(pool),
            u32::try_from(position).ok()?,
            token,
            at(expiry),
        )
        .with_session(Some(SessionId::from_uuid(session)));
        Some(Handed {
            waiter: WaiterId::from_uuid(waiter),
            lease,
            bound: at(bound),
        })
    }

    /// Gives the lease to its head if it waits in this process and can
    /// take it now ([`Changes::arrived`]), with its session bounded
    /// ([`SessionEnds::unconfirmed`]) until `confirm` says the store has
    /// the confirmation; whether it did. `confirm` is spawned on the
    /// current tokio runtime and called again after each failure (5 ms,
    /// doubling to 50 ms) until it answers or the lease's expiry passes on
    /// `time`'s clock: `Ok(true)` lifts the bound; `Ok(false)` (the store
    /// found the lease gone) or no answer by the expiry loses the session,
    /// so that every holder of its leases is told. When it did not, the
    /// head, if it waits here, is woken to take the lease at its next look
    /// ([`Changes::notify_waiter`]).
    pub fn hold<C, F>(
        self,
        changes: &Changes,
        ends: Option<&SessionEnds>,
        time: &DecidingClock,
        mut confirm: C,
    ) -> bool
    where
        C: FnMut() -> F + Send + 'static,
        F: Future<Output = crate::Result<bool>> + Send,
    {
        let (pool, waiter, expiry) = (self.lease.pool, self.waiter, self.lease.expires_at);
        // Not held here: the head, if it waits here, takes it at its look.
        let look = || {
            changes.notify_waiter(pool, waiter);
            false
        };
        // Arrived after its bound (a return committed late, a process
        // paused): the store may have freed it.
        if time.clock().now() >= self.bound {
            return look();
        }
        #[cfg(feature = "fault-mutants")]
        if crate::mutant::planted(crate::mutant::Mutant::HandedUnconfirmed) {
            return changes.arrived(pool, waiter, self.lease).is_ok() || look();
        }
        // The bound first: the holder must never see its session vouch
        // past it while the lease is unconfirmed.
        let unconfirmed = self
            .lease
            .session
            .zip(ends)
            .and_then(|(session, ends)| ends.unconfirmed(session, self.lease.id, self.bound));
        let Some(unconfirmed) = unconfirmed else {
            return look();
        };
        if changes.arrived(pool, waiter, self.lease).is_err() {
            unconfirmed.withdraw();
            return look();
        }
        let time = time.clone();
        tokio::spawn(async move {
            let attempts = async {
                let mut backoff = RETRY_FIRST;
                loop {
                    match confirm().await {
                        Ok(confirmed) => return confirmed,
                        Err(_) => {
                            tokio::time::sleep(backoff).await;
                            backoff = (backoff * 2).min(Duration::from_millis(50));
                        }
                    }
                }
            };
            let confirmed = tokio::select! {
                confirmed = attempts => confirmed,
                () = time.clock().sleep_until(expiry) => false,
            };
            if confirmed {
                unconfirmed.confirmed();
            }
        });
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hand_off_message_reads_back() {
        let (waiter, pool, lease, session) = (
            uuid::Uuid::new_v4(),
            uuid::Uuid::new_v4(),
            uuid::Uuid::new_v4(),
            uuid::Uuid::new_v4(),
        );
        let text = format!(
            "{waiter}:{pool}:{lease}:3:1764000000000001:1764000030000:1764000000200:{session}"
        );
        let handed = Handed::parse(&text).expect("a whole lease");
        assert_eq!(handed.waiter, WaiterId::from_uuid(waiter));
        assert_eq!(handed.lease.pool, PoolId::from_uuid(pool));
        assert_eq!(handed.lease.id, LeaseId::from_uuid(lease));
        assert_eq!(handed.lease.position, 3);
        assert_eq!(handed.lease.token, 1_764_000_000_000_001);
        assert_eq!(
            handed.lease.expires_at,
            UNIX_EPOCH + Duration::from_millis(1_764_000_030_000)
        );
        assert_eq!(
            handed.bound,
            UNIX_EPOCH + Duration::from_millis(1_764_000_000_200)
        );
        assert_eq!(handed.lease.session, Some(SessionId::from_uuid(session)));
        // A message that names the head and the pool alone.
        assert!(Handed::parse(&format!("{waiter}:{pool}")).is_none());
        assert!(Handed::parse(&format!("{waiter}:{pool}:{lease}:x:1:2:3:{session}")).is_none());
    }
}
