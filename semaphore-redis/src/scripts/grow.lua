-- The primitives that add: register, borrow, borrow_all. Refused whole
-- while the server is out of memory (no allow-oom flag), so nothing is
-- ever half written.

-- The pool's count and restart grace; nil if there is no pool.
local function load(k)
    local p = redis.call('HMGET', k.pool, 'count', 'grace', 'draining')
    if not p[1] then return nil end
    reap(k)
    return {count = tonumber(p[1]), grace = tonumber(p[2] or '0'), draining = p[3] == '1'}
end

-- Whether the pool is in its restart grace, by the server's clock.
local function in_grace(st)
    return st.grace > 0 and math.floor(server_us() / 1000) < st.grace
end

-- The active lease holding `key`, as a grant reply.
local function keyed(k, key)
    if not key then return nil end
    local id = redis.call('HGET', k.keys, key)
    if not id then return nil end
    return lease_reply(id, record(k, id))
end

-- Free slots beyond those owed to the heads queued ahead of `waiter`
-- (R11), each owed its weight (R15).
local function room(k, st, waiter)
    if in_grace(st) then return 0 end
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
        ahead = ahead + tonumber(redis.call('HGET', k.pool, 'w:' .. w) or '1')
    end
    return st.count - held - ahead
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

local function grant(k, id, ttl, owner, key, n, holder)
    local ps = lowest_free(k, n)
    local last = tonumber(redis.call('GET', k.token) or '0')
    local token = math.max(last + 1, now_us, granted_token + 1)
    granted_token = token
    redis.call('SET', k.token, fmt(token))
    local exp = math.min(now_ms + ttl, MAX_MS)
    local r = {p = ps[1], t = fmt(token), e = fmt(exp), o = owner, k = key}
    if n > 1 then r.ps = ps end
    if holder then
        r.h = holder
        redis.call('HINCRBY', k.pool, 'h:' .. holder, 1)
    end
    redis.call('HSET', k.leases, id, cjson.encode(r))
    redis.call('ZADD', k.exp, exp, id)
    for _, p in ipairs(ps) do redis.call('ZADD', k.pos, p, member(id, p, ps[1])) end
    if key then redis.call('HSET', k.keys, key, id) end
    return {0, id, ps[1], token, exp, ps}
end

-- Keeps a refused head's place and weight, or refreshes its heartbeat:
-- alive for the store's waiter ttl, or for `hold` ms (a held place).
local function queue(k, waiter, n, hold)
    if not waiter then return end
    if not redis.call('ZSCORE', k.queue, waiter) then
        redis.call('ZADD', k.queue, redis.call('HINCRBY', k.pool, 'ticket', 1), waiter)
        if n > 1 then redis.call('HSET', k.pool, 'w:' .. waiter, n) end
    end
    redis.call('ZADD', k.alive, now_ms + (hold or WAITER_TTL), waiter)
end

-- A refusal: when to look again (the earliest expiry, or the grace's end),
-- and the holders of bound leases, for the caller to ask which are gone
-- (R16).
local function refusal(k, st)
    if in_grace(st) then return {1, false, false, false, st.grace, {}} end
    local first = redis.call('ZRANGE', k.exp, 0, 0, 'WITHSCORES')
    return {1, false, false, false, first[2] and tonumber(first[2]) or false, holder_ids(k)}
end

if op == 'register' then
    -- R2. A pool created while the server is younger than the restart grace
    -- (and not deleted within the last day) may be one whose keys a restart
    -- lost while its leases still run: it grants nothing until the grace
    -- has passed since the server started.
    local k = K(1)
    local count, grace_ms = tonumber(ARGV[A]), tonumber(ARGV[A + 1])
    if redis.call('EXISTS', k.pool) == 0 then
        local grace = 0
        if grace_ms > 0 and redis.call('EXISTS', k.token) == 0 then
            local info = redis.call('INFO', 'server')
            local up = tonumber(string.match(info, 'uptime_in_seconds:(%d+)'))
            local real = math.floor(server_us() / 1000)
            local started = real - up * 1000
            if started + grace_ms > real then grace = started + grace_ms end
        end
        redis.call('HSET', k.pool, 'count', count, 'grace', fmt(grace))
        redis.call('PERSIST', k.token)
    else
        redis.call('HSET', k.pool, 'count', count)
        reap(k)
    end
    wake(k)
    return {count, redis.call('ZCARD', k.pos), tonumber(redis.call('HGET', k.pool, 'grace')),
        draining(k) and 1 or 0}
end

if op == 'borrow' then
    -- R5, R6, R10, R11, R15. {0, lease, position, token, expiry,
    -- positions}, {1, _, _, _, next look}, {2} (no pool) or {4} (it drains).
    local k = K(1)
    local st = load(k)
    if not st then return {2} end
    if st.draining then return {4} end
    local id, ttl = ARGV[A], tonumber(ARGV[A + 1])
    local waiter, key, owner = opt(ARGV[A + 2]), opt(ARGV[A + 3]), opt(ARGV[A + 4])
    local n, holder = tonumber(ARGV[A + 5]), opt(ARGV[A + 6])
    local hold = ARGV[A + 7] and opt(ARGV[A + 7])
    hold = hold and tonumber(hold)
    local found = keyed(k, key)
    if found then
        leave(k, waiter)
        return found
    end
    if room(k, st, waiter) >= n then
        leave(k, waiter)
        return grant(k, id, ttl, owner, key, n, holder)
    end
    queue(k, waiter, n, hold)
    return refusal(k, st)
end

if op == 'borrow_all' then
    -- All or nothing over n pools: one reply per pool as borrow's, or {{2,
    -- i}} for the first unknown pool. When refused, the pools that had room
    -- answer {3}. After the n lease ids come the n weights, then the holder.
    local n, ttl = tonumber(ARGV[A]), tonumber(ARGV[A + 1])
    local holder = opt(ARGV[A + 5 + 2 * n])
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
        replies[i] = keyed(ks[i], key)
        if not replies[i] then
            local pool = ks[i].pool
            need[pool] = (need[pool] or 0) + tonumber(ARGV[A + 4 + n + i])
            if room(ks[i], sts[i], waiter) < need[pool] then
                replies[i] = refusal(ks[i], sts[i])
                blocked = true
            end
        end
    end
    if blocked then
        for i = 1, n do
            if not replies[i] then
                replies[i] = {3}
            elseif replies[i][1] == 1 then
                queue(ks[i], waiter, tonumber(ARGV[A + 4 + n + i]))
            end
        end
        return replies
    end
    for i = 1, n do
        replies[i] = keyed(ks[i], key)
            or grant(ks[i], ARGV[A + 4 + i], ttl, owner, key, tonumber(ARGV[A + 4 + n + i]), holder)
        leave(ks[i], waiter)
    end
    return replies
end

return redis.error_reply('ERR semaphore: unknown operation ' .. tostring(op))
