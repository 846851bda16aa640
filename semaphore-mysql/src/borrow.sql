-- The uncontended borrow as one call (one round trip): the same steps as
-- `primitives::Step::try_borrow` without a key, in a transaction of its
-- own. `{p}` is the table prefix. The name carries the body's revision:
-- a store that finds an older one (its processes still call it) creates
-- its own beside it. A call repeated with the same lease id
-- (its answer was lost) gets the lease it granted. A bound lease names
-- its session (p_session, R16 amended), which must live; a place names
-- the named lock of its store's connection (p_conn): a place whose lock is
-- free is a gone process's. Status 0 granted, 1 exhausted, 2 no pool, 3
-- draining, 5 the session has ended.
CREATE PROCEDURE {p}_borrow_4(
    IN p_pool BINARY(16), IN p_lease BINARY(16), IN p_ttl BIGINT, IN p_max BIGINT,
    IN p_slots INT UNSIGNED, IN p_session BINARY(16), IN p_waiter BINARY(16),
    IN p_owner VARBINARY(1024), IN p_now BIGINT, IN p_waiter_ttl BIGINT,
    IN p_conn BINARY(16))
proc: BEGIN
    DECLARE v_count BIGINT;
    DECLARE v_draining BOOLEAN;
    DECLARE v_now, v_rows, v_expired, v_highest, v_ticket, v_alive, v_ahead, v_held,
        v_token, v_expires, v_freed, v_stale BIGINT;
    DECLARE v_session BINARY(16);
    DECLARE v_positions TEXT DEFAULT '';
    DECLARE v_next, v_taken INT UNSIGNED DEFAULT 0;
    DECLARE v_found INT DEFAULT 0;
    DECLARE v_done INT DEFAULT 0;
    DECLARE v_mine BIGINT DEFAULT 0;
    DECLARE taken CURSOR FOR SELECT position FROM {p}_leases WHERE pool = p_pool ORDER BY position;
    DECLARE CONTINUE HANDLER FOR NOT FOUND SET v_done = 1;
    DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN ROLLBACK; RESIGNAL; END;

    START TRANSACTION;
    SELECT count, draining, COALESCE(p_now, CAST(UNIX_TIMESTAMP(SYSDATE(3)) * 1000 AS SIGNED))
        INTO v_count, v_draining, v_now FROM {p}_pools WHERE pool = p_pool FOR UPDATE;
    IF v_count IS NULL THEN
        ROLLBACK;
        SELECT 2, NULL, NULL, NULL, NULL, NULL;
        LEAVE proc;
    END IF;
    IF v_draining THEN
        ROLLBACK;
        SELECT 3, NULL, NULL, NULL, NULL, NULL;
        LEAVE proc;
    END IF;
    -- One look at the pool's leases: how many, how many expired, the
    -- highest position, and whether this lease id is among them (a retry
    -- of a call whose answer was lost gets the lease it granted).
    SELECT COUNT(*), COALESCE(SUM(expires_at <= v_now), 0), MAX(position),
            COALESCE(SUM(lease = p_lease AND expires_at > v_now AND (holder IS NULL
                OR EXISTS (SELECT 1 FROM {p}_sessions x
                           WHERE x.id = holder AND x.expires_at > v_now))), 0)
        INTO v_rows, v_expired, v_highest, v_mine FROM {p}_leases WHERE pool = p_pool;
    IF v_mine > 0 THEN
        IF p_waiter IS NOT NULL THEN
            DELETE FROM {p}_waiters WHERE pool = p_pool AND waiter = p_waiter;
        END IF;
        COMMIT;
        SELECT 0, MIN(token), MIN(expires_at), GROUP_CONCAT(position ORDER BY position), NULL,
                MIN(holder)
            FROM {p}_leases WHERE pool = p_pool AND lease = p_lease;
        LEAVE proc;
    END IF;
    IF v_expired > 0 THEN
        DELETE FROM {p}_leases WHERE pool = p_pool AND expires_at <= v_now;
        SELECT MAX(position) INTO v_highest FROM {p}_leases WHERE pool = p_pool;
    END IF;
    SET v_held = v_rows - v_expired;
    -- One look at the queue: its stale places, this waiter's own live one,
    -- and the slots owed to the live places ahead of it (all of them for
    -- a borrower that is not queued; none to a place whose weight is over
    -- the count, R15 amended). Stale places are deleted only if
    -- there are any.
    -- A place whose store's connection is gone (its named lock free) is
    -- stale too (R16, amended: a killed waiter holds back no one).
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
        IF p_waiter IS NOT NULL THEN
            IF v_ticket IS NULL THEN
                INSERT INTO {p}_waiters (pool, waiter, alive_until, slots, holder)
                    VALUES (p_pool, p_waiter, v_now + p_waiter_ttl, p_slots, p_conn)
                    ON DUPLICATE KEY UPDATE alive_until = VALUES(alive_until);
            ELSEIF v_alive - v_now < p_waiter_ttl DIV 2 THEN
                UPDATE {p}_waiters SET alive_until = v_now + p_waiter_ttl
                    WHERE pool = p_pool AND waiter = p_waiter;
            END IF;
        END IF;
        COMMIT;
        SELECT 1, NULL, NULL, NULL,
            (SELECT MIN(IF(l.holder IS NULL, l.expires_at, LEAST(l.expires_at,
                    (SELECT x.expires_at FROM {p}_sessions x WHERE x.id = l.holder))))
             FROM {p}_leases l WHERE l.pool = p_pool AND l.expires_at > v_now
             AND (l.holder IS NULL OR EXISTS (SELECT 1 FROM {p}_sessions x
                                              WHERE x.id = l.holder AND x.expires_at > v_now))),
            NULL;
        LEAVE proc;
    END IF;
    -- R16, amended: no lease is born dead.
    IF p_session IS NOT NULL AND NOT EXISTS (SELECT 1 FROM {p}_sessions x
            WHERE x.id = p_session AND x.expires_at > v_now) THEN
        ROLLBACK;
        SELECT 5, NULL, NULL, NULL, NULL, NULL;
        LEAVE proc;
    END IF;

    -- R9: above the pool's last token and the store's floor. Every write
    -- of either for this pool holds this pool's row, as this does.
    UPDATE {p}_pools SET last_token = LAST_INSERT_ID(GREATEST(last_token,
            (SELECT s.last_token FROM {p}_store s WHERE s.id = 1)) + 1)
        WHERE pool = p_pool;
    SET v_token = LAST_INSERT_ID();
    SET v_expires = LEAST(v_now + p_ttl, p_max);
    SET v_session = p_session;
    IF v_highest IS NOT NULL AND v_highest + 1 <> v_held THEN
        -- Gaps first, in position order.
        SET v_done = 0;
        OPEN taken;
        gaps: LOOP
            FETCH taken INTO v_taken;
            IF v_done = 1 OR v_found >= p_slots THEN
                LEAVE gaps;
            END IF;
            WHILE v_next < v_taken AND v_found < p_slots DO
                INSERT INTO {p}_leases (pool, position, lease, token, expires_at, owner, holder)
                    VALUES (p_pool, v_next, p_lease, v_token, v_expires,
                            IF(v_found = 0, p_owner, NULL), v_session);
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
        INSERT INTO {p}_leases (pool, position, lease, token, expires_at, owner, holder)
            VALUES (p_pool, v_next, p_lease, v_token, v_expires,
                    IF(v_found = 0, p_owner, NULL), v_session);
        SET v_positions = CONCAT(v_positions, IF(v_found = 0, '', ','), v_next);
        SET v_found = v_found + 1;
        SET v_next = v_next + 1;
    END WHILE;
    IF p_waiter IS NOT NULL THEN
        DELETE FROM {p}_waiters WHERE pool = p_pool AND waiter = p_waiter;
    END IF;
    COMMIT;
    SELECT 0, v_token, v_expires, v_positions, NULL, v_session;
END
