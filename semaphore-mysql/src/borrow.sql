-- The borrow, written once (rules
-- "Lost replies" and "Idempotency keys are atomic"). `{p}` is the table
-- prefix. Names carry the bodies' revision: a store that finds older ones
-- (processes of an earlier release still call them) creates its own
-- beside them. The procedures are separated by lines of `-- ====`.
--
-- `{p}_borrow_step_6` is the step itself, with no transaction control: it
-- locks the pool's row, and answers in its OUT parameters. Status 0
-- granted (the lease's id, token, expiry, positions and session), 1
-- exhausted (the earliest end of an active lease), 2 no pool, 3 draining,
-- 4 the key names a lease of another request, 5 the session has ended.
--
-- A call repeated with the same lease id (its answer was lost) gets the
-- lease it granted; a keyed call whose key names an active lease of the
-- same request (`p_key`, the key and its request digest) gets that lease,
-- and one of another request (the same `p_key_name`) status 4. A bound
-- lease names its session (`p_session`), which must live; a place in the
-- queue names the named lock of its store's connection (`p_conn`), and a
-- place whose lock is free is a gone process's, unless it is held
-- (`p_hold` ms after every look, bound to no process). The token is above
-- `p_above` too: the leases of a multi-pool borrow get rising tokens.
CREATE PROCEDURE {p}_borrow_step_6(
    IN p_pool BINARY(16), IN p_lease BINARY(16), IN p_ttl BIGINT, IN p_max BIGINT,
    IN p_slots INT UNSIGNED, IN p_session BINARY(16), IN p_waiter BINARY(16),
    IN p_owner VARBINARY(1024), IN p_key BLOB, IN p_key_name BLOB, IN p_now BIGINT,
    IN p_waiter_ttl BIGINT, IN p_hold BIGINT, IN p_conn BINARY(16), IN p_above BIGINT,
    OUT o_status INT, OUT o_lease BINARY(16), OUT o_token BIGINT, OUT o_expires BIGINT,
    OUT o_positions TEXT, OUT o_next BIGINT, OUT o_session BINARY(16))
step: BEGIN
    DECLARE v_count BIGINT;
    DECLARE v_draining BOOLEAN;
    DECLARE v_now, v_rows, v_expired, v_highest, v_ticket, v_alive, v_ahead, v_held,
        v_freed, v_stale BIGINT;
    DECLARE v_answer, v_keyed BINARY(16);
    DECLARE v_keyed_gone BOOLEAN;
    DECLARE v_stored BLOB;
    DECLARE v_positions TEXT DEFAULT '';
    DECLARE v_next, v_taken INT UNSIGNED DEFAULT 0;
    DECLARE v_found INT DEFAULT 0;
    DECLARE v_done INT DEFAULT 0;
    DECLARE v_mine BIGINT DEFAULT 0;
    DECLARE taken CURSOR FOR SELECT position FROM {p}_leases WHERE pool = p_pool ORDER BY position;
    DECLARE CONTINUE HANDLER FOR NOT FOUND SET v_done = 1;

    SET o_status = 2, o_lease = NULL, o_token = NULL, o_expires = NULL, o_positions = NULL,
        o_next = NULL, o_session = NULL;
    SELECT count, draining, COALESCE(p_now, CAST(UNIX_TIMESTAMP(SYSDATE(3)) * 1000 AS SIGNED))
        INTO v_count, v_draining, v_now FROM {p}_pools WHERE pool = p_pool FOR UPDATE;
    IF v_count IS NULL THEN
        LEAVE step;
    END IF;
    IF v_draining THEN
        -- A held place keeps its turn through the drain (R11): taken or
        -- refreshed as a refusal would (revision 6).
        IF p_waiter IS NOT NULL AND p_hold IS NOT NULL THEN
            DELETE FROM {p}_waiters
                WHERE pool = p_pool AND waiter = p_waiter AND alive_until <= v_now;
            INSERT INTO {p}_waiters (pool, waiter, alive_until, slots, holder, since)
                VALUES (p_pool, p_waiter, v_now + p_hold, p_slots, NULL, v_now)
                ON DUPLICATE KEY UPDATE alive_until = VALUES(alive_until);
        END IF;
        SET o_status = 3;
        LEAVE step;
    END IF;
    -- One look at the pool's leases: how many, how many expired, the
    -- highest position, and whether this lease id is among the active.
    SELECT COUNT(*), COALESCE(SUM(expires_at <= v_now), 0), MAX(position),
            COALESCE(SUM(lease = p_lease AND expires_at > v_now AND (holder IS NULL
                OR EXISTS (SELECT 1 FROM {p}_sessions x
                           WHERE x.id = holder AND x.expires_at > v_now))), 0)
        INTO v_rows, v_expired, v_highest, v_mine FROM {p}_leases WHERE pool = p_pool;
    IF v_mine > 0 THEN
        SET v_answer = p_lease;
    ELSEIF p_key_name IS NOT NULL THEN
        -- The active lease borrowed under the key's name, with or without
        -- a request digest.
        SELECT lease, holder IS NOT NULL AND NOT EXISTS (SELECT 1 FROM {p}_sessions x
                    WHERE x.id = holder AND x.expires_at > v_now), borrow_key
            INTO v_keyed, v_keyed_gone, v_stored
            FROM {p}_leases WHERE pool = p_pool AND expires_at > v_now
            AND (borrow_key = p_key_name OR (borrow_key > CONCAT(p_key_name, CHAR(31))
                                             AND borrow_key < CONCAT(p_key_name, ' ')))
            LIMIT 1;
        IF v_keyed IS NOT NULL AND v_keyed_gone THEN
            -- Its holder is gone: its slots free, the key borrows anew.
            DELETE FROM {p}_leases WHERE pool = p_pool AND holder IS NOT NULL
                AND NOT EXISTS (SELECT 1 FROM {p}_sessions x
                                WHERE x.id = holder AND x.expires_at > v_now);
            SELECT COUNT(*), COALESCE(SUM(expires_at <= v_now), 0), MAX(position)
                INTO v_rows, v_expired, v_highest FROM {p}_leases WHERE pool = p_pool;
        ELSEIF v_keyed IS NOT NULL AND v_stored = p_key THEN
            SET v_answer = v_keyed;
        ELSEIF v_keyed IS NOT NULL THEN
            SET o_status = 4;
            LEAVE step;
        END IF;
    END IF;
    IF v_answer IS NOT NULL THEN
        IF p_waiter IS NOT NULL THEN
            DELETE FROM {p}_waiters WHERE pool = p_pool AND waiter = p_waiter;
        END IF;
        SELECT MIN(token), MIN(expires_at), GROUP_CONCAT(position ORDER BY position), MIN(holder)
            INTO o_token, o_expires, o_positions, o_session
            FROM {p}_leases WHERE pool = p_pool AND lease = v_answer;
        SET o_status = 0, o_lease = v_answer;
        LEAVE step;
    END IF;
    IF v_expired > 0 THEN
        DELETE FROM {p}_leases WHERE pool = p_pool AND expires_at <= v_now;
        SELECT MAX(position) INTO v_highest FROM {p}_leases WHERE pool = p_pool;
    END IF;
    SET v_held = v_rows - v_expired;
    -- One look at the queue: its stale places, this waiter's own live one,
    -- and the slots owed to the live places ahead of it (all of them for
    -- a borrower that is not queued; none to a place whose weight is over
    -- the count). Stale places are deleted only if there are
    -- any. A place whose store's connection is gone (its named lock free)
    -- is stale too (a killed waiter holds back no one).
    SELECT COALESCE(SUM(w.alive_until <= v_now OR (w.holder IS NOT NULL AND IS_FREE_LOCK(
                CONCAT('semaphore_holder_', LOWER(HEX(w.holder)))) <=> 1)), 0),
            COALESCE(SUM(IF(w.alive_until > v_now AND NOT (w.holder IS NOT NULL AND IS_FREE_LOCK(
                CONCAT('semaphore_holder_', LOWER(HEX(w.holder)))) <=> 1)
                AND w.ticket < COALESCE(me.ticket, 9223372036854775807)
                AND w.slots <= v_count, w.slots, 0)), 0),
            MAX(me.ticket), MAX(me.alive_until)
        INTO v_stale, v_ahead, v_ticket, v_alive
        FROM {p}_waiters w LEFT JOIN {p}_waiters me
            ON me.pool = p_pool AND me.waiter = p_waiter AND me.alive_until > v_now
        WHERE w.pool = p_pool;
    IF v_stale > 0 THEN
        DELETE FROM {p}_waiters WHERE pool = p_pool AND (alive_until <= v_now
            OR (holder IS NOT NULL AND IS_FREE_LOCK(
                CONCAT('semaphore_holder_', LOWER(HEX(holder)))) <=> 1));
        IF v_ticket IS NOT NULL AND NOT EXISTS (SELECT 1 FROM {p}_waiters
                WHERE pool = p_pool AND waiter = p_waiter) THEN
            SET v_ticket = NULL;
        END IF;
    END IF;
    IF v_count - v_held - v_ahead < p_slots THEN
        DELETE FROM {p}_leases WHERE pool = p_pool AND holder IS NOT NULL
            AND NOT EXISTS (SELECT 1 FROM {p}_sessions x
                            WHERE x.id = holder AND x.expires_at > v_now);
        SET v_freed = ROW_COUNT();
        IF v_freed > 0 THEN
            SET v_held = v_held - v_freed;
            SELECT MAX(position) INTO v_highest FROM {p}_leases WHERE pool = p_pool;
        END IF;
    END IF;
    IF v_count - v_held - v_ahead < p_slots THEN
        -- Refused: the waiter joins the queue, or refreshes its place once
        -- less than half its life is left (a held place at every look).
        IF p_waiter IS NOT NULL THEN
            IF v_ticket IS NULL THEN
                INSERT INTO {p}_waiters (pool, waiter, alive_until, slots, holder, since)
                    VALUES (p_pool, p_waiter, v_now + COALESCE(p_hold, p_waiter_ttl), p_slots,
                            IF(p_hold IS NULL, p_conn, NULL), v_now)
                    ON DUPLICATE KEY UPDATE alive_until = VALUES(alive_until);
            ELSEIF p_hold IS NOT NULL OR v_alive - v_now < p_waiter_ttl DIV 2 THEN
                UPDATE {p}_waiters SET alive_until = v_now + COALESCE(p_hold, p_waiter_ttl)
                    WHERE pool = p_pool AND waiter = p_waiter;
            END IF;
        END IF;
        -- The earliest end of an active lease: its expiry, or its
        -- session's end.
        SET o_status = 1, o_next = (SELECT MIN(IF(l.holder IS NULL, l.expires_at,
                    LEAST(l.expires_at, (SELECT x.expires_at FROM {p}_sessions x
                                         WHERE x.id = l.holder))))
             FROM {p}_leases l WHERE l.pool = p_pool AND l.expires_at > v_now
             AND (l.holder IS NULL OR EXISTS (SELECT 1 FROM {p}_sessions x
                                              WHERE x.id = l.holder AND x.expires_at > v_now)));
        LEAVE step;
    END IF;
    -- No lease is born dead.
    IF p_session IS NOT NULL AND NOT EXISTS (SELECT 1 FROM {p}_sessions x
            WHERE x.id = p_session AND x.expires_at > v_now) THEN
        SET o_status = 5;
        LEAVE step;
    END IF;

    -- Above the pool's last token, the store's floor and `p_above`.
    -- Every write of the first two for this pool holds this pool's row, as
    -- this does.
    UPDATE {p}_pools SET last_token = LAST_INSERT_ID(GREATEST(last_token,
            (SELECT s.last_token FROM {p}_store s WHERE s.id = 1), p_above) + 1)
        WHERE pool = p_pool;
    SET o_token = LAST_INSERT_ID();
    SET o_expires = LEAST(v_now + p_ttl, p_max);
    -- The lowest free positions, gaps first in position order;
    -- the labels on the lowest.
    IF v_highest IS NOT NULL AND v_highest + 1 <> v_held THEN
        SET v_done = 0;
        OPEN taken;
        gaps: LOOP
            FETCH taken INTO v_taken;
            IF v_done = 1 OR v_found >= p_slots THEN
                LEAVE gaps;
            END IF;
            WHILE v_next < v_taken AND v_found < p_slots DO
                INSERT INTO {p}_leases (pool, position, lease, token, expires_at, owner,
                        borrow_key, holder)
                    VALUES (p_pool, v_next, p_lease, o_token, o_expires,
                            IF(v_found = 0, p_owner, NULL), IF(v_found = 0, p_key, NULL),
                            p_session);
                SET v_positions = CONCAT(v_positions, IF(v_found = 0, '', ','), v_next);
                SET v_found = v_found + 1;
                SET v_next = v_next + 1;
            END WHILE;
            SET v_next = v_taken + 1;
        END LOOP;
        CLOSE taken;
    ELSE
        SET v_next = v_held;
    END IF;
    WHILE v_found < p_slots DO
        INSERT INTO {p}_leases (pool, position, lease, token, expires_at, owner, borrow_key,
                holder)
            VALUES (p_pool, v_next, p_lease, o_token, o_expires,
                    IF(v_found = 0, p_owner, NULL), IF(v_found = 0, p_key, NULL), p_session);
        SET v_positions = CONCAT(v_positions, IF(v_found = 0, '', ','), v_next);
        SET v_found = v_found + 1;
        SET v_next = v_next + 1;
    END WHILE;
    IF p_waiter IS NOT NULL THEN
        DELETE FROM {p}_waiters WHERE pool = p_pool AND waiter = p_waiter;
    END IF;
    SET o_status = 0, o_lease = p_lease, o_positions = v_positions, o_session = p_session;
END
-- ====
-- A borrow as one call in a transaction of its own: one round trip.
CREATE PROCEDURE {p}_borrow_6(
    IN p_pool BINARY(16), IN p_lease BINARY(16), IN p_ttl BIGINT, IN p_max BIGINT,
    IN p_slots INT UNSIGNED, IN p_session BINARY(16), IN p_waiter BINARY(16),
    IN p_owner VARBINARY(1024), IN p_key BLOB, IN p_key_name BLOB, IN p_now BIGINT,
    IN p_waiter_ttl BIGINT, IN p_hold BIGINT, IN p_conn BINARY(16))
BEGIN
    DECLARE o_status INT;
    DECLARE o_lease, o_session BINARY(16);
    DECLARE o_token, o_expires, o_next BIGINT;
    DECLARE o_positions TEXT;
    DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN ROLLBACK; RESIGNAL; END;
    START TRANSACTION;
    CALL {p}_borrow_step_6(p_pool, p_lease, p_ttl, p_max, p_slots, p_session, p_waiter,
        p_owner, p_key, p_key_name, p_now, p_waiter_ttl, p_hold, p_conn, 0,
        o_status, o_lease, o_token, o_expires, o_positions, o_next, o_session);
    COMMIT;
    SELECT o_status, o_lease, o_token, o_expires, o_positions, o_next, o_session;
END
-- ====
-- A borrow inside the caller's transaction (a multi-pool borrow's), its
-- token above `p_above`.
CREATE PROCEDURE {p}_borrow_in_6(
    IN p_pool BINARY(16), IN p_lease BINARY(16), IN p_ttl BIGINT, IN p_max BIGINT,
    IN p_slots INT UNSIGNED, IN p_session BINARY(16), IN p_waiter BINARY(16),
    IN p_owner VARBINARY(1024), IN p_key BLOB, IN p_key_name BLOB, IN p_now BIGINT,
    IN p_waiter_ttl BIGINT, IN p_hold BIGINT, IN p_conn BINARY(16), IN p_above BIGINT)
BEGIN
    DECLARE o_status INT;
    DECLARE o_lease, o_session BINARY(16);
    DECLARE o_token, o_expires, o_next BIGINT;
    DECLARE o_positions TEXT;
    CALL {p}_borrow_step_6(p_pool, p_lease, p_ttl, p_max, p_slots, p_session, p_waiter,
        p_owner, p_key, p_key_name, p_now, p_waiter_ttl, p_hold, p_conn, p_above,
        o_status, o_lease, o_token, o_expires, o_positions, o_next, o_session);
    SELECT o_status, o_lease, o_token, o_expires, o_positions, o_next, o_session;
END
