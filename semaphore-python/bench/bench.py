"""Benchmarks of the Python module (semaphore-python/bench/run builds what it needs).

1. memory: a Python borrow+return pair (`with pool.borrow(ttl): pass`) against
   the same pair from Rust, through its blocking API (`blocking().borrow`, then
   `blocking_release`: what the `with` block does) and through its async API;
   goal >= 0.5x of the blocking pair.
2. SQLite: the same on one file (synchronous=NORMAL); goal >= 0.8x.
3. Redis, one lock (a pool of count 1): pairs per second at 1 and 8
   processes, against python-redis-lock on the same server.

Each figure is the median of `--runs` runs. Prints a table.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import statistics
import subprocess
import tempfile
import time
import uuid

import semaphore_pool as sp

TTL = 10.0


def python_pairs(pool: sp.Pool, seconds: float) -> float:
    """Uncontended `with pool.borrow(TTL): pass` pairs per second."""
    done, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        for _ in range(100):
            with pool.borrow(TTL):
                pass
        done += 100
    return done / (time.perf_counter() - start)


def rust_pairs(peer: str, store: str, seconds: float) -> tuple[float, float]:
    """The Rust peer's (blocking, async) pairs per second."""
    out = subprocess.run([peer, "pairs", store, str(seconds)], check=True,
                         capture_output=True, text=True).stdout
    figures = dict(item.split("=") for item in out.split())
    return float(figures["blocking"]), float(figures["async"])


def median(values: list[float]) -> float:
    return statistics.median(values)


def line(name: str, ours: float, anchor: float, goal: str) -> str:
    return f"| {name} | {ours:,.0f}/s | {anchor:,.0f}/s | {ours / anchor:.2f}x | {goal} |"


def bench_store(peer: str, runs: int, seconds: float, name: str, store: sp.Store,
                rust_store: str, goal: float) -> list[str]:
    pool = store.pool("bench-pairs-py")
    pool.register(1)
    py, rust_blocking, rust_async = [], [], []
    for _ in range(runs):
        py.append(python_pairs(pool, seconds))
        blocking, in_async = rust_pairs(peer, rust_store, seconds)
        rust_blocking.append(blocking)
        rust_async.append(in_async)
    ours = median(py)
    return [
        line(f"{name}: Python pair vs Rust blocking pair", ours, median(rust_blocking),
             f">= {goal}x"),
        line(f"{name}: Python pair vs Rust async pair", ours, median(rust_async), "-"),
    ]


def redis_worker(kind: str, url: str, prefix: str, name: str, start: float, seconds: float,
                 counts) -> None:
    if kind == "ours":
        pool = sp.RedisStore(url, prefix=prefix, restart_grace=0).pool(name)

        def pair() -> None:
            with pool.borrow(TTL, wait=30):
                pass
    else:
        import redis
        import redis_lock

        conn = redis.Redis.from_url(url)
        lock = redis_lock.Lock(conn, name, expire=int(TTL))

        def pair() -> None:
            with lock:
                pass
    while time.time() < start:
        time.sleep(0.001)
    done, end = 0, start + seconds
    while time.time() < end:
        pair()
        done += 1
    counts.put(done)


def redis_rate(kind: str, url: str, prefix: str, processes: int, seconds: float) -> float:
    name = f"bench-lock-{uuid.uuid4().hex[:8]}"
    if kind == "ours":
        sp.RedisStore(url, prefix=prefix, restart_grace=0).pool(name).register(1)
    ctx = mp.get_context("spawn")
    counts = ctx.Queue()
    start = time.time() + 1.5 + 0.1 * processes  # after every process is up
    workers = [ctx.Process(target=redis_worker,
                           args=(kind, url, prefix, name, start, seconds, counts))
               for _ in range(processes)]
    for worker in workers:
        worker.start()
    total = sum(counts.get(timeout=60 + seconds) for _ in workers)
    for worker in workers:
        worker.join()
    return total / seconds


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--peer", required=True, help="the Rust peer (examples/peer.rs), release")
    parser.add_argument("--redis", default=os.environ.get("SEMAPHORE_REDIS_URL")
                        or "redis://127.0.0.1:6379")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--only", choices=["memory", "sqlite", "redis"])
    args = parser.parse_args()
    rows = []
    if args.only in (None, "memory"):
        rows += bench_store(args.peer, args.runs, args.seconds, "1. memory", sp.MemoryStore(),
                            "memory", 0.5)
    if args.only in (None, "sqlite"):
        with tempfile.TemporaryDirectory() as directory:
            rows += bench_store(args.peer, args.runs, args.seconds, "2. SQLite",
                                sp.SqliteStore(os.path.join(directory, "py.db")),
                                os.path.join(directory, "rust.db"), 0.8)
    if args.only in (None, "redis"):
        prefix = f"bench-{uuid.uuid4().hex[:8]}"
        for processes in (1, 8):
            ours = median([redis_rate("ours", args.redis, prefix, processes, args.seconds)
                           for _ in range(args.runs)])
            theirs = median([redis_rate("lock", args.redis, prefix, processes, args.seconds)
                             for _ in range(args.runs)])
            rows.append(line(f"3. Redis, one lock, {processes} process"
                             f"{'es' if processes > 1 else ''}: ours vs python-redis-lock",
                             ours, theirs, "-"))
    print(f"median of {args.runs} runs of {args.seconds} s each\n")
    print("| line | ours | anchor | ratio | goal |")
    print("| --- | --- | --- | --- | --- |")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
