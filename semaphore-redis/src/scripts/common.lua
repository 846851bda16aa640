-- The Redis store's function library: what both functions share.
--
-- KEYS: 8 per pool, all under the pool's hash tag {<pool id>} (one
-- cluster slot per pool): pool (hash: count, ticket, draining ('1'
-- while the pool grants nothing new), 'w:' .. head
-- for a queued head waiting for more than one slot, 'c:' .. head for the
-- client id of the connection that marks its process alive, and 's:' ..
-- session for each session of bound leases: how many it
-- holds), leases (hash:
-- lease id -> JSON record {p, t, e, o, k}, with ps, every position, for a
-- lease of several slots, and s, its session, for a bound lease),
-- exp (zset: lease id by expiry), pos (zset:
-- one member per held position: the lease id at its lowest position, 'id:p'
-- at its others; so in_use is its size), keys (hash: idempotency key ->
-- lease id), queue (zset: queued head by ticket), alive (zset: queued
-- head, or one handed a slot that it has not taken yet, by the time its
-- place lapses), token (string: the last fencing token, kept for a day
-- after a delete). The pool hash also keeps, for a head that a return may
-- hand a slot to (one slot, no key, not a held place), 'h:' .. head ->
-- JSON {i, t, o, s, n}: the lease id, ttl, owner and session of its
-- grant, and the suffix of its store's own channel (none on a cluster);
-- and for a head handed a slot that it has not taken yet, 'g:' .. head ->
-- the lease id, '@', and the time of the hand-off (ms). 'j' and 'jc' mark
-- when the pool next needs judging (`judged`); without them, every call
-- judges it.
--
-- Outside the pools, under ARGV[6] (PREFIX on one server, PREFIX:{<tag of
-- the pool's slot>} on a cluster): :s:<session> (string: the session's
-- end, ms; a bound lease is active only while its session's
-- end is in the future), :closes (string: how many sessions were closed
-- before their end, counted by `close`), and :run (hash: id, the server's
-- run id and replication id, `run:replid`, that last granted or
-- registered; until, the end of the restart grace it set).
--
-- ARGV: 1 the operation, 2 the test's now in unix ms or '' (the server's
-- clock decides, rule "Time"), 3 the longest time stored (ms), 4 a queued
-- head's heartbeat (ms), 5 the wake-up channel, 6 the prefix of the
-- session and run keys (on a cluster, one whose tag hashes to the pool's
-- slot), 7 the restart grace (ms), 8 the command that publishes
-- ('PUBLISH', or 'SPUBLISH' on a cluster: the channel is the slot's);
-- then the operation's own.
--
-- Times are unix ms; tokens are the server's clock in µs, or one more than
-- the pool's last token if that is larger, so they grow across a delete and
-- across a restart that lost every key. Numbers stay below 2^53, exact
-- in Lua's doubles; they are written with %.0f, never tostring.

-- One call's keys, arguments, clock and state, set by `begin`: the
-- library's code runs once, when the server loads it, and each call only
-- sets these (the server runs one call at a time).
local KEYS, ARGV
local op, MAX_MS, WAITER_TTL, CHANNEL, PREFIX, GRACE, PUBLISH
local A = 9
local now_ms, now_us
-- A grant's side notes: whether it wrote the run key, and the last token
-- it granted (a multi-pool grant's tokens grow in the order of its pools).
local run_written, granted_token = false, 0
-- The ends of the sessions this call has read (ms, false for none): a
-- session's key changes only between calls.
local known_ends = {}
-- Each pool's 'j' as this call knows it (see `judged`), and the count of
-- closes as this call read it (nil until read).
local judge_by, closed = {}, nil

local function server_us()
    local t = redis.call('TIME')
    return tonumber(t[1]) * 1000000 + tonumber(t[2])
end

local function begin(keys, args)
    KEYS, ARGV = keys, args
    op = ARGV[1]
    MAX_MS = tonumber(ARGV[3])
    WAITER_TTL = tonumber(ARGV[4])
    CHANNEL = ARGV[5]
    PREFIX = ARGV[6]
    GRACE = tonumber(ARGV[7])
    PUBLISH = ARGV[8]
    run_written, granted_token, known_ends, judge_by, closed = false, 0, {}, {}, nil
    if ARGV[2] ~= '' then
        now_ms = tonumber(ARGV[2])
        now_us = now_ms * 1000
    else
        now_us = server_us()
        now_ms = math.floor(now_us / 1000)
    end
end

local function fmt(n) return string.format('%.0f', n) end

-- `command` (MGET, or HMGET of `key`) of every name in `names`, in chunks
-- (Lua unpacks at most about 8000 values; a pool may queue more places).
local function read_all(command, key, names)
    local out = {}
    for first = 1, #names, 1000 do
        local chunk = {unpack(names, first, math.min(first + 999, #names))}
        local got
        if key then
            got = redis.call(command, key, unpack(chunk))
        else
            got = redis.call(command, unpack(chunk))
        end
        for i = 1, #got do out[first + i - 1] = got[i] end
    end
    return out
end

-- The server's clock (ms), whatever instant a test decides by: what the
-- restart grace is judged on.
local function real_ms()
    if ARGV[2] == '' then return now_ms end
    return math.floor(server_us() / 1000)
end

-- An optional string argument: '-' for none, else '+' and the value.
local function opt(s)
    if s == '-' then return nil end
    return string.sub(s, 2)
end

local function K(i)
    local b = (i - 1) * 8
    return {
        pool = KEYS[b + 1], leases = KEYS[b + 2], exp = KEYS[b + 3], pos = KEYS[b + 4],
        keys = KEYS[b + 5], queue = KEYS[b + 6], alive = KEYS[b + 7], token = KEYS[b + 8],
    }
end

-- The name of stored idempotency key `key`: the caller's key, without the
-- request digest that follows a unit separator (\31). Keys are kept by it.
local function key_name(key)
    local i = string.find(key, '\31', 1, true)
    if i then return string.sub(key, 1, i - 1) end
    return key
end

local function record(k, id)
    local raw = redis.call('HGET', k.leases, id)
    if not raw then return nil end
    return cjson.decode(raw)
end

-- The positions of lease record r, lowest first.
local function positions(r)
    if r.ps then return r.ps end
    return {tonumber(r.p)}
end

-- The pos member of position p of lease id whose lowest position is low.
local function member(id, p, low)
    if p == low then return id end
    return id .. ':' .. fmt(p)
end

-- The end of session sid (ms), or nil if it has none.
local function session_end(sid)
    local e = known_ends[sid]
    if e == nil then
        e = redis.call('GET', PREFIX .. ':s:' .. sid)
        e = e and tonumber(e) or false
        known_ends[sid] = e
    end
    return e or nil
end

-- How many sessions were closed before their end, as a string, read
-- once a call; with the end of session `sid` if one is named (read in
-- the same command).
local function closes(sid)
    if closed then return closed end
    if not sid or known_ends[sid] ~= nil then
        closed = redis.call('GET', PREFIX .. ':closes') or '0'
        return closed
    end
    local got = redis.call('MGET', PREFIX .. ':closes', PREFIX .. ':s:' .. sid)
    known_ends[sid] = got[2] and tonumber(got[2]) or false
    closed = got[1] or '0'
    return closed
end

-- Whether the pool must be judged now (`reap`): by its 'j', a lower bound
-- of the earliest instant at which a lease of it expires, a queued head's
-- place lapses or a session of its bound leases ends, as `reap` last read
-- them and every write since lowered it (`judge_at`); and its 'jc', the
-- count of closed sessions `reap` saw (a close ends a session before its
-- end). A pool that has neither is judged by every call. `j` and `jc`
-- are the pool's fields as read; session `sid`'s end, if named, is read
-- with the count of closes.
local function judged(k, j, jc, sid)
    j = tonumber(j) or 0
    judge_by[k.pool] = j
    return now_ms < j and jc == closes(sid)
end

-- Lowers the pool's 'j' to `at` (ms) if `at` is earlier: when a lease
-- expires, a place lapses or a bound session ends.
local function judge_at(k, at)
    local j = judge_by[k.pool]
    if j == nil then
        j = tonumber(redis.call('HGET', k.pool, 'j')) or 0
        judge_by[k.pool] = j
    end
    if at < j then
        redis.call('HSET', k.pool, 'j', fmt(at))
        judge_by[k.pool] = at
    end
end

-- Whether session sid lives now.
local function alive(sid)
    local e = session_end(sid)
    return e ~= nil and e > now_ms
end

-- The pool's fields named prefix .. x: the x's.
local function fields(k, prefix)
    local out, n = {}, #prefix
    for _, field in ipairs(redis.call('HKEYS', k.pool)) do
        if string.sub(field, 1, n) == prefix then out[#out + 1] = string.sub(field, n + 1) end
    end
    return out
end

local function drop_lease(k, id, r)
    if r and r.s then
        local field = 's:' .. r.s
        if redis.call('HINCRBY', k.pool, field, -1) <= 0 then redis.call('HDEL', k.pool, field) end
    end
    if r and r.k then redis.call('HDEL', k.keys, key_name(r.k)) end
    if r and r.g then
        -- A slot handed to a head that never took it (it expired, or was
        -- taken back): the head, if it is still alive, is queued again at
        -- its old ticket, so that no one queued after it goes first.
        if not r.tk then
            local g = redis.call('HGET', k.pool, 'g:' .. r.g)
            local ticket = g and tonumber(string.match(g, '@%d+@(%d+)$'))
            if ticket and redis.call('ZSCORE', k.alive, r.g) then
                redis.call('ZADD', k.queue, ticket, r.g)
            end
        end
        redis.call('HDEL', k.pool, 'g:' .. r.g)
    end
    redis.call('HDEL', k.leases, id)
    redis.call('ZREM', k.exp, id)
    redis.call('ZREM', k.pos, id)
    if r and r.ps then
        for _, p in ipairs(r.ps) do redis.call('ZREM', k.pos, member(id, p, tonumber(r.p))) end
    end
end

-- Whether the pool drains.
local function draining(k)
    return redis.call('HGET', k.pool, 'draining') == '1'
end

-- How long a head handed a slot may leave it untaken before others ask
-- whether its process is still there, and may free it (ms): the handed
-- lease's liveness bound until its head's process confirms it.
local UNTAKEN_MS = 200

-- Forgets a queued head: its place, its heartbeat, its weight, its
-- connection and what a return needs to hand it a slot. Every head has a
-- heartbeat (a head handed a slot keeps it until it takes the slot): one
-- that has none has nothing to forget.
local function forget(k, w)
    if redis.call('ZREM', k.alive, w) == 0 then return end
    redis.call('ZREM', k.queue, w)
    redis.call('HDEL', k.pool, 'w:' .. w, 'c:' .. w, 'h:' .. w, 'q:' .. w)
end

-- Marks lease id (record r), if a return handed it to a head that has not
-- taken it, taken by its holder: the head's place is forgotten, so that
-- neither its lapse nor its connection's end can free the lease any more.
local function take(k, id, r)
    if not r.g or r.tk then return end
    r.tk = 1
    redis.call('HSET', k.leases, id, cjson.encode(r))
    redis.call('HSET', k.pool, 'g:' .. r.g, id .. '@t')
    forget(k, r.g)
end

-- Ends the lease a return handed to head w (it left the queue, or its
-- process is gone); whether there was one. A head that took it
-- (its look answered) and then left the queue is a borrow dropped while
-- that answer was on its way, which nobody holds (the core leaves the
-- queue only for a borrow that was not granted).
local function unclaim(k, w)
    local g = redis.call('HGET', k.pool, 'g:' .. w)
    if not g then return false end
    local id = string.match(g, '^[^@]+')
    local r = record(k, id)
    if not r then
        redis.call('HDEL', k.pool, 'g:' .. w)
        return false
    end
    drop_lease(k, id, r)
    return true
end

-- Forgets expired leases, the leases of ended sessions, and
-- queued heads whose process stopped asking. The earliest end of a live
-- session and the earliest expiry of a lease left, each nil if none.
local function reap(k)
    for _, id in ipairs(redis.call('ZRANGEBYSCORE', k.exp, '-inf', now_ms)) do
        drop_lease(k, id, record(k, id))
    end
    for _, w in ipairs(redis.call('ZRANGEBYSCORE', k.alive, '-inf', now_ms)) do
        unclaim(k, w)
        forget(k, w)
    end
    local ended, earliest = {}, nil
    local sids = fields(k, 's:')
    if #sids > 0 then
        local names = {}
        for i, sid in ipairs(sids) do names[i] = PREFIX .. ':s:' .. sid end
        local ends = read_all('MGET', nil, names)
        for i, sid in ipairs(sids) do
            local e = ends[i] and tonumber(ends[i]) or nil
            known_ends[sid] = e or false
            if e == nil or e <= now_ms then
                ended[sid] = true
            elseif earliest == nil or e < earliest then
                earliest = e
            end
        end
    end
    if next(ended) then
        local all = redis.call('HGETALL', k.leases)
        for i = 1, #all, 2 do
            local r = cjson.decode(all[i + 1])
            if r.s and ended[r.s] then drop_lease(k, all[i], r) end
        end
        for sid in pairs(ended) do
            redis.call('HDEL', k.pool, 's:' .. sid)
            -- Its holder, if it runs and still keeps it (its record was
            -- deleted by someone else, or lost), learns of it now.
            redis.call(PUBLISH, CHANNEL, 's:' .. sid)
        end
    end
    -- Judged until the earliest of what may need judging next.
    local expiry = tonumber(redis.call('ZRANGE', k.exp, 0, 0, 'WITHSCORES')[2])
    local lapse = tonumber(redis.call('ZRANGE', k.alive, 0, 0, 'WITHSCORES')[2])
    local j = math.min(earliest or MAX_MS, expiry or MAX_MS, lapse or MAX_MS)
    redis.call('HSET', k.pool, 'j', fmt(j), 'jc', closes())
    judge_by[k.pool] = j
    return earliest, expiry
end

-- Tells every process's waiters, if a head of any is queued on the pool:
-- the pool's id, the last hash tag of its keys (the prefix may carry one).
local function wake(k)
    if redis.call('ZCARD', k.queue) > 0 then
        redis.call(PUBLISH, CHANNEL, string.match(k.pool, '.*{(.-)}'))
    end
end

local function leave(k, waiter)
    if waiter then forget(k, waiter) end
end

-- Replies carry every position, then the session: the lowest
-- position alone is field 3.
local function lease_reply(id, r)
    return {0, id, tonumber(r.p), tonumber(r.t), tonumber(r.e), positions(r), r.s or false}
end

local function holder_reply(id, r)
    return {id, tonumber(r.p), tonumber(r.t), tonumber(r.e), r.o or false, r.k or false,
        positions(r)}
end

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

-- This server process's run id, read at its first grant: it never changes
-- while the process runs, and a restart loads this library anew. The
-- replication id is read at every call (a promotion changes it in a
-- running process): `INFO replication` alone costs a third of what the
-- server section with it does.
local RUN_ID = nil

local function grace_end()
    if GRACE == 0 then return 0 end
    local run_key = PREFIX .. ':run'
    if not RUN_ID then RUN_ID = string.match(redis.call('INFO', 'server'), 'run_id:(%w+)') end
    local run_id = RUN_ID
    local replication = redis.call('INFO', 'replication')
    local run = run_id .. ':' .. (string.match(replication, 'master_replid:(%w+)') or '')
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
        local info = redis.call('INFO', 'server')
        local up = tonumber(string.match(info, 'uptime_in_seconds:(%d+)'))
        local started = real - up * 1000
        if started + GRACE > real then grace = started + GRACE end
        -- A promoted replica (it has a second replication id) may have
        -- lost the newest writes, this key among them: from now.
        local second = tonumber(string.match(replication, 'second_repl_offset:(%-?%d+)'))
        if second and second ~= -1 then grace = real + GRACE end
    end
    redis.call('HSET', run_key, 'id', run, 'until', fmt(grace))
    run_written = true
    return grace
end

-- Whether the store is in its restart grace, by the server's clock.
local function in_grace(st)
    return st.grace > 0 and real_ms() < st.grace
end

-- The n lowest positions no active lease holds, `held` of them held (nil
-- if not counted yet). A few held positions are read at once; of many, the
-- highest first, which is all a pool held from its lowest up needs.
local function lowest_free(k, n, held)
    held = held or redis.call('ZCARD', k.pos)
    local free, want = {}, 0
    local compact = held == 0 or (held > 64
        and tonumber(redis.call('ZRANGE', k.pos, -1, -1, 'WITHSCORES')[2]) == held - 1)
    if compact then
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
    while #free < n do
        free[#free + 1] = want
        want = want + 1
    end
    return free
end

local function grant(k, id, ttl, owner, key, n, session, to, held)
    local ps = lowest_free(k, n, held)
    local last = tonumber(redis.call('GET', k.token) or '0')
    local token = math.max(last + 1, now_us, granted_token + 1)
    granted_token = token
    redis.call('SET', k.token, fmt(token))
    local exp = math.min(now_ms + ttl, MAX_MS)
    local r = {p = ps[1], t = fmt(token), e = fmt(exp), o = owner, k = key, g = to}
    if to then r.l = ttl end
    if n > 1 then r.ps = ps end
    judge_at(k, exp)
    if session then
        r.s = session
        redis.call('HINCRBY', k.pool, 's:' .. session, 1)
        local e = session_end(session)
        if e then judge_at(k, e) end
    end
    redis.call('HSET', k.leases, id, cjson.encode(r))
    redis.call('ZADD', k.exp, exp, id)
    for _, p in ipairs(ps) do redis.call('ZADD', k.pos, p, member(id, p, ps[1])) end
    if key then redis.call('HSET', k.keys, key_name(key), id) end
    return lease_reply(id, r)
end

-- Hands the slot a return just freed to the first head queued
-- (one whose weight is over the count is aside), if that head is one
-- a return may hand a slot to ('h:'), the pool grants (not draining, not
-- in its restart grace), the head's session lives and a slot is
-- free once expired leases and ended sessions are judged.
-- The lease is the one the head queued to get (its id, ttl, owner and
-- session); it is 'g:' .. head until the head takes it at its next look,
-- told by a message naming it ('g:' .. head .. ':' .. the pool's id) on
-- its store's own channel (CHANNEL .. ':' .. n), or on CHANNEL if it named
-- none (so that a hand-off wakes one process, not all), and
-- the head keeps its heartbeat till then (a head whose process is gone
-- lets it go when its place lapses, or sooner, `unclaim`). The head, or
-- nil if the slot stays free. Called only while a head is queued.
local function hand_on(k)
    local p = redis.call('HMGET', k.pool, 'count', 'draining')
    local count = tonumber(p[1])
    if not count or p[2] == '1' then return nil end
    if in_grace({grace = grace_end()}) then return nil end
    reap(k)
    local heads = redis.call('ZRANGE', k.queue, 0, -1)
    if #heads == 0 then return nil end
    local names = {}
    for i, w in ipairs(heads) do names[i] = 'w:' .. w end
    local weights = read_all('HMGET', k.pool, names)
    local head
    for i, w in ipairs(heads) do
        if tonumber(weights[i] or '1') <= count then
            head = w
            break
        end
    end
    if not head then return nil end
    local h = redis.call('HGET', k.pool, 'h:' .. head)
    if not h or redis.call('ZCARD', k.pos) >= count then return nil end
    local want = cjson.decode(h)
    if want.s and not alive(want.s) then return nil end
    local ticket = redis.call('ZSCORE', k.queue, head)
    local lease = grant(k, want.i, tonumber(want.t), want.o, nil, 1, want.s, head)
    redis.call('ZREM', k.queue, head)
    redis.call('HSET', k.pool, 'g:' .. head, want.i .. '@' .. fmt(now_ms) .. '@' .. ticket)
    local told = want.n and (CHANNEL .. ':' .. want.n) or CHANNEL
    local message = 'g:' .. head .. ':' .. string.match(k.pool, '.*{(.-)}')
    if want.s then
        -- The lease itself, for its head to hold on arrival, and the
        -- latest instant it may be freed untaken: when the head's place
        -- lapses, or UNTAKEN_MS from now (its connection may be gone).
        local bound = now_ms + UNTAKEN_MS
        local lapses = tonumber(redis.call('ZSCORE', k.alive, head) or '0')
        if lapses < bound then bound = lapses end
        message = message .. ':' .. want.i .. ':' .. fmt(lease[3]) .. ':' .. fmt(lease[4]) .. ':'
            .. fmt(lease[5]) .. ':' .. fmt(bound) .. ':' .. want.s
    end
    redis.call(PUBLISH, told, message)
    -- Slots free beside this one (expired leases judged just now) are
    -- for the heads after it.
    if redis.call('ZCARD', k.pos) < count then wake(k) end
    return head
end
