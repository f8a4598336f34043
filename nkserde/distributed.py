"""The processes of a multi-process JAX run, as the file writer needs them.

:class:`JaxCommunicator` exchanges small messages through the key-value
store of JAX's distributed runtime (the coordination service that
``jax.distributed.initialize`` starts), not through device collectives: it
works from any thread, so an asynchronous checkpoint can write from a
background thread while the run's own collectives go on. Array data never
goes through it; each process writes its own blocks into the file.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import socket
import threading

import jax

from . import jax_internals
from .errors import NkserdeError

# Long enough for a slow shared file system, short enough that a process
# that died leaves the others with an error instead of hanging forever.
TIMEOUT_MS = 10 * 60 * 1000


def process_count() -> int:
    return jax.process_count()


def multi_process() -> bool:
    return jax.process_count() > 1


def free_local_port() -> int:
    """A TCP port free on 127.0.0.1 now: the coordinator address of JAX
    processes launched on one machine (tests, benchmarks)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _client():
    client = jax_internals.distributed_client()
    if client is None:
        raise RuntimeError(
            "jax.distributed is not initialized: several processes need jax.distributed.initialize() before saving"
        )
    return client


class JaxCommunicator:
    """All-gather of bytes over JAX's coordination service.

    Every process must make the same sequence of calls (each save of every
    process is one call sequence); keys are numbered per communicator name,
    so two communicators with different names (e.g. the checkpoint
    manager's and a direct save) do not interfere.
    """

    _counters: dict[str, itertools.count] = {}
    _lock = threading.Lock()

    def __init__(self, name: str = "save"):
        self.rank, self.size = jax.process_index(), jax.process_count()
        self.name = name
        self.client = _client()

    def _next_key(self) -> str:
        with self._lock:
            counter = self._counters.setdefault(self.name, itertools.count())
            return f"nkserde/{self.name}/{next(counter)}"

    def allgather(self, data: bytes) -> list[bytes]:
        key = self._next_key()
        self.client.key_value_set_bytes(f"{key}/{self.rank}", bytes(data))
        out = [self.client.blocking_key_value_get_bytes(f"{key}/{r}", TIMEOUT_MS) for r in range(self.size)]
        # everyone has read every value: the keys can go
        self.client.wait_at_barrier(f"{key}/read", TIMEOUT_MS)
        self.client.key_value_delete(f"{key}/{self.rank}")
        return out

    def broadcast(self, data: bytes | None) -> bytes:
        """Process 0's ``data`` on every process."""
        return self.allgather(data if self.rank == 0 else b"")[0]


def coordination_name(purpose: str, path) -> str:
    """The one way of naming a sequence of coordinated calls: what it is for
    and the file or directory it concerns (every process names the same
    path the same way; different targets never share keys)."""
    return f"{purpose}:{hashlib.sha1(str(path).encode()).hexdigest()[:16]}"


def any_process(name: str, flag: int | None) -> int | None:
    """The first non-zero ``flag`` of any process (by value: the largest),
    on every process: e.g. a signal that reached only some of them.
    ``name``: a :func:`coordination_name`. One process: ``flag``."""
    if jax.process_count() == 1:
        return flag
    received = JaxCommunicator(name).allgather(str(flag or 0).encode())
    return flag or max(int(b) for b in received) or None


def on_process_0(name: str, decide, failed: str):
    """``decide()`` run on process 0 only; its result (JSON-able) on every
    process. If it raises there, the others raise NkserdeError(``failed``:
    the error). ``name``: a :func:`coordination_name`. One process: just
    ``decide()``."""
    if jax.process_count() == 1:
        return decide()
    comm = JaxCommunicator(name)
    if comm.rank == 0:
        try:
            result = decide()
        except Exception as exc:
            comm.broadcast(json.dumps({"error": f"{type(exc).__name__}: {exc}"}).encode())
            raise
        comm.broadcast(json.dumps({"result": result}).encode())
        return result
    message = json.loads(comm.broadcast(None))
    if "error" in message:
        raise NkserdeError(f"{failed}: {message['error']}")
    return message["result"]
