// worker-full.js's duties on another layout: the pool is one hash that
// holds its count, drain, restart-grace ids, judging marks, last token,
// its held positions (a string of one character per position: '1' held)
// and its lease records ('l:' .. id -> position:token:expiry[:head]), so
// that one HMGET reads all a call needs and one HSET writes it; the queue
// stays a sorted set by ticket, each place's lease and lapse in the hash
// ('h:' .. head). Borrow: 5 calls when a position is free, 6 when it
// queues; return: 4 when nobody queues, 8 when it hands the slot on.
// node worker-hash.js <tag> <tasks> <startMs> <seconds>: prints the pairs done.
const Redis = require('ioredis');
const crypto = require('crypto');
const [tag, tasks, startMs, seconds] = process.argv.slice(2);
const me = crypto.randomBytes(8).toString('hex');
const channel = `hash:{${tag}}:w:${me}`;
const client = new Redis({ host: '127.0.0.1', port: 6379 });
const sub = new Redis({ host: '127.0.0.1', port: 6379 });
const K = ['pool', 'q', 'closes'].map(k => `hash:{${tag}}:${k}`);
// NO_GRACE=1 leaves the restart grace's check out (what it costs).
const RUN = process.env.NO_GRACE === '1' ? "'x'"
    : "string.match(redis.call('INFO', 'replication'), 'master_replid:(%w+)') or ''";
const COMMON = `
local pool, queue, closes = unpack(KEYS)
local function fmt(n) return string.format('%.0f', n) end
local t = redis.call('TIME')
local now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
local now = math.floor(now_us / 1000)
local function token(last)
  last = tonumber(last or '0')
  if last < now_us then return now_us end
  return last + 1
end
local function set_at(held, p, c) return string.sub(held, 1, p) .. c .. string.sub(held, p + 2) end
local function grace(run, till)
  local now_run = ${RUN}
  if run ~= now_run then redis.call('HSET', pool, 'run', now_run, 'until', '0') return false end
  return tonumber(till or '0') > now
end
-- Expired leases' positions freed; the earliest expiry left is the next judging.
local function reap(held)
  local all, j, drop = redis.call('HGETALL', pool), 9007199254740991, {}
  for i = 1, #all, 2 do
    if string.sub(all[i], 1, 2) == 'l:' then
      local p, e = string.match(all[i + 1], '^(%d+):%d+:(%d+)')
      e = tonumber(e)
      if e <= now then
        held = set_at(held, tonumber(p), '0')
        drop[#drop + 1] = all[i]
      elseif e < j then
        j = e
      end
    end
  end
  if #drop > 0 then redis.call('HDEL', pool, unpack(drop)) end
  redis.call('HSET', pool, 'held', held, 'j', fmt(j), 'jc', redis.call('GET', closes) or '0')
  return held
end
`;
client.defineCommand('borrow', { numberOfKeys: 3, lua: COMMON + `
local id, ttl, waiter, ch = ARGV[1], tonumber(ARGV[2]), ARGV[3], ARGV[4]
local p = redis.call('HMGET', pool, 'count', 'draining', 'j', 'jc', 'queued', 'run', 'until',
  'g:' .. waiter, 'l:' .. id, 'tok', 'held', 'ticket')
local count = tonumber(p[1])
if not count then return {-3} end
if p[2] == '1' then return {-4} end
if grace(p[6], p[7]) then return {-5} end
local c = redis.call('GET', closes) or '0'
if p[9] then
  local pos, tk = string.match(p[9], '^(%d+):(%d+)')
  return {tonumber(pos), tonumber(tk)}
end
if p[8] then return {-6} end
local held = p[11]
if not (now < tonumber(p[3] or '0') and c == p[4]) then held = reap(held) end
local free = tonumber(p[5] or '0') == 0 and string.find(held, '0', 1, true)
if not free then
  local ticket = tonumber(p[12] or '0') + 1
  redis.call('ZADD', queue, 'NX', ticket, waiter)
  redis.call('HSET', pool, 'ticket', ticket, 'queued', tonumber(p[5] or '0') + 1,
    'h:' .. waiter, id .. '|' .. ttl .. '|' .. fmt(now + 2000) .. '|' .. ch)
  return {-1}
end
local pos = free - 1
local tk = token(p[10])
local e = now + ttl
local set = {'l:' .. id, pos .. ':' .. fmt(tk) .. ':' .. fmt(e), 'tok', fmt(tk), 'held', set_at(held, pos, '1')}
if e < tonumber(p[3] or '0') then set[#set + 1] = 'j'; set[#set + 1] = fmt(e) end
redis.call('HSET', pool, unpack(set))
return {pos, tk}
` });
client.defineCommand('giveback', { numberOfKeys: 3, lua: COMMON + `
local id = ARGV[1]
local p = redis.call('HMGET', pool, 'l:' .. id, 'count', 'queued', 'draining', 'held', 'tok', 'run', 'until')
if not p[1] then return 0 end
local pos, e, g = string.match(p[1], '^(%d+):%d+:(%d+):?(.*)$')
pos = tonumber(pos)
if tonumber(e) <= now then return 0 end
local gone = {'l:' .. id}
if g ~= '' then
  -- Taken by its holder: the head's place no longer bounds it.
  gone[2] = 'g:' .. g
end
local queued = tonumber(p[3] or '0')
if queued > 0 and p[4] ~= '1' and pos < tonumber(p[2]) and not grace(p[7], p[8]) then
  local head = redis.call('ZPOPMIN', queue)[1]
  local hid, ttl, _, ch = string.match(redis.call('HGET', pool, 'h:' .. head), '^([^|]+)|(%d+)|(%d+)|(.+)$')
  gone[#gone + 1] = 'h:' .. head
  redis.call('HDEL', pool, unpack(gone))
  local tk = token(p[6])
  local he = now + tonumber(ttl)
  redis.call('HSET', pool, 'l:' .. hid, pos .. ':' .. fmt(tk) .. ':' .. fmt(he) .. ':' .. head,
    'g:' .. head, hid .. '@' .. now, 'tok', fmt(tk), 'queued', queued - 1)
  redis.call('PUBLISH', ch, hid .. ':' .. pos .. ':' .. fmt(tk) .. ':' .. fmt(he) .. ':' .. (now + 200))
  return 2
end
redis.call('HDEL', pool, unpack(gone))
if pos < tonumber(p[2]) then redis.call('HSET', pool, 'held', set_at(p[5], pos, '0')) end
return 1
` });
require('./duties-loop').run({ client, sub, channel, me, K, tasks, startMs, seconds });
