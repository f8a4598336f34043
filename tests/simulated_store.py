"""A key-value store in one process, with a modelled clock, for threads
that stand for the processes of a run: the tests (tests/test_coordination.py)
and benchmarks/coordination.py run nkserde's real coordination protocols
(:class:`nkserde.processes.coordination.Group`, ``StopFlag``, the file
writer's rounds) for up to 1024 processes against it. Scaffolding, not part
of the package: a real run's store is JAX's coordination service
(nkserde.processes.jax_service)."""

from __future__ import annotations

import threading
import time
from typing import Callable

from nkserde.processes.coordination import Counts, CountingStore, KeyExists, KeyValueStore, StoreTimeout


class SimulatedStore:
    """A key-value store in this process, for threads that stand for the
    processes of a run, with a modelled clock.

    Time is virtual: each simulated process has a clock; a request reaches
    the server ``rtt / 2`` after it is sent, costs the server ``service``
    seconds (plus ``per_byte`` per byte of key and value) of serial work,
    and its answer is back ``rtt / 2`` later. The server is one queue: a
    request is done no earlier than its arrival plus its cost, and no
    earlier than all the work the server was given before it (threads
    reach the server in an order close to, not exactly, that of their
    virtual times). A blocking get is answered once the key is set, a
    barrier once the last process has arrived. Local work between
    requests adds the thread's CPU time to its clock.
    ``counts``: every request the server served, by kind.
    """

    def __init__(self, size: int, rtt: float = 50e-6, service: float = 5e-6, per_byte: float = 1e-9):
        self.size, self.rtt, self.service, self.per_byte = size, rtt, service, per_byte
        self.counts = Counts()
        self._values: dict[str, tuple[bytes, float]] = {}
        self._barriers: dict[str, list] = {}
        self._work = 0.0  # the server's work so far: nothing is served before it is done
        self._cond = threading.Condition()
        self._clocks = threading.local()

    # the calling thread's process clock
    def clock(self) -> float:
        c = self._clocks
        if not hasattr(c, "now"):
            c.now, c.cpu = 0.0, time.thread_time()
        now = time.thread_time()
        c.now += now - c.cpu
        c.cpu = now
        return c.now

    def _advance(self, to: float):
        self._clocks.now = to
        self._clocks.cpu = time.thread_time()

    def _serve(self, kind: str, nbytes: int, ready: float = 0.0) -> float:
        """Under the lock: the virtual time the server finishes the request
        (not before ``ready``)."""
        arrive = self.clock() + self.rtt / 2
        cost = self.service + nbytes * self.per_byte
        self._work += cost
        self.counts.add(kind, nbytes)
        return max(arrive + cost, self._work, ready)

    def set(self, key, value):
        with self._cond:
            if key in self._values:
                self._advance(self._serve("set", len(key)) + self.rtt / 2)
                raise KeyExists(key)
            done = self._serve("set", len(key) + len(value))
            self._values[key] = (bytes(value), done)
            self._cond.notify_all()
        self._advance(done + self.rtt / 2)

    def put(self, key, value):
        with self._cond:
            done = self._serve("put", len(key) + len(value))
            self._values[key] = (bytes(value), done)
            self._cond.notify_all()
        self._advance(done + self.rtt / 2)

    def try_get(self, key):
        with self._cond:
            value, _ = self._values.get(key, (None, 0.0))
            done = self._serve("try_get", len(key) + len(value or b""))
        self._advance(done + self.rtt / 2)
        return value

    def get(self, key, timeout):
        with self._cond:
            sent = self.clock()
            if not self._cond.wait_for(lambda: key in self._values, timeout):
                self._serve("get", len(key))
                raise StoreTimeout(key)
            value, set_at = self._values[key]
            self._advance(sent)
            done = self._serve("get", len(key) + len(value), ready=set_at)
        self._advance(done + self.rtt / 2)
        return value

    def dir_get(self, prefix):
        with self._cond:
            items = sorted((k, v) for k, (v, _) in self._values.items() if k.startswith(prefix + "/"))
            done = self._serve("dir_get", len(prefix) + sum(len(k) + len(v) for k, v in items))
        self._advance(done + self.rtt / 2)
        return items

    def delete(self, prefix):
        with self._cond:
            for k in [k for k in self._values if k == prefix or k.startswith(prefix + "/")]:
                del self._values[k]
            done = self._serve("delete", len(prefix))
        self._advance(done + self.rtt / 2)

    def barrier(self, name, timeout):
        with self._cond:
            arrived = self._barriers.setdefault(name, [])
            arrived.append(self._serve("barrier", len(name)))
            self._cond.notify_all()
            if not self._cond.wait_for(lambda: len(arrived) >= self.size, timeout):
                raise StoreTimeout(name)
            done = max(arrived)
        self._advance(done + self.rtt / 2)

    def keys(self) -> list[str]:
        with self._cond:
            return sorted(self._values)


def simulate(size: int, work: Callable[[int, KeyValueStore], object], store: SimulatedStore | None = None):
    """Runs ``work(rank, store)`` on ``size`` threads standing for processes
    (each with its own CountingStore over one shared SimulatedStore).
    Returns (results in rank order, per-process Counts, the store, the
    largest clock: the modelled time of the slowest process). Re-raises
    the first exception."""
    store = store or SimulatedStore(size)
    results, counts, clocks, errors = [None] * size, [None] * size, [0.0] * size, []

    def run(rank):
        counting = CountingStore(store)
        try:
            store.clock()
            results[rank] = work(rank, counting)
        except BaseException as exc:  # reported by the caller
            errors.append((rank, exc))
        finally:
            counts[rank], clocks[rank] = counting.snapshot(), store.clock()

    previous = threading.stack_size(256 * 1024)
    try:
        threads = [threading.Thread(target=run, args=(r,), daemon=True) for r in range(size)]
    finally:
        threading.stack_size(previous)
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise sorted(errors, key=lambda e: e[0])[0][1]
    return results, counts, store, max(clocks)
