"""Errors as exception classes, with their fields."""

from __future__ import annotations

import pickle

import pytest

import semaphore_pool as sp


@pytest.fixture
def pool():
    pool = sp.MemoryStore().pool("errors")
    pool.register(1)
    return pool


def test_the_classes_form_one_tree():
    for cls in (sp.Exhausted, sp.InvalidArgument, sp.PoolNotFound, sp.LeaseExpired,
                sp.LeaseNotFound, sp.SessionLost, sp.KeyReused, sp.Draining, sp.StorageError,
                sp.SchemaMismatch, sp.LeaseLost, sp.SessionEnded):
        assert issubclass(cls, sp.SemaphoreError)
    assert issubclass(sp.InvalidArgument, ValueError)
    assert issubclass(sp.PoolNotFound, LookupError)
    assert issubclass(sp.LeaseExpired, sp.LeaseLost)
    assert issubclass(sp.SchemaMismatch, sp.StorageError)
    assert issubclass(sp.SessionEnded, sp.SessionLost)


@pytest.mark.parametrize(
    "call, field",
    [
        (lambda p: p.borrow(0), "ttl"),
        (lambda p: p.borrow(-1), "ttl"),
        (lambda p: p.borrow(float("nan")), "ttl"),
        (lambda p: p.borrow(10, wait=-1), "wait"),
        (lambda p: p.borrow(10, slots=0), "slots"),
        (lambda p: p.borrow(10, key=""), "key"),
        (lambda p: p.borrow(10, key="k" * 300), "key"),
        (lambda p: p.borrow(10, owner="a\nb"), "owner"),
        (lambda p: p.register(5000), "count"),
        (lambda p: p.return_lease("not-a-uuid"), "lease"),
    ],
)
def test_invalid_arguments_name_their_field(pool, call, field):
    with pytest.raises(sp.InvalidArgument) as raised:
        call(pool)
    error = raised.value
    assert error.field == field
    assert error.allowed and error.got
    assert error.retryable is False
    assert field in str(error)
    assert pool.inspect().in_use == 0


def test_store_and_pool_arguments_are_checked(tmp_path):
    with pytest.raises(sp.InvalidArgument) as raised:
        sp.MemoryStore().pool()
    assert raised.value.field == "name"
    with pytest.raises(sp.InvalidArgument) as raised:
        sp.MemoryStore().pool(id="nope")
    assert raised.value.field == "id"
    with pytest.raises(sp.InvalidArgument) as raised:
        sp.SqliteStore(str(tmp_path / "x.db"), synchronous="sometimes")
    assert raised.value.field == "synchronous"
    with pytest.raises(sp.InvalidArgument) as raised:
        sp.RedisStore("redis://127.0.0.1:1", prefix="bad prefix!")
    assert raised.value.field == "prefix"


def test_a_file_that_is_not_a_database_is_a_storage_error(tmp_path):
    path = tmp_path / "not.db"
    path.write_bytes(b"this is not a database" * 100)
    with pytest.raises(sp.StorageError) as raised:
        sp.SqliteStore(str(path))
    assert raised.value.retryable is False and raised.value.operation


def test_an_unreachable_server_is_a_retryable_storage_error():
    with pytest.raises(sp.StorageError) as raised:
        sp.RedisStore("redis://127.0.0.1:1", restart_grace=0)
    assert raised.value.retryable is True


def test_exceptions_pickle_with_their_fields(pool):
    with pool.borrow(10):
        with pytest.raises(sp.Exhausted) as raised:
            pool.borrow(10, wait=0.01)
    copy = pickle.loads(pickle.dumps(raised.value))
    assert type(copy) is sp.Exhausted
    assert (copy.pool, copy.waited, copy.retryable) == (pool.id, raised.value.waited, True)
    assert str(copy) == str(raised.value)
