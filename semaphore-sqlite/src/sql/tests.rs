//! The SQL primitives on an in-memory database: lowest free position
//! against the reference, and the cross-process queue rules.

use std::time::Duration;

use super::*;
use crate::schema;
use semaphore_core::store::WAITER_TTL;
use semaphore_core::store::WaiterId;

fn db() -> Connection {
    let conn = Connection::open_in_memory().unwrap();
    let found = schema::inspect(&conn).unwrap();
    schema::prepare(&conn, found).unwrap();
    conn
}

/// A request and the instant, in unix ms, the test decides it at.
struct At {
    request: BorrowRequest,
    ms: i64,
}

impl std::ops::Deref for At {
    type Target = BorrowRequest;
    fn deref(&self) -> &BorrowRequest {
        &self.request
    }
}

fn request(at_ms: u64, waiter: Option<WaiterId>) -> At {
    let mut request = BorrowRequest::new(
        PoolId::from_name("p"),
        LeaseId::new(),
        Duration::from_secs(60),
    );
    request.waiter = waiter;
    // Holders are tested with real files in `holder` and the store's tests.
    request.bound = false;
    At {
        request,
        ms: at_ms as i64,
    }
}

/// No lease here is bound to a holder: the holders of a database that has
/// no file.
fn holders() -> Holders {
    Holders::new(std::path::Path::new("/nonexistent/semaphore-sql-tests.db"))
}

/// `try_borrow` deciding at the request's own instant.
fn borrow(conn: &Connection, r: &At) -> Option<TryBorrow> {
    try_borrow(conn, &r.request, 0, r.ms, &holders())
        .unwrap()
        .ok()
}

fn position(answer: Option<TryBorrow>) -> Option<u32> {
    match answer {
        Some(TryBorrow::Granted { lease, .. }) => Some(lease.position),
        _ => None,
    }
}

/// The first-gap query agrees with the reference `lowest_free` over a
/// deterministic walk of grants and returns, with count lowered and
/// raised on the way.
#[test]
fn lowest_free_position_agrees_with_the_reference() {
    let conn = db();
    let pool = PoolId::from_name("p");
    let mut count = 8;
    register(&conn, pool, count, 0, &holders()).unwrap();
    let mut held: Vec<(LeaseId, u32)> = Vec::new();
    let mut x: u64 = 0x2545_f491_4f6c_dd1d;
    for step in 0..2_000u64 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        match x % 7 {
            0 | 1 if !held.is_empty() => {
                let (id, _) = held.swap_remove((x as usize / 7) % held.len());
                assert!(return_lease(&conn, pool, id, 1).unwrap());
            }
            2 if step % 50 == 0 => {
                count = 1 + (x % 12) as u32;
                register(&conn, pool, count, 1, &holders()).unwrap();
            }
            _ => {
                let in_use = held.len() as u32;
                let expected = (in_use < count)
                    .then(|| semaphore_core::store::lowest_free(count, held.iter().map(|h| h.1)))
                    .flatten();
                let r = request(1, None);
                let got = position(borrow(&conn, &r));
                assert_eq!(got, expected, "step {step}: count {count}, held {held:?}");
                if let Some(p) = got {
                    held.push((r.lease, p));
                }
            }
        }
    }
}

fn granted(answer: Option<TryBorrow>) -> bool {
    matches!(answer, Some(TryBorrow::Granted { .. }))
}

#[test]
fn a_free_slot_goes_to_the_queued_head_not_to_a_newcomer() {
    let conn = db();
    let pool = PoolId::from_name("p");
    register(&conn, pool, 1, 0, &holders()).unwrap();
    let first = request(0, None);
    assert!(granted(borrow(&conn, &first)));

    let head = WaiterId::new();
    assert!(
        !granted(borrow(&conn, &request(1, Some(head)))),
        "pool is full"
    );
    assert!(return_lease(&conn, pool, first.lease, 2).unwrap());

    assert!(
        !granted(borrow(&conn, &request(3, None))),
        "a newcomer jumped the queue"
    );
    assert!(
        !granted(borrow(&conn, &request(3, Some(WaiterId::new())))),
        "a later head jumped the queue"
    );
    assert!(granted(borrow(&conn, &request(4, Some(head)))));
    let left: i64 = conn
        .query_row("SELECT COUNT(*) FROM semaphore_waiters", [], |r| r.get(0))
        .unwrap();
    assert_eq!(
        left, 1,
        "the granted head's row is gone, the later head's stays"
    );
}

#[test]
fn a_head_that_stops_asking_is_dropped_after_waiter_ttl() {
    let conn = db();
    let pool = PoolId::from_name("p");
    register(&conn, pool, 1, 0, &holders()).unwrap();
    let first = request(0, None);
    assert!(granted(borrow(&conn, &first)));
    assert!(!granted(borrow(&conn, &request(1, Some(WaiterId::new())))));
    assert!(return_lease(&conn, pool, first.lease, 2).unwrap());

    let ttl = WAITER_TTL.as_millis() as u64;
    assert!(
        !granted(borrow(&conn, &request(ttl, None))),
        "the head is still alive"
    );
    assert!(
        granted(borrow(&conn, &request(ttl + 1, None))),
        "a dead head blocks no one"
    );
}

#[test]
fn an_exhausted_attempt_writes_nothing_once_queued() {
    let conn = db();
    let pool = PoolId::from_name("p");
    register(&conn, pool, 1, 0, &holders()).unwrap();
    assert!(granted(borrow(&conn, &request(0, None))));
    let head = WaiterId::new();
    let _ = borrow(&conn, &request(1, Some(head)));
    let before = conn.total_changes();
    let _ = borrow(&conn, &request(2, Some(head)));
    let _ = borrow(&conn, &request(3, None));
    assert_eq!(conn.total_changes(), before, "a re-check wrote to the file");
}
