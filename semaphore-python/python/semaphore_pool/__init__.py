"""Counting semaphores with numbered slots and leases, in memory or shared
through SQLite, PostgreSQL, Redis or MySQL: the Rust library ``semaphore``
for Python, sync and asyncio.

>>> import semaphore_pool as sp
>>> pool = sp.MemoryStore().pool("exports")
>>> pool.register(3).count
3
>>> with pool.borrow(ttl=600, wait=60) as lease:
...     (lease.position, lease.is_held())
(0, True)
>>> pool.inspect().in_use
0

Times are seconds (an int or a float). A blocking call releases the GIL
while it waits, and Ctrl-C interrupts it; each has an ``_async`` form
for asyncio. Errors are the exception classes below, all
``SemaphoreError``\\ s.
"""

from ._errors import (
    Draining,
    Exhausted,
    InvalidArgument,
    KeyReused,
    LeaseExpired,
    LeaseLost,
    LeaseNotFound,
    PoolNotFound,
    SchemaMismatch,
    SemaphoreError,
    SessionEnded,
    SessionLost,
    StorageError,
)
from ._native import (
    BorrowAsync,
    Holder,
    Lease,
    LeaseInfo,
    LeaseSet,
    MemoryStore,
    MysqlStore,
    Pool,
    PoolSet,
    PoolState,
    PostgresStore,
    RedisStore,
    SqliteStore,
    Store,
    __version__,
)

__all__ = [
    "BorrowAsync",
    "Draining",
    "Exhausted",
    "Holder",
    "InvalidArgument",
    "KeyReused",
    "Lease",
    "LeaseExpired",
    "LeaseInfo",
    "LeaseLost",
    "LeaseNotFound",
    "LeaseSet",
    "MemoryStore",
    "MysqlStore",
    "Pool",
    "PoolNotFound",
    "PoolSet",
    "PoolState",
    "PostgresStore",
    "RedisStore",
    "SchemaMismatch",
    "SemaphoreError",
    "SessionEnded",
    "SessionLost",
    "SqliteStore",
    "StorageError",
    "Store",
    "__version__",
]
