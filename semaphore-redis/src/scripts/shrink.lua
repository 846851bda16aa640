-- The primitives that only end, move or read: inspect, delete, return,
-- renew, unbind, holders, force_return, leave_queue, place, and a
-- session's beat and close. Flagged allow-oom, so that a server out of
-- memory can still be given slots back and keep its sessions.

-- How long a deleted pool's last token is kept (ms): a pool registered
-- again within it continues above it; after it, the server's clock has
-- passed it.
local TOMBSTONE_MS = 86400000

local function exists(k) return redis.call('EXISTS', k.pool) == 1 end

local function shrink_ops()
    if op == 'inspect' then
        -- {count, in_use, {}, draining, queued}, or {} if there is no pool.
        local k = K(1)
        local count = redis.call('HGET', k.pool, 'count')
        if not count then return {} end
        reap(k)
        return {tonumber(count), redis.call('ZCARD', k.pos), {}, draining(k) and 1 or 0,
            redis.call('ZCARD', k.queue)}
    end

    if op == 'set_draining' then
        -- Starts ('1') or ends ('0') the pool's drain; its state as inspect's,
        -- or {} if there is no pool. Wakes waiters either way.
        local k = K(1)
        local count = redis.call('HGET', k.pool, 'count')
        if not count then return {} end
        redis.call('HSET', k.pool, 'draining', ARGV[A])
        reap(k)
        wake(k)
        return {tonumber(count), redis.call('ZCARD', k.pos), {}, draining(k) and 1 or 0,
            redis.call('ZCARD', k.queue)}
    end

    if op == 'reap_waiters' then
        -- Forgets every queued head whose connection is one of
        -- those named (gone, as the server's client list said); how many.
        local k = K(1)
        if not exists(k) then return 0 end
        local dead = {}
        for i = A, #ARGV do dead[ARGV[i]] = true end
        local dropped = 0
        -- Queued heads, and heads handed a slot they have not taken (the
        -- slot is freed).
        for _, w in ipairs(fields(k, 'c:')) do
            local c = redis.call('HGET', k.pool, 'c:' .. w)
            -- A head handed a slot less than UNTAKEN_MS ago is spared: its
            -- process may hold the slot since the message arrived, and
            -- counts on that bound (its link may have been replaced).
            local g = redis.call('HGET', k.pool, 'g:' .. w)
            local at = g and tonumber(string.match(g, '^[^@]+@(%d+)@'))
            if at and now_ms - at < UNTAKEN_MS then c = nil end
            if c and dead[c] then
                unclaim(k, w)
                forget(k, w)
                dropped = dropped + 1
            end
        end
        if dropped > 0 then wake(k) end
        return dropped
    end

    if op == 'beat' then
        -- One heartbeat of the session whose key is KEYS[1]: if
        -- it lives, its end moves to now + ARGV[A] ms; if it has no key and
        -- ARGV[A + 1] is '1' (a fresh id), it is made so. Now if it lives
        -- after, false if it has ended: an ended session never lives again.
        -- The key outlives its end by a minute, then the server drops it.
        local key, timeout = KEYS[1], tonumber(ARGV[A])
        local e = redis.call('GET', key)
        if (e and tonumber(e) > now_ms) or (not e and ARGV[A + 1] == '1') then
            local ends = math.min(now_ms + timeout, MAX_MS)
            redis.call('SET', key, fmt(ends), 'PX', fmt(timeout + 60000))
            return now_ms
        end
        return false
    end

    if op == 'close' then
        -- Ends the session whose key is KEYS[1] at once, and counts it in
        -- PREFIX:closes (every pool is due to be judged, `judged`); every
        -- process's waiters look again.
        if redis.call('DEL', KEYS[1]) == 1 then
            redis.call('INCR', PREFIX .. ':closes')
            redis.call(PUBLISH, CHANNEL, '*')
        end
        return 1
    end

    if op == 'delete' then
        -- 1 if the pool existed. Its token outlives it for a day.
        local k = K(1)
        local existed = exists(k)
        wake(k)
        redis.call('DEL', k.pool, k.leases, k.exp, k.pos, k.keys, k.queue, k.alive)
        if redis.call('EXISTS', k.token) == 1 then redis.call('PEXPIRE', k.token, TOMBSTONE_MS) end
        return existed and 1 or 0
    end

    if op == 'return' then
        -- 0 if the lease was not active; else the head its slot was
        -- handed to (`hand_on`, unless ARGV[A + 1] is '0'), or 1.
        local k = K(1)
        local id = ARGV[A]
        local r = record(k, id)
        if not r then return 0 end
        -- Returned by its holder: a handed lease was taken.
        take(k, id, r)
        drop_lease(k, id, r)
        if tonumber(r.e) > now_ms and not (r.s and not alive(r.s)) then
            if redis.call('ZCARD', k.queue) == 0 then return 1 end
            local head = ARGV[A + 1] == '1' and hand_on(k)
            if head then return head end
            wake(k)
            return 1
        end
        return 0
    end

    if op == 'renew' then
        -- {0, lease, position, token, expiry, positions}, {1} if not active, {2}
        -- if no pool.
        local k = K(1)
        if not exists(k) then return {2} end
        local id, ttl = ARGV[A], tonumber(ARGV[A + 1])
        local r = record(k, id)
        if not r or tonumber(r.e) <= now_ms then return {1} end
        if r.s and not alive(r.s) then
            drop_lease(k, id, r)
            return {1}
        end
        -- Renewed by its holder: a handed lease is taken.
        take(k, id, r)
        local exp = math.min(now_ms + ttl, MAX_MS)
        r.e = fmt(exp)
        redis.call('HSET', k.leases, id, cjson.encode(r))
        redis.call('ZADD', k.exp, exp, id)
        judge_at(k, exp)
        wake(k)
        return lease_reply(id, r)
    end

    if op == 'confirm' then
        -- The head's process holds lease ARGV[A], which a return handed it
        -- (`hand_on`'s message), since it arrived: taken, so that the
        -- head's place no longer bounds it. 1 if it is active, 0 if not
        -- (it expired, its session ended, or it was freed at its bound).
        -- ARGV[A + 1] names the head: served either way, its place goes.
        local k = K(1)
        local id, head = ARGV[A], ARGV[A + 1]
        local r = record(k, id)
        if not r or tonumber(r.e) <= now_ms or (r.s and not alive(r.s)) then
            if head and redis.call('ZSCORE', k.alive, head) then
                unclaim(k, head)
                forget(k, head)
                wake(k)
            end
            return 0
        end
        take(k, id, r)
        return 1
    end

    if op == 'unbind' then
        -- Unbinds an active lease from its session; 1 if it was
        -- active.
        local k = K(1)
        if not exists(k) then return 0 end
        reap(k)
        local id = ARGV[A]
        local r = record(k, id)
        if not r then return 0 end
        take(k, id, r)
        if r.s then
            local field = 's:' .. r.s
            if redis.call('HINCRBY', k.pool, field, -1) <= 0 then redis.call('HDEL', k.pool, field) end
            r.s = nil
            redis.call('HSET', k.leases, id, cjson.encode(r))
        end
        return 1
    end

    if op == 'holders' then
        -- {0, holder...} by lowest position, or {2}.
        local k = K(1)
        if not exists(k) then return {2} end
        reap(k)
        local out = {0}
        for _, m in ipairs(redis.call('ZRANGE', k.pos, 0, -1)) do
            if not string.find(m, ':', 1, true) then
                out[#out + 1] = holder_reply(m, record(k, m))
            end
        end
        return out
    end

    if op == 'force_return' then
        -- {0, holder} if an active lease held the position (any of its
        -- positions), {1} if none, {2}.
        local k = K(1)
        if not exists(k) then return {2} end
        reap(k)
        local pos = ARGV[A]
        for _, m in ipairs(redis.call('ZRANGEBYSCORE', k.pos, pos, pos)) do
            local id = string.match(m, '^[^:]+')
            local r = record(k, id)
            drop_lease(k, id, r)
            wake(k)
            return {0, holder_reply(id, r)}
        end
        return {1}
    end

    if op == 'leave_queue' then
        -- 1 if the head was queued (the next is woken).
        local k = K(1)
        local w = ARGV[A]
        local handed = unclaim(k, w)
        local left = redis.call('ZSCORE', k.queue, w)
        forget(k, w)
        if left or handed then
            wake(k)
            return 1
        end
        return 0
    end

    if op == 'place' then
        -- The place of waiter ARGV[A] among the pool's live places, 1 for the
        -- first, or 0 if it has none.
        local k = K(1)
        reap(k)
        local rank = redis.call('ZRANK', k.queue, ARGV[A])
        if not rank then return 0 end
        return rank + 1
    end

    if op == 'queue' then
        -- The pool's live places, in line: {waiter, weight, since ms, held
        -- (1 or 0)} each, flat. A place taken before places recorded
        -- their time has none: now stands in.
        local k = K(1)
        reap(k)
        local heads = redis.call('ZRANGE', k.queue, 0, -1)
        if #heads == 0 then return {} end
        local names = {}
        for i, w in ipairs(heads) do
            names[2 * i - 1] = 'w:' .. w
            names[2 * i] = 'q:' .. w
        end
        local fields = read_all('HMGET', k.pool, names)
        local out = {}
        for i, w in ipairs(heads) do
            local q = fields[2 * i] or ''
            out[#out + 1] = w
            out[#out + 1] = tonumber(fields[2 * i - 1] or '1')
            out[#out + 1] = tonumber(string.match(q, '^%d+')) or now_ms
            out[#out + 1] = string.sub(q, -1) == 'h' and 1 or 0
        end
        return out
    end

    if op == 'queue_heads' then
        -- The heads queued on the pool, on every machine, once lapsed ones are
        -- forgotten.
        local k = K(1)
        reap(k)
        return redis.call('ZCARD', k.queue)
    end

    return redis.error_reply('ERR semaphore: unknown operation ' .. tostring(op))
end
