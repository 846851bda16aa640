"""The exceptions of semaphore_pool, one class per kind of answer a caller acts on.

They mirror the Rust library's ``semaphore_core::Error``. Every one
carries ``retryable``: whether the same call may succeed if tried again
later. Times are in seconds; pool and lease ids are UUID strings.

Rust variant            Python class
======================  ================================================
InvalidArgument         InvalidArgument (also a ValueError)
PoolNotFound            PoolNotFound (also a LookupError)
Exhausted               Exhausted
Draining                Draining
KeyReused               KeyReused
LeaseExpired            LeaseExpired (a LeaseLost)
LeaseNotFound           LeaseNotFound (a LeaseLost)
SessionLost             SessionLost (a LeaseLost)
SessionEnded            SessionEnded (a SessionLost)
Storage                 StorageError
SchemaMismatch          SchemaMismatch (a StorageError, never retryable)
ClockSkew               SemaphoreError (the base class)
NoRuntime, Blocking...  SemaphoreError (cannot happen through this module)
"""

from __future__ import annotations

from typing import Any


class SemaphoreError(Exception):
    """The base class of every error the library raises.

    ``retryable`` says whether the same call may succeed later (an
    exhausted pool, a draining pool, a storage error that says so).
    """

    retryable: bool = False

    def __init__(self, message: str, **fields: Any) -> None:
        super().__init__(message)
        for name, value in fields.items():
            setattr(self, name, value)


class InvalidArgument(SemaphoreError, ValueError):
    """An argument is outside its allowed range; nothing changed.

    ``field`` names the argument as in the method's signature (``count``,
    ``ttl``, ``wait``, ``slots``, ``key``, ``owner``, ``url``, ...),
    ``allowed`` says the allowed range in words, ``got`` what was passed.
    Retrying the same call fails the same way.
    """

    field: str
    allowed: str
    got: str


class PoolNotFound(SemaphoreError, LookupError):
    """No pool is registered under this id (never registered, or deleted).

    ``pool`` is the pool's id. Register it with ``Pool.register``.
    """

    pool: str


class Exhausted(SemaphoreError):
    """No slot freed up within the borrow's wait; retry later.

    ``pool`` is the pool's id, ``waited`` the wait allowed, in seconds,
    after clamping. With ``wait=0`` it is raised at once.
    """

    pool: str
    waited: float


class Draining(SemaphoreError):
    """The pool is draining: it grants nothing new until un-drained.

    ``pool`` is the pool's id. Borrow with ``wait_while_draining=True`` to
    wait for the drain to end instead.
    """

    pool: str


class KeyReused(SemaphoreError):
    """The idempotency key names an active lease granted for another request.

    ``pool`` is the pool's id. Use another key.
    """

    pool: str


class LeaseLost(SemaphoreError):
    """The lease is no longer held: borrow again.

    The base of ``LeaseExpired``, ``LeaseNotFound`` and ``SessionLost``;
    ``pool`` and ``lease`` are the ids.
    """

    pool: str
    lease: str


class LeaseExpired(LeaseLost):
    """The lease expired at ``expired_at`` (unix seconds); its slot may be another's."""

    expired_at: float


class LeaseNotFound(LeaseLost):
    """The lease is not active though its expiry has not come.

    It was returned, force-returned, or its pool deleted.
    """


class SessionLost(LeaseLost):
    """The lease was bound to its store's session, which can no longer vouch for it.

    The store was out of reach for longer than the session timeout, or it
    ended the session (``SessionEnded``, a subclass).
    """


class SessionEnded(SessionLost):
    """The store ended the lease's session while its holder still kept it.

    Its record was deleted or cut short by someone else (an operator, a
    cleaning job), or the server lost it: an operator's act. PostgreSQL
    and Redis tell the holder at once, MySQL at its next heartbeat.
    """


class StorageError(SemaphoreError):
    """The storage engine failed; the call was all or nothing and did not happen.

    ``operation`` names the store call (``borrow``, ``connect``, ...);
    ``retryable`` says whether trying again later may succeed (a lost
    connection, a busy file) or not (I/O, corruption, a refusal).
    """

    operation: str


class SchemaMismatch(StorageError):
    """A persistent store found its tables in a shape it does not know and changed nothing.

    ``expected`` and ``found`` describe the two shapes.
    """

    expected: str
    found: str
