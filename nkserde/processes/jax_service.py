"""The processes of a multi-process JAX run, as the checkpoint needs them.

:class:`JaxStore` is :class:`nkserde.processes.coordination.KeyValueStore` over the
key-value store of JAX's distributed runtime (the coordination service
that ``jax.distributed.initialize`` starts on process 0), not over device
collectives: it works from any thread, so an asynchronous checkpoint can
write from a background thread while the run's own collectives go on.
Array data never goes through it; each process writes its own blocks
into the file.

Every process counts its requests (:func:`counts`); the coordinator
serves the sum over processes.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import socket

import jax

from .. import jax_internals
from .coordination import DEFAULT_TIMEOUT, CountingStore, Group, KeyExists, StopFlag, StoreTimeout
from ..errors import DistributedSaveError, NkserdeError


def multi_process() -> bool:
    return jax.process_count() > 1


def peer_timeout() -> float:
    """Seconds a process waits for the others at a point where all of them
    meet before it raises PeerLostError naming the missing ones: the
    environment's ``NKSERDE_PEER_TIMEOUT``, else 60. (A wait that includes
    another process's writing allows for it: coordination.write_timeout.)"""
    value = os.environ.get("NKSERDE_PEER_TIMEOUT")
    if not value:
        return DEFAULT_TIMEOUT
    try:
        seconds = float(value)
    except ValueError:
        seconds = -1.0
    if not seconds > 0:
        raise NkserdeError(f"NKSERDE_PEER_TIMEOUT={value!r}: expected a positive number of seconds")
    return seconds


class JaxStore:
    """JAX's coordination service as a KeyValueStore. Errors of the service
    other than a timeout or an existing key pass through unchanged."""

    def __init__(self, client):
        self.client = client

    def set(self, key, value):
        with _raising("ALREADY_EXISTS", KeyExists(key)):
            self.client.key_value_set_bytes(key, bytes(value))

    def put(self, key, value):
        self.client.key_value_set_bytes(key, bytes(value), allow_overwrite=True)

    def try_get(self, key):
        try:
            return self.client.key_value_try_get_bytes(key)
        except Exception as exc:
            if "NOT_FOUND" in str(exc):
                return None
            raise

    def get(self, key, timeout):
        with _raising("DEADLINE_EXCEEDED", StoreTimeout(key)):
            return self.client.blocking_key_value_get_bytes(key, _ms(timeout))

    def dir_get(self, prefix):
        return list(self.client.key_value_dir_get_bytes(prefix + "/"))

    def delete(self, prefix):
        self.client.key_value_delete(prefix)

    def barrier(self, name, timeout):
        with _raising("DEADLINE_EXCEEDED", StoreTimeout(name)):
            self.client.wait_at_barrier(name, _ms(timeout))


@contextlib.contextmanager
def _raising(status: str, error: Exception):
    """The service's error of gRPC ``status`` (named in its message, as
    tests/test_jax_store.py checks under the oldest and newest JAX) raised
    as ``error``; any other error as it is."""
    try:
        yield
    except Exception as exc:
        if status in str(exc):
            raise error from None
        raise


def _ms(seconds: float) -> int:
    return max(1, int(seconds * 1000))


_store: CountingStore | None = None


def store() -> CountingStore:
    """This process's counted store over JAX's coordination service."""
    global _store
    client = jax_internals.distributed_client()
    if client is None:
        raise RuntimeError(
            "jax.distributed is not initialized: several processes need jax.distributed.initialize() before saving"
        )
    if _store is None or _store.store.client is not client:
        _store = CountingStore(JaxStore(client))
    return _store


def counts():
    """What this process has sent to the coordination service so far
    (:class:`nkserde.processes.coordination.Counts`)."""
    return store().snapshot()


def group(name: str) -> Group:
    """The processes of this run as a :class:`~nkserde.processes.coordination.Group`
    named ``name`` (a :func:`coordination_name`)."""
    return Group(store(), jax.process_index(), jax.process_count(), name, timeout=peer_timeout())


def stop_flag(name: str) -> StopFlag:
    return StopFlag(store(), f"nkserde/{name}")


def reachable_host() -> str:
    """This host's address as the run's other processes reach it: the one
    it reaches JAX's coordination service from (the route's own source
    address, asked of the kernel: no packet is sent)."""
    host, _, port = (jax_internals.coordinator_address() or "").rpartition(":")
    family, _, _, _, address = socket.getaddrinfo(host.strip("[]"), int(port), type=socket.SOCK_DGRAM)[0]
    with socket.socket(family, socket.SOCK_DGRAM) as route:
        route.connect(address)
        return route.getsockname()[0]


def coordination_name(purpose: str, path) -> str:
    """The one way of naming a sequence of coordinated calls: what it is for
    and the file or directory it concerns (every process names the same
    path the same way; different targets never share keys)."""
    return f"{purpose}:{hashlib.sha1(str(path).encode()).hexdigest()[:16]}"


def on_process_0(name: str, decide, failed: str, what: str = "process 0's decision"):
    """``decide()`` run on process 0 only; its result (JSON-able) on every
    process, in one round (about 3P requests at the coordinator). If it
    raises there, the others raise DistributedSaveError(``failed``: the
    error). ``name``: a :func:`coordination_name`. ``what``: the point
    where all processes meet, for a PeerLostError. One process: just
    ``decide()``."""
    if jax.process_count() == 1:
        return decide()
    try:
        answer = group(name).round(b"", lambda _: json.dumps(decide()).encode(), what=what)
    except DistributedSaveError as exc:
        if jax.process_index() == 0 or type(exc) is not DistributedSaveError:
            raise
        raise DistributedSaveError(f"{failed}: {exc}") from None
    return json.loads(answer)
