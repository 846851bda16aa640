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
//!    the borrow answers as that run did.
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
use semaphore_core::{Lease, Result};

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
    pub(crate) async fn borrow_across(
        &self,
        requests: &[BorrowRequest],
        runs: Vec<Vec<usize>>,
    ) -> Result<TryBorrowAll> {
        let asked: Vec<Vec<BorrowRequest>> = runs
            .iter()
            .map(|run| run.iter().map(|i| requests[*i].clone()).collect())
            .collect();
        let mut refused = None;
        for run in &asked {
            if let answer @ (Err(_) | Ok(TryBorrowAll::Exhausted { .. })) =
                self.borrow_on_one_slot(run, true, 0).await
            {
                // Every full run is asked, so that the borrower is queued
                // in each; the latest next expiry answers.
                refused = Some(match (refused, answer) {
                    (Some(Err(e)), _) | (_, Err(e)) => Err(e),
                    (Some(Ok(TryBorrowAll::Exhausted { next_expiry: a })), Ok(b)) => {
                        Ok(latest(a, b))
                    }
                    (_, answer) => answer,
                });
            }
        }
        if let Some(refused) = refused {
            return refused;
        }
        let mut leases: Vec<Option<Lease>> = vec![None; requests.len()];
        for (run, asked) in runs.into_iter().zip(&asked) {
            let floor = leases.iter().flatten().map(|l| l.token).max();
            match self
                .borrow_on_one_slot(asked, false, floor.unwrap_or(0))
                .await
            {
                Ok(TryBorrowAll::Granted { leases: got }) => {
                    for (i, lease) in run.into_iter().zip(got) {
                        leases[i] = Some(lease);
                    }
                }
                refused => {
                    self.give_back(&leases).await;
                    return refused;
                }
            }
        }
        Ok(TryBorrowAll::Granted {
            leases: leases.into_iter().flatten().collect(),
        })
    }

    /// Returns `leases` (a refused borrow's earlier groups), each tried
    /// twice; one that still fails is left to its ttl (or its session's
    /// end), and a later attempt under the same lease id finds it.
    async fn give_back(&self, leases: &[Option<Lease>]) {
        for lease in leases.iter().flatten() {
            for _ in 0..2 {
                if self.return_lease(lease.pool, lease.id).await.is_ok() {
                    break;
                }
            }
        }
    }
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
