"""Each process of a multi-process run listens for one other, from a thread
of its own, and says when that one has gone silent.

A process whose node lost power, rebooted or dropped off the network says
nothing more, and the others wait for it in NetKet's collectives. There
the run's thread runs no Python, but the others' do: JAX releases the
interpreter while it waits, so this thread goes on ticking.

    watch = PeerWatch(store, "checkpoint:peers:1a2b", index, count, timeout, on_silent).start()
    ...                 # the run; on_silent(peer, seconds) may be called once, from the watch's thread
    watch.close()       # the run ended through Python: whoever listens for this process stops

Process ``i`` puts a counter at ``<name>/<i>`` every ``tick`` seconds and
reads the key of process ``(i + 1) % count``: 2 requests per process and
tick whatever the number of processes (at 1024 processes and the default
60 s timeout, a tick of 10 s: about 200 requests a second at the
coordinator, which serves JAX's own heartbeats beside them). A process
that ends its run through Python puts ``end`` there, and is no longer
listened for. A neighbour whose counter has not changed for ``timeout``
seconds plus two ticks is silent (the two ticks leave a save's own
PeerLostError, raised after ``timeout``, to come first). The silence is
counted in this process's own ticks: a gap in them (the process was
stopped, as a suspended job's processes all are, or starved) starts it
again. A store that fails to answer is process 0's silence: its
coordination service is gone. A store that hangs is not seen.
"""

from __future__ import annotations

import atexit
import threading
import time
from typing import Callable

from .coordination import KeyValueStore

END = b"end"
TICKS_PER_TIMEOUT = 6
LONGEST_TICK = 10.0  # seconds: what 1024 processes ask of the coordinator stays small
CLOSE_WAIT = 5.0  # seconds the run's end waits for a tick's request in flight


def tick_of(timeout: float) -> float:
    """Seconds between two ticks of a watch whose timeout is ``timeout``."""
    return min(LONGEST_TICK, timeout / TICKS_PER_TIMEOUT)


class Silence:
    """How long one neighbour has said nothing, from what this process saw
    at its ticks (times: seconds of a monotonic clock)."""

    def __init__(self, now: float, tick: float, timeout: float):
        self.tick, self.timeout = tick, timeout
        self.heard = self.ticked = now
        self.value: bytes | None = None

    def observe(self, now: float, value: bytes | None) -> float | None:
        """This process ticks at ``now`` and reads the neighbour's key,
        ``value`` (None: unset or unreadable). Returns the seconds of the
        neighbour's silence once they pass the timeout and two ticks, else
        None."""
        if now - self.ticked > 2 * self.tick:  # this process was not ticking either
            self.heard = now
        self.ticked = now
        if value is not None and value != self.value:
            self.value, self.heard = value, now
        silent = now - self.heard
        return silent if silent > self.timeout + 2 * self.tick else None


class PeerWatch:
    """One process's watch of its neighbour (see the module's docstring)."""

    def __init__(self, store: KeyValueStore, name: str, index: int, count: int, timeout: float, on_silent):
        self.store = store
        self.own = f"{name}/{index}"
        self.peer = (index + 1) % count
        self.peer_key = f"{name}/{self.peer}"
        self.tick = tick_of(timeout)
        self.on_silent: Callable[[int, float], None] = on_silent
        self._silence = Silence(time.monotonic(), self.tick, timeout)
        self._ticks = 0
        self._listening = True
        self._closed = threading.Event()
        self._lock = threading.Lock()  # a tick's put and the closing one do not cross
        self._thread = threading.Thread(target=self._run, name=f"nkserde peer watch {index}", daemon=True)

    def start(self) -> PeerWatch:
        """Starts the watch's thread; :meth:`close` ends it (at the
        interpreter's exit at the latest, before JAX's distributed
        runtime shuts down). Returns the watch."""
        atexit.register(self.close)
        self._thread.start()
        return self

    def step(self, now: float) -> tuple[int, float] | None:
        """One tick at ``now``: this process's counter put, the neighbour's
        key read while it is listened for. Returns ``(peer, seconds)`` the
        first time a process is silent: the neighbour, or process 0 if the
        store failed."""
        peer = self.peer
        try:
            with self._lock:
                if self._closed.is_set():
                    return None
                self._ticks += 1
                self.store.put(self.own, b"%d" % self._ticks)
            value = self.store.try_get(self.peer_key) if self._listening else None
        except Exception:  # noqa: BLE001  (any failure of the service: nobody is heard)
            value, peer = None, 0
        if not self._listening:
            return None
        if value == END:  # its run ended through Python: nothing to judge
            self._listening = False
            return None
        silent = self._silence.observe(now, value)
        if silent is None:
            return None
        self._listening = False  # once: this process goes on ticking for its own listener
        return peer, silent

    def _run(self) -> None:
        while not self._closed.wait(self.tick):
            silent = self.step(time.monotonic())
            if silent is not None:
                self.on_silent(*silent)

    def close(self) -> None:
        """This process's run ended through Python: ``end`` is put for its
        listener, and the thread ends."""
        atexit.unregister(self.close)
        if self._lock.acquire(timeout=CLOSE_WAIT):
            try:
                if not self._closed.is_set():
                    self._closed.set()
                    self.store.put(self.own, END)
            except Exception:  # noqa: BLE001  (the service is gone: nobody listens any more)
                pass
            finally:
                self._lock.release()
        self._closed.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(CLOSE_WAIT)
