//! One look at pools: their records, read in one etcd transaction (one
//! revision: one instant, R3), and the judgement of what in them is live.
//!
//! What is live is etcd's to say (rule "etcd"): in production a lease, a
//! place or a session lives exactly as long as its key, which its etcd
//! lease deletes when it lapses. In test mode no key has an etcd lease, and
//! the test's manual clock judges the times in the records instead.

use std::collections::HashMap;

use etcd_client::{GetOptions, KeyValue, SortOrder, SortTarget, Txn, TxnOp, TxnOpResponse};
use semaphore_core::store::from_unix_ms;
use semaphore_core::{Holder, Lease, LeaseId, PoolId, PoolState, Positions, SessionId};
use uuid::Uuid;

use crate::record::{Keys, LeaseRec, PlaceRec, PoolRec, SessionRec, decode, id_of};

/// A record with its id and the revisions etcd gave its key.
#[derive(Debug, Clone)]
pub(crate) struct Row<T> {
    pub(crate) id: Uuid,
    pub(crate) rec: T,
    /// The key's `create_revision`: a lease's token, a place's turn.
    pub(crate) created: i64,
    /// The key's `mod_revision`: a rewrite is conditioned on it.
    pub(crate) modified: i64,
}

/// One pool as one look saw it.
#[derive(Debug, Clone)]
pub(crate) struct PoolView {
    pub(crate) pool: PoolId,
    /// The pool's record and its key's `mod_revision`; `None` if the pool
    /// does not exist.
    pub(crate) meta: Option<(PoolRec, i64)>,
    pub(crate) leases: Vec<Row<LeaseRec>>,
    /// In the order they are served: by their keys' creation.
    pub(crate) places: Vec<Row<PlaceRec>>,
}

/// What one look saw beside its pools: the instant that judges (test
/// mode), the sessions, and the revision it read at.
#[derive(Debug, Clone)]
pub(crate) struct Look {
    /// The test's clock, unix ms; `None` in production (etcd judges).
    pub(crate) now: Option<u64>,
    pub(crate) sessions: HashMap<Uuid, SessionRec>,
    pub(crate) revision: i64,
}

impl Look {
    fn alive(&self, until: u64) -> bool {
        self.now.is_none_or(|now| until > now)
    }

    /// Whether session `id` lives (R16).
    pub(crate) fn session_live(&self, id: &Uuid) -> bool {
        self.sessions.get(id).is_some_and(|s| self.alive(s.end))
    }

    /// Whether `lease` is active (R7, R16).
    pub(crate) fn active(&self, lease: &LeaseRec) -> bool {
        self.alive(lease.expires) && lease.session.is_none_or(|s| self.session_live(&s))
    }

    /// Whether `place` lives.
    pub(crate) fn place_live(&self, place: &PlaceRec) -> bool {
        self.alive(place.alive_until)
    }

    /// When `lease` stops being active, as far as the records say: its
    /// expiry or its session's end.
    pub(crate) fn ends(&self, lease: &LeaseRec) -> u64 {
        let session = lease
            .session
            .and_then(|s| self.sessions.get(&s))
            .map_or(u64::MAX, |s| s.end);
        lease.expires.min(session)
    }
}

impl PoolView {
    /// The active leases.
    pub(crate) fn active<'a>(&'a self, look: &'a Look) -> impl Iterator<Item = &'a Row<LeaseRec>> {
        self.leases.iter().filter(|row| look.active(&row.rec))
    }

    /// The live places, in the order they are served.
    pub(crate) fn live_places<'a>(
        &'a self,
        look: &'a Look,
    ) -> impl Iterator<Item = &'a Row<PlaceRec>> {
        self.places.iter().filter(|row| look.place_live(&row.rec))
    }

    /// The slots the active leases hold.
    pub(crate) fn in_use(&self, look: &Look) -> u32 {
        let held: usize = self.active(look).map(|row| row.rec.positions.len()).sum();
        u32::try_from(held).unwrap_or(u32::MAX)
    }

    /// The pool's state (R3); `None` if it does not exist.
    pub(crate) fn state(&self, look: &Look) -> Option<PoolState> {
        let (meta, _) = self.meta?;
        let queued = u32::try_from(self.live_places(look).count()).unwrap_or(u32::MAX);
        Some(
            PoolState::new(self.pool, meta.count, self.in_use(look))
                .with_draining(meta.draining)
                .with_queued(queued),
        )
    }

    /// `row` as the lease it records.
    pub(crate) fn lease(&self, row: &Row<LeaseRec>) -> Lease {
        let positions =
            Positions::new(row.rec.positions.clone()).unwrap_or_else(|| Positions::one(0));
        Lease::holding(
            LeaseId::from_uuid(row.id),
            self.pool,
            positions,
            crate::record::token(row.created, row.rec.index),
            from_unix_ms(row.rec.expires),
        )
        .with_session(row.rec.session.map(SessionId::from_uuid))
    }

    /// The active leases as holders, by lowest position, without their
    /// binding (as every store's admin listing).
    pub(crate) fn holders(&self, look: &Look) -> Vec<Holder> {
        let mut holders: Vec<Holder> = self
            .active(look)
            .map(|row| {
                Holder::new(
                    self.lease(row).with_session(None),
                    row.rec.owner.clone(),
                    row.rec.key.clone(),
                )
            })
            .collect();
        holders.sort_by_key(|h| h.lease.position);
        holders
    }
}

/// The operations that read `pools` (and every session) in one
/// transaction: three per pool (etcd takes at most 128 in one, its
/// `--max-txn-ops`: see [`MAX_POOLS`]).
pub(crate) fn reads(keys: &Keys, pools: &[PoolId]) -> Vec<TxnOp> {
    let mut ops = Vec::with_capacity(pools.len() * 3 + 1);
    for pool in pools {
        ops.push(TxnOp::get(keys.pool(*pool), None));
        ops.push(TxnOp::get(keys.leases(*pool), by_creation(None)));
        ops.push(TxnOp::get(keys.places(*pool), by_creation(None)));
    }
    ops.push(TxnOp::get(
        keys.sessions(),
        Some(GetOptions::new().with_prefix()),
    ));
    ops
}

/// The operations that read every pool from `first` to `last` in id
/// order (a listing's page), whatever their number: one range each of
/// pools, leases and places, and the sessions.
pub(crate) fn page_reads(keys: &Keys, first: PoolId, last: PoolId) -> Vec<TxnOp> {
    vec![
        TxnOp::get(
            keys.pool(first),
            Some(GetOptions::new().with_range(prefix_end(keys.pool(last)))),
        ),
        TxnOp::get(
            keys.leases(first),
            by_creation(Some(prefix_end(keys.leases(last)))),
        ),
        TxnOp::get(
            keys.places(first),
            by_creation(Some(prefix_end(keys.places(last)))),
        ),
        TxnOp::get(keys.sessions(), Some(GetOptions::new().with_prefix())),
    ]
}

/// A range read sorted by creation: of a prefix, or up to `end`.
fn by_creation(end: Option<Vec<u8>>) -> Option<GetOptions> {
    let options = match end {
        Some(end) => GetOptions::new().with_range(end),
        None => GetOptions::new().with_prefix(),
    };
    Some(options.with_sort(SortTarget::Create, SortOrder::Ascend))
}

/// The most pools one step reads or writes: three reads (and three
/// compares) each, within etcd's default of 128 operations (and 128
/// compares) a transaction.
pub(crate) const MAX_POOLS: usize = 40;

/// The key just past every key that starts with `prefix`.
pub(crate) fn prefix_end(prefix: String) -> Vec<u8> {
    let mut end = prefix.into_bytes();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    vec![0]
}

/// A look's transaction.
pub(crate) fn read_txn(ops: Vec<TxnOp>) -> Txn {
    Txn::new().and_then(ops)
}

fn row<T: for<'a> serde::Deserialize<'a>>(kv: &KeyValue) -> Option<Row<T>> {
    Some(Row {
        id: id_of(kv.key())?,
        rec: decode(kv.value())?,
        created: kv.create_revision(),
        modified: kv.mod_revision(),
    })
}

/// The pools (in the order of `pools`) and the look, from the responses
/// of [`reads`] or [`page_reads`]: each key is told by its own name (its
/// kind and its pool), so either shape reads back alike.
pub(crate) fn parse(
    keys: &Keys,
    pools: &[PoolId],
    responses: impl IntoIterator<Item = TxnOpResponse>,
    now: Option<u64>,
    revision: i64,
) -> (Vec<PoolView>, Look) {
    let mut views: Vec<PoolView> = pools
        .iter()
        .map(|pool| PoolView {
            pool: *pool,
            meta: None,
            leases: Vec::new(),
            places: Vec::new(),
        })
        .collect();
    let mut sessions = HashMap::new();
    for response in responses {
        let TxnOpResponse::Get(get) = response else {
            continue;
        };
        for kv in get.kvs() {
            if kv.key().starts_with(keys.sessions().as_bytes()) {
                if let Some(row) = row::<SessionRec>(kv) {
                    sessions.insert(row.id, row.rec);
                }
                continue;
            }
            let Some((kind, pool)) = keys.kind_of(kv.key()) else {
                continue;
            };
            let Some(view) = views.iter_mut().find(|v| v.pool == pool) else {
                continue;
            };
            match kind {
                b'p' => {
                    view.meta = decode::<PoolRec>(kv.value()).map(|rec| (rec, kv.mod_revision()));
                }
                b'l' => view.leases.extend(row(kv)),
                _ => view.places.extend(row(kv)),
            }
        }
    }
    (
        views,
        Look {
            now,
            sessions,
            revision,
        },
    )
}
