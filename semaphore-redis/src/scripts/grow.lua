-- The primitives that add: register, borrow, borrow_all. Refused whole
-- while the server is out of memory (no allow-oom flag), so nothing is
-- ever half written.

-- Judges the pool (`reap`) for a borrow whose state is `st`: then
-- `st.reaped`, and the earliest end of a live session of its leases and
-- the earliest expiry of a lease, each nil if none.
local function judge(k, st)
    st.sessions, st.expiry = reap(k)
    st.reaped = true
end

-- The pool's count, grace and drain, whether it was judged (`judge`; not
-- if nothing needed it, `judged`), and what a return handed `waiter`
-- ('g:' .. waiter, read before the pool was judged: its lease may be gone
-- since); nil if there is no pool. Session `session`'s end, if named, is
-- read on the way.
local function load(k, waiter, session)
    local p = redis.call('HMGET', k.pool, 'count', 'draining', 'j', 'jc',
        waiter and 'g:' .. waiter or 'count')
    if not p[1] then return nil end
    local st = {count = tonumber(p[1]), draining = p[2] == '1', handed = waiter and p[5] or nil}
    if not judged(k, p[3], p[4], session) then judge(k, st) end
    st.grace = grace_end()
    return st
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

-- Free slots beyond those owed to the heads queued ahead of `waiter`,
-- each owed its weight (none if it is over the count), those heads, and
-- the positions held; `st.queued`, how many heads are queued. A full
-- pool owes no one (none are free): its heads are not read.
local function room(k, st, waiter)
    local held = redis.call('ZCARD', k.pos)
    if held >= st.count then return st.count - held, {}, held end
    local ahead, heads = 0, {}
    st.queued = redis.call('ZCARD', k.queue)
    if st.queued > 0 then
        local ticket = waiter and redis.call('ZSCORE', k.queue, waiter)
        if ticket then
            heads = redis.call('ZRANGEBYSCORE', k.queue, '-inf', '(' .. ticket)
        else
            heads = redis.call('ZRANGE', k.queue, 0, -1)
        end
    end
    if #heads > 0 then
        local names = {}
        for i, w in ipairs(heads) do names[i] = 'w:' .. w end
        local weights = read_all('HMGET', k.pool, names)
        for i = 1, #heads do
            -- A head whose weight is over the count keeps its
            -- place but is owed nothing while the count is below it.
            local weight = tonumber(weights[i] or '1')
            if weight <= st.count then ahead = ahead + weight end
        end
    end
    if in_grace(st) then return 0, {}, held end
    return st.count - held - ahead, heads, held
end

-- Keeps a refused head's place, weight and connection, or refreshes its
-- heartbeat: alive for the store's waiter ttl, or for `hold` ms (a held
-- place, bound to no connection). `grant`, for a head a return may hand a
-- slot to, is what its lease would be: {i = lease id, t = ttl, o =
-- owner, s = session}.
local function queue(k, waiter, n, hold, conn, grant)
    if not waiter then return end
    if not redis.call('ZSCORE', k.queue, waiter) then
        redis.call('ZADD', k.queue, redis.call('HINCRBY', k.pool, 'ticket', 1), waiter)
        local set = {}
        if n > 1 then set[#set + 1] = 'w:' .. waiter; set[#set + 1] = n end
        if conn and not hold then set[#set + 1] = 'c:' .. waiter; set[#set + 1] = conn end
        if grant then set[#set + 1] = 'h:' .. waiter; set[#set + 1] = cjson.encode(grant) end
        -- When it took its place, 'h' after it for a held place.
        set[#set + 1] = 'q:' .. waiter; set[#set + 1] = fmt(now_ms) .. (hold and 'h' or '')
        if #set > 0 then redis.call('HSET', k.pool, unpack(set)) end
    end
    local lapses = now_ms + (hold or WAITER_TTL)
    redis.call('ZADD', k.alive, lapses, waiter)
    judge_at(k, lapses)
end

-- A refusal, once the pool was judged (`judge`): when to look again (the
-- earliest expiry or end of a live session, or the grace's end), and, if
-- slots are free but owed to the heads ahead, the client ids of their
-- connections, for the caller to ask which are gone (a killed waiter
-- holds back no one).
local function refusal(k, st, owed, heads)
    if in_grace(st) then return {1, false, false, false, st.grace, {}} end
    local at = st.expiry
    if st.sessions and (not at or st.sessions < at) then at = st.sessions end
    local asked = {}
    if owed then
        for _, w in ipairs(heads) do asked[#asked + 1] = 'c:' .. w end
    end
    -- A head handed a slot that it has not taken for a while: its process
    -- may be gone, holding the slot back.
    local handed = fields(k, 'g:')
    if #handed > 0 then
        local names = {}
        for i, w in ipairs(handed) do names[i] = 'g:' .. w end
        for i, g in ipairs(read_all('HMGET', k.pool, names)) do
            local at_ms = g and tonumber(string.match(g, '^[^@]+@(%d+)'))
            if at_ms and now_ms - at_ms >= UNTAKEN_MS then asked[#asked + 1] = 'c:' .. handed[i] end
        end
    end
    local conns = {}
    if #asked > 0 then
        for _, c in ipairs(read_all('HMGET', k.pool, asked)) do
            if c then conns[#conns + 1] = c end
        end
    end
    return {1, false, false, false, at or false, conns}
end

local function grow_ops()
    if op == 'register' then
        -- {count, in_use, 0, draining, 1 if it wrote the run key, queued}. The run
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
        return {count, redis.call('ZCARD', k.pos), 0, draining(k) and 1 or 0, run_written and 1 or 0,
            redis.call('ZCARD', k.queue)}
    end

    if op == 'borrow' then
        -- {0, lease, position, token, expiry, positions,
        -- session}, {1, _, _, _, next look, connections}, {2} (no pool), {4}
        -- (it drains) or {5} (the session named has ended).
        local k = K(1)
        local waiter, session = opt(ARGV[A + 2]), opt(ARGV[A + 6])
        local st = load(k, waiter, session)
        if not st then return {2} end
        local id, ttl = ARGV[A], tonumber(ARGV[A + 1])
        local key, owner, n = opt(ARGV[A + 3]), opt(ARGV[A + 4]), tonumber(ARGV[A + 5])
        local hold = opt(ARGV[A + 7])
        hold = hold and tonumber(hold)
        local conn = opt(ARGV[A + 8])
        -- The suffix of the borrower's store's own channel, where a return
        -- that hands this head a slot tells it (none on a cluster).
        local listen = opt(ARGV[A + 9])
        -- Lost replies: a call made again finds the lease it was granted
        -- (the core's retry, or a call sent again after its connection
        -- dropped, as the store and the cluster client do).
        local mine = record(k, id)
        if mine then
            leave(k, waiter)
            return lease_reply(id, mine)
        end
        -- A queued head finds the lease a return handed it (`hand_on`), under
        -- the id it queued with, and marks it taken ('@t'); a retry finds it
        -- again.
        if st.handed then
            local gid = string.match(st.handed, '^[^@]+')
            local r = gid and record(k, gid)
            -- Not in a restart grace (rule "Restart grace"): taken then,
            -- the lease would be a grant in the grace. A slot handed on a
            -- former master just before a failover may have been freed
            -- and granted again there, after the failover, by writes the
            -- new master never sees: its holder believes it holds for up
            -- to its ttl, which the grace outlasts.
            if r and in_grace(st) then
                -- Its heartbeat kept meanwhile (it is out of the queue:
                -- only this keeps its place).
                redis.call('ZADD', k.alive, now_ms + WAITER_TTL, waiter)
                judge_at(k, now_ms + WAITER_TTL)
                return {1, false, false, false, st.grace, {}}
            end
            if r then
                leave(k, waiter)
                if not r.tk then
                    -- Taken: its ttl runs from now, as a grant's would.
                    r.tk = 1
                    if r.l then
                        local exp = math.min(now_ms + tonumber(r.l), MAX_MS)
                        r.e = fmt(exp)
                        redis.call('ZADD', k.exp, exp, gid)
                        judge_at(k, exp)
                    end
                    redis.call('HSET', k.leases, gid, cjson.encode(r))
                    redis.call('HSET', k.pool, 'g:' .. waiter, gid .. '@t')
                end
                return lease_reply(gid, r)
            end
        end
        if st.draining then
            -- A held place keeps its turn through the drain (R11).
            if hold then queue(k, waiter, n, hold, conn, nil) end
            return {4}
        end
        local found = keyed(k, key)
        if found then
            if found[1] == 6 then return found end
            leave(k, waiter)
            return found
        end
        local free, heads, held = room(k, st, waiter)
        if free < n and not st.reaped then
            -- Judged before any refusal: nothing due then holds a slot.
            judge(k, st)
            free, heads, held = room(k, st, waiter)
        end
        if free >= n then
            -- No lease is born dead.
            if session and not alive(session) then return {5} end
            -- Nobody queued, and nothing handed to it: it has no place.
            if st.queued ~= 0 or st.handed then leave(k, waiter) end
            return grant(k, id, ttl, owner, key, n, session, nil, held)
        end
        local grant_to = nil
        if n == 1 and not key and not hold then
            grant_to = {i = id, t = ttl, o = owner, s = session, n = listen}
        end
        queue(k, waiter, n, hold, conn, grant_to)
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
                if free < need[pool] and not sts[i].reaped then
                    judge(ks[i], sts[i])
                    free, heads = room(ks[i], sts[i], waiter)
                end
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
        -- No lease is born dead.
        if session and not alive(session) then return {{5, 1}} end
        for i = 1, n do
            replies[i] = replies[i]
                or grant(ks[i], ARGV[A + 4 + i], ttl, owner, key, tonumber(ARGV[A + 4 + n + i]), session)
            leave(ks[i], waiter)
        end
        return replies
    end

    return redis.error_reply('ERR semaphore: unknown operation ' .. tostring(op))
end
