//! The standings followed change by change, on records built by hand.

use super::*;
use crate::record::{PlaceRec, PoolRec, SessionRec};
use crate::view::Row;

fn id(n: u128) -> Uuid {
    Uuid::from_u128(n)
}

fn lease(n: u128, session: Option<Uuid>) -> Row<LeaseRec> {
    let rec = LeaseRec {
        positions: vec![0],
        expires: u64::MAX,
        session,
        owner: None,
        key: None,
        etcd_lease: 0,
        index: 0,
    };
    Row {
        id: id(n),
        rec,
        created: 1,
        modified: 1,
    }
}

fn place(n: u128, created: i64) -> Row<PlaceRec> {
    let rec = PlaceRec {
        slots: 1,
        alive_until: u64::MAX,
        held: false,
        since: 0,
        etcd_lease: 0,
    };
    Row {
        id: id(n),
        rec,
        created,
        modified: created,
    }
}

/// Standings whose watch opened at revision 0.
fn watching() -> Standings {
    let standings = Standings::default();
    standings.blind_until(0);
    standings
}

const POOL: u128 = 100;
const SESSION: u128 = 200;

/// A pool of one slot, held by lease 1 (bound to the session), with
/// places 10 and 11 in line, looked at revision 10.
fn seen() -> (PoolView, Look) {
    let view = PoolView {
        pool: PoolId::from_uuid(id(POOL)),
        meta: Some((
            PoolRec {
                count: 1,
                draining: false,
            },
            1,
        )),
        leases: vec![lease(1, Some(id(SESSION)))],
        places: vec![place(10, 5), place(11, 6)],
    };
    let session = SessionRec {
        end: u64::MAX,
        etcd_lease: 0,
    };
    let look = Look {
        now: None,
        sessions: HashMap::from([(id(SESSION), session)]),
        revision: 10,
    };
    (view, look)
}

fn change(revision: i64, what: What) -> Change {
    Change {
        revision,
        pool: Some(PoolId::from_uuid(id(POOL))),
        what,
    }
}

fn woken(standings: &Standings, changes: &[Change]) -> bool {
    !standings.changed(changes).0.is_empty()
}

const GRANT: Held = Held {
    slots: 1,
    session: None,
};

#[test]
fn a_return_wakes_the_head_only_once_no_place_is_owed_ahead() {
    let standings = watching();
    let (view, look) = seen();
    assert!(
        !standings.stand(id(11), 1, 6, &view, &look),
        "refused: no room"
    );
    let returned = change(11, What::LeaseGone { id: id(1) });
    assert!(!woken(&standings, &[returned]), "the slot is owed to 10");
    let granted = [
        change(12, What::PlaceGone { id: id(10) }),
        change(
            12,
            What::Lease {
                id: id(2),
                held: Some(GRANT),
                new: true,
            },
        ),
    ];
    assert!(!woken(&standings, &granted), "10's grant frees nothing");
    assert!(woken(
        &standings,
        &[change(13, What::LeaseGone { id: id(2) })]
    ));
}

#[test]
fn a_session_that_ends_frees_the_leases_it_bound() {
    let standings = watching();
    let (mut view, look) = seen();
    view.places.remove(0);
    assert!(!standings.stand(id(11), 1, 6, &view, &look));
    let ended = Change {
        revision: 11,
        pool: None,
        what: What::SessionGone { id: id(SESSION) },
    };
    let (pools, session_gone) = standings.changed(&[ended]);
    assert!(session_gone);
    assert_eq!(pools, vec![view.pool]);
}

#[test]
fn a_change_seen_before_the_standing_is_recorded_counts() {
    let standings = watching();
    let (mut view, look) = seen();
    view.places.remove(0);
    // No standing yet: a return wakes, as it always did.
    assert!(woken(
        &standings,
        &[change(11, What::LeaseGone { id: id(1) })]
    ));
    assert!(
        standings.stand(id(11), 1, 6, &view, &look),
        "look again: room came"
    );
    assert!(!standings.stands(view.pool));
}

#[test]
fn with_no_standing_only_what_can_free_room_wakes() {
    let standings = watching();
    let joined = change(11, What::Place);
    let granted = change(
        12,
        What::Lease {
            id: id(2),
            held: Some(GRANT),
            new: true,
        },
    );
    assert!(!woken(&standings, &[joined, granted]));
    assert!(woken(&standings, &[change(13, What::Pool)]));
    assert!(woken(
        &standings,
        &[change(14, What::PlaceGone { id: id(3) })]
    ));
}

#[test]
fn a_waiter_over_the_count_leaves_the_heads_standing() {
    let standings = watching();
    let (view, look) = seen();
    assert!(!standings.stand(id(11), 1, 6, &view, &look));
    assert!(!standings.stand(id(12), 2, 7, &view, &look), "set aside");
    assert!(standings.stands(view.pool), "the head's standing stays");
}

#[test]
fn no_standing_is_recorded_on_a_look_older_than_what_was_seen() {
    let standings = Standings::default();
    let (view, look) = seen();
    assert!(!standings.stand(id(11), 1, 6, &view, &look));
    assert!(!standings.stands(view.pool), "no watch open yet");
    let (view, look) = seen();
    standings.blind_until(20);
    assert!(!standings.stand(id(11), 1, 6, &view, &look));
    assert!(
        !standings.stands(view.pool),
        "a look at 10, changes seen from 20"
    );
    standings.open([view.pool]);
    let (mut view, mut look) = seen();
    look.revision = 30;
    view.places.remove(0);
    assert!(!standings.stand(id(11), 1, 6, &view, &look));
    assert!(
        !standings.stands(view.pool),
        "a pool waited on outside the queue"
    );
}
