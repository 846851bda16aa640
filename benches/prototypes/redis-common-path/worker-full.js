// The Redis store's next design with what the store must keep on its common
// path, on top of worker-proto.js's bare design: the server's clock, the
// pool's count and drain, the restart grace (this server's run and
// replication ids against those the pool last granted under), whether the
// pool is due to be judged (its earliest expiry and the count of closed
// sessions), a lost reply's lease found again, the token above both the
// last one and the server's clock in µs (no INCR: tokens grow across a
// delete and a restart that lost every key), compact lease records (no
// JSON), a FIFO queue with tickets, places that lapse, and the handed lease
// bound to a liveness bound until its holder takes it (at its return here).
// Borrow: 9 calls when a position is free; return: 6 when nobody queues,
// 15 when it hands the slot on.
// node worker-full.js <tag> <tasks> <startMs> <seconds>: prints the pairs done.
const Redis = require('ioredis');
const crypto = require('crypto');
const [tag, tasks, startMs, seconds] = process.argv.slice(2);
const me = crypto.randomBytes(8).toString('hex');
const channel = `full:{${tag}}:w:${me}`;
const client = new Redis({ host: '127.0.0.1', port: 6379 });
const sub = new Redis({ host: '127.0.0.1', port: 6379 });
const K = ['pool', 'free', 'exp', 'leases', 'tok', 'q', 'alive', 'closes'].map(k => `full:{${tag}}:${k}`);
const COMMON = `
local pool, free, expk, leases, tok, queue, alive, closes = unpack(KEYS)
local function fmt(n) return string.format('%.0f', n) end
local t = redis.call('TIME')
local now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
local now = math.floor(now_us / 1000)
local function token()
  local old = tonumber(redis.call('SET', tok, fmt(now_us), 'GET') or '0')
  if old < now_us then return now_us end
  redis.call('SET', tok, fmt(old + 1))
  return old + 1
end
-- Expired leases' positions back to the free set; lapsed places dropped.
local function reap(count)
  for _, id in ipairs(redis.call('ZRANGEBYSCORE', expk, '-inf', now)) do
    local r = redis.call('HGET', leases, id)
    if r then
      local p = tonumber(string.match(r, '^(%d+)'))
      if p < count then redis.call('ZADD', free, p, p) end
      redis.call('HDEL', leases, id)
    end
    redis.call('ZREM', expk, id)
  end
  local e = redis.call('ZRANGE', expk, 0, 0, 'WITHSCORES')[2]
  redis.call('HSET', pool, 'j', e or '9007199254740991', 'jc', redis.call('GET', closes) or '0')
end
`;
client.defineCommand('borrow', { numberOfKeys: 8, lua: COMMON + `
local id, ttl, waiter, ch = ARGV[1], tonumber(ARGV[2]), ARGV[3], ARGV[4]
local p = redis.call('HMGET', pool, 'count', 'draining', 'j', 'jc', 'queued', 'run', 'until', 'g:' .. waiter)
local count = tonumber(p[1])
if not count then return {-3} end
if p[2] == '1' then return {-4} end
local run = (string.match(redis.call('INFO', 'replication'), 'master_replid:(%w+)') or '')
if p[6] ~= run then
  redis.call('HSET', pool, 'run', run, 'until', '0')
elseif tonumber(p[7]) > now then
  return {-5}
end
local c = redis.call('GET', closes) or '0'
local mine = redis.call('HGET', leases, id)
if mine then
  local pos, tk = string.match(mine, '^(%d+):(%d+)')
  return {tonumber(pos), tonumber(tk)}
end
if p[8] then return {-6} end
if not (now < tonumber(p[3] or '0') and c == p[4]) then reap(count) end
local function queue_up()
  if not redis.call('ZSCORE', queue, waiter) then
    redis.call('ZADD', queue, redis.call('HINCRBY', pool, 'ticket', 1), waiter)
    redis.call('HINCRBY', pool, 'queued', 1)
    redis.call('HSET', pool, 'h:' .. waiter, id .. '|' .. ttl .. '|' .. ch, 'q:' .. waiter, now)
  end
  redis.call('ZADD', alive, now + 2000, waiter)
  return {-1}
end
if tonumber(p[5] or '0') > 0 then return queue_up() end
local got = redis.call('ZPOPMIN', free)
if not got[1] then return queue_up() end
local tk = token()
local e = now + ttl
redis.call('HSET', leases, id, got[1] .. ':' .. fmt(tk) .. ':' .. fmt(e))
redis.call('ZADD', expk, e, id)
if e < tonumber(p[3] or '0') then redis.call('HSET', pool, 'j', fmt(e)) end
return {tonumber(got[1]), tk}
` });
client.defineCommand('giveback', { numberOfKeys: 8, lua: COMMON + `
local id = ARGV[1]
local r = redis.call('HGET', leases, id)
if not r then return 0 end
local pos, e, g = string.match(r, '^(%d+):%d+:(%d+):?(.*)$')
if tonumber(e) <= now then return 0 end
local p = redis.call('HMGET', pool, 'count', 'queued', 'draining')
if g ~= '' then
  -- Taken by its holder: the head's place no longer bounds it.
  redis.call('HDEL', pool, 'g:' .. g, 'h:' .. g, 'q:' .. g)
  redis.call('ZREM', alive, g)
end
redis.call('HDEL', leases, id)
redis.call('ZREM', expk, id)
if tonumber(p[2] or '0') > 0 and p[3] ~= '1' and tonumber(pos) < tonumber(p[1]) then
  local head = redis.call('ZPOPMIN', queue)[1]
  redis.call('HINCRBY', pool, 'queued', -1)
  local hid, ttl, ch = string.match(redis.call('HGET', pool, 'h:' .. head), '^([^|]+)|(%d+)|(.+)$')
  local tk = token()
  local he = now + tonumber(ttl)
  redis.call('HSET', leases, hid, pos .. ':' .. fmt(tk) .. ':' .. fmt(he) .. ':' .. head)
  redis.call('HSET', pool, 'g:' .. head, hid .. '@' .. now)
  redis.call('ZADD', expk, he, hid)
  redis.call('ZADD', alive, now + 200, head)
  redis.call('PUBLISH', ch, hid .. ':' .. pos .. ':' .. fmt(tk) .. ':' .. fmt(he) .. ':' .. (now + 200))
  return 2
end
if tonumber(pos) < tonumber(p[1]) then redis.call('ZADD', free, pos, pos) end
return 1
` });
require('./duties-loop').run({ client, sub, channel, me, K, tasks, startMs, seconds });
