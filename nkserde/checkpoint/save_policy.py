"""When a run checkpoints (besides its end, always): small frozen policies
the user can combine, and the measured times they decide from. Pure: no
clock of its own, no NetKet, no files.

    every = EverySteps(100) | EveryDuration("15min")   # whichever comes first
    schedule = SaveSchedule(every, steps)  # one run's measured times (steps: its StepTimes)
    schedule.saved(seconds)              # every checkpoint written (the run's own time in it)
    schedule.write_started(now, completed)        # a write goes on in the background ...
    schedule.write_ended(now, completed, seconds) # ... until now: priced at the steps' slowdown too
    schedule.due(completed, now)         # checkpoint now?

The policies (``Checkpoint(every=...)``; the plain forms map onto them,
see :func:`parse_every`):

* :class:`EverySteps` ``(n)``, ``every=n``: the steps that are multiples of n;
* :class:`EveryDuration` ``("15min")``, ``every="15min"`` (or a
  ``timedelta``): once that much wall-clock time has passed since the
  previous checkpoint (or the run's start);
* :class:`WithinBudget` ``(budget, mtbf)``, ``every="auto"``: as often as
  keeps checkpointing within ``budget`` of the run (default 1%). A
  checkpoint's price is what it held the run up, plus its background
  write's CPU time, or how much the steps it went on across were slower
  than the steps before it, if more (on a GPU or TPU its copies to the
  host slow them). The next checkpoint comes once the run has lasted long
  enough for the checkpoints so far and one more at the longest price:
  the interval is at least the longest price divided by the budget, and
  the second checkpoint comes after twice that (the first, which measures
  what one costs, comes after the first step: its price is paid for before
  the next). Given a mean time between failures ``mtbf``, the interval is
  at least Young's sqrt(2 x checkpoint x mtbf), which minimises the work
  checkpoints and failures cost together;
* :class:`SaveAny` ``(a, b, ...)``, ``a | b``: whenever any of them would.

A run of several processes must checkpoint at the same step on all of
them, and their clocks differ: a policy decided by the step count alone
(``in_steps``) needs no communication; for the others process 0 decides
at each checkpoint at which step the next one comes (:meth:`next_step`)
and the others take its decision (the Checkpoint passes it in the round
that ends the checkpoint's start); the steps in between need no
communication.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from .option_checks import format_duration, parse_duration
from .option_checks import bad_option, combined, whole
from .step_times import StepTimes

DEFAULT_BUDGET = 0.01


class SavePolicy:
    """When a run checkpoints: a frozen value the Checkpoint asks at every
    step boundary, with the run's measured times (a :class:`SaveSchedule`).
    Combine policies with ``|`` (:class:`SaveAny`)."""

    @property
    def in_steps(self) -> bool:
        """Whether the decision depends on the step count alone (then every
        process of a run takes it without a word)."""
        return False

    def interval(self, times: SaveSchedule) -> float | None:
        """Seconds between checkpoints, None if not a matter of time (or not
        known yet)."""
        return None

    def due(self, completed: int, now: float, times: SaveSchedule) -> bool:
        """Whether the run checkpoints at ``completed`` steps, at ``now``."""
        raise NotImplementedError

    def next_step(self, completed: int, times: SaveSchedule) -> int:
        """The step of the next checkpoint after the one taken at
        ``completed`` (process 0 decides it for every process): as many
        steps as the interval holds, at least one."""
        interval, step = self.interval(times), times.step
        if interval is None or step is None or step <= 0:
            return completed + 1
        return completed + max(1, math.ceil(interval / step))

    def __or__(self, other: SavePolicy) -> SaveAny:
        return SaveAny(self, other)


@dataclass(frozen=True)
class EverySteps(SavePolicy):
    """A checkpoint at every step that is a multiple of ``steps`` (>= 1)."""

    steps: int

    def __post_init__(self):
        whole("EverySteps(steps)", self.steps, least=1)

    @property
    def in_steps(self) -> bool:
        return True

    def due(self, completed: int, now: float, times: SaveSchedule) -> bool:
        return completed % self.steps == 0

    def next_step(self, completed: int, times: SaveSchedule) -> int:
        return (completed // self.steps + 1) * self.steps

    def __str__(self) -> str:
        return f"every {self.steps} steps" if self.steps != 1 else "every step"


class _Timed(SavePolicy):
    """A checkpoint once ``interval`` seconds passed since the previous one
    (or the run's start); with no interval known yet, after the first step."""

    def due(self, completed: int, now: float, times: SaveSchedule) -> bool:
        interval = self.interval(times)
        if interval is None:  # nothing measured: the first completed step measures a checkpoint
            return completed > 0
        return times.last_save is not None and now - times.last_save >= interval


@dataclass(frozen=True)
class EveryDuration(_Timed):
    """A checkpoint once ``seconds`` of wall-clock time passed since the
    previous one (or the run's start). ``seconds``: a number, ``"90s"``,
    ``"15min"``, ``"2h"`` or a ``timedelta``; held as seconds."""

    seconds: float

    def __post_init__(self):
        object.__setattr__(self, "seconds", parse_duration(self.seconds))

    def interval(self, times: SaveSchedule) -> float:
        return self.seconds

    def __str__(self) -> str:
        return f"every {format_duration(self.seconds)}"


@dataclass(frozen=True)
class WithinBudget(_Timed):
    """As often as keeps checkpointing within ``budget`` (a fraction of the
    run, 0 < budget < 1) of the run's time; given ``mtbf`` (the machine's
    mean time between failures, a duration), at least Young's interval
    for it."""

    budget: float = DEFAULT_BUDGET
    mtbf: float | None = None

    def __post_init__(self):
        if isinstance(self.budget, bool) or not isinstance(self.budget, (int, float)) or not 0 < self.budget < 1:
            raise bad_option("budget", "a fraction of the run between 0 and 1", self.budget)
        object.__setattr__(self, "budget", float(self.budget))
        if self.mtbf is not None:
            object.__setattr__(self, "mtbf", parse_duration(self.mtbf))

    def interval(self, times: SaveSchedule) -> float | None:
        if times.longest_save is None:
            return None
        seconds = times.longest_save / self.budget
        if times.run_start is not None and times.last_save is not None:
            # the run so far pays for every checkpoint taken and the next
            within = (times.spent + times.longest_save) / self.budget - (times.last_save - times.run_start)
            seconds = max(seconds, within)
        if self.mtbf:
            seconds = max(seconds, math.sqrt(2 * times.longest_save * self.mtbf))
        return seconds

    def __str__(self) -> str:
        extra = f", and Young's interval for a failure every {format_duration(self.mtbf)}" if self.mtbf else ""
        return f"as often as keeps checkpointing within {self.budget:.0%} of the run{extra}"


@dataclass(frozen=True, init=False)
class SaveAny(SavePolicy):
    """A checkpoint whenever any of ``policies`` would take one; the next
    step is the earliest any of them names."""

    policies: tuple[SavePolicy, ...] = field()

    def __init__(self, *policies: SavePolicy):
        expected = "save policies (EverySteps, EveryDuration, WithinBudget)"
        object.__setattr__(self, "policies", combined("SaveAny(...)", policies, SavePolicy, expected))

    @property
    def in_steps(self) -> bool:
        return all(p.in_steps for p in self.policies)

    def interval(self, times: SaveSchedule) -> float | None:
        known = [s for s in (p.interval(times) for p in self.policies) if s is not None]
        return min(known, default=None)

    def due(self, completed: int, now: float, times: SaveSchedule) -> bool:
        return any(p.due(completed, now, times) for p in self.policies)

    def next_step(self, completed: int, times: SaveSchedule) -> int:
        return min(p.next_step(completed, times) for p in self.policies)

    def __str__(self) -> str:
        return " or ".join(map(str, self.policies))


def parse_every(every, *, budget: float = DEFAULT_BUDGET, mtbf=None) -> SavePolicy:
    """The Checkpoint's ``every`` as a policy: a :class:`SavePolicy` as it
    is, an int >= 1 (:class:`EverySteps`), a duration (``"15min"``, a
    ``timedelta``: :class:`EveryDuration`) or ``"auto"``
    (:class:`WithinBudget` of ``budget`` and ``mtbf``, which are checked
    whatever ``every`` is and go with ``"auto"`` only); ValueError
    otherwise."""
    auto = WithinBudget(budget, mtbf)
    if isinstance(every, SavePolicy):
        if auto != WithinBudget():
            raise bad_option(
                "budget, mtbf", "left out when every is a policy (give them to WithinBudget)", (budget, mtbf)
            )
        return every
    expected = "a number of steps >= 1, a duration ('90s', '15min', '2h', a timedelta), 'auto' or a save policy"
    if isinstance(every, int) and not isinstance(every, bool):
        if every < 1:
            raise bad_option("every", expected, every)
        return EverySteps(every)
    if every == "auto":
        return auto
    try:
        return EveryDuration(every)
    except ValueError:
        raise bad_option("every", expected, every) from None


class SaveSchedule:
    """The checkpoints of one run: ``policy`` decides, from the run's
    ``steps`` (its StepTimes, fed by the run) and the checkpoints this
    object is told of (seconds on the caller's monotonic clock)."""

    def __init__(self, policy: SavePolicy, steps: StepTimes):
        self.policy = policy
        self.steps = steps
        self.run_start: float | None = None  # when the run started: what the budget is a fraction of
        self.last_save: float | None = None  # when the previous checkpoint was taken (or the run started)
        self.longest_save: float | None = None  # the longest checkpoint measured (seconds of the run)
        self.spent = 0.0  # the prices of the checkpoints so far (seconds of the run)
        self._last_price = 0.0  # of the last checkpoint saved: a background write's snapshot share
        # (when, steps, typical step, the snapshot's share) of a write in flight
        self._write_start: tuple[float, int, float | None, float] | None = None

    def started(self, now: float) -> None:
        """The run starts: a time interval counts from here."""
        self.run_start = self.last_save = now

    def saved(self, seconds: float) -> None:
        """A checkpoint cost the run ``seconds`` (one written in the
        background: its snapshot's share, until :meth:`write_ended`)."""
        self.longest_save = max(seconds, self.longest_save or 0.0)
        self.spent += seconds
        self._last_price = seconds

    def write_started(self, now: float, completed: int) -> None:
        """A checkpoint taken at ``now``, ``completed`` steps in, goes on
        being written in the background (:meth:`write_ended` prices it)."""
        self._write_start = (now, completed, self.step, self._last_price)

    def write_ended(self, now: float, completed: int, own_seconds: float) -> None:
        """The write started last ended, and is taken in at ``now`` with
        ``completed`` steps done: it cost the run ``own_seconds`` of its
        thread's time and CPU, or, if more, the time the steps since its
        start took beyond as many typical steps of before it."""
        if self._write_start is None:
            self.saved(own_seconds)
            return
        slower = self.slowdown(now, completed)
        share, self._write_start = self._write_start[3], None
        price = max(own_seconds, slower or 0.0)
        self.spent += price - share  # the snapshot's share is in already
        self.longest_save = max(price, self.longest_save or 0.0)

    def slowdown(self, now: float, completed: int) -> float | None:
        """How much longer than as many typical steps of before it the
        steps since the write in flight started took, up to ``now`` and
        ``completed`` steps; None with no write in flight or no step
        measured before it."""
        if self._write_start is None or self._write_start[2] is None:
            return None
        started, at, step, _ = self._write_start
        return now - started - (completed - at) * step

    def taken(self, now: float) -> None:
        """A checkpoint was taken now (its interval starts again)."""
        self.last_save = now

    @property
    def step(self) -> float | None:
        """A typical recent step (the median), None before one completed."""
        return self.steps.typical

    def interval(self) -> float | None:
        """Seconds between checkpoints (None for steps, or ``"auto"``
        before a checkpoint was measured)."""
        return self.policy.interval(self)

    def due(self, completed: int, now: float) -> bool:
        """Whether the run checkpoints at ``completed`` steps (one process)."""
        return self.policy.due(completed, now, self)

    def next_step(self, completed: int) -> int:
        """The step of the next checkpoint after the one taken at
        ``completed``, as process 0 decides it for every process."""
        return self.policy.next_step(completed, self)
