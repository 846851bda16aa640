"""Code that uses the API as documented, for `mypy --strict` against the stubs
(test_stubs.py); it is type-checked, not run."""

from __future__ import annotations

import semaphore_pool as sp


def sync_use(store: sp.Store) -> int:
    pool = store.pool("exports")
    pool.register(3)
    with pool.borrow(ttl=600, wait=60, owner="me", key="job-1", slots=1) as lease:
        token: int = lease.token
        positions: list[int] = lease.positions
        assert lease.is_held() and positions
    state: sp.PoolState = pool.inspect()
    holders: list[sp.Holder] = pool.holders()
    return token + state.in_use + len(holders)


async def async_use(pool: sp.Pool, other: sp.Pool) -> float:
    async with pool.borrow_async(ttl=1.5, wait=2) as lease:
        left: float = lease.time_left()
    got: sp.Lease = await pool.borrow_async(10)
    got.keep_alive()
    reason: sp.SemaphoreError = await got.lost()
    assert isinstance(reason, sp.LeaseLost)
    async with sp.PoolSet([pool, other]).borrow_async(10) as leases:
        first: sp.LeaseInfo = leases[0]
        assert first.token > 0
    try:
        pool.borrow(10)
    except sp.Exhausted as e:
        waited: float = e.waited
        assert waited >= 0
    except sp.StorageError as e:
        retry: bool = e.retryable
        assert retry
    return left
