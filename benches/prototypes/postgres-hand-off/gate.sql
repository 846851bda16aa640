SET search_path = proto53;
-- Variant with a gate: an enqueuer takes the pool's gate exclusively and looks
-- again under it; a return takes it shared. No look after queueing.
CREATE OR REPLACE FUNCTION borrow(w text, ch text, ttl int, OUT pos int, OUT token bigint) AS $$
DECLARE tries int := 0;
BEGIN
  LOOP
    IF tries = 1 OR NOT EXISTS (SELECT 1 FROM proto53.queue) THEN
      UPDATE proto53.slots s SET holder = w, token = nextval('proto53.tok'),
        expires = now() + ttl * interval '1 millisecond'
      WHERE s.pos = (SELECT f.pos FROM proto53.slots f WHERE f.holder IS NULL OR f.expires < now()
                     ORDER BY f.pos LIMIT 1 FOR UPDATE SKIP LOCKED)
      RETURNING s.pos, s.token INTO pos, token;
      IF FOUND THEN RETURN; END IF;
    END IF;
    EXIT WHEN tries = 1;
    PERFORM pg_advisory_xact_lock(53);
    tries := 1;
    EXIT WHEN EXISTS (SELECT 1 FROM proto53.queue);
  END LOOP;
  INSERT INTO proto53.queue (waiter, channel, ttl_ms) VALUES (w, ch, ttl);
END $$ LANGUAGE plpgsql;
CREATE OR REPLACE FUNCTION give_back(p int, w text) RETURNS int AS $$
DECLARE head proto53.queue; t bigint;
BEGIN
  PERFORM 1 FROM proto53.slots WHERE pos = p AND holder = w FOR UPDATE;
  IF NOT FOUND THEN RETURN 0; END IF;
  PERFORM pg_advisory_xact_lock_shared(53);
  DELETE FROM proto53.queue q WHERE q.ticket = (SELECT ticket FROM proto53.queue ORDER BY ticket LIMIT 1 FOR UPDATE SKIP LOCKED)
    RETURNING * INTO head;
  IF head.ticket IS NULL THEN
    UPDATE proto53.slots SET holder = NULL WHERE pos = p;
    RETURN 1;
  END IF;
  t := nextval('proto53.tok');
  UPDATE proto53.slots SET holder = head.waiter, token = t, expires = now() + head.ttl_ms * interval '1 millisecond' WHERE pos = p;
  PERFORM pg_notify(head.channel, head.waiter || ':' || p || ':' || t);
  RETURN 2;
END $$ LANGUAGE plpgsql;
