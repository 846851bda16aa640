//! [`OffsetClock`]: a machine whose clock disagrees with the server's.

use std::time::{Duration, SystemTime};

use crate::{clock::Clock, clock::Sleep, clock::SystemClock};

/// The system clock, off by a fixed amount: a machine whose clock
/// disagrees with the server's, for tests.
#[derive(Debug, Clone, Copy)]
pub struct OffsetClock {
    by: Duration,
    ahead: bool,
}

impl OffsetClock {
    /// A clock `by` ahead of the system clock.
    pub fn ahead(by: Duration) -> Self {
        Self { by, ahead: true }
    }

    /// A clock `by` behind the system clock.
    pub fn behind(by: Duration) -> Self {
        Self { by, ahead: false }
    }

    fn shift(&self, t: SystemTime, forward: bool) -> SystemTime {
        if self.ahead == forward {
            t + self.by
        } else {
            t - self.by
        }
    }
}

impl Clock for OffsetClock {
    fn now(&self) -> SystemTime {
        self.shift(SystemTime::now(), true)
    }

    fn sleep_until(&self, deadline: SystemTime) -> Sleep {
        SystemClock.sleep_until(self.shift(deadline, false))
    }
}

/// rule "Time", for a store whose server's clock decides: `fast`
/// and `slow` are handles on one pool id through two stores whose process
/// clocks are 30 s ahead of and behind the server's ([`OffsetClock`]);
/// `server_now` reads the server's clock. Neither can take a live lease or
/// write one already expired, and the slow machine's waiter is served when
/// the fast machine's lease expires by the server's clock, not before.
pub async fn clocks_thirty_seconds_apart_never_over_issue_or_take_a_live_lease(
    fast: &crate::pool::Pool,
    slow: &crate::pool::Pool,
    server_now: impl AsyncFn() -> SystemTime,
) {
    fast.register(1).await.unwrap();
    // A lease taken by the slow machine is not born expired...
    let held = slow.try_borrow(Duration::from_secs(20)).await.unwrap();
    assert!(
        held.expires_at > server_now().await,
        "the slow machine wrote an expired lease"
    );
    // ...and the fast machine, for which it "expired" 10 s ago, cannot take it.
    match fast.try_borrow(Duration::from_secs(20)).await {
        Err(crate::error::Error::Exhausted { .. }) => {}
        other => panic!("the fast machine took a live lease: {other:?}"),
    }
    assert_eq!(fast.inspect().await.unwrap().in_use, 1);
    drop(held);
    super::until_in_use(fast, 0).await;

    // A short lease held by the fast machine frees itself by the server's
    // clock, and the slow machine's waiter gets it then, not before.
    let short = fast
        .try_borrow(Duration::from_millis(300))
        .await
        .unwrap()
        .forget();
    let ttl = Duration::from_secs(20);
    let next = slow.borrow(ttl, Duration::from_secs(10)).await.unwrap();
    assert_eq!(next.position, 0);
    assert!(next.token > short.token);
    let granted_at = next.expires_at - ttl;
    assert!(
        granted_at >= short.expires_at,
        "granted at {granted_at:?}, before the lease it replaced expired at {:?}",
        short.expires_at
    );
}
