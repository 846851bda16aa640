-- The Redis store's primitives: what both scripts share.
--
-- KEYS: 8 per pool, all under the pool's hash tag {<pool id>} (one
-- cluster slot per pool): pool (hash: count, grace, ticket, draining ('1'
-- while the pool grants nothing new), 'w:' .. head
-- for a queued head waiting for more than one slot, and 'h:' .. holder for
-- each holder of bound leases, R16: how many it holds), leases (hash:
-- lease id -> JSON record {p, t, e, o, k}, with ps, every position, for a
-- lease of several slots, R15, and h, the holder's client id, for a bound
-- lease), exp (zset: lease id by expiry), pos (zset:
-- one member per held position: the lease id at its lowest position, 'id:p'
-- at its others; so in_use is its size), keys (hash: idempotency key ->
-- lease id), queue (zset: queued head by ticket), alive (zset: queued head
-- by the time its place lapses), token (string: the last fencing token,
-- kept for a day after a delete).
--
-- ARGV: 1 the operation, 2 the test's now in unix ms or '' (the server's
-- clock decides, SPEC "Time"), 3 the longest time stored (ms), 4 a queued
-- head's heartbeat (ms), 5 the wake-up channel; then the operation's own.
--
-- Times are unix ms; tokens are the server's clock in µs, or one more than
-- the pool's last token if that is larger, so they grow across a delete and
-- across a restart that lost every key (R9). Numbers stay below 2^53, exact
-- in Lua's doubles; they are written with %.0f, never tostring.

local op = ARGV[1]
local MAX_MS = tonumber(ARGV[3])
local WAITER_TTL = tonumber(ARGV[4])
local CHANNEL = ARGV[5]
local A = 6

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

-- The holders of the pool's bound leases (R16): their client ids.
local function holder_ids(k)
    local ids = {}
    for _, field in ipairs(redis.call('HKEYS', k.pool)) do
        if string.sub(field, 1, 2) == 'h:' then ids[#ids + 1] = string.sub(field, 3) end
    end
    return ids
end

local function drop_lease(k, id, r)
    if r and r.h then
        local field = 'h:' .. r.h
        if redis.call('HEXISTS', k.pool, field) == 1
            and redis.call('HINCRBY', k.pool, field, -1) <= 0 then
            redis.call('HDEL', k.pool, field)
        end
    end
    if r and r.k then redis.call('HDEL', k.keys, r.k) end
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

-- Forgets a queued head: its place, its heartbeat and its weight.
local function forget(k, w)
    redis.call('ZREM', k.queue, w)
    redis.call('ZREM', k.alive, w)
    redis.call('HDEL', k.pool, 'w:' .. w)
end

-- Forgets expired leases (R7) and queued heads whose process stopped asking.
local function reap(k)
    for _, id in ipairs(redis.call('ZRANGEBYSCORE', k.exp, '-inf', now_ms)) do
        drop_lease(k, id, record(k, id))
    end
    for _, w in ipairs(redis.call('ZRANGEBYSCORE', k.alive, '-inf', now_ms)) do
        forget(k, w)
    end
end

-- Tells every process's waiters, if a head of any is queued on the pool.
local function wake(k)
    if redis.call('ZCARD', k.queue) > 0 then
        redis.call('PUBLISH', CHANNEL, string.match(k.pool, '{(.-)}'))
    end
end

local function leave(k, waiter)
    if waiter then forget(k, waiter) end
end

-- Replies carry every position last (R15): the lowest alone is field 3.
local function lease_reply(id, r)
    return {0, id, tonumber(r.p), tonumber(r.t), tonumber(r.e), positions(r)}
end

local function holder_reply(id, r)
    return {id, tonumber(r.p), tonumber(r.t), tonumber(r.e), r.o or false, r.k or false,
        positions(r), r.h or false}
end
