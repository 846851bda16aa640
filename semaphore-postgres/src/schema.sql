-- The PostgreSQL store's tables and functions, schema version 3 (version 1
-- had the same tables; 2 replaced functions only: `semaphore_delete` locks
-- the pool row first, heads refresh their place at every look; 3 holds
-- weighted leases, R15: a lease of n slots is n rows under one lease id,
-- token and expiry, its labels on its lowest row, and a queued head records
-- the slots it waits for; a lease bound to its holder, R16, names the
-- holder's session: its backend pid and start, as pg_stat_activity shows
-- them).
-- `{s}` is the store's schema, quoted; `{channel}` its notification channel.
-- Times are unix milliseconds on the server's clock (SPEC "Time"); each
-- function reads it once, after taking the pool row's lock, unless a test
-- passes an explicit `p_now`.

CREATE TABLE IF NOT EXISTS {s}.semaphore_store (
    id integer PRIMARY KEY CHECK (id = 1),
    schema_version integer NOT NULL
);
CREATE SEQUENCE IF NOT EXISTS {s}.semaphore_tokens;
CREATE SEQUENCE IF NOT EXISTS {s}.semaphore_tickets;
CREATE TABLE IF NOT EXISTS {s}.semaphore_pools (
    pool uuid PRIMARY KEY,
    count bigint NOT NULL,
    draining boolean NOT NULL DEFAULT false
);
CREATE TABLE IF NOT EXISTS {s}.semaphore_leases (
    pool uuid NOT NULL,
    position bigint NOT NULL,
    lease uuid NOT NULL,
    token bigint NOT NULL,
    expires_at bigint NOT NULL,
    owner text,
    borrow_key text,
    holder integer,
    holder_start bigint,
    PRIMARY KEY (pool, position)
);
CREATE UNIQUE INDEX IF NOT EXISTS semaphore_leases_key ON {s}.semaphore_leases (pool, borrow_key)
    WHERE borrow_key IS NOT NULL;
CREATE INDEX IF NOT EXISTS semaphore_leases_lease ON {s}.semaphore_leases (lease);
CREATE TABLE IF NOT EXISTS {s}.semaphore_waiters (
    pool uuid NOT NULL,
    waiter uuid NOT NULL,
    ticket bigint NOT NULL,
    alive_until bigint NOT NULL,
    backend integer,
    slots bigint NOT NULL DEFAULT 1,
    PRIMARY KEY (pool, waiter)
);

DO $$ BEGIN
    CREATE TYPE {s}.semaphore_attempt AS (
        o_status smallint, o_lease uuid, o_positions bigint[], o_token bigint, o_expires_at bigint);
EXCEPTION WHEN duplicate_object THEN NULL;
END $$;

-- The deciding instant: the test's, or the server's clock now.
CREATE OR REPLACE FUNCTION {s}.semaphore_now(p_now bigint) RETURNS bigint
LANGUAGE sql VOLATILE AS $$
    SELECT coalesce(p_now, floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint)
$$;

-- R16: whether the session that holds a bound lease still exists: its
-- backend pid with the same start (a reused pid is another session). Where
-- the start is hidden (another role's session without pg_read_all_stats),
-- the pid alone: liveness may only ever shorten a lease, never take one
-- from a live holder. True for an unbound lease (no holder).
CREATE OR REPLACE FUNCTION {s}.semaphore_alive(p_pid integer, p_start bigint) RETURNS boolean
LANGUAGE sql STABLE AS $$
    SELECT p_pid IS NULL OR EXISTS (
        SELECT 1 FROM pg_stat_activity a WHERE a.pid = p_pid AND (a.backend_start IS NULL
            OR floor(extract(epoch FROM a.backend_start) * 1000000)::bigint = p_start))
$$;

-- R3, R7, R15, R16: slots held at p_now by the pool's active leases (not
-- expired, holder not gone).
CREATE OR REPLACE FUNCTION {s}.semaphore_in_use(p_pool uuid, p_now bigint) RETURNS bigint
LANGUAGE sql STABLE AS $$
    SELECT count(*) FROM {s}.semaphore_leases l WHERE l.pool = p_pool AND l.expires_at > p_now
        AND {s}.semaphore_alive(l.holder, l.holder_start)
$$;

-- Wakes waiters of every process if any head is queued on the pool.
CREATE OR REPLACE FUNCTION {s}.semaphore_wake(p_pool uuid) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM {s}.semaphore_waiters WHERE pool = p_pool) THEN
        PERFORM pg_notify('{channel}', p_pool::text);
    END IF;
END $$;

-- R2: creates the pool or sets its count; its count and in_use.
CREATE OR REPLACE FUNCTION {s}.semaphore_register(p_pool uuid, p_count bigint, p_now bigint)
RETURNS TABLE (o_count bigint, o_in_use bigint, o_draining boolean)
LANGUAGE plpgsql AS $$
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
LANGUAGE plpgsql AS $$
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

-- R4: removes the pool, its leases and its queued heads. The pool row is
-- locked first: a borrow queued on that lock then finds no pool, and every
-- lease committed before the lock was taken is seen by the deletes below
-- (each statement of a volatile function reads a fresh snapshot).
CREATE OR REPLACE FUNCTION {s}.semaphore_delete(p_pool uuid) RETURNS boolean
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM 1 FROM {s}.semaphore_pools WHERE pool = p_pool FOR UPDATE;
    PERFORM {s}.semaphore_wake(p_pool);
    DELETE FROM {s}.semaphore_leases WHERE pool = p_pool;
    DELETE FROM {s}.semaphore_waiters WHERE pool = p_pool;
    DELETE FROM {s}.semaphore_pools WHERE pool = p_pool;
    RETURN FOUND;
END $$;

-- R5, R6, R10, R11, R15: one borrow attempt of p_slots slots on one
-- pool. status 0: granted (the new lease, or the keyed one, with its
-- positions); 1: exhausted (expires_at is the earliest expiry); 2: no such
-- pool; 3: the pool drains. A borrower of n is granted only if n slots are
-- free beyond the
-- weights of the heads queued ahead of it. A refused head keeps its place
-- if p_keep_place.
CREATE OR REPLACE FUNCTION {s}.semaphore_try_borrow(
    p_pool uuid, p_lease uuid, p_ttl bigint, p_waiter uuid, p_key text, p_owner text,
    p_now bigint, p_backend integer, p_keep_place boolean, p_slots bigint,
    p_holder integer, p_holder_start bigint)
RETURNS TABLE (o_status smallint, o_lease uuid, o_positions bigint[], o_token bigint, o_expires_at bigint)
LANGUAGE plpgsql AS $$
DECLARE
    v_count bigint; v_now bigint; v_held bigint; v_ticket bigint; v_alive bigint;
    v_ahead bigint; v_dropped bigint; v_pos bigint; v_tok bigint; v_exp bigint; v_id uuid;
    v_positions bigint[]; v_draining boolean;
BEGIN
    SELECT p.count, p.draining INTO v_count, v_draining
        FROM {s}.semaphore_pools p WHERE p.pool = p_pool FOR UPDATE;
    IF NOT FOUND THEN
        RETURN QUERY SELECT 2::smallint, NULL::uuid, NULL::bigint[], NULL::bigint, NULL::bigint;
        RETURN;
    END IF;
    IF v_draining THEN
        RETURN QUERY SELECT 3::smallint, p_pool, NULL::bigint[], NULL::bigint, NULL::bigint;
        RETURN;
    END IF;
    v_now := {s}.semaphore_now(p_now);
    DELETE FROM {s}.semaphore_leases l WHERE l.pool = p_pool AND l.expires_at <= v_now;
    DELETE FROM {s}.semaphore_waiters w WHERE w.pool = p_pool AND w.alive_until <= v_now;
    IF p_key IS NOT NULL THEN
        -- R16: a key whose lease died with its holder borrows anew.
        DELETE FROM {s}.semaphore_leases l WHERE l.pool = p_pool AND l.lease = (
            SELECT k.lease FROM {s}.semaphore_leases k
            WHERE k.pool = p_pool AND k.borrow_key = p_key AND k.holder IS NOT NULL
                AND NOT {s}.semaphore_alive(k.holder, k.holder_start));
        SELECT l.lease, l.token, l.expires_at INTO v_id, v_tok, v_exp
            FROM {s}.semaphore_leases l WHERE l.pool = p_pool AND l.borrow_key = p_key;
        IF FOUND THEN
            DELETE FROM {s}.semaphore_waiters w WHERE w.pool = p_pool AND w.waiter = p_waiter;
            RETURN QUERY SELECT 0::smallint, v_id,
                ARRAY(SELECT l.position FROM {s}.semaphore_leases l
                      WHERE l.pool = p_pool AND l.lease = v_id ORDER BY l.position),
                v_tok, v_exp;
            RETURN;
        END IF;
    END IF;
    SELECT count(*) INTO v_held FROM {s}.semaphore_leases l WHERE l.pool = p_pool;
    IF p_waiter IS NOT NULL THEN
        SELECT w.ticket, w.alive_until INTO v_ticket, v_alive
            FROM {s}.semaphore_waiters w WHERE w.pool = p_pool AND w.waiter = p_waiter;
    END IF;
    SELECT coalesce(sum(w.slots), 0) INTO v_ahead FROM {s}.semaphore_waiters w
        WHERE w.pool = p_pool AND w.ticket < coalesce(v_ticket, 9223372036854775807);
    IF v_ahead > 0 AND v_count - v_held >= p_slots THEN
        -- Heads whose store's listener connection is gone: their process died.
        WITH gone AS (
            DELETE FROM {s}.semaphore_waiters w
                WHERE w.pool = p_pool AND w.ticket < coalesce(v_ticket, 9223372036854775807)
                AND w.backend IS NOT NULL
                AND NOT EXISTS (SELECT 1 FROM pg_stat_activity a WHERE a.pid = w.backend)
                RETURNING w.slots)
        SELECT coalesce(sum(gone.slots), 0) INTO v_dropped FROM gone;
        v_ahead := v_ahead - v_dropped;
    END IF;
    IF v_count - v_held - v_ahead < p_slots THEN
        -- R16: leases whose holder's session is gone are expired.
        DELETE FROM {s}.semaphore_leases l WHERE l.pool = p_pool AND l.holder IS NOT NULL
            AND NOT {s}.semaphore_alive(l.holder, l.holder_start);
        GET DIAGNOSTICS v_dropped = ROW_COUNT;
        v_held := v_held - v_dropped;
    END IF;
    IF v_count - v_held - v_ahead >= p_slots THEN
        SELECT max(l.position) INTO v_pos FROM {s}.semaphore_leases l WHERE l.pool = p_pool;
        IF v_pos IS NULL OR v_pos + 1 = v_held THEN
            v_positions := ARRAY(SELECT generate_series(v_held, v_held + p_slots - 1));
        ELSIF p_slots = 1 THEN
            SELECT ARRAY[min(c.p)] INTO v_positions FROM (
                SELECT 0::bigint AS p
                UNION ALL SELECT l.position + 1 FROM {s}.semaphore_leases l WHERE l.pool = p_pool
            ) c
            WHERE NOT EXISTS (
                SELECT 1 FROM {s}.semaphore_leases l WHERE l.pool = p_pool AND l.position = c.p);
        ELSE
            -- The p_slots lowest gaps: all of them lie at or below the
            -- highest position held plus p_slots.
            v_positions := ARRAY(
                SELECT g FROM generate_series(0::bigint, v_pos + p_slots) g
                WHERE NOT EXISTS (
                    SELECT 1 FROM {s}.semaphore_leases l WHERE l.pool = p_pool AND l.position = g)
                ORDER BY g LIMIT p_slots);
        END IF;
        v_tok := nextval('{s}.semaphore_tokens');
        v_exp := least(v_now + p_ttl, {max_ms});
        INSERT INTO {s}.semaphore_leases
                (pool, position, lease, token, expires_at, owner, borrow_key, holder, holder_start)
            SELECT p_pool, p.p, p_lease, v_tok, v_exp,
                CASE WHEN p.p = v_positions[1] THEN p_owner END,
                CASE WHEN p.p = v_positions[1] THEN p_key END,
                p_holder, p_holder_start
            FROM unnest(v_positions) AS p(p);
        DELETE FROM {s}.semaphore_waiters w WHERE w.pool = p_pool AND w.waiter = p_waiter;
        RETURN QUERY SELECT 0::smallint, p_lease, v_positions, v_tok, v_exp;
        RETURN;
    END IF;
    IF p_waiter IS NOT NULL AND p_keep_place THEN
        IF v_ticket IS NULL THEN
            INSERT INTO {s}.semaphore_waiters (pool, waiter, ticket, alive_until, backend, slots)
                VALUES (p_pool, p_waiter, nextval('{s}.semaphore_tickets'), v_now + {waiter_ttl},
                    p_backend, p_slots);
        ELSIF v_alive - v_now < {waiter_ttl} - {waiter_refresh} THEN
            UPDATE {s}.semaphore_waiters w SET alive_until = v_now + {waiter_ttl}
                WHERE w.pool = p_pool AND w.waiter = p_waiter;
        END IF;
    END IF;
    RETURN QUERY SELECT 1::smallint, NULL::uuid, NULL::bigint[], NULL::bigint,
        (SELECT min(l.expires_at) FROM {s}.semaphore_leases l WHERE l.pool = p_pool);
END $$;

-- All or nothing over several pools: rows as semaphore_try_borrow's, one per
-- pool in the order given, or one row (2, the first unknown pool). Pool rows
-- are locked in id order, so two callers naming the same pools in any order
-- never deadlock.
CREATE OR REPLACE FUNCTION {s}.semaphore_try_borrow_all(
    p_pools uuid[], p_leases uuid[], p_ttl bigint, p_waiter uuid, p_key text, p_owner text,
    p_now bigint, p_backend integer, p_slots bigint[], p_holder integer, p_holder_start bigint)
RETURNS TABLE (o_status smallint, o_lease uuid, o_positions bigint[], o_token bigint, o_expires_at bigint)
LANGUAGE plpgsql AS $$
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
        RETURN QUERY SELECT 2::smallint, v_missing, NULL::bigint[], NULL::bigint, NULL::bigint;
        RETURN;
    END IF;
    BEGIN
        FOR i IN 1 .. cardinality(p_pools) LOOP
            SELECT * INTO v_row FROM {s}.semaphore_try_borrow(
                p_pools[i], p_leases[i], p_ttl, p_waiter, p_key, p_owner, p_now, p_backend, false,
                p_slots[i], p_holder, p_holder_start);
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
                    p_slots[i], NULL, NULL);
            END IF;
        END LOOP;
    END;
    RETURN QUERY SELECT * FROM unnest(v_rows);
END $$;

-- R8: ends an active lease; whether it was active.
CREATE OR REPLACE FUNCTION {s}.semaphore_return(p_pool uuid, p_lease uuid, p_now bigint)
RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE v_now bigint;
BEGIN
    PERFORM 1 FROM {s}.semaphore_pools p WHERE p.pool = p_pool FOR UPDATE;
    v_now := {s}.semaphore_now(p_now);
    DELETE FROM {s}.semaphore_leases l
        WHERE l.lease = p_lease AND l.pool = p_pool AND l.expires_at > v_now
        AND {s}.semaphore_alive(l.holder, l.holder_start);
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    PERFORM {s}.semaphore_wake(p_pool);
    RETURN true;
END $$;

-- Moves an active lease's expiry to now + ttl. status 0: renewed; 1: not
-- active; 2: no such pool.
CREATE OR REPLACE FUNCTION {s}.semaphore_renew(p_pool uuid, p_lease uuid, p_ttl bigint, p_now bigint)
RETURNS TABLE (o_status smallint, o_lease uuid, o_positions bigint[], o_token bigint, o_expires_at bigint)
LANGUAGE plpgsql AS $$
DECLARE v_now bigint; v_positions bigint[]; v_tok bigint; v_exp bigint;
BEGIN
    PERFORM 1 FROM {s}.semaphore_pools p WHERE p.pool = p_pool FOR UPDATE;
    IF NOT FOUND THEN
        RETURN QUERY SELECT 2::smallint, NULL::uuid, NULL::bigint[], NULL::bigint, NULL::bigint;
        RETURN;
    END IF;
    v_now := {s}.semaphore_now(p_now);
    WITH renewed AS (
        UPDATE {s}.semaphore_leases l SET expires_at = least(v_now + p_ttl, {max_ms})
            WHERE l.lease = p_lease AND l.pool = p_pool AND l.expires_at > v_now
            RETURNING l.position, l.token, l.expires_at)
    SELECT array_agg(r.position ORDER BY r.position), min(r.token), min(r.expires_at)
        INTO v_positions, v_tok, v_exp FROM renewed r;
    IF v_positions IS NULL THEN
        RETURN QUERY SELECT 1::smallint, NULL::uuid, NULL::bigint[], NULL::bigint, NULL::bigint;
        RETURN;
    END IF;
    PERFORM {s}.semaphore_wake(p_pool);
    RETURN QUERY SELECT 0::smallint, p_lease, v_positions, v_tok, v_exp;
END $$;

-- Ends the active lease holding a position (all its slots, R15), as a
-- return would. status 0: ended (with the lease); 1: none; 2: no such pool.
CREATE OR REPLACE FUNCTION {s}.semaphore_force_return(p_pool uuid, p_position bigint, p_now bigint)
RETURNS TABLE (o_status smallint, o_lease uuid, o_positions bigint[], o_token bigint,
    o_expires_at bigint, o_owner text, o_key text)
LANGUAGE plpgsql AS $$
DECLARE v_now bigint; v_id uuid; v_positions bigint[]; v_tok bigint; v_exp bigint;
    v_owner text; v_key text;
BEGIN
    PERFORM 1 FROM {s}.semaphore_pools p WHERE p.pool = p_pool FOR UPDATE;
    IF NOT FOUND THEN
        RETURN QUERY SELECT 2::smallint, NULL::uuid, NULL::bigint[], NULL::bigint, NULL::bigint,
            NULL::text, NULL::text;
        RETURN;
    END IF;
    v_now := {s}.semaphore_now(p_now);
    SELECT l.lease INTO v_id FROM {s}.semaphore_leases l
        WHERE l.pool = p_pool AND l.position = p_position AND l.expires_at > v_now;
    IF NOT FOUND THEN
        RETURN QUERY SELECT 1::smallint, NULL::uuid, NULL::bigint[], NULL::bigint, NULL::bigint,
            NULL::text, NULL::text;
        RETURN;
    END IF;
    WITH ended AS (
        DELETE FROM {s}.semaphore_leases l WHERE l.pool = p_pool AND l.lease = v_id
            RETURNING l.position, l.token, l.expires_at, l.owner, l.borrow_key)
    SELECT array_agg(e.position ORDER BY e.position), min(e.token), min(e.expires_at),
        max(e.owner), max(e.borrow_key)
        INTO v_positions, v_tok, v_exp, v_owner, v_key FROM ended e;
    PERFORM {s}.semaphore_wake(p_pool);
    RETURN QUERY SELECT 0::smallint, v_id, v_positions, v_tok, v_exp, v_owner, v_key;
END $$;

-- R12: forgets a queued head's place, and wakes the next if it left.
CREATE OR REPLACE FUNCTION {s}.semaphore_leave_queue(p_pool uuid, p_waiter uuid) RETURNS boolean
LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM {s}.semaphore_waiters w WHERE w.pool = p_pool AND w.waiter = p_waiter;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    PERFORM {s}.semaphore_wake(p_pool);
    RETURN true;
END $$;
