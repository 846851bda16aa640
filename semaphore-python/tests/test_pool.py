"""A pool's life and plain borrows, on every store."""

from __future__ import annotations

import gc
import threading
import time
import uuid

import pytest

import semaphore_pool as sp
from stores import eventually, fresh

# The namespace of PoolId::from_name (semaphore-core/src/id.rs).
POOL_NAMESPACE = uuid.UUID("6f1d3c2a-8b4e-4d7a-9c51-2e8f0a7b3d64")


def test_a_name_is_the_same_pool_id_as_in_rust():
    pool = sp.MemoryStore().pool("exports")
    assert pool.id == str(uuid.uuid5(POOL_NAMESPACE, "exports"))
    assert pool.name == "exports"
    by_id = sp.MemoryStore().pool(id=pool.id)
    assert by_id.id == pool.id and by_id.name is None


def test_register_inspect_delete(store):
    pool = store.pool(fresh())
    with pytest.raises(sp.PoolNotFound) as raised:
        pool.inspect()
    assert raised.value.pool == pool.id
    state = pool.register(3)
    assert (state.count, state.in_use, state.available, state.draining) == (3, 0, 3, False)
    assert state.id == pool.id
    assert pool.register(2) == pool.inspect()
    assert pool.delete() is True
    assert pool.delete() is False
    with pytest.raises(sp.PoolNotFound):
        pool.borrow(10)


def test_with_block_borrows_the_lowest_free_slot_and_returns_it(pool):
    with pool.borrow(ttl=600, wait=60) as first:
        assert (first.position, first.positions, first.slots) == (0, [0], 1)
        assert first.is_held() and not first.is_lost()
        # A networked store's bound lease may be lost with its session
        # (10 s after the last heartbeat): time_left says so.
        assert 5 < first.time_left() <= 600
        assert first.expires_at == pytest.approx(time.time() + 600, abs=5)
        with pool.borrow(600, 60) as second:
            assert second.position == 1
            assert second.token > first.token
            assert pool.inspect().in_use == 2
        assert pool.inspect().in_use == 1
    assert pool.inspect().in_use == 0
    assert not first.is_held()
    # Returned: the lowest slot is the next one handed out.
    with pool.borrow(600) as again:
        assert again.position == 0 and again.token > second.token


def test_seconds_may_be_ints_or_floats(pool):
    with pool.borrow(3, 0) as a, pool.borrow(2.5, 0.0) as b:
        assert 1 < a.time_left() <= 3 and 0 < b.time_left() <= 2.5


def test_a_with_block_that_raises_returns_the_lease(pool):
    with pytest.raises(KeyError):
        with pool.borrow(600) as lease:
            assert pool.inspect().in_use == 1
            raise KeyError("boom")
    assert pool.inspect().in_use == 0
    assert not lease.is_held()


def test_a_garbage_collected_lease_is_returned(pool):
    lease = pool.borrow(600)
    assert pool.inspect().in_use == 1
    del lease
    gc.collect()
    assert eventually(lambda: pool.inspect().in_use == 0)


def test_release_says_whether_the_lease_was_active(pool):
    lease = pool.borrow(600)
    assert lease.release() is True
    assert lease.release() is False
    assert not lease.is_held()
    short = pool.borrow(0.05)
    time.sleep(0.15)
    assert not short.is_held()
    assert short.release() is False  # expired first


def test_several_slots_as_one_lease(pool):
    pool.register(4)
    with pool.borrow(600, slots=3) as lease:
        assert lease.positions == [0, 1, 2] and lease.slots == 3
        assert pool.inspect().in_use == 3
    assert pool.inspect().in_use == 0


def test_exhausted_after_the_wait(pool):
    with pool.borrow(600), pool.borrow(600):
        started = time.monotonic()
        with pytest.raises(sp.Exhausted) as raised:
            pool.borrow(600, wait=0.3)
        assert time.monotonic() - started >= 0.29
        assert raised.value.pool == pool.id
        assert raised.value.waited == pytest.approx(0.3)
        assert raised.value.retryable is True
        with pytest.raises(sp.Exhausted):
            pool.borrow(600)  # wait 0: at once
    assert pool.inspect().in_use == 0


def test_a_blocking_wait_lets_other_threads_run_and_is_woken_by_a_return(pool):
    held = [pool.borrow(600), pool.borrow(600)]
    ticks = 0
    stop = threading.Event()

    def count():
        nonlocal ticks
        while not stop.is_set():
            ticks += 1

    def give_back():
        time.sleep(0.3)
        held.pop().release()

    threads = [threading.Thread(target=count), threading.Thread(target=give_back)]
    for thread in threads:
        thread.start()
    started = time.monotonic()
    with pool.borrow(600, wait=10) as lease:
        waited = time.monotonic() - started
        stop.set()
        assert lease.position == 1
    for thread in threads:
        thread.join()
    assert 0.25 < waited < 5
    # The counting thread ran while the borrow waited: the GIL was free.
    assert ticks > 10_000
    held.pop().release()


def test_renew_keeps_position_and_token(pool):
    with pool.borrow(5) as lease:
        before = lease.expires_at
        lease.renew(600)
        assert lease.expires_at > before + 500
        assert lease.time_left() > 5  # (a networked session: 10 s)
        assert lease.position == 0 and lease.is_held()
    with pytest.raises(sp.LeaseNotFound):
        lease.renew(10)  # returned
    expired = pool.borrow(0.05)
    time.sleep(0.15)
    with pytest.raises(sp.LeaseLost) as raised:
        expired.renew(10)
    assert isinstance(raised.value, (sp.LeaseExpired, sp.LeaseNotFound))


def test_is_held_turns_false_at_expiry_and_wait_lost_says_why(pool):
    lease = pool.borrow(1.0)
    assert lease.is_held()
    assert lease.wait_lost(timeout=0.05) is None
    reason = lease.wait_lost(timeout=5)
    assert isinstance(reason, sp.LeaseExpired)
    assert reason.lease == lease.id and reason.expired_at == pytest.approx(lease.expires_at)
    assert not lease.is_held() and lease.time_left() == 0


def test_keep_alive_outlives_the_ttl_and_a_forced_return_is_seen(pool):
    lease = pool.borrow(1.2)
    lease.keep_alive()
    time.sleep(1.5)
    assert lease.is_held() and pool.inspect().in_use == 1
    ended = pool.force_return(lease.position)
    assert ended is not None and ended.token == lease.token
    reason = lease.wait_lost(timeout=5)
    assert isinstance(reason, sp.LeaseNotFound)
    assert lease.is_lost() and not lease.is_held()
    assert pool.inspect().in_use == 0


def test_idempotency_key_owner_and_holders(pool):
    first = pool.borrow(600, key="invoice-7731", owner="worker-3")
    retry = pool.borrow(600, key="invoice-7731", owner="worker-3")
    assert (retry.id, retry.token) == (first.id, first.token)
    assert pool.inspect().in_use == 1
    (holder,) = pool.holders()
    assert (holder.owner, holder.key, holder.position) == ("worker-3", "invoice-7731", 0)
    assert holder.lease.id == first.id and holder.lease.token == first.token
    assert pool.force_return(1) is None
    first.release()
    retry.release()
    assert pool.holders() == [] or pool.inspect().in_use == 0


def test_forget_keeps_the_lease_and_return_lease_ends_it(pool):
    lease = pool.borrow(600)
    info = lease.forget()
    assert info.id == lease.id and info.position == 0
    assert not lease.is_held()
    del lease
    gc.collect()
    assert pool.inspect().in_use == 1  # forgotten: kept to its ttl
    assert pool.return_lease(info.id) is True
    assert pool.return_lease(info.id) is False
    assert pool.inspect().in_use == 0


def test_drain(pool):
    held = pool.borrow(600)
    assert pool.drain().draining is True
    with pytest.raises(sp.Draining) as raised:
        pool.borrow(600, wait=5)
    assert raised.value.pool == pool.id and raised.value.retryable
    held.release()  # returns go on while it drains

    def undrain():
        time.sleep(0.3)
        pool.drain(False)

    thread = threading.Thread(target=undrain)
    thread.start()
    with pool.borrow(600, wait=10, wait_while_draining=True) as lease:
        assert lease.position == 0
    thread.join()
    assert pool.inspect().draining is False


def test_delete_fails_waiters_at_once(pool):
    held = [pool.borrow(600), pool.borrow(600)]

    def delete():
        time.sleep(0.3)
        pool.delete()

    thread = threading.Thread(target=delete)
    thread.start()
    started = time.monotonic()
    with pytest.raises(sp.PoolNotFound):
        pool.borrow(600, wait=30)
    assert time.monotonic() - started < 10
    thread.join()
    del held
