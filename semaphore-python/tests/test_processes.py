"""Several processes, Python and Rust, on one pool; killed holders; Ctrl-C."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from stores import NETWORKED, eventually, fresh, open_store, spec

HERE = Path(__file__).parent
CHILD = [sys.executable, str(HERE / "child.py")]
# The Rust peer (examples/peer.rs), built by scripts/test-python.
PEER = os.environ.get("SEMAPHORE_PEER")


def child(*args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [*CHILD, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def first_line(process: subprocess.Popen, expect: str) -> str:
    line = process.stdout.readline()
    if not line.startswith(expect):
        process.kill()
        _, err = process.communicate()
        raise AssertionError(f"expected {expect!r}, got {line!r}; stderr:\n{err}")
    return line


def holds(path: Path) -> list:
    return [tuple(int(f) for f in line.split()) for line in path.read_text().splitlines()]


@pytest.mark.skipif(not PEER, reason="SEMAPHORE_PEER names no Rust peer (scripts/test-python builds it)")
def test_python_and_rust_processes_share_one_sqlite_pool(tmp_path):
    db, name, n = str(tmp_path / "shared.db"), "shared-exports", 100
    pool = open_store({"kind": "sqlite", "path": db}).pool(name)
    pool.register(3)
    logs = [tmp_path / f"python-{i}.log" for i in range(4)]
    workers = [child("cycles", json.dumps({"kind": "sqlite", "path": db}), name, str(n), str(log))
               for log in logs]
    rust_log = tmp_path / "rust.log"
    workers.append(subprocess.Popen([PEER, "cycles", db, name, str(n), str(rust_log)],
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    for worker in workers:
        _, err = worker.communicate(timeout=120)
        assert worker.returncode == 0, err
    all_holds = [h for log in [*logs, rust_log] for h in holds(log)]
    assert len(all_holds) == 5 * n
    assert len(holds(rust_log)) == n
    # No token twice, no position outside the count.
    tokens = [token for _, token, _, _ in all_holds]
    assert len(set(tokens)) == len(tokens)
    assert {position for position, _, _, _ in all_holds} <= {0, 1, 2}
    # No position held twice at once, and on each position the tokens
    # grow with time.
    for position in {0, 1, 2}:
        on_it = sorted((h for h in all_holds if h[0] == position), key=lambda h: h[2])
        for before, after in zip(on_it, on_it[1:]):
            assert after[2] >= before[3], f"position {position} held twice: {before} {after}"
            assert after[1] > before[1], f"tokens out of order on {position}: {before} {after}"
    # Never more than the count at once, and the processes did overlap.
    events = sorted([(h[2], 1) for h in all_holds] + [(h[3], -1) for h in all_holds])
    inside = most = 0
    for _, step in events:
        inside += step
        most = max(most, inside)
    assert 1 < most <= 3
    assert pool.inspect().in_use == 0


@pytest.mark.parametrize("kind", ["sqlite", *NETWORKED])
def test_a_killed_holder_s_slot_comes_back_within_the_session_timeout(kind, tmp_path):
    session = 1.0
    the_spec = spec(kind, str(tmp_path), session_timeout=session)
    name = fresh("killed")
    pool = open_store(the_spec).pool(name)
    pool.register(1)
    holder = child("hold", json.dumps(the_spec), name, "600")
    first_line(holder, "HOLDING 0")
    assert pool.inspect().in_use == 1
    holder.send_signal(signal.SIGKILL)
    holder.wait()
    killed = time.monotonic()
    with pool.borrow(600, wait=30) as lease:
        back_after = time.monotonic() - killed
    assert lease.position == 0
    # The ttl was 600 s: the slot came back with the holder's session,
    # at once for SQLite (the process's lock), within the session timeout
    # (plus a heartbeat's and a poll's slack) on a networked store.
    assert back_after < (1.5 if kind == "sqlite" else session + 4), back_after


@pytest.mark.parametrize("kind", ["sqlite", *NETWORKED])
def test_a_killed_holder_s_slot_comes_back_though_its_forked_child_lives(kind, tmp_path):
    """R16 whatever a process's children do: a child that the holder forked
    and that never touches the store (a pre-fork worker, multiprocessing's
    fork start method) does not keep the killed holder's slot (on SQLite it
    did: its `flock` was shared with the child)."""
    session = 1.0
    the_spec = spec(kind, str(tmp_path), session_timeout=session)
    name = fresh("forked")
    pool = open_store(the_spec).pool(name)
    pool.register(1)
    holder = child("hold-fork", json.dumps(the_spec), name, "600")
    forked = int(first_line(holder, "HOLDING 0").split()[3])
    try:
        assert pool.inspect().in_use == 1
        holder.send_signal(signal.SIGKILL)
        holder.wait()
        killed = time.monotonic()
        with pool.borrow(600, wait=30) as lease:
            back_after = time.monotonic() - killed
        assert lease.position == 0
        assert back_after < (1.5 if kind == "sqlite" else session + 4), back_after
        os.kill(forked, 0)  # the child still lives
    finally:
        os.kill(forked, signal.SIGKILL)


@pytest.mark.parametrize("kind", ["memory", "sqlite", *NETWORKED])
def test_a_store_made_before_fork_fails_at_once_in_the_child(kind, tmp_path):
    """A store made before `os.fork()` fails at the child's first call
    with an error that says so (it hung: the parent's runtime threads are
    not the child's), and takes nothing; one made in the child works; the
    asyncio API, which the parent had started, refuses in the child. The
    memory store's copy is the child's own, and works."""
    the_spec = spec(kind, str(tmp_path))
    name = fresh("after-fork")
    process = child("use-forked", json.dumps(the_spec), name)
    out, err = process.communicate(timeout=60)
    lines = out.splitlines()
    assert process.returncode == 0, err
    old = next(line for line in lines if line.startswith("CHILD old store"))
    if kind == "memory":
        assert old == "CHILD old store: borrowed", out
    else:
        assert "SemaphoreError after 0.0s" in old and "fork" in old, out
    # A new memory store is the child's alone; a shared one holds the
    # parent's lease at position 0.
    assert f"CHILD new store: position {0 if kind == 'memory' else 1}" in lines, out
    asyncio_line = next(line for line in lines if line.startswith("CHILD asyncio"))
    assert "SemaphoreError" in asyncio_line and "fork" in asyncio_line, out
    assert "PARENT child exited 0; held 0" in lines, out
    # The child borrowed nothing as the parent: only the parent's lease.
    assert "PARENT in_use=1" in lines, out


@pytest.mark.parametrize("kind", ["memory", "sqlite", *NETWORKED])
def test_a_child_forked_while_a_borrower_waits_fails_at_once_and_holds_nothing(kind, tmp_path):
    """The child's copy of the parent's queue holds a waiter that is not
    in the child: a borrow there fails at once with the fork error (it
    hung, or waited out its wait), and the parent's lease is not held in
    the child (`is_held()` said True while another process held the
    slot). The parent goes on: its waiter is served."""
    process = child("fork-waiting", json.dumps(spec(kind, str(tmp_path))), fresh("forked-queue"))
    out, err = process.communicate(timeout=60)
    assert process.returncode == 0, err
    lines = out.splitlines()
    refused = next(line for line in lines if line.startswith("CHILD "))
    assert "SemaphoreError after 0.0s" in refused and "fork" in refused, out
    assert "CHILD is_held=False" in lines, out
    assert "PARENT is_held=True" in lines, out
    assert "PARENT waiter got 0" in lines, out


def interrupted(process: subprocess.Popen) -> str:
    first_line(process, "WAITING")
    time.sleep(0.5)  # well inside the borrow's wait
    assert process.poll() is None
    sent = time.monotonic()
    process.send_signal(signal.SIGINT)
    out, err = process.communicate(timeout=10)
    assert time.monotonic() - sent < 2, "Ctrl-C took too long to interrupt the wait"
    assert process.returncode == 0, err
    return out.strip()


def test_ctrl_c_interrupts_a_blocking_wait_in_memory():
    assert interrupted(child("wait-memory")) == "INTERRUPTED in_use=1 waiting=0"


@pytest.mark.parametrize("kind", ["sqlite", *NETWORKED])
def test_ctrl_c_interrupts_a_blocking_wait_and_takes_nothing(kind, tmp_path):
    the_spec = spec(kind, str(tmp_path))
    name = fresh("interrupted")
    pool = open_store(the_spec).pool(name)
    pool.register(1)
    held = pool.borrow(600)
    assert interrupted(child("wait", json.dumps(the_spec), name)) == (
        "INTERRUPTED in_use=1 waiting=0"
    )
    assert pool.inspect().in_use == 1
    held.release()
    # The interrupted waiter left the queue: nobody is ahead of this borrow.
    started = time.monotonic()
    with pool.borrow(600, wait=5) as lease:
        assert lease.position == 0
    assert time.monotonic() - started < 1.5
    assert eventually(lambda: pool.inspect().in_use == 0)
