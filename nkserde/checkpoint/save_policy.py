"""When a run checkpoints: every N steps, every so much wall-clock time,
or as often as a budget of the run's time allows. A pure policy on
measured times (no clock of its own, no NetKet, no files).

    schedule = SaveSchedule(parse_every("15min"))
    schedule.step_started(now)           # every step start
    schedule.saved(seconds)              # every checkpoint written
    schedule.due(completed, now)         # checkpoint now?

``every`` (the Checkpoint's option):

* an int N: the steps that are multiples of N (as always);
* a duration, ``"90s"``, ``"15min"``, ``"2h"`` (or a ``timedelta``): once
  that much wall-clock time has passed since the previous checkpoint (or
  the run's start);
* ``"auto"``: as often as keeps checkpointing within ``budget`` of the run
  (default 1%): the interval is the longest checkpoint measured (what it
  held the run up, plus its background write's CPU time) divided by the
  budget, and, given a mean time between failures ``mtbf``, at least
  Young's interval sqrt(2 x checkpoint x mtbf), which minimises the work
  checkpoints and failures cost together. Before a checkpoint was measured,
  the first one comes after the first step (it measures what one costs).

A run of several processes must checkpoint at the same step on all of
them, and their clocks differ: there, process 0 decides at each
checkpoint at which step the next one comes (:meth:`next_step`) and the
others take its decision (the Checkpoint passes it in the round that ends
the checkpoint's start); the steps in between need no communication.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

from .durations import format_duration, parse_duration

DEFAULT_BUDGET = 0.01
# steps whose duration the estimate of a step remembers (the median counts)
RECENT_STEPS = 16


@dataclass(frozen=True)
class Every:
    """What ``every`` asks for: one of ``steps``, ``seconds`` or ``budget``."""

    steps: int | None = None
    seconds: float | None = None
    budget: float | None = None
    mtbf: float | None = None

    @property
    def in_steps(self) -> bool:
        return self.steps is not None

    def __str__(self) -> str:
        if self.steps is not None:
            return f"every {self.steps} steps" if self.steps != 1 else "every step"
        if self.seconds is not None:
            return f"every {format_duration(self.seconds)}"
        extra = f", and Young's interval for a failure every {format_duration(self.mtbf)}" if self.mtbf else ""
        return f"as often as keeps checkpointing within {self.budget:.0%} of the run{extra}"


def parse_every(every, *, budget: float = DEFAULT_BUDGET, mtbf=None) -> Every:
    """The Checkpoint's ``every``: an int >= 1 (steps), a duration
    (``"15min"``, a ``timedelta``) or ``"auto"``; ValueError otherwise."""
    if not 0 < budget < 1:
        raise ValueError(f"budget must be a fraction of the run between 0 and 1, got {budget!r}")
    mtbf_seconds = None if mtbf is None else parse_duration(mtbf)
    if isinstance(every, int) and not isinstance(every, bool):
        if every < 1:
            raise ValueError(f"every must be >= 1 (steps), a duration such as '15min', or 'auto', got {every!r}")
        return Every(steps=every)
    if every == "auto":
        return Every(budget=float(budget), mtbf=mtbf_seconds)
    try:
        return Every(seconds=parse_duration(every))
    except ValueError as exc:
        raise ValueError(f"every must be a number of steps, a duration or 'auto': {exc}") from None


class SaveSchedule:
    """The checkpoints of one run, decided from ``every`` and measured times
    (seconds on the caller's monotonic clock)."""

    def __init__(self, every: Every):
        self.every = every
        self._steps: deque[float] = deque(maxlen=RECENT_STEPS)
        self._last_start: float | None = None
        self._last_save: float | None = None  # when the previous checkpoint was taken (or the run started)
        self._longest_save: float | None = None

    def started(self, now: float) -> None:
        """The run starts: a time interval counts from here."""
        self._last_save = now

    def step_started(self, now: float) -> None:
        if self._last_start is not None:
            self._steps.append(max(0.0, now - self._last_start))
        self._last_start = now

    def saved(self, seconds: float) -> None:
        self._longest_save = max(seconds, self._longest_save or 0.0)

    def taken(self, now: float) -> None:
        """A checkpoint was taken now (its interval starts again)."""
        self._last_save = now

    @property
    def step(self) -> float | None:
        """A typical recent step (the median), None before one completed."""
        if not self._steps:
            return None
        ordered = sorted(self._steps)
        return ordered[len(ordered) // 2]

    def interval(self) -> float | None:
        """Seconds between checkpoints for a duration or ``"auto"`` (None
        for steps, or ``"auto"`` before a checkpoint was measured)."""
        every = self.every
        if every.seconds is not None:
            return every.seconds
        if every.budget is None or self._longest_save is None:
            return None
        seconds = self._longest_save / every.budget
        if every.mtbf:
            seconds = max(seconds, math.sqrt(2 * self._longest_save * every.mtbf))
        return seconds

    def due(self, completed: int, now: float) -> bool:
        """Whether the run checkpoints at ``completed`` steps (one process)."""
        if self.every.steps is not None:
            return completed % self.every.steps == 0
        interval = self.interval()
        if interval is None:  # "auto", nothing measured: the first completed step measures a checkpoint
            return completed > 0
        return self._last_save is not None and now - self._last_save >= interval

    def next_step(self, completed: int) -> int:
        """The step of the next checkpoint after the one taken at
        ``completed`` (process 0 decides it for every process): as many
        steps as the interval holds, at least one."""
        if self.every.steps is not None:
            return (completed // self.every.steps + 1) * self.every.steps
        interval, step = self.interval(), self.step
        if interval is None or step is None or step <= 0:
            return completed + 1
        return completed + max(1, math.ceil(interval / step))
