"""How long one run's steps take, measured once and read by the two
policies that need it: the save schedule (a typical step: how many steps a
time interval holds) and the walltime guard (the longest recent step: what
the last one may take). A pure record of times on the caller's monotonic
clock (no clock of its own, no NetKet).

    steps = StepTimes()
    steps.started(now)                   # at the start of every step
    steps.started(now, measured=False)   # ... after an interval the process was stopped in
    steps.typical                        # the median of the recent steps
    steps.longest                        # the longest of the recent steps

A step is the interval between two step starts: it includes any
checkpoint written meanwhile. The run's first step compiles: the typical
step counts it among the others, the longest only while it is the only
one measured. An interval the process was stopped in (SIGSTOP, a SLURM
suspension) is no step's measure.
"""

from __future__ import annotations

from collections import deque

# steps the typical step is the median of
TYPICAL_OF = 16
# steps the longest is taken from
LONGEST_OF = 8


class StepTimes:
    """The measured steps of one run (seconds), newest last."""

    def __init__(self):
        self._recent: deque[tuple[float, bool]] = deque(maxlen=TYPICAL_OF)  # (seconds, the first step)
        self._first: float | None = None
        self._last_start: float | None = None

    def started(self, now: float, *, measured: bool = True) -> None:
        """A step starts at ``now``. ``measured=False``: the interval that
        ends here is no step's measure (the process was stopped in it)."""
        if self._last_start is not None and measured:
            seconds = max(0.0, now - self._last_start)
            first = self._first is None
            if first:
                self._first = seconds
            self._recent.append((seconds, first))
        self._last_start = now

    @property
    def typical(self) -> float | None:
        """The median of the last ``TYPICAL_OF`` steps, None before one completed."""
        if not self._recent:
            return None
        ordered = sorted(seconds for seconds, _ in self._recent)
        return ordered[len(ordered) // 2]

    @property
    def longest(self) -> float | None:
        """The longest of the last ``LONGEST_OF`` steps but the first (which
        compiles): the first while it is the only one; None before one
        completed."""
        others = [seconds for seconds, first in self._recent if not first][-LONGEST_OF:]
        return max(others) if others else self._first
