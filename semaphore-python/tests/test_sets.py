"""PoolSet: several pools at once, all or nothing."""

from __future__ import annotations

import pytest

import semaphore_pool as sp
from stores import fresh


def test_a_set_borrows_one_slot_of_each_or_none(store):
    a, b = store.pool(fresh()), store.pool(fresh())
    a.register(1)
    b.register(3)
    both = sp.PoolSet([a, b])
    with both.borrow(600, wait=5) as leases:
        assert [lease.pool for lease in leases] == [a.id, b.id]
        assert (a.inspect().in_use, b.inspect().in_use) == (1, 1)
        with pytest.raises(sp.Exhausted) as raised:
            both.borrow(600, wait=0.1)
        assert raised.value.pool == a.id
        assert b.inspect().in_use == 1
    assert (a.inspect().in_use, b.inspect().in_use) == (0, 0)


def test_a_weighted_set(store):
    gpus, disk = store.pool(fresh()), store.pool(fresh())
    gpus.register(4)
    disk.register(1)
    job = sp.PoolSet.weighted([(gpus, 2), (disk, 1)])
    leases = job.borrow(60)
    assert leases[0].positions == [0, 1] and leases[1].positions == [0]
    assert gpus.inspect().in_use == 2
    assert leases.release() is True
    assert gpus.inspect().in_use == 0
    kept = job.borrow(60).forget()
    assert len(kept) == 2 and gpus.inspect().in_use == 2
    for info, pool in zip(kept, (gpus, disk)):
        assert pool.return_lease(info.id)


def test_a_set_refuses_pools_of_two_stores_or_twice():
    one, other = sp.MemoryStore(), sp.MemoryStore()
    with pytest.raises(sp.InvalidArgument) as raised:
        sp.PoolSet([one.pool("a"), other.pool("b")])
    assert raised.value.field == "pools"
    with pytest.raises(sp.InvalidArgument):
        sp.PoolSet([one.pool("a"), one.pool("a")])
    with pytest.raises(sp.InvalidArgument):
        sp.PoolSet([])
