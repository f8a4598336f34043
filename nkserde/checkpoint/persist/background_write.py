"""Checkpoint writes in the background: at most one in flight, its first
error raised at the next call, every pending write finished at interpreter
exit. Knows no files: it runs the steps of a write, which come from
the save line (nkserde/saving/line.py).

    writer = CheckpointWriter("ckpt")
    writer.submit(steps, asynchronous=True)   # returns at once
    ...
    writer.wait()                             # the write is on disk (or failed)
    writer.raise_error()                      # NkserdeError if it failed
    writer.close()                            # its thread ends (the run's end)

:class:`BackgroundWrite` advances a generator of write steps (see
``nkserde.saving.line.save_steps``: each step is at most a few MiB of I/O) from a
:class:`WriteThread` at the lowest CPU priority, so on a quiet machine it
uses only what the run leaves idle. On a busy node that thread can starve;
then :meth:`BackgroundWrite.finish` lets the calling thread (the run's own,
at its normal priority) do the steps that are left. One step runs at a
time, under a lock, whichever thread runs it: a generator is a resumable
frame any thread may advance. :class:`CheckpointWriter` keeps one such
write in flight, and one thread for all of its writes.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import queue
import threading
import time
import weakref

from ...errors import NkserdeError


class BackgroundWrite:
    """Runs ``steps`` (a generator) to its end in a background thread once
    started; :meth:`finish` without :meth:`start` writes synchronously.

    Attributes after the end: ``error`` (the exception a step raised, or
    None), ``seconds``: from the creation of the write (the snapshot it
    writes) to its last step, ``background_cpu_seconds``: the CPU time the
    background thread spent in its steps (encoding, checksums, compression:
    what it can take from a run whose steps fill every core)."""

    def __init__(self, steps):
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
        self._started = False

    def start(self, thread: WriteThread) -> BackgroundWrite:
        """Hands the write to ``thread``, which runs it in the background."""
        self._started = True
        thread.run(self)
        return self

    @property
    def started(self) -> bool:
        """Whether it ran in the background (else :meth:`finish` wrote it all)."""
        return self._started

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

    def cancel(self) -> None:
        """Ends the write unfinished: no step runs after this returns (a step
        the background thread is running ends first) and the steps'
        generator is closed, which removes a write's temporary file."""
        self._caller_took_over = True
        with self._lock:
            if not self._done.is_set():
                self._steps.close()
                self._end()

    def run_in_background(self):
        """The background thread's part: steps until the end or until the
        caller takes over."""
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


class WriteThread:
    """A thread at the lowest CPU priority that runs the background writes
    handed to it, one after the other. It starts with the first write and
    then waits for the next one, so handing a write over costs the caller
    a queue's put, not a thread's start: a start waits for the new thread
    to be scheduled (1-4 ms on a TPU host, up to 100 ms on a 2-core CPU
    whose cores run the steps). :meth:`close` ends it after the writes
    handed over."""

    def __init__(self, name: str):
        self.name = name
        self._writes: queue.SimpleQueue = queue.SimpleQueue()
        self._thread: threading.Thread | None = None

    def run(self, write: BackgroundWrite) -> None:
        # not alive: closed, or this process was forked from the one it runs in
        if self._thread is None or not self._thread.is_alive():
            self._writes = queue.SimpleQueue()
            self._thread = threading.Thread(target=self._serve, args=(self._writes,), name=self.name, daemon=True)
            self._thread.start()
        self._writes.put(write)

    def close(self) -> None:
        """The thread ends once the writes handed to it have (a later
        :meth:`run` starts a new one)."""
        if self._thread is not None:
            self._writes.put(None)
            self._thread = None

    @staticmethod
    def _serve(writes: queue.SimpleQueue):
        # Lowest priority for this thread only (Linux: per-thread nice): a
        # write should take what the run leaves, not slow its steps down.
        # Irreversible for an unprivileged process, hence finish().
        with contextlib.suppress(AttributeError, OSError):
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)
        while True:
            write = writes.get()
            if write is None:
                return
            write.run_in_background()
            del write  # holds nothing of a write while it waits for the next


_PENDING: weakref.WeakSet = weakref.WeakSet()


@atexit.register
def _wait_for_pending_writes():
    for writer in list(_PENDING):
        writer.wait()


class CheckpointWriter:
    """Writes checkpoints one at a time for ``label`` (the directory, named in
    errors).

    ``lags``: one ``(steps the caller wrote itself, seconds from submit to
    the end)`` per background write, for benchmarks; ``background_cpu``:
    the CPU seconds of the last background write's own thread."""

    def __init__(self, label):
        self.label = label
        self.lags: list[tuple[int, float]] = []
        self.background_cpu = 0.0
        self._write: BackgroundWrite | None = None
        self._thread = WriteThread("nkserde-checkpoint")
        # a writer forgotten without close() lets its thread end too
        weakref.finalize(self, self._thread.close)
        self._target = None  # what the write in flight writes
        self._error: BaseException | None = None
        self._error_target = None
        # the target of a write a KeyboardInterrupt (or another
        # BaseException) cut short in the caller: not on disk
        self.aborted = None

    def submit(self, steps, *, asynchronous: bool, target=None) -> None:
        """Waits for the write in flight, then runs ``steps`` (a generator of
        bounded write steps) that write ``target`` (named in errors): in a
        background thread if ``asynchronous``, else here, raising its error."""
        self.wait()
        self.aborted = None
        write = BackgroundWrite(steps)
        self._write, self._target = write, target
        if asynchronous:
            _PENDING.add(self)
            write.start(self._thread)
        else:
            self.wait()
            self.raise_error()

    def wait(self) -> None:
        """Blocks until the write in flight (if any) has ended; whatever the
        background thread has not done yet, this thread does. An error is
        kept for :meth:`raise_error`."""
        write = self._write
        if write is None:
            return
        if not write.done:
            try:
                write.finish()
            except BaseException:
                self._write, self.aborted = None, self._target
                raise
        self._write = None
        if write.error is not None:
            self._error, self._error_target = write.error, self._target
        if write.started:
            self.lags.append((write.steps_in_caller, write.seconds))
            self.background_cpu = write.background_cpu_seconds

    def close(self) -> None:
        """Its thread ends after the write in flight (a later asynchronous
        :meth:`submit` starts another)."""
        self._thread.close()

    def abandon(self) -> None:
        """Cancels the write in flight (nothing of it is published) and
        forgets it; its target counts as ``aborted``."""
        write, self._write = self._write, None
        if write is not None:
            write.cancel()
            self.aborted = self._target

    @property
    def in_flight(self) -> BackgroundWrite | None:
        """The write submitted last, until :meth:`wait` takes it in (it may
        have ended: ``done``)."""
        return self._write

    @property
    def error(self) -> BaseException | None:
        """The error of a finished write not raised yet."""
        return self._error

    def raise_error(self) -> None:
        """Raises (once) NkserdeError for a write that failed."""
        if self._error is not None:
            exc, self._error = self._error, None
            what = f"writing {self._error_target}" if self._error_target is not None else "writing a checkpoint"
            raise NkserdeError(f"{self.label}: {what} failed: {exc}") from exc

    def discard_error(self) -> BaseException | None:
        """Forgets (and returns) the error of a failed write."""
        exc, self._error = self._error, None
        return exc
