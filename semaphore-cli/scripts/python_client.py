"""Drives a running `semaphore serve` through a client generated from its
OpenAPI document (openapi-python-client): register, borrow, a two-phase
wait (enqueue, a poll that times out, a poll that is granted), returns.

    python python_client.py BASE_URL   (with the generated package importable)
"""
import sys
import uuid

from semaphore_client import Client
from semaphore_client.api.leases import borrow, return_lease
from semaphore_client.api.pools import inspect, register
from semaphore_client.api.two_phase import cancel, enqueue, wait
from semaphore_client.models import (
    Borrow, Cancel, Enqueue, Granted, Queued, Register, Return, State, Wait,
)


def main(base: str) -> None:
    client = Client(base_url=base, raise_on_unexpected_status=True)
    pool = uuid.uuid4()
    state = register.sync(pool, client=client, body=Register(count=1))
    assert isinstance(state, State) and state.count == 1, state

    held = borrow.sync(pool, client=client, body=Borrow(ttl=60.0, owner="python"))
    assert isinstance(held, Granted) and held.position == 0, held

    queued = enqueue.sync(pool, client=client, body=Enqueue(ttl=60.0))
    assert isinstance(queued, Queued) and queued.place == 1, queued
    polled = wait.sync(pool, client=client, body=Wait(ticket=queued.ticket, wait=0.2))
    assert isinstance(polled, Queued) and polled.place == 1, polled

    gone = return_lease.sync(pool, client=client, body=Return(lease=held.lease))
    assert gone.returned, gone
    granted = wait.sync(pool, client=client, body=Wait(ticket=queued.ticket, wait=5.0))
    assert isinstance(granted, Granted) and granted.position == 0, granted

    cancelled = cancel.sync(pool, client=client, body=Cancel(ticket=queued.ticket))
    assert not cancelled.cancelled, "a collected lease is the client's"
    assert return_lease.sync(pool, client=client, body=Return(lease=granted.lease)).returned
    state = inspect.sync(pool, client=client)
    assert isinstance(state, State) and state.in_use == 0, state
    print("the generated client borrowed, waited two-phase and returned")


if __name__ == "__main__":
    main(sys.argv[1])
