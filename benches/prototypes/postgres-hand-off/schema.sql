DROP SCHEMA IF EXISTS proto53 CASCADE;
CREATE SCHEMA proto53;
SET search_path = proto53;
CREATE TABLE slots (pos int PRIMARY KEY, holder text, token bigint, expires timestamptz);
INSERT INTO slots SELECT g FROM generate_series(0, 7) g;
CREATE TABLE queue (ticket bigserial PRIMARY KEY, waiter text NOT NULL, channel text NOT NULL, ttl_ms int NOT NULL);
CREATE SEQUENCE tok;
CREATE TABLE anchor (id int PRIMARY KEY, n bigint NOT NULL DEFAULT 0);
INSERT INTO anchor SELECT g FROM generate_series(1, 1000) g;
-- A borrow: the lowest free slot if nobody is queued (SKIP LOCKED), else a place
-- in the queue. One statement's worth of work in one function, one round trip.
CREATE FUNCTION borrow(w text, ch text, ttl int, OUT pos int, OUT token bigint) AS $$
BEGIN
  IF NOT EXISTS (SELECT 1 FROM proto53.queue) THEN
    UPDATE proto53.slots s SET holder = w, token = nextval('proto53.tok'),
      expires = now() + ttl * interval '1 millisecond'
    WHERE s.pos = (SELECT f.pos FROM proto53.slots f WHERE f.holder IS NULL OR f.expires < now()
                   ORDER BY f.pos LIMIT 1 FOR UPDATE SKIP LOCKED)
    RETURNING s.pos, s.token INTO pos, token;
    IF FOUND THEN RETURN; END IF;
  END IF;
  INSERT INTO proto53.queue (waiter, channel, ttl_ms) VALUES (w, ch, ttl);
END $$ LANGUAGE plpgsql;
-- A queued waiter's look (the fallback poll): takes a free slot if it heads the queue.
CREATE FUNCTION recheck(w text, OUT pos int, OUT token bigint) AS $$
BEGIN
  IF (SELECT waiter FROM proto53.queue ORDER BY ticket LIMIT 1) IS DISTINCT FROM w THEN RETURN; END IF;
  UPDATE proto53.slots s SET holder = w, token = nextval('proto53.tok'), expires = now() + interval '30 seconds'
  WHERE s.pos = (SELECT f.pos FROM proto53.slots f WHERE f.holder IS NULL OR f.expires < now()
                 ORDER BY f.pos LIMIT 1 FOR UPDATE SKIP LOCKED)
  RETURNING s.pos, s.token INTO pos, token;
  IF FOUND THEN DELETE FROM proto53.queue WHERE waiter = w; END IF;
END $$ LANGUAGE plpgsql;
-- A return: hands the slot to the queue's head in the same transaction, and
-- tells it (NOTIFY on its process's channel, the lease in the payload).
CREATE FUNCTION give_back(p int, w text) RETURNS int AS $$
DECLARE head proto53.queue; t bigint;
BEGIN
  PERFORM 1 FROM proto53.slots WHERE pos = p AND holder = w FOR UPDATE;
  IF NOT FOUND THEN RETURN 0; END IF;
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
