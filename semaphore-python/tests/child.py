"""A child Python process for the tests that need more than one, or a signal.

    python child.py cycles <spec-json> <pool> <n> <log>   n borrow/return cycles, holds logged
    python child.py hold <spec-json> <pool> <ttl>          borrow, print HOLDING, then sleep
    python child.py wait <spec-json> <pool>                print WAITING, block in borrow (Ctrl-C it)
    python child.py wait-memory                            hold the one slot of a memory pool, then as wait
    python child.py hold-fork <spec-json> <pool> <ttl>     as hold, after forking a child that sleeps
                                                           and never touches the store (HOLDING pos token pid)
    python child.py use-forked <spec-json> <pool>          borrow, fork, and in the child use the store
                                                           made before the fork, then one made after
    python child.py fork-waiting <spec-json> <pool>        hold the one slot with a borrower waiting
                                                           behind, fork; the child borrows and checks

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


def hold_fork(pool: sp.Pool, ttl: float) -> None:
    lease = pool.borrow(ttl=ttl, wait=30)
    pid = os.fork()
    if pid == 0:
        # What a pre-fork worker or multiprocessing's fork start method
        # leaves: a child that never touches the store, and lives on.
        time.sleep(3600)
        os._exit(0)
    print(f"HOLDING {lease.position} {lease.token} {pid}", flush=True)
    time.sleep(3600)


def use_forked(spec: dict, pool: sp.Pool, name: str) -> None:
    """Prints what a forked child's calls came to, one line each."""
    import asyncio

    async def inspect(p: sp.Pool) -> sp.PoolState:
        return await p.inspect_async()

    pool.register(2)
    held = pool.borrow(ttl=60)
    asyncio.run(inspect(pool))
    pid = os.fork()
    if pid == 0:
        status = 0
        try:
            started = time.monotonic()
            try:
                pool.borrow(ttl=60, wait=5)
                print("CHILD old store: borrowed", flush=True)
            except sp.SemaphoreError as e:
                took = time.monotonic() - started
                print(f"CHILD old store: {type(e).__name__} after {took:.1f}s: {e}", flush=True)
            fresh_pool = open_store(spec).pool(name)
            if spec["kind"] == "memory":
                fresh_pool.register(2)
            with fresh_pool.borrow(ttl=60, wait=5) as lease:
                print(f"CHILD new store: position {lease.position}", flush=True)
            try:
                asyncio.run(inspect(fresh_pool))
                print("CHILD asyncio: ran", flush=True)
            except sp.SemaphoreError as e:
                print(f"CHILD asyncio: {type(e).__name__}: {e}", flush=True)
        except BaseException as e:  # noqa: BLE001 - reported, and the child must not return
            print(f"CHILD failed: {e!r}", flush=True)
            status = 1
        sys.stdout.flush()
        os._exit(status)
    _, status = os.waitpid(pid, 0)
    print(f"PARENT child exited {os.waitstatus_to_exitcode(status)}; held {held.position}", flush=True)
    state = pool.inspect()
    print(f"PARENT in_use={state.in_use}", flush=True)


def fork_waiting(pool: sp.Pool) -> None:
    """Prints what a child forked while a borrower of its parent waited
    made of the parent's store: a borrow must fail at once (it would wait
    behind the parent's waiter, which is not in the child), and the
    parent's lease is not the child's."""
    import threading

    pool.register(1)
    held = pool.borrow(ttl=60)
    got = []
    waiter = threading.Thread(target=lambda: got.append(pool.borrow(ttl=60, wait=30)))
    waiter.start()
    while pool.waiting() == 0:
        time.sleep(0.01)
    pid = os.fork()
    if pid == 0:
        started = time.monotonic()
        try:
            pool.borrow(ttl=5, wait=10)
            print("CHILD borrowed", flush=True)
        except sp.SemaphoreError as e:
            took = time.monotonic() - started
            print(f"CHILD {type(e).__name__} after {took:.1f}s: {e}", flush=True)
        print(f"CHILD is_held={held.is_held()}", flush=True)
        sys.stdout.flush()
        os._exit(0)
    os.waitpid(pid, 0)
    print(f"PARENT is_held={held.is_held()}", flush=True)
    held.release()
    waiter.join()
    print(f"PARENT waiter got {got[0].position}", flush=True)
    got[0].release()


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
    elif mode == "hold-fork":
        hold_fork(pool, float(sys.argv[4]))
    elif mode == "fork-waiting":
        fork_waiting(pool)
    elif mode == "use-forked":
        use_forked(json.loads(sys.argv[2]), pool, sys.argv[3])
    else:
        raise SystemExit(f"unknown mode {mode}")


if __name__ == "__main__":
    main()
