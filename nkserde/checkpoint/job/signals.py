"""Signals during a checkpointed run: a context that installs handlers and
puts the previous ones back. Knows signals only (no NetKet, no files).

    catcher = SignalCatcher((signal.SIGTERM,), defer_sigint=True, busy=lambda: updating)
    with catcher:
        ...  # catcher.received: the last caught signal number (or None)
             # catcher.interrupt_pending: Ctrl-C arrived while busy()
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable


class SignalCatcher:
    """Records ``signals`` instead of dying of them (the previous handler, if
    it is a function, still runs); the run decides when to stop.

    ``defer_sigint``: Ctrl-C while ``busy()`` (a step that has begun
    changing the driver, until it ends; a checkpoint being written) sets
    ``interrupt_pending`` instead of raising, so the run can finish the step
    and raise it then; a second Ctrl-C, or one when not busy, raises
    KeyboardInterrupt at once. ``on_defer(...)`` is called at the first. Installed only where Python's default
    SIGINT handler is in place and SIGINT is not among ``signals`` (a
    handler of the user's, or of another tool, is left alone).

    Handlers can only be installed from the main thread; elsewhere
    :meth:`install` does nothing (signals then reach nobody's handler here)."""

    def __init__(
        self,
        signals=(),
        *,
        defer_sigint: bool = False,
        busy: Callable[[], bool] = lambda: False,
        on_defer: Callable[[], None] = lambda: None,
    ):
        self.signals = tuple(signals)
        self.defer_sigint = defer_sigint
        self.busy = busy
        self.on_defer = on_defer
        self.received: int | None = None
        self.interrupt_pending = False
        self._previous: dict = {}

    @property
    def installed(self) -> bool:
        return bool(self._previous)

    def install(self) -> SignalCatcher:
        self.received, self.interrupt_pending = None, False
        if threading.current_thread() is not threading.main_thread():
            return self

        def record(signum, frame):
            self.received = signum
            previous = self._previous.get(signum)
            if callable(previous):
                previous(signum, frame)

        for signum in self.signals:
            self._previous[signum] = signal.getsignal(signum)
            signal.signal(signum, record)

        previous_sigint = signal.getsignal(signal.SIGINT)
        if not self.defer_sigint or signal.SIGINT in self.signals or previous_sigint is not signal.default_int_handler:
            return self

        def on_sigint(signum, frame):
            if self.interrupt_pending or not self.busy():
                raise KeyboardInterrupt
            self.interrupt_pending = True
            self.on_defer()

        self._previous[signal.SIGINT] = previous_sigint
        signal.signal(signal.SIGINT, on_sigint)
        return self

    def restore(self) -> None:
        """Puts back the handlers :meth:`install` replaced and forgets any
        signal received."""
        if threading.current_thread() is threading.main_thread():
            for signum, previous in self._previous.items():
                signal.signal(signum, previous if previous is not None else signal.SIG_DFL)
        self._previous = {}
        self.received = None

    def __enter__(self) -> SignalCatcher:
        return self.install()

    def __exit__(self, *exc) -> None:
        self.restore()
