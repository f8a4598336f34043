"""How long this process was stopped (SIGSTOP or SIGTSTP, then SIGCONT:
``scontrol suspend``/``resume``, gang scheduling, ``PreemptMode=SUSPEND``,
Ctrl-Z and ``fg``), for the walltime guard, whose clock
(``time.monotonic``) runs on while the process is stopped. Knows signals
and threads only (no SLURM, no NetKet).

    stops = StoppedTime().start()      # main thread: a SIGCONT handler, a ticking thread
    seen = stops.take()                # since the last take: SIGCONTs, seconds stopped, a gap awaiting its SIGCONT
    stops.close()                      # the handler put back, the thread ended

SIGSTOP cannot be caught, SIGCONT can: a SIGCONT says *that* the process
was stopped (Python runs its handler in the main thread before its next
bytecode, so before the run's next step start). How long: every thread
stops with the process, so a thread that notes the monotonic clock every
``tick`` seconds finds, on resume, a gap of the stopped time plus at most
a tick. A gap counts only when a SIGCONT came with it: a thread starved
of the CPU (or the GIL) for a while is not a stop. Stops shorter than
``tick + SLACK`` are seen (``continued``) but not measured (0 s).

The gap and the SIGCONT are not seen in a fixed order: on a busy node the
run's main thread may end the step it was stopped in, and look, before the
handler has run (a stop taken for a step would make the guard keep time
for steps that long). So a gap without its SIGCONT is held for ``CONFIRM``
seconds, reported as ``awaiting`` (the interval is no measure), and
counted when the SIGCONT comes; after that it was a starved thread, and is
dropped.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable
from typing import NamedTuple

# a gap longer than the tick by this much is a stop, not a late wake-up
SLACK = 1.0
TICK = 1.0
# how long a gap waits for its SIGCONT (seconds of the clock): the handler
# runs before the main thread's next bytecode, so within a step of the resume
CONFIRM = 30.0


class StopsSeen(NamedTuple):
    """What :meth:`StoppedTime.take` saw since the last take."""

    continued: int  # SIGCONTs received
    seconds: float  # how long the process was stopped before them (0.0 without one)
    awaiting: bool  # a gap no SIGCONT came with yet: the interval is no measure


class StoppedTime:
    """Counts SIGCONTs and measures the stops they end. ``clock``: the
    monotonic clock whose gaps are measured (seconds)."""

    def __init__(self, *, tick: float = TICK, clock: Callable[[], float] = time.monotonic):
        self.tick = float(tick)
        self.clock = clock
        self._lock = threading.Lock()
        # SIGCONTs received, and seen by take(): written by the main thread
        # alone (the handler runs there), so without the lock, which the
        # handler could find held by the code it interrupted
        self._sigconts = 0
        self._seen = 0
        self._gaps = 0.0  # stopped seconds seen by the thread since the last take()
        self._gap_seen = None  # the clock when the first of those gaps was seen
        self._last_tick = 0.0
        self._installed = False
        self._previous = None  # the SIGCONT handler start() replaced (None: not Python's)
        self._done: threading.Event | None = None
        self._thread: threading.Thread | None = None

    @property
    def watching(self) -> bool:
        """Whether SIGCONT is caught (only the main thread can install it:
        elsewhere no stop is seen, and take() says (0, 0.0))."""
        return self._installed

    def start(self) -> StoppedTime:
        if threading.current_thread() is not threading.main_thread():
            return self
        self._sigconts = self._seen = 0
        self._gaps, self._gap_seen, self._last_tick = 0.0, None, self.clock()
        self._previous = signal.getsignal(signal.SIGCONT)
        signal.signal(signal.SIGCONT, self._on_sigcont)
        self._installed = True
        self._done = threading.Event()
        self._thread = threading.Thread(
            target=self._ticks, args=(self._done,), name="nkserde-stopped-time", daemon=True
        )
        self._thread.start()
        return self

    @property
    def pending(self) -> bool:
        """Whether a SIGCONT came, or a gap was seen, since the last take()."""
        self._note(self.clock())
        return self._sigconts != self._seen or self._gaps > 0.0

    def take(self) -> StopsSeen:
        """The SIGCONTs received since the last call, how long the process
        was stopped before them (0.0 for stops shorter than a tick and the
        slack), and whether a gap awaits its SIGCONT (held for the next
        take, dropped once ``CONFIRM`` seconds passed without one)."""
        now = self.clock()
        self._note(now)  # the thread may not have run since the resume
        sigconts = self._sigconts
        continued, self._seen = sigconts - self._seen, sigconts
        with self._lock:
            gaps = self._gaps
            awaiting = not continued and gaps > 0.0 and now - self._gap_seen < CONFIRM
            if not awaiting:
                self._gaps, self._gap_seen = 0.0, None
        return StopsSeen(continued, gaps if continued else 0.0, awaiting)

    def close(self) -> None:
        if self._done is not None:
            self._done.set()
            self._thread.join()
            self._done = self._thread = None
        if self._installed and threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGCONT, self._previous if self._previous is not None else signal.SIG_DFL)
            self._installed, self._previous = False, None

    def _on_sigcont(self, signum, frame):
        self._sigconts += 1
        if callable(self._previous):
            self._previous(signum, frame)

    def _ticks(self, done: threading.Event) -> None:
        while not done.wait(self.tick):
            self._note(self.clock())

    def _note(self, now: float) -> None:
        with self._lock:
            gap = now - self._last_tick
            if gap > self.tick + SLACK:
                self._gaps += gap - self.tick
                self._gap_seen = now if self._gap_seen is None else self._gap_seen
            self._last_tick = max(now, self._last_tick)
