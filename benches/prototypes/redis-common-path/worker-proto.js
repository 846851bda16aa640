// The Redis store's common path, bare: numbered slots (a zset of free positions),
// a fencing token (INCR), a session check, a FIFO queue (a list) with the
// hand-off in the return script, the head told by its process's channel with
// the lease in the message (no take). No heartbeats, no grace, no gone-waiter
// detection: the least the design can cost.
const Redis = require('ioredis');
const crypto = require('crypto');
const [tag, tasks, startMs, seconds] = process.argv.slice(2);
const me = crypto.randomBytes(8).toString('hex');
const channel = `proto:{${tag}}:w:${me}`;
const client = new Redis({ host: '127.0.0.1', port: 6379 });
const sub = new Redis({ host: '127.0.0.1', port: 6379 });
const K = ['free', 'exp', 'lease', 'tok', 'q', 'sess'].map(k => `proto:{${tag}}:${k}`);
client.defineCommand('borrow', { numberOfKeys: 6, lua: `
local function queue() redis.call('RPUSH', KEYS[5], ARGV[3]) return {-1} end
if redis.call('EXISTS', KEYS[5]) == 1 then return queue() end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local got = redis.call('ZPOPMIN', KEYS[1])
local pos = got[1]
if not pos then
  local old = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now, 'LIMIT', 0, 1)
  if not old[1] then return queue() end
  pos = old[1]
end
if redis.call('EXISTS', KEYS[6]) == 0 then return {-2} end
local token = redis.call('INCR', KEYS[4])
redis.call('ZADD', KEYS[2], now + tonumber(ARGV[2]), pos)
redis.call('HSET', KEYS[3], pos, ARGV[1])
return {tonumber(pos), token}
` });
client.defineCommand('giveback', { numberOfKeys: 5, lua: `
if redis.call('HGET', KEYS[3], ARGV[1]) ~= ARGV[2] then return 0 end
local head = redis.call('LPOP', KEYS[5])
if head then
  local ch, id, ttl = string.match(head, '^([^|]+)|([^|]+)|(%d+)$')
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  local token = redis.call('INCR', KEYS[4])
  redis.call('ZADD', KEYS[2], now + tonumber(ttl), ARGV[1])
  redis.call('HSET', KEYS[3], ARGV[1], id)
  redis.call('PUBLISH', ch, id .. ':' .. ARGV[1] .. ':' .. token)
  return 2
end
redis.call('HDEL', KEYS[3], ARGV[1])
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('ZADD', KEYS[1], ARGV[1], ARGV[1])
return 1
` });
const waiting = new Map();
sub.on('message', (_ch, msg) => {
    const [id, pos, token] = msg.split(':');
    const w = waiting.get(id);
    if (w) { waiting.delete(id); w([Number(pos), Number(token)]); }
});
const start = Number(startMs), end = start + Number(seconds) * 1000;
let done = 0, n = 0;
async function borrow() {
    const id = me + (n++).toString(36);
    const granted = new Promise(resolve => waiting.set(id, resolve));
    const r = await client.borrow(...K, id, 30000, `${channel}|${id}|30000`);
    if (r[0] >= 0) { waiting.delete(id); return [r[0], id]; }
    const [pos] = await granted;
    return [pos, id];
}
async function task() {
    while (Date.now() < end) {
        const [pos, id] = await borrow();
        await client.giveback(K[0], K[1], K[2], K[3], K[4], pos, id);
        done += 1;
    }
}
sub.subscribe(channel).then(() => setTimeout(async () => {
    await Promise.all(Array.from({ length: Number(tasks) }, task));
    console.log(done);
    client.disconnect(); sub.disconnect();
}, Math.max(0, start - Date.now())));
