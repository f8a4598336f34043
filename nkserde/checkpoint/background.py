"""A write that runs in the background and that the caller can finish.

:class:`BackgroundWrite` advances a generator of write steps (see
``api.save_state_dict_steps``: each step is at most a few MiB of I/O) from a
thread at the lowest CPU priority, so on a quiet machine it uses only what
the run leaves idle. On a busy node that thread can starve; then
:meth:`BackgroundWrite.finish` lets the calling thread (the run's own, at its
normal priority) do the steps that are left. One step runs at a time, under
a lock, whichever thread runs it: a generator is a resumable frame any
thread may advance.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time


class BackgroundWrite:
    """Runs ``steps`` (a generator) to its end in a background thread once
    started; :meth:`finish` without :meth:`start` writes synchronously.

    Attributes after the end: ``error`` (the exception a step raised, or
    None), ``seconds``: from the creation of the write (the snapshot it
    writes) to its last step, ``background_cpu_seconds``: the CPU time the
    background thread spent in its steps (encoding, checksums, compression:
    what it can take from a run whose steps fill every core)."""

    def __init__(self, steps, name: str = "nkserde-write"):
        self._steps = steps
        self._lock = threading.Lock()
        self._done = threading.Event()
        self.error: Exception | None = None
        self.created_at = time.monotonic()
        self.seconds: float | None = None
        self.steps_in_background = 0
        self.steps_in_caller = 0
        self.background_cpu_seconds = 0.0
        self._caller_took_over = False
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> BackgroundWrite:
        self._thread.start()
        return self

    @property
    def started(self) -> bool:
        """Whether it ran in the background (else :meth:`finish` wrote it all)."""
        return self._thread.ident is not None

    @property
    def done(self) -> bool:
        return self._done.is_set()

    def finish(self) -> None:
        """Does whatever is left of the write in the calling thread, then
        returns once it is complete (``error`` says how it ended). A
        KeyboardInterrupt in a step ends the write (the file is not
        published) and propagates."""
        self._caller_took_over = True  # the background thread starts no new step
        while self._advance(in_caller=True):
            pass
        if self.started:
            self._thread.join()

    def _run(self):
        # Lowest priority for this thread only (Linux: per-thread nice): a
        # write should take what the run leaves, not slow its steps down.
        # Irreversible for an unprivileged process, hence finish().
        with contextlib.suppress(AttributeError, OSError):
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)
        while not self._caller_took_over and self._advance(in_caller=False):
            pass

    def _advance(self, in_caller: bool) -> bool:
        """Runs one step; False once the write has ended."""
        with self._lock:
            if self._done.is_set():
                return False
            try:
                self._next(in_caller)
            except StopIteration:
                self._end()
                return False
            except Exception as exc:  # noqa: BLE001  (reported through error)
                self.error = exc
                self._end()
                return False
            except BaseException:
                self._steps.close()
                self._end()
                raise
            if in_caller:
                self.steps_in_caller += 1
            else:
                self.steps_in_background += 1
            return True

    def _next(self, in_caller: bool):
        """One step; in the background thread, its CPU time counted (before
        an end is recorded, so a finished write's count is complete)."""
        if in_caller:
            return next(self._steps)
        started = time.thread_time()
        try:
            return next(self._steps)
        finally:
            self.background_cpu_seconds += time.thread_time() - started

    def _end(self):
        self.seconds = time.monotonic() - self.created_at
        self._done.set()
