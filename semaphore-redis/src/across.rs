//! A borrow of several pools on several hash slots of a Redis Cluster
//! ([`PoolSet`](semaphore_core::PoolSet)): a script runs on one slot, so
//! one script cannot take them all.
//!
//! The protocol, all or nothing for the borrower:
//! 1. The requests (in the set's order, pool id order: the same for
//!    every borrower) are cut into runs of consecutive pools on one hash
//!    slot; each run is one script, all or nothing within it.
//! 2. **Check**: each run is asked, in order, whether it has room, without
//!    taking anything; a run without room queues the borrower in its full
//!    pools, as a one-slot refusal does. If any run has no room, the borrow
//!    is refused having taken nothing.
//! 3. **Take**: the runs are taken in order. If one is refused now (another
//!    borrower took the room between the check and the take) or its call
//!    fails, the leases of the runs taken before are returned at once, and
//!    the borrow answers as that run did. Only leases under this borrow's
//!    own lease ids are returned (one answered through an idempotency key
//!    belongs to the borrow that took it), and those a check found already
//!    held under them (a retry after a lost reply) are returned too on a
//!    refusal.
//!
//! What another borrower can observe: a refusal takes nothing, except in
//! the race of step 3, where the earlier runs' slots are held for one
//! round trip per later run by leases that are then returned (their tokens
//! are spent). Tokens grow in the set's order: each run's are above the
//! last of the runs taken before it. No borrower waits on a slot held by one
//! that waits, so opposite orders cannot deadlock. A set borrow costs two
//! round trips per run; to borrow several pools in one atomic step, put
//! them on one hash slot.

use semaphore_core::store::{BorrowRequest, Store, TryBorrowAll};
use semaphore_core::{Lease, LeaseId, PoolId, Result};

use crate::RedisStore;

/// The indices of `requests` in runs of consecutive pools on one hash
/// slot, if the store is on a cluster and there is more than one run.
pub(crate) fn by_slot(store: &RedisStore, requests: &[BorrowRequest]) -> Option<Vec<Vec<usize>>> {
    if !store.is_cluster() {
        return None;
    }
    let mut runs: Vec<(u16, Vec<usize>)> = Vec::new();
    for (i, request) in requests.iter().enumerate() {
        let slot = store.hash_slot(request.pool);
        match runs.last_mut() {
            Some((last, run)) if *last == slot => run.push(i),
            _ => runs.push((slot, vec![i])),
        }
    }
    (runs.len() > 1).then(|| runs.into_iter().map(|(_, run)| run).collect())
}

impl RedisStore {
    /// Borrows `requests` run by run (`runs`: their indices), checking
    /// every run before taking any, and giving back what was taken if a
    /// run is refused or fails.
    ///
    /// Given back are the leases under this borrow's own lease ids only:
    /// one answered through an idempotency key is another borrow's. A
    /// check that finds a lease already held under its own id (a retry
    /// after a lost reply) gives it back too if the borrow is refused, and
    /// a run whose take failed has its own ids returned (it may have
    /// granted), so that no lease is left to nobody for its ttl.
    pub(crate) async fn borrow_across(
        &self,
        requests: &[BorrowRequest],
        runs: Vec<Vec<usize>>,
    ) -> Result<TryBorrowAll> {
        let asked: Vec<Vec<BorrowRequest>> = runs
            .iter()
            .map(|run| run.iter().map(|i| requests[*i].clone()).collect())
            .collect();
        let mut found = Vec::new();
        let mut refused = None;
        for run in &asked {
            match self.borrow_on_one_slot(run, true, 0).await {
                Ok(TryBorrowAll::Granted { leases }) => found.extend(own(run, &leases)),
                // Every full run is asked, so that the borrower is queued
                // in each; the latest next expiry answers.
                answer => {
                    refused = Some(match (refused, answer) {
                        (Some(Err(e)), _) | (_, Err(e)) => Err(e),
                        (Some(Ok(TryBorrowAll::Exhausted { next_expiry: a })), Ok(b)) => {
                            Ok(latest(a, b))
                        }
                        (_, answer) => answer,
                    });
                }
            }
        }
        if let Some(refused) = refused {
            self.give_back(&found).await;
            return refused;
        }
        let mut leases: Vec<Option<Lease>> = vec![None; requests.len()];
        let mut taken = Vec::new();
        for (run, asked) in runs.into_iter().zip(&asked) {
            let floor = leases.iter().flatten().map(|l| l.token).max();
            match self
                .borrow_on_one_slot(asked, false, floor.unwrap_or(0))
                .await
            {
                Ok(TryBorrowAll::Granted { leases: got }) => {
                    taken.extend(own(asked, &got));
                    for (i, lease) in run.into_iter().zip(got) {
                        leases[i] = Some(lease);
                    }
                }
                refused => {
                    if refused.is_err() {
                        taken.extend(asked.iter().map(|r| (r.pool, r.lease)));
                    }
                    self.give_back(&taken).await;
                    return refused;
                }
            }
        }
        Ok(TryBorrowAll::Granted {
            leases: leases.into_iter().flatten().collect(),
        })
    }

    /// Returns `leases` (pool and lease id), each tried twice; one that
    /// still fails is left to its ttl (or its session's end).
    async fn give_back(&self, leases: &[(PoolId, LeaseId)]) {
        for (pool, lease) in leases {
            for _ in 0..2 {
                if self.return_lease(*pool, *lease).await.is_ok() {
                    break;
                }
            }
        }
    }
}

/// The leases among `leases` (answers to `asked`) held under the lease ids
/// `asked` gave: this borrow's own, not another's found by its key.
fn own(asked: &[BorrowRequest], leases: &[Lease]) -> Vec<(PoolId, LeaseId)> {
    leases
        .iter()
        .filter(|l| asked.iter().any(|r| r.lease == l.id && r.pool == l.pool))
        .map(|l| (l.pool, l.id))
        .collect()
}

/// The later of two refusals' next expiries (`None`, no expiry to wait
/// for, wins), with `b` a refusal.
fn latest(a: Option<std::time::SystemTime>, b: TryBorrowAll) -> TryBorrowAll {
    let TryBorrowAll::Exhausted { next_expiry: b } = b else {
        return b;
    };
    TryBorrowAll::Exhausted {
        next_expiry: a.zip(b).map(|(a, b)| a.max(b)),
    }
}
