"""When to stop a run before its job's end: a pure policy on measured
times (no SLURM, no NetKet, no clock of its own).

    guard = WalltimeGuard(deadline=now + time_left, lag_steps=0)
    guard.step_started(now)          # at the start of every step
    guard.step_started(now, discard=True)  # ... after an interval the process was stopped in
    guard.shift(seconds)             # the process was stopped: the job ends that much later
    guard.saved(seconds)             # after every checkpoint written
    guard.due(now)                   # True: stop now, with a checkpoint

A run decides at the start of a step whether to do it. It may if, after
it, there is still time for the checkpoint that ends the run:

    time left  >=  (1 + lag_steps) * step  +  save  +  margin

``step`` is the longest of the recent steps (the intervals between step
starts, which include any checkpoint written meanwhile; the run's first
step, which compiles, counts only until another one is measured),
``save`` the longest checkpoint measured (before the first one: as long
as a step), both with a factor for a node that gets busier. ``lag_steps``: steps a
stop takes to reach every process of a multi-process run (the stop flag's
slack; 0 for one process). ``margin``: the requeue and the process exit.
"""

from __future__ import annotations

from collections import deque

# steps whose duration the estimate remembers (the longest counts)
RECENT_STEPS = 8
# a busy shared node may slow the next step and save down by this much
SLOWDOWN = 1.25
DEFAULT_MARGIN = 10.0


class WalltimeGuard:
    """Says when a run must stop to checkpoint before ``deadline`` (a time
    on the caller's monotonic clock)."""

    def __init__(self, deadline: float, *, lag_steps: int = 0, margin: float = DEFAULT_MARGIN):
        self.deadline = float(deadline)
        self.lag_steps = int(lag_steps)
        self.margin = float(margin)
        self._steps: deque[float] = deque(maxlen=RECENT_STEPS)
        self._first_step: float | None = None  # it compiles: a bound only while it is the only one
        self._last_start: float | None = None
        self._longest_save: float | None = None

    def step_started(self, now: float, *, discard: bool = False) -> None:
        """A step starts at ``now``. ``discard``: the interval that ends
        here is no step's measure (the process was stopped in it)."""
        if self._last_start is not None and not discard:
            seconds = max(0.0, now - self._last_start)
            if self._first_step is None:
                self._first_step = seconds
            else:
                self._steps.append(seconds)
        self._last_start = now

    def saved(self, seconds: float) -> None:
        self._longest_save = max(seconds, self._longest_save or 0.0)

    @property
    def step(self) -> float | None:
        """The longest recent step (the first, which compiles, until there
        is another), None before one completed."""
        return max(self._steps) if self._steps else self._first_step

    def reserve(self) -> float | None:
        """Seconds the run keeps for its last step and checkpoint (None:
        nothing measured yet)."""
        step = self.step
        if step is None:
            return None
        save = self._longest_save if self._longest_save is not None else step
        return SLOWDOWN * ((1 + self.lag_steps) * step + save) + self.margin

    def time_left(self, now: float) -> float:
        return self.deadline - now

    def due(self, now: float) -> bool:
        """Whether the run stops now. Never before a step was measured: a
        run that completed no step has nothing new to checkpoint."""
        reserve = self.reserve()
        return reserve is not None and self.time_left(now) < reserve

    def shift(self, seconds: float) -> None:
        """The process was stopped for ``seconds``, which the scheduler
        does not count (SLURM's suspend): the job's end moves by as much."""
        self.deadline += float(seconds)

    def extend(self, deadline: float) -> None:
        """The job's end moved (an administrator's ``scontrol update``)."""
        self.deadline = float(deadline)
