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
        (lambda p: p.register(-1), "count"),
        (lambda p: p.register(2**40), "count"),
        (lambda p: p.borrow(10, slots=-1), "slots"),
        (lambda p: p.borrow(10, slots=2**33), "slots"),
        (lambda p: p.force_return(-1), "position"),
        (lambda p: p.force_return(2**32), "position"),
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


def test_a_weighted_set_names_a_weight_out_of_range():
    pool = sp.MemoryStore().pool("weights")
    with pytest.raises(sp.InvalidArgument) as raised:
        sp.PoolSet.weighted([(pool, -1)])
    assert raised.value.field == "slots"


def test_seconds_past_the_longest_duration_are_clamped_as_inf_is(pool):
    """R5: a ttl or wait above the longest duration (about 1.8e19 s) is
    clamped to the limit, as `inf` is; it was refused."""
    for ttl in (1e20, float("inf")):
        with pool.borrow(ttl, wait=1e300) as lease:
            assert lease.expires_at > 0
    assert pool.inspect().in_use == 0


def test_a_sqlite_path_that_names_no_file_is_refused_naming_it():
    for path in ("", ":memory:"):
        with pytest.raises(sp.InvalidArgument) as raised:
            sp.SqliteStore(path)
        assert raised.value.field == "path", str(raised.value)


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
