"""How the processes of a run agree, over a key-value store, in O(P) requests.

Two protocols, each a small class over a :class:`KeyValueStore`:

- :class:`Group` ``.round(message, decide)``: every process sends one
  small message to process 0, which decides and gives every process the
  same answer (gather, decide, broadcast). Per round each process makes 3
  requests (process 0: 5) and the coordinator serves about 3P: one set per
  process, one barrier arrival per process, one ``dir_get`` that returns
  the P messages, one set of the answer and P - 1 reads of it.
- :class:`StopFlag` ``.check(completed, requested)``: a stop that reached
  some processes (a signal) stops all of them after the same step. Per
  step each process makes one non-blocking read, from a thread while the
  step runs (the coordinator: P).

Every wait is bounded: a process that died or is stuck makes the others
raise :class:`~nkserde.errors.PeerLostError` naming it, after ``timeout``
seconds, never a hang.

The store is JAX's coordination service in a real run
(:mod:`nkserde.processes.jax_service`); the tests and benchmarks count and time
the same code for hundreds of processes against an in-process store
(tests/simulated_store.py: threads, with a modelled round trip). This module
knows nothing of JAX or NetKet.
"""

from __future__ import annotations

import itertools
import threading
import weakref
from dataclasses import dataclass, field
from typing import Callable, Protocol

from ..errors import DistributedSaveError, NkserdeError, PeerLostError, ProcessMismatchError

# Long enough for a loaded node to reach the same point, short enough that
# a process that died leaves the others with an error within a minute.
DEFAULT_TIMEOUT = 60.0
# A wait that includes another process's writing also allows for its
# bytes at this rate (a slow shared file system).
SLOWEST_WRITE_RATE = 20e6  # bytes per second


class StoreTimeout(Exception):
    """A store's blocking call ran out of time."""


class KeyExists(Exception):
    """A store's ``set`` of a key that is already set."""


class KeyValueStore(Protocol):
    """What the protocols need of a key-value store shared by all processes
    (JAX's coordination service offers exactly this). Keys are strings,
    values bytes; every call is one request to the store's server."""

    def set(self, key: str, value: bytes) -> None:
        """Raises KeyExists if ``key`` is set."""

    def put(self, key: str, value: bytes) -> None:
        """Sets ``key``, set or not (a value that changes: a heartbeat)."""

    def try_get(self, key: str) -> bytes | None:
        """The value, or None if unset; never waits."""

    def get(self, key: str, timeout: float) -> bytes:
        """Waits until ``key`` is set; raises StoreTimeout after ``timeout`` s."""

    def dir_get(self, prefix: str) -> list[tuple[str, bytes]]:
        """Every (key, value) under ``prefix`` + "/", in one request."""

    def delete(self, prefix: str) -> None:
        """Deletes ``prefix`` and every key under it."""

    def barrier(self, name: str, timeout: float) -> None:
        """Returns once every process has called it with ``name``; raises
        StoreTimeout after ``timeout`` s."""


@dataclass
class Counts:
    """Requests and bytes one process sent to the store (``sent``: keys and
    values; ``received``: values), by kind of request."""

    requests: dict[str, int] = field(default_factory=dict)
    sent: int = 0
    received: int = 0

    @property
    def total(self) -> int:
        return sum(self.requests.values())

    def add(self, kind: str, sent: int = 0, received: int = 0):
        self.requests[kind] = self.requests.get(kind, 0) + 1
        self.sent += sent
        self.received += received

    def as_dict(self) -> dict:
        return {"requests": dict(self.requests), "total": self.total, "sent": self.sent, "received": self.received}


class CountingStore:
    """A store that counts what goes through it (one per process)."""

    def __init__(self, store: KeyValueStore):
        self.store = store
        self.counts = Counts()
        self._lock = threading.Lock()

    def _count(self, kind, sent=0, received=0):
        with self._lock:
            self.counts.add(kind, sent, received)

    def set(self, key, value):
        self._count("set", len(key) + len(value))
        self.store.set(key, value)

    def put(self, key, value):
        self._count("put", len(key) + len(value))
        self.store.put(key, value)

    def try_get(self, key):
        value = self.store.try_get(key)
        self._count("try_get", len(key), len(value or b""))
        return value

    def get(self, key, timeout):
        try:
            value = self.store.get(key, timeout)
        except StoreTimeout:
            self._count("get", len(key))
            raise
        self._count("get", len(key), len(value))
        return value

    def dir_get(self, prefix):
        items = self.store.dir_get(prefix)
        self._count("dir_get", len(prefix), sum(len(k) + len(v) for k, v in items))
        return items

    def delete(self, prefix):
        self._count("delete", len(prefix))
        self.store.delete(prefix)

    def barrier(self, name, timeout):
        self._count("barrier", len(name))
        self.store.barrier(name, timeout)

    def snapshot(self) -> Counts:
        with self._lock:
            return Counts(dict(self.counts.requests), self.counts.sent, self.counts.received)


_OK, _FAILED = b"\x00", b"\x01"


class Group:
    """The processes of a run, agreeing in rounds through process 0.

    Every process must make the same sequence of calls on groups of the
    same ``name``; rounds are numbered per name in each process, so two
    groups of different names (a checkpoint's and a direct save's) do not
    cross.
    """

    # per store (one per process; a simulation has one per thread) and name
    _rounds: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
    _lock = threading.Lock()

    def __init__(self, store: KeyValueStore, rank: int, size: int, name: str, timeout: float = DEFAULT_TIMEOUT):
        self.store, self.rank, self.size, self.name, self.timeout = store, rank, size, name, timeout

    def _next_round(self) -> int:
        with self._lock:
            counters = self._rounds.setdefault(self.store, {})
            return next(counters.setdefault(self.name, itertools.count()))

    def round(self, message: bytes, decide: Callable[[list[bytes]], bytes] | None, *, what: str, writing: int = 0):
        """Sends ``message`` to process 0; there ``decide(messages)`` (rank
        order) gives the answer every process returns. If ``decide`` raises
        on process 0 it re-raises there and the others raise
        DistributedSaveError with its message. ``what``: the step, for
        errors ("writing blocks"). ``writing``: bytes the processes write
        before they all arrive: the wait for the others (the group's
        timeout) allows for them at the slowest rate we allow
        (:func:`write_timeout`)."""
        timeout = write_timeout(self.timeout, writing) if writing else self.timeout
        try:
            return self._round(message, decide, what, timeout)
        except (NkserdeError, _DecideFailed) as exc:
            raise exc.error if isinstance(exc, _DecideFailed) else exc from None
        except Exception as exc:  # the store's own failure: process 0, which serves it, may be gone
            raise DistributedSaveError(
                f"the coordination service failed while {what} (process 0 serves it: did it die?): "
                f"{type(exc).__name__}: {str(exc)[:500]}"
            ) from exc

    def _round(self, message, decide, what, timeout):
        number = self._next_round()
        key = f"nkserde/{self.name}/{number}"
        self.store.set(f"{key}/in/{self.rank:07d}", bytes(message))
        try:
            self.store.barrier(f"{key}/arrived", timeout)
        except StoreTimeout:
            raise self._lost(key, what, timeout) from None
        if self.rank != 0:
            try:
                answer = self.store.get(f"{key}/out", timeout)
            except StoreTimeout:
                raise PeerLostError(
                    f"process 0 did not answer within {timeout:.0f} s while {what}: it died "
                    "(killed, out of memory) or is stuck",
                    missing=[0],
                ) from None
            if answer[:1] == _FAILED:
                kind, _, text = answer[1:].decode(errors="replace").partition("\n")
                raise _RAISED_AS.get(kind, DistributedSaveError)(text)
            return answer[1:]
        if number:  # every process passed this barrier: the last answer is read
            self.store.delete(f"nkserde/{self.name}/{number - 1}")
        messages = [value for _, value in sorted(self.store.dir_get(f"{key}/in"))]
        try:
            answer = decide(messages)
        except Exception as exc:  # noqa: BLE001  (sent to every process, which raises it: none waits for ever)
            failure = f"{type(exc).__name__}\n{_error_text(exc)}"
            self.store.set(f"{key}/out", _FAILED + failure.encode()[:8000])
            raise _DecideFailed(exc) from None
        self.store.set(f"{key}/out", _OK + answer)
        return answer

    def _lost(self, key, what, timeout) -> PeerLostError:
        try:
            arrived = {int(k.rsplit("/", 1)[1]) for k, _ in self.store.dir_get(f"{key}/in")}
        except Exception:  # noqa: BLE001  (a store gone raises its own errors, JAX's or the test's: say what is known)
            arrived = set()
        missing = [r for r in range(self.size) if r not in arrived] if arrived else []
        who = f"process{'es' if len(missing) > 1 else ''} {_ranks(missing)}" if missing else "a process"
        return PeerLostError(
            f"{who} did not reach '{what}' within {timeout:.0f} s: it died (killed, out of memory) or is "
            "stuck; the checkpoints on disk are intact",
            missing=missing,
        )


class _DecideFailed(Exception):
    """Carries the exception ``decide`` raised past the store's error handling."""

    def __init__(self, error: BaseException):
        super().__init__(str(error))
        self.error = error


# an error process 0 decided is raised as the same type on the others
_RAISED_AS = {"ProcessMismatchError": ProcessMismatchError}


def _error_text(exc) -> str:
    # an NkserdeError's message already says what failed and where
    return str(exc) if isinstance(exc, NkserdeError) else f"{type(exc).__name__}: {exc}"


def _ranks(ranks) -> str:
    shown = ", ".join(map(str, ranks[:8]))
    return shown + (f" and {len(ranks) - 8} more" if len(ranks) > 8 else "")


class StopFlag:
    """A stop requested on some processes (a signal), taken by all of them
    at the start of the same step.

    ``check(completed, requested)`` is called by every process at the
    start of each step, ``completed`` steps in. A process that was asked to
    stop sets the flag to ``completed + slack`` (the first set wins; one
    blocking request, once); the others read it with one non-blocking
    request per step. With ``background=True`` (a run) that read is made
    by a thread while the step goes on and its answer is taken at the next
    step's start: the run's thread does not wait for the coordinator, and
    ``slack`` is 2. Without it (simulations) the read is made in ``check``
    and ``slack`` is 1.

    Why the same step: a NetKet step is collective (its statistics reduce
    over every process), so no process can finish step ``c`` before every
    other has started it. The process that sets ``c + slack`` does so
    before it starts step ``c``. Any other process reads at the start of
    step ``c + 1`` at the latest after that set (it has finished step
    ``c``), and has the answer at the start of that step (synchronous) or
    of the next one (background): no later than the step the flag names.
    A process past that step would mean a step without a collective: it
    raises instead of stopping apart.
    """

    def __init__(self, store: KeyValueStore, key: str, *, background: bool = True):
        self.store, self.key, self.background = store, key, background
        self.slack = 2 if background else 1
        self.target: tuple[int, int] | None = None  # (step, reason)
        self._reading = None  # the background read in flight (a Future)
        self._executor = None

    def check(self, completed: int, requested: int | None) -> int | None:
        """The reason (a non-zero int, e.g. a signal number) if every process
        stops now, at ``completed``; else None."""
        if self.target is None:
            if requested:
                try:
                    self.store.set(self.key, f"{completed + self.slack} {int(requested)}".encode())
                    self.target = (completed + self.slack, int(requested))
                except KeyExists:  # another process asked first: its step
                    self.target = self._parse(self.store.try_get(self.key))
            else:
                self._read()
        if self.target is None:
            return None
        step, reason = self.target
        if completed > step:
            raise NkserdeError(
                f"a stop was requested for step {step} and this process is at step {completed}: the "
                "processes are not in step (a driver step without a collective?)"
            )
        return reason if completed == step else None

    def _read(self):
        if not self.background:
            value = self.store.try_get(self.key)
        else:
            value = None
            if self._reading is not None:  # the read started at the previous step's start
                value, self._reading = self._reading.result(), None
            if value is None:
                if self._executor is None:
                    from concurrent.futures import ThreadPoolExecutor

                    self._executor = ThreadPoolExecutor(1, thread_name_prefix="nkserde-stop-flag")
                self._reading = self._executor.submit(self.store.try_get, self.key)
        if value is not None:
            self.target = self._parse(value)

    def close(self):
        """Waits for a read in flight and stops the thread."""
        if self._executor is not None:
            self._executor.shutdown(wait=True)
            self._executor, self._reading = None, None

    def _parse(self, value: bytes) -> tuple[int, int]:
        try:
            step, reason = value.split()
            return int(step), int(reason)
        except (AttributeError, ValueError):
            raise NkserdeError(f"{self.key}: a malformed stop flag {value!r:.60} in the coordination store") from None


def write_timeout(timeout: float, nbytes: int) -> float:
    """A wait that includes writing ``nbytes``: ``timeout`` plus the time
    the slowest file system we allow for takes to write them."""
    return timeout + nbytes / SLOWEST_WRITE_RATE
