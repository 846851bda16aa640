-- The Redis store's primitives: what both scripts share.
--
-- KEYS: 8 per pool, all under the pool's hash tag {<pool id>} (one
-- cluster slot per pool): pool (hash: count, ticket, draining ('1'
-- while the pool grants nothing new), 'w:' .. head
-- for a queued head waiting for more than one slot, 'c:' .. head for the
-- client id of the connection that marks its process alive, and 's:' ..
-- session for each session of bound leases, R16: how many it
-- holds), leases (hash:
-- lease id -> JSON record {p, t, e, o, k}, with ps, every position, for a
-- lease of several slots, R15, and s, its session, for a bound lease),
-- exp (zset: lease id by expiry), pos (zset:
-- one member per held position: the lease id at its lowest position, 'id:p'
-- at its others; so in_use is its size), keys (hash: idempotency key ->
-- lease id), queue (zset: queued head by ticket), alive (zset: queued head
-- by the time its place lapses), token (string: the last fencing token,
-- kept for a day after a delete).
--
-- Outside the pools, under ARGV[6] (PREFIX on one server, PREFIX:{<tag of
-- the pool's slot>} on a cluster): :s:<session> (string: the session's
-- end, ms; R16: a bound lease is active only while its session's
-- end is in the future), and :run (hash: id, the server's run id and
-- replication id, `run:replid`, that last granted or registered; until,
-- the end of the restart grace it set).
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
-- across a restart that lost every key (R9). Numbers stay below 2^53, exact
-- in Lua's doubles; they are written with %.0f, never tostring.

local op = ARGV[1]
local MAX_MS = tonumber(ARGV[3])
local WAITER_TTL = tonumber(ARGV[4])
local CHANNEL = ARGV[5]
local PREFIX = ARGV[6]
local GRACE = tonumber(ARGV[7])
local PUBLISH = ARGV[8]
local A = 9

local function server_us()
    local t = redis.call('TIME')
    return tonumber(t[1]) * 1000000 + tonumber(t[2])
end

local now_ms, now_us
if ARGV[2] ~= '' then
    now_ms = tonumber(ARGV[2])
    now_us = now_ms * 1000
else
    now_us = server_us()
    now_ms = math.floor(now_us / 1000)
end

local function fmt(n) return string.format('%.0f', n) end

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

-- The positions of lease record r, lowest first (R15).
local function positions(r)
    if r.ps then return r.ps end
    return {tonumber(r.p)}
end

-- The pos member of position p of lease id whose lowest position is low.
local function member(id, p, low)
    if p == low then return id end
    return id .. ':' .. fmt(p)
end

-- R16: the end of session sid (ms), or nil if it has none.
local function session_end(sid)
    local e = redis.call('GET', PREFIX .. ':s:' .. sid)
    if not e then return nil end
    return tonumber(e)
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
        if redis.call('HEXISTS', k.pool, field) == 1
            and redis.call('HINCRBY', k.pool, field, -1) <= 0 then
            redis.call('HDEL', k.pool, field)
        end
    end
    if r and r.k then redis.call('HDEL', k.keys, key_name(r.k)) end
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

-- Forgets a queued head: its place, its heartbeat, its weight and its
-- connection.
local function forget(k, w)
    redis.call('ZREM', k.queue, w)
    redis.call('ZREM', k.alive, w)
    redis.call('HDEL', k.pool, 'w:' .. w, 'c:' .. w)
end

-- Forgets expired leases (R7), the leases of ended sessions (R16), and
-- queued heads whose process stopped asking. The live sessions' ends:
-- the earliest, or nil.
local function reap(k)
    for _, id in ipairs(redis.call('ZRANGEBYSCORE', k.exp, '-inf', now_ms)) do
        drop_lease(k, id, record(k, id))
    end
    for _, w in ipairs(redis.call('ZRANGEBYSCORE', k.alive, '-inf', now_ms)) do
        forget(k, w)
    end
    local ended, earliest = {}, nil
    for _, sid in ipairs(fields(k, 's:')) do
        local e = session_end(sid)
        if e == nil or e <= now_ms then
            ended[sid] = true
        elseif earliest == nil or e < earliest then
            earliest = e
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
            -- deleted by someone else, or lost), learns of it now (R17).
            redis.call(PUBLISH, CHANNEL, 's:' .. sid)
        end
    end
    return earliest
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

-- Replies carry every position, then the session (R15, R16): the lowest
-- position alone is field 3.
local function lease_reply(id, r)
    return {0, id, tonumber(r.p), tonumber(r.t), tonumber(r.e), positions(r), r.s or false}
end

local function holder_reply(id, r)
    return {id, tonumber(r.p), tonumber(r.t), tonumber(r.e), r.o or false, r.k or false,
        positions(r)}
end
