"""A child Python process for the tests that need more than one, or a signal.

    python child.py cycles <spec-json> <pool> <n> <log>   n borrow/return cycles, holds logged
    python child.py hold <spec-json> <pool> <ttl>          borrow, print HOLDING, then sleep
    python child.py wait <spec-json> <pool>                print WAITING, block in borrow (Ctrl-C it)
    python child.py wait-memory                            hold the one slot of a memory pool, then as wait

Holds are logged as `position token start_us end_us`, as the Rust peer does.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))

import semaphore_pool as sp  # noqa: E402
from stores import open_store  # noqa: E402


def now_us() -> int:
    return time.time_ns() // 1000


def cycles(pool: sp.Pool, n: int, log: str) -> None:
    lines = []
    for _ in range(n):
        with pool.borrow(ttl=10, wait=60) as lease:
            start = now_us()
            time.sleep(0.0002)
            lines.append(f"{lease.position} {lease.token} {start} {now_us()}\n")
    with open(log, "w") as f:
        f.writelines(lines)


def wait(pool: sp.Pool) -> None:
    print("WAITING", flush=True)
    try:
        pool.borrow(ttl=600, wait=60)
    except KeyboardInterrupt:
        state = pool.inspect()
        print(f"INTERRUPTED in_use={state.in_use} waiting={pool.waiting()}", flush=True)
        return
    print("GRANTED", flush=True)


def main() -> None:
    signal.signal(signal.SIGINT, signal.default_int_handler)
    mode = sys.argv[1]
    if mode == "wait-memory":
        pool = sp.MemoryStore().pool("one")
        pool.register(1)
        held = pool.borrow(600)
        wait(pool)
        del held
        return
    store = open_store(json.loads(sys.argv[2]))
    pool = store.pool(sys.argv[3])
    if mode == "cycles":
        cycles(pool, int(sys.argv[4]), sys.argv[5])
    elif mode == "hold":
        lease = pool.borrow(ttl=float(sys.argv[4]), wait=30)
        print(f"HOLDING {lease.position} {lease.token}", flush=True)
        time.sleep(3600)
    elif mode == "wait":
        wait(pool)
    else:
        raise SystemExit(f"unknown mode {mode}")


if __name__ == "__main__":
    main()
