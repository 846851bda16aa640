"""A minimal strict-FIFO Redis lock (count 1) against python-redis-lock.

The return script hands the lock to the queue's head, which is told by its own
list (BLPOP): the least a FIFO design can do per pair ("fifo"). "fifo_take"
adds the look the head must make before it holds (R16: a killed waiter holds
back no one for more than a second, so the store must learn that the head
lives); "fifo_duties" adds the store's other duties instead (see DUTIES). python fifo.py [runs]: 1 and 8 processes, medians of the runs of 2 s,
on the Redis at 127.0.0.1:6379, in a virtualenv with redis and
python-redis-lock."""
import multiprocessing as mp, sys, time, uuid, statistics, os

BORROW = """
if redis.call('EXISTS', KEYS[2]) == 0 and redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return 1
end
redis.call('RPUSH', KEYS[2], ARGV[1])
return 0
"""
RETURN = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
local head = redis.call('LPOP', KEYS[2])
if head then
  redis.call('SET', KEYS[1], head, 'PX', ARGV[2])
  redis.call('LPUSH', KEYS[3] .. head, '1')
else
  redis.call('DEL', KEYS[1])
end
return 1
"""
TAKE = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('SET', KEYS[2], ARGV[1])
return 1
"""
# "fifo_duties": the same hand-off with what the store must do on its
# common path besides, on the one-hash layout of
# ../redis-common-path/worker-hash.js (the server's clock, the pool's count
# and drain, the restart grace's check, whether the pool is due to be
# judged, a lost reply's lease found again, tokens above the server's clock
# in µs, a place by ticket, the handed lease bound to a liveness bound until
# its holder takes it at its return); the head holds on arrival, no take.
DUTIES = """
local pool, queue, closes, told = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local function fmt(n) return string.format('%.0f', n) end
local t = redis.call('TIME')
local now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
local now = math.floor(now_us / 1000)
local function token(last)
  last = tonumber(last or '0')
  if last < now_us then return now_us end
  return last + 1
end
local function grace(run, till)
  local now_run = string.match(redis.call('INFO', 'replication'), 'master_replid:(%w+)') or ''
  if run ~= now_run then redis.call('HSET', pool, 'run', now_run, 'until', '0') return false end
  return tonumber(till or '0') > now
end
local id, ttl = ARGV[2], ARGV[3]
if ARGV[1] == 'borrow' then
  local p = redis.call('HMGET', pool, 'held', 'draining', 'j', 'jc', 'queued', 'run', 'until',
    'g:' .. id, 'l:' .. id, 'tok', 'ticket')
  if p[2] == '1' then return -4 end
  if grace(p[6], p[7]) then return -5 end
  local c = redis.call('GET', closes) or '0'
  if p[9] then return 1 end
  if p[8] then return -6 end
  if p[1] == '1' or tonumber(p[5] or '0') > 0 then
    local ticket = tonumber(p[11] or '0') + 1
    redis.call('ZADD', queue, 'NX', ticket, id)
    redis.call('HSET', pool, 'ticket', ticket, 'queued', tonumber(p[5] or '0') + 1,
      'h:' .. id, ttl .. '|' .. fmt(now + 2000))
    return 0
  end
  local tk = token(p[10])
  redis.call('HSET', pool, 'l:' .. id, '0:' .. fmt(tk) .. ':' .. fmt(now + ttl), 'tok', fmt(tk), 'held', '1')
  return 1
end
local p = redis.call('HMGET', pool, 'l:' .. id, 'queued', 'draining', 'tok', 'run', 'until')
if not p[1] then return 0 end
local e, g = string.match(p[1], '^0:%d+:(%d+):?(.*)$')
if tonumber(e) <= now then return 0 end
local gone = {'l:' .. id}
if g ~= '' then gone[2] = 'g:' .. g end
local queued = tonumber(p[2] or '0')
if queued > 0 and p[3] ~= '1' and not grace(p[5], p[6]) then
  local head = redis.call('ZPOPMIN', queue)[1]
  local httl = string.match(redis.call('HGET', pool, 'h:' .. head), '^(%d+)')
  gone[#gone + 1] = 'h:' .. head
  redis.call('HDEL', pool, unpack(gone))
  local tk = token(p[4])
  redis.call('HSET', pool, 'l:' .. head, '0:' .. fmt(tk) .. ':' .. fmt(now + tonumber(httl)) .. ':' .. head,
    'g:' .. head, fmt(now), 'tok', fmt(tk), 'queued', queued - 1)
  redis.call('LPUSH', told .. head, fmt(tk) .. ':' .. fmt(now + 200))
  return 2
end
redis.call('HDEL', pool, unpack(gone))
redis.call('HSET', pool, 'held', '0')
return 1
"""
TTL = 60

def worker(kind, url, name, start, seconds, counts):
    import redis
    conn = redis.Redis.from_url(url)
    if kind in ("fifo", "fifo_take"):
        me = uuid.uuid4().hex
        borrow = conn.register_script(BORROW)
        ret = conn.register_script(RETURN)
        take = conn.register_script(TAKE)
        keys = [name + ":h", name + ":q", name + ":g:"]
        mine = name + ":g:" + me
        def pair():
            if not borrow(keys=keys[:2], args=[me, TTL * 1000]):
                conn.blpop([mine], timeout=30)
                if kind == "fifo_take":
                    take(keys=[keys[0], name + ":taken"], args=[me])
            ret(keys=keys, args=[me, TTL * 1000])
    elif kind == "fifo_duties":
        me = uuid.uuid4().hex
        script = conn.register_script(DUTIES)
        keys = [name + ":pool", name + ":q", name + ":closes", name + ":g:"]
        mine = name + ":g:" + me
        def pair():
            if not script(keys=keys, args=["borrow", me, TTL * 1000]):
                conn.blpop([mine], timeout=30)
            script(keys=keys, args=["return", me, TTL * 1000])
    else:
        import redis_lock
        lock = redis_lock.Lock(conn, name, expire=TTL)
        def pair():
            with lock:
                pass
    while time.time() < start:
        time.sleep(0.001)
    done, end = 0, start + seconds
    while time.time() < end:
        pair(); done += 1
    counts.put(done)

def rate(kind, url, procs, seconds):
    name = "proto-" + uuid.uuid4().hex[:8]
    ctx = mp.get_context("spawn"); counts = ctx.Queue()
    start = time.time() + 1.5 + 0.1 * procs
    ws = [ctx.Process(target=worker, args=(kind, url, name, start, seconds, counts)) for _ in range(procs)]
    for w in ws: w.start()
    total = sum(counts.get(timeout=90) for _ in ws)
    for w in ws: w.join()
    return total / seconds

if __name__ == "__main__":
    url = "redis://127.0.0.1:6379"
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    for procs in (1, 8):
        r = {"fifo": [], "lock": [], "fifo_take": [], "fifo_duties": []}
        for _ in range(runs):
            for k in r: r[k].append(rate(k, url, procs, 2.0))
        f, l, t, d = (statistics.median(r[k]) for k in ("fifo", "lock", "fifo_take", "fifo_duties"))
        print(f"{procs} procs: fifo {f:.0f}/s  fifo+take {t:.0f}/s  fifo+duties {d:.0f}/s  python-redis-lock {l:.0f}/s  ratios {f/l:.2f}x {t/l:.2f}x {d/l:.2f}x  (take {sorted(int(x) for x in r['fifo_take'])}, lock {sorted(int(x) for x in r['lock'])})", flush=True)
