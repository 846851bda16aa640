//! Model-based property tests: random sequences of operations run against a
//! store and against a plain model of the rules side by side, comparing every
//! observable result (issue "prove the invariants").
//!
//! The model is written from the rules' words, not from the library's code:
//! a list of leases per pool, active while `expires_at > now`, the
//! `n` lowest positions in `0..count` not held, granted only
//! while `in_use + n <= count` with `in_use` the slots held, tokens
//! growing per pool.
//!
//! One store serves every case; each case names fresh pools, so cases do
//! not see each other. Failing sequences are saved by proptest in the
//! calling crate's `proptest-regressions/model.txt` and replayed first.

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

use proptest::prelude::*;
use proptest::sample::Index;
use proptest::test_runner::{Config, FileFailurePersistence, TestRunner};

use super::Fixture;
use crate::{
    clock::Clock, clock::ManualClock, error::Error, id::PoolId, lease::Holder, lease::Lease,
    options::BorrowOptions, pool::Pool,
};

/// Cases per store when `PROPTEST_CASES` is not set.
pub const DEFAULT_CASES: u32 = 10_000;

const POOLS: u8 = 3;

/// One step of a sequence. `pool` is one of three pools of the case,
/// `lease` picks one of the leases granted so far in the case, times are
/// milliseconds.
#[derive(Debug, Clone)]
#[allow(missing_docs)]
pub enum Op {
    /// `register(count)`; counts above 1000 must be refused.
    Register { pool: u8, count: u32 },
    /// `borrow_with(ttl, wait 0)` of `slots` slots, with key
    /// `key-{key}` and an owner label if asked; a ttl of 0 ms and 0 slots
    /// must be refused.
    Borrow {
        pool: u8,
        slots: u32,
        ttl_ms: u64,
        key: Option<u8>,
        owner: bool,
    },
    /// `return_lease` of a lease granted earlier in the case.
    Return { lease: Index },
    /// `renew` of a lease granted earlier in the case, from the copy its
    /// holder last saw.
    Renew { lease: Index, ttl_ms: u64 },
    /// Moves the manual clock.
    Advance { ms: u64 },
    /// `delete`.
    Delete { pool: u8 },
    /// `inspect`.
    Inspect { pool: u8 },
    /// `holders`.
    Holders { pool: u8 },
    /// `force_return(position)`.
    ForceReturn { pool: u8, position: u32 },
}

fn op() -> impl Strategy<Value = Op> {
    let pool = 0..POOLS;
    prop_oneof![
        4 => (pool.clone(), 0..=4u32).prop_map(|(pool, count)| Op::Register { pool, count }),
        1 => pool.clone().prop_map(|pool| Op::Register { pool, count: 1001 }),
        8 => (pool.clone(), slots(), 0..=3000u64, proptest::option::of(0..3u8), any::<bool>())
            .prop_map(|(pool, slots, ttl_ms, key, owner)| Op::Borrow { pool, slots, ttl_ms, key, owner }),
        3 => any::<Index>().prop_map(|lease| Op::Return { lease }),
        2 => (any::<Index>(), 0..=3000u64).prop_map(|(lease, ttl_ms)| Op::Renew { lease, ttl_ms }),
        3 => (0..=2000u64).prop_map(|ms| Op::Advance { ms }),
        1 => pool.clone().prop_map(|pool| Op::Delete { pool }),
        2 => pool.clone().prop_map(|pool| Op::Inspect { pool }),
        1 => pool.clone().prop_map(|pool| Op::Holders { pool }),
        1 => (pool, 0..5u32).prop_map(|(pool, position)| Op::ForceReturn { pool, position }),
    ]
}

/// Mostly one slot, as most borrows are; sometimes 0 (refused), 2, 3 or 5
/// (above every count the model registers).
fn slots() -> impl Strategy<Value = u32> {
    prop_oneof![12 => Just(1u32), 1 => Just(0u32), 3 => 2..=3u32, 1 => Just(5u32)]
}

/// Sequences of 1 to 40 operations.
pub fn ops() -> impl Strategy<Value = Vec<Op>> {
    proptest::collection::vec(op(), 1..40)
}

/// Runs the model test against the store `make` builds: `PROPTEST_CASES`
/// cases (default [`DEFAULT_CASES`]). Failing sequences are saved to, and
/// replayed first from, the file `regressions`. Panics with the shrunk
/// failing sequence.
pub fn run_model<M, MF>(make: M, regressions: &'static str)
where
    M: FnOnce(Arc<ManualClock>) -> MF,
    MF: Future<Output = Fixture>,
{
    run_model_cases(make, regressions, DEFAULT_CASES);
}

/// [`run_model`] with `default_cases` sequences unless `PROPTEST_CASES`
/// says otherwise.
pub fn run_model_cases<M, MF>(make: M, regressions: &'static str, default_cases: u32)
where
    M: FnOnce(Arc<ManualClock>) -> MF,
    MF: Future<Output = Fixture>,
{
    // Multi-thread, so that `forget()` lands its unbinding before it returns:
    // on a current-thread runtime it runs in the background,
    // and a networked store's next grant of the sequence could find the
    // lease's row locked by it and take a higher position.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("a tokio runtime for the model test");
    let fixture = runtime.block_on(make(Arc::new(ManualClock::new())));
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default_cases);
    let config = Config {
        cases,
        failure_persistence: Some(Box::new(FileFailurePersistence::Direct(regressions))),
        ..Config::default()
    };
    let case = AtomicU64::new(0);
    let result = TestRunner::new(config).run(&ops(), |ops| {
        let n = case.fetch_add(1, Ordering::Relaxed);
        runtime.block_on(check(&fixture, n, &ops));
        Ok(())
    });
    if let Err(failure) = result {
        panic!("{failure}");
    }
}

#[derive(Debug, Clone)]
struct Held {
    lease: Lease,
    key: Option<u8>,
    owner: Option<String>,
}

#[derive(Debug, Default)]
struct Model {
    pools: HashMap<u8, (u32, Vec<Held>)>,
    /// The largest token seen per pool, across delete and register again.
    max_token: HashMap<u8, u64>,
}

impl Model {
    fn active(&mut self, pool: u8, now: SystemTime) -> Option<&mut (u32, Vec<Held>)> {
        let entry = self.pools.get_mut(&pool)?;
        entry.1.retain(|h| h.lease.expires_at > now);
        Some(entry)
    }
}

/// Slots held by `held`: `in_use` (a lease of `n` counts `n`).
fn in_use(held: &[Held]) -> u32 {
    held.iter().map(|h| h.lease.positions.len() as u32).sum()
}

fn key_name(k: u8) -> String {
    format!("key-{k}")
}

fn owner_name(pool: u8) -> String {
    format!("owner-of-{pool}")
}

/// Runs `ops` on fresh pools of case `case` and on the model, asserting
/// that every result matches.
pub async fn check(f: &Fixture, case: u64, ops: &[Op]) {
    let pools: Vec<Pool> = (0..POOLS)
        .map(|p| {
            Pool::new(
                f.store.clone(),
                PoolId::from_name(&format!("case-{case}-{p}")),
            )
        })
        .collect();
    let index = |id: PoolId| pools.iter().position(|p| p.id() == id).unwrap_or(0) as u8;
    let mut model = Model::default();
    // Every lease granted in the case, as its holder last saw it.
    let mut issued: Vec<Lease> = Vec::new();
    for (step, op) in ops.iter().enumerate() {
        let now = f.clock.now();
        let at = format!("step {step}: {op:?}");
        match *op {
            Op::Register { pool, count } => {
                let got = pools[pool as usize].register(count).await;
                if count > 1000 {
                    assert!(
                        matches!(got, Err(Error::InvalidArgument { field: "count", .. })),
                        "{at}: {got:?}"
                    );
                    continue;
                }
                let entry = model.pools.entry(pool).or_default();
                entry.0 = count;
                let in_use = model.active(pool, now).map_or(0, |e| in_use(&e.1));
                let state = got.unwrap_or_else(|e| panic!("{at}: {e:?}"));
                assert_eq!((state.count, state.in_use), (count, in_use), "{at}");
            }
            Op::Borrow {
                pool,
                slots,
                ttl_ms,
                key,
                owner,
            } => {
                let mut options = BorrowOptions::new().slots(slots);
                if let Some(k) = key {
                    options = options.key(key_name(k));
                }
                if owner {
                    options = options.owner(owner_name(pool));
                }
                let ttl = Duration::from_millis(ttl_ms);
                let got = pools[pool as usize]
                    .borrow_with(ttl, Duration::ZERO, options)
                    .await
                    .map(|g| g.forget());
                let expected = if slots == 0 {
                    Err("slots")
                } else if ttl_ms == 0 {
                    Err("ttl")
                } else if let Some((count, held)) = model.active(pool, now) {
                    let in_use = in_use(held);
                    if let Some(same) = held.iter().find(|h| key.is_some() && h.key == key) {
                        Ok(Some(same.lease.clone()))
                    } else if in_use + slots <= *count {
                        Ok(None)
                    } else {
                        Err("exhausted")
                    }
                } else {
                    Err("not found")
                };
                match (expected, got) {
                    (Err("slots"), Err(Error::InvalidArgument { field: "slots", .. })) => {}
                    (Err("ttl"), Err(Error::InvalidArgument { field: "ttl", .. })) => {}
                    (Err("exhausted"), Err(Error::Exhausted { .. })) => {}
                    (Err("not found"), Err(Error::PoolNotFound { .. })) => {}
                    (Ok(Some(same)), Ok(lease)) => assert_eq!(lease, same, "{at}: keyed"),
                    (Ok(None), Ok(lease)) => {
                        let (count, held) = model.active(pool, now).expect("checked");
                        let lowest: Vec<u32> = (0..*count)
                            .filter(|p| held.iter().all(|h| !h.lease.positions.contains(p)))
                            .take(slots as usize)
                            .collect();
                        assert_eq!(
                            &lease.positions[..],
                            &lowest[..],
                            "{at}: R6, R15 the lowest free"
                        );
                        assert_eq!(lease.position, lowest[0], "{at}: position is the lowest");
                        assert_eq!(lease.expires_at, now + ttl, "{at}: expiry");
                        held.push(Held {
                            lease: lease.clone(),
                            key,
                            owner: owner.then(|| owner_name(pool)),
                        });
                        issued.push(lease.clone());
                        let max = model.max_token.entry(pool).or_default();
                        assert!(
                            lease.token > *max,
                            "{at}: R9 token {} after {}",
                            lease.token,
                            max
                        );
                        *max = lease.token;
                    }
                    (expected, got) => panic!("{at}: expected {expected:?}, got {got:?}"),
                }
            }
            Op::Return { lease } => {
                if issued.is_empty() {
                    continue;
                }
                let lease = lease.get(&issued).clone();
                let pool = index(lease.pool);
                let got = pools[pool as usize].return_lease(lease.id).await;
                let expected = match model.active(pool, now) {
                    Some((_, held)) => match held.iter().position(|h| h.lease.id == lease.id) {
                        Some(i) => {
                            held.remove(i);
                            true
                        }
                        None => false,
                    },
                    None => false,
                };
                assert_eq!(got.ok(), Some(expected), "{at}: R8");
            }
            Op::Renew { lease, ttl_ms } => {
                if issued.is_empty() {
                    continue;
                }
                let i = lease.index(issued.len());
                let copy = issued[i].clone();
                let pool = index(copy.pool);
                let ttl = Duration::from_millis(ttl_ms);
                let got = pools[pool as usize].renew(&copy, ttl).await;
                if ttl_ms == 0 {
                    assert!(
                        matches!(got, Err(Error::InvalidArgument { field: "ttl", .. })),
                        "{at}: {got:?}"
                    );
                    continue;
                }
                let Some((_, held)) = model.active(pool, now) else {
                    assert!(
                        matches!(got, Err(Error::PoolNotFound { .. })),
                        "{at}: {got:?}"
                    );
                    continue;
                };
                match held.iter_mut().find(|h| h.lease.id == copy.id) {
                    Some(h) => {
                        // Its binding is the store's (forgotten leases are
                        // unbound in the background): not modelled.
                        let renewed = got
                            .unwrap_or_else(|e| panic!("{at}: {e:?}"))
                            .with_session(None);
                        h.lease.expires_at = now + ttl;
                        assert_eq!(
                            renewed, h.lease,
                            "{at}: same position and token, new expiry"
                        );
                        issued[i] = renewed;
                    }
                    None if copy.expires_at <= now => {
                        assert!(
                            matches!(got, Err(Error::LeaseExpired { .. })),
                            "{at}: {got:?}"
                        );
                    }
                    None => {
                        assert!(
                            matches!(got, Err(Error::LeaseNotFound { .. })),
                            "{at}: {got:?}"
                        );
                    }
                }
            }
            Op::Advance { ms } => f.clock.advance(Duration::from_millis(ms)),
            Op::Delete { pool } => {
                let existed = model.pools.remove(&pool).is_some();
                assert_eq!(
                    pools[pool as usize].delete().await.ok(),
                    Some(existed),
                    "{at}"
                );
            }
            Op::Inspect { pool } => {
                let got = pools[pool as usize].inspect().await;
                match model.active(pool, now) {
                    Some((count, held)) => {
                        let state = got.unwrap_or_else(|e| panic!("{at}: {e:?}"));
                        let in_use = in_use(held);
                        assert_eq!(
                            (state.count, state.in_use, state.available),
                            (*count, in_use, count.saturating_sub(in_use)),
                            "{at}: R3"
                        );
                    }
                    None => assert!(
                        matches!(got, Err(Error::PoolNotFound { .. })),
                        "{at}: {got:?}"
                    ),
                }
            }
            Op::Holders { pool } => {
                let got = pools[pool as usize].holders().await;
                match model.active(pool, now) {
                    Some((_, held)) => {
                        let mut expected: Vec<Holder> = held
                            .iter()
                            .map(|h| {
                                Holder::new(h.lease.clone(), h.owner.clone(), h.key.map(key_name))
                            })
                            .collect();
                        expected.sort_by_key(|h| h.lease.position);
                        assert_eq!(got.ok(), Some(expected), "{at}");
                    }
                    None => assert!(
                        matches!(got, Err(Error::PoolNotFound { .. })),
                        "{at}: {got:?}"
                    ),
                }
            }
            Op::ForceReturn { pool, position } => {
                let got = pools[pool as usize].force_return(position).await;
                match model.active(pool, now) {
                    Some((_, held)) => {
                        let ended = held
                            .iter()
                            .position(|h| h.lease.positions.contains(&position))
                            .map(|i| held.remove(i));
                        let got = got.unwrap_or_else(|e| panic!("{at}: {e:?}"));
                        assert_eq!(got.map(|h| h.lease), ended.map(|h| h.lease), "{at}");
                    }
                    None => assert!(
                        matches!(got, Err(Error::PoolNotFound { .. })),
                        "{at}: {got:?}"
                    ),
                }
            }
        }
    }
}
