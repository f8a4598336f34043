"""The checkpoint writer: at most one write in flight, its first error
raised at the next call, every pending write finished at interpreter exit.
Knows no files: it runs the steps of a write, which come from nkserde.api.

    writer = CheckpointWriter("ckpt")
    writer.submit(steps, asynchronous=True)   # returns at once
    ...
    writer.wait()                             # the write is on disk (or failed)
    writer.raise_error()                      # NkserdeError if it failed
"""

from __future__ import annotations

import atexit
import weakref

from ..errors import NkserdeError
from .background import BackgroundWrite

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
        write = BackgroundWrite(steps, name="nkserde-checkpoint")
        self._write, self._target = write, target
        if asynchronous:
            _PENDING.add(self)
            write.start()
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
