//! The statements each primitive sends, filled in for the store's schema,
//! and the decoding of their rows.
//!
//! Every primitive is one statement in autocommit, sent with
//! `query_typed`: an unnamed statement with its parameter types given, so
//! one round trip, and nothing prepared that PgBouncer in transaction mode
//! would lose between two server connections.
//!
//! A statement that compares many rows with the time reads the clock once:
//! `(SELECT semaphore_now($n))` is an uncorrelated subquery, evaluated once
//! per statement, so every row is judged at one instant.

use semaphore_core::store::{BorrowRequest, from_unix_ms, millis};
use semaphore_core::{Holder, Lease, LeaseId, PoolId, Positions, SessionId};
use tokio_postgres::Row;
use tokio_postgres::types::{ToSql, Type};

use crate::schema::fill;

/// Runs `statement` with `params` on `client`: as an unnamed statement
/// (`query_typed`, one round trip, nothing left on the connection), or,
/// if `prepared`, by the name it was prepared under on this connection
/// (prepared at its first use, one round trip more that once).
pub(crate) async fn run(
    client: &deadpool_postgres::Client,
    prepared: bool,
    statement: &str,
    params: &[(&(dyn ToSql + Sync), Type)],
) -> Result<Vec<Row>, tokio_postgres::Error> {
    if !prepared {
        return client.query_typed(statement, params).await;
    }
    let types: Vec<Type> = params.iter().map(|(_, t)| t.clone()).collect();
    let prepared = client.prepare_typed_cached(statement, &types).await?;
    let values: Vec<&(dyn ToSql + Sync)> = params.iter().map(|(v, _)| *v).collect();
    client.query(&prepared, &values).await
}

/// The statement texts of one schema.
#[derive(Debug)]
pub(crate) struct Sql {
    pub(crate) register: String,
    pub(crate) inspect: String,
    /// A page of pools from an id on, each as `inspect` states it, its id
    /// last (rule "Listing pools": a range read of the primary key).
    pub(crate) pools: String,
    pub(crate) delete: String,
    pub(crate) try_borrow: String,
    pub(crate) try_borrow_all: String,
    pub(crate) return_lease: String,
    pub(crate) renew: String,
    pub(crate) holders: String,
    pub(crate) force_return: String,
    pub(crate) set_draining: String,
    /// The live places of a pool's queue, in line.
    pub(crate) queue: String,
    pub(crate) leave_queue: String,
    /// A waiter's place: how many live places are at or ahead of its own.
    pub(crate) place: String,
    pub(crate) queue_heads: String,
    /// The wake-up after a return, in a transaction of its own.
    pub(crate) wake: String,
    /// The confirmation of a handed lease held on arrival: the head takes
    /// it, to the expiry its holder counts.
    pub(crate) confirm: String,
    /// A session's heartbeat and its close.
    pub(crate) beat: String,
    pub(crate) close: String,
    pub(crate) unbind: String,
    /// Whether statements are prepared once per connection and run by
    /// name ([`PostgresOptions::prepared_statements`](crate::PostgresOptions::prepared_statements)).
    pub(crate) prepared: bool,
}

/// The arguments of `semaphore_return_lease`: the lease to return, and
/// the claimed head of this process to hand its slot to, if any.
pub(crate) struct ReturnArgs<'a> {
    pub(crate) pool: uuid::Uuid,
    pub(crate) lease: uuid::Uuid,
    /// The test's now, in unix ms; `None`: the server's clock.
    pub(crate) now: Option<i64>,
    /// Whether the slot may be handed on at all (the conformance gate).
    pub(crate) hand_off: bool,
    /// The claimed head's lease id and queue id.
    pub(crate) grant: Option<uuid::Uuid>,
    pub(crate) waiter: Option<uuid::Uuid>,
    /// Its ttl, in ms, and owner label.
    pub(crate) ttl: Option<i64>,
    pub(crate) owner: Option<&'a str>,
    /// The session its lease is bound to, if bound.
    pub(crate) session: Option<uuid::Uuid>,
}

impl<'a> ReturnArgs<'a> {
    /// A return of `lease` of `pool` that hands its slot to `head` (a
    /// claimed head's request, bound to `session` if it asks to be) where
    /// nobody in another process is queued ahead.
    pub(crate) fn new(
        pool: PoolId,
        lease: LeaseId,
        now: Option<i64>,
        hand_off: bool,
        head: Option<&'a BorrowRequest>,
        session: Option<uuid::Uuid>,
    ) -> Self {
        let session = head.filter(|r| r.bound).and(session);
        Self {
            pool: *pool.as_uuid(),
            lease: *lease.as_uuid(),
            now,
            hand_off,
            grant: head.map(|r| *r.lease.as_uuid()),
            waiter: head.and_then(|r| r.waiter).map(|w| *w.as_uuid()),
            ttl: head.map(|r| millis(r.ttl)),
            owner: head.and_then(|r| r.owner.as_deref()),
            session,
        }
    }

    /// The arguments with their types, for `query_typed`.
    pub(crate) fn typed(&self) -> [(&(dyn ToSql + Sync), Type); 9] {
        [
            (&self.pool, Type::UUID),
            (&self.lease, Type::UUID),
            (&self.now, Type::INT8),
            (&self.hand_off, Type::BOOL),
            (&self.grant, Type::UUID),
            (&self.waiter, Type::UUID),
            (&self.ttl, Type::INT8),
            (&self.owner, Type::TEXT),
            (&self.session, Type::UUID),
        ]
    }
}

/// The arguments of `semaphore_try_borrow`, in its order.
pub(crate) struct TryBorrowArgs<'a> {
    pub(crate) pool: uuid::Uuid,
    pub(crate) lease: uuid::Uuid,
    /// The ttl, in ms.
    pub(crate) ttl: i64,
    pub(crate) waiter: Option<uuid::Uuid>,
    pub(crate) key: Option<&'a str>,
    pub(crate) owner: Option<&'a str>,
    /// The test's now, in unix ms; `None`: the server's clock.
    pub(crate) now: Option<i64>,
    /// The listener's backend pid, which marks a queued head as alive.
    pub(crate) backend: Option<i32>,
    /// Whether a refused head keeps (or takes) its place in the queue.
    pub(crate) keep_place: bool,
    /// How many slots to grant as one lease.
    pub(crate) slots: i64,
    /// The session of a bound lease; `None` for a lease
    /// left to its ttl.
    pub(crate) session: Option<uuid::Uuid>,
    /// A held place's hold, in ms ([`BorrowRequest::hold`](semaphore_core::store::BorrowRequest::hold)):
    /// kept that long after each attempt, bound to no session.
    pub(crate) hold: Option<i64>,
    /// The attempt repeats one whose answer was lost, under its lease id.
    pub(crate) retried: bool,
}

impl TryBorrowArgs<'_> {
    /// The arguments with their types, for `query_typed`.
    pub(crate) fn typed(&self) -> [(&(dyn ToSql + Sync), Type); 13] {
        [
            (&self.pool, Type::UUID),
            (&self.lease, Type::UUID),
            (&self.ttl, Type::INT8),
            (&self.waiter, Type::UUID),
            (&self.key, Type::TEXT),
            (&self.owner, Type::TEXT),
            (&self.now, Type::INT8),
            (&self.backend, Type::INT4),
            (&self.keep_place, Type::BOOL),
            (&self.slots, Type::INT8),
            (&self.session, Type::UUID),
            (&self.hold, Type::INT8),
            (&self.retried, Type::BOOL),
        ]
    }
}

/// The parameter types of `semaphore_try_borrow_all`.
pub(crate) const TRY_BORROW_ALL: &[Type] = &[
    Type::UUID_ARRAY,
    Type::UUID_ARRAY,
    Type::INT8,
    Type::UUID,
    Type::TEXT,
    Type::TEXT,
    Type::INT8,
    Type::INT4,
    Type::INT8_ARRAY,
    Type::UUID,
    Type::BOOL,
];

impl Sql {
    pub(crate) fn new(schema: &str, prepared: bool) -> Self {
        let f = |text: &str| fill(text, schema);
        Self {
            prepared,
            register: f("SELECT r.*,
                    (SELECT count(*) FROM {s}.semaphore_in_line($1, {s}.semaphore_now($3)))
                FROM {s}.semaphore_register($1, $2, $3) r"),
            inspect: f(
                "SELECT p.count, {s}.semaphore_in_use(p.pool, t.now), p.draining,
                    (SELECT count(*) FROM {s}.semaphore_in_line(p.pool, t.now))
                FROM {s}.semaphore_pools p, (SELECT {s}.semaphore_now($2) AS now) t
                WHERE p.pool = $1",
            ),
            pools: f(
                "SELECT p.count, {s}.semaphore_in_use(p.pool, t.now), p.draining,
                    (SELECT count(*) FROM {s}.semaphore_in_line(p.pool, t.now)), p.pool
                FROM {s}.semaphore_pools p, (SELECT {s}.semaphore_now($3) AS now) t
                WHERE p.pool >= $1 ORDER BY p.pool LIMIT $2",
            ),
            queue: f("SELECT * FROM {s}.semaphore_in_line($1, {s}.semaphore_now($2))"),
            delete: f("SELECT {s}.semaphore_delete($1)"),
            try_borrow: f(
                "SELECT * FROM {s}.semaphore_try_borrow($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)",
            ),
            try_borrow_all: f(
                "SELECT * FROM {s}.semaphore_try_borrow_all($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)",
            ),
            return_lease: f(
                "SELECT * FROM {s}.semaphore_return_lease($1, $2, $3, $4, $5, $6, $7, $8, $9)",
            ),
            renew: f("SELECT * FROM {s}.semaphore_renew($1, $2, $3, $4)"),
            // One row per lease, its rows' positions gathered; the
            // labels are on its lowest row only.
            holders: f("WITH t AS (SELECT {s}.semaphore_now($2) AS now)
                SELECT EXISTS (SELECT 1 FROM {s}.semaphore_pools WHERE pool = $1),
                    l.lease, l.positions, l.token, l.expires_at, l.owner, l.borrow_key
                FROM (SELECT 1) one
                LEFT JOIN (
                    SELECT x.lease, array_agg(x.position ORDER BY x.position) AS positions,
                        min(x.token) AS token, min(x.expires_at) AS expires_at,
                        max(x.owner) AS owner, max(x.borrow_key) AS borrow_key
                    FROM {s}.semaphore_slots x, t
                    WHERE x.pool = $1 AND x.expires_at > t.now
                        AND {s}.semaphore_alive(x.session, t.now)
                    GROUP BY x.lease
                ) l ON true
                ORDER BY l.positions[1]"),
            force_return: f("SELECT * FROM {s}.semaphore_force_return($1, $2, $3)"),
            set_draining: f("SELECT r.*,
                    (SELECT count(*) FROM {s}.semaphore_in_line($1, {s}.semaphore_now($3)))
                FROM {s}.semaphore_set_draining($1, $2, $3) r"),
            leave_queue: f("SELECT {s}.semaphore_leave_queue($1, $2)"),
            place: f(
                "SELECT count(*) FROM {s}.semaphore_waiters w, {s}.semaphore_waiters me,
                    (SELECT {s}.semaphore_now($3) AS now) t
                WHERE me.pool = $1 AND me.waiter = $2 AND me.alive_until > t.now
                    AND NOT {s}.semaphore_is_handed($1, me.waiter, t.now)
                    AND w.pool = $1 AND w.alive_until > t.now AND w.ticket <= me.ticket
                    AND NOT {s}.semaphore_is_handed($1, w.waiter, t.now)",
            ),
            wake: f("SELECT {s}.semaphore_returned($1, $2, $3)"),
            confirm: f("SELECT {s}.semaphore_confirm_handed($1, $2, $3, $4, $5)"),
            beat: f("SELECT {s}.semaphore_beat($1, $2, $3, $4)"),
            close: f("SELECT {s}.semaphore_close($1)"),
            unbind: f("SELECT {s}.semaphore_unbind($1, $2, $3)"),
            queue_heads: f("SELECT count(*) FROM {s}.semaphore_waiters w,
                    (SELECT {s}.semaphore_now($2) AS now) t
                WHERE w.pool = $1 AND w.alive_until > t.now
                    AND NOT {s}.semaphore_is_handed($1, w.waiter, t.now)"),
        }
    }
}

/// What one attempt row says (`status, lease, positions, token,
/// expires_at, session`).
pub(crate) enum Attempt {
    Granted(Lease),
    /// The session the request named has ended: nothing was
    /// granted; a new session is needed.
    SessionEnded,
    /// Exhausted; the earliest expiry, if any lease is active.
    Exhausted(Option<std::time::SystemTime>),
    /// No such pool (for a multi-pool attempt, the one named).
    Missing(Option<PoolId>),
    /// The pool drains.
    Draining,
    /// The key names a lease kept with another request digest.
    KeyReused,
}

/// Decodes an attempt row of pool `pool`.
pub(crate) fn attempt(row: &Row, pool: PoolId) -> Result<Attempt, tokio_postgres::Error> {
    attempt_at(row, pool, 5)
}

/// Decodes an attempt row of pool `pool` whose session is in column
/// `session_at`.
pub(crate) fn attempt_at(
    row: &Row,
    pool: PoolId,
    session_at: usize,
) -> Result<Attempt, tokio_postgres::Error> {
    let status: i16 = row.try_get(0)?;
    Ok(match status {
        0 => Attempt::Granted(lease(row, pool, 1)?.with_session(session(row, session_at)?)),
        1 => Attempt::Exhausted(row.try_get::<_, Option<i64>>(4)?.map(instant)),
        3 => Attempt::Draining,
        5 => Attempt::SessionEnded,
        6 => Attempt::KeyReused,
        _ => Attempt::Missing(
            row.try_get::<_, Option<uuid::Uuid>>(1)?
                .map(PoolId::from_uuid),
        ),
    })
}

/// A lease of `pool` from columns `lease, positions, token, expires_at`
/// starting at `at`.
pub(crate) fn lease(row: &Row, pool: PoolId, at: usize) -> Result<Lease, tokio_postgres::Error> {
    let id: uuid::Uuid = row.try_get(at)?;
    let positions: Vec<i64> = row.try_get(at + 1)?;
    let positions: Vec<u32> = positions
        .into_iter()
        .map(|p| u32::try_from(p).unwrap_or(u32::MAX))
        .collect();
    let token: i64 = row.try_get(at + 2)?;
    Ok(Lease::holding(
        LeaseId::from_uuid(id),
        pool,
        Positions::new(positions).unwrap_or_else(|| Positions::one(0)),
        token.unsigned_abs(),
        instant(row.try_get(at + 3)?),
    ))
}

/// The session in column `at`, if any.
pub(crate) fn session(row: &Row, at: usize) -> Result<Option<SessionId>, tokio_postgres::Error> {
    Ok(row
        .try_get::<_, Option<uuid::Uuid>>(at)?
        .map(SessionId::from_uuid))
}

/// A holder from columns `lease, positions, token, expires_at, owner,
/// borrow_key` starting at `at`.
pub(crate) fn holder(row: &Row, pool: PoolId, at: usize) -> Result<Holder, tokio_postgres::Error> {
    Ok(Holder::new(
        lease(row, pool, at)?,
        row.try_get(at + 4)?,
        row.try_get(at + 5)?,
    ))
}

/// A unix ms value read back from the database.
pub(crate) fn instant(ms: i64) -> std::time::SystemTime {
    from_unix_ms(u64::try_from(ms).unwrap_or(0))
}
