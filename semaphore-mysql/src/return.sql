-- The return that rings (rule "Stores": wake-ups across processes). `{p}`
-- is the table prefix; the name carries the body's revision, as the
-- borrow's do.
--
-- Ends lease `p_lease` of `p_pool` if it is active (not expired at the
-- deciding instant, its session alive), and answers how many slots it
-- freed. That `DELETE` commits on its own (the call runs in autocommit);
-- then, for the places first in line that those slots are owed to, each
-- a head of another process, it interrupts the statement that process's
-- link waits in (`KILL QUERY` of the connection holding the place's named
-- lock, `IS_USED_LOCK`): the head looks at once, after the commit, rather
-- than at its next poll. Only heads the freed slots can serve are rung.
--
-- A ring is a courtesy: a link between statements misses it, and a server
-- that refuses the `KILL` (another user's connection, without
-- `CONNECTION ADMIN`) leaves it to the poll. No error of a ring fails the
-- return. A lock name is never reused, so the connection rung is that
-- link's, or is gone (1094, ignored).
CREATE PROCEDURE {p}_return_1(
    IN p_pool BINARY(16), IN p_lease BINARY(16), IN p_now BIGINT, IN p_conn BINARY(16))
BEGIN
    DECLARE v_freed BIGINT DEFAULT 0;
    DECLARE v_heads INT UNSIGNED DEFAULT 0;
    DECLARE v_holder BINARY(16);
    DECLARE v_id BIGINT;
    DECLARE v_done INT DEFAULT 0;
    DECLARE v_rung BINARY(16);
    DECLARE heads CURSOR FOR
        SELECT holder FROM {p}_waiters WHERE pool = p_pool ORDER BY ticket LIMIT v_heads;
    DECLARE CONTINUE HANDLER FOR NOT FOUND SET v_done = 1;

    -- The deciding instant as each row is read (after its lock), as the
    -- other steps judge it, not as the call began.
    DELETE FROM {p}_leases
        WHERE pool = p_pool AND lease = p_lease
        AND expires_at > COALESCE(p_now, CAST(UNIX_TIMESTAMP(SYSDATE(3)) * 1000 AS SIGNED))
        AND NOT (holder IS NOT NULL AND NOT EXISTS (
            SELECT 1 FROM {p}_sessions x WHERE x.id = holder
            AND x.expires_at > COALESCE(p_now, CAST(UNIX_TIMESTAMP(SYSDATE(3)) * 1000 AS SIGNED))));
    SET v_freed = ROW_COUNT();
    -- Nobody in line (an uncontended return): no cursor.
    IF v_freed > 0 AND EXISTS (SELECT 1 FROM {p}_waiters WHERE pool = p_pool) THEN
        SET v_heads = LEAST(v_freed, 16);
        OPEN heads;
        ring: LOOP
            FETCH heads INTO v_holder;
            IF v_done THEN
                LEAVE ring;
            END IF;
            -- A process's places in a row are rung once.
            IF v_holder IS NOT NULL AND NOT v_holder <=> p_conn
                    AND NOT v_holder <=> v_rung THEN
                SET v_rung = v_holder;
                SET v_id = IS_USED_LOCK(CONCAT('semaphore_holder_', LOWER(HEX(v_holder))));
                IF v_id IS NOT NULL AND v_id <> CONNECTION_ID() THEN
                    BEGIN
                        DECLARE CONTINUE HANDLER FOR SQLEXCEPTION BEGIN END;
                        KILL QUERY v_id;
                    END;
                END IF;
            END IF;
        END LOOP;
        CLOSE heads;
    END IF;
    SELECT v_freed;
END
