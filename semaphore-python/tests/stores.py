"""Opening the stores the tests run on, from a spec a child process can be handed.

A spec is a dict: ``{"kind": "memory"}``, ``{"kind": "sqlite", "path": ...}``,
or a networked store's ``{"kind": ..., "url": ..., "space": ...}``, where
``space`` is the fresh schema (PostgreSQL), key prefix (Redis) or table
prefix (MySQL) that keeps the test's pools apart from every other test's.
The servers are the ones SEMAPHORE_PG_URL, SEMAPHORE_REDIS_URL and
SEMAPHORE_MYSQL_URL name, else the local ones.
"""

from __future__ import annotations

import os
import time
import uuid
from typing import Any, Callable, Dict

import semaphore_pool as sp

PG_URL = os.environ.get("SEMAPHORE_PG_URL") or "postgres://postgres@127.0.0.1:5432/test"
REDIS_URL = os.environ.get("SEMAPHORE_REDIS_URL") or "redis://127.0.0.1:6379"
MYSQL_URL = os.environ.get("SEMAPHORE_MYSQL_URL") or "mysql://root@127.0.0.1:3306/test"

KINDS = ["memory", "sqlite", "postgres", "redis", "mysql"]
NETWORKED = ["postgres", "redis", "mysql"]

Spec = Dict[str, Any]


def fresh(prefix: str = "sp") -> str:
    """A name no other test uses (a pool, a schema, a prefix)."""
    return f"{prefix}_{uuid.uuid4().hex[:16]}"


def spec(kind: str, directory: str, **tuning: Any) -> Spec:
    """A fresh spec of store `kind`; files go in `directory`."""
    if kind == "memory":
        return {"kind": kind}
    if kind == "sqlite":
        return {"kind": kind, "path": os.path.join(directory, fresh("db") + ".sqlite")}
    url = {"postgres": PG_URL, "redis": REDIS_URL, "mysql": MYSQL_URL}[kind]
    return {"kind": kind, "url": url, "space": fresh(), **tuning}


def open_store(spec: Spec) -> sp.Store:
    """The store `spec` names; `session_timeout` (seconds) if it gives one."""
    kind = spec["kind"]
    timeout = spec.get("session_timeout")
    try:
        if kind == "memory":
            return sp.MemoryStore()
        if kind == "sqlite":
            return sp.SqliteStore(spec["path"])
        if kind == "postgres":
            return sp.PostgresStore(
                spec["url"], schema=spec["space"], session_timeout=timeout, pool_size=4
            )
        if kind == "redis":
            # A fresh prefix on a server that lost nothing: no restart grace.
            return sp.RedisStore(
                spec["url"], prefix=spec["space"], session_timeout=timeout, restart_grace=0
            )
        if kind == "mysql":
            return sp.MysqlStore(
                spec["url"], table_prefix=spec["space"], session_timeout=timeout, pool_size=4
            )
    except sp.StorageError as e:
        var = {"postgres": "SEMAPHORE_PG_URL", "redis": "SEMAPHORE_REDIS_URL",
               "mysql": "SEMAPHORE_MYSQL_URL"}[kind]
        raise RuntimeError(
            f"cannot reach the {kind} server at {spec['url']}: start it, or name one in {var}"
        ) from e
    raise ValueError(f"unknown store kind {kind!r}")


def eventually(check: Callable[[], bool], within: float = 3.0) -> bool:
    """Whether `check()` turns true within `within` seconds (polled)."""
    deadline = time.monotonic() + within
    while True:
        if check():
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
