"""Fixtures: every test that takes `store` or `pool` runs on every store."""

from __future__ import annotations

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))

import semaphore_pool as sp  # noqa: E402
from stores import KINDS, fresh, open_store, spec  # noqa: E402


@pytest.fixture(params=KINDS)
def kind(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture
def store_spec(kind: str, tmp_path) -> dict:
    """A fresh store of every kind: its own file, schema or prefix."""
    return spec(kind, str(tmp_path))


@pytest.fixture
def store(store_spec: dict) -> sp.Store:
    return open_store(store_spec)


@pytest.fixture
def pool(store: sp.Store) -> sp.Pool:
    """A fresh pool of two slots."""
    pool = store.pool(fresh("pool"))
    pool.register(2)
    return pool

