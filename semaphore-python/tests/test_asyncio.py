"""asyncio: awaitable borrows, async with, and cancellation that takes nothing."""

from __future__ import annotations

import asyncio
import time

import pytest

import semaphore_pool as sp
from stores import eventually


def run(coroutine):
    return asyncio.run(coroutine)


def test_async_with_borrows_and_returns(pool):
    async def main():
        async with pool.borrow_async(ttl=600, wait=60) as lease:
            assert lease.position == 0 and lease.is_held()
            assert (await pool.inspect_async()).in_use == 1
        assert (await pool.inspect_async()).in_use == 0
        assert not lease.is_held()
        lease = await pool.borrow_async(600)
        await lease.renew_async(300)
        assert await lease.release_async() is True
        assert await lease.release_async() is False

    run(main())


def test_async_with_returns_the_lease_on_an_exception(pool):
    async def main():
        with pytest.raises(KeyError):
            async with pool.borrow_async(600) as lease:
                raise KeyError("boom")
        assert not lease.is_held()
        assert (await pool.inspect_async()).in_use == 0

    run(main())


def test_the_async_calls_answer_as_the_blocking_ones(pool):
    async def main():
        assert (await pool.register_async(3)).count == 3
        async with pool.borrow_async(600, owner="me") as lease:
            (holder,) = await pool.holders_async()
            assert holder.owner == "me"
            assert (await pool.force_return_async(lease.position)).token == lease.token
        assert (await pool.drain_async()).draining
        with pytest.raises(sp.Draining):
            await pool.borrow_async(600)
        assert not (await pool.drain_async(False)).draining
        info = (await pool.borrow_async(600)).forget()
        assert await pool.return_lease_async(info.id) is True
        assert await pool.delete_async() is True
        with pytest.raises(sp.PoolNotFound):
            await pool.borrow_async(600)

    run(main())


def test_tasks_share_the_slots_and_wait_their_turn(pool):
    inside = 0
    most = 0

    async def worker():
        nonlocal inside, most
        for _ in range(5):
            async with pool.borrow_async(600, wait=30):
                inside += 1
                most = max(most, inside)
                await asyncio.sleep(0.005)
                inside -= 1

    async def main():
        await asyncio.gather(*(worker() for _ in range(6)))

    run(main())
    assert most == 2
    assert pool.inspect().in_use == 0


def test_a_cancelled_wait_takes_nothing(pool):
    async def main():
        held = [await pool.borrow_async(600), await pool.borrow_async(600)]
        waiter = asyncio.ensure_future(pool.borrow_async(600, wait=30))
        await asyncio.sleep(0.3)
        assert not waiter.done()
        assert pool.waiting() == 1
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter
        assert await asyncio.to_thread(eventually, lambda: pool.waiting() == 0)
        assert (await pool.inspect_async()).in_use == 2  # unchanged
        assert len(await pool.holders_async()) == 2
        # The slot freed next is the next borrower's, not the cancelled one's.
        await held.pop().release_async()
        async with pool.borrow_async(600) as lease:
            assert lease.position == 1
        del held

    run(main())


def test_a_lease_granted_as_the_task_is_cancelled_is_returned(pool):
    async def main():
        for _ in range(20):
            held = [await pool.borrow_async(600), await pool.borrow_async(600)]
            waiter = asyncio.ensure_future(pool.borrow_async(600, wait=30))
            await asyncio.sleep(0.01)
            await held.pop().release_async()
            waiter.cancel()  # maybe granted already, maybe not
            try:
                lease = await waiter
            except asyncio.CancelledError:
                pass
            else:
                await lease.release_async()
            await held.pop().release_async()
            assert await asyncio.to_thread(eventually, lambda: pool.inspect().in_use == 0)

    run(main())


def test_an_async_with_cancelled_while_it_waits_takes_nothing(pool):
    entered = False

    async def borrower():
        nonlocal entered
        async with pool.borrow_async(600, wait=30):
            entered = True

    async def main():
        held = [await pool.borrow_async(600), await pool.borrow_async(600)]
        task = asyncio.ensure_future(borrower())
        await asyncio.sleep(0.2)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert not entered
        assert (await pool.inspect_async()).in_use == 2
        for lease in held:
            await lease.release_async()

    run(main())


def test_lost_resolves_with_the_reason(pool):
    async def main():
        lease = await pool.borrow_async(1.2)
        lease.keep_alive()
        lost = asyncio.ensure_future(lease.lost())
        await asyncio.sleep(1.5)
        assert not lost.done() and lease.is_held()
        await pool.force_return_async(lease.position)
        reason = await asyncio.wait_for(lost, 10)
        assert isinstance(reason, sp.LeaseNotFound) and reason.lease == lease.id
        assert not lease.is_held()
        short = await pool.borrow_async(0.2)
        started = time.monotonic()
        assert isinstance(await short.lost(), sp.LeaseExpired)
        assert time.monotonic() - started < 5

    run(main())


def test_a_pool_set_all_or_nothing(store):
    async def main():
        a, b = store.pool("set-a"), store.pool("set-b")
        a.register(1)
        b.register(2)
        both = sp.PoolSet([a, b])
        assert both.ids == [a.id, b.id]
        async with both.borrow_async(600, wait=5) as leases:
            assert len(leases) == 2 and [l.position for l in leases] == [0, 0]
            assert leases[0].pool == a.id and leases[-1].pool == b.id
            with pytest.raises(sp.Exhausted):
                await both.borrow_async(600, wait=0.1)
            assert (await b.inspect_async()).in_use == 1  # nothing held from a failed set
        assert (await a.inspect_async()).in_use == 0

    run(main())
