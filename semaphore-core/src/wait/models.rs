//! loom models of the wait engine and the slot table, run by
//! `scripts/loom` (a build with `--cfg semaphore_loom`, where
//! [`crate::sync`] is loom's). Each model is a small program of two or
//! three threads that loom runs under every interleaving it can tell
//! apart, failing on a broken assertion, a deadlock (a wake-up lost: a
//! borrower that waits forever) or a leak; each names the planted bug
//! (`SEMAPHORE_LOOM_MUTANT`) that it must catch, which `scripts/loom`
//! checks it does.
//!
//! The store in the models is a [`SlotTable`] under loom's mutex: the
//! memory store's step, whose return hands a freed slot to the queue's
//! head inside that step ([`Changes::hand_off`]).

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use loom::future::block_on;
use loom::thread;

use super::{Changes, GiveBack, HandOff};
use crate::clock::UnixMs;
use crate::request::{BorrowRequest, TryBorrow};
use crate::slot::SlotTable;
use crate::sync::Mutex;
use crate::{id::LeaseId, id::PoolId, lease::Lease};

/// The models by name, with the planted bug each must catch.
pub const MODELS: &[(&str, fn(), &str)] = &[
    ("signal", signal, "signal_no_recheck"),
    ("hand_off", hand_off, "hand_off_no_wake"),
    ("cancel", cancel, "cancel_keeps_handed"),
    ("claim", claim, "claim_wakes_before_lease"),
    ("arrived", arrived, "arrived_while_asking"),
    ("table", table, "table_frees_any"),
];

/// The models' one instant, in whole ms of the store's clock.
const NOW: UnixMs = UnixMs::from_ms(1_000);
const TTL: Duration = Duration::from_secs(10);

/// A store of one pool: its table under a lock. A ticket's lease that
/// nobody took is given back to it.
struct Table(Mutex<SlotTable>);

impl GiveBack for Table {
    fn give_back(&self, lease: &Lease) {
        self.0.lock().release_at(lease.id, lease.position, NOW);
    }
}

fn pool() -> PoolId {
    PoolId::from_name("model")
}

fn granted(answer: TryBorrow) -> Option<Lease> {
    match answer {
        TryBorrow::Granted { lease } => Some(lease),
        TryBorrow::Exhausted { .. } => None,
    }
}

/// A pool of count 1 whose slot is held: the table, and the holder's lease.
fn full_pool() -> (Arc<Table>, Lease) {
    let mut table = SlotTable::new(1);
    let first = BorrowRequest::new(pool(), LeaseId::new(), TTL);
    let lease = granted(table.grant(&first, NOW, || 1)).expect("an empty pool grants");
    (Arc::new(Table(Mutex::new(table))), lease)
}

/// The holder returns its lease, handing the slot to the queue's head in
/// the return's own step, as the memory store does.
fn return_and_hand_off(table: &Table, changes: &Changes, lease: &Lease) {
    let mut table = table.0.lock();
    assert!(table.release_at(lease.id, lease.position, NOW));
    changes.hand_off(pool(), 1, |request| table.grant(request, NOW, || 2));
}

fn hand_off_request(lease: LeaseId) -> HandOff {
    HandOff {
        lease,
        slots: 1,
        bound: false,
        ttl: TTL,
        key: None,
        owner: None,
    }
}

/// A queued borrower's wake-up against the task that waits for it: the
/// wait ends whichever comes first (the wake-up, or the registration of
/// the waiting task). Planted bug `signal_no_recheck`: the wait does not
/// look again after it registers, and a wake-up between its look and its
/// registration is lost (loom reports the waiting thread deadlocked).
pub fn signal() {
    loom::model(|| {
        let signal = Arc::new(super::signal::Signal::default());
        let waker = thread::spawn({
            let signal = signal.clone();
            move || signal.notify_one()
        });
        block_on(signal.notified());
        waker.join().unwrap();
    });
}

/// A borrower that queues on a full pool, asks, and waits its turn,
/// against the holder's return, which hands it the slot: whatever the
/// order, the borrower ends holding the one slot, and only it. Planted
/// bug `hand_off_no_wake`: the hand-off grants the lease to the head and
/// does not wake it (the borrower waits forever).
pub fn hand_off() {
    loom::model(|| {
        let changes = Arc::new(Changes::new());
        let (table, held) = full_pool();
        let returner = thread::spawn({
            let (changes, table) = (changes.clone(), table.clone());
            move || return_and_hand_off(&table, &changes, &held)
        });
        let id = LeaseId::new();
        let pools = [pool()];
        let ticket = queue(&changes, &table, &pools, id);
        let lease = wait_for_a_slot(&ticket, &table, id);
        drop(ticket);
        returner.join().unwrap();
        assert_eq!(lease.id, id, "the borrower holds its own lease");
        held_once(&table, &lease);
    });
}

/// A borrower of the model's pool, queued in `changes` under lease id
/// `id`, with what a hand-off grants it.
fn queue<'a>(
    changes: &'a Changes,
    table: &'a Table,
    pools: &'a [PoolId],
    id: LeaseId,
) -> super::Ticket<'a> {
    changes
        .enqueue(
            table,
            SystemTime::UNIX_EPOCH,
            pools,
            Some(hand_off_request(id)),
            true,
        )
        .unwrap_or_else(|_| unreachable!("no pool drains"))
}

/// The pool's one slot is held once, by `lease`.
fn held_once(table: &Table, lease: &Lease) {
    let mut table = table.0.lock();
    assert_eq!(table.in_use(NOW), 1, "one slot, held once");
    assert!(
        table.release_at(lease.id, lease.position, NOW),
        "held by the borrower"
    );
}

/// The acquire loop's shape: a turn, then a lease handed over, or an ask
/// of the store as the head, until the borrower holds a lease.
fn wait_for_a_slot(ticket: &super::Ticket<'_>, table: &Table, id: LeaseId) -> Lease {
    let request = BorrowRequest::new(pool(), id, TTL);
    loop {
        block_on(ticket.turn());
        if let Some(lease) = ticket.take_lease() {
            return lease;
        }
        if !ticket.is_head() || !ticket.start_asking() {
            continue;
        }
        if let Some(lease) = granted(table.0.lock().grant(&request, NOW, || 3)) {
            return lease;
        }
        ticket.done_asking();
    }
}

/// A borrower that queues on a full pool and waits its turn, against the
/// return of a store whose step is asynchronous (a database transaction):
/// it claims a lease for the queue's head first ([`Changes::claim_head`]),
/// grants it in its step, and delivers it once the step has committed
/// ([`Claim::deliver`](super::Claim::deliver)), or tells of the change if
/// it claimed none. Whatever the order, the borrower ends holding the one
/// slot (the claim's lease or one it asked for), held once. Planted bug
/// `claim_wakes_before_lease`: a delivery wakes the borrower before it
/// leaves it the lease, and a borrower woken in between finds nothing,
/// is no longer queued, and waits forever.
pub fn claim() {
    loom::model(|| {
        let changes = Arc::new(Changes::new());
        let (table, held) = full_pool();
        let returner = thread::spawn({
            let (changes, table) = (changes.clone(), table.clone());
            move || {
                let claim = changes.claim_head(pool());
                let granted_for_claim = {
                    let mut table = table.0.lock();
                    assert!(table.release_at(held.id, held.position, NOW));
                    claim
                        .as_ref()
                        .and_then(|claim| granted(table.grant(claim.request(), NOW, || 2)))
                };
                match (claim, granted_for_claim) {
                    (Some(claim), Some(lease)) => {
                        if let Err(lease) = claim.deliver(lease) {
                            table.give_back(&lease);
                        }
                    }
                    // A claim dropped undelivered wakes the head.
                    _ => changes.notify(pool()),
                }
            }
        });
        let id = LeaseId::new();
        let pools = [pool()];
        let ticket = queue(&changes, &table, &pools, id);
        let lease = wait_for_a_slot(&ticket, &table, id);
        drop(ticket);
        returner.join().unwrap();
        held_once(&table, &lease);
    });
}

/// A store whose return hands the freed slot to the head of its own
/// queue (the Redis store's `hand_on`) and sends the lease in the message
/// that wakes the head's process ([`Changes::arrived`]), against that
/// head, which may be asking the store itself as the message arrives (its
/// look finds the lease handed to it, which the store keeps under its
/// id). Whatever the order, the borrower ends holding the one slot, held
/// once. Planted bug `arrived_while_asking`: the message gives the lease
/// to a borrower whose own look is in flight; the look returns it too,
/// and the ticket gives the message's copy back, freeing the slot its
/// borrower holds.
pub fn arrived() {
    loom::model(|| {
        let changes = Arc::new(Changes::new());
        let (table, held) = full_pool();
        // The store's record of the lease handed to the head.
        let handed = Arc::new(Mutex::new(None::<Lease>));
        let id = LeaseId::new();
        let pools = [pool()];
        let ticket = queue(&changes, &table, &pools, id);
        let waiter = ticket.id().get_or_make();
        let returner = thread::spawn({
            let (changes, table, handed) = (changes.clone(), table.clone(), handed.clone());
            move || {
                let lease = {
                    let mut table = table.0.lock();
                    assert!(table.release_at(held.id, held.position, NOW));
                    let request = BorrowRequest::new(pool(), id, TTL);
                    let lease = granted(table.grant(&request, NOW, || 2)).expect("the freed slot");
                    *handed.lock() = Some(lease.clone());
                    lease
                };
                // The message arrives.
                if changes.arrived(pool(), waiter, lease).is_err() {
                    changes.notify_waiter(pool(), waiter);
                }
            }
        });
        let lease = loop {
            block_on(ticket.turn());
            if let Some(lease) = ticket.take_lease() {
                break lease;
            }
            if !ticket.is_head() || !ticket.start_asking() {
                continue;
            }
            // The head's look: the lease handed to it, or a refusal.
            let found = {
                let _step = table.0.lock();
                handed.lock().clone()
            };
            if let Some(lease) = found {
                break lease;
            }
            ticket.done_asking();
        };
        drop(ticket);
        returner.join().unwrap();
        held_once(&table, &lease);
    });
}

/// A borrower that queues on a full pool, asks once, and gives up (its
/// future dropped), against the holder's return, which may hand it the
/// slot meanwhile: whatever the order, the slot ends free (a lease handed
/// to a borrower that left is given back). Planted bug
/// `cancel_keeps_handed`: a dropped ticket keeps the lease handed to it
/// (the slot is held by nobody until its ttl).
pub fn cancel() {
    loom::model(|| {
        let changes = Arc::new(Changes::new());
        let (table, held) = full_pool();
        let returner = thread::spawn({
            let (changes, table) = (changes.clone(), table.clone());
            move || return_and_hand_off(&table, &changes, &held)
        });
        let id = LeaseId::new();
        let pools = [pool()];
        let ticket = queue(&changes, &table, &pools, id);
        let request = BorrowRequest::new(pool(), id, TTL);
        let mut mine = None;
        if ticket.start_asking() {
            mine = granted(table.0.lock().grant(&request, NOW, || 3));
            if mine.is_none() {
                ticket.done_asking();
            }
        }
        drop(ticket);
        returner.join().unwrap();
        let mut table = table.0.lock();
        match mine {
            // Asked after the return: the borrower holds the slot.
            Some(lease) => assert!(table.release_at(lease.id, lease.position, NOW)),
            None => assert_eq!(table.in_use(NOW), 0, "the slot is free, not held by nobody"),
        }
    });
}

/// Three borrowers of a pool of count 1: one whose lease expires and who
/// returns it late, two who borrow once it has expired. Whatever the
/// order, no position is held by two leases (a lease's return frees only
/// its own slot). Planted bug `table_frees_any`: a return frees the
/// position it names whoever holds it, so the late return frees the next
/// holder's slot and a third borrower is granted it too.
pub fn table() {
    loom::model(|| {
        // The table, and the lease that holds its position as the
        // borrowers saw it granted and returned, with its expiry (ms).
        let shared = Arc::new(Mutex::new((SlotTable::new(1), None::<(LeaseId, u64)>)));
        let later = UnixMs::from_ms(NOW.get() + 5);
        let grant =
            |shared: &Mutex<(SlotTable, Option<(LeaseId, u64)>)>, at: UnixMs, ttl: Duration| {
                let mut guard = shared.lock();
                let (table, holder) = &mut *guard;
                let request = BorrowRequest::new(pool(), LeaseId::new(), ttl);
                let lease = granted(table.grant(&request, at, || 1))?;
                if let Some((other, expires)) = *holder {
                    assert!(
                        expires <= at.get(),
                        "position {} granted while lease {other} holds it",
                        lease.position
                    );
                }
                *holder = Some((lease.id, at.get() + ttl.as_millis() as u64));
                Some(lease)
            };
        let early = thread::spawn({
            let shared = shared.clone();
            move || {
                // Expires 1 ms after NOW, then is returned late.
                if let Some(lease) = grant(&shared, NOW, Duration::from_millis(1)) {
                    let mut guard = shared.lock();
                    let (table, holder) = &mut *guard;
                    let freed = table.release_at(lease.id, lease.position, later);
                    if freed && holder.is_some_and(|(id, _)| id == lease.id) {
                        *holder = None;
                    }
                }
            }
        });
        let second = thread::spawn({
            let shared = shared.clone();
            move || {
                grant(&shared, later, TTL);
            }
        });
        grant(&shared, later, TTL);
        early.join().unwrap();
        second.join().unwrap();
    });
}
