"""When to stop a run before its job's end: a pure policy on measured
times (no SLURM, no NetKet, no clock of its own).

    guard = WalltimeGuard(now + time_left, steps, lag_steps=0)  # steps: the run's StepTimes
    guard.shift(seconds)             # the process was stopped: the job ends that much later
    guard.saved(seconds)             # after every checkpoint written (in_background=True: from its snapshot)
    guard.due(now)                   # True: stop now, with a checkpoint

A run decides at the start of a step whether to do it. It may if, after
it, there is still time for the checkpoint that ends the run:

    time left  >=  (1 + lag_steps) * step  +  save  +  in flight  +  margin

``step`` is the longest of the recent steps (``StepTimes.longest``: the
intervals between step starts, which include any checkpoint written
meanwhile; the run's first step, which compiles, counts only until
another one is measured), ``save`` the longest checkpoint measured
(before the first one: as long as a step), ``in flight`` the longest
background write measured (the run's last checkpoint waits for one still
in flight), all with a factor for a node that gets busier. ``lag_steps``: steps a stop takes to reach every
process of a multi-process run (the stop flag's slack; 0 for one
process). ``margin``: the requeue and the process exit.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..step_times import StepTimes

# a busy shared node may slow the next step and save down by this much
SLOWDOWN = 1.25
DEFAULT_MARGIN = 10.0


class WalltimeGuard:
    """Says when a run must stop to checkpoint before ``deadline`` (a time
    on the caller's monotonic clock), from the run's ``steps`` (its
    StepTimes, fed by the run) and the checkpoints it is told of."""

    def __init__(self, deadline: float, steps: StepTimes, *, lag_steps: int = 0, margin: float = DEFAULT_MARGIN):
        self.deadline = float(deadline)
        self.steps = steps
        self.lag_steps = int(lag_steps)
        self.margin = float(margin)
        self._longest_save: float | None = None  # a synchronous checkpoint, the run's last is one
        self._longest_background = 0.0  # a background write, from its snapshot to its file

    def saved(self, seconds: float, in_background: bool = False) -> None:
        if in_background:
            self._longest_background = max(seconds, self._longest_background)
        else:
            self._longest_save = max(seconds, self._longest_save or 0.0)

    @property
    def step(self) -> float | None:
        """The longest recent step (the first, which compiles, until there
        is another), None before one completed."""
        return self.steps.longest

    def reserve(self) -> float | None:
        """Seconds the run keeps for its last step and checkpoint (None:
        nothing measured yet)."""
        step = self.step
        if step is None:
            return None
        # the last checkpoint, synchronous: as long as one measured, else
        # as one written in the background, else as a step
        save = self._longest_save if self._longest_save is not None else self._longest_background or step
        return SLOWDOWN * ((1 + self.lag_steps) * step + save + self._longest_background) + self.margin

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
