"""A minimal strict-FIFO Redis lock (count 1) against python-redis-lock.

The return script hands the lock to the queue's head, which is told by its own
list (BLPOP): the least a FIFO design can do per pair ("fifo"). "fifo_take"
adds the look the head must make before it holds (R16: a killed waiter holds
back no one for more than a second, so the store must learn that the head
lives). python fifo.py [runs]: 1 and 8 processes, medians of the runs of 2 s,
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
        r = {"fifo": [], "lock": [], "fifo_take": []}
        for _ in range(runs):
            for k in r: r[k].append(rate(k, url, procs, 2.0))
        f, l, t = (statistics.median(r[k]) for k in ("fifo", "lock", "fifo_take"))
        print(f"{procs} procs: fifo {f:.0f}/s  fifo+take {t:.0f}/s  python-redis-lock {l:.0f}/s  ratios {f/l:.2f}x {t/l:.2f}x  (take {sorted(int(x) for x in r['fifo_take'])}, lock {sorted(int(x) for x in r['lock'])})", flush=True)
