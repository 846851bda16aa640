"""Type stubs of semaphore_pool. Times are seconds (int or float); ids are UUID strings."""

import os
from types import TracebackType
from typing import (
    Any,
    Awaitable,
    Generator,
    Generic,
    Iterator,
    List,
    Literal,
    Optional,
    Sequence,
    Tuple,
    Type,
    TypeVar,
    Union,
    final,
)

from typing_extensions import disjoint_base

from ._errors import (
    Draining as Draining,
    Exhausted as Exhausted,
    InvalidArgument as InvalidArgument,
    KeyReused as KeyReused,
    LeaseExpired as LeaseExpired,
    LeaseLost as LeaseLost,
    LeaseNotFound as LeaseNotFound,
    PoolNotFound as PoolNotFound,
    SchemaMismatch as SchemaMismatch,
    SemaphoreError as SemaphoreError,
    SessionEnded as SessionEnded,
    SessionLost as SessionLost,
    StorageError as StorageError,
)

__version__: str

_Seconds = Union[int, float]

@disjoint_base
class Store:
    """Where the pools live; a store handle is also its process's session."""

    def pool(self, name: Optional[str] = None, *, id: Optional[str] = None) -> Pool:
        """A handle on the pool named `name` (PoolId::from_name in Rust) or with UUID `id`."""

@final
class MemoryStore(Store):
    """An in-process store: the threads and tasks of this process only."""

    def __new__(cls) -> MemoryStore: ...

@final
class SqliteStore(Store):
    """A SQLite file shared by the processes of one machine. Opening blocks."""

    def __new__(
        cls,
        path: Union[str, os.PathLike[str]],
        *,
        busy_timeout: Optional[_Seconds] = None,
        synchronous: str = "normal",
    ) -> SqliteStore: ...

@final
class PostgresStore(Store):
    """A PostgreSQL database shared by many machines. Connecting blocks."""

    def __new__(
        cls,
        url: str,
        *,
        schema: Optional[str] = None,
        session_timeout: Optional[_Seconds] = None,
        pool_size: Optional[int] = None,
    ) -> PostgresStore: ...

@final
class RedisStore(Store):
    """A Redis server (7.0+) shared by many machines. Connecting blocks."""

    def __new__(
        cls,
        url: str,
        *,
        prefix: Optional[str] = None,
        session_timeout: Optional[_Seconds] = None,
        restart_grace: Optional[_Seconds] = None,
    ) -> RedisStore: ...

@final
class MysqlStore(Store):
    """A MySQL or MariaDB database shared by many machines. Connecting blocks."""

    def __new__(
        cls,
        url: str,
        *,
        table_prefix: Optional[str] = None,
        session_timeout: Optional[_Seconds] = None,
        pool_size: Optional[int] = None,
    ) -> MysqlStore: ...

@final
class PoolState:
    """A pool as of one instant."""

    @property
    def id(self) -> str: ...
    @property
    def count(self) -> int: ...
    @property
    def in_use(self) -> int: ...
    @property
    def available(self) -> int: ...
    @property
    def draining(self) -> bool: ...

@final
class LeaseInfo:
    """A lease's data, without the power to return it by itself."""

    @property
    def id(self) -> str: ...
    @property
    def pool(self) -> str: ...
    @property
    def position(self) -> int: ...
    @property
    def positions(self) -> List[int]: ...
    @property
    def slots(self) -> int: ...
    @property
    def token(self) -> int: ...
    @property
    def expires_at(self) -> float:
        """Unix seconds."""

@final
class Holder:
    """One active lease as Pool.holders() lists it."""

    @property
    def lease(self) -> LeaseInfo: ...
    @property
    def owner(self) -> Optional[str]: ...
    @property
    def key(self) -> Optional[str]: ...
    @property
    def position(self) -> int: ...
    @property
    def token(self) -> int: ...

@final
class Lease:
    """A held lease, returned when its with block ends or when it is garbage-collected."""

    @property
    def id(self) -> str: ...
    @property
    def pool(self) -> str: ...
    @property
    def position(self) -> int: ...
    @property
    def positions(self) -> List[int]: ...
    @property
    def slots(self) -> int: ...
    @property
    def token(self) -> int: ...
    @property
    def expires_at(self) -> float:
        """Unix seconds, as granted or last renewed by renew()."""
    @property
    def info(self) -> LeaseInfo: ...
    def is_held(self) -> bool: ...
    def is_lost(self) -> bool: ...
    def time_left(self) -> float: ...
    def renew(self, ttl: _Seconds) -> None: ...
    def renew_async(self, ttl: _Seconds) -> Awaitable[None]: ...
    def release(self) -> bool: ...
    def release_async(self) -> Awaitable[bool]: ...
    def keep_alive(self) -> None: ...
    def lost(self) -> Awaitable[SemaphoreError]:
        """Resolves, when the lease is lost, to the reason (an exception instance, not raised)."""
    def wait_lost(self, timeout: Optional[_Seconds] = None) -> Optional[SemaphoreError]: ...
    def forget(self) -> LeaseInfo: ...
    def __enter__(self) -> Lease: ...
    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        traceback: Optional[TracebackType],
    ) -> Literal[False]: ...
    def __aenter__(self) -> Awaitable[Lease]: ...
    def __aexit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        traceback: Optional[TracebackType],
    ) -> Awaitable[Literal[False]]: ...

@final
class LeaseSet:
    """The leases of one PoolSet.borrow, returned together."""

    @property
    def leases(self) -> List[LeaseInfo]: ...
    def __len__(self) -> int: ...
    def __getitem__(self, key: int, /) -> LeaseInfo: ...
    def __iter__(self) -> Iterator[LeaseInfo]: ...
    def release(self) -> bool: ...
    def release_async(self) -> Awaitable[bool]: ...
    def forget(self) -> List[LeaseInfo]: ...
    def __enter__(self) -> LeaseSet: ...
    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        traceback: Optional[TracebackType],
    ) -> Literal[False]: ...
    def __aenter__(self) -> Awaitable[LeaseSet]: ...
    def __aexit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        traceback: Optional[TracebackType],
    ) -> Awaitable[Literal[False]]: ...

_Granted = TypeVar("_Granted", Lease, LeaseSet)

@final
class BorrowAsync(Generic[_Granted]):
    """An asyncio borrow not started yet: await it, or use it in async with.

    Pool.borrow_async's grants a Lease, PoolSet.borrow_async's a LeaseSet.
    """

    def __await__(self) -> Generator[Any, None, _Granted]: ...
    def __aenter__(self) -> Awaitable[_Granted]: ...
    def __aexit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        traceback: Optional[TracebackType],
    ) -> Awaitable[Literal[False]]: ...

@final
class Pool:
    """A handle on one pool of a store."""

    @property
    def id(self) -> str: ...
    @property
    def name(self) -> Optional[str]: ...
    def register(self, count: int) -> PoolState: ...
    def inspect(self) -> PoolState: ...
    def delete(self) -> bool: ...
    def borrow(
        self,
        ttl: _Seconds,
        wait: _Seconds = 0.0,
        *,
        slots: int = 1,
        key: Optional[str] = None,
        owner: Optional[str] = None,
        wait_while_draining: bool = False,
    ) -> Lease: ...
    def borrow_async(
        self,
        ttl: _Seconds,
        wait: _Seconds = 0.0,
        *,
        slots: int = 1,
        key: Optional[str] = None,
        owner: Optional[str] = None,
        wait_while_draining: bool = False,
    ) -> BorrowAsync[Lease]: ...
    def holders(self) -> List[Holder]: ...
    def force_return(self, position: int) -> Optional[Holder]: ...
    def drain(self, draining: bool = True) -> PoolState: ...
    def return_lease(self, lease: str) -> bool: ...
    def waiting(self) -> int: ...
    def register_async(self, count: int) -> Awaitable[PoolState]: ...
    def inspect_async(self) -> Awaitable[PoolState]: ...
    def delete_async(self) -> Awaitable[bool]: ...
    def holders_async(self) -> Awaitable[List[Holder]]: ...
    def force_return_async(self, position: int) -> Awaitable[Optional[Holder]]: ...
    def drain_async(self, draining: bool = True) -> Awaitable[PoolState]: ...
    def return_lease_async(self, lease: str) -> Awaitable[bool]: ...

@final
class PoolSet:
    """Several pools of one store, borrowed from together, all or nothing."""

    def __new__(cls, pools: Sequence[Pool]) -> PoolSet: ...
    @staticmethod
    def weighted(pools: Sequence[Tuple[Pool, int]]) -> PoolSet: ...
    @property
    def ids(self) -> List[str]: ...
    def borrow(
        self,
        ttl: _Seconds,
        wait: _Seconds = 0.0,
        *,
        slots: int = 1,
        key: Optional[str] = None,
        owner: Optional[str] = None,
        wait_while_draining: bool = False,
    ) -> LeaseSet: ...
    def borrow_async(
        self,
        ttl: _Seconds,
        wait: _Seconds = 0.0,
        *,
        slots: int = 1,
        key: Optional[str] = None,
        owner: Optional[str] = None,
        wait_while_draining: bool = False,
    ) -> BorrowAsync[LeaseSet]: ...

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
