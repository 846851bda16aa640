-- The primitives that add: register, borrow, borrow_all. Refused whole
-- while the server is out of memory (no allow-oom flag), so nothing is
-- ever half written.

-- rule "Restart grace": the end of the grace this server is
-- in, by its own clock (ms), 0 for none. The server's run id changes with
-- every restart, and its replication id with every promotion (a failover,
-- and a failback to a node that was master before, whose run id is the
-- one it had then but whose data came back from the other side); the
-- first grant after either finds another id in PREFIX:run and starts the
-- grace: from now if our keys outlived the
-- change (an RDB snapshot, AOF everysec, a replica's copy: the newest
-- grants may be lost while their holders run), from the server's start if
-- none did and it started less than the grace ago (no persistence), and
-- from now if none did on a promoted replica.
local run_written = false

local function grace_end()
    if GRACE == 0 then return 0 end
    local run_key = PREFIX .. ':run'
    local info = redis.call('INFO', 'server', 'replication')
    local run_id = string.match(info, 'run_id:(%w+)')
    local run = run_id .. ':' .. (string.match(info, 'master_replid:(%w+)') or '')
    local seen = redis.call('HMGET', run_key, 'id', 'until')
    if seen[1] == run then return tonumber(seen[2]) end
    if seen[1] == run_id then
        -- Written by an earlier version of the store (a run id alone) on
        -- this very process: named anew, no grace.
        redis.call('HSET', run_key, 'id', run)
        run_written = true
        return tonumber(seen[2])
    end
    local real = math.floor(server_us() / 1000)
    local grace = 0
    if seen[1] then
        grace = real + GRACE
    else
        local up = tonumber(string.match(info, 'uptime_in_seconds:(%d+)'))
        local started = real - up * 1000
        if started + GRACE > real then grace = started + GRACE end
        -- A promoted replica (it has a second replication id) may have
        -- lost the newest writes, this key among them: from now.
        local second = tonumber(string.match(info, 'second_repl_offset:(%-?%d+)'))
        if second and second ~= -1 then grace = real + GRACE end
    end
    redis.call('HSET', run_key, 'id', run, 'until', fmt(grace))
    run_written = true
    return grace
end

-- The pool's count, grace and drain, and the earliest end of a live
-- session of its leases; nil if there is no pool.
local function load(k)
    local p = redis.call('HMGET', k.pool, 'count', 'draining')
    if not p[1] then return nil end
    local sessions = reap(k)
    return {count = tonumber(p[1]), grace = grace_end(), draining = p[2] == '1',
        sessions = sessions}
end

-- Whether the store is in its restart grace, by the server's clock.
local function in_grace(st)
    return st.grace > 0 and math.floor(server_us() / 1000) < st.grace
end

-- The active lease under the name of `key`, as a grant reply; {6} if it
-- was granted under another request digest (idempotency keys are atomic).
local function keyed(k, key)
    if not key then return nil end
    local id = redis.call('HGET', k.keys, key_name(key))
    if not id then return nil end
    local r = record(k, id)
    if not r then return nil end
    if r.k ~= key then return {6} end
    return lease_reply(id, r)
end

-- Free slots beyond those owed to the heads queued ahead of `waiter`
-- (R11), each owed its weight (R15; none if it is over the count), and
-- those heads.
local function room(k, st, waiter)
    local held = redis.call('ZCARD', k.pos)
    local ticket = waiter and redis.call('ZSCORE', k.queue, waiter)
    local ahead = 0
    local heads
    if ticket then
        heads = redis.call('ZRANGEBYSCORE', k.queue, '-inf', '(' .. ticket)
    else
        heads = redis.call('ZRANGE', k.queue, 0, -1)
    end
    for _, w in ipairs(heads) do
        -- R15: a head whose weight is over the count keeps its
        -- place but is owed nothing while the count is below it.
        local weight = tonumber(redis.call('HGET', k.pool, 'w:' .. w) or '1')
        if weight <= st.count then ahead = ahead + weight end
    end
    if in_grace(st) then return 0, {} end
    return st.count - held - ahead, heads
end

-- The n lowest positions no active lease holds (R6, R15).
local function lowest_free(k, n)
    local held = redis.call('ZCARD', k.pos)
    local free, want = {}, 0
    if held > 0 then
        local last = redis.call('ZRANGE', k.pos, -1, -1, 'WITHSCORES')
        if tonumber(last[2]) == held - 1 then
            want = held
        else
            local taken = redis.call('ZRANGE', k.pos, 0, -1, 'WITHSCORES')
            for i = 2, #taken, 2 do
                local p = tonumber(taken[i])
                while want < p and #free < n do
                    free[#free + 1] = want
                    want = want + 1
                end
                if #free >= n then break end
                want = p + 1
            end
        end
    end
    while #free < n do
        free[#free + 1] = want
        want = want + 1
    end
    return free
end

-- The last token this call granted: a multi-pool grant's tokens grow in
-- the order of its pools.
local granted_token = 0

local function grant(k, id, ttl, owner, key, n, session)
    local ps = lowest_free(k, n)
    local last = tonumber(redis.call('GET', k.token) or '0')
    local token = math.max(last + 1, now_us, granted_token + 1)
    granted_token = token
    redis.call('SET', k.token, fmt(token))
    local exp = math.min(now_ms + ttl, MAX_MS)
    local r = {p = ps[1], t = fmt(token), e = fmt(exp), o = owner, k = key}
    if n > 1 then r.ps = ps end
    if session then
        r.s = session
        redis.call('HINCRBY', k.pool, 's:' .. session, 1)
    end
    redis.call('HSET', k.leases, id, cjson.encode(r))
    redis.call('ZADD', k.exp, exp, id)
    for _, p in ipairs(ps) do redis.call('ZADD', k.pos, p, member(id, p, ps[1])) end
    if key then redis.call('HSET', k.keys, key_name(key), id) end
    return lease_reply(id, r)
end

-- Keeps a refused head's place, weight and connection, or refreshes its
-- heartbeat: alive for the store's waiter ttl, or for `hold` ms (a held
-- place, bound to no connection).
local function queue(k, waiter, n, hold, conn)
    if not waiter then return end
    if not redis.call('ZSCORE', k.queue, waiter) then
        redis.call('ZADD', k.queue, redis.call('HINCRBY', k.pool, 'ticket', 1), waiter)
        if n > 1 then redis.call('HSET', k.pool, 'w:' .. waiter, n) end
        if conn and not hold then redis.call('HSET', k.pool, 'c:' .. waiter, conn) end
    end
    redis.call('ZADD', k.alive, now_ms + (hold or WAITER_TTL), waiter)
end

-- A refusal: when to look again (the earliest expiry or end of a live
-- session, or the grace's end), and, if slots are free but owed to the
-- heads ahead, the client ids of their connections, for the caller to ask
-- which are gone (R16: a killed waiter holds back no one).
local function refusal(k, st, owed, heads)
    if in_grace(st) then return {1, false, false, false, st.grace, {}} end
    local first = redis.call('ZRANGE', k.exp, 0, 0, 'WITHSCORES')
    local at = first[2] and tonumber(first[2])
    if st.sessions and (not at or st.sessions < at) then at = st.sessions end
    local conns = {}
    if owed then
        for _, w in ipairs(heads) do
            local c = redis.call('HGET', k.pool, 'c:' .. w)
            if c then conns[#conns + 1] = c end
        end
    end
    return {1, false, false, false, at or false, conns}
end

if op == 'register' then
    -- R2: {count, in_use, 0, draining, 1 if it wrote the run key}. The run
    -- key is written here too, so that it is on a replica before any
    -- grant of the pool's slot (a cluster store waits for that).
    local k = K(1)
    local count = tonumber(ARGV[A])
    grace_end()
    if redis.call('EXISTS', k.pool) == 0 then
        redis.call('HSET', k.pool, 'count', count)
        redis.call('PERSIST', k.token)
    else
        redis.call('HSET', k.pool, 'count', count)
        reap(k)
    end
    wake(k)
    return {count, redis.call('ZCARD', k.pos), 0, draining(k) and 1 or 0, run_written and 1 or 0}
end

if op == 'borrow' then
    -- R5, R6, R11, R15. {0, lease, position, token, expiry, positions,
    -- session}, {1, _, _, _, next look, connections}, {2} (no pool), {4}
    -- (it drains) or {5} (the session named has ended).
    local k = K(1)
    local st = load(k)
    if not st then return {2} end
    if st.draining then return {4} end
    local id, ttl = ARGV[A], tonumber(ARGV[A + 1])
    local waiter, key, owner = opt(ARGV[A + 2]), opt(ARGV[A + 3]), opt(ARGV[A + 4])
    local n, session = tonumber(ARGV[A + 5]), opt(ARGV[A + 6])
    local hold = opt(ARGV[A + 7])
    hold = hold and tonumber(hold)
    local conn = opt(ARGV[A + 8])
    -- Lost replies: a retry finds the lease it was granted.
    local mine = record(k, id)
    if mine then
        leave(k, waiter)
        return lease_reply(id, mine)
    end
    local found = keyed(k, key)
    if found then
        if found[1] == 6 then return found end
        leave(k, waiter)
        return found
    end
    local free, heads = room(k, st, waiter)
    if free >= n then
        -- R16: no lease is born dead.
        if session and not alive(session) then return {5} end
        leave(k, waiter)
        return grant(k, id, ttl, owner, key, n, session)
    end
    queue(k, waiter, n, hold, conn)
    return refusal(k, st, st.count - redis.call('ZCARD', k.pos) >= n, heads)
end

if op == 'borrow_all' then
    -- All or nothing over n pools: one reply per pool as borrow's, or {{2,
    -- i}} for the first unknown pool. When refused, the pools that had room
    -- answer {3}. After the n lease ids come the n weights, then the
    -- session, the connection, '1' to check only (then nothing is
    -- granted, and the pools that have room answer {3}: a borrow across a
    -- cluster's hash slots checks every slot before it takes any), and the
    -- token its tokens must be above (a borrow across slots: the last of
    -- the slots taken before, so that tokens grow in the pools' order).
    local n, ttl = tonumber(ARGV[A]), tonumber(ARGV[A + 1])
    local session = opt(ARGV[A + 5 + 2 * n])
    local conn = opt(ARGV[A + 6 + 2 * n])
    local check = ARGV[A + 7 + 2 * n] == '1'
    granted_token = tonumber(ARGV[A + 8 + 2 * n]) or 0
    local waiter, key, owner = opt(ARGV[A + 2]), opt(ARGV[A + 3]), opt(ARGV[A + 4])
    local ks, sts = {}, {}
    for i = 1, n do
        ks[i] = K(i)
        sts[i] = load(ks[i])
        if not sts[i] then return {{2, i}} end
    end
    for i = 1, n do
        if sts[i].draining then return {{4, i}} end
    end
    local replies, need, blocked = {}, {}, false
    for i = 1, n do
        local id = ARGV[A + 4 + i]
        local mine = record(ks[i], id)
        replies[i] = (mine and lease_reply(id, mine)) or keyed(ks[i], key)
        if replies[i] and replies[i][1] == 6 then return {{6, i}} end
        if not replies[i] then
            local pool = ks[i].pool
            local weight = tonumber(ARGV[A + 4 + n + i])
            need[pool] = (need[pool] or 0) + weight
            local free, heads = room(ks[i], sts[i], waiter)
            if free < need[pool] then
                local owed = sts[i].count - redis.call('ZCARD', ks[i].pos) >= need[pool]
                replies[i] = refusal(ks[i], sts[i], owed, heads)
                blocked = true
            end
        end
    end
    if blocked then
        for i = 1, n do
            if not replies[i] then
                replies[i] = {3}
            elseif replies[i][1] == 1 then
                queue(ks[i], waiter, tonumber(ARGV[A + 4 + n + i]), nil, conn)
            end
        end
        return replies
    end
    if check then
        for i = 1, n do replies[i] = replies[i] or {3} end
        return replies
    end
    -- R16: no lease is born dead.
    if session and not alive(session) then return {{5, 1}} end
    for i = 1, n do
        replies[i] = replies[i]
            or grant(ks[i], ARGV[A + 4 + i], ttl, owner, key, tonumber(ARGV[A + 4 + n + i]), session)
        leave(ks[i], waiter)
    end
    return replies
end

return redis.error_reply('ERR semaphore: unknown operation ' .. tostring(op))
