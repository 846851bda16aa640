//! The slot table against the reference rules.
use super::*;
use crate::{id::PoolId, id::WaiterId};
use std::time::{Duration, UNIX_EPOCH};

fn req(ttl_s: u64) -> BorrowRequest {
    BorrowRequest::new(
        PoolId::from_name("t"),
        LeaseId::new(),
        Duration::from_secs(ttl_s),
    )
}

fn position(t: TryBorrow) -> u32 {
    match t {
        TryBorrow::Granted { lease, .. } => lease.position,
        other => panic!("expected a grant, got {other:?}"),
    }
}

#[test]
fn grants_lowest_free_and_reuses_returned() {
    let mut t = SlotTable::new(3);
    let mut tok = 0;
    let mut next = || {
        tok += 1;
        tok
    };
    let a = req(10);
    assert_eq!(position(t.grant(&a, UNIX_EPOCH, &mut next)), 0);
    assert_eq!(position(t.grant(&req(10), UNIX_EPOCH, &mut next)), 1);
    assert!(t.release(a.lease, UNIX_EPOCH));
    assert_eq!(position(t.grant(&req(10), UNIX_EPOCH, &mut next)), 0);
    assert_eq!(position(t.grant(&req(10), UNIX_EPOCH, &mut next)), 2);
    assert!(matches!(
        t.grant(&req(10), UNIX_EPOCH, &mut next),
        TryBorrow::Exhausted { .. }
    ));
}

#[test]
fn expired_slot_is_reaped_and_handed_out_next() {
    let mut t = SlotTable::new(2);
    let short = req(1);
    assert_eq!(position(t.grant(&short, UNIX_EPOCH, || 1)), 0);
    assert_eq!(position(t.grant(&req(10), UNIX_EPOCH, || 2)), 1);
    assert_eq!(t.in_use(UNIX_EPOCH + Duration::from_secs(1)), 1);
    assert!(!t.release(short.lease, UNIX_EPOCH + Duration::from_secs(1)));
    assert_eq!(
        position(t.grant(&req(10), UNIX_EPOCH + Duration::from_secs(1), || 3)),
        0
    );
}

#[test]
fn lowered_count_withholds_high_positions() {
    let mut t = SlotTable::new(4);
    let held: Vec<_> = (0..4)
        .map(|i| {
            let r = req(10);
            assert_eq!(position(t.grant(&r, UNIX_EPOCH, || i)), i as u32);
            r
        })
        .collect();
    t.set_count(2);
    t.release(held[3].lease, UNIX_EPOCH);
    t.release(held[0].lease, UNIX_EPOCH);
    // in_use 2 (positions 1, 2) == count 2: nothing is granted.
    assert!(matches!(
        t.grant(&req(10), UNIX_EPOCH, || 9),
        TryBorrow::Exhausted { .. }
    ));
    t.release(held[2].lease, UNIX_EPOCH);
    assert_eq!(position(t.grant(&req(10), UNIX_EPOCH, || 9)), 0);
    t.set_count(4);
    assert_eq!(position(t.grant(&req(10), UNIX_EPOCH, || 10)), 2);
    assert_eq!(position(t.grant(&req(10), UNIX_EPOCH, || 11)), 3);
}

#[test]
fn agrees_with_reference_across_bitset_words_and_count_changes() {
    let mut count = 200;
    let mut t = SlotTable::new(count);
    let mut held: Vec<(LeaseId, u32)> = Vec::new();
    let mut x: u64 = 0x853c_49e6_748f_ea9b;
    for step in 0..20_000u64 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        match x % 5 {
            0 if !held.is_empty() => {
                let (id, _) = held.swap_remove((x as usize / 5) % held.len());
                assert!(t.release(id, UNIX_EPOCH));
            }
            1 if step % 97 == 0 => {
                // Across word boundaries: 63, 64, 65, 127, 128, ...
                count = [0, 1, 63, 64, 65, 127, 128, 129, 200][(x as usize / 5) % 9];
                t.set_count(count);
            }
            _ => {
                let expected = ((held.len() as u32) < count)
                    .then(|| lowest_free(count, held.iter().map(|h| h.1)))
                    .flatten();
                let r = req(10);
                match (t.grant(&r, UNIX_EPOCH, || step), expected) {
                    (TryBorrow::Granted { lease, .. }, Some(p)) => {
                        assert_eq!(lease.position, p, "step {step}, count {count}");
                        held.push((r.lease, p));
                    }
                    (TryBorrow::Exhausted { .. }, None) => {}
                    (got, want) => panic!("step {step}: got {got:?}, reference {want:?}"),
                }
            }
        }
    }
}

/// registering a huge count allocates nothing per
/// slot; what is allocated follows the most leases held at once.
#[test]
fn memory_follows_leases_held_not_count() {
    let mut t = SlotTable::new(u32::MAX);
    assert_eq!((t.slots.capacity(), t.free.words()), (0, 0));
    let leases: Vec<_> = (0..200)
        .map(|i| {
            let r = req(10);
            assert_eq!(position(t.grant(&r, UNIX_EPOCH, || i)), i as u32);
            r.lease
        })
        .collect();
    assert_eq!(t.slots.len(), 200);
    assert!(t.slots.capacity() <= 256 && t.free.words() <= 4);
    assert!(t.release(leases[3], UNIX_EPOCH));
    assert_eq!(
        position(t.grant(&req(10), UNIX_EPOCH, || 300)),
        3,
        "a gap is reused first"
    );
    for id in &leases[4..] {
        assert!(t.release(*id, UNIX_EPOCH));
    }
    assert_eq!(t.slots.len(), 4, "the high mark came down with the leases");
    assert!(t.free.len() <= 1);
    t.set_count(2);
    assert_eq!(t.in_use(UNIX_EPOCH), 4);
    assert!(matches!(
        t.grant(&req(10), UNIX_EPOCH, || 9),
        TryBorrow::Exhausted { .. }
    ));
}

/// Weighted grants agree with `lowest_free_n` and the
/// `in_use + n <= count` rule across bitset words, count changes,
/// returns and forced returns from any position of a lease.
#[test]
fn weighted_grants_agree_with_reference() {
    let mut count = 130;
    let mut t = SlotTable::new(count);
    let mut held: Vec<(LeaseId, Vec<u32>)> = Vec::new();
    let mut x: u64 = 0x2545_f491_4f6c_dd1d;
    for step in 0..20_000u64 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let in_use: u32 = held.iter().map(|h| h.1.len() as u32).sum();
        assert_eq!(t.in_use(UNIX_EPOCH), in_use, "step {step}");
        match x % 7 {
            0 | 1 if !held.is_empty() => {
                let (id, _) = held.swap_remove((x as usize / 7) % held.len());
                assert!(t.release(id, UNIX_EPOCH));
            }
            2 if !held.is_empty() => {
                let i = (x as usize / 7) % held.len();
                let at = held[i].1[(x as usize / 11) % held[i].1.len()];
                let ended = t.force_return(PoolId::from_name("t"), at, UNIX_EPOCH);
                assert_eq!(ended.map(|h| h.lease.id), Some(held[i].0));
                held.swap_remove(i);
            }
            3 if step % 89 == 0 => {
                count = [0, 3, 63, 64, 65, 128, 130][(x as usize / 7) % 7];
                t.set_count(count);
            }
            _ => {
                let n = [1, 1, 2, 3, 7, 70][(x as usize / 7) % 6];
                let all = held.iter().flat_map(|h| h.1.iter().copied());
                let expected = (in_use + n <= count)
                    .then(|| lowest_free_n(count, all, n))
                    .flatten();
                let mut r = req(10);
                r.slots = n;
                match (t.grant(&r, UNIX_EPOCH, || step), expected) {
                    (TryBorrow::Granted { lease }, Some(p)) => {
                        assert_eq!(lease.positions, p, "step {step}, count {count}");
                        held.push((r.lease, p.to_vec()));
                    }
                    (TryBorrow::Exhausted { .. }, None) => {}
                    (got, want) => panic!("step {step}: got {got:?}, reference {want:?}"),
                }
            }
        }
    }
}

#[test]
fn agrees_with_reference_on_a_long_mixed_run() {
    // A deterministic pseudo-random walk, checked against lowest_free.
    let mut t = SlotTable::new(8);
    let mut held: Vec<(LeaseId, u32)> = Vec::new();
    let mut x: u64 = 0x9e3779b97f4a7c15;
    for step in 0..5_000u64 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        if x.is_multiple_of(3) && !held.is_empty() {
            let (id, _) = held.swap_remove((x as usize / 3) % held.len());
            assert!(t.release(id, UNIX_EPOCH));
        } else {
            let expected = lowest_free(8, held.iter().map(|h| h.1));
            let r = req(10);
            match (t.grant(&r, UNIX_EPOCH, || step), expected) {
                (TryBorrow::Granted { lease, .. }, Some(p)) => {
                    assert_eq!(lease.position, p);
                    held.push((r.lease, p));
                }
                (TryBorrow::Exhausted { .. }, None) => {}
                (got, want) => panic!("step {step}: got {got:?}, reference {want:?}"),
            }
        }
    }
}

/// Lazy reaping: returns and renewals leave the table's earliest-expiry
/// mark behind them, yet every lease ends exactly at its own expiry, no
/// sooner and no later, and the next expiry told to a refused borrower
/// is an active lease's.
#[test]
fn leases_end_at_their_own_expiry_whatever_was_returned_or_renewed_before() {
    let pool = PoolId::from_name("t");
    let mut t = SlotTable::new(4);
    let mut tok = 0;
    let mut next = || {
        tok += 1;
        tok
    };
    let at = |s: u64| UNIX_EPOCH + Duration::from_secs(s);
    // The earliest expiry (10 s) is returned; the next (20 s) must stand
    // past 10 s and end at 20 s.
    let early = req(10);
    let later = req(20);
    let last = req(40);
    position(t.grant(&early, at(0), &mut next));
    position(t.grant(&later, at(0), &mut next));
    position(t.grant(&last, at(0), &mut next));
    assert!(t.release_at(early.lease, 0, at(1)));
    assert_eq!(t.next_expiry(), Some(at(20)));
    assert_eq!(t.in_use(at(10)), 2);
    assert_eq!(t.in_use(at(19)), 2);
    assert!(
        t.renew(pool, later.lease, at(19), Duration::from_secs(1))
            .is_some()
    );
    assert_eq!(t.next_expiry(), Some(at(20)));
    // Renewed to end sooner than it would have: 20 s, not 40 s.
    assert!(
        t.renew(pool, last.lease, at(19), Duration::from_secs(1))
            .is_some()
    );
    assert_eq!(t.in_use(at(20)), 0, "both end at their renewed expiry");
    assert_eq!(t.next_expiry(), None);
    // Renewed to end later: kept past its first expiry.
    let long = req(5);
    assert_eq!(position(t.grant(&long, at(20), &mut next)), 0);
    assert!(
        t.renew(pool, long.lease, at(21), Duration::from_secs(30))
            .is_some()
    );
    assert_eq!(t.in_use(at(25)), 1);
    assert!(!t.release_at(long.lease, 1, at(25)), "not where it is held");
    assert!(
        !t.release_at(LeaseId::new(), 0, at(25)),
        "not the lease held there"
    );
    assert_eq!(t.in_use(at(50)), 1);
    assert_eq!(t.in_use(at(51)), 0);
    assert!(!t.release_at(long.lease, 0, at(51)), "expired");
    // Renewed to end sooner than any expiry granted: it ends then.
    let sooner = req(100);
    assert_eq!(position(t.grant(&sooner, at(60), &mut next)), 0);
    assert!(
        t.renew(pool, sooner.lease, at(60), Duration::from_secs(5))
            .is_some()
    );
    assert_eq!(t.in_use(at(64)), 1);
    assert_eq!(t.in_use(at(65)), 0);
}

/// A held place of weight 2 is owed two of the free slots before a
/// newcomer, is granted to its poll, and lapses `hold` after its
/// latest poll, which a refusal tells as the moment to ask again.
#[test]
fn a_held_place_is_owed_its_weight_until_served_or_lapsed() {
    let mut t = SlotTable::new(3);
    let mut tok = 0;
    let mut next = || {
        tok += 1;
        tok
    };
    let at = |s: u64| UNIX_EPOCH + Duration::from_secs(s);
    let held = req(100);
    position(t.grant(&held, at(0), &mut next));
    let mut place = req(100);
    place.slots = 3;
    place.waiter = Some(WaiterId::new());
    place.hold = Some(Duration::from_secs(20));
    let refused = t.poll_place(&place, at(0), |_| 0, || 7, &mut next);
    assert!(matches!(refused, TryBorrow::Exhausted { next_expiry } if next_expiry == Some(at(20))));
    assert_eq!(t.held_place(place.waiter.unwrap(), at(1)), Some((0, 7)));
    // Two of three slots are free, but the place came first and is owed all.
    let newcomer = t.grant_in_turn(&req(10), at(1), u64::MAX, &mut next);
    assert!(
        matches!(newcomer, TryBorrow::Exhausted { next_expiry } if next_expiry == Some(at(20)))
    );
    // One that came before the place is not held back by it.
    assert_eq!(position(t.grant_in_turn(&req(100), at(1), 6, &mut next)), 1);
    // Polled again at 10 s: kept until 30 s; lapsed after.
    let refused = t.poll_place(&place, at(10), |_| 0, || 8, &mut next);
    assert!(matches!(refused, TryBorrow::Exhausted { .. }));
    assert_eq!(t.held_place(place.waiter.unwrap(), at(29)), Some((0, 7)));
    assert_eq!(t.held_place(place.waiter.unwrap(), at(30)), None);
    assert_eq!(
        position(t.grant_in_turn(&req(10), at(30), u64::MAX, &mut next)),
        2
    );
}

/// The table against a naive model while time moves: random ttls,
/// renewals that lengthen and shorten, returns by id and by position
/// (right and wrong), forced returns and count changes. Each step the
/// model ends every lease whose expiry has come, and the table must agree
/// on what is in use, on the earliest expiry, on who holds what, and on
/// the positions it grants.
#[test]
fn agrees_with_a_naive_model_while_time_moves() {
    struct Modeled {
        id: LeaseId,
        positions: Vec<u32>,
        expires_at: SystemTime,
    }
    let pool = PoolId::from_name("t");
    let mut count = 70;
    let mut t = SlotTable::new(count);
    let mut model: Vec<Modeled> = Vec::new();
    let mut now = UNIX_EPOCH;
    let mut x: u64 = 0x5851_f42d_4c95_7f2d;
    let next = |x: &mut u64| {
        *x ^= *x << 13;
        *x ^= *x >> 7;
        *x ^= *x << 17;
        *x
    };
    for step in 0..30_000u64 {
        let r = next(&mut x);
        if r % 4 == 0 {
            now += Duration::from_millis(r / 4 % 40);
        }
        model.retain(|m| m.expires_at > now);
        let in_use: u32 = model.iter().map(|m| m.positions.len() as u32).sum();
        assert_eq!(t.in_use(now), in_use, "step {step}");
        assert_eq!(
            t.next_expiry(),
            model.iter().map(|m| m.expires_at).min(),
            "step {step}"
        );
        let pick = (r / 7) as usize;
        match r % 11 {
            0 | 1 if !model.is_empty() => {
                let m = model.swap_remove(pick % model.len());
                assert!(t.release_at(m.id, m.positions[0], now), "step {step}");
                assert!(!t.release(m.id, now), "step {step}: returned twice");
            }
            2 if !model.is_empty() => {
                let m = &model[pick % model.len()];
                let wrong = m.positions[0] + 1;
                assert!(!t.release_at(m.id, wrong, now), "step {step}");
                let m = model.swap_remove(pick % model.len());
                assert!(t.release(m.id, now), "step {step}");
            }
            3 if !model.is_empty() => {
                let i = pick % model.len();
                let ttl = Duration::from_millis(1 + r / 13 % 3_000);
                let lease = t.renew(pool, model[i].id, now, ttl).expect("active");
                model[i].expires_at = now + ttl;
                assert_eq!(lease.expires_at, now + ttl, "step {step}");
            }
            4 if !model.is_empty() => {
                let i = pick % model.len();
                let at = model[i].positions[(r / 17) as usize % model[i].positions.len()];
                let ended = t.force_return(pool, at, now).map(|h| h.lease.id);
                assert_eq!(ended, Some(model[i].id), "step {step}");
                model.swap_remove(i);
            }
            5 if step % 97 == 0 => {
                count = [0, 5, 63, 64, 65, 70][pick % 6];
                t.set_count(count);
            }
            _ => {
                let n = [1, 1, 1, 2, 5][pick % 5];
                let all = model.iter().flat_map(|m| m.positions.iter().copied());
                let expected = (in_use + n <= count)
                    .then(|| lowest_free_n(count, all, n))
                    .flatten();
                let ttl = Duration::from_millis(1 + r / 19 % 2_000);
                let mut request = BorrowRequest::new(pool, LeaseId::new(), ttl);
                request.slots = n;
                match (t.grant(&request, now, || step), expected) {
                    (TryBorrow::Granted { lease }, Some(p)) => {
                        assert_eq!(lease.positions, p, "step {step}, count {count}");
                        assert_eq!(lease.expires_at, now + ttl, "step {step}");
                        model.push(Modeled {
                            id: request.lease,
                            positions: p.to_vec(),
                            expires_at: now + ttl,
                        });
                    }
                    (TryBorrow::Exhausted { .. }, None) => {}
                    (got, want) => panic!("step {step}: got {got:?}, reference {want:?}"),
                }
            }
        }
        if step % 500 == 0 {
            let mut want: Vec<_> = model.iter().map(|m| (m.positions[0], m.id)).collect();
            want.sort_unstable();
            let got: Vec<_> = t
                .holders(pool, now)
                .into_iter()
                .map(|h| (h.lease.position, h.lease.id))
                .collect();
            assert_eq!(got, want, "step {step}");
        }
    }
}
