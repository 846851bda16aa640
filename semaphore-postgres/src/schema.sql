-- The PostgreSQL store's tables and functions, schema version 8 (version 1
-- had the same tables; 2 replaced functions only: `semaphore_delete` locks
-- the pool row first, heads refresh their place at every look; 3 holds
-- weighted leases, and a queued head records the slots it waits for;
-- a lease bound to its holder names the holder's backend; 4 keeps a
-- row per slot, `semaphore_slots`, in place of a row per held slot, so
-- that grants on one pool need not serialize on its pool row;
-- 5 binds leases to sessions with an end on the server's clock, kept by a
-- heartbeat, in place of backends; 6 tells a session's
-- holder at once when someone else deletes its row or moves its end
-- earlier, through triggers on semaphore_sessions; 7 has the same
-- tables, and a borrow and a return of one slot while nobody is queued
-- that each run one statement, writing only the slot, and send no
-- notification; 8 has the same tables, and wake-ups that try the pool's
-- gate before they look at the queue, in a statement of their own; 9 has
-- the same tables, and a slot handed to another process's head is bound to
-- a short liveness bound until the head takes it: a head whose process
-- died frees it within that bound, not at its session's end; and a held
-- place keeps its turn through a drain).
-- `{s}` is the store's schema, quoted; `{channel}` its notification channel.
-- Times are unix milliseconds on the server's clock (rule "Time"); each
-- function reads it once, after taking the pool row's lock, unless a test
-- passes an explicit `p_now`.

CREATE TABLE IF NOT EXISTS {s}.semaphore_store (
    id integer PRIMARY KEY CHECK (id = 1),
    schema_version integer NOT NULL
);
CREATE SEQUENCE IF NOT EXISTS {s}.semaphore_tokens;
CREATE SEQUENCE IF NOT EXISTS {s}.semaphore_tickets;
-- A store handle's session, which its bound leases belong
-- to. It lives while `expires_at` is in the future; a heartbeat moves it
-- (semaphore_beat), a clean close deletes it (semaphore_close). An ended
-- session never lives again, so neither do its leases; its row may be
-- deleted any time after its end (a lease naming no row is not active).
CREATE TABLE IF NOT EXISTS {s}.semaphore_sessions (
    id uuid PRIMARY KEY,
    expires_at bigint NOT NULL
);
-- A session ended by another (version 6): a session's row deleted,
-- or its end moved earlier, by anyone (an operator, a cleaning job; the
-- holder's own close too) is told on the store's channel as `s:` and the
-- session's id, so that its holder, if it still keeps it, learns in
-- milliseconds rather than at its next heartbeat.
CREATE OR REPLACE FUNCTION {s}.semaphore_session_ended() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('{channel}', 's:' || OLD.id::text);
    RETURN NULL;
END $$;
DROP TRIGGER IF EXISTS semaphore_session_deleted ON {s}.semaphore_sessions;
CREATE TRIGGER semaphore_session_deleted AFTER DELETE ON {s}.semaphore_sessions
    FOR EACH ROW EXECUTE FUNCTION {s}.semaphore_session_ended();
DROP TRIGGER IF EXISTS semaphore_session_cut ON {s}.semaphore_sessions;
CREATE TRIGGER semaphore_session_cut AFTER UPDATE OF expires_at ON {s}.semaphore_sessions
    FOR EACH ROW WHEN (NEW.expires_at < OLD.expires_at)
    EXECUTE FUNCTION {s}.semaphore_session_ended();
CREATE TABLE IF NOT EXISTS {s}.semaphore_pools (
    pool uuid PRIMARY KEY,
    count bigint NOT NULL,
    draining boolean NOT NULL DEFAULT false
);
-- One row per slot, free or held (version 4): a grant takes the row of a
-- free slot and a return frees it, so grants and returns on different
-- slots of one pool lock different rows and commit in parallel. A free row
-- has no lease and `expires_at` 0; a row is active while `expires_at` is in
-- the future and its session lives. A lease of n slots is n
-- rows under one lease id, token and expiry, its labels on its lowest row.
-- A pool's rows are positions 0 to n-1, n the most slots it has held at
-- once: a grant that finds every row held adds the next. No column
-- but the key's is indexed, so updates stay on the page (HOT) with room
-- left by the fill factor. A key is unique among a pool's active leases
-- because keyed grants take the pool row's lock (an expired lease keeps
-- its key on its row until the row is taken again). `granted_to` names the
-- queued head a return handed the row to (semaphore_return_lease), for the
-- head to find its lease at its next look.
CREATE TABLE IF NOT EXISTS {s}.semaphore_slots (
    pool uuid NOT NULL,
    position bigint NOT NULL,
    lease uuid,
    token bigint,
    expires_at bigint NOT NULL DEFAULT 0,
    owner text,
    borrow_key text,
    granted_to uuid,
    session uuid,
    PRIMARY KEY (pool, position)
) WITH (fillfactor = 50);
CREATE TABLE IF NOT EXISTS {s}.semaphore_waiters (
    pool uuid NOT NULL,
    waiter uuid NOT NULL,
    ticket bigint NOT NULL,
    alive_until bigint NOT NULL,
    backend integer,
    slots bigint NOT NULL DEFAULT 1,
    ttl bigint,
    owner text,
    session uuid,
    since bigint,
    held boolean NOT NULL DEFAULT false,
    PRIMARY KEY (pool, waiter)
);

DO $$ BEGIN
    CREATE TYPE {s}.semaphore_attempt AS (
        o_status smallint, o_lease uuid, o_positions bigint[], o_token bigint, o_expires_at bigint,
        o_session uuid);
EXCEPTION WHEN duplicate_object THEN NULL;
END $$;

-- The deciding instant: the test's, or the server's clock now.
CREATE OR REPLACE FUNCTION {s}.semaphore_now(p_now bigint) RETURNS bigint
LANGUAGE sql VOLATILE AS $$
    SELECT coalesce(p_now, floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint)
$$;

-- Whether session p_session lives at p_now (its end is
-- after it); true for an unbound lease (no session).
CREATE OR REPLACE FUNCTION {s}.semaphore_alive(p_session uuid, p_now bigint) RETURNS boolean
LANGUAGE sql STABLE AS $$
    SELECT p_session IS NULL OR EXISTS (
        SELECT 1 FROM {s}.semaphore_sessions x WHERE x.id = p_session AND x.expires_at > p_now)
$$;

-- When a lease that expires at p_expires, bound to p_session, ends: the
-- earlier of its expiry and its session's end (0 for an ended session).
CREATE OR REPLACE FUNCTION {s}.semaphore_end(p_expires bigint, p_session uuid) RETURNS bigint
LANGUAGE sql STABLE AS $$
    SELECT CASE WHEN p_session IS NULL THEN p_expires ELSE least(p_expires, coalesce(
        (SELECT x.expires_at FROM {s}.semaphore_sessions x WHERE x.id = p_session), 0)) END
$$;

-- One heartbeat of session p_session. If it lives, its end
-- moves to now + p_timeout; if it has no row and p_open (a fresh id, or
-- the retry of its first beat), it is created so. The step's reading of
-- the clock if it lives after, NULL if it ended: an ended session never
-- lives again. Opening also deletes sessions ended a minute ago or more.
CREATE OR REPLACE FUNCTION {s}.semaphore_beat(
    p_session uuid, p_timeout bigint, p_open boolean, p_now bigint) RETURNS bigint
LANGUAGE plpgsql SET lock_timeout = '5s' AS $$
DECLARE v_now bigint := {s}.semaphore_now(p_now);
BEGIN
    -- Never earlier than it was: a server clock stepped back (NTP, a
    -- standby that lags) must not read as someone cutting the session
    -- short (the trigger below), nor end it before its holder's deadline.
    UPDATE {s}.semaphore_sessions x
        SET expires_at = greatest(x.expires_at, least(v_now + p_timeout, {max_ms}))
        WHERE x.id = p_session AND x.expires_at > v_now;
    IF FOUND THEN
        RETURN v_now;
    END IF;
    IF p_open THEN
        DELETE FROM {s}.semaphore_sessions x WHERE x.expires_at < v_now - 60000;
        INSERT INTO {s}.semaphore_sessions (id, expires_at)
            VALUES (p_session, least(v_now + p_timeout, {max_ms}))
            ON CONFLICT (id) DO NOTHING;
        IF FOUND THEN
            RETURN v_now;
        END IF;
    END IF;
    RETURN NULL;
END $$;

-- Ends session p_session at once (a clean close): its
-- leases stop being active, and every process's waiters look again.
CREATE OR REPLACE FUNCTION {s}.semaphore_close(p_session uuid) RETURNS void
LANGUAGE plpgsql SET lock_timeout = '5s' AS $$
BEGIN
    DELETE FROM {s}.semaphore_sessions x WHERE x.id = p_session;
    IF FOUND THEN
        PERFORM pg_notify('{channel}', '*');
    END IF;
END $$;

-- Slots held at p_now by the pool's active leases (not
-- expired, session not ended), at any position.
CREATE OR REPLACE FUNCTION {s}.semaphore_in_use(p_pool uuid, p_now bigint) RETURNS bigint
LANGUAGE sql STABLE AS $$
    SELECT count(*) FROM {s}.semaphore_slots l WHERE l.pool = p_pool AND l.expires_at > p_now
        AND {s}.semaphore_alive(l.session, p_now)
$$;

-- The key of the pool's advisory lock, the gate: a borrow about to take a
-- new place in the queue holds it exclusive, from before it looks until it
-- commits; the wake-up after a return tries it shared, never waiting. So
-- either the borrow took it after the return committed, and sees the slot
-- free; or it committed its place before the wake-up looked, which then
-- sees the place; or it holds the gate as the wake-up looks, which then
-- wakes every process unasked (the borrow's process looks again). Another
-- pool's key may collide: it only ever costs a wait or a wake-up.
CREATE OR REPLACE FUNCTION {s}.semaphore_gate(p_pool uuid) RETURNS bigint
LANGUAGE sql IMMUTABLE AS $$
    SELECT hashtextextended('{channel}' || p_pool::text, 0)
$$;

-- The key of a queued head's advisory lock: its look holds it shared, and a
-- return hands it a slot only if it takes it at once, so a head never looks
-- while a slot is being handed to it (it would not see the hand-off, and
-- might take a second slot).
CREATE OR REPLACE FUNCTION {s}.semaphore_waiter_key(p_waiter uuid) RETURNS bigint
LANGUAGE sql IMMUTABLE AS $$
    SELECT hashtextextended('{channel}/' || p_waiter::text, 0)
$$;

-- Whether queued head p_waiter has a slot a return handed it (by
-- `granted_to`), still active at p_now: served, it is owed nothing more,
-- and its place (kept until it takes the slot) is ahead of no one.
CREATE OR REPLACE FUNCTION {s}.semaphore_is_handed(p_pool uuid, p_waiter uuid, p_now bigint)
RETURNS boolean
LANGUAGE sql STABLE AS $$
    SELECT EXISTS (SELECT 1 FROM {s}.semaphore_slots l
        WHERE l.pool = p_pool AND l.granted_to = p_waiter AND l.expires_at > p_now)
$$;

-- The live places of the pool's queue at p_now, first served first
-- (version 9): a head served (a slot handed to it, not yet taken) is not
-- in line, nor a head whose process's listener is gone (its process died:
-- the next borrow drops it). A place taken before version 9 has no
-- `since`: p_now stands in.
-- (PL/pgSQL, so that a migration may make it before it adds the columns
-- it reads.)
CREATE OR REPLACE FUNCTION {s}.semaphore_in_line(p_pool uuid, p_now bigint)
RETURNS TABLE (o_waiter uuid, o_slots bigint, o_since bigint, o_held boolean)
LANGUAGE plpgsql STABLE AS $$
BEGIN
    RETURN QUERY SELECT w.waiter, w.slots, coalesce(w.since, p_now), w.held
    FROM {s}.semaphore_waiters w
    WHERE w.pool = p_pool AND w.alive_until > p_now
        AND NOT {s}.semaphore_is_handed(p_pool, w.waiter, p_now)
        AND (w.backend IS NULL OR EXISTS (
            SELECT 1 FROM pg_stat_get_activity(w.backend) a WHERE a.pid = w.backend))
    ORDER BY w.ticket;
END $$;

-- The lease a return handed to queued head p_waiter (by `granted_to`),
-- if it is still active at p_now, taken by the head: its place goes, and
-- the lease then lasts p_ttl from the look. A return hands another
-- process's head its slot for at most {handed_bound} ms (version 9), and
-- keeps the head's place meanwhile: a head whose process died frees the
-- slot within that bound (and its place goes as any dead head's), a live
-- head that looks later than that is still first in line. Taking it again
-- (a look whose answer was lost, asked again) never shortens it.
CREATE OR REPLACE FUNCTION {s}.semaphore_take_handed(
    p_pool uuid, p_waiter uuid, p_ttl bigint, p_now bigint)
RETURNS TABLE (o_lease uuid, o_token bigint, o_expires_at bigint, o_position bigint,
    o_session uuid)
LANGUAGE plpgsql AS $$
BEGIN
    -- The conditions again on the row updated: a return or a grant that
    -- committed since the look below changed it (a row freed, or granted
    -- anew, is not this head's).
    UPDATE {s}.semaphore_slots l
        SET expires_at = greatest(l.expires_at, least(p_now + p_ttl, {max_ms}))
    WHERE l.pool = p_pool AND l.position = (
            SELECT h.position FROM {s}.semaphore_slots h
            WHERE h.pool = p_pool AND h.granted_to = p_waiter AND h.expires_at > p_now
                AND {s}.semaphore_alive(h.session, p_now)
            ORDER BY h.position LIMIT 1)
        AND l.granted_to = p_waiter AND l.expires_at > p_now
        AND {s}.semaphore_alive(l.session, p_now)
    RETURNING l.lease, l.token, l.expires_at, l.position, l.session
        INTO o_lease, o_token, o_expires_at, o_position, o_session;
    IF FOUND THEN
        DELETE FROM {s}.semaphore_waiters w WHERE w.pool = p_pool AND w.waiter = p_waiter;
        RETURN NEXT;
    END IF;
END $$;

-- Wakes waiters of every process if any head is queued on the pool, or
-- if a borrow holds the pool's gate (semaphore_gate). (Within the
-- transaction of the change, after it.) A change that frees a slot
-- without the pool row's lock (a forced return, a head leaving with a
-- slot handed to it) may meet a borrow that counted that slot held and
-- has not yet committed its place: the gate, tried shared and then held
-- to commit, tells it so. The try comes in a statement before the look
-- at the queue, so that a borrow that released the gate has committed
-- before the look's snapshot.
CREATE OR REPLACE FUNCTION {s}.semaphore_wake(p_pool uuid) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE v_open boolean;
BEGIN
    v_open := pg_try_advisory_xact_lock_shared({s}.semaphore_gate(p_pool));
    IF NOT v_open OR EXISTS (SELECT 1 FROM {s}.semaphore_waiters WHERE pool = p_pool) THEN
        PERFORM pg_notify('{channel}', p_pool::text);
    END IF;
END $$;

-- After a return has committed: wakes every process if the return
-- handed its slot to a head (p_handed: the head's process then finds its
-- lease), if a head is queued, or if a borrow holds the pool's gate (it may
-- be taking a place without having seen the slot free; its process then
-- looks again). Runs in a transaction that writes nothing, so it waits for
-- no flush. The gate is tried in a statement before the look at the
-- queue: in one statement the look's snapshot would come first, and a
-- borrow that committed its place between that snapshot and the try
-- would be neither seen holding the gate nor seen queued.
--
-- If the return handed its slot to another process's head as lease
-- p_lease (version 11), the notification carries that lease for the
-- head's process to hold on arrival (rule "A handed slot is held on
-- arrival"): 'g:', the head, the pool, the lease, its position and token,
-- its expiry as its holder counts it (from the hand-off, its head's ttl),
-- its bound (the row's expiry until the head takes it), its session.
CREATE OR REPLACE FUNCTION {s}.semaphore_returned(p_pool uuid, p_handed boolean, p_lease uuid)
RETURNS void
LANGUAGE plpgsql AS $$
DECLARE v_open boolean; v_payload text;
BEGIN
    IF p_lease IS NOT NULL THEN
        SELECT 'g:' || l.granted_to || ':' || p_pool || ':' || l.lease || ':' || l.position
                || ':' || l.token || ':'
                || least(l.expires_at - least(w.ttl, {handed_bound}) + w.ttl, {max_ms})
                || ':' || l.expires_at || ':' || l.session
            INTO v_payload
            FROM {s}.semaphore_slots l
            JOIN {s}.semaphore_waiters w ON w.pool = l.pool AND w.waiter = l.granted_to
            WHERE l.pool = p_pool AND l.lease = p_lease AND l.session IS NOT NULL
                AND w.ttl IS NOT NULL;
    END IF;
    v_open := p_handed OR pg_try_advisory_xact_lock_shared({s}.semaphore_gate(p_pool));
    IF p_handed OR NOT v_open
        OR EXISTS (SELECT 1 FROM {s}.semaphore_waiters WHERE pool = p_pool) THEN
        PERFORM pg_notify('{channel}', coalesce(v_payload, p_pool::text));
    END IF;
END $$;

-- Creates the pool or sets its count; its count and in_use. Slot rows
-- are made by the grants that first need them, so a pool costs the most
-- slots it has held at once, never its count; rows at or above a lowered
-- count stay, and are not granted.
CREATE OR REPLACE FUNCTION {s}.semaphore_register(p_pool uuid, p_count bigint, p_now bigint)
RETURNS TABLE (o_count bigint, o_in_use bigint, o_draining boolean)
LANGUAGE plpgsql SET lock_timeout = '5s' AS $$
DECLARE v_now bigint; v_draining boolean;
BEGIN
    INSERT INTO {s}.semaphore_pools AS p (pool, count) VALUES (p_pool, p_count)
        ON CONFLICT (pool) DO UPDATE SET count = excluded.count
        RETURNING p.draining INTO v_draining;
    v_now := {s}.semaphore_now(p_now);
    PERFORM {s}.semaphore_wake(p_pool);
    RETURN QUERY SELECT p_count, {s}.semaphore_in_use(p_pool, v_now), v_draining;
END $$;

-- Starts or ends the pool's drain: no new grants while it drains; its
-- state, or no row for no such pool. Wakes waiters either way.
CREATE OR REPLACE FUNCTION {s}.semaphore_set_draining(p_pool uuid, p_draining boolean, p_now bigint)
RETURNS TABLE (o_count bigint, o_in_use bigint, o_draining boolean)
LANGUAGE plpgsql SET lock_timeout = '5s' AS $$
DECLARE v_now bigint; v_count bigint;
BEGIN
    UPDATE {s}.semaphore_pools p SET draining = p_draining WHERE p.pool = p_pool
        RETURNING p.count INTO v_count;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    v_now := {s}.semaphore_now(p_now);
    PERFORM {s}.semaphore_wake(p_pool);
    RETURN QUERY SELECT v_count, {s}.semaphore_in_use(p_pool, v_now), p_draining;
END $$;

-- Removes the pool, its slots and its queued heads. The pool row is
-- locked first: a borrow queued on that lock then finds no pool, and every
-- lease committed before the lock was taken is seen by the deletes below
-- (each statement of a volatile function reads a fresh snapshot); a grant
-- or return in flight on a slot row commits first, or finds the row gone.
CREATE OR REPLACE FUNCTION {s}.semaphore_delete(p_pool uuid) RETURNS boolean
LANGUAGE plpgsql SET lock_timeout = '5s' AS $$
BEGIN
    PERFORM 1 FROM {s}.semaphore_pools WHERE pool = p_pool FOR UPDATE;
    PERFORM {s}.semaphore_wake(p_pool);
    DELETE FROM {s}.semaphore_slots WHERE pool = p_pool;
    DELETE FROM {s}.semaphore_waiters WHERE pool = p_pool;
    DELETE FROM {s}.semaphore_pools WHERE pool = p_pool;
    RETURN FOUND;
END $$;

-- One borrow attempt of p_slots slots on one
-- pool. status 0: granted (the new lease, or the keyed one, with its
-- positions); 1: exhausted (expires_at is the earliest expiry); 2: no such
-- pool; 3: the pool drains; 5: the session has ended; 6: the key names a
-- lease kept with another request digest. A borrower of n is granted only if n slots are
-- free beyond the weights of the heads queued ahead of it. A refused head
-- keeps its place if p_keep_place; with no p_lease, an attempt only keeps
-- the place, and grants nothing.
--
-- The fast path takes one slot, unkeyed, while no head is queued ahead of
-- the caller: the lowest free slot row that no other transaction holds
-- locked (SKIP LOCKED), without the pool row's lock, so grants on
-- different slots commit in parallel. A row locked by a grant or a return
-- in flight is held until that commits (held at the instant of this grant).
-- A refusal that writes nothing (no new place, no place to refresh, no
-- lease of an ended session to end) is decided from one snapshot, without a
-- lock either: exact at that instant, and a return in flight then
-- comes after it. Everything else takes the slow path, under the pool
-- row's lock (it adds rows as the pool grows).
CREATE OR REPLACE FUNCTION {s}.semaphore_try_borrow(
    p_pool uuid, p_lease uuid, p_ttl bigint, p_waiter uuid, p_key text, p_owner text,
    p_now bigint, p_backend integer, p_keep_place boolean, p_slots bigint,
    p_session uuid, p_hold bigint, p_retried boolean)
RETURNS TABLE (o_status smallint, o_lease uuid, o_positions bigint[], o_token bigint,
    o_expires_at bigint, o_session uuid)
LANGUAGE plpgsql SET lock_timeout = '5s' AS $$
DECLARE
    v_count bigint; v_now bigint; v_held bigint; v_ticket bigint; v_alive bigint;
    v_ahead bigint; v_dropped bigint; v_pos bigint; v_tok bigint; v_exp bigint; v_id uuid;
    v_positions bigint[]; v_draining boolean; v_dead boolean; v_handable boolean;
    v_session uuid; v_stored text;
BEGIN
    v_now := {s}.semaphore_now(p_now);
    -- Lost replies: a retry of an attempt whose answer was lost, under its
    -- lease id, gets the lease that attempt was granted, if it is active.
    IF p_retried AND p_lease IS NOT NULL THEN
        SELECT array_agg(l.position ORDER BY l.position), min(l.token), min(l.expires_at),
                min(l.session::text)::uuid
            INTO v_positions, v_tok, v_exp, v_session FROM {s}.semaphore_slots l
            WHERE l.pool = p_pool AND l.lease = p_lease AND l.expires_at > v_now
                AND {s}.semaphore_alive(l.session, v_now);
        IF v_positions IS NOT NULL THEN
            DELETE FROM {s}.semaphore_waiters w WHERE w.pool = p_pool AND w.waiter = p_waiter;
            RETURN QUERY SELECT 0::smallint, p_lease, v_positions, v_tok, v_exp, v_session;
            RETURN;
        END IF;
    END IF;
    IF p_waiter IS NOT NULL THEN
        -- A slot a return handed to this head (its place then went with
        -- it): its lease, found without writing. The lock waits out a
        -- hand-off in flight, so the statement after sees it.
        PERFORM pg_advisory_xact_lock_shared({s}.semaphore_waiter_key(p_waiter));
        SELECT * INTO v_id, v_tok, v_exp, v_pos, v_session
            FROM {s}.semaphore_take_handed(p_pool, p_waiter, p_ttl, v_now);
        IF FOUND THEN
            RETURN QUERY SELECT 0::smallint, v_id, ARRAY[v_pos], v_tok, v_exp, v_session;
            RETURN;
        END IF;
        SELECT w.ticket, w.alive_until INTO v_ticket, v_alive
            FROM {s}.semaphore_waiters w WHERE w.pool = p_pool AND w.waiter = p_waiter;
        IF v_alive <= v_now THEN
            v_ticket := NULL;
        END IF;
    END IF;
    -- The common path: one slot without a key, while nobody is queued
    -- ahead (for a first attempt, nobody at all), the pool grants and the
    -- session lives: one statement, that writes only the slot it takes
    -- (the lowest free one no other transaction holds locked) and reads the
    -- rest, and an answer made without another (version 7: a first
    -- attempt runs no other statement). In a subtransaction: a row locked
    -- here that then failed its recheck (taken since this statement's
    -- snapshot) stays locked until the end of the (sub)transaction, and the
    -- paths below must not hold it while they wait for the pool row.
    IF p_slots = 1 AND p_key IS NULL AND p_lease IS NOT NULL THEN
        v_exp := least(v_now + p_ttl, {max_ms});
        BEGIN
            UPDATE {s}.semaphore_slots l SET lease = p_lease,
                    token = nextval('{s}.semaphore_tokens'), expires_at = v_exp,
                    owner = p_owner, borrow_key = NULL, session = p_session, granted_to = NULL
                WHERE l.pool = p_pool AND l.position = (
                    SELECT f.position FROM {s}.semaphore_slots f, {s}.semaphore_pools p
                    WHERE p.pool = p_pool AND NOT p.draining AND f.pool = p_pool
                        AND f.position < p.count AND f.expires_at <= v_now
                        AND (p_session IS NULL OR EXISTS (
                            SELECT 1 FROM {s}.semaphore_sessions x
                            WHERE x.id = p_session AND x.expires_at > v_now))
                        AND NOT EXISTS (SELECT 1 FROM {s}.semaphore_waiters w
                            WHERE w.pool = p_pool AND w.alive_until > v_now
                            AND w.ticket < coalesce(v_ticket, 9223372036854775807)
                            AND NOT {s}.semaphore_is_handed(p_pool, w.waiter, v_now))
                        AND NOT EXISTS (SELECT 1 FROM {s}.semaphore_slots a
                            WHERE a.pool = p_pool AND a.position >= p.count
                            AND a.expires_at > v_now)
                    ORDER BY f.position LIMIT 1
                    FOR UPDATE OF f SKIP LOCKED)
                RETURNING l.position, l.token INTO v_pos, v_tok;
            IF NOT FOUND THEN
                RAISE EXCEPTION USING ERRCODE = 'SMNOF';
            END IF;
        EXCEPTION WHEN SQLSTATE 'SMNOF' THEN
            v_tok := NULL;
        END;
        IF v_tok IS NOT NULL THEN
            IF v_ticket IS NOT NULL THEN
                DELETE FROM {s}.semaphore_waiters w
                    WHERE w.pool = p_pool AND w.waiter = p_waiter;
            END IF;
            -- (RETURN NEXT runs no statement, as RETURN QUERY would.)
            o_status := 0; o_lease := p_lease; o_positions := ARRAY[v_pos]; o_token := v_tok;
            o_expires_at := v_exp; o_session := p_session;
            RETURN NEXT;
            RETURN;
        END IF;
    END IF;
    -- No lease is born dead. The caller opens a new session
    -- and asks again.
    IF p_session IS NOT NULL AND NOT {s}.semaphore_alive(p_session, v_now) THEN
        RETURN QUERY SELECT 5::smallint, NULL::uuid, NULL::bigint[], NULL::bigint, NULL::bigint,
            NULL::uuid;
        RETURN;
    END IF;
    IF p_key IS NULL AND (p_waiter IS NULL OR NOT p_keep_place
            OR (p_hold IS NULL AND v_alive - v_now >= {waiter_ttl} - {waiter_refresh})) THEN
        SELECT p.count, p.draining INTO v_count, v_draining
            FROM {s}.semaphore_pools p WHERE p.pool = p_pool;
        IF FOUND AND NOT v_draining THEN
            SELECT count(*), min({s}.semaphore_end(l.expires_at, l.session)),
                    bool_or(NOT {s}.semaphore_alive(l.session, v_now))
                INTO v_held, v_exp, v_dead
                FROM {s}.semaphore_slots l WHERE l.pool = p_pool AND l.expires_at > v_now;
            IF v_count - v_held < p_slots AND NOT coalesce(v_dead, false) THEN
                RETURN QUERY SELECT 1::smallint, NULL::uuid, NULL::bigint[], NULL::bigint, v_exp,
                    NULL::uuid;
                RETURN;
            END IF;
        END IF;
    END IF;
    SELECT p.count, p.draining INTO v_count, v_draining
        FROM {s}.semaphore_pools p WHERE p.pool = p_pool FOR UPDATE;
    IF NOT FOUND THEN
        RETURN QUERY SELECT 2::smallint, NULL::uuid, NULL::bigint[], NULL::bigint, NULL::bigint,
            NULL::uuid;
        RETURN;
    END IF;
    IF v_draining THEN
        IF p_waiter IS NOT NULL AND p_hold IS NOT NULL AND p_keep_place THEN
            -- A held place keeps its turn through the drain (R11): taken
            -- or refreshed as a refusal would (version 9).
            v_now := {s}.semaphore_now(p_now);
            DELETE FROM {s}.semaphore_waiters w
                WHERE w.pool = p_pool AND w.waiter = p_waiter AND w.alive_until <= v_now;
            INSERT INTO {s}.semaphore_waiters AS w
                    (pool, waiter, ticket, alive_until, slots, since, held)
                VALUES (p_pool, p_waiter, nextval('{s}.semaphore_tickets'), v_now + p_hold, p_slots,
                    v_now, true)
                ON CONFLICT (pool, waiter) DO UPDATE SET alive_until = excluded.alive_until;
        END IF;
        RETURN QUERY SELECT 3::smallint, p_pool, NULL::bigint[], NULL::bigint, NULL::bigint,
            NULL::uuid;
        RETURN;
    END IF;
    IF p_waiter IS NOT NULL THEN
        SELECT w.ticket, w.alive_until INTO v_ticket, v_alive
            FROM {s}.semaphore_waiters w WHERE w.pool = p_pool AND w.waiter = p_waiter;
        IF p_keep_place AND (v_ticket IS NULL OR v_alive <= v_now) THEN
            -- This attempt may take a new place: returns in flight commit
            -- first, and those after see the place (semaphore_gate).
            PERFORM pg_advisory_xact_lock({s}.semaphore_gate(p_pool));
        END IF;
    END IF;
    v_now := {s}.semaphore_now(p_now);
    DELETE FROM {s}.semaphore_waiters w WHERE w.pool = p_pool AND w.alive_until <= v_now;
    IF v_alive <= v_now THEN
        v_ticket := NULL;
    END IF;
    IF p_key IS NOT NULL THEN
        -- A key whose lease died with its session borrows anew. Keys
        -- match by name (before a unit separator and the request digest);
        -- one kept with another digest refuses this request (6), under the
        -- pool row's lock, so that racing servers agree.
        SELECT l.lease, l.token, l.expires_at, l.session, l.borrow_key
                INTO v_id, v_tok, v_exp, v_session, v_stored
            FROM {s}.semaphore_slots l
            WHERE l.pool = p_pool
                AND split_part(l.borrow_key, chr(31), 1) = split_part(p_key, chr(31), 1)
                AND l.expires_at > v_now AND {s}.semaphore_alive(l.session, v_now);
        IF FOUND AND v_stored <> p_key THEN
            RETURN QUERY SELECT 6::smallint, NULL::uuid, NULL::bigint[], NULL::bigint,
                NULL::bigint, NULL::uuid;
            RETURN;
        END IF;
        IF FOUND THEN
            DELETE FROM {s}.semaphore_waiters w WHERE w.pool = p_pool AND w.waiter = p_waiter;
            RETURN QUERY SELECT 0::smallint, v_id,
                ARRAY(SELECT l.position FROM {s}.semaphore_slots l
                      WHERE l.pool = p_pool AND l.lease = v_id ORDER BY l.position),
                v_tok, v_exp, v_session;
            RETURN;
        END IF;
    END IF;
    SELECT count(*) INTO v_held FROM {s}.semaphore_slots l
        WHERE l.pool = p_pool AND l.expires_at > v_now;
    -- A head whose weight is over the count keeps its place
    -- but is owed nothing while the count is below it.
    SELECT coalesce(sum(w.slots), 0) INTO v_ahead FROM {s}.semaphore_waiters w
        WHERE w.pool = p_pool AND w.ticket < coalesce(v_ticket, 9223372036854775807)
            AND w.slots <= v_count AND NOT {s}.semaphore_is_handed(p_pool, w.waiter, v_now);
    IF v_ahead > 0 AND v_count - v_held >= p_slots THEN
        -- Heads whose store's listener connection is gone: their process died.
        WITH gone AS (
            DELETE FROM {s}.semaphore_waiters w
                WHERE w.pool = p_pool AND w.ticket < coalesce(v_ticket, 9223372036854775807)
                AND w.backend IS NOT NULL
                AND NOT EXISTS (SELECT 1 FROM pg_stat_get_activity(w.backend) a
                                WHERE a.pid = w.backend)
                RETURNING w.slots, {s}.semaphore_is_handed(p_pool, w.waiter, v_now) AS handed)
        SELECT coalesce(sum(gone.slots) FILTER (WHERE gone.slots <= v_count AND NOT gone.handed), 0)
            INTO v_dropped FROM gone;
        v_ahead := v_ahead - v_dropped;
    END IF;
    IF v_count - v_held - v_ahead < p_slots THEN
        -- Leases whose session has ended are expired.
        -- (The slow path never waits for a slot row: a row a borrow in
        -- flight holds locked is left to a later look.)
        UPDATE {s}.semaphore_slots l SET lease = NULL, token = NULL, expires_at = 0,
                owner = NULL, borrow_key = NULL, session = NULL, granted_to = NULL
            WHERE l.pool = p_pool AND l.position IN (
                SELECT d.position FROM {s}.semaphore_slots d
                WHERE d.pool = p_pool AND d.session IS NOT NULL AND d.expires_at > v_now
                    AND NOT {s}.semaphore_alive(d.session, v_now)
                FOR UPDATE SKIP LOCKED);
        GET DIAGNOSTICS v_dropped = ROW_COUNT;
        v_held := v_held - v_dropped;
    END IF;
    IF v_count - v_held - v_ahead >= p_slots AND p_lease IS NOT NULL THEN
        -- Rows for the positions never used yet that this grant may need,
        -- then the lowest free rows not locked by a grant or return in
        -- flight.
        SELECT coalesce(max(l.position) + 1, 0) INTO v_pos
            FROM {s}.semaphore_slots l WHERE l.pool = p_pool;
        INSERT INTO {s}.semaphore_slots (pool, position)
            SELECT p_pool, g FROM generate_series(v_pos, least(v_pos + p_slots, v_count) - 1) g
            ON CONFLICT (pool, position) DO NOTHING;
        SELECT array_agg(f.position ORDER BY f.position) INTO v_positions FROM (
            SELECT l.position FROM {s}.semaphore_slots l
            WHERE l.pool = p_pool AND l.position < v_count AND l.expires_at <= v_now
            ORDER BY l.position LIMIT p_slots
            FOR UPDATE SKIP LOCKED) f;
        IF cardinality(v_positions) = p_slots THEN
            v_tok := nextval('{s}.semaphore_tokens');
            v_exp := least(v_now + p_ttl, {max_ms});
            UPDATE {s}.semaphore_slots l SET lease = p_lease, token = v_tok, expires_at = v_exp,
                    owner = CASE WHEN l.position = v_positions[1] THEN p_owner END,
                    borrow_key = CASE WHEN l.position = v_positions[1] THEN p_key END,
                    session = p_session, granted_to = NULL
                WHERE l.pool = p_pool AND l.position = ANY(v_positions);
            DELETE FROM {s}.semaphore_waiters w WHERE w.pool = p_pool AND w.waiter = p_waiter;
            RETURN QUERY SELECT 0::smallint, p_lease, v_positions, v_tok, v_exp, p_session;
            RETURN;
        END IF;
    END IF;
    IF p_waiter IS NOT NULL AND p_keep_place THEN
        IF v_ticket IS NULL THEN
            -- A one-slot borrow without a key keeps what a return needs
            -- to hand it a slot (semaphore_return_lease); others get none.
            -- A held place (p_hold) names no session and is never handed
            -- a slot: only its own polls are granted.
            v_handable := p_lease IS NOT NULL AND p_key IS NULL AND p_slots = 1
                AND p_hold IS NULL;
            INSERT INTO {s}.semaphore_waiters
                    (pool, waiter, ticket, alive_until, backend, slots, ttl, owner, session,
                     since, held)
                VALUES (p_pool, p_waiter, nextval('{s}.semaphore_tickets'),
                    v_now + coalesce(p_hold, {waiter_ttl}),
                    CASE WHEN p_hold IS NULL THEN p_backend END, p_slots,
                    CASE WHEN v_handable THEN p_ttl END,
                    CASE WHEN v_handable THEN p_owner END, CASE WHEN v_handable THEN p_session END,
                    v_now, p_hold IS NOT NULL)
                ON CONFLICT (pool, waiter) DO UPDATE SET alive_until = excluded.alive_until;
        ELSIF p_hold IS NOT NULL OR v_alive - v_now < {waiter_ttl} - {waiter_refresh} THEN
            UPDATE {s}.semaphore_waiters w SET alive_until = v_now + coalesce(p_hold, {waiter_ttl})
                WHERE w.pool = p_pool AND w.waiter = p_waiter;
        END IF;
    END IF;
    RETURN QUERY SELECT 1::smallint, NULL::uuid, NULL::bigint[], NULL::bigint,
        (SELECT min({s}.semaphore_end(l.expires_at, l.session)) FROM {s}.semaphore_slots l
         WHERE l.pool = p_pool AND l.expires_at > v_now
            AND {s}.semaphore_alive(l.session, v_now)),
        NULL::uuid;
END $$;

-- All or nothing over several pools: rows as semaphore_try_borrow's, one per
-- pool in the order given, or one row (2, the first unknown pool). Pool rows
-- are locked in id order, so two callers naming the same pools in any order
-- never deadlock.
CREATE OR REPLACE FUNCTION {s}.semaphore_try_borrow_all(
    p_pools uuid[], p_leases uuid[], p_ttl bigint, p_waiter uuid, p_key text, p_owner text,
    p_now bigint, p_backend integer, p_slots bigint[], p_session uuid, p_retried boolean)
RETURNS TABLE (o_status smallint, o_lease uuid, o_positions bigint[], o_token bigint,
    o_expires_at bigint, o_session uuid)
LANGUAGE plpgsql SET lock_timeout = '5s' AS $$
DECLARE
    v_rows {s}.semaphore_attempt[] := '{}';
    v_row {s}.semaphore_attempt;
    v_missing uuid;
    v_blocked boolean := false;
    i integer;
BEGIN
    PERFORM 1 FROM {s}.semaphore_pools p WHERE p.pool = ANY(p_pools) ORDER BY p.pool FOR UPDATE;
    SELECT t.x INTO v_missing FROM unnest(p_pools) WITH ORDINALITY AS t(x, n)
        WHERE NOT EXISTS (SELECT 1 FROM {s}.semaphore_pools p WHERE p.pool = t.x)
        ORDER BY t.n LIMIT 1;
    IF v_missing IS NOT NULL THEN
        RETURN QUERY SELECT 2::smallint, v_missing, NULL::bigint[], NULL::bigint, NULL::bigint,
            NULL::uuid;
        RETURN;
    END IF;
    IF p_waiter IS NOT NULL THEN
        -- Every pool's gate before any look (semaphore_gate): a return
        -- after the looks below sees the places this call keeps.
        PERFORM pg_advisory_xact_lock({s}.semaphore_gate(x))
            FROM unnest(p_pools) AS x ORDER BY x;
    END IF;
    BEGIN
        FOR i IN 1 .. cardinality(p_pools) LOOP
            SELECT * INTO v_row FROM {s}.semaphore_try_borrow(
                p_pools[i], p_leases[i], p_ttl, p_waiter, p_key, p_owner, p_now, p_backend, false,
                p_slots[i], p_session, NULL, p_retried);
            v_blocked := v_blocked OR v_row.o_status <> 0;
            v_rows := v_rows || v_row;
        END LOOP;
        IF v_blocked THEN
            RAISE EXCEPTION USING ERRCODE = 'SMBLK';
        END IF;
    EXCEPTION WHEN SQLSTATE 'SMBLK' THEN
        -- Every grant above is rolled back; refused heads keep their place.
        FOR i IN 1 .. cardinality(v_rows) LOOP
            IF v_rows[i].o_status = 1 THEN
                PERFORM {s}.semaphore_try_borrow(
                    p_pools[i], NULL, p_ttl, p_waiter, NULL, NULL, p_now, p_backend, true,
                    p_slots[i], NULL, NULL, false);
            END IF;
        END LOOP;
    END;
    RETURN QUERY SELECT * FROM unnest(v_rows);
END $$;

-- Ends an active lease, and hands its slot on at once where it can
-- (one commit then serves the return and the next grant). Only
-- the lease's slot rows and a head's place are locked, not the pool row:
-- returns on different slots commit in parallel. One row: a grant as
-- semaphore_try_borrow's (status 0, for the claimed head of the caller's
-- process; else 1), whether the lease was active, whether its slot went to
-- another process's head, and whether it was left free with someone to
-- wake (then, or if handed to another process, the caller wakes the
-- heads; a slot handed to its own claimed head, or left free while nobody
-- is queued, needs nobody woken). The caller wakes the queued heads with
-- semaphore_returned, in a transaction of its own after this one commits:
-- PostgreSQL serializes the commits of notifying transactions, flush
-- included, so a notification sent here would make returns take turns.
--
-- Who gets the slot (only if p_hand_off: the conformance suite's gate
-- turns hand-offs off while it holds heads' own calls), first come first
-- served: the head of the shared queue, if another process's head
-- is first, is one-slot without a key (its place keeps its ttl, owner and
-- session), lives, and is not looking right now (its advisory lock): it
-- finds its lease by `granted_to` at its next look, and takes it
-- (semaphore_take_handed); until then the lease lasts at most
-- {handed_bound} ms. Else, if
-- nobody else is queued ahead, the caller's claimed head (p_grant, the
-- lease id, with p_waiter, p_ttl, p_owner, p_session), whose
-- place if any goes. Either only if the pool grants and has room (no
-- active slot at or above the count); the grant takes the lowest free
-- slot below the count not locked by a grant in flight, a new token.
-- Otherwise the wake-up tells the heads to look, as before.
CREATE OR REPLACE FUNCTION {s}.semaphore_return_lease(
    p_pool uuid, p_lease uuid, p_now bigint, p_hand_off boolean, p_grant uuid, p_waiter uuid,
    p_ttl bigint, p_owner text, p_session uuid)
RETURNS TABLE (o_status smallint, o_lease uuid, o_positions bigint[], o_token bigint,
    o_expires_at bigint, o_returned boolean, o_handed boolean, o_free boolean, o_session uuid)
LANGUAGE plpgsql SET lock_timeout = '5s' AS $$
DECLARE v_now bigint; v_count bigint; v_pos bigint; v_tok bigint; v_exp bigint; v_id uuid;
    v_head {s}.semaphore_waiters%ROWTYPE; v_free boolean := true; v_session uuid;
    v_open boolean; v_queued boolean; v_returned boolean; v_handed uuid; v_taker uuid;
BEGIN
    v_now := {s}.semaphore_now(p_now);
    -- The common path (version 7): no head of the caller's process
    -- claimed and nobody queued. One statement frees the lease's rows;
    -- the pool's gate, held shared from before it until commit, decides
    -- whether anyone must be woken (semaphore_gate): a borrow taking a
    -- place either committed it before this statement's snapshot, which
    -- then sees it and takes the path below, or waits for this commit and
    -- then sees the slot free, or holds the gate now (then o_free asks the
    -- caller for the wake-up).
    IF p_grant IS NULL THEN
        v_open := pg_try_advisory_xact_lock_shared({s}.semaphore_gate(p_pool));
        WITH queued AS (
            SELECT EXISTS (SELECT 1 FROM {s}.semaphore_waiters w WHERE w.pool = p_pool) AS any),
        freed AS (
            UPDATE {s}.semaphore_slots l SET lease = NULL, token = NULL, expires_at = 0,
                    owner = NULL, borrow_key = NULL, session = NULL, granted_to = NULL
                FROM queued q
                WHERE NOT q.any AND l.pool = p_pool AND l.lease = p_lease
                    AND l.expires_at > v_now
                    AND (l.session IS NULL OR EXISTS (SELECT 1 FROM {s}.semaphore_sessions x
                        WHERE x.id = l.session AND x.expires_at > v_now))
                RETURNING 1)
        SELECT q.any, EXISTS (SELECT 1 FROM freed) INTO v_queued, v_returned FROM queued q;
        IF NOT v_queued THEN
            o_status := 1; o_returned := v_returned; o_handed := false;
            o_free := v_returned AND NOT v_open;
            RETURN NEXT;
            RETURN;
        END IF;
    END IF;
    -- A lease handed to another process's head, returned by its holder
    -- (it held it on arrival) before its process confirmed it (version
    -- 11), active or not: the head's place, kept until then, goes too
    -- (after the slot, in the order the head's own take locks them).
    SELECT l.granted_to INTO v_taker FROM {s}.semaphore_slots l
        WHERE l.pool = p_pool AND l.lease = p_lease AND l.granted_to IS NOT NULL LIMIT 1;
    IF v_taker IS NOT NULL THEN
        -- The head's lock first, as its leave and its confirmation take it.
        PERFORM pg_advisory_xact_lock({s}.semaphore_waiter_key(v_taker));
    END IF;
    UPDATE {s}.semaphore_slots l SET lease = NULL, token = NULL, expires_at = 0,
            owner = NULL, borrow_key = NULL, session = NULL, granted_to = NULL
        WHERE l.pool = p_pool AND l.lease = p_lease AND l.expires_at > v_now
        AND {s}.semaphore_alive(l.session, v_now);
    v_returned := FOUND;
    IF v_taker IS NOT NULL THEN
        DELETE FROM {s}.semaphore_waiters w WHERE w.pool = p_pool AND w.waiter = v_taker;
    END IF;
    IF NOT v_returned THEN
        RETURN QUERY SELECT 1::smallint, NULL::uuid, NULL::bigint[], NULL::bigint,
            NULL::bigint, false, false, false, NULL::uuid;
        RETURN;
    END IF;
    -- Leaves with v_id set if a lease goes to the claimed head (p_grant),
    -- or v_pos alone if the slot went to another process's head.
    <<hand_on>>
    BEGIN
        EXIT hand_on WHEN NOT p_hand_off;
        -- (A head already handed a slot that it has not taken is served.)
        SELECT * INTO v_head FROM {s}.semaphore_waiters w
            WHERE w.pool = p_pool AND w.alive_until > v_now
                AND NOT {s}.semaphore_is_handed(p_pool, w.waiter, v_now)
            ORDER BY w.ticket LIMIT 1;
        IF FOUND AND v_head.waiter IS DISTINCT FROM p_waiter THEN
            p_grant := NULL;
            -- (Never to a head whose session ended: its lease would be
            -- born dead.)
            EXIT hand_on WHEN v_head.ttl IS NULL
                OR NOT {s}.semaphore_alive(v_head.session, v_now)
                OR (v_head.backend IS NOT NULL AND NOT EXISTS (
                    SELECT 1 FROM pg_stat_get_activity(v_head.backend) a
                    WHERE a.pid = v_head.backend))
                OR NOT pg_try_advisory_xact_lock({s}.semaphore_waiter_key(v_head.waiter));
            -- The place locked before the slot is taken: a head leaving
            -- meanwhile (semaphore_leave_queue) then finds the slot handed,
            -- and frees it.
            PERFORM 1 FROM {s}.semaphore_waiters w
                WHERE w.pool = p_pool AND w.waiter = v_head.waiter AND w.alive_until > v_now
                FOR UPDATE;
            EXIT hand_on WHEN NOT FOUND;
            -- Its place is kept until it takes a slot handed to it: a return
            -- that committed a hand-off to it since the look above (its
            -- place was locked until then) leaves it served.
            EXIT hand_on WHEN {s}.semaphore_is_handed(p_pool, v_head.waiter, v_now);
        ELSE
            EXIT hand_on WHEN p_grant IS NULL OR NOT {s}.semaphore_alive(p_session, v_now);
            -- The claimed head may have been handed a slot through the
            -- shared queue by a return in flight (its place was first
            -- then): that slot is its lease, and the one freed here stays
            -- free. The lock waits such a return out (it holds it), and
            -- keeps a later one from handing it another.
            PERFORM pg_advisory_xact_lock({s}.semaphore_waiter_key(p_waiter));
            SELECT * INTO v_id, v_tok, v_exp, v_pos, v_session
                FROM {s}.semaphore_take_handed(p_pool, p_waiter, p_ttl, v_now);
            EXIT hand_on WHEN FOUND;
            v_head.waiter := p_waiter;
            v_head.ttl := p_ttl;
            v_head.owner := p_owner;
            v_head.session := p_session;
        END IF;
        SELECT p.count INTO v_count FROM {s}.semaphore_pools p
            WHERE p.pool = p_pool AND NOT p.draining
            AND NOT EXISTS (SELECT 1 FROM {s}.semaphore_slots l
                            WHERE l.pool = p_pool AND l.position >= p.count
                            AND l.expires_at > v_now);
        EXIT hand_on WHEN v_count IS NULL;
        v_exp := least(v_now + v_head.ttl, {max_ms});
        IF p_grant IS NULL THEN
            -- Another process's head: bound until it takes the slot
            -- (semaphore_take_handed), so that a head whose process died
            -- holds back no one for longer.
            v_exp := least(v_exp, v_now + {handed_bound});
        END IF;
        UPDATE {s}.semaphore_slots l SET lease = coalesce(p_grant, gen_random_uuid()),
                token = nextval('{s}.semaphore_tokens'), expires_at = v_exp,
                owner = v_head.owner, borrow_key = NULL, session = v_head.session,
                granted_to = CASE WHEN p_grant IS NULL THEN v_head.waiter END
            WHERE l.pool = p_pool AND l.position = (
                SELECT f.position FROM {s}.semaphore_slots f
                WHERE f.pool = p_pool AND f.position < v_count AND f.expires_at <= v_now
                ORDER BY f.position LIMIT 1
                FOR UPDATE SKIP LOCKED)
            RETURNING l.position, l.token, l.lease INTO v_pos, v_tok, v_id;
        EXIT hand_on WHEN NOT FOUND;
        -- The claimed head's place goes with its grant; another process's
        -- head keeps its place until it takes the slot (semaphore_take_handed).
        IF p_grant IS NOT NULL THEN
            DELETE FROM {s}.semaphore_waiters w
                WHERE w.pool = p_pool AND w.waiter = v_head.waiter;
        END IF;
        v_free := false;
        v_session := v_head.session;
        IF p_grant IS NULL THEN
            v_handed := v_id;
            v_id := NULL;
        END IF;
    END;
    IF v_id IS NOT NULL THEN
        RETURN QUERY SELECT 0::smallint, v_id, ARRAY[v_pos], v_tok, v_exp, true, false, v_free,
            v_session;
    ELSE
        -- The lease handed to another process's head, if any (version
        -- 11): its wake-up carries it.
        RETURN QUERY SELECT 1::smallint, v_handed, NULL::bigint[], NULL::bigint,
            NULL::bigint, true, NOT v_free, v_free, NULL::uuid;
    END IF;
END $$;

-- Moves an active lease's expiry to now + ttl. status 0: renewed; 1: not
-- active; 2: no such pool.
CREATE OR REPLACE FUNCTION {s}.semaphore_renew(p_pool uuid, p_lease uuid, p_ttl bigint, p_now bigint)
RETURNS TABLE (o_status smallint, o_lease uuid, o_positions bigint[], o_token bigint,
    o_expires_at bigint, o_session uuid)
LANGUAGE plpgsql SET lock_timeout = '5s' AS $$
DECLARE v_now bigint; v_positions bigint[]; v_tok bigint; v_exp bigint; v_session uuid;
BEGIN
    PERFORM 1 FROM {s}.semaphore_pools p WHERE p.pool = p_pool;
    IF NOT FOUND THEN
        RETURN QUERY SELECT 2::smallint, NULL::uuid, NULL::bigint[], NULL::bigint, NULL::bigint,
            NULL::uuid;
        RETURN;
    END IF;
    v_now := {s}.semaphore_now(p_now);
    WITH renewed AS (
        UPDATE {s}.semaphore_slots l SET expires_at = least(v_now + p_ttl, {max_ms})
            WHERE l.pool = p_pool AND l.lease = p_lease AND l.expires_at > v_now
                AND {s}.semaphore_alive(l.session, v_now)
            RETURNING l.position, l.token, l.expires_at, l.session)
    SELECT array_agg(r.position ORDER BY r.position), min(r.token), min(r.expires_at),
            min(r.session::text)::uuid
        INTO v_positions, v_tok, v_exp, v_session FROM renewed r;
    IF v_positions IS NULL THEN
        RETURN QUERY SELECT 1::smallint, NULL::uuid, NULL::bigint[], NULL::bigint, NULL::bigint,
            NULL::uuid;
        RETURN;
    END IF;
    PERFORM {s}.semaphore_wake(p_pool);
    RETURN QUERY SELECT 0::smallint, p_lease, v_positions, v_tok, v_exp, v_session;
END $$;

-- Unbinds an active lease from its session, so that it
-- lives to its expiry whatever becomes of its holder; whether it was
-- active.
CREATE OR REPLACE FUNCTION {s}.semaphore_unbind(p_pool uuid, p_lease uuid, p_now bigint)
RETURNS boolean
LANGUAGE plpgsql SET lock_timeout = '5s' AS $$
DECLARE v_now bigint := {s}.semaphore_now(p_now); v_taker uuid; v_until bigint;
BEGIN
    -- A lease handed to another process's head that its holder unbinds
    -- before its process confirmed it (version 11): taken now, to the
    -- expiry its holder counts (as semaphore_returned tells it), so that
    -- the hand-off's bound, which the session no longer stands in for,
    -- does not end it first; the head's place goes.
    SELECT l.granted_to, least(l.expires_at - least(w.ttl, {handed_bound}) + w.ttl, {max_ms})
        INTO v_taker, v_until
        FROM {s}.semaphore_slots l
        JOIN {s}.semaphore_waiters w ON w.pool = l.pool AND w.waiter = l.granted_to
        WHERE l.pool = p_pool AND l.lease = p_lease AND w.ttl IS NOT NULL;
    IF v_taker IS NOT NULL THEN
        PERFORM pg_advisory_xact_lock({s}.semaphore_waiter_key(v_taker));
    END IF;
    UPDATE {s}.semaphore_slots l SET session = NULL,
            expires_at = greatest(l.expires_at, coalesce(v_until, 0))
        WHERE l.pool = p_pool AND l.lease = p_lease AND l.expires_at > v_now
        AND {s}.semaphore_alive(l.session, v_now);
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    IF v_taker IS NOT NULL THEN
        DELETE FROM {s}.semaphore_waiters w WHERE w.pool = p_pool AND w.waiter = v_taker;
    END IF;
    RETURN true;
END $$;

-- The confirmation of lease p_lease, handed to queued head p_waiter of
-- another process and held by that process since the notification that
-- carried it arrived (version 11): taken, to expire at p_expiry at the
-- earliest (the expiry its holder counts). Served either way, the head's
-- place goes, and a slot handed to it since (nobody there waits for it)
-- is freed. Whether the lease was still active. The head's lock first, as
-- its leave takes it.
CREATE OR REPLACE FUNCTION {s}.semaphore_confirm_handed(
    p_pool uuid, p_waiter uuid, p_lease uuid, p_expiry bigint, p_now bigint)
RETURNS boolean
LANGUAGE plpgsql SET lock_timeout = '5s' AS $$
DECLARE v_now bigint := {s}.semaphore_now(p_now); v_taken boolean;
BEGIN
    PERFORM pg_advisory_xact_lock({s}.semaphore_waiter_key(p_waiter));
    UPDATE {s}.semaphore_slots l
        SET expires_at = greatest(l.expires_at, least(p_expiry, {max_ms}))
        WHERE l.pool = p_pool AND l.lease = p_lease AND l.granted_to = p_waiter
            AND l.expires_at > v_now AND {s}.semaphore_alive(l.session, v_now);
    v_taken := FOUND;
    IF NOT v_taken THEN
        UPDATE {s}.semaphore_slots l SET lease = NULL, token = NULL, expires_at = 0,
                owner = NULL, borrow_key = NULL, session = NULL, granted_to = NULL
            WHERE l.pool = p_pool AND l.granted_to = p_waiter AND l.lease <> p_lease;
    END IF;
    DELETE FROM {s}.semaphore_waiters w WHERE w.pool = p_pool AND w.waiter = p_waiter;
    IF NOT v_taken THEN
        PERFORM {s}.semaphore_wake(p_pool);
    END IF;
    RETURN v_taken;
END $$;

-- Ends the active lease holding a position (all its slots), as a
-- return would. status 0: ended (with the lease); 1: none; 2: no such pool.
CREATE OR REPLACE FUNCTION {s}.semaphore_force_return(p_pool uuid, p_position bigint, p_now bigint)
RETURNS TABLE (o_status smallint, o_lease uuid, o_positions bigint[], o_token bigint,
    o_expires_at bigint, o_owner text, o_key text)
LANGUAGE plpgsql SET lock_timeout = '5s' AS $$
DECLARE v_now bigint; v_id uuid; v_positions bigint[]; v_tok bigint; v_exp bigint;
    v_owner text; v_key text;
BEGIN
    PERFORM 1 FROM {s}.semaphore_pools p WHERE p.pool = p_pool;
    IF NOT FOUND THEN
        RETURN QUERY SELECT 2::smallint, NULL::uuid, NULL::bigint[], NULL::bigint, NULL::bigint,
            NULL::text, NULL::text;
        RETURN;
    END IF;
    v_now := {s}.semaphore_now(p_now);
    SELECT l.lease INTO v_id FROM {s}.semaphore_slots l
        WHERE l.pool = p_pool AND l.position = p_position AND l.expires_at > v_now
            AND {s}.semaphore_alive(l.session, v_now);
    IF v_id IS NOT NULL THEN
        -- Its rows locked first (and no other lock held while waiting for
        -- them), so a return or renewal in flight ends before they are read.
        PERFORM 1 FROM {s}.semaphore_slots l
            WHERE l.pool = p_pool AND l.lease = v_id AND l.expires_at > v_now FOR UPDATE;
        SELECT array_agg(l.position ORDER BY l.position), min(l.token), min(l.expires_at),
                max(l.owner), max(l.borrow_key)
            INTO v_positions, v_tok, v_exp, v_owner, v_key FROM {s}.semaphore_slots l
            WHERE l.pool = p_pool AND l.lease = v_id AND l.expires_at > v_now;
    END IF;
    IF v_positions IS NULL THEN
        RETURN QUERY SELECT 1::smallint, NULL::uuid, NULL::bigint[], NULL::bigint, NULL::bigint,
            NULL::text, NULL::text;
        RETURN;
    END IF;
    UPDATE {s}.semaphore_slots l SET lease = NULL, token = NULL, expires_at = 0,
            owner = NULL, borrow_key = NULL, session = NULL, granted_to = NULL
        WHERE l.pool = p_pool AND l.position = ANY(v_positions);
    PERFORM {s}.semaphore_wake(p_pool);
    RETURN QUERY SELECT 0::smallint, v_id, v_positions, v_tok, v_exp, v_owner, v_key;
END $$;

-- Forgets a queued head's place, and frees a slot a return handed it
-- that it never took (its borrow was dropped); wakes the next head if
-- either was there. The head's lock first (version 10), as every other
-- writer of its place and its handed slot takes it: a return that hands
-- the head a slot or takes one for it (semaphore_take_handed) locks the
-- slot, then the place; this, taking the place and then the slot without
-- the head's lock, met such a return in a deadlock. It waits out a
-- return or a look in flight for the head, and then finds what it left.
CREATE OR REPLACE FUNCTION {s}.semaphore_leave_queue(p_pool uuid, p_waiter uuid) RETURNS boolean
LANGUAGE plpgsql SET lock_timeout = '5s' AS $$
DECLARE v_left boolean;
BEGIN
    PERFORM pg_advisory_xact_lock({s}.semaphore_waiter_key(p_waiter));
    DELETE FROM {s}.semaphore_waiters w WHERE w.pool = p_pool AND w.waiter = p_waiter;
    v_left := FOUND;
    UPDATE {s}.semaphore_slots l SET lease = NULL, token = NULL, expires_at = 0,
            owner = NULL, borrow_key = NULL, session = NULL, granted_to = NULL
        WHERE l.pool = p_pool AND l.granted_to = p_waiter;
    v_left := v_left OR FOUND;
    IF NOT v_left THEN
        RETURN false;
    END IF;
    PERFORM {s}.semaphore_wake(p_pool);
    RETURN true;
END $$;
